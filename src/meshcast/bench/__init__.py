"""``meshcast bench``: nccl-tests for CPUs, with torch.distributed's Gloo and MPI side by side.

Modules: :mod:`.collectives` (nccl-tests' counts and bus factors, the data
and its closed-form results), :mod:`.sweep` (the loop every library runs),
``meshcast_worker`` / ``gloo_worker`` / ``mpi_worker`` (one adapter per
library, each a ``python -m`` entry point), ``paired_worker`` (all of them in
one job: ``--paired``), :mod:`.peers` (launching them),
:mod:`.hosts` (``--hosts``: the same on emulated hosts, each library started
as its users start it across hosts),
:mod:`.report`, :mod:`.plot`, :mod:`.page` (text, charts, results page),
:mod:`.machine` (machine facts and memory copy bandwidth), :mod:`.cli`.
"""

from .collectives import ALL_OPS, COLLECTIVES
from .sweep import SweepSpec

__all__ = ["ALL_OPS", "COLLECTIVES", "SweepSpec"]
