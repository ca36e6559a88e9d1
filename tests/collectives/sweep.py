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
from meshcast.algorithms import _select as _table
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

def path_count(label: str, n: int) -> int:
    """A float32 count past the one-shot sizes, where the single-copy path takes over at
    world size ``n`` (algorithms/_select.fast_path), as small as that allows: past the
    one-shot rule (1 MiB per rank, 2 MiB of reading for the whole call), pieces of at
    least 64 KiB, 2 MiB for all_reduce; all_to_all's input past the one-shot work with
    64 KiB for each peer."""
    if label == "all_reduce":
        return 600_000
    if label in ("broadcast", "reduce", "gather", "all_gather", "all_gather_into_tensor"):
        return 600_000 // n
    if label in ("scatter", "reduce_scatter", "reduce_scatter_tensor"):
        return 300_000 // n
    return max(_table.ONESHOT_WORK_BYTES // n // n, _table.SINGLE_COPY_MIN_BYTES) // 4 + 1000


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


def _path_cases(label: str, count: int, every_op: bool) -> list[tuple]:
    """The cases at :func:`path_count`: float32 (with every op if ``every_op``: the
    single-copy reductions combine in rank order, bit for bit as NumPy), float16 SUM
    (reduced in a float32 working copy)."""
    if label not in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"):
        return [("float32", None, count)]
    if not every_op:
        return [("float32", ops.ReduceOp.SUM, count)]
    return ([("float32", op, count) for op in OPS if _valid(op, "float32")]
            + [("float16", ops.ReduceOp.SUM, count)])


def sweep(counts: Sequence[int] = (0, 1, 7, 300), dtype_counts: Sequence[int] = (5,),
          colls: Sequence[str] | None = None, members: Sequence[int] | None = None,
          async_op: bool = False, strided: bool = False, path_counts: bool = False,
          path_ops: bool = True) -> dict[tuple[str, str], int]:
    """Run every function of ``colls`` (default: all of :data:`FUNCTIONS`) with the
    default path and each algorithm forced, at every root, and check every result.

    Args:
        members: run in ``new_group(members)`` instead of the world (global ranks, in
            group-rank order); roots are then passed as global ranks or as group
            ranks, alternately, which checks the translation between the two.
        async_op: make every call with ``async_op=True`` and wait on its Work.
        strided: pass non-contiguous arrays (every other element of a larger one),
            inputs and outputs alike.
        path_counts: also run the default path at :func:`path_count`, past one-shot,
            where the single-copy path takes over.
        path_ops: there, every op and float16 too (else float32 SUM only).

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
            cases = _cases(label, counts, dtype_counts)
            big = path_count(label, n)
            if algo is None and path_counts and label != "barrier":
                cases += _path_cases(label, big, every_op=path_ops)
            for dt, op, count in cases:
                roots = range(n) if dt in ("float32", None) else [n - 1]
                if count == big and op not in (None, ops.ReduceOp.SUM):
                    roots = [n - 1]  # every root once is enough at these sizes
                for root in (roots if label in ROOTED else [0]):
                    case = (f"{label}/{algo} n={n} rank={r} dtype={dt} op={op} count={count} "
                            f"root={root} members={members} async={async_op}")
                    call = _Call(group, pg, algo, async_op, case, strided)
                    # Roots by group rank on odd counts, by global rank otherwise.
                    by_group_rank = count % 2 == 1
                    if _run_one(label, call, dt, op, count, root, n, r, by_group_rank):
                        ran = call.ran(coll)
                        done[(label, ran)] = done.get((label, ran), 0) + 1
    dist.barrier()
    return done


class _Call:
    """How one sweep case calls meshcast: group, forced algorithm, async or not."""

    def __init__(self, group: Any, pg: Any, algo: str | None, async_op: bool, case: str,
                 strided: bool = False) -> None:
        self.group, self.pg, self.algo, self.async_op, self.case = group, pg, algo, async_op, case
        self.strided = strided

    def zeros(self, shape: Any, dtype: Any) -> np.ndarray:
        """A zeroed array to pass: contiguous, or every other element of a larger one."""
        if not self.strided:
            return np.zeros(shape, dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return np.zeros((*shape[:-1], 2 * shape[-1]), dtype)[..., ::2]

    def own(self, a: np.ndarray) -> np.ndarray:
        """A copy of ``a`` to pass (so the reference inputs stay untouched), laid out
        as :meth:`zeros` lays it out."""
        out = self.zeros(a.shape, a.dtype)
        out[...] = a
        return out

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
    mine = ins[r]
    case = call.case
    if label == "broadcast":
        x = call.own(mine)
        if not call(dist.broadcast, x, **_root_kw("src", root, call, by_group_rank)):
            return False
        _check(x, ref.broadcast(ins, root)[r], case)
    elif label == "all_reduce":
        x = call.own(mine)
        if not call(dist.all_reduce, x, op=op):
            return False
        _check(x, ref.all_reduce(ins, op)[r], case)
    elif label == "reduce":
        x = call.own(mine)
        if not call(dist.reduce, x, op=op, **_root_kw("dst", root, call, by_group_rank)):
            return False
        want = ref.reduce(ins, op, root)[r]
        _check(x, want if want is not None else mine, case)  # non-roots unchanged
    elif label == "all_gather":
        # uneven pieces: rank q contributes count + q elements
        pieces = [ref.rank_input(q, count + q, dt) for q in range(n)]
        out = [call.zeros(count + q, dt) for q in range(n)]
        if not call(dist.all_gather, out, call.own(pieces[r])):
            return False
        _check(np.concatenate(out), ref.all_gather(pieces)[r], case)
    elif label == "all_gather_into_tensor":
        out = np.zeros((n, count), dt)  # the (ws, N) form; its flat form is the same bytes
        if not call(dist.all_gather_into_tensor, out, call.own(mine)):
            return False
        _check(out, ref.all_gather(ins)[r], case)
        if not call.strided:  # in place: the input is my piece of the output
            out = np.zeros((n, count), dt)
            out[r] = mine
            call(dist.all_gather_into_tensor, out, out[r])
            _check(out, ref.all_gather(ins)[r], f"{case} (in place)")
    elif label == "gather":
        pieces = [ref.rank_input(q, count + q, dt) for q in range(n)]
        out = [call.zeros(count + q, dt) for q in range(n)] if r == root else None
        if not call(dist.gather, call.own(pieces[r]), out,
                    **_root_kw("dst", root, call, by_group_rank)):
            return False
        if r == root:
            _check(np.concatenate(out), ref.gather(pieces, root)[r], case)
    elif label == "scatter":
        pieces = [ref.rank_input(q, count + q, dt, seed=5) for q in range(n)]
        x = call.zeros(count + r, dt)
        if not call(dist.scatter, x, [call.own(p) for p in pieces] if r == root else None,
                    **_root_kw("src", root, call, by_group_rank)):
            return False
        _check(x, pieces[r], case)
    elif label == "reduce_scatter":
        sizes = [count + (q % 2) for q in range(n)]
        full = _inputs(n, sum(sizes), dt)
        inp = full[r]
        offs = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        x = call.zeros(sizes[r], dt)
        lst = [call.own(inp[offs[q]:offs[q + 1]]) for q in range(n)]
        if not call(dist.reduce_scatter, x, lst, op=op):
            return False
        _check(x, ref.reduce_scatter(full, op, sizes)[r], case)
    elif label == "reduce_scatter_tensor":
        full = _inputs(n, n * count, dt, seed=7)
        x = call.zeros(count, dt)
        if not call(dist.reduce_scatter_tensor, x, call.own(full[r]), op=op):
            return False
        want = ref.reduce_scatter(full, op, [count] * n)[r]
        _check(x, want, case)
        if not call.strided:  # in place, as NCCL allows: the output is my piece of the input
            inp = full[r].copy()
            x = inp[r * count:(r + 1) * count]
            call(dist.reduce_scatter_tensor, x, inp, op=op)
            _check(x, want, f"{case} (in place)")
    elif label in ("all_to_all", "all_to_all_list"):
        # uneven splits: rank s sends (s + q) % 3 + count elements to rank q
        send = [[(s + q) % 3 + count for q in range(n)] for s in range(n)]
        if call.algo == "bruck":  # bruck needs equal splits on every rank
            send = [[count] * n for _ in range(n)]
        ins = [ref.rank_input(s, sum(send[s]), dt, seed=3) for s in range(n)]
        recv = [send[s][r] for s in range(n)]
        inp = call.own(ins[r])
        if label == "all_to_all":
            out = call.zeros(sum(recv), dt)
            if not call(dist.all_to_all_single, out, inp, recv, send[r]):
                return False
        else:
            at = np.concatenate([[0], np.cumsum(send[r])]).astype(int)
            outs = [call.zeros(c, dt) for c in recv]
            if not call(dist.all_to_all, outs, [inp[at[q]:at[q + 1]] for q in range(n)]):
                return False
            out = np.concatenate(outs)
        _check(out, ref.all_to_all(ins, send)[r], case)
    else:
        raise ValueError(label)
    return True
