"""The paths a call on one host can take, one module each; ``ProcessGroup._submit`` runs them.

Which path runs is decided by algorithms/_select.py alone, on every rank
alike (its rules read only the group and fields the fingerprint compares):
:func:`~meshcast.algorithms._select.fast_path` and its predicates for the
fast paths (registered schedules in ``algorithms/<collective>.py``, families
oneshot/cma/symmetric, which these modules run as programs: flattened once per
call shape, then run by the compiled interpreter or Python's executor), then
:func:`~meshcast.algorithms._select.select` for the schedules.
:class:`~meshcast.group.ProcessGroup` asks them and runs the pieces these
modules build through its one call protocol (publish, stage, expose,
enter, then one path):

* :mod:`.oneshot`: every rank's data through the arena's one-shot regions
  and one signal (``_select.oneshot``, ``oneshot_all_gather``,
  ``direct_bytes``, ``all_to_all_direct_limit``): the calls decided before
  the call run their registered ``oneshot`` schedules as programs (flattened
  once per call shape, algorithms/_program.py); also all_to_all's split
  header, which every path of all_to_all publishes.
* :mod:`.single_copy` (reported as "cma"): each rank reads (or writes)
  straight from the buffers its peers exposed, with process_vm_readv
  (``_select.single_copy``, ``all_reduce_single_copy``, ``all_to_all_single_copy``).
* :mod:`.symmetric`: buffers of a symmetric allocation
  (:mod:`meshcast.symmetric`), read and written in place in the peers'
  parts (``_select.SYMMETRIC_MIN_BYTES``, ``SYMMETRIC_ALL_REDUCE_MIN_BYTES``):
  the registered ``symmetric`` schedules as programs over every rank's part.
* :mod:`.schedule`: everything else, a registered algorithm of
  algorithms/ run by the executor (``_select.select``: explicit >
  ``MESHCAST_ALGO`` > ``TABLE``).

The tiny-call lane (:mod:`meshcast.lanes`) runs the one-shot and
single-copy protocols of these modules in the same bytes, with its work
cached per call shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..algorithms import _registry as registry
from ..algorithms._execute import probe
from ..algorithms._plan import Plan
from ..algorithms._program import Program, flatten

if TYPE_CHECKING:
    from .._fifo import CallFifo
    from ..algorithms._select import HostCaps
    from ..symmetric import SymmetricHeap
    from ..transport.arena import Arena
    from ..transport.shm import ShmTransport


class GroupView(Protocol):
    """What the paths and the tiny-call lane use of a ProcessGroup.

    group.py imports them, so they name the group by this protocol instead
    of importing it (no import cycle); :class:`~meshcast.group.ProcessGroup`
    is its one implementation. The underscored members are the group's
    internals the lane still reads (issue 13 gives it a narrower view).
    """

    group_id: int
    group_name: str
    global_ranks: list[int]
    arena: Arena
    transport: ShmTransport
    fifo: CallFifo
    symmetric: SymmetricHeap
    caps: HostCaps
    timeout: float
    tuned: frozenset[str]
    last_algorithm: str | None
    last_compiled: bool  # whether the last one-shot program ran in the compiled interpreter
    tracer: Any  # meshcast.trace.recorder.Tracer when MESHCAST_TRACE is set
    _rank: int
    _size: int
    _pids: tuple[int, ...]  # every member's pid by group rank (-1: not on this host)
    _group_rank_of: dict[int, int]
    _seq: Iterator[int]
    _p2p_seq: Iterator[int]
    # the general path's methods a lane hands an entered call over to (``entered=``)
    all_gather: Callable[..., Any]
    reduce_scatter: Callable[..., Any]
    all_to_all: Callable[..., Any]
    gather: Callable[..., Any]
    scatter: Callable[..., Any]

    def rank(self) -> int: ...
    def size(self) -> int: ...
    def _what(self, kind: str, seq: int) -> str: ...
    def _deadline(self) -> float: ...


Job = Callable[[], None]  # what ProcessGroup._run runs in call order


def flatten_shape(group: GroupView, kind: str, family: str, dtype: np.dtype, root: int,
                  n_in: int | None, n_out: int | None, counts: tuple[int, ...] | None,
                  *, in_place: bool = False, presume: bool = False,
                  root_splits: bool = False) -> Program:
    """This rank's registered ``family`` schedule of ``kind`` flattened for one call shape
    (``_program.flatten``, on ``_execute.probe`` arrays): ``n_in``/``n_out`` elements of
    the flat input and output (None where the call has none), per-rank ``counts``;
    ``in_place``: the smaller of the input and output is my piece of the other, where
    ``counts`` put it (all_gather's and a gather root's input, a scatter root's output);
    ``presume``: see ``flatten``; ``root_splits``: see ``Plan``. The one-shot and
    single-copy program caches
    (paths.oneshot.Programs, paths.single_copy.CopyPrograms) both flatten here.

    Raises:
        NotFlat: as ``flatten`` does.
    """
    if in_place and n_in is not None and n_out is not None and counts is not None:
        lo, c = sum(counts[:group._rank]), counts[group._rank]
        if n_in > n_out:  # (a scatter root's output)
            inp = probe(n_in, dtype, 0)
            out = inp[lo:lo + c]  # type: ignore[index]
        else:
            out = probe(n_out, dtype, 1)
            inp = out[lo:lo + c]  # type: ignore[index]
    else:
        inp, out = probe(n_in, dtype, 0), probe(n_out, dtype, 1)
    plan = Plan(coll=kind, rank=group._rank, size=group._size, dtype=dtype, root=root,
                input=inp, output=out, counts=counts, region_bytes=group.arena.small_bytes,
                single_copy=family == "cma", symmetric=family == "symmetric",
                root_splits=root_splits)
    entry = registry.get(kind, family)
    return flatten(entry.fn, plan, entry.qualname, presume=presume)


__all__ = ["GroupView", "Job", "flatten_shape"]
