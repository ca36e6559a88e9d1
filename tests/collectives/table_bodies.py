"""Bodies for the fast-path table checks of tests/collectives/test_<collective>.py: a
collective at both sides of every threshold, the path that ran beside the path
algorithms/_select.fast_path names."""

from __future__ import annotations

import numpy as np

import meshcast as dist
from meshcast.algorithms import _explain
from meshcast.algorithms import _select as table
from meshcast.paths.oneshot import split_head

KINDS = ("barrier", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter",
         "reduce_scatter", "all_to_all")


def boundaries(caps: table.HostCaps) -> list[int]:
    """Every per-rank size (bytes) where some fast-path rule may flip, for any kind."""
    n = caps.size
    edges = {caps.oneshot_bytes, table.ONESHOT_WORK_BYTES // n, table.SINGLE_COPY_MIN_BYTES,
             table.ALL_REDUCE_SINGLE_MIN_BYTES, table.ALL_GATHER_SINGLE_MIN_BYTES // n,
             table.direct_bytes(caps, n), table.direct_bytes(caps, 1) // n,
             table.all_to_all_direct_limit(caps, split_head(n)) // n,
             table.SINGLE_COPY_MIN_BYTES * n // n, table.ONESHOT_WORK_BYTES // n // n,
             table.SYMMETRIC_MIN_BYTES // n, table.SYMMETRIC_ALL_REDUCE_MIN_BYTES,
             table.SYMMETRIC_BROADCAST_MIN_BYTES,
             *table.ROOTED_SINGLE_MIN_BYTES, table.BROADCAST_SINGLE_MIN_BYTES,
             *table.ALL_TO_ALL_SINGLE_MIN_BYTES}
    sizes = {0, 4}
    for e in edges:
        for d in (-4, 0, 4):
            if e + d >= 0:
                sizes.add((e + d) // 4 * 4)
    return sorted(sizes)


def _call(kind: str, piece: int, symmetric: bool) -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    c = piece // 4
    alloc = dist.empty if symmetric else (lambda size, dtype: np.empty(size, dtype))
    if kind == "barrier":
        dist.barrier()
    elif kind == "broadcast":
        x = alloc(c, np.float32)
        x[:] = r
        dist.broadcast(x, src=0)
        assert (x == 0).all()
    elif kind == "all_reduce":
        x = alloc(c, np.float32)
        x[:] = 1
        dist.all_reduce(x)
        assert (x == n).all()
    elif kind == "reduce":
        x = np.ones(c, np.float32)
        dist.reduce(x, dst=0)
        assert r != 0 or (x == n).all()
    elif kind == "all_gather":
        out = alloc(c * n, np.float32)
        dist.all_gather_into_tensor(out, np.full(c, r, np.float32))
        assert (out.reshape(n, c) == np.arange(n, dtype=np.float32)[:, None]).all()
    elif kind == "gather":
        outs = [np.empty(c, np.float32) for _ in range(n)] if r == 0 else None
        dist.gather(np.full(c, r, np.float32), outs, dst=0)
        assert r != 0 or all((o == q).all() for q, o in enumerate(outs))
    elif kind == "scatter":
        out = np.empty(c, np.float32)
        ins = [np.full(c, q, np.float32) for q in range(n)] if r == 0 else None
        dist.scatter(out, ins, src=0)
        assert (out == r).all()
    elif kind == "reduce_scatter":
        inp = alloc(c * n, np.float32)
        inp[:] = 1
        out = np.empty(c, np.float32)
        dist.reduce_scatter_tensor(out, inp)
        assert (out == n).all()
    elif kind == "all_to_all":
        inp = np.repeat(np.arange(n, dtype=np.float32) + 10 * r, c)
        out = np.empty(c * n, np.float32)
        dist.all_to_all_single(out, inp)
        assert (out.reshape(n, c) == (np.arange(n) * 10 + r)[:, None]).all()


def run_table(symmetric: bool, kinds: tuple[str, ...] = KINDS) -> list[tuple]:
    """(kind, piece, what ran, what the table says) for every kind of ``kinds`` and
    boundary size."""
    pg = dist.group.WORLD
    caps = pg.caps
    head = split_head(caps.size)
    seen = []
    for kind in kinds:
        if symmetric and kind not in ("broadcast", "all_reduce", "all_gather", "reduce_scatter"):
            continue
        for piece in boundaries(caps) if kind != "barrier" else [0]:
            _call(kind, piece, symmetric)
            ran = pg.last_algorithm
            fast = table.fast_path(kind, caps, piece, symmetric=symmetric and piece > 0,
                                   header=head)
            # past the fast paths, the schedule the table picks (what `meshcast algorithms
            # KIND --size PIECE` prints)
            said = f"{kind}/{fast}" if fast else _explain._schedule(kind, piece, caps.size).qualname
            seen.append((kind, piece, ran, said))
    return seen
