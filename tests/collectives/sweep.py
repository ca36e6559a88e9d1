"""Rank bodies that sweep collectives x algorithms x roots x dtypes x ops in one world.

One spawned world runs hundreds of calls (starting a world costs far more
than a call), checks every result against meshcast.testing.reference, and
returns how many calls it checked per collective. The first wrong result
raises with the exact case, so the test output says what broke.
"""

from __future__ import annotations

import numpy as np

import meshcast as dist
from meshcast import ops
from meshcast.algorithms import _registry
from meshcast.testing import reference as ref

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64",
          "complex64", "complex128"]
OPS = list(ops.ReduceOp)


def _valid(op, dtype) -> bool:
    try:
        ops.validate(op, np.dtype(dtype), caller="t", rank=0)
    except dist.InvalidUsage:
        return False
    return True


def _inputs(n, count, dtype, seed=0):
    return [ref.rank_input(r, count, dtype, seed) for r in range(n)]


def _check(got, want, case):
    if want is None:
        return
    if not np.array_equal(got.reshape(-1), np.asarray(want).reshape(-1), equal_nan=False):
        raise AssertionError(f"{case}: got {got.reshape(-1)[:12]} want "
                             f"{np.asarray(want).reshape(-1)[:12]}")


def _forced(fn, algo, case):
    """Run fn(algorithm=algo); returns False when the algorithm refuses the call."""
    try:
        fn(algo)
    except dist.InvalidUsage as exc:
        if "requires" in str(exc) or "needs" in str(exc) or "cannot" in str(exc):
            return False
        raise AssertionError(f"{case}: {exc}") from exc
    return True


def sweep(counts=(0, 1, 7, 300), dtype_counts=(5,), colls=None) -> dict:
    n, r = dist.get_world_size(), dist.get_rank()
    done: dict[str, int] = {}
    colls = colls or list(_registry.COLLECTIVES)

    def tick(c):
        done[c] = done.get(c, 0) + 1

    for coll in colls:
        for algo in [None, *_registry.names(coll)]:  # None: the default path (one-shot when small)
            # Every dtype x op pair at a small count; float32 (or the op's dtype) at every count.
            cases = []
            if coll in ("all_reduce", "reduce", "reduce_scatter"):
                for dt in DTYPES:
                    for op in OPS:
                        if _valid(op, dt):
                            cases += [(dt, op, c) for c in dtype_counts]
                cases += [("float32", ops.ReduceOp.SUM, c) for c in counts]
            elif coll == "barrier":
                cases = [(None, None, 0)]
            else:
                cases = [(dt, None, 5) for dt in ("bool", "int16", "float64", "complex64")]
                cases += [("float32", None, c) for c in counts]
            for dt, op, count in cases:
                roots = range(n) if dt in ("float32", None) else [n - 1]
                rooted = coll in ("broadcast", "reduce", "gather", "scatter")
                for root in (roots if rooted else [0]):
                    case = f"{coll}/{algo} n={n} rank={r} dtype={dt} op={op} count={count} root={root}"
                    if _run_one(coll, algo, dt, op, count, root, n, r, case):
                        tick(coll)
    dist.barrier()
    return done


def _run_one(coll, algo, dt, op, count, root, n, r, case) -> bool:
    if coll == "barrier":
        return _forced(lambda a: dist.barrier(algorithm=a), algo, case)
    ins = _inputs(n, count, dt)
    mine = ins[r].copy()
    if coll == "broadcast":
        x = mine.copy()
        if not _forced(lambda a: dist.broadcast(x, src=root, algorithm=a), algo, case):
            return False
        _check(x, ref.broadcast(ins, root)[r], case)
    elif coll == "all_reduce":
        x = mine.copy()
        if not _forced(lambda a: dist.all_reduce(x, op=op, algorithm=a), algo, case):
            return False
        _check(x, ref.all_reduce(ins, op)[r], case)
    elif coll == "reduce":
        x = mine.copy()
        if not _forced(lambda a: dist.reduce(x, dst=root, op=op, algorithm=a), algo, case):
            return False
        want = ref.reduce(ins, op, root)[r]
        _check(x, want if want is not None else mine, case)  # non-roots unchanged
    elif coll == "all_gather":
        # uneven pieces: rank q contributes count + q elements
        pieces = [ref.rank_input(q, count + q, dt) for q in range(n)]
        out = [np.zeros(count + q, dt) for q in range(n)]
        if not _forced(lambda a: dist.all_gather(out, pieces[r].copy(), algorithm=a), algo, case):
            return False
        _check(np.concatenate(out), ref.all_gather(pieces)[r], case)
    elif coll == "gather":
        pieces = [ref.rank_input(q, count + q, dt) for q in range(n)]
        out = [np.zeros(count + q, dt) for q in range(n)] if r == root else None
        if not _forced(lambda a: dist.gather(pieces[r].copy(), out, dst=root, algorithm=a),
                       algo, case):
            return False
        if r == root:
            _check(np.concatenate(out), ref.gather(pieces, root)[r], case)
    elif coll == "scatter":
        pieces = [ref.rank_input(q, count + q, dt, seed=5) for q in range(n)]
        x = np.zeros(count + r, dt)
        if not _forced(lambda a: dist.scatter(x, pieces if r == root else None, src=root,
                                              algorithm=a), algo, case):
            return False
        _check(x, pieces[r], case)
    elif coll == "reduce_scatter":
        sizes = [count + (q % 2) for q in range(n)]
        full = _inputs(n, sum(sizes), dt)
        inp = full[r]
        offs = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        x = np.zeros(sizes[r], dt)
        lst = [inp[offs[q]:offs[q + 1]].copy() for q in range(n)]
        if not _forced(lambda a: dist.reduce_scatter(x, lst, op=op, algorithm=a), algo, case):
            return False
        _check(x, ref.reduce_scatter(full, op, sizes)[r], case)
    elif coll == "all_to_all":
        # uneven splits: rank s sends (s + q) % 3 + count elements to rank q
        send = [[(s + q) % 3 + count for q in range(n)] for s in range(n)]
        if algo == "bruck":  # bruck needs equal splits on every rank
            send = [[count] * n for _ in range(n)]
        ins = [ref.rank_input(s, sum(send[s]), dt, seed=3) for s in range(n)]
        recv = [send[s][r] for s in range(n)]
        inp = ins[r]
        out = np.zeros(sum(recv), dt)
        if not _forced(lambda a: dist.all_to_all_single(out, inp, recv, send[r], algorithm=a),
                       algo, case):
            return False
        _check(out, ref.all_to_all(ins, send)[r], case)
    return True
