"""Launcher detection: who started this process, and what rank it is.

Theory of operation
-------------------

Each launcher describes the job in its own environment variables
(reliability_anchors.md §1). :func:`detect_launch_env` reads every source it
knows, then picks one:

========== ===================================================================
layer      sources, in order of preference
========== ===================================================================
spawner    ``meshcast`` (``meshcast run``: RANK... + MESHCAST_RUN_ID),
           ``torchrun`` (RANK... + TORCHELASTIC_RUN_ID),
           ``manual`` (RANK / WORLD_SIZE set by hand or by ``meshcast.spawn``)
MPI        ``openmpi`` (OMPI_COMM_WORLD_*), ``cray-pals`` (PALS_*, PMI_SIZE),
           ``intelmpi`` (PMI_RANK/PMI_SIZE + I_MPI_*), ``mpich`` (PMI_RANK/PMI_SIZE)
scheduler  ``slurm`` (an ``srun`` step: SLURM_PROCID + SLURM_STEP_ID)
========== ===================================================================

Rule 1: the innermost launcher wins. A spawner layer process (torchrun,
``meshcast run``) is routinely started *by* srun or mpiexec, one per node;
the outer variables then describe the spawner, not the worker, so they are
ignored rather than compared.

Rule 2: sources of one layer must agree. Two MPI sources that are both
present (e.g. Cray PALS also sets PMI_RANK) describe the same process; if
their rank or world size differ, something is badly wrong and
``RendezvousError`` names both variables (DeepSpeed's rule).

Rule 3: Slurm is compared with the chosen MPI source only when their world
sizes match. ``srun`` with a PMI plugin (e.g. ``--mpi=cray_shasta``) sets
both for the same tasks; ``mpirun``/Hydra inside an allocation start their
own daemons through srun, and the ranks then inherit the *daemon's* SLURM_*
(world size = node count), which is not a conflict.

Variables that are set but malformed (``RANK=abc``, a rank outside
``[0, world_size)``) raise ``RendezvousError`` naming the variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .. import config
from ..errors import RendezvousError

LAUNCHERS = ("meshcast", "torchrun", "openmpi", "mpich", "intelmpi", "cray-pals", "slurm",
             "manual", "none")
#: Launchers whose processes are ranks of an MPI-style job (no MASTER_ADDR of their own).
MPI_LAUNCHERS = ("openmpi", "mpich", "intelmpi", "cray-pals", "slurm")

# Slurm gives these step ids to the batch script and the "extern" step; they
# are not srun steps, and their SLURM_PROCID=0 does not make a rank.
_NON_SRUN_STEP_IDS = {"batch", "extern", "interactive", "4294967294", "4294967295",
                      "4294967293"}


@dataclass(frozen=True)
class LaunchEnv:
    """What the launcher told this process about the job.

    Attributes:
        launcher: ``'meshcast'``, ``'torchrun'``, ``'openmpi'``, ``'mpich'``,
            ``'intelmpi'``, ``'cray-pals'``, ``'slurm'``, ``'manual'`` (RANK /
            WORLD_SIZE set by hand) or ``'none'`` (a lone process: rank 0 of 1).
        rank: global rank, ``None`` if unknown (only ``'manual'`` with RANK unset).
        world_size: number of ranks, ``None`` if unknown (only ``'manual'``).
        local_rank: rank among the processes on this node, ``None`` if unknown.
        local_world_size: number of processes on this node, ``None`` if unknown.
        node_rank: index of this node, ``None`` if the launcher does not say.
        master_addr: ``MASTER_ADDR``, ``None`` if unset.
        master_port: ``MASTER_PORT``, ``None`` if unset.
        run_id: the launcher's job id (MESHCAST_RUN_ID, TORCHELASTIC_RUN_ID,
            Slurm ``job.step``, PALS_APID, PMIX_NAMESPACE), ``None`` if unknown.
    """

    launcher: str
    rank: int | None
    world_size: int | None
    local_rank: int | None
    local_world_size: int | None
    node_rank: int | None
    master_addr: str | None
    master_port: int | None
    run_id: str | None

    @property
    def single_node(self) -> bool | None:
        """Whether every rank runs on this node (``None`` if that is unknown)."""
        if self.local_world_size is None or self.world_size is None:
            return None
        return self.local_world_size == self.world_size


@dataclass(frozen=True)
class _Source:
    """One launcher's reading, with the variable names used (for error messages)."""

    launcher: str
    layer: str
    rank: int | None
    rank_var: str
    world_size: int | None
    size_var: str
    local_rank: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None
    run_id: str | None = None


class _Reader:
    """Typed access to an environment mapping; errors name the variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def has(self, *names: str) -> bool:
        return all(self.environ.get(n, "") != "" for n in names)

    def str(self, name: str) -> str | None:
        value = self.environ.get(name, "")
        return value if value != "" else None

    def int(self, *names: str) -> int | None:
        """The first of ``names`` that is set, as a non-negative int."""
        for name in names:
            text = self.str(name)
            if text is None:
                continue
            try:
                value = int(text.strip())
            except ValueError:
                raise RendezvousError(f"environment variable {name}={text!r} is not an "
                                      "integer") from None
            if value < 0:
                raise RendezvousError(f"environment variable {name}={text!r} is negative")
            return value
        return None


def parse_tasks_per_node(text: str) -> list[int]:
    """Expand Slurm's compressed tasks-per-node list: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``.

    Args:
        text: the value of ``SLURM_STEP_TASKS_PER_NODE`` / ``SLURM_TASKS_PER_NODE``.

    Returns:
        Tasks on each node of the step, in node order.

    Raises:
        RendezvousError: ``text`` is not in Slurm's format.
    """
    counts: list[int] = []
    for part in text.strip().split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise RendezvousError(f"cannot parse Slurm tasks per node {text!r} "
                                  "(expected e.g. '2(x3),1')")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def _spawner_source(env: _Reader) -> _Source | None:
    if not env.has("RANK") and not env.has("WORLD_SIZE"):
        return None
    run_id = None
    if config.get("MESHCAST_RUN_ID"):
        launcher, run_id = "meshcast", config.get("MESHCAST_RUN_ID")
    elif env.has("TORCHELASTIC_RUN_ID") or env.has("TORCHELASTIC_RESTART_COUNT"):
        launcher, run_id = "torchrun", env.str("TORCHELASTIC_RUN_ID")
    else:
        launcher = "manual"
    return _Source(launcher, "spawner", env.int("RANK"), "RANK", env.int("WORLD_SIZE"),
                   "WORLD_SIZE", env.int("LOCAL_RANK"), env.int("LOCAL_WORLD_SIZE"),
                   env.int("GROUP_RANK", "NODE_RANK"), run_id)


def _mpi_sources(env: _Reader) -> list[_Source]:
    sources = []
    if env.has("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        sources.append(_Source(
            "openmpi", "mpi", env.int("OMPI_COMM_WORLD_RANK"), "OMPI_COMM_WORLD_RANK",
            env.int("OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE",
            env.int("OMPI_COMM_WORLD_LOCAL_RANK"), env.int("OMPI_COMM_WORLD_LOCAL_SIZE"),
            # OMPI_COMM_WORLD_NODE_RANK is a rank on the node, not a node index.
            None, env.str("PMIX_NAMESPACE") or env.str("OMPI_MCA_ess_base_jobid")))
    if env.has("PALS_RANKID", "PMI_SIZE"):
        sources.append(_Source(
            "cray-pals", "mpi", env.int("PALS_RANKID"), "PALS_RANKID",
            env.int("PMI_SIZE"), "PMI_SIZE",
            env.int("PALS_LOCAL_RANKID", "PMI_LOCAL_RANK"), env.int("PMI_LOCAL_SIZE"),
            env.int("PALS_NODEID"), env.str("PALS_APID")))
    if env.has("PMI_RANK", "PMI_SIZE"):
        intel = any(name.startswith("I_MPI_") for name in env.environ)
        sources.append(_Source(
            "intelmpi" if intel else "mpich", "mpi", env.int("PMI_RANK"), "PMI_RANK",
            env.int("PMI_SIZE"), "PMI_SIZE",
            env.int("MPI_LOCALRANKID", "PMI_LOCAL_RANK"),
            env.int("MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"), None, None))
    return sources


def _slurm_source(env: _Reader) -> _Source | None:
    step = env.str("SLURM_STEP_ID") or env.str("SLURM_STEPID")
    if step is None or step.strip().lower() in _NON_SRUN_STEP_IDS or not env.has("SLURM_PROCID"):
        return None
    size_var = "SLURM_STEP_NUM_TASKS" if env.has("SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS"
    node_rank = env.int("SLURM_NODEID")
    local_world_size = None
    per_node_var = next((v for v in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
                         if env.has(v)), None)
    if per_node_var is not None and node_rank is not None:
        counts = parse_tasks_per_node(env.str(per_node_var) or "")
        num_nodes = env.int("SLURM_STEP_NUM_NODES")
        if num_nodes is not None and num_nodes != len(counts):
            raise RendezvousError(f"{per_node_var}={env.str(per_node_var)!r} lists {len(counts)} "
                                  f"nodes but SLURM_STEP_NUM_NODES={num_nodes}")
        if node_rank >= len(counts):
            raise RendezvousError(f"SLURM_NODEID={node_rank} is outside {per_node_var}="
                                  f"{env.str(per_node_var)!r}")
        local_world_size = counts[node_rank]
    job = env.str("SLURM_JOB_ID") or env.str("SLURM_JOBID")
    return _Source("slurm", "scheduler", env.int("SLURM_PROCID"), "SLURM_PROCID",
                   env.int(size_var), size_var, env.int("SLURM_LOCALID"), local_world_size,
                   node_rank, f"{job}.{step}" if job else None)


def _conflict(a: _Source, b: _Source) -> RendezvousError | None:
    for field, var in (("rank", "rank_var"), ("world_size", "size_var")):
        x, y = getattr(a, field), getattr(b, field)
        if x is not None and y is not None and x != y:
            return RendezvousError(
                f"launchers disagree on the {field.replace('_', ' ')}: {getattr(a, var)}={x} "
                f"({a.launcher}) but {getattr(b, var)}={y} ({b.launcher}); unset the variables "
                "of the launcher that did not start this process")
    return None


def _validate(source: _Source) -> None:
    if source.world_size is not None and source.world_size < 1:
        raise RendezvousError(f"{source.size_var}={source.world_size} ({source.launcher}) "
                              "must be at least 1")
    if source.rank is not None and source.world_size is not None \
            and source.rank >= source.world_size:
        raise RendezvousError(f"{source.rank_var}={source.rank} is not below "
                              f"{source.size_var}={source.world_size} ({source.launcher})")
    if source.local_rank is not None and source.local_world_size is not None \
            and source.local_rank >= source.local_world_size:
        raise RendezvousError(f"local rank {source.local_rank} is not below the local world "
                              f"size {source.local_world_size} ({source.launcher})")


def detect_launch_env() -> LaunchEnv:
    """Work out which launcher started this process and what it said.

    Reads ``meshcast run`` / torchrun / hand-set variables (RANK, WORLD_SIZE,
    LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), Open
    MPI (OMPI_COMM_WORLD_*), MPICH Hydra and Intel MPI (PMI_RANK, PMI_SIZE,
    MPI_LOCALRANKID, MPI_LOCALNRANKS), Cray PALS (PALS_RANKID,
    PALS_LOCAL_RANKID, PALS_NODEID, PMI_SIZE, PMI_LOCAL_SIZE) and Slurm srun
    steps (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
    SLURM_STEP_NUM_NODES, SLURM_STEP_TASKS_PER_NODE). See the module
    docstring for how sources are chosen and cross-checked.

    Returns:
        A :class:`LaunchEnv`. With no launcher variables at all it describes
        a lone process: ``launcher='none'``, rank 0 of 1.

    Raises:
        RendezvousError: a variable is malformed, or two launchers that both
            describe this process disagree on its rank or world size (the
            message names both variables).

    Example::

        >>> # under `mpiexec -n 4 python job.py` (Open MPI), on rank 2
        >>> detect_launch_env()
        LaunchEnv(launcher='openmpi', rank=2, world_size=4, local_rank=2, ...)
    """
    env = _Reader(os.environ)
    spawner = _spawner_source(env)
    mpi = _mpi_sources(env)
    slurm = _slurm_source(env)

    if spawner is not None:
        chosen = spawner
    elif mpi:
        chosen = mpi[0]
        for other in mpi[1:]:
            error = _conflict(chosen, other)
            if error:
                raise error
        if slurm is not None and slurm.world_size == chosen.world_size:
            error = _conflict(chosen, slurm)
            if error:
                raise error
            # srun launched these ranks itself: it knows what the MPI source may not.
            chosen = _merge(chosen, slurm)
    elif slurm is not None:
        chosen = slurm
    else:
        chosen = _Source("none", "none", 0, "", 1, "", 0, 1, None, None)
    _validate(chosen)

    master_port = env.int("MASTER_PORT")
    if master_port is not None and not 0 < master_port < 65536:
        raise RendezvousError(f"environment variable MASTER_PORT={master_port} is not a port")
    return LaunchEnv(
        launcher=chosen.launcher,
        rank=chosen.rank,
        world_size=chosen.world_size,
        local_rank=chosen.local_rank,
        local_world_size=chosen.local_world_size,
        node_rank=chosen.node_rank,
        master_addr=env.str("MASTER_ADDR"),
        master_port=master_port,
        run_id=chosen.run_id,
    )


def _merge(primary: _Source, fallback: _Source) -> _Source:
    """``primary`` with its unknown local/node fields filled in from ``fallback``."""
    return _Source(
        primary.launcher, primary.layer, primary.rank, primary.rank_var, primary.world_size,
        primary.size_var,
        primary.local_rank if primary.local_rank is not None else fallback.local_rank,
        primary.local_world_size if primary.local_world_size is not None
        else fallback.local_world_size,
        primary.node_rank if primary.node_rank is not None else fallback.node_rank,
        primary.run_id or fallback.run_id)


def launch_env() -> LaunchEnv:
    """Alias of :func:`detect_launch_env`."""
    return detect_launch_env()


__all__ = ["LAUNCHERS", "LaunchEnv", "detect_launch_env", "launch_env", "parse_tasks_per_node"]
