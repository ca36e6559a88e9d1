"""Rank bodies that sweep collectives x algorithms x roots x dtypes x ops in one world.

One spawned world runs hundreds of calls (starting a world costs far more
than a call), checks every result against meshcast.testing.reference, and
returns how many calls it checked per (function, algorithm that ran). The
first wrong result raises with the exact case, so the test output says what
broke; a forced algorithm that did not actually run is a wrong result too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import meshcast as dist
from meshcast import ops
from meshcast.algorithms import _registry
from meshcast.testing import reference as ref

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64",
          "complex64", "complex128"]
OPS = list(ops.ReduceOp)
ROOTED = ("broadcast", "reduce", "gather", "scatter")

# API functions swept besides the registered collectives, and the collective whose
# algorithms run them: their own argument checks and buffer handling sit in front of
# the same schedules, so each gets every algorithm, on fewer dtypes (they are cheap).
VARIANTS = {
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_list": "all_to_all",
}
FUNCTIONS = {**{c: c for c in _registry.COLLECTIVES}, **VARIANTS}


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


def _cases(label: str, counts: Sequence[int], dtype_counts: Sequence[int]) -> list[tuple]:
    """(dtype, op, count) triples for one function: every dtype x op pair at a small
    count, float32 (or no dtype) at every count; fewer dtypes for the variants."""
    if label == "barrier":
        return [(None, None, 0)]
    reducing = label in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")
    if label in VARIANTS:
        dtypes = ("float16", "int32", "complex64") if reducing else ("bool", "float16")
    elif reducing:
        dtypes = DTYPES
    else:
        dtypes = ("bool", "int16", "float64", "complex64")
    cases = []
    for dt in dtypes:
        for op in (OPS if reducing else [None]):
            if op is None or _valid(op, dt):
                cases += [(dt, op, c) for c in dtype_counts]
    sum_op = ops.ReduceOp.SUM if reducing else None
    return cases + [("float32", sum_op, c) for c in counts]


def sweep(counts: Sequence[int] = (0, 1, 7, 300), dtype_counts: Sequence[int] = (5,),
          colls: Sequence[str] | None = None, members: Sequence[int] | None = None,
          async_op: bool = False) -> dict[tuple[str, str], int]:
    """Run every function of ``colls`` (default: all of :data:`FUNCTIONS`) with the
    default path and each algorithm forced, at every root, and check every result.

    Args:
        members: run in ``new_group(members)`` instead of the world (global ranks, in
            group-rank order); roots are then passed as global ranks or as group
            ranks, alternately, which checks the translation between the two.
        async_op: make every call with ``async_op=True`` and wait on its Work.

    Returns:
        ``{(function, algorithm): calls checked}``, where algorithm is what
        ``last_algorithm`` says ran (``"oneshot"``, ``"cma"``... on the default
        path); empty on a rank outside ``members``.
    """
    if members is None:
        group, pg = None, dist.group.WORLD
    else:
        group = pg = dist.new_group(list(members))
        if group is dist.GroupMember.NON_GROUP_MEMBER:
            dist.barrier()
            return {}
    n, r = dist.get_world_size(group), dist.get_rank(group)
    done: dict[tuple[str, str], int] = {}
    for label in colls or list(FUNCTIONS):
        coll = FUNCTIONS[label]
        for algo in [None, *_registry.names(coll)]:  # None: the default path (one-shot when small)
            for dt, op, count in _cases(label, counts, dtype_counts):
                roots = range(n) if dt in ("float32", None) else [n - 1]
                for root in (roots if label in ROOTED else [0]):
                    case = (f"{label}/{algo} n={n} rank={r} dtype={dt} op={op} count={count} "
                            f"root={root} members={members} async={async_op}")
                    call = _Call(group, pg, algo, async_op, case)
                    # Roots by group rank on odd counts, by global rank otherwise.
                    by_group_rank = count % 2 == 1
                    if _run_one(label, call, dt, op, count, root, n, r, by_group_rank):
                        ran = call.ran(coll)
                        done[(label, ran)] = done.get((label, ran), 0) + 1
    dist.barrier()
    return done


class _Call:
    """How one sweep case calls meshcast: group, forced algorithm, async or not."""

    def __init__(self, group: Any, pg: Any, algo: str | None, async_op: bool, case: str
                 ) -> None:
        self.group, self.pg, self.algo, self.async_op, self.case = group, pg, algo, async_op, case

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Run ``fn(*args, **kwargs)``; False when the forced algorithm refuses the call."""
        self.pg.last_algorithm = None  # so a path that records nothing cannot look like one
        try:
            work = fn(*args, group=self.group, async_op=self.async_op, algorithm=self.algo,
                      **kwargs)
            if self.async_op:
                assert work is not None, f"{self.case}: async_op=True returned no Work"
                work.wait()
            else:
                assert work is None, f"{self.case}: a synchronous call returned {work!r}"
        except dist.InvalidUsage as exc:
            if self.algo is not None and any(w in str(exc) for w in ("requires", "needs",
                                                                     "cannot")):
                return False
            raise AssertionError(f"{self.case}: {exc}") from exc
        return True

    def ran(self, coll: str) -> str:
        """The algorithm that ran the last call; it must be the forced one if any."""
        seen = self.pg.last_algorithm or "unrecorded"
        kind, _, name = seen.partition("/")
        if kind != coll or (self.algo is not None and name != self.algo):
            raise AssertionError(f"{self.case}: {seen} ran, expected {coll}/{self.algo or '*'}")
        return name


def _root_kw(name: str, root: int, call: _Call, by_group_rank: bool) -> dict[str, int]:
    """``{name: global rank}`` or ``{"group_" + name: group rank}`` of group rank ``root``."""
    if by_group_rank:
        return {f"group_{name}": root}
    global_root = root if call.group is None else dist.get_global_rank(call.group, root)
    return {name: global_root}


def _run_one(label, call, dt, op, count, root, n, r, by_group_rank) -> bool:
    if label == "barrier":
        return call(dist.barrier)
    ins = _inputs(n, count, dt)
    mine = ins[r].copy()
    case = call.case
    if label == "broadcast":
        x = mine.copy()
        if not call(dist.broadcast, x, **_root_kw("src", root, call, by_group_rank)):
            return False
        _check(x, ref.broadcast(ins, root)[r], case)
    elif label == "all_reduce":
        x = mine.copy()
        if not call(dist.all_reduce, x, op=op):
            return False
        _check(x, ref.all_reduce(ins, op)[r], case)
    elif label == "reduce":
        x = mine.copy()
        if not call(dist.reduce, x, op=op, **_root_kw("dst", root, call, by_group_rank)):
            return False
        want = ref.reduce(ins, op, root)[r]
        _check(x, want if want is not None else mine, case)  # non-roots unchanged
    elif label == "all_gather":
        # uneven pieces: rank q contributes count + q elements
        pieces = [ref.rank_input(q, count + q, dt) for q in range(n)]
        out = [np.zeros(count + q, dt) for q in range(n)]
        if not call(dist.all_gather, out, pieces[r].copy()):
            return False
        _check(np.concatenate(out), ref.all_gather(pieces)[r], case)
    elif label == "all_gather_into_tensor":
        out = np.zeros((n, count), dt)  # the (ws, N) form; its flat form is the same bytes
        if not call(dist.all_gather_into_tensor, out, mine.copy()):
            return False
        _check(out, ref.all_gather(ins)[r], case)
    elif label == "gather":
        pieces = [ref.rank_input(q, count + q, dt) for q in range(n)]
        out = [np.zeros(count + q, dt) for q in range(n)] if r == root else None
        if not call(dist.gather, pieces[r].copy(), out,
                    **_root_kw("dst", root, call, by_group_rank)):
            return False
        if r == root:
            _check(np.concatenate(out), ref.gather(pieces, root)[r], case)
    elif label == "scatter":
        pieces = [ref.rank_input(q, count + q, dt, seed=5) for q in range(n)]
        x = np.zeros(count + r, dt)
        if not call(dist.scatter, x, pieces if r == root else None,
                    **_root_kw("src", root, call, by_group_rank)):
            return False
        _check(x, pieces[r], case)
    elif label == "reduce_scatter":
        sizes = [count + (q % 2) for q in range(n)]
        full = _inputs(n, sum(sizes), dt)
        inp = full[r]
        offs = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        x = np.zeros(sizes[r], dt)
        lst = [inp[offs[q]:offs[q + 1]].copy() for q in range(n)]
        if not call(dist.reduce_scatter, x, lst, op=op):
            return False
        _check(x, ref.reduce_scatter(full, op, sizes)[r], case)
    elif label == "reduce_scatter_tensor":
        full = _inputs(n, n * count, dt, seed=7)
        x = np.zeros(count, dt)
        if not call(dist.reduce_scatter_tensor, x, full[r].copy(), op=op):
            return False
        _check(x, ref.reduce_scatter(full, op, [count] * n)[r], case)
    elif label in ("all_to_all", "all_to_all_list"):
        # uneven splits: rank s sends (s + q) % 3 + count elements to rank q
        send = [[(s + q) % 3 + count for q in range(n)] for s in range(n)]
        if call.algo == "bruck":  # bruck needs equal splits on every rank
            send = [[count] * n for _ in range(n)]
        ins = [ref.rank_input(s, sum(send[s]), dt, seed=3) for s in range(n)]
        recv = [send[s][r] for s in range(n)]
        inp = ins[r]
        if label == "all_to_all":
            out = np.zeros(sum(recv), dt)
            if not call(dist.all_to_all_single, out, inp, recv, send[r]):
                return False
        else:
            at = np.concatenate([[0], np.cumsum(send[r])]).astype(int)
            outs = [np.zeros(c, dt) for c in recv]
            if not call(dist.all_to_all, outs, [inp[at[q]:at[q + 1]] for q in range(n)]):
                return False
            out = np.concatenate(outs)
        _check(out, ref.all_to_all(ins, send)[r], case)
    else:
        raise ValueError(label)
    return True
