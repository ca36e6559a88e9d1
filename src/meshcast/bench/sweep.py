"""The size sweep every library runs, identically: warm-up, timed loop, check, one record per call.

Theory of operation
-------------------
A library takes part through a :class:`Comm` adapter (``meshcast_worker``,
``gloo_worker``, ``mpi_worker``): rank, size, barrier, a scalar all-reduce
for the timing and the error count, and ``prepare(call)``, which turns one
call (collective, send and receive views, root, reduce op, placement) into a
zero-argument function that runs it. Everything else is here, shared, so the
figures of different libraries differ only by the library:

* Buffers: one send and one receive buffer of the largest size, touched once
  at the start (no page faults in a timed loop). As in nccl-tests, iteration
  ``k`` uses the window at offset ``window x (k mod steps)``, so a size
  smaller than the buffers is not served from cache just because the same
  bytes were sent a moment ago (``--no-rotate`` turns this off).
* Per size and placement: ``warmup`` calls, at least one on each window the
  timed loop uses (no timed call is the first on its buffers: a library that
  prepares something per buffer, as meshcast's lane does, would otherwise pay
  it inside the first size's timed loop; 8 B rows read 1.5x too slow with 5
  warm-up calls over 20 windows), a barrier, ``iters`` timed calls; each rank's
  mean is combined over ranks (max by default, see ``average``).
* Check: after the timed loop the data are written afresh, one call is made
  and every rank counts the elements that differ from the closed-form result
  (:mod:`.collectives`); the counts are summed over ranks (``#wrong``).
* Paired (``meshcast bench --paired``, :func:`run_paired_sweep`): the compared
  libraries share one job's ranks and buffers; at each call every library warms
  up, then timed blocks alternate between them (A B, B A, ...) and each keeps its
  fastest. This machine's speed drifts between states over seconds (large copies
  1.5-2x apart from one launch to the next), so libraries measured one launch
  after the other can differ by the machine's state alone; blocks a moment apart
  see the same state.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .collectives import COLLECTIVES, Collective, Counts, count_wrong, fill_inputs

PLACEMENTS = ("out-of-place", "in-place")

#: ``-a``: how the per-rank mean times are combined (nccl-tests: 0 rank0, 1 avg, 2 min, 3 max).
AVERAGES = ("rank0", "avg", "min", "max")

#: Marks the lines of a worker's stdout that carry records (anything else is passed through).
RECORD_PREFIX = "@meshcast-bench "


class Unsupported(Exception):
    """The library has no form of this call (e.g. an out-of-place all_reduce in torch's API)."""


@dataclass(frozen=True)
class SweepSpec:
    """What to run: the same value goes to every library's workers (as JSON).

    Attributes:
        ops: collectives, in order (names of :data:`.collectives.COLLECTIVES`).
        sizes: message sizes in bytes (nccl-tests' ``size`` before rounding to counts).
        dtype: NumPy dtype name.
        redop: reduce op for the collectives that reduce.
        root: root rank for the rooted collectives.
        warmup: untimed calls per size and placement (at least one per window the
            timed loop uses, whatever this says).
        iters: timed calls per size and placement.
        check: run the data check (``#wrong``).
        average: how per-rank times are combined, one of :data:`AVERAGES`.
        algorithms: forced meshcast algorithm per collective (other libraries ignore it).
        rotate: shift the buffers every iteration as nccl-tests does.
        placements: which of :data:`PLACEMENTS` to run.
    """

    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    dtype: str = "float32"
    redop: str = "sum"
    root: int = 0
    warmup: int = 5
    iters: int = 20
    check: bool = True
    average: str = "max"
    algorithms: dict[str, str] = field(default_factory=dict)
    rotate: bool = True
    placements: tuple[str, ...] = PLACEMENTS

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SweepSpec:
        raw = json.loads(text)
        for key in ("ops", "sizes", "placements"):
            raw[key] = tuple(raw[key])
        return cls(**raw)

    def units(self) -> int:
        """Records one library emits for the whole sweep (for progress bars)."""
        return len(self.ops) * len(self.sizes) * len(self.placements)


@dataclass
class Call:
    """One collective call as ``Comm.prepare`` sees it.

    ``send`` and ``recv`` are this iteration's views (in place, ``send`` lies
    inside ``recv``'s buffer at nccl-tests' offset; ``base`` is the whole
    in-place window, which MPI's ``MPI_IN_PLACE`` forms need).
    """

    op: str
    send: np.ndarray
    recv: np.ndarray
    base: np.ndarray
    counts: Counts
    root: int
    redop: str
    inplace: bool
    algorithm: str | None


@dataclass
class Prepared:
    """``run()`` makes the call; ``result`` is where its result lands (checked afterwards)."""

    run: Callable[[], Any]
    result: np.ndarray


class Comm(Protocol):
    """What a library provides to the sweep (see the module docstring)."""

    library: str
    rank: int
    size: int

    def barrier(self) -> None: ...

    def allreduce_scalar(self, value: float, how: str) -> float:
        """Combine one number over ranks: ``how`` in ``sum``, ``max``, ``min``, ``avg``, ``rank0``."""
        ...

    def prepare(self, call: Call) -> Prepared:
        """Build the call; raise :class:`Unsupported` if the library has no such form."""
        ...

    def algorithm(self) -> str:
        """Name of the algorithm the last call used (``""`` when the library does not say)."""
        ...


def record(spec: SweepSpec, coll: Collective, size: int, counts: Counts, n: int,
           placement: str, library: str, seconds: float | None, wrong: int | None,
           algorithm: str = "", note: str = "") -> dict[str, Any]:
    """One result row (also one JSON line of ``--json``); ``seconds`` None means N/A."""
    typesize = np.dtype(spec.dtype).itemsize
    algbw = busbw = None
    if seconds is not None:
        algbw, busbw = coll.bandwidth(counts.param, typesize, seconds, n)
    return {
        "kind": "result", "library": library, "op": coll.name, "nranks": n,
        "size": counts.window * typesize, "count": counts.param, "type": spec.dtype,
        "redop": spec.redop if coll.reduces else "none",
        "root": spec.root if coll.rooted else -1, "placement": placement,
        "time_us": None if seconds is None else seconds * 1e6,
        "algbw": algbw, "busbw": busbw, "wrong": wrong, "algorithm": algorithm,
        "requested_size": size, "note": note,
    }


def _views(coll: Collective, counts: Counts, send_buf: np.ndarray, recv_buf: np.ndarray,
           shift: int, rank: int, inplace: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send, recv, base) views of one iteration at element offset ``shift``."""
    if not inplace:
        recv = recv_buf[shift:shift + counts.recv]
        return send_buf[shift:shift + counts.send], recv, recv
    base = recv_buf[shift:shift + counts.window]
    s0 = counts.send_inplace_offset * rank
    r0 = counts.recv_inplace_offset * rank
    return base[s0:s0 + counts.send], base[r0:r0 + counts.recv], base


def run_sweep(comm: Comm, spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """Run the whole sweep on ``comm``; yields one record per (op, size, placement) on every rank.

    Every rank takes the same path (the records are identical after the
    over-rank reductions), so a caller prints them on rank 0 only.
    """
    n = comm.size
    # a library may place its buffers itself
    send_buf, recv_buf = _buffers(spec, getattr(comm, "allocate", None))
    _warm_statistics(comm, spec)
    for coll, size, counts, root, inplace in _calls(spec, n):
        yield _one(comm, spec, coll, size, counts, send_buf, recv_buf, root, inplace)


def _warm_statistics(comm: Comm, spec: SweepSpec) -> None:
    """Make the scalar all-reduce that combines each timed mean once before the sweep.

    A rank that leaves the timed loop first enters that all-reduce while the others
    finish their last call; at its first use, its one-time work (meshcast plans a call
    of a new shape once: about 0.1 ms, more at 4 ranks on 2 cores) ran on the cores those
    ranks needed, and their last call waited for it: 2-4 ms, which made the first size
    of every 4-rank run read 110-270 us instead of 10 at 8 bytes."""
    comm.allreduce_scalar(0.0, spec.average)


def _buffers(spec: SweepSpec, allocate: Callable[[int, np.dtype], np.ndarray] | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """The sweep's send and receive buffers, each of the largest size (every send/recv
    count of every collective is <= count = size // typesize), from ``allocate`` or
    ``np.ones``."""
    dtype = np.dtype(spec.dtype)
    maxcount = max(spec.sizes) // dtype.itemsize if spec.sizes else 0
    make = allocate or np.ones
    return make(maxcount, dtype), make(maxcount, dtype)


def _calls(spec: SweepSpec, n: int) -> Iterator[tuple[Collective, int, Counts, int, bool]]:
    """Every call of the sweep, in order: (collective, size, counts, root, in place?)."""
    dtype = np.dtype(spec.dtype)
    for op in spec.ops:
        coll = COLLECTIVES[op]
        root = spec.root if coll.rooted else -1
        for size in spec.sizes:
            counts = coll.counts(size // dtype.itemsize, dtype.itemsize, n)
            for placement in spec.placements:
                yield coll, size, counts, root, placement == "in-place"


def _one(comm: Comm, spec: SweepSpec, coll: Collective, size: int, counts: Counts,
         send_buf: np.ndarray, recv_buf: np.ndarray, root: int, inplace: bool
         ) -> dict[str, Any]:
    n = comm.size
    placement = "in-place" if inplace else "out-of-place"
    prepared = _prepare(comm, spec, coll, counts, send_buf, recv_buf, root, inplace)
    if isinstance(prepared, str):
        return record(spec, coll, size, counts, n, placement, comm.library, None, None,
                      note=prepared)
    _warm_up(spec, prepared)
    seconds, algorithm = _timed(comm, spec, prepared)
    wrong = _check(comm, spec, coll, counts, send_buf, recv_buf, root, inplace, prepared[0])
    return record(spec, coll, size, counts, n, placement, comm.library, seconds, wrong,
                  algorithm=algorithm)


def _prepare(comm: Comm, spec: SweepSpec, coll: Collective, counts: Counts,
             send_buf: np.ndarray, recv_buf: np.ndarray, root: int, inplace: bool
             ) -> list[Prepared] | str:
    """One prepared call per window the timed loop uses, or why the library has none."""
    if inplace and not coll.inplace:
        return "no in-place form (nccl-tests does not check one either)"
    window = counts.window
    steps = max(1, send_buf.size // window) if window and spec.rotate else 1
    prepared: list[Prepared] = []
    try:
        for k in range(min(steps, max(1, spec.iters))):
            send, recv, base = _views(coll, counts, send_buf, recv_buf, window * k, comm.rank,
                                      inplace)
            prepared.append(comm.prepare(Call(coll.name, send, recv, base, counts, root,
                                              spec.redop, inplace,
                                              spec.algorithms.get(coll.name))))
    except Unsupported as exc:
        return str(exc)
    return prepared


def _warm_up(spec: SweepSpec, prepared: list[Prepared]) -> None:
    for k in range(max(spec.warmup, len(prepared) if spec.iters else 0)):
        prepared[k % len(prepared)].run()


def _timed(comm: Comm, spec: SweepSpec, prepared: list[Prepared]) -> tuple[float, str]:
    """A barrier, then ``iters`` calls: (their mean time combined over ranks, algorithm)."""
    comm.barrier()
    t0 = time.perf_counter()
    for k in range(spec.iters):
        prepared[k % len(prepared)].run()
    mean = (time.perf_counter() - t0) / max(1, spec.iters)
    algorithm = comm.algorithm()  # before the scalar all-reduce below replaces it
    return comm.allreduce_scalar(mean, spec.average), algorithm


def _check(comm: Comm, spec: SweepSpec, coll: Collective, counts: Counts,
           send_buf: np.ndarray, recv_buf: np.ndarray, root: int, inplace: bool,
           first: Prepared) -> int | None:
    """The data check (``#wrong`` summed over ranks), or None when it is off."""
    if not spec.check:
        return None
    n, rank = comm.size, comm.rank
    send, recv, _ = _views(coll, counts, send_buf, recv_buf, 0, rank, inplace)
    fill_inputs(coll.name, rank, n, root, counts, spec.redop, send, recv, inplace)
    comm.barrier()  # nobody's data may be rewritten while a peer still reads it
    first.run()
    mine = count_wrong(coll.name, rank, n, root, counts, spec.redop, first.result)
    wrong = int(comm.allreduce_scalar(float(mine), "sum"))
    comm.barrier()
    return wrong


def run_paired_sweep(comms: Sequence[Comm], spec: SweepSpec, blocks: int
                     ) -> Iterator[dict[str, Any]]:
    """The sweep of every library in ``comms`` (the same ranks), paired call by call.

    At each (op, size, placement) every library prepares its calls on the same
    buffers and warms up; then ``blocks`` timed blocks per library follow, the
    libraries alternating (A B, B A, A B, ...), so that each pair of blocks meets the
    machine in the same state; each library keeps its fastest block, and each
    result is checked. Yields one record per library per call, in ``comms``' order.
    """
    n = comms[0].size
    send_buf, recv_buf = _buffers(spec)
    for comm in comms:
        _warm_statistics(comm, spec)
    for coll, size, counts, root, inplace in _calls(spec, n):
        placement = "in-place" if inplace else "out-of-place"
        ready: dict[int, list[Prepared]] = {}
        notes: dict[int, str] = {}
        for i, comm in enumerate(comms):
            p = _prepare(comm, spec, coll, counts, send_buf, recv_buf, root, inplace)
            if isinstance(p, str):
                notes[i] = p
            else:
                ready[i] = p
        for p in ready.values():
            _warm_up(spec, p)
        best: dict[int, float] = {}
        algorithm: dict[int, str] = {}
        order = list(ready)
        for b in range(max(1, blocks)):
            for i in order if b % 2 == 0 else order[::-1]:
                seconds, algorithm[i] = _timed(comms[i], spec, ready[i])
                best[i] = min(seconds, best.get(i, seconds))
        for i, comm in enumerate(comms):
            if i in notes:
                yield record(spec, coll, size, counts, n, placement, comm.library, None, None,
                             note=notes[i])
                continue
            wrong = _check(comm, spec, coll, counts, send_buf, recv_buf, root, inplace,
                           ready[i][0])
            yield record(spec, coll, size, counts, n, placement, comm.library, best[i], wrong,
                         algorithm=algorithm[i])


def emit(rec: dict[str, Any]) -> None:
    """Print one record for the parent process (workers call this on rank 0)."""
    print(RECORD_PREFIX + json.dumps(rec), flush=True)


def parse_line(line: str) -> dict[str, Any] | None:
    """The record on a worker's stdout line, or None for any other line."""
    if not line.startswith(RECORD_PREFIX):
        return None
    return json.loads(line[len(RECORD_PREFIX):])
