"""Rank bodies for test_fast_path_schedules.py: real calls on the fast paths beside the
described schedule of the same name, run in the simulator on the same inputs.

Every call is built from one set of inputs (:func:`inputs`, in the layout
``_simulate.make_plans`` takes), so the real call and the schedule see the same
data; :func:`pinned` runs both and returns what the runtime did and what the
schedule says it does.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

import meshcast as dist
from meshcast.algorithms import _registry, _select
from meshcast.algorithms._plan import EXPOSED
from meshcast.algorithms._simulate import SimResult, host_options, make_plans, run
from meshcast.testing import reference as ref
from meshcast.transport import cma

KINDS = ("barrier", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter",
         "reduce_scatter", "all_to_all")
SYMMETRIC = ("broadcast", "all_reduce", "all_gather", "reduce_scatter")
ROOT = 0
# per-rank pieces (bytes) to try, smallest first: the first one the table sends down a
# path is that path's call
PIECES = (64, 4096, 16 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 2 << 20)


def piece_for(kind: str, path: str, symmetric: bool = False) -> int | None:
    """The smallest of :data:`PIECES` that ``_select.fast_path`` sends down ``path``."""
    caps = dist.group.WORLD.caps
    for piece in (0,) if kind == "barrier" else PIECES:
        if _select.fast_path(kind, caps, piece, symmetric=symmetric) == path:
            return piece
    return None


def inputs(kind: str, n: int, c: int) -> list[np.ndarray | None]:
    """Every rank's data for a call of ``c`` float32 per piece, as make_plans takes it."""
    if kind == "barrier":
        return [None] * n
    whole = kind in ("scatter", "reduce_scatter", "all_to_all")
    data = [ref.rank_input(r, c * n if whole else c, "float32") for r in range(n)]
    if kind == "scatter":
        return [data[ROOT] if r == ROOT else None for r in range(n)]
    return data


def _call(kind: str, data: list[np.ndarray | None], c: int, symmetric: bool) -> np.ndarray | None:
    """Make the real call on my input; returns my result (None where there is none)."""
    r, n = dist.get_rank(), dist.get_world_size()
    alloc = dist.empty if symmetric else (lambda size, dtype: np.empty(size, dtype))
    mine = data[r]
    if kind == "barrier":
        dist.barrier()
        return None
    if kind in ("broadcast", "all_reduce", "reduce"):
        x = alloc(c, np.float32)
        x[:] = data[ROOT] if kind == "broadcast" else mine
        {"broadcast": lambda: dist.broadcast(x, src=ROOT), "all_reduce": lambda: dist.all_reduce(x),
         "reduce": lambda: dist.reduce(x, dst=ROOT)}[kind]()
        return x if kind != "reduce" or r == ROOT else None
    if kind == "all_gather":
        out = alloc(c * n, np.float32)
        dist.all_gather_into_tensor(out, mine)
        return out
    if kind == "gather":
        # the pieces back to back, as the plan's flat output (the form gather/cma describes)
        whole = np.empty(c * n, np.float32)
        dist.gather(mine, list(np.split(whole, n)) if r == ROOT else None, dst=ROOT)
        return whole if r == ROOT else None
    if kind == "scatter":
        out = np.empty(c, np.float32)
        dist.scatter(out, list(np.split(mine, n)) if r == ROOT else None, src=ROOT)
        return out
    out = np.empty(c if kind == "reduce_scatter" else c * n, np.float32)
    if kind == "reduce_scatter":
        inp = alloc(c * n, np.float32)
        inp[:] = mine
        dist.reduce_scatter_tensor(out, inp)
    else:
        dist.all_to_all_single(out, mine)
    return out


def _simulate(kind: str, name: str, data: list[np.ndarray | None]) -> SimResult:
    """The described schedule ``kind``/``name`` on the same inputs, all ranks in memory."""
    entry = _registry.get(kind, name)
    plans = make_plans(kind, len(data), data, dtype=np.float32,
                       op="sum" if kind in ("all_reduce", "reduce", "reduce_scatter") else None,
                       root=ROOT, in_place=kind in ("all_reduce", "reduce"),
                       **host_options(entry.family))
    assert entry.why_not(plans[0]) is None, (entry.qualname, entry.why_not(plans[0]))
    return run(entry.fn, plans, label=entry.qualname)


def _exposed_traffic(res: SimResult, me: int) -> tuple[Counter, Counter]:
    """Bytes my schedule reads from and writes into each peer's exposed buffer."""
    reads: Counter = Counter()
    writes: Counter = Counter()
    for e in res.events:
        if e.rank != me or e.space != EXPOSED:
            continue
        if e.kind == "get":
            reads[e.peer] += e.nbytes
        elif e.kind == "reduce_slots":
            for q in e.ranks:
                if q != me:
                    reads[q] += e.nbytes
        elif e.kind == "write":
            writes[e.peer] += e.nbytes
    return reads, writes


def pinned(paths: tuple[str, ...] = ("oneshot", "cma")) -> list[dict[str, Any]]:
    """Rank body: for every collective and every path of ``paths`` the table can send it
    down on this host, one real call and the schedule of the same name. Returns one row
    per call: kind, piece, what ran, and per rank what the runtime moved beside what the
    schedule moves (the region's written bytes equal; single-copy bytes per peer)."""
    pg = dist.group.WORLD
    me, n = dist.get_rank(), dist.get_world_size()
    pid_rank = {pid: q for q, pid in enumerate(pg._pids)}
    moved: dict[str, Counter] = {"read": Counter(), "write": Counter()}
    real_read, real_write = cma.read, cma.write

    def counting(verb: str, real: Any) -> Any:
        def copy(pid: int, address: int, buf: np.ndarray) -> None:
            moved[verb][pid_rank[pid]] += buf.nbytes
            real(pid, address, buf)
        return copy

    # the single-copy runner calls cma.read/cma.write (with MESHCAST_COMPILED=0: never
    # the C helper), so these count every byte it copies from or into a peer
    cma.read, cma.write = counting("read", real_read), counting("write", real_write)
    rows = []
    try:
        for kind in KINDS:
            for path in paths:
                symmetric = path == "symmetric"
                piece = piece_for(kind, path, symmetric)
                if piece is None or (symmetric and kind not in SYMMETRIC):
                    continue
                c = piece // 4
                data = inputs(kind, n, c)
                for counter in moved.values():
                    counter.clear()
                pg.last_algorithm = None
                got = _call(kind, data, c, symmetric)
                ran = pg.last_algorithm
                region = pg.arena.small[me][pg.arena.seq & 1]
                res = _simulate(kind, path, data)
                want = res.plans[me].output
                if want is not None and got is not None:
                    assert np.array_equal(got, want), (kind, path)
                written = res.regions[me]
                reads, writes = _exposed_traffic(res, me)
                rows.append({
                    "kind": kind, "path": path, "piece": piece, "ran": ran,
                    "region_equal": bool(np.array_equal(region[:len(written)][~written.mask],
                                                        written.compressed())),
                    "region_bytes": int(written.count()),
                    "reads": (dict(moved["read"]), dict(reads)),
                    "writes": (dict(moved["write"]), dict(writes)),
                })
    finally:
        cma.read, cma.write = real_read, real_write
    dist.barrier()
    return rows
