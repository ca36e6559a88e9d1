"""Rank bodies for the group's fast paths: one-shot gather/scatter/all_to_all and the
single-copy (process_vm_readv) paths of broadcast, all_gather, gather, scatter and
all_to_all. Each body checks its results against values computed from the rank
numbers and returns the paths it saw, so a test can prove the path it meant ran."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import meshcast as dist
from meshcast import ReduceOp, _world
from meshcast.algorithms import _select as table
from meshcast.testing.paths import general_path, plans_built

# A piece this large leaves the one-shot range at every world size tested and reaches
# the single-copy threshold (64 KiB per piece, per rank for all_to_all): float64.
LARGE = 140_000
SMALL = 3


def _value(src: int, dst: int, count: int) -> np.ndarray:
    """What rank ``src`` sends to rank ``dst``: distinct per pair and per element."""
    return src * 1000.0 + dst + np.arange(count) / (count + 1)


def _strided(count: int) -> np.ndarray:
    """A non-contiguous writable float64 array of ``count`` elements, which the tiny-call
    lane declines: a call given it runs on the general path."""
    return general_path(np.zeros(2 * count)[::2])


def _gather_then_scatter(root: int, sizes: list[int], make: Callable[[int], np.ndarray]
                         ) -> list[str]:
    """gather then scatter at ``root`` with rank q's piece holding ``sizes[q]`` elements
    (the root's gather list made by ``make``), checked; returns the two paths seen."""
    r = dist.get_rank()
    pg = dist.group.WORLD
    seen = []
    outs = [make(c) for c in sizes] if r == root else None
    dist.gather(_value(r, root, sizes[r]), outs, dst=root)
    seen.append(pg.last_algorithm)
    if r == root:
        for q, got in enumerate(outs):
            np.testing.assert_array_equal(got, _value(q, root, sizes[q]), f"gather {q}")
    ins = [_value(root, q, c) for q, c in enumerate(sizes)] if r == root else None
    got = np.zeros(sizes[r])
    dist.scatter(got, ins, src=root)
    seen.append(pg.last_algorithm)
    np.testing.assert_array_equal(got, _value(root, r, sizes[r]), "scatter")
    return seen


def rooted_and_gathering(base: int) -> list[str]:
    """gather, scatter, broadcast, all_gather (list, tensor, in place) with uneven pieces
    (rank r's piece holds ``base + r`` elements) at every root."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []
    sizes = [base + q for q in range(n)]
    for root in range(n):
        # gather into a list whose pieces are not contiguous, then scatter
        seen += _gather_then_scatter(root, sizes, _strided)
        # broadcast of a non-contiguous array
        x = _strided(base)
        if r == root:
            x[...] = _value(root, 0, base)
        dist.broadcast(x, src=root)
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(x, _value(root, 0, base), "broadcast")
    # all_gather with uneven pieces (list), then equal pieces into a tensor, then in place
    outs = [np.zeros(c) for c in sizes]
    dist.all_gather(outs, _value(r, 0, sizes[r]))
    seen.append(pg.last_algorithm)
    for q, got in enumerate(outs):
        np.testing.assert_array_equal(got, _value(q, 0, sizes[q]), f"all_gather {q}")
    whole = np.zeros((n, base))
    dist.all_gather_into_tensor(whole, _value(r, 1, base))
    seen.append(pg.last_algorithm)
    for q in range(n):
        np.testing.assert_array_equal(whole[q], _value(q, 1, base), "all_gather_into_tensor")
    whole = np.zeros((n, base))
    whole[r] = _value(r, 2, base)
    dist.all_gather_into_tensor(whole, whole[r])
    seen.append(pg.last_algorithm)
    for q in range(n):
        np.testing.assert_array_equal(whole[q], _value(q, 2, base), "in place")
    return seen


def all_to_alls(base: int) -> list[str]:
    """all_to_all_single with uneven splits (rank s sends ``base + s + d`` elements to d)
    and the list form, checked piece by piece."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []
    send = [base + r + d for d in range(n)]
    recv = [base + s + r for s in range(n)]
    inp = np.concatenate([_value(r, d, c) for d, c in enumerate(send)])
    out = np.zeros(sum(recv))
    dist.all_to_all_single(out, inp, recv, send)
    seen.append(pg.last_algorithm)
    at = 0
    for s, c in enumerate(recv):
        np.testing.assert_array_equal(out[at:at + c], _value(s, r, c), f"piece from {s}")
        at += c
    outs = [_strided(c) for c in recv]
    dist.all_to_all(outs, [_value(r, d, c) for d, c in enumerate(send)])
    seen.append(pg.last_algorithm)
    for s, got in enumerate(outs):
        np.testing.assert_array_equal(got, _value(s, r, recv[s]), f"list piece from {s}")
    return seen


def algo_env_picks_schedules() -> list[str]:
    """Under MESHCAST_ALGO=all_reduce:ring;broadcast:tree even tiny calls run the schedules
    it names (the one-shot paths are not schedules)."""
    n = dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    x = np.ones(4)
    dist.all_reduce(x)
    seen.append(pg.last_algorithm)
    assert (x == n).all(), x
    dist.broadcast(x, src=0)
    seen.append(pg.last_algorithm)
    y = np.zeros(4 * n)
    dist.all_gather_into_tensor(y, x)  # not named: still the fast path
    seen.append(pg.last_algorithm)
    return seen


def large_all_reduces() -> list[str]:
    """all_reduce past the one-shot sizes (the single-copy path when the machine allows it):
    SUM/MAX/AVG/PRODUCT in rank order, float16 through its float32 working copy, a
    non-contiguous input; every rank must hold the NumPy reference, bit for bit."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []
    count = 600_000  # 4.8 MB of float64, 2.4 MB as float16 in its float32 working copy

    def data(q: int, dtype: str) -> np.ndarray:
        rng = np.random.default_rng(q)
        return rng.standard_normal(count).astype(dtype)

    for dtype, op in (("float64", dist.ReduceOp.SUM), ("float64", dist.ReduceOp.MAX),
                      ("float32", dist.ReduceOp.AVG), ("float64", dist.ReduceOp.PRODUCT),
                      ("float16", dist.ReduceOp.SUM)):
        x = data(r, dtype) if dtype != "float32" else np.repeat(data(r, dtype), 2)
        inputs = [data(q, dtype) if dtype != "float32" else np.repeat(data(q, dtype), 2)
                  for q in range(n)]
        work = [a.astype(np.float32) if dtype == "float16" else a for a in inputs]
        want = work[0].copy()
        for a in work[1:]:
            if op == dist.ReduceOp.MAX:
                np.maximum(want, a, out=want)
            elif op == dist.ReduceOp.PRODUCT:
                np.multiply(want, a, out=want)
            else:
                np.add(want, a, out=want)
        if op == dist.ReduceOp.AVG:
            want /= n
        want = want.astype(dtype)
        dist.all_reduce(x, op=op)
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(x, want, f"{dtype} {op}")
    strided = np.zeros(2 * count)
    strided[::2] = data(r, "float64")
    view = general_path(strided[::2])
    dist.all_reduce(view)
    seen.append(pg.last_algorithm)
    np.testing.assert_array_equal(view, sum(data(q, "float64") for q in range(n)) if n == 2
                                  else view)  # n > 2: summation order checked above
    # reduce past the one-shot sizes (the root reads everyone's array): every root,
    # in place on the root, the others' arrays untouched
    for root in range(n):
        for dtype, op in (("float64", dist.ReduceOp.SUM), ("float32", dist.ReduceOp.AVG),
                          ("float16", dist.ReduceOp.MAX)):
            x = data(r, dtype)
            work = [data(q, dtype).astype(np.float32 if dtype == "float16" else dtype)
                    for q in range(n)]
            if op == dist.ReduceOp.MAX:
                want = np.maximum.reduce(work)
            else:
                want = work[0].copy()
                for a in work[1:]:
                    want += a
                if op == dist.ReduceOp.AVG:
                    want /= n
            dist.reduce(x, dst=root, op=op)
            seen.append(pg.last_algorithm)
            np.testing.assert_array_equal(x, want.astype(dtype) if r == root else data(r, dtype),
                                          f"reduce to {root}, {dtype} {op}")
    # rank 0 on the tiny-call lane's entry (contiguous), the others on the general path
    strided[::2] = data(r, "float64")
    mixed = strided[::2].copy() if r == 0 else general_path(strided[::2])
    dist.all_reduce(mixed, op=dist.ReduceOp.MIN)
    seen.append(pg.last_algorithm)
    np.testing.assert_array_equal(mixed, np.minimum.reduce([data(q, "float64")
                                                            for q in range(n)]), "mixed")
    return seen


def chunked_and_in_place(base: int) -> list[str]:
    """List collectives on pieces of one array (read and written in place, no staging
    copy) and all_to_all in place, checked piece by piece."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []
    # all_gather into the chunks of one array
    whole = np.zeros(n * base)
    dist.all_gather(np.split(whole, n), _value(r, 0, base))
    seen.append(pg.last_algorithm)
    for q in range(n):
        np.testing.assert_array_equal(whole[q * base:(q + 1) * base], _value(q, 0, base))
    # gather into chunks (every rank writes its piece straight into the root's array)
    for root in (0, n - 1):
        whole = np.zeros(n * base)
        dist.gather(_value(r, root, base), np.split(whole, n) if r == root else None, dst=root)
        seen.append(pg.last_algorithm)
        if r == root:
            for q in range(n):
                np.testing.assert_array_equal(whole[q * base:(q + 1) * base],
                                              _value(q, root, base), f"gather chunk {q}")
    # scatter from chunks, reduce_scatter of chunks
    for root in (0, n - 1):
        src = np.concatenate([_value(root, q, base) for q in range(n)])
        got = np.zeros(base)
        dist.scatter(got, np.split(src, n) if r == root else None, src=root)
        np.testing.assert_array_equal(got, _value(root, r, base), "scatter chunks")
    ins = np.concatenate([_value(r, q, base) for q in range(n)])
    got = np.zeros(base)
    dist.reduce_scatter(got, np.split(ins, n))
    np.testing.assert_array_equal(got, sum(_value(q, r, base) for q in range(n)))
    seen.append(pg.last_algorithm)
    # all_to_all: chunked lists, then the same list as input and output, then single
    for same in (False, True):
        x = np.concatenate([_value(r, d, base) for d in range(n)])
        out = x if same else np.zeros(n * base)
        dist.all_to_all(np.split(out, n), np.split(x, n))
        seen.append(pg.last_algorithm)
        for s in range(n):
            np.testing.assert_array_equal(out[s * base:(s + 1) * base], _value(s, r, base),
                                          f"all_to_all same={same} from {s}")
    x = np.concatenate([_value(r, d, base) for d in range(n)])
    dist.all_to_all_single(x, x)
    seen.append(pg.last_algorithm)
    for s in range(n):
        np.testing.assert_array_equal(x[s * base:(s + 1) * base], _value(s, r, base))
    return seen


def single_copy_enabled() -> bool:
    """Whether the ranks may read each other's memory (process_vm_readv was probed at
    bring-up; without ptrace permission between them the single-copy paths are off)."""
    return dist.group.WORLD.transport.cma_min_bytes > 0


def all_to_all_lane(base: int) -> list[str]:
    """all_to_all_single with equal splits: rank 0 takes the tiny-call lane (NumPy, no
    split sizes) while the others pass the same splits explicitly (the general path);
    then every rank keeps ``base`` more elements for itself than it sends (uneven
    counts, found only after the entry: the lane hands the call over); then a call
    queued behind async work. Returns the lane plans and the paths seen."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []
    for k in range(3):  # both parities of the one-shot regions, twice
        c = 2 + k
        inp = np.concatenate([_value(r, d, c) + k for d in range(n)]).reshape(n, c)
        out = np.zeros((n, c))
        splits = None if r == 0 else [1] * n
        dist.all_to_all_single(out, inp, splits, splits)
        seen.append(pg.last_algorithm)
        for s in range(n):
            np.testing.assert_array_equal(out[s], _value(s, r, c) + k, f"round {k} from {s}")
    # Rank r keeps base + 3 elements for itself and exchanges 3 with each other rank;
    # rank 0 passes no split sizes whenever its own split is even.
    for keeper in range(n):
        sizes = [3 + (base if d == keeper else 0) for d in range(n)]
        mine = sizes if r == keeper else [3] * n
        inp = np.concatenate([_value(r, d, c) for d, c in enumerate(mine)])
        out = np.zeros(inp.size)
        even = len(set(mine)) == 1
        dist.all_to_all_single(out, inp, None if even else mine, None if even else mine)
        seen.append(pg.last_algorithm)
        at = 0
        for s, c in enumerate(mine):
            np.testing.assert_array_equal(out[at:at + c], _value(s, r, c), f"uneven from {s}")
            at += c
    # Large equal splits on every rank: entered by the lane, finished by the general path.
    inp = np.concatenate([_value(r, d, base) for d in range(n)])
    out = np.zeros(inp.size)
    dist.all_to_all_single(out, inp)
    seen.append(pg.last_algorithm)
    for s in range(n):
        np.testing.assert_array_equal(out[s * base:(s + 1) * base], _value(s, r, base))
    # Behind pending async work the lane steps aside: the call still runs in order.
    big = np.full(300_000, r, np.float64)
    work = dist.all_reduce(big, async_op=True)
    inp = np.arange(2 * n, dtype=np.int32) + 100 * r
    out = np.zeros_like(inp)
    dist.all_to_all_single(out, inp)
    work.wait()
    assert (big == n * (n - 1) // 2).all()
    np.testing.assert_array_equal(out.reshape(n, 2), [[100 * s + 2 * r, 100 * s + 2 * r + 1]
                                                      for s in range(n)])
    assert any(key[0] == "all_to_all" and plan for key, plan in pg.lane.plans.items())
    return seen


def rooted_lane(base: int) -> list[str]:
    """gather and scatter on the tiny-call lane (NumPy pieces all shaped like the rank's
    array), mixed with ranks on the general path (non-contiguous arrays), at every root
    and with the default root; then uneven pieces (the last rank's holds ``base``
    elements, a legal uneven call the lane ranks only learn of after the entry);
    then a call queued behind async work. Returns the paths seen on this rank."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []
    for k in range(2 * n):
        root = k % n
        lane = (r + k) % 2 == 0  # alternately on the lane and on the general path
        c = 3 + k % 2
        mine = _value(r, root, c)
        if not lane:
            mine = general_path(np.repeat(mine, 2)[::2])  # non-contiguous: the general path
        outs = [np.zeros(c) if lane else _strided(c) for _ in range(n)] if r == root else None
        dist.gather(mine, outs, dst=None if root == 0 and k % 3 == 0 else root)
        seen.append(pg.last_algorithm)
        if r == root:
            for q, got in enumerate(outs):
                np.testing.assert_array_equal(got, _value(q, root, c), f"gather {k} from {q}")
        ins = [_value(root, q, c) for q in range(n)] if r == root else None
        got = np.zeros(c) if lane else _strided(c)
        dist.scatter(got, ins, src=root)
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(got, _value(root, r, c), f"scatter {k}")
    # Uneven: the last rank's piece holds `base` elements; the root's lists say so.
    sizes = [3] * (n - 1) + [base]
    for root in range(n - 1):
        seen += _gather_then_scatter(root, sizes, np.zeros)
    # Behind pending async work the lane steps aside: the calls still run in order.
    big = np.full(300_000, r, np.float64)
    work = dist.all_reduce(big, async_op=True)
    outs = [np.zeros(2) for _ in range(n)] if r == 0 else None
    dist.gather(np.full(2, r + 0.5), outs, dst=0)
    work.wait()
    assert (big == n * (n - 1) // 2).all()
    if r == 0:
        np.testing.assert_array_equal(outs, [[q + 0.5] * 2 for q in range(n)])
    lanes = {key[0] for key, plan in pg.lane.plans.items() if plan}
    assert lanes >= {"gather", "scatter"}, lanes
    return seen


def lanes_past_one_shot(base: int) -> list[str]:
    """all_gather_into_tensor past the one-shot sizes: rank 0 on the lane (contiguous
    NumPy), the others on the general path (a non-contiguous input); then every rank
    on the lane, in place; reduce_scatter_tensor the same way; then rank 1 passing a
    different size, which every rank must refuse alike. Returns the paths seen."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    mine = _value(r, 0, base)
    inp = mine if r == 0 else general_path(np.repeat(mine, 2)[::2])
    whole = np.zeros((n, base))
    dist.all_gather_into_tensor(whole, inp)
    seen.append(pg.last_algorithm)
    for q in range(n):
        np.testing.assert_array_equal(whole[q], _value(q, 0, base), f"mixed, piece {q}")
    whole = np.zeros((n, base))
    whole[r] = _value(r, 1, base)
    dist.all_gather_into_tensor(whole, whole[r])
    seen.append(pg.last_algorithm)
    for q in range(n):
        np.testing.assert_array_equal(whole[q], _value(q, 1, base), f"in place, piece {q}")
    # reduce_scatter_tensor: lane (contiguous) and general path (non-contiguous) mixed,
    # SUM, AVG and MAX against NumPy, bit for bit
    full = [np.concatenate([_value(q, d, base) for d in range(n)]) for q in range(n)]
    for op, reduce in ((dist.ReduceOp.SUM, np.add.reduce), (dist.ReduceOp.MAX, np.maximum.reduce),
                       (dist.ReduceOp.AVG, lambda a: np.add.reduce(a) / n)):
        inp = full[r] if r == 0 else general_path(np.repeat(full[r], 2)[::2])
        piece = np.zeros(base)
        dist.reduce_scatter_tensor(piece, inp, op=op)
        seen.append(pg.last_algorithm)
        want = reduce([f[r * base:(r + 1) * base] for f in full])
        np.testing.assert_array_equal(piece, want, f"reduce_scatter {op}")
    size = base + (1 if r == 1 else 0)
    try:
        dist.all_gather_into_tensor(np.zeros(n * size), np.ones(size))
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'count' in str(exc) or 'layout' in str(exc)}")
    return seen


# (the root's pieces back to back, the root on the lane, the others on the lane)
# (the root's pieces back to back, the root on the lane, the others on the lane, the
# root in place: its own piece is its input or output, so it moves a part of every
# other rank's piece and says so in its exposure, single_copy.SPLIT)
_PAST_ONE_SHOT_CASES = [(True, True, True, False), (False, True, True, False),
                        (True, False, True, False), (False, True, False, False),
                        (True, True, True, True), (False, True, True, True),
                        (False, True, False, True)]


def _single_then_refused(pg: Any, kind: str, seen: list[str], call: Callable[[], None]
                         ) -> list[str]:
    """Check that the lane ran a single-copy ``kind`` (its plan says so), then make
    ``call``, which every rank must refuse alike; ``seen`` with what it raised."""
    singles = [key for key, plan in pg.lane.plans.items() if key[0] == kind and plan and plan[8]]
    assert singles, f"the lane never took a {kind} past the one-shot sizes"
    try:
        call()
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'count' in str(exc) or 'layout' in str(exc)}")
    return seen


@contextlib.contextmanager
def _rooted_runs(root_of: Callable[[], int], piece: int) -> Iterator[dict[int, str]]:
    """While in the block, what ran each single-copy gather or scatter (``piece`` bytes a
    rank) after its entry, by sequence number: "program" (its registered cma schedule's,
    after the lane's entry or the general path's) or "body" (paths/single_copy's Python
    body), with " split" where that program is the root's splitting one (the root,
    ``root_of()``, copies some of the others' bytes; another rank less than its piece)."""
    from meshcast.algorithms import _program as prog
    from meshcast.paths import single_copy

    runs: dict[int, str] = {}
    saved = single_copy.run_after_entry, single_copy.run_program, single_copy.finish

    def moved(copy: Any) -> int:
        """The bytes a program copies from or into the peers' exposed buffers."""
        if copy.packed is None:
            records = np.array(copy.steps.program.records, np.int64).reshape(-1, 9)
        else:
            words = np.frombuffer(copy.packed, np.int64)
            records = words[6:6 + 9 * int(words[3])].reshape(-1, 9)
        exposed = (np.isin(records[:, 0], (prog.GET, prog.WRITE))
                   & (records[:, 2] == prog.SPACE_CODES["exposed"]))
        return int(records[exposed, 4].sum())

    def label(group: Any, seq: int, copy: Any) -> None:
        at_root = group._rank == root_of()
        split = moved(copy) > 0 if at_root else moved(copy) < piece
        runs.setdefault(seq, "program split" if split else "program")

    def after_entry(group: Any, seq: int, what: Any, copy: Any, *args: Any) -> Any:
        label(group, seq, copy)
        return saved[0](group, seq, what, copy, *args)

    def program(group: Any, seq: int, what: Any, copy: Any, *args: Any, **kw: Any) -> Any:
        label(group, seq, copy)
        return saved[1](group, seq, what, copy, *args, **kw)

    def body(group: Any, *args: Any) -> Any:
        runs.setdefault(group.arena.seq, "body")
        return saved[2](group, *args)

    single_copy.run_after_entry, single_copy.run_program, single_copy.finish = (
        after_entry, program, body)
    try:
        yield runs
    finally:
        single_copy.run_after_entry, single_copy.run_program, single_copy.finish = saved


def gather_past_one_shot(base: int) -> list[str]:
    """gather past the one-shot sizes, where the lane runs the single-copy gather: the
    root's pieces back to back and apart (every rank writes its own into them, through
    the root's table of pieces), the root in place (it reads part of every piece); the
    root on the general path (a non-contiguous input) with the others on the lane, and
    the other way round; then rank 1 passing another size, which every rank must refuse
    alike. Returns the paths seen on this rank."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    root = 0
    with _rooted_runs(lambda: root, base * 8) as runs:
        for k, (together, lane_root, lane_others, in_place) in enumerate(_PAST_ONE_SHOT_CASES):
            root = k % n
            mine = _value(r, root, base)
            if not (lane_root if r == root else lane_others):
                mine = general_path(np.repeat(mine, 2)[::2])  # non-contiguous: the general path
            outs = None
            if r == root:
                outs = (list(np.zeros((n, base))) if together
                        else [np.zeros(base) for _ in range(n)])
                if in_place:
                    outs[root][...] = mine
                    mine = outs[root]
            dist.gather(mine, outs, dst=root)
            seen.append(f"{pg.last_algorithm} {runs[max(runs)]}")
            if r == root:
                for q, got in enumerate(outs):
                    np.testing.assert_array_equal(got, _value(q, root, base),
                                                  f"gather {k} from {q}")
    outs = [np.zeros(base) for _ in range(n)] if r == 0 else None
    return _single_then_refused(pg, "gather", seen, lambda: dist.gather(
        np.ones(base + (1 if r == 1 else 0)), outs, dst=0))


def scatter_past_one_shot(base: int) -> list[str]:
    """scatter past the one-shot sizes, where the lane runs the single-copy scatter: the
    root's pieces back to back and apart (through its table of pieces, whose entries
    the others read their own from, on the lane or on the general path), the root in
    place (it writes part of every rank's piece into that rank's output); the root on
    the general path (a non-contiguous output) with the others on the lane, and the
    other way round; then rank 1 passing another size, which every rank must refuse
    alike. Returns the paths seen on this rank."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    root = 0
    with _rooted_runs(lambda: root, base * 8) as runs:
        for k, (together, lane_root, lane_others, in_place) in enumerate(_PAST_ONE_SHOT_CASES):
            root = k % n
            ins = None
            if r == root:
                ins = [_value(root, q, base) for q in range(n)]
                if together:
                    ins = list(np.stack(ins))
            got = (np.zeros(base) if (lane_root if r == root else lane_others)
                   else _strided(base))
            if in_place and r == root:
                got = ins[root]
            dist.scatter(got, ins, src=root)
            seen.append(f"{pg.last_algorithm} {runs[max(runs)]}")
            np.testing.assert_array_equal(got, _value(root, r, base), f"scatter {k}")
    ins = [np.ones(base) for _ in range(n)] if r == 0 else None
    return _single_then_refused(pg, "scatter", seen, lambda: dist.scatter(
        np.zeros(base + (1 if r == 1 else 0)), ins, src=0))


def gather_without_regions(base: int) -> list[str]:
    """Single-copy gathers in a group without one-shot regions (MESHCAST_SLOT_BYTES=0),
    whose root has nowhere to publish a table of its pieces: with its pieces apart it
    reads each itself; back to back, every rank writes its own. Returns the paths."""
    r, n = dist.get_rank(), dist.get_world_size()
    saved = os.environ.get("MESHCAST_SLOT_BYTES")
    os.environ["MESHCAST_SLOT_BYTES"] = "0"
    try:
        group = dist.new_group(list(range(n)))
    finally:
        if saved is None:
            del os.environ["MESHCAST_SLOT_BYTES"]
        else:
            os.environ["MESHCAST_SLOT_BYTES"] = saved
    seen = []
    for together in (False, True):
        outs = None
        if r == 0:
            outs = list(np.zeros((n, base))) if together else [np.zeros(base) for _ in range(n)]
        dist.gather(_value(r, 0, base), outs, dst=0, group=group)
        seen.append(group.last_algorithm)
        if r == 0:
            for q, got in enumerate(outs):
                np.testing.assert_array_equal(got, _value(q, 0, base), f"piece {q}")
    return seen


def random_mix(calls: int, seed: int) -> int:
    """``calls`` collectives and exchanges drawn at random (the same draws on every rank):
    kinds, sizes across the one-shot / single-copy / schedule boundaries, roots, odd
    ranks passing non-contiguous arrays (the general path) while even ranks take the
    lanes, async all_reduces left in flight, batches of sends and receives. Every
    result is checked; returns the number of calls made."""
    r, n = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(seed)
    pending: list = []
    total = n * (n + 1) / 2
    for _ in range(calls):
        kind = int(rng.integers(0, 10))
        size = int(rng.choice([0, 1, 3, 64, 1000, 20_000, 70_000, 300_000]))
        general = bool(rng.integers(0, 2)) and r % 2 == 1
        root = int(rng.integers(0, n))

        def arr(values: np.ndarray, general: bool = general) -> np.ndarray:
            if not general:
                return np.array(values, dtype=np.float64)
            a = general_path(np.zeros(2 * len(values))[::2])
            a[...] = values
            return a

        if kind == 0:
            x = arr(np.full(size, r + 1.0))
            dist.all_reduce(x)
            assert (x == total).all()
        elif kind == 1:
            x = arr(np.full(size, float(r)))
            dist.broadcast(x, src=root)
            assert (x == root).all()
        elif kind == 2:
            out = np.zeros(size * n)
            dist.all_gather_into_tensor(out, arr(np.full(size, float(r))))
            assert (out.reshape(n, size) == np.arange(n)[:, None]).all()
        elif kind == 3:
            out = np.zeros(size * n)
            dist.all_to_all_single(out, arr(np.repeat(np.arange(n) + 10.0 * r, size)))
            assert (out.reshape(n, size) == (10.0 * np.arange(n) + r)[:, None]).all()
        elif kind == 4:
            outs = [np.zeros(size) for _ in range(n)] if r == root else None
            dist.gather(arr(np.full(size, float(r))), outs, dst=root)
            assert r != root or all((o == q).all() for q, o in enumerate(outs))
        elif kind == 5:
            ins = [np.full(size, float(q)) for q in range(n)] if r == root else None
            x = arr(np.zeros(size))
            dist.scatter(x, ins, src=root)
            assert (x == r).all()
        elif kind == 6:
            out = np.zeros(size)
            dist.reduce_scatter_tensor(out, arr(np.full(size * n, r + 1.0)))
            assert (out == total).all()
        elif kind == 7:
            got = np.zeros(size)
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, np.full(size, float(r)),
                                                        (r + 1) % n),
                                             dist.P2POp(dist.irecv, got, (r - 1) % n)]):
                w.wait()
            assert (got == (r - 1) % n).all()
        elif kind == 8:  # one-sided off the root when tiny: the next call settles it
            x = arr(np.full(size, r + 1.0))
            dist.reduce(x, dst=root)
            assert r != root or (x == total).all()
        else:
            x = np.ones(size)
            pending.append((dist.all_reduce(x, async_op=True), x))
            if len(pending) > 3:
                w, x = pending.pop(0)
                w.wait()
                assert (x == n).all()
    for w, x in pending:
        w.wait()
        assert (x == n).all()
    return calls


def scatter_root_pieces(sizes: tuple[int, ...]) -> list[str]:
    """Lane scatters on both sides of _select.SCATTER_ROOT_DIRECT_BYTES (the root stages
    only the others' pieces and copies its own straight into place), at every root,
    each checked against the pieces the root sent; returns what ran."""
    r, n = dist.get_rank(), dist.get_world_size()
    seen = []
    for count in sizes:
        for root in range(n):
            pieces = [np.arange(count, dtype=np.float32) + 1000 * q + 7 * root
                      for q in range(n)] if r == root else None
            out = np.full(count, -1, np.float32)
            for _ in range(2):  # the plan cached, then used
                dist.scatter(out, pieces, src=root)
                want = np.arange(count, dtype=np.float32) + 1000 * r + 7 * root
                assert np.array_equal(out, want), (count, root, r, out[:4], want[:4])
                out[:] = -1
            seen.append(dist.group.WORLD.last_algorithm)
        # The root's out is its own piece of the list (the compiled entry copies it
        # onto itself), and pieces whose dtype equals out's without being the same
        # object (metadata): the entry compares dtypes, not only their identity.
        tagged = np.dtype(np.float32, metadata={"tag": 1})
        for root in range(n):
            pieces = [(np.arange(count, dtype=np.float32) + 100 * q).view(tagged)
                      for q in range(n)] if r == root else None
            out = pieces[root] if r == root else np.full(count, -1, np.float32)
            dist.scatter(out, pieces, src=root)
            want = np.arange(count, dtype=np.float32) + 100 * r
            assert np.array_equal(out, want), (count, root, r, out[:4], want[:4])
            seen.append(dist.group.WORLD.last_algorithm)
    return seen


def all_gather_list_beside_the_rest() -> list[str]:
    """torch's all_gather into a list (the lane's all_gather_list) meeting, in one call,
    all_gather_into_tensor on other ranks, and then a rank whose list holds a strided
    piece (the group's path): every result checked; returns what ran."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    for kind in ("list or tensor", "one strided piece"):
        mine = _value(r, 3, 5)
        if kind == "list or tensor" and r % 2:
            whole = np.zeros((n, 5))
            dist.all_gather_into_tensor(whole, mine)
            got = list(whole)
        else:
            got = [np.zeros(5) for _ in range(n)]
            if kind == "one strided piece" and r == 0:
                got[-1] = _strided(5)
            dist.all_gather(got, mine)
        seen.append(pg.last_algorithm)
        for q in range(n):
            np.testing.assert_array_equal(got[q], _value(q, 3, 5), f"{kind}: piece {q}")
    return seen


def all_gather_list_past_one_shot(base: int) -> list[str]:
    """torch's all_gather into a list of ``base`` float64 a piece (past the one-shot
    sizes), with the group's all_gather made to fail: every rank on a list; lists beside
    all_gather_into_tensor on odd ranks; each rank late in turn; my own piece the input
    (in place); where the compiled entry is built, async, inline and on the worker
    thread (without it, async single-copy calls take the group's path). Then, with the group's path
    back, rank 0 on it (a strided piece) beside the others' lists, and last rank 1
    passing another size: the same MismatchError from every rank. Every result checked;
    returns the paths seen and the verdict."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []

    def round_of(case: str, late: int | None = None) -> None:
        if r == late:
            time.sleep(0.05)
        mine = _value(r, 7, base)
        if case == "tensor" and r % 2:
            whole = np.zeros((n, base))
            dist.all_gather_into_tensor(whole, mine)
            got = list(whole)
        else:
            got = [np.zeros(base) for _ in range(n)]
            if case == "strided" and r == 0:
                got[-1] = _strided(base)
            if case == "in place":
                got[r][:] = mine
                mine = got[r]
            if case == "async":
                dist.all_gather(got, mine, async_op=True).wait()
            else:
                dist.all_gather(got, mine)
        seen.append(pg.last_algorithm)
        for q in range(n):
            np.testing.assert_array_equal(got[q], _value(q, 7, base), f"{case}: piece {q}")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    pg.all_gather = refuse  # an instance attribute
    inline = table.ASYNC_INLINE_MAX_BYTES
    try:
        for case in ("list", "tensor", "in place"):
            round_of(case)
        for late in range(n):
            round_of("list", late)
        for most in (1 << 40, 0) if pg.arena.compiled_rooted is not None else ():
            table.ASYNC_INLINE_MAX_BYTES = most  # inline when all are in, then the worker
            round_of("async")
            round_of("async", n - 1)
    finally:
        table.ASYNC_INLINE_MAX_BYTES = inline
        del pg.all_gather
    round_of("strided")
    size = base + (1 if r == 1 else 0)
    try:
        dist.all_gather([np.zeros(size) for _ in range(n)], np.ones(size))
        seen.append("no MismatchError")
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'count' in str(exc) or 'layout' in str(exc)}")
    return seen


def reduce_scatter_list_single(base: int) -> list[str]:
    """reduce_scatter of a list past the one-shot sizes (``base`` float64 a piece) runs
    the ``cma`` program whose input is the list's pieces, with nothing concatenated
    (the lane's staging holds no input): with the group's reduce_scatter made to fail,
    SUM over separate arrays and over slices of one, AVG, each rank late in turn; then,
    with the group's path back, rank 0 on it (a strided piece) beside the others'
    lists; last, rank 1 passing another size: the same MismatchError from every rank.
    Every result checked; returns the paths seen and the verdict."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []

    def round_of(case: str, late: int | None = None, op: Any = dist.ReduceOp.SUM) -> None:
        if r == late:
            time.sleep(0.05)
        if case == "slices":
            pieces = list(np.concatenate([_value(r, d, base) for d in range(n)]).reshape(n, base))
        else:
            pieces = [_value(r, d, base) for d in range(n)]
        if case == "strided" and r == 0:
            pieces[-1] = _strided(base)
            pieces[-1][:] = _value(r, n - 1, base)
        out = np.zeros(base)
        dist.reduce_scatter(out, pieces, op=op)
        want = np.add.reduce([_value(q, r, base) for q in range(n)])
        if op is dist.ReduceOp.AVG:
            want = want / n
        np.testing.assert_allclose(out, want, rtol=1e-12, err_msg=case)
        seen.append(pg.last_algorithm if case != "strided" or r else "general")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    pg.reduce_scatter = refuse  # an instance attribute
    try:
        round_of("list")
        round_of("slices")
        round_of("list", op=dist.ReduceOp.AVG)
        for late in range(n):
            round_of("list", late)
    finally:
        del pg.reduce_scatter
    assert "input" not in pg.lane._staging._kept, "the pieces were concatenated"
    round_of("strided")
    size = base + (1 if r == 1 else 0)
    try:
        dist.reduce_scatter(np.zeros(size), [np.ones(size) for _ in range(n)])
        seen.append("no MismatchError")
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'count' in str(exc) or 'layout' in str(exc)}")
    return seen


def list_forms_staged(base: int) -> list[str]:
    """all_to_all of lists (equal pieces, read and written where they lie; then MoE's
    uneven rows, which the lane runs on the pieces' concatenation in staging arrays it
    keeps), synchronous, and reduce_scatter of a list past the one-shot sizes (its
    pieces read where they lie): sizes that grow, shrink and grow again, so that a call
    reads a staging array an earlier, larger call left, with the group's reduce_scatter
    and all_to_all made to fail. Every result checked; returns the paths seen."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    pg.reduce_scatter = pg.all_to_all = refuse  # instance attributes
    try:
        for k, count in enumerate((base, 2 * base, base, 2 * base)):
            pieces = [_value(r, d, count) + k for d in range(n)]
            out = np.zeros(count)
            dist.reduce_scatter(out, pieces)
            want = np.add.reduce([_value(q, r, count) + k for q in range(n)])
            np.testing.assert_allclose(out, want, rtol=1e-12, err_msg=f"reduce_scatter {k}")
            seen.append(pg.last_algorithm)
            outs = [np.zeros((count, 1)) for _ in range(n)]
            dist.all_to_all(outs, [(_value(r, d, count) + k)[:, None] for d in range(n)])
            for q in range(n):
                np.testing.assert_array_equal(outs[q][:, 0], _value(q, r, count) + k,
                                              f"all_to_all {k} from {q}")
            seen.append(pg.last_algorithm)
        for k in range(3):  # rows rank q sends rank d: q + d + k + 1, so every call differs
            outs = [np.zeros((q + r + k + 1, 3)) for q in range(n)]
            ins = [np.full((r + d + k + 1, 3), 100.0 * r + d + k) for d in range(n)]
            dist.all_to_all(outs, ins)
            for q in range(n):
                assert (outs[q] == 100.0 * q + r + k).all(), (k, q, outs[q][:2])
    finally:
        del pg.reduce_scatter, pg.all_to_all
    return seen


def all_to_all_lists_where_they_lie(counts: list[int]) -> list[str]:
    """all_to_all of two lists of pieces all alike, ``counts`` float64 rows a piece in
    turn (one-shot, then single-copy), runs the registered programs with both sides
    given as the lists: nothing is concatenated (the lane's staging holds no array),
    with the group's all_to_all made to fail. At each size: 2-D pieces, slices of one
    array, each rank late in turn, and rank 0 passing one tensor (all_to_all_single)
    beside the others' lists. Then two async calls outstanding at each size (past
    one-shot, with the staged way made to fail). Then, with the group's path back: the lists in place
    (outputs the inputs), rank 1 splitting unevenly (a legal call: the others' lists
    are handed over after the entry), and rank 1 passing another size (the same
    MismatchError everywhere). Every result checked; returns the paths seen and the
    verdict."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []

    def check(outs: list[np.ndarray], count: int, case: str, k: int = 0) -> None:
        for q in range(n):
            np.testing.assert_array_equal(outs[q].reshape(-1)[:count],
                                          _value(q, r, count) + k, f"{case}: {count} from {q}")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path or the staged way ran")

    pg.all_to_all = pg.lane._list_staged = refuse  # instance attributes
    try:
        for count in counts:
            for late in (None, *range(n)):
                if r == late:
                    time.sleep(0.05)
                outs = [np.zeros(count) for _ in range(n)]
                dist.all_to_all(outs, [_value(r, d, count) for d in range(n)])
                check(outs, count, f"late {late}")
                seen.append(pg.last_algorithm)
            outs = [np.zeros((count, 1)) for _ in range(n)]  # 2-D pieces
            dist.all_to_all(outs, [_value(r, d, count)[:, None] for d in range(n)])
            check(outs, count, "2-D")
            whole = np.concatenate([_value(r, d, count) for d in range(n)])
            got = np.zeros(n * count)
            if r == 0:  # one tensor beside the others' lists
                dist.all_to_all_single(got, whole)
                check(list(got.reshape(n, count)), count, "tensor")
            else:  # slices of one array
                outs = list(got.reshape(n, count))
                dist.all_to_all(outs, list(whole.reshape(n, count)))
                check(outs, count, "slices")
            seen.append(pg.last_algorithm)
    finally:
        del pg.all_to_all, pg.lane._list_staged
    for count in counts:  # async, rank 0 late: two calls outstanding, then both waited for
        if count == counts[-1]:  # (past one-shot: the pieces where they lie)
            pg.lane._list_staged = refuse
        try:
            if r == 0:
                time.sleep(0.05)
            pairs = [([np.zeros(count) for _ in range(n)],
                      [_value(r, d, count) + k for d in range(n)]) for k in (0, 1)]
            works = [dist.all_to_all(o, i, async_op=True) for o, i in pairs]
            for work in works:
                work.wait()
            for k, (o, _) in enumerate(pairs):
                check(o, count, f"async {k}", k)
        finally:
            pg.lane.__dict__.pop("_list_staged", None)
    kept = pg.lane._staging._kept
    assert not kept, f"the pieces were concatenated: {list(kept)}"
    count = counts[-1]
    pieces = [_value(r, d, count) for d in range(n)]
    dist.all_to_all(pieces, pieces)  # in place
    check(pieces, count, "in place")
    for count in counts:  # rank 1 keeps 3 more elements for itself
        mine = [count + (3 if r == 1 and d == 1 else 0) for d in range(n)]
        ins = [_value(r, d, c) for d, c in enumerate(mine)]
        if r == 1:
            got = np.zeros(sum(mine))
            dist.all_to_all_single(got, np.concatenate(ins), mine, mine)
            outs = np.split(got, np.cumsum(mine)[:-1])
        else:
            outs = [np.zeros(count) for _ in range(n)]
            dist.all_to_all(outs, ins)
        for q in range(n):
            np.testing.assert_array_equal(outs[q], _value(q, r, mine[q]), f"uneven from {q}")
    size = counts[-1] + (1 if r == 1 else 0)
    try:
        dist.all_to_all([np.zeros(size) for _ in range(n)], [np.ones(size) for _ in range(n)])
        seen.append("no MismatchError")
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'expects' in str(exc)}")
    return seen


def strided_arrays_on_the_lane(counts: list[int]) -> list[str]:
    """Arrays that are not C-contiguous take the tiny-call lane through contiguous copies
    (the output's written back), with the group's forms made to fail, at ``counts``
    float64 elements in turn (one-shot, then single-copy): all_reduce of a column,
    broadcast (and, one-shot, reduce) of strided views from every root, all_gather_into_tensor with
    a strided input and with a strided output, reduce_scatter_tensor of a strided input,
    all_to_all_single of a strided input and in place. Every result checked against
    NumPy; returns the paths seen."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    def strided(a: np.ndarray) -> np.ndarray:
        out = np.zeros((a.size, 2))[:, 1]
        out[...] = a
        return out

    kinds = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")
    for kind in kinds:
        setattr(pg, kind, refuse)  # instance attributes
    try:
        for count in counts:
            x = strided(_value(r, 0, count))
            dist.all_reduce(x)
            np.testing.assert_array_equal(x, np.add.reduce([_value(q, 0, count)
                                                            for q in range(n)]), "all_reduce")
            seen.append(pg.last_algorithm)
            for root in range(n):
                y = strided(_value(r, 1, count))
                dist.broadcast(y, src=root)
                np.testing.assert_array_equal(y, _value(root, 1, count), f"broadcast {root}")
                if count != counts[0]:
                    continue  # (reduce past the one-shot sizes is the group's own)
                z = strided(_value(r, 2, count))
                dist.reduce(z, dst=root, op=ReduceOp.MAX)
                np.testing.assert_array_equal(
                    z, np.maximum.reduce([_value(q, 2, count) for q in range(n)])
                    if r == root else _value(r, 2, count), f"reduce to {root}")
            whole = np.zeros(n * count)
            dist.all_gather_into_tensor(whole, strided(_value(r, 3, count)))
            np.testing.assert_array_equal(whole, np.concatenate(
                [_value(q, 3, count) for q in range(n)]), "all_gather, strided input")
            whole = strided(np.zeros(n * count))
            dist.all_gather_into_tensor(whole, _value(r, 3, count))
            np.testing.assert_array_equal(whole, np.concatenate(
                [_value(q, 3, count) for q in range(n)]), "all_gather, strided output")
            seen.append(pg.last_algorithm)
            piece = np.zeros(count)
            dist.reduce_scatter_tensor(piece, strided(np.concatenate(
                [_value(r, 4 + d, count) for d in range(n)])))
            np.testing.assert_array_equal(piece, np.add.reduce(
                [_value(q, 4 + r, count) for q in range(n)]), "reduce_scatter")
            seen.append(pg.last_algorithm)
            mine = np.concatenate([_value(r, 10 + d, count) for d in range(n)])
            got = np.zeros(n * count)
            dist.all_to_all_single(got, strided(mine))
            want = np.concatenate([_value(q, 10 + r, count) for q in range(n)])
            np.testing.assert_array_equal(got, want, "all_to_all, strided input")
            dist.all_to_all_single(mine, mine)  # in place
            np.testing.assert_array_equal(mine, want, "all_to_all in place")
            seen.append(pg.last_algorithm)
    finally:
        for kind in kinds:
            delattr(pg, kind)
    return seen


def torch_bfloat16_on_the_lane(counts: list[int]) -> list[str]:
    """bfloat16 torch tensors take the tiny-call lane (their bits as ops.BFLOAT16) at each
    of ``counts`` elements: all_reduce SUM and PRODUCT, broadcast, all_gather_into_tensor,
    reduce_scatter_tensor, all_to_all_single and a send/recv, with the group's forms made
    to fail, each checked against torch's float32 arithmetic rounded once; then, with
    them back, rank 0 on the general path (a tensor that requires grad, detached after)
    beside the others' lanes, and an AVG, which the lane leaves to the general path.
    Returns the paths seen."""
    import torch

    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []

    def values(q: int, count: int) -> torch.Tensor:
        # multiples of 1/8 below 32: sums of a few are exact in float32, not in bfloat16
        k = torch.arange(count, dtype=torch.float32)
        return ((k * 7 + q * 13) % 256 / 8 + q).to(torch.bfloat16)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    kinds = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all")
    for kind in kinds:
        setattr(pg, kind, refuse)  # instance attributes
    try:
        for count in counts:
            every = [values(q, count) for q in range(n)]
            want = torch.stack([v.float() for v in every]).sum(0).to(torch.bfloat16)
            x = every[r].clone()
            dist.all_reduce(x)
            assert torch.equal(x, want), ("all_reduce", count)
            seen.append(pg.last_algorithm)
            small = [(v / 16 + 1).to(torch.bfloat16) for v in every]
            product = torch.stack([v.float() for v in small]).prod(0).to(torch.bfloat16)
            x = small[r].clone()
            dist.all_reduce(x, op=ReduceOp.PRODUCT)
            assert torch.equal(x, product), ("PRODUCT", count)
            x = every[r].clone() if r == n - 1 else torch.zeros(count, dtype=torch.bfloat16)
            dist.broadcast(x, src=n - 1)
            assert torch.equal(x, every[n - 1]), ("broadcast", count)
            whole = torch.zeros(n * count, dtype=torch.bfloat16)
            dist.all_gather_into_tensor(whole, every[r])
            assert torch.equal(whole, torch.cat(every)), ("all_gather", count)
            piece = count // n
            out = torch.zeros(piece, dtype=torch.bfloat16)
            dist.reduce_scatter_tensor(out, every[r][:piece * n].clone())
            assert torch.equal(out, want[r * piece:(r + 1) * piece]), ("reduce_scatter", count)
            got = torch.zeros(piece * n, dtype=torch.bfloat16)
            dist.all_to_all_single(got, every[r][:piece * n].clone())
            assert torch.equal(got, torch.cat([every[q][r * piece:(r + 1) * piece]
                                               for q in range(n)])), ("all_to_all", count)
            if r < 2:
                if r == 0:
                    dist.send(every[0], dst=1)
                else:
                    x = torch.zeros(count, dtype=torch.bfloat16)
                    dist.recv(x, src=0)
                    assert torch.equal(x, every[0]), ("recv", count)
    finally:
        for kind in kinds:
            delattr(pg, kind)
    for count in counts:
        every = [values(q, count) for q in range(n)]
        want = torch.stack([v.float() for v in every]).sum(0).to(torch.bfloat16)
        x = every[r].clone().requires_grad_(r == 0)
        with torch.no_grad():
            dist.all_reduce(x)
        assert torch.equal(x.detach(), want), ("mixed all_reduce", count)
        whole = torch.zeros(n * count, dtype=torch.bfloat16)
        dist.all_gather_into_tensor(whole, every[r].clone().requires_grad_(r == 0))
        assert torch.equal(whole, torch.cat(every)), ("mixed all_gather", count)
        x = every[r].clone()
        dist.all_reduce(x, op=ReduceOp.AVG)
        mean = (torch.stack([v.float() for v in every]).sum(0) / n).to(torch.bfloat16)
        assert torch.equal(x, mean), ("AVG", count)
    return seen


def want_rs(r: int, n: int) -> np.ndarray:
    """Rank r's piece of the reduce_scatter of ``arange(2n) + q`` over ranks q."""
    return n * np.arange(2 * r, 2 * r + 2, dtype=np.float32) + n * (n - 1) / 2


def async_past_one_shot(base: int) -> list[str]:
    """all_gather_into_tensor, reduce_scatter_tensor, gather, scatter and all_reduce with
    ``async_op=True`` past the one-shot sizes (``base`` elements a piece), which the lane
    runs single-copy,
    with the group's general forms made to fail: every rank in at once, inline and (a
    small _select.ASYNC_INLINE_MAX_BYTES) on the worker thread; one rank late; and
    rank 0's calls returning before rank 1, which waits for rank 0's message, is in.
    Then, with the general path back, rank 0 on it (non-contiguous arrays), and last
    rank 1 passing another size: the same MismatchError from every rank's Work.
    Returns the paths seen and the verdict."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []
    full = [np.concatenate([_value(q, d, base) for d in range(n)]) for q in range(n)]

    def round_of(late: int | None, strided: bool = False) -> None:
        if r == late:
            time.sleep(0.05)
        mine = _value(r, 0, base)
        inp = general_path(np.repeat(mine, 2)[::2]) if strided else mine
        whole = np.zeros((n, base))
        works = [dist.all_gather_into_tensor(whole, inp, async_op=True)]
        piece = np.zeros(base)
        works.append(dist.reduce_scatter_tensor(
            piece, general_path(np.repeat(full[r], 2)[::2]) if strided else full[r].copy(), async_op=True))
        root = n - 1
        gathered = [np.zeros(base) for _ in range(n)] if r == root else None
        works.append(dist.gather(inp, gathered, dst=root, async_op=True))
        part = np.zeros(base)
        works.append(dist.scatter(part, [_value(root, d, base) for d in range(n)]
                                  if r == root else None, src=root, async_op=True))
        summed = np.concatenate([full[r], full[r]])
        works.append(dist.all_reduce(summed, async_op=True))
        for w in works:
            w.wait()
        for q, got in enumerate(gathered or ()):
            np.testing.assert_array_equal(got, _value(q, 0, base), f"gather from {q}")
        np.testing.assert_array_equal(part, _value(root, r, base), "scatter")
        for q in range(n):
            np.testing.assert_array_equal(whole[q], _value(q, 0, base), f"all_gather {q}")
        np.testing.assert_array_equal(piece, np.add.reduce([f[r * base:(r + 1) * base]
                                                            for f in full]), "reduce_scatter")
        want = np.add.reduce(full)
        np.testing.assert_array_equal(summed, np.concatenate([want, want]), "all_reduce")
        seen.append(pg.last_algorithm)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    pg.all_gather = pg.reduce_scatter = pg.all_reduce = refuse  # instance attributes
    pg.gather = pg.scatter = refuse
    inline = table.ASYNC_INLINE_MAX_BYTES
    try:
        for most in (1 << 40, 0):  # every call inline when all are in, then none
            table.ASYNC_INLINE_MAX_BYTES = most
            round_of(None)
        table.ASYNC_INLINE_MAX_BYTES = inline
        for late in range(n):
            round_of(late)
        # rank 0's call must return though rank 1 comes only after rank 0's message
        whole = np.zeros((n, base))
        w = dist.all_gather_into_tensor(whole, _value(r, 1, base), async_op=True)
        if r == 0:
            dist.send(np.full(1, 7.0), 1)
        elif r == 1:
            token = np.zeros(1)
            dist.recv(token, 0)
        w.wait()
        np.testing.assert_array_equal(whole, [_value(q, 1, base) for q in range(n)])
    finally:
        table.ASYNC_INLINE_MAX_BYTES = inline
        del pg.all_gather, pg.reduce_scatter, pg.all_reduce, pg.gather, pg.scatter
    round_of(None, strided=r == 0)
    size = base + (1 if r == 1 else 0)
    try:
        dist.all_gather_into_tensor(np.zeros(n * size), np.ones(size), async_op=True).wait()
        seen.append("no MismatchError")
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'count' in str(exc) or 'layout' in str(exc)}")
    return seen


def async_calls_in_order() -> list[str]:
    """all_reduce(async_op=True) through the lane: one whose peers come late (the worker
    finishes it, the calls after it queue behind), one that must not block its caller
    (rank 0 sends rank 1 what rank 1 waits for before it joins); async broadcast,
    all_gather_into_tensor, reduce_scatter_tensor, reduce, barrier, all_to_all_single,
    gather (even and uneven), scatter and the list forms of all_gather and
    reduce_scatter with each rank late in turn; and a mismatch, which every rank must
    raise. Returns the errors' texts."""
    r, n = dist.get_rank(), dist.get_world_size()
    if r == n - 1:
        time.sleep(0.05)  # late: the others' calls go to their workers
    a = np.full(4, r + 1, np.int64)
    w = dist.all_reduce(a, async_op=True)
    b = np.full(3, r + 1.0)
    dist.all_reduce(b)  # behind the async one, in order
    w.wait()
    assert (a == n * (n + 1) // 2).all() and (b == n * (n + 1) / 2).all(), (a, b)
    token = np.zeros(1)
    c = np.ones(2, np.float32)
    if r == 0:
        w = dist.all_reduce(c, async_op=True)  # must return although rank 1 is not there
        dist.send(np.full(1, 7.0), 1)
        w.wait()
    else:
        if r == 1:
            dist.recv(token, 0)
            assert token[0] == 7.0
        dist.all_reduce(c)
    assert (c == n).all(), c
    # the other async calls the lane starts, each with one rank late, in order
    for late in range(n):
        if r == late:
            time.sleep(0.02)
        x = np.full(3, float(r + 1))
        works = [dist.broadcast(x, src=late, async_op=True)]
        whole = np.zeros((n, 2), np.int16)
        works.append(dist.all_gather_into_tensor(whole, np.full(2, r, np.int16),
                                                 async_op=True))
        mine = np.zeros(2, np.float32)
        works.append(dist.reduce_scatter_tensor(
            mine, np.arange(2 * n, dtype=np.float32) + r, async_op=True))
        y = np.full(5, r + 1, np.int32)
        works.append(dist.reduce(y, dst=late, async_op=True))
        works.append(dist.barrier(async_op=True))
        sent = np.arange(2 * n, dtype=np.int32) + 100 * r
        got = np.zeros(2 * n, np.int32)
        works.append(dist.all_to_all_single(got, sent, async_op=True))
        got_split = np.zeros(n)
        works.append(dist.all_to_all_single(got_split, np.full(n, float(r)), [1] * n, [1] * n,
                                            async_op=True))
        gathered = [np.zeros(2, np.int32) for _ in range(n)] if r == late else None
        works.append(dist.gather(np.full(2, r, np.int32), gathered, dst=late, async_op=True))
        piece = np.zeros(3)
        pieces = [np.full(3, 10.0 * q) for q in range(n)] if r == late else None
        works.append(dist.scatter(piece, pieces, src=late, async_op=True))
        # uneven: rank q gives q + 1 elements (the root's list is the general path's)
        uneven = [np.zeros(q + 1) for q in range(n)] if r == late else None
        works.append(dist.gather(np.full(r + 1, float(r)), uneven, dst=late, async_op=True))
        listed = [np.zeros(2, np.int16) for _ in range(n)]
        works.append(dist.all_gather(listed, np.full(2, r + 1, np.int16), async_op=True))
        mine_l = np.zeros(2, np.float32)
        works.append(dist.reduce_scatter(
            mine_l, list((np.arange(2 * n, dtype=np.float32) + r).reshape(n, 2)),
            async_op=True))
        ins_l = [np.full(2, 10 * r + q, np.int64) for q in range(n)]
        outs_l = [np.zeros(2, np.int64) for _ in range(n)]
        works.append(dist.all_to_all(outs_l, ins_l, async_op=True))
        for w in works:
            w.wait()
        assert all((o == 10 * q + r).all() for q, o in enumerate(outs_l)), outs_l
        assert all((x == q + 1).all() for q, x in enumerate(listed)), listed
        assert (mine_l == want_rs(r, n)).all(), (mine_l, want_rs(r, n))
        assert (piece == 10.0 * r).all(), piece
        if r == late:
            assert all((g == q).all() for q, g in enumerate(gathered)), gathered
            assert all(u.size == q + 1 and (u == q).all() for q, u in enumerate(uneven)), uneven
        assert (got == np.array([2 * r + k + 100 * q for q in range(n) for k in (0, 1)])).all(), got
        assert (got_split == np.arange(n)).all(), got_split
        assert (x == late + 1).all(), x
        assert (whole == np.arange(n, dtype=np.int16)[:, None]).all(), whole
        assert (mine == want_rs(r, n)).all(), (mine, want_rs(r, n))
        assert (y == (n * (n + 1) // 2 if r == late else r + 1)).all(), y
    # the async reduce and all_to_all took the lane (nothing synchronous planned them)
    plans = dist.group.WORLD.lane.plans
    assert any(key[0] == "reduce" for key in plans), "no lane reduce"
    assert any(key[0] == "all_to_all" for key in plans), "no lane all_to_all"
    assert any(key[0] == "gather" for key in plans), "no lane gather"
    assert any(key[0] == "scatter" for key in plans), "no lane scatter"
    assert any(key[0] == "all_gather_list" for key in plans), "no lane all_gather list"
    assert any(key[0] == "reduce_scatter_list" for key in plans), "no lane reduce_scatter list"
    # async all_to_all of lists: the lane's (the group's all_to_all refuses), with each
    # rank late in turn, so that a worker thread copies the pieces out
    group = dist.group.WORLD

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    group.all_to_all = refuse  # an instance attribute: deleted below
    try:
        for late in range(n):
            if r == late:
                time.sleep(0.02)
            outs_l = [np.zeros((2, 3), np.float32) for _ in range(n)]
            work = dist.all_to_all(outs_l, [np.full((2, 3), 10.0 * r + q, np.float32)
                                            for q in range(n)], async_op=True)
            work.wait()
            assert all((o == 10.0 * q + r).all() for q, o in enumerate(outs_l)), outs_l
    finally:
        del group.all_to_all
    bad = np.ones(2, np.float32 if r else np.int32)
    try:
        dist.all_reduce(bad, async_op=True).wait()
    except dist.MismatchError as exc:
        return [str(exc).split(":")[0]]
    return ["no MismatchError"]


def list_and_split_forms() -> list[str]:
    """torch's reduce_scatter into ``out`` from a list (the lane's reduce_scatter_list)
    beside reduce_scatter_tensor on other ranks, for sum, max (a NumPy fold) and avg,
    float32 and int64, and with one rank's list holding a strided piece (the group's
    path); then all_to_all of lists beside all_to_all_single, and all_to_all_single with
    the equal split sizes given on some ranks and not on others. Every result checked;
    returns what ran."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    for dtype in (np.float32, np.int64):
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.AVG):
            for strided in (False, True):
                def full(q: int, dtype: type = dtype) -> np.ndarray:
                    return (np.arange(3 * n) * (q + 1) + 5 * q).astype(dtype)
                out = np.zeros(3, dtype)
                if r % 2 and not strided:
                    dist.reduce_scatter_tensor(out, full(r), op)
                else:
                    pieces = list(np.split(full(r), n))
                    if strided and r == 0:
                        pieces[-1] = _strided(3).astype(dtype)
                        pieces[-1][...] = np.split(full(r), n)[-1]
                    dist.reduce_scatter(out, pieces, op)
                seen.append(pg.last_algorithm)
                mine = np.stack([np.split(full(q), n)[r] for q in range(n)])
                want = {dist.ReduceOp.SUM: mine.sum(0), dist.ReduceOp.MAX: mine.max(0),
                        dist.ReduceOp.AVG: mine.sum(0) / n}[op]
                if dtype == np.int64 and op == dist.ReduceOp.AVG:
                    want = np.trunc(mine.sum(0) / n)
                np.testing.assert_array_equal(out, want.astype(dtype), f"{dtype} {op} {r}")
    # all_to_all of lists (2-D pieces) beside all_to_all_single on the other ranks
    mine = [_value(r, d, 6).reshape(2, 3) for d in range(n)]
    if r % 2:
        whole = np.zeros((2 * n, 3))
        dist.all_to_all_single(whole, np.concatenate(mine))
        got = np.split(whole, n)
    else:
        got = [np.zeros((2, 3)) for _ in range(n)]
        dist.all_to_all(got, mine)
    seen.append(pg.last_algorithm)
    for s_ in range(n):
        np.testing.assert_array_equal(got[s_], _value(s_, r, 6).reshape(2, 3), f"list {s_}")
    inp = np.concatenate([_value(r, d, 4) for d in range(n)])
    for given in (True, False):
        out = np.zeros(4 * n)
        splits = [4] * n if given != bool(r % 2) else None
        dist.all_to_all_single(out, inp, splits, splits)
        seen.append(pg.last_algorithm)
        for s in range(n):
            np.testing.assert_array_equal(out[4 * s:4 * s + 4], _value(s, r, 4), f"from {s}")
    return seen


def uneven_all_to_all_lane(base: int) -> list[str]:
    """all_to_all_single with uneven split sizes (rows of 2-D arrays, some of them 0)
    through the tiny-call lane, synchronous and async, both parities twice, float64 and
    int32, and all_to_all of lists whose pieces differ in length, with the group's
    general all_to_all made to fail; then, with it back, calls where rank 0 splits
    evenly beside uneven ranks (checked against NumPy), one
    rank staging an input too large for its region (every rank hands the entered call
    to the general path), one rank taking the general path itself (a strided input),
    and last a rank expecting a row more than its peer sends: the same MismatchError on
    every rank. Returns the paths seen and the mismatch verdict."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD

    def rows(src: int, dst: int, k: int) -> int:
        return (src + 2 * dst + k) % 3  # 0, 1 or 2 rows: uneven, some empty

    def block(src: int, dst: int, k: int, width: int, dtype: type) -> np.ndarray:
        c = rows(src, dst, k) * width
        return (_value(src, dst, c) + k).astype(dtype).reshape(-1, width)

    def check(out: np.ndarray, k: int, width: int, dtype: type, what: str) -> None:
        want = np.concatenate([block(s, r, k, width, dtype) for s in range(n)])
        np.testing.assert_array_equal(out, want, f"{what}: round {k} on rank {r}")

    def call(k: int, width: int, dtype: type, run_async: bool,
             inp: np.ndarray | None = None) -> np.ndarray:
        sent = [rows(r, d, k) for d in range(n)]
        got = [rows(s, r, k) for s in range(n)]
        if inp is None:
            inp = np.concatenate([block(r, d, k, width, dtype) for d in range(n)])
        out = np.full((sum(got), width), -1, dtype)
        work = dist.all_to_all_single(out, inp, got, sent, async_op=run_async)
        if run_async:
            work.wait()
        seen.append(pg.last_algorithm)
        return out

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    seen: list[str] = []
    pg.all_to_all = refuse  # an instance attribute: deleted below
    try:
        for k in range(4):
            for dtype in (np.float64, np.int32):
                check(call(k, 2, dtype, bool(k % 2)), k, 2, dtype, f"lane {dtype.__name__}")
        # all_to_all of lists whose pieces differ in length (torch's MoE form)
        for run_async in (False, True):
            outs = [np.full((rows(s, r, 3), 2), -1.0) for s in range(n)]
            work = dist.all_to_all(outs, [block(r, d, 3, 2, np.float64) for d in range(n)],
                                   async_op=run_async)
            if run_async:
                work.wait()
            seen.append(pg.last_algorithm)
            check(np.concatenate(outs), 3, 2, np.float64, f"lists, async {run_async}")
    finally:
        del pg.all_to_all
    # rank 0 splits evenly (the even lane, split sizes left out), the others
    # unevenly (the uneven lane): both stage the same bytes and meet; the even
    # lane, finding uneven splits, finishes on the general path
    for k, lists in ((0, False), (1, True), (2, False), (3, True)):
        def mixed(s: int, d: int, k: int = k) -> int:
            return 2 if 0 in (s, d) else 1 + (s + d + k) % 2
        ins = [np.full((mixed(r, d), 3), 100 * r + d + k, np.float32) for d in range(n)]
        outs = [np.full((mixed(s, r), 3), -1, np.float32) for s in range(n)]
        if lists:
            dist.all_to_all(outs, ins)
        else:
            out = np.concatenate(outs)
            even = r == 0
            dist.all_to_all_single(out, np.concatenate(ins),
                                   None if even else [len(o) for o in outs],
                                   None if even else [len(i) for i in ins])
            outs = np.split(out, np.cumsum([len(o) for o in outs])[:-1])
        for s in range(n):
            np.testing.assert_array_equal(outs[s], np.full_like(outs[s], 100 * s + r + k),
                                          f"mixed even/uneven, round {k}, from {s} on {r}")
    # rank n - 1 sends `base` more rows to rank 0: too large to stage, so every rank
    # hands the call it entered to the general path
    sent = [rows(r, d, 0) + (base if r == n - 1 and d == 0 else 0) for d in range(n)]
    got = [rows(s, r, 0) + (base if s == n - 1 and r == 0 else 0) for s in range(n)]
    inp = np.concatenate([_value(r, d, c) for d, c in enumerate(sent)])
    out = np.zeros(sum(got))
    dist.all_to_all_single(out, inp, got, sent)
    seen.append(pg.last_algorithm)
    np.testing.assert_array_equal(out, np.concatenate([_value(s, r, c)
                                                       for s, c in enumerate(got)]))
    # rank 0 passes a strided input (the general path), the others take the lane
    inp = np.concatenate([block(r, d, 1, 3, np.float64) for d in range(n)])
    if r == 0:
        inp = general_path(np.repeat(inp, 2, axis=1)[:, ::2])
    check(call(1, 3, np.float64, False, inp), 1, 3, np.float64, "lane beside general path")
    # rank 0 expects one row more from rank 1 than rank 1 sends it
    sent = [rows(r, d, 2) for d in range(n)]
    got = [rows(s, r, 2) + (1 if r == 0 and s == 1 else 0) for s in range(n)]
    inp = np.concatenate([block(r, d, 2, 2, np.float64) for d in range(n)])
    try:
        dist.all_to_all_single(np.zeros((sum(got), 2)), inp, got, sent)
        seen.append("no MismatchError")
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'sends' in str(exc) and 'expects' in str(exc)}")
    return seen


def all_to_all_past_one_shot(base: int, uneven_refused: bool) -> list[str]:
    """all_to_all_single past the one-shot sizes (``base`` elements a piece), with the
    group's general all_to_all made to fail: equal splits through the lane's compiled
    single-copy form, synchronous and async (inline and on the worker), both parities,
    float64 and int32; the list form async (inline and on the worker); then uneven splits with one rank's input too large to stage
    (the uneven lane reads single-copy too), synchronous and async; with ``uneven_refused`` last the same with one split size
    disagreeing (the same MismatchError on every rank). Else, with the general path
    back: rank 0 on it (a strided input) beside the lane; from 3 ranks, rank 0's even
    splits beside two ranks' uneven ones (sync and async); and last rank 1 passing a
    larger input, which every rank must refuse alike. Returns the paths seen and the
    mismatch verdict."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen: list[str] = []

    def even(k: int, dtype: type, run_async: bool, strided: bool = False) -> None:
        inp = np.concatenate([_value(r, d, base) + k for d in range(n)]).astype(dtype)
        if strided:
            inp = general_path(np.repeat(inp, 2)[::2])
        out = np.full(n * base, -1, dtype)
        work = dist.all_to_all_single(out, inp, async_op=run_async)
        if run_async:
            work.wait()
        seen.append(pg.last_algorithm)
        for s in range(n):
            np.testing.assert_array_equal(out[s * base:(s + 1) * base],
                                          (_value(s, r, base) + k).astype(dtype),
                                          f"round {k} from {s}, async {run_async}")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    pg.all_to_all = refuse  # an instance attribute: deleted below
    inline = table.ASYNC_INLINE_MAX_BYTES
    try:
        for k in range(4):
            # (the last async one too large to read inline: the worker reads)
            table.ASYNC_INLINE_MAX_BYTES = 0 if k == 3 else inline
            even(k, np.float64 if k < 2 else np.int32, bool(k % 2))
        for inline_max in (inline, 0):  # the list form, async: its pieces out by its Work
            table.ASYNC_INLINE_MAX_BYTES = inline_max
            outs = [np.full(base, -1.0) for _ in range(n)]
            work = dist.all_to_all(outs, [_value(r, d, base) + 9 for d in range(n)],
                                   async_op=True)
            work.wait()
            seen.append(pg.last_algorithm)
            for s, piece in enumerate(outs):
                np.testing.assert_array_equal(piece, _value(s, r, base) + 9,
                                              f"list from {s}, inline max {inline_max}")
        # uneven: rank 0 sends 2 `base` more elements to rank n - 1 than the others send,
        # synchronous and async (read by the worker)
        sent = [3 + d + (2 * base if r == 0 and d == n - 1 else 0) for d in range(n)]
        got = [3 + r + (2 * base if s == 0 and r == n - 1 else 0) for s in range(n)]
        inp = np.concatenate([_value(r, d, c) for d, c in enumerate(sent)])
        for run_async in (False, True):
            table.ASYNC_INLINE_MAX_BYTES = 0 if run_async else inline
            out = np.zeros(sum(got))
            work = dist.all_to_all_single(out, inp, got, sent, async_op=run_async)
            if run_async:
                work.wait()
            seen.append(pg.last_algorithm)
            np.testing.assert_array_equal(out, np.concatenate([_value(s, r, c)
                                                               for s, c in enumerate(got)]))
        table.ASYNC_INLINE_MAX_BYTES = inline
        if uneven_refused:
            # the same, but rank 0 expects one element more from rank 1 than it is
            # sent: refused alike on every rank, before anyone reads (also when the
            # pair is checked after the rank whose input was not staged)
            got = [c + (1 if r == 0 and s == 1 else 0) for s, c in enumerate(got)]
            return _refused(seen, lambda: dist.all_to_all_single(np.zeros(sum(got)), inp,
                                                                 got, sent))
    finally:
        table.ASYNC_INLINE_MAX_BYTES = inline
        del pg.all_to_all
    singles = [key for key, plan in pg.lane.plans.items()
               if key[0] == "all_to_all" and plan and plan[8]]
    assert singles, "the lane never took an all_to_all past the one-shot sizes"
    even(4, np.float64, False, strided=r == 0)
    for run_async in (False, True) if n >= 3 else ():
        # Rank 0 splits evenly (the lane's program, flattened presuming every split
        # header is its own) while ranks 1 and 2 trade unevenly, their totals unchanged
        # (the same fingerprints): rank 0's program finds rank 1's header other than it
        # presumed after the entry and hands the call over to the general path, inline
        # and (async, its entry alone in the caller) on the worker.
        table.ASYNC_INLINE_MAX_BYTES = 0 if run_async else inline
        sent, got = [base] * n, [base] * n
        if r == 1:
            sent[1], sent[2], got[1] = base + 3, base - 3, base + 3
        elif r == 2:
            got[1] = base - 3
        inp = np.concatenate([_value(r, d, c) for d, c in enumerate(sent)])
        out = np.zeros(sum(got))
        alike = r not in (1, 2)
        work = dist.all_to_all_single(out, inp, None if alike else got, None if alike else sent,
                                      async_op=run_async)
        if run_async:
            work.wait()
        table.ASYNC_INLINE_MAX_BYTES = inline
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(out, np.concatenate([_value(s, r, c)
                                                           for s, c in enumerate(got)]))
    size = n * base + (n if r == 1 else 0)
    return _refused(seen, lambda: dist.all_to_all_single(np.zeros(size), np.ones(size)))


def _refused(seen: list[str], call: Callable[[], None]) -> list[str]:
    """``seen`` with whether ``call``, an all_to_all whose split sizes disagree, raised
    the MismatchError that names them (a group is unusable after one: the last call)."""
    try:
        call()
        seen.append("no MismatchError")
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'sends' in str(exc) and 'expects' in str(exc)}")
    return seen


def one_sided_rounds() -> list[str]:
    """A tiny broadcast's or scatter's root and a tiny reduce's other ranks return before
    the ranks they need nothing from have entered the call: each rank below enters only once a
    store word says the ranks before it returned, which would never come if a
    one-sided rank waited for it (the call would time out). The next calls on the
    group (lane, general path, schedule) see every result right. Returns the
    algorithms that ran."""
    r, n = dist.get_rank(), dist.get_world_size()
    store = _world.current.store
    pg = dist.group.WORLD
    ran = []
    for step, root in enumerate((0, n - 1)):
        # broadcast: the root returns at once, every other rank once the root did (and
        # at 3 ranks or more, the non-roots need only the root: each enters after the
        # one before it returned)
        order = [root] + [q for q in range(n) if q != root]
        at = order.index(r)
        if at > 0:
            store.wait([f"test/b{step}/{order[at - 1]}"], 30.0)
        x = np.full(5, float(r), np.float32)
        dist.broadcast(x, src=root)
        store.set(f"test/b{step}/{r}", b"1")
        assert (x == root).all(), x
        ran.append(pg.last_algorithm)
        # reduce: every other rank returns before the root enters
        order = [q for q in range(n) if q != root] + [root]
        at = order.index(r)
        if at > 0:
            store.wait([f"test/r{step}/{order[at - 1]}"], 30.0)
        y = np.full(3, r + 1, np.int64)
        dist.reduce(y, dst=root)
        store.set(f"test/r{step}/{r}", b"1")
        assert r != root or (y == n * (n + 1) // 2).all(), y
        ran.append(pg.last_algorithm)
        # scatter: as broadcast
        order = [root] + [q for q in range(n) if q != root]
        at = order.index(r)
        if at > 0:
            store.wait([f"test/s{step}/{order[at - 1]}"], 30.0)
        z = np.zeros((2, 3))
        pieces = [np.full((2, 3), 10.0 * q) for q in range(n)] if r == root else None
        dist.scatter(z, pieces, src=root)
        store.set(f"test/s{step}/{r}", b"1")
        assert (z == 10.0 * r).all(), z
        ran.append(pg.last_algorithm)
    # The one-sided rank's next call settles the round before it writes anything:
    # every kind of next call, over both parities
    total = n * (n + 1) / 2
    for i in range(8):
        root = i % n
        x = np.full(4, float(r))
        if i % 3 == 2:  # a scatter, one-sided as broadcast
            dist.scatter(x, [np.full(4, float(root)) for _ in range(n)] if r == root else None,
                         src=root)
        else:
            dist.broadcast(x, src=root)
        assert (x == root).all()
        follow = i % 4
        if follow == 0:  # the lane
            z = np.full(6, r + 1.0)
            dist.all_reduce(z)
        elif follow == 1:  # the general path (a strided array), staged before the entry
            z = general_path(np.zeros(12)[::2])
            z[...] = r + 1.0
            dist.all_reduce(z)
        elif follow == 2:  # a schedule
            z = np.full(300_000, r + 1.0)
            dist.all_reduce(z, algorithm="ring")
        else:  # a reduce, one-sided in turn
            z = np.full(6, r + 1.0)
            dist.reduce(z, dst=root)
            if r != root:
                z[...] = total
        assert (z == total).all(), (i, z[:4])
    return ran


def one_sided_rank_learns_late(kind: str) -> str | None:
    """Ranks disagree with a one-sided rank, or one dies after it returned: that rank
    raises at its next call on the group (a large all_reduce: the general path),
    naming the call it belongs to. Returns what this rank raised."""
    r = dist.get_rank()
    x = np.zeros(4, np.float32)
    if kind == "mismatch":
        try:
            if r == 0:
                dist.broadcast(x, src=0)  # one-sided: returns
            else:
                dist.reduce(x, dst=1)
        except dist.MeshcastError as exc:
            return f"{type(exc).__name__}: {exc}"
        try:
            dist.all_reduce(np.zeros(300_000))
        except dist.MeshcastError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None
    # dead: rank 1 dies before it enters the broadcast rank 0 returns from ("next: "
    # marks an error of the call after the broadcast)
    if r == 1:
        os._exit(3)
    call = "broadcast"
    try:
        dist.broadcast(x, src=0)
        call = "next"
        dist.all_reduce(np.zeros(300_000))
    except dist.MeshcastError as exc:
        return f"{call}: {type(exc).__name__}: {exc}"
    return None


def one_sided_group_is_freed() -> list[bool]:
    """A group destroyed right after a broadcast whose root returned one-sided is freed
    (the compiled round keeps the call's name, which refers to the group, which holds
    the arena, which holds the round: a cycle the garbage collector must see).
    Returns [whether the root's round was pending, whether the arena was freed]."""
    import gc
    import weakref

    g = dist.new_group()
    x = np.zeros(2)
    dist.broadcast(x, src=0, group=g)
    pending = bool(g.arena._compiled.pending)
    arena = weakref.ref(g.arena)
    dist.destroy_process_group(g)
    del g
    gc.collect()
    return [pending, arena() is None]


def pipelined_copies(rounds: int) -> list[str]:
    """One-shot broadcasts, scatters and gathers past the size from which a rank that
    stages publishes its progress and its readers copy as it comes (_tiny.c, pipelined
    copies: the others from a broadcast's or scatter's root, a gather's root from every
    other rank): every call entered by all ranks together (a tiny all_reduce first),
    sizes around the chunk's edges and odd ones, every root, checked against the data
    sent; then a broadcast whose root passes fewer elements than the others expect (they
    copy what it staged, then every rank raises the same MismatchError). Returns the
    paths seen and the verdict."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    flag = np.zeros(1, np.int32)
    seen = []
    for k in range(rounds):
        for count in (4095, 4096, 4097, 6143, 12_289, 20_000):  # float64: 32 KiB - 8 B ..
            root = (k + count) % n
            # (a broadcast goes single-copy from 64 KiB where ranks fit the cores)
            want = _value(root, k, min(count, 8191))
            got = want.copy() if r == root else np.full(want.size, -1.0)
            dist.all_reduce(flag)  # every rank enters the broadcast together
            dist.broadcast(got, src=root)
            seen.append(pg.last_algorithm)
            np.testing.assert_array_equal(got, want, f"broadcast of {want.size} from {root}")
            # (and so do gather and scatter, where ranks fit the cores)
            count = min(count, 8191) if not pg.caps.crowded else count
            ins = [_value(root, q, count) for q in range(n)] if r == root else None
            out = np.full(count, -1.0)
            dist.all_reduce(flag)
            dist.scatter(out, ins, src=root)
            seen.append(pg.last_algorithm)
            np.testing.assert_array_equal(out, _value(root, r, count),
                                          f"scatter of {count} from {root}")
            outs = [np.full(count, -1.0) for _ in range(n)] if r == root else None
            dist.all_reduce(flag)
            dist.gather(_value(r, root, count), outs, dst=root)
            seen.append(pg.last_algorithm)
            for q, got in enumerate(outs or ()):
                np.testing.assert_array_equal(got, _value(q, root, count),
                                              f"gather of {count} from {q} into {root}")
    dist.all_reduce(flag)
    short = np.zeros(6000 if r == 0 else 8000)
    try:
        dist.broadcast(short, src=0)
        if r == 0:
            dist.barrier()  # a one-sided root finds out at its next call
        verdict = "no error"
    except dist.MismatchError as exc:
        verdict = str(exc)
    return seen + [verdict]


def single_copy_broadcasts() -> list[str]:
    """Broadcasts that go single-copy (just past the one-shot sizes at 2 ranks): the root
    writes each reader's part while the reader reads the others. Every root, odd byte
    counts (parts of unequal length), the lane beside a rank on the general path (a
    strided array), async calls; then a count that differs on one rank: the same
    MismatchError on every rank. Returns the paths seen and the verdict."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    for dtype, count in ((np.float32, 262_145), (np.int8, 1_048_579),
                         (np.float64, 131_075)):
        for root in range(n):
            want = (_value(root, 7, count) * 3).astype(dtype)
            got = want.copy() if r == root else np.zeros(count, dtype)
            dist.broadcast(got, src=root)
            seen.append(pg.last_algorithm)
            np.testing.assert_array_equal(got, want, f"broadcast of {count} {dtype} from {root}")
            # one rank on the general path (strided), the others in the lane
            strided = general_path(np.zeros(2 * count, dtype)[::2])
            got = strided if r == (root + 1) % n else np.zeros(count, dtype)
            got[...] = want if r == root else 0
            dist.broadcast(got, src=root)
            np.testing.assert_array_equal(got, want, f"mixed broadcast of {count} from {root}")
            got = want.copy() if r == root else np.zeros(count, dtype)
            dist.broadcast(got, src=root, async_op=True).wait()
            np.testing.assert_array_equal(got, want, f"async broadcast of {count} from {root}")
    mine = np.zeros(300_000 if r == 0 else 300_001, np.float32)
    try:
        dist.broadcast(mine, src=0)
        verdict = "no error"
    except dist.MismatchError as exc:
        verdict = f"mismatch: {'count' in str(exc)}"
    return seen + [verdict]


def _at_distance(distance: int, count: int, dtype: Any = np.float32) -> np.ndarray:
    """A contiguous array of ``count`` elements whose address is ``distance`` bytes past
    a 4 KiB boundary, filled with -1: copied out of a page-aligned region, its copy's
    destination lies that far past the source modulo 4 KiB."""
    itemsize = np.dtype(dtype).itemsize
    base = np.full(count + 4096 // itemsize + 1, -1, dtype)
    skip = ((distance - base.__array_interface__["data"][0]) % 4096) // itemsize
    return base[skip:skip + count]


def short_distance_copies(counts: tuple[int, ...] = (257, 1023, 4099, 12_285)) -> list[str]:
    """Broadcast, all_gather, gather, scatter and all_to_all, and blocking send/recv, on
    float32 arrays lying 4-60 bytes past a 4 KiB boundary (each rank its own distance):
    at 4-12 the compiled copies take a vector loop instead of the string move, and the
    kernel's copies (single-copy) go through a bounce buffer (_copy.h, short
    distances). The default counts, 1 KiB to 48 KiB, run one-shot and through the ring;
    none is a multiple of 64, so the loop's tail counts too. Checked against the data
    sent. Returns the paths seen."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    for k, count in enumerate(counts):
        d = (4, 8, 12, 20, 36, 60)[(k + 2 * r) % 6]
        root = k % n
        want = _value(root, k, count).astype(np.float32)
        got = _at_distance(d, count)
        if r == root:
            got[:] = want
        dist.broadcast(got, src=root)
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(got, want, f"broadcast of {count} at distance {d}")
        mine = _at_distance(60 - d, count)
        mine[:] = _value(r, k, count)
        out = _at_distance(d, count * n)
        dist.all_gather_into_tensor(out, mine)
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(
            out, np.concatenate([_value(q, k, count).astype(np.float32) for q in range(n)]),
            f"all_gather of {count} at distance {d}")
        outs = [_at_distance(d + 4 * q, count) for q in range(n)] if r == root else None
        dist.gather(mine, outs, dst=root)
        seen.append(pg.last_algorithm)
        for q, piece in enumerate(outs or ()):
            np.testing.assert_array_equal(piece, _value(q, k, count).astype(np.float32),
                                          f"gather of {count} from {q} at distance {d}")
        ins = None
        if r == root:
            ins = [_at_distance(8, count) for _ in range(n)]
            for q, piece in enumerate(ins):
                piece[:] = _value(root, q, count)
        part = _at_distance(d, count)
        dist.scatter(part, ins, src=root)
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(part, _value(root, r, count).astype(np.float32),
                                      f"scatter of {count} at distance {d}")
        each = max(count // n // 4, 1) * 4  # (whole rows for every rank)
        inp = _at_distance(60 - d, each * n)
        inp[:] = np.concatenate([_value(r, q, each) for q in range(n)])
        swapped = _at_distance(d, each * n)
        dist.all_to_all_single(swapped, inp)
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(
            swapped, np.concatenate([_value(q, r, each).astype(np.float32) for q in range(n)]),
            f"all_to_all of {each} a peer at distance {d}")
        if r < 2:  # a blocking pair through the ring, each way
            ball = _at_distance(d, count)
            if r == 0:
                ball[:] = want
                dist.send(ball, 1)
                dist.recv(ball, 1)
                np.testing.assert_array_equal(ball, want[::-1], "send/recv back")
            else:
                dist.recv(ball, 0)
                np.testing.assert_array_equal(ball, want, f"recv at distance {d}")
                dist.send(np.ascontiguousarray(ball[::-1]), 0)
    return seen


def list_forms_run_programs() -> tuple[int, int]:
    """torch's list forms in the lane: all_gather into a list and reduce_scatter of a list
    (pieces apart in memory; in place, my input or output being my own piece; async),
    every result checked. Returns how many calls the compiled interpreter ran as
    programs (Round.program) and how many as combines (Round.oneshot)."""
    r, n = dist.get_rank(), dist.get_world_size()
    arena = dist.group.WORLD.arena
    counts = [0, 0]

    def counted(fn: Callable[..., Any], k: int) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            counts[k] += 1
            return fn(*args)
        return call

    arena.compiled_program = counted(arena.compiled_program, 0)
    arena.compiled_oneshot = counted(arena.compiled_oneshot, 1)
    for way in ("apart", "in place", "async"):
        got = [np.full(5, -1.0) for _ in range(n)]
        mine = got[r] if way == "in place" else _value(r, 3, 5)
        if way == "in place":
            mine[...] = _value(r, 3, 5)
        work = dist.all_gather(got, mine, async_op=way == "async")
        if work is not None:
            work.wait()
        for q in range(n):
            np.testing.assert_array_equal(got[q], _value(q, 3, 5), f"{way}: piece {q}")
        pieces = [_value(r, q, 4).astype(np.float32) for q in range(n)]
        out = pieces[r] if way == "in place" else np.zeros(4, np.float32)
        op = dist.ReduceOp.AVG if way == "async" else dist.ReduceOp.SUM
        work = dist.reduce_scatter(out, pieces, op, async_op=way == "async")
        if work is not None:
            work.wait()
        want = sum(_value(q, r, 4).astype(np.float32) for q in range(n))
        np.testing.assert_allclose(out, want / n if way == "async" else want, rtol=1e-6,
                                   err_msg=way)
    return counts[0], counts[1]


@contextlib.contextmanager
def _counting_copy_programs() -> Iterator[list[int]]:
    """Counts, while in the block, the world group's single-copy calls that run their
    cma schedule's program: [from its entry (the lane's: Round.program with the
    exposure its own), after the lane's compiled entry alone (an async call past
    ``ASYNC_INLINE_MAX_BYTES`` exposed: its copies on the worker thread), after the
    general path's entry (Round.program given no entry)]."""
    from meshcast.paths import single_copy

    arena = dist.group.WORLD.arena
    counts = [0, 0, 0]
    run, rooted, go_on = arena.compiled_program, arena.compiled_rooted, single_copy.run_program

    def counted(seq: int, entry: Any, *args: Any) -> Any:
        if type(entry) is tuple and entry[2] is None and args[-1] == 0:
            counts[0] += 1  # (a run from the start, its exposure the program's own)
        return run(seq, entry, *args)

    def entered_alone(*args: Any) -> Any:
        counts[1] += 1  # (the lane's compiled entry alone: the worker runs the rest)
        return rooted(*args)

    def after_entry(group: Any, seq: int, what: object, program: Any, entry: Any,
                    *args: Any, **kw: Any) -> bool:
        counts[2] += entry is None  # (the general path's: the entry was its own)
        return go_on(group, seq, what, program, entry, *args, **kw)

    arena.compiled_program, arena.compiled_rooted = counted, entered_alone
    single_copy.run_program = after_entry
    try:
        yield counts
    finally:
        arena.compiled_program, arena.compiled_rooted = run, rooted
        single_copy.run_program = go_on


def single_copy_programs(count: int) -> tuple[int, int, int]:
    """broadcast and all_gather_into_tensor of ``count`` float64 a rank, and
    all_to_all_single of as many with equal splits, past the one-shot sizes: in the lane
    (contiguous arrays; all_gather apart and in place; sync and async), then on the
    general path (strided arrays), every result checked. Returns
    how many calls ran their registered cma schedule's program from its entry (the
    lane's: Round.program with the exposure its own), after the lane's compiled entry
    alone (an async call past ``ASYNC_INLINE_MAX_BYTES`` exposed) and after the general
    path's entry (Round.program given no entry)."""
    r, n = dist.get_rank(), dist.get_world_size()
    with _counting_copy_programs() as counts:
        for general in (False, True):
            for run_async in (False, True):
                for root in range(n):
                    want = _value(root, 2, count)
                    buf = general_path(np.repeat(want, 2)[::2]) if general else want.copy()
                    if r != root:
                        buf[...] = 0
                    work = dist.broadcast(buf, src=root, async_op=run_async)
                    if work is not None:
                        work.wait()
                    np.testing.assert_array_equal(buf, want, f"broadcast from {root}")
                whole = np.zeros((n, count))
                mine = _value(r, 4, count)
                inp = general_path(np.repeat(mine, 2)[::2]) if general else mine
                for target in (inp, None):  # apart, then in place (the lane's other program)
                    if target is None:
                        whole[r] = mine
                        target = whole[r]
                    work = dist.all_gather_into_tensor(whole, target, async_op=run_async)
                    if work is not None:
                        work.wait()
                    for q in range(n):
                        np.testing.assert_array_equal(whole[q], _value(q, 4, count),
                                                      f"all_gather piece {q}")
                piece = count // n
                mine = np.concatenate([_value(r, 5 + d, piece) for d in range(n)])
                got = np.zeros(n * piece)
                work = dist.all_to_all_single(got, general_path(np.repeat(mine, 2)[::2]) if general else mine,
                                              async_op=run_async)
                if work is not None:
                    work.wait()
                for q in range(n):
                    np.testing.assert_array_equal(got[q * piece:(q + 1) * piece],
                                                  _value(q, 5 + r, piece), f"all_to_all from {q}")
    return counts[0], counts[1], counts[2]


def single_copy_folds(count: int) -> tuple[int, int, int]:
    """all_reduce (SUM, AVG on float64, MAX on int32: ``count`` float64's bytes, past
    ``ALL_REDUCE_SINGLE_MIN_BYTES``) and reduce_scatter_tensor (SUM, AVG, ``count // 2``
    float64 a rank) in the lane (contiguous arrays) and on the general path (strided
    ones), sync and async, and reduce to every root (general path only: the lane has no
    single-copy reduce), every result checked against the values folded in rank order.
    Returns how many calls ran their registered cma schedule's program: from its entry
    (the lane's: Round.program with the exposure its own), after the lane's compiled
    entry (an async call past ``ASYNC_INLINE_MAX_BYTES`` exposed: its copies on the
    worker thread), and after the general path's entry."""
    r, n = dist.get_rank(), dist.get_world_size()

    def folded(values: list[np.ndarray], op: str) -> np.ndarray:
        acc = values[0].copy()
        for v in values[1:]:  # (in rank order, as the kernels fold)
            acc = np.maximum(acc, v) if op == "max" else acc + v
        return acc / n if op == "avg" else acc

    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX}
    with _counting_copy_programs() as counts:
        for general in (False, True):
            shaped = (lambda a: general_path(np.repeat(a, 2)[::2])) if general else (lambda a: a.copy())
            for run_async in (False, True):
                for op in ("sum", "avg", "max"):
                    if op == "max":  # int32: twice as many elements, the same bytes
                        values = [(_value(q, 1, 2 * count) * 7).astype(np.int32)
                                  for q in range(n)]
                    else:
                        values = [_value(q, 1, count) for q in range(n)]
                    buf = shaped(values[r])
                    work = dist.all_reduce(buf, op=ops[op], async_op=run_async)
                    if work is not None:
                        work.wait()
                    np.testing.assert_allclose(buf, folded(values, op), rtol=1e-15,
                                               err_msg=f"all_reduce {op}")
                piece = count // 2
                for op in ("sum", "avg"):
                    values = [np.concatenate([_value(q, p, piece) for p in range(n)])
                              for q in range(n)]
                    out = shaped(np.zeros(piece))
                    work = dist.reduce_scatter_tensor(out, shaped(values[r]), op=ops[op],
                                                      async_op=run_async)
                    if work is not None:
                        work.wait()
                    want = folded([v[r * piece:(r + 1) * piece] for v in values], op)
                    np.testing.assert_allclose(out, want, rtol=1e-15,
                                               err_msg=f"reduce_scatter {op}")
                if not general:
                    continue
                for root in range(n):
                    values = [_value(q, root, count // 2) for q in range(n)]
                    buf = shaped(values[r])
                    work = dist.reduce(buf, dst=root, async_op=run_async)
                    if work is not None:
                        work.wait()
                    np.testing.assert_array_equal(buf, folded(values, "sum") if r == root
                                                  else values[r], f"reduce to {root}")
    return counts[0], counts[1], counts[2]


def python_copy_programs(count: int) -> list[tuple[str, bool]]:
    """broadcast, all_reduce (AVG), all_gather_into_tensor, reduce_scatter_tensor and
    all_to_all_single of ``count`` float64 (past their single-copy thresholds) in the
    lane (contiguous arrays)
    and on the general path (strided ones), sync and async, and reduce on the general
    path, every result checked. Returns, per call, which collective ran a single-copy
    program and whether it was Python's (no packed form)."""
    from meshcast.paths import single_copy

    r, n = dist.get_rank(), dist.get_world_size()
    seen: list[tuple[str, bool]] = []
    go_on = single_copy.run_program

    def spied(group: Any, seq: int, what: object, program: Any, *args: Any, **kw: Any
              ) -> bool:
        seen.append((str(what).split()[0], program.packed is None))
        return go_on(group, seq, what, program, *args, **kw)

    def done(work: Any) -> None:
        if work is not None:
            work.wait()

    single_copy.run_program = spied
    try:
        for general in (False, True):
            shaped = (lambda a: general_path(np.repeat(a, 2)[::2])) if general else (lambda a: a.copy())
            for run_async in (False, True):
                buf = shaped(_value(r, 0, count))
                done(dist.broadcast(buf, src=n - 1, async_op=run_async))
                np.testing.assert_array_equal(buf, _value(n - 1, 0, count))
                buf = shaped(_value(r, 1, count))
                done(dist.all_reduce(buf, op=dist.ReduceOp.AVG, async_op=run_async))
                acc = _value(0, 1, count)
                for q in range(1, n):
                    acc = acc + _value(q, 1, count)
                np.testing.assert_allclose(buf, acc / n, rtol=1e-15)
                piece = count // n
                whole = shaped(np.zeros(piece * n))
                done(dist.all_gather_into_tensor(whole, shaped(_value(r, 2, piece)),
                                                 async_op=run_async))
                np.testing.assert_array_equal(
                    whole, np.concatenate([_value(q, 2, piece) for q in range(n)]))
                out = shaped(np.zeros(piece))
                done(dist.reduce_scatter_tensor(out, shaped(np.full(piece * n, r + 1.0)),
                                                async_op=run_async))
                np.testing.assert_array_equal(out, np.full(piece, n * (n + 1) / 2))
                got = shaped(np.zeros(piece * n))
                done(dist.all_to_all_single(got, shaped(np.concatenate(
                    [_value(r, 5 + d, piece) for d in range(n)])), async_op=run_async))
                np.testing.assert_array_equal(got, np.concatenate(
                    [_value(q, 5 + r, piece) for q in range(n)]))
                if general:
                    buf = shaped(_value(r, 3, count))
                    done(dist.reduce(buf, dst=0, async_op=run_async))
                    if r == 0:
                        acc = _value(0, 3, count)
                        for q in range(1, n):
                            acc = acc + _value(q, 3, count)
                        np.testing.assert_array_equal(buf, acc)
    finally:
        single_copy.run_program = go_on
    return seen


def uneven_rooted_on_the_lane() -> list[str]:
    """gather and scatter whose pieces differ in size (Gatherv, Scatterv) on the tiny-call
    lane, with the groups' gather and scatter made to fail: every root, on the world and
    on a group whose ranks run backwards (roots as group ranks), pieces of 0 to 40
    float64 elements, 2-D pieces, int32, a gather root in place (its input is its piece
    of the list), the same shape twice (the cached plan); then, with the group's calls
    back, a rank on the general path beside the lane's, and, last, a root whose pieces do
    not match what a rank sends (the same MismatchError on every rank). Every result
    checked; returns the paths seen."""
    r, n = dist.get_rank(), dist.get_world_size()
    backwards = dist.new_group(list(range(n - 1, -1, -1)))
    seen: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    def check(group: Any, root: int, sizes: list[int], dtype: Any = np.float64,
              shape: Callable[[int], tuple] = lambda c: (c,), in_place: bool = False,
              late: bool = False) -> None:
        pg = dist.group.WORLD if group is None else backwards
        me = r if group is None else n - 1 - r  # (my group rank)
        glob = root if group is None else n - 1 - root  # (the root's global rank)

        def value(q: int, c: int) -> np.ndarray:
            return (_value(q, root, c) * 8).astype(dtype).reshape(shape(c))

        pieces = [np.zeros(shape(c), dtype) for c in sizes] if me == root else None
        mine = value(me, sizes[me])
        if in_place and me == root:
            pieces[root][...] = mine
            mine = pieces[root]
        if late and me == root:
            time.sleep(0.05)  # (the others wait in their entry: Python finishes it)
        dist.gather(mine, pieces, dst=glob, group=group)
        seen.append(pg.last_algorithm)
        if me == root:
            for q, got in enumerate(pieces):
                np.testing.assert_array_equal(got, value(q, sizes[q]), f"gather piece {q}")
        out = np.zeros(shape(sizes[me]), dtype)
        src = [value(q, sizes[q]) + 1 for q in range(n)] if me == root else None
        dist.scatter(out, src, src=glob, group=group)
        seen.append(pg.last_algorithm)
        np.testing.assert_array_equal(out, value(me, sizes[me]) + 1, "scatter")

    kinds = ("gather", "scatter")
    groups = (dist.group.WORLD, backwards)
    for pg in groups:
        for kind in kinds:
            setattr(pg, kind, refuse)  # instance attributes
    try:
        for group in (None, backwards):
            for root in range(n):
                sizes = [(7 * q + root) % 41 for q in range(n)]
                sizes[(root + 1) % n] = 0  # (a rank with nothing to send or receive)
                check(group, root, sizes)
                check(group, root, sizes, late=root == n - 1)  # (the plan cached)
        check(None, 0, [2 * q + 2 for q in range(n)], np.int32, lambda c: (c // 2, 2))
        check(None, n - 1, [q + 3 for q in range(n)], in_place=True)
    finally:
        for pg in groups:
            for kind in kinds:
                pg.__dict__.pop(kind, None)
    # a rank on the general path (a piece the lane declines) beside the lane's ranks
    sizes = [q + 2 for q in range(n)]
    mine = _value(r, 0, sizes[r])
    pieces = [np.zeros(c) for c in sizes] if r == 0 else None
    dist.gather(general_path(mine.copy()) if r == n - 1 else mine, pieces, dst=0)
    if r == 0:
        for q, got in enumerate(pieces):
            np.testing.assert_array_equal(got, _value(q, 0, sizes[q]), "gather beside")
    out = np.zeros(sizes[r])
    dist.scatter(general_path(out) if r == n - 1 else out,
                 [_value(q, 1, c) for q, c in enumerate(sizes)] if r == 0 else None, src=0)
    np.testing.assert_array_equal(out, _value(r, 1, sizes[r]), "scatter beside")
    # the root's pieces do not match what the last rank sends: every rank raises (and
    # the group is unusable after it)
    pieces = [np.zeros(c + (q == n - 1)) for q, c in enumerate(sizes)] if r == 0 else None
    try:
        dist.gather(_value(r, 0, sizes[r]), pieces, dst=0)
    except dist.MismatchError as exc:
        seen.append(f"mismatch: {'list sizes on the root' in str(exc)}")
    else:
        seen.append("no error")
    return seen


def many_shapes_stay_planned(shapes: int) -> list[int]:
    """A loop over ``shapes`` arrays of different sizes, all-reduced one at a time (a
    model's parameters, averaged one by one), three times over: every result checked;
    returns how many plans the lane built in each pass (the first pass builds one per
    shape; a cache smaller than the working set rebuilds them on every pass)."""
    r, n = dist.get_rank(), dist.get_world_size()
    per_pass = []
    with plans_built() as built:
        arrays = [np.zeros(k + 1) for k in range(shapes)]
        for p in range(3):
            before = len(built)
            for k, a in enumerate(arrays):
                a[...] = r + p + k
                dist.all_reduce(a)
                assert (a == sum(q + p + k for q in range(n))).all(), (p, k)
            per_pass.append(len(built) - before)
    return per_pass
