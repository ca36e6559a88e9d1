"""Rank bodies for collective semantics tests (module level: spawned processes import them)."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import meshcast as dist
from meshcast import ReduceOp
from meshcast import ops as ops_mod
from meshcast.testing.paths import general_path


def _catch(fn, exc_type):
    try:
        fn()
    except exc_type as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _catch_now_or_next(fn, exc_type, group=None):
    """What ``fn()`` raised or, when it returned, what the group's next call raises.

    A rank whose part of a collective needs nothing from the others (a broadcast's
    root, a reduce's other ranks) may return before they have checked the call, and
    learns of a disagreement at its next call on the group (as with MPI's eager sends).
    """
    return _catch(fn, exc_type) or _catch(lambda: dist.barrier(group), exc_type)


# --------------------------------------------------------------- mismatches

def mismatch(kind: str) -> str | None:
    """Make ranks disagree in one way; return what this rank raised."""
    r = dist.get_rank()
    x = np.zeros(4, np.float32)
    if kind == "collective":
        call = (lambda: dist.broadcast(x, src=0)) if r == 0 else (lambda: dist.all_reduce(x))
    elif kind == "count":
        y = np.zeros(4 + r, np.float32)
        call = lambda: dist.all_reduce(y)  # noqa: E731
    elif kind == "dtype":
        y = np.zeros(4, np.float32 if r == 0 else np.float64)
        call = lambda: dist.all_reduce(y)  # noqa: E731
    elif kind == "op":
        call = lambda: dist.all_reduce(x, op=ReduceOp.SUM if r == 0 else ReduceOp.MAX)  # noqa: E731
    elif kind == "path":  # one rank forces an algorithm, the other takes the default path
        call = lambda: dist.all_reduce(x, algorithm="ring" if r == 0 else None)  # noqa: E731
    elif kind == "root":
        call = lambda: dist.broadcast(x, src=0 if r == 0 else 1)  # noqa: E731
    elif kind == "gather_sizes":  # only the root can see this one
        n = dist.get_world_size()
        lst = [np.zeros(3, np.float32) for _ in range(n)] if r == 0 else None
        mine = np.zeros(3 if r != 1 else 5, np.float32)
        call = lambda: dist.gather(mine, lst, dst=0)  # noqa: E731
    else:
        raise ValueError(kind)
    return _catch_now_or_next(call, dist.MeshcastError)


def qualified_algorithm_names() -> list[str]:
    """all_reduce and broadcast with ``algorithm=`` spelled ``"coll/name"`` on rank 0 and
    ``"name"`` elsewhere: the same choice, so the same path byte and the same result."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg, ran = dist.group.WORLD, []
    x = np.full(5, r + 1, np.float32)
    dist.all_reduce(x, algorithm="all_reduce/ring" if r == 0 else "ring")
    assert (x == n * (n + 1) / 2).all(), x
    ran.append(pg.last_algorithm)
    y = np.arange(7, dtype=np.int64) * (r == 1)
    dist.broadcast(y, src=1, algorithm="tree" if r == 0 else "broadcast/tree")
    assert (y == np.arange(7)).all(), y
    ran.append(pg.last_algorithm)
    return ran


def all_to_all_split_mismatch() -> list[tuple[str, str]]:
    """Rank 0 sends one element more to rank 1 than rank 1 expects, on every path (the
    one-shot and single-copy sizes, each forced algorithm), each case in a group of its
    own (a mismatch leaves its group unusable); then the world still works."""
    r, n = dist.get_rank(), dist.get_world_size()
    results = []
    for piece in (1, 70_000):
        for algorithm in (None, "direct", "pairwise", "arena"):
            group = dist.new_group(list(range(n)))
            send = [piece] * n
            if r == 0:
                send[1] = piece + 1
            recv = [piece] * n
            inp = np.zeros(sum(send), np.float32)
            out = np.zeros(sum(recv), np.float32)
            def call(out=out, inp=inp, recv=recv, send=send, group=group,
                     algorithm=algorithm):
                dist.all_to_all_single(out, inp, recv, send, group=group, algorithm=algorithm)

            error = _catch(call, dist.MeshcastError)
            results.append((f"{piece}/{algorithm}", error.replace(group.group_name, "G")))
    x = np.ones(1)
    dist.all_reduce(x)
    assert x[0] == n
    return results


# Disagreements that mismatches() makes, each where group rank 0 does one thing and the
# other ranks another; the algorithm each collective is forced to when ``forced``.
MISMATCH_KINDS = ("collective", "count", "dtype", "op", "root", "reduce_root", "gather_root",
                  "scatter_root", "gather_or_broadcast", "scatter_or_broadcast")
FORCED = {"broadcast": "tree", "all_reduce": "ring", "reduce": "tree", "gather": "tree",
          "scatter": "tree"}


def _mismatch_call(kind: str, variant: int, count: int, group: dist.ProcessGroup,
                   forced: bool, strided: bool = False) -> Callable[[bool], dist.Work | None]:
    """The call that side ``variant`` of disagreement ``kind`` makes (0: group rank 0's,
    1: every other rank's), as ``call(async_op)``. Roots are passed as global ranks (of
    group rank ``variant``), so a subgroup also checks their translation."""
    me, n = dist.get_rank(group), dist.get_world_size(group)
    root = dist.get_global_rank(group, variant)
    def zeros(k: int, dtype: Any = np.float32) -> np.ndarray:
        # strided: a view the lane declines, so the group's own path (its one-shot programs)
        return general_path(np.zeros(2 * k, dtype)[::2]) if strided else np.zeros(k, dtype)

    x = zeros(count)

    def algo(coll: str) -> str | None:
        return FORCED[coll] if forced else None

    def call(async_op: bool) -> dist.Work | None:
        kw: dict[str, Any] = {"group": group, "async_op": async_op}
        if kind == "collective":
            if variant == 0:
                return dist.broadcast(x, src=root, algorithm=algo("broadcast"), **kw)
            return dist.all_reduce(x, algorithm=algo("all_reduce"), **kw)
        if kind == "count":
            y = zeros(count + variant)
            return dist.all_reduce(y, algorithm=algo("all_reduce"), **kw)
        if kind == "dtype":
            y = zeros(count, (np.float32, np.float64)[variant])
            return dist.all_reduce(y, algorithm=algo("all_reduce"), **kw)
        if kind == "op":
            op = (ReduceOp.SUM, ReduceOp.MAX)[variant]
            return dist.all_reduce(x, op=op, algorithm=algo("all_reduce"), **kw)
        if kind == "root":
            return dist.broadcast(x, src=root, algorithm=algo("broadcast"), **kw)
        if kind == "reduce_root":
            return dist.reduce(x, dst=root, algorithm=algo("reduce"), **kw)
        if kind == "gather_root":  # every rank that believes it is the root passes a list
            lst = [np.zeros(count, np.float32) for _ in range(n)] if me == variant else None
            return dist.gather(x, lst, dst=root, algorithm=algo("gather"), **kw)
        if kind == "scatter_root":
            lst = [np.zeros(count, np.float32) for _ in range(n)] if me == variant else None
            return dist.scatter(x, lst, src=root, algorithm=algo("scatter"), **kw)
        if kind in ("gather_or_broadcast", "scatter_or_broadcast"):
            # group rank 0 broadcasts from group rank 1, the others gather or scatter with
            # it as their root: only that root knows its list's layout, and the text must
            # not depend on whether its writer called the rooted collective itself
            at = dist.get_global_rank(group, 1)
            if variant == 0:
                return dist.broadcast(x, src=at, algorithm=algo("broadcast"), **kw)
            coll = kind.partition("_or_")[0]
            lst = [np.zeros(count, np.float32) for _ in range(n)] if me == 1 else None
            if coll == "gather":
                return dist.gather(x, lst, dst=at, algorithm=algo(coll), **kw)
            return dist.scatter(x, lst, src=at, algorithm=algo(coll), **kw)
        raise ValueError(kind)

    return call


def mismatches(count: int, forced: bool = False, members: list[int] | None = None,
               async_op: bool = False, strided: bool = False
               ) -> list[tuple[str, str | None, str | None]]:
    """Every kind of disagreement at ``count`` float32 elements, each in a group of its
    own over ``members`` (a mismatch leaves its group unusable).

    Per kind, every member first makes group rank 0's call (so all agree), to record
    the path such a call takes, then group rank 0 makes its call and the others theirs.
    With ``async_op`` both calls return a Work; the error must come from ``wait()``.

    Returns:
        ``(kind, path of the agreed call, error text)`` per kind, the group's name in
        the text replaced by ``G``; ``[]`` on a rank outside ``members``.
    """
    results: list[tuple[str, str | None, str | None]] = []
    for kind in MISMATCH_KINDS:
        group = dist.new_group(members)
        if group is dist.GroupMember.NON_GROUP_MEMBER:
            continue
        me = dist.get_rank(group)
        agreed = _mismatch_call(kind, 0, count, group, forced, strided)
        work = agreed(async_op)
        if async_op:
            work.wait()
        path = group.last_algorithm
        disagreeing = _mismatch_call(kind, 0 if me == 0 else 1, count, group, forced, strided)
        if async_op:
            work = disagreeing(True)  # must not raise: the mismatch shows when it runs
            assert work is not None
            error = _catch(work.wait, dist.MeshcastError)
        else:
            error = _catch_now_or_next(lambda call=disagreeing: call(False),
                                       dist.MeshcastError, group)
        results.append((kind, path, error and error.replace(group.group_name, "G")))
    n = dist.get_world_size()
    x = np.ones(1)
    dist.all_reduce(x)  # the world is unharmed
    assert x[0] == n
    return results


def mismatch_then_poisoned() -> str | None:
    r = dist.get_rank()
    x = np.zeros(2)
    _catch(lambda: dist.all_reduce(x, op=ReduceOp.SUM if r else ReduceOp.MIN), dist.MismatchError)
    return _catch(lambda: dist.all_reduce(x), dist.GroupAbortedError)


# ------------------------------------------------------------ bad arguments

def bad_arguments() -> list[str]:
    r, n = dist.get_rank(), dist.get_world_size()
    f32 = np.zeros(4, np.float32)
    lst = [np.zeros(4, np.float32) for _ in range(n)]
    cases = {
        "all_reduce tensor": lambda: dist.all_reduce([1.0, 2.0]),
        "all_reduce op": lambda: dist.all_reduce(f32, op="median"),
        "all_reduce band on float": lambda: dist.all_reduce(f32, op=ReduceOp.BAND),
        "all_reduce avg on bool": lambda: dist.all_reduce(np.zeros(2, bool), op=ReduceOp.AVG),
        "all_reduce min on complex": lambda: dist.all_reduce(np.zeros(2, np.complex64),
                                                             op=ReduceOp.MIN),
        "all_reduce read-only": lambda: dist.all_reduce(np.broadcast_to(f32, (2, 4))),
        "all_reduce async_op": lambda: dist.all_reduce(f32, async_op="yes"),
        "all_reduce algorithm": lambda: dist.all_reduce(f32, algorithm="teleport"),
        "broadcast src": lambda: dist.broadcast(f32, src=n),
        "broadcast src type": lambda: dist.broadcast(f32, src="0"),
        "reduce dst": lambda: dist.reduce(f32, dst=-1),
        "all_gather list length": lambda: dist.all_gather(lst[:-1] if n > 1 else [], f32),
        "all_gather dtype": lambda: dist.all_gather([np.zeros(4, np.int32)] * n, f32),
        "all_gather own size": lambda: dist.all_gather([np.zeros(5, np.float32)] * n, f32),
        "all_gather_into_tensor size": lambda: dist.all_gather_into_tensor(
            np.zeros(4 * n + 1, np.float32), f32),
        "gather list on root": lambda: dist.gather(f32, None, dst=r),
        "scatter list on root": lambda: dist.scatter(f32, "abc", src=r),
        "reduce_scatter list": lambda: dist.reduce_scatter(f32, lst + [f32]),
        "reduce_scatter_tensor size": lambda: dist.reduce_scatter_tensor(
            f32, np.zeros(4 * n + 2, np.float32)),
        "all_to_all lists": lambda: dist.all_to_all(lst, lst[:-1] if n > 1 else []),
        "all_to_all_single splits": lambda: dist.all_to_all_single(
            np.zeros(n, np.float32), np.zeros(n, np.float32), [1] * n, [2] * n),
        "barrier group": lambda: dist.barrier(group=3),
        "new_group ranks": lambda: dist.new_group([0, n]),
        "new_group duplicates": lambda: dist.new_group([0, 0]),
    }
    out = []
    for name, case in cases.items():
        text = _catch(case, dist.InvalidUsage)
        if text is None:
            raise AssertionError(f"{name}: no InvalidUsage")
        out.append(f"{name} => {text}")
    # nothing was sent: the group still works and sequence numbers still line up
    y = np.full(3, r + 1.0)
    dist.all_reduce(y)
    assert (y == n * (n + 1) / 2).all()
    return out


def bad_arguments_everywhere() -> dict[str, str | None]:
    """Bad arguments of the object collectives, point-to-point batches, rank lookups and
    the list/rooted/all-to-all collectives, each on every rank (needs 2+ ranks).

    Returns:
        case name -> the InvalidUsage text (None if nothing was raised). The first word
        of a case name is the function whose name the error must start with.
    """
    r, n = dist.get_rank(), dist.get_world_size()
    nxt, prv = (r + 1) % n, (r - 1) % n
    f32 = np.zeros(4, np.float32)
    i32 = np.zeros(4, np.int32)
    lst = [np.zeros(4, np.float32) for _ in range(n)]
    stray = np.full(4, -1.0)  # what a send posted despite a bad batch would deliver
    # groups[q] holds every rank but q: rank r is outside groups[r] and inside the others
    groups = [dist.new_group([p for p in range(n) if p != q]) for q in range(n)]
    world = dist.group.WORLD
    own_piece = [np.zeros(4, np.float32) for _ in range(n)]
    own_piece[r] = np.zeros(5, np.float32)
    recv_splits = [1] * n
    recv_splits[r] = 2
    cases: dict[str, Callable[[], Any]] = {
        # object collectives
        "broadcast_object_list not a list": lambda: dist.broadcast_object_list((1, 2), src=0),
        "broadcast_object_list src": lambda: dist.broadcast_object_list([1], src=n),
        "broadcast_object_list src and group_src": lambda: dist.broadcast_object_list(
            [1], src=0, group_src=0),
        "all_gather_object not a list": lambda: dist.all_gather_object("ab", 1),
        "all_gather_object unpicklable": lambda: dist.all_gather_object([None] * n,
                                                                        lambda: None),
        "broadcast_object_list unpicklable": lambda: dist.broadcast_object_list(
            [1, threading.Lock()], src=r),
        "all_gather_object length": lambda: dist.all_gather_object([None] * (n + 1), 1),
        "gather_object length on dst": lambda: dist.gather_object(1, [None] * (n - 1), dst=r),
        "gather_object no list on dst": lambda: dist.gather_object(1, None, dst=r),
        "gather_object dst": lambda: dist.gather_object(1, None, dst=n),
        "scatter_object_list empty output": lambda: dist.scatter_object_list(
            [], [1] * n, src=r),
        "scatter_object_list output not a list": lambda: dist.scatter_object_list(
            None, [1] * n, src=r),
        "scatter_object_list input length": lambda: dist.scatter_object_list(
            [None], [1] * (n + 1), src=r),
        "scatter_object_list input not a list": lambda: dist.scatter_object_list(
            [None], "abc", src=r),
        "send_object_list not a list": lambda: dist.send_object_list("abc", dst=nxt),
        "send_object_list to itself": lambda: dist.send_object_list([1], dst=r),
        "send_object_list dst": lambda: dist.send_object_list([1], dst=n),
        "send_object_list no dst": lambda: dist.send_object_list([1]),
        "recv_object_list not a list": lambda: dist.recv_object_list("abc", src=prv),
        "recv_object_list from itself": lambda: dist.recv_object_list([None], src=r),
        "recv_object_list src": lambda: dist.recv_object_list([None], src=n),
        # point-to-point batches: all ops are checked before any is posted
        "P2POp op": lambda: dist.P2POp(print, f32, nxt),
        "P2POp blocking op": lambda: dist.P2POp(dist.send, f32, nxt),
        "batch_isend_irecv not a list": lambda: dist.batch_isend_irecv(
            dist.P2POp(dist.isend, f32, nxt)),
        "batch_isend_irecv not P2POps": lambda: dist.batch_isend_irecv([dist.isend]),
        "batch_isend_irecv peer": lambda: dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, stray, nxt), dist.P2POp(dist.irecv, f32, n)]),
        "batch_isend_irecv to itself": lambda: dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, stray, nxt), dist.P2POp(dist.isend, f32, r)]),
        "batch_isend_irecv tag": lambda: dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, stray, nxt), dist.P2POp(dist.irecv, f32, prv, tag="x")]),
        # rank lookups
        "get_global_rank out of range": lambda: dist.get_global_rank(world, n),
        "get_global_rank negative": lambda: dist.get_global_rank(world, -1),
        "get_global_rank not an int": lambda: dist.get_global_rank(world, "0"),
        "get_global_rank non-member": lambda: dist.get_global_rank(groups[r], 0),
        "get_group_rank not a member": lambda: dist.get_group_rank(groups[nxt], nxt),
        "get_group_rank out of range": lambda: dist.get_group_rank(world, n),
        "get_group_rank not an int": lambda: dist.get_group_rank(world, 0.0),
        "get_group_rank non-member": lambda: dist.get_group_rank(groups[r], nxt),
        # rooted collectives: every rank is the root, or none is, in its own view
        "scatter list length": lambda: dist.scatter(f32, lst + [f32], src=r),
        "scatter dtype": lambda: dist.scatter(f32, [i32] * n, src=r),
        "scatter own piece": lambda: dist.scatter(f32, own_piece, src=r),
        "scatter list on a non-root rank": lambda: dist.scatter(f32, lst, src=nxt),
        "scatter array on a non-root rank": lambda: dist.scatter(
            f32, np.zeros((n, 4), np.float32), src=nxt),
        "scatter src and group_src": lambda: dist.scatter(f32, None, src=nxt, group_src=0),
        "gather list on a non-root rank": lambda: dist.gather(f32, lst, dst=nxt),
        "gather array on a non-root rank": lambda: dist.gather(
            f32, np.zeros((n, 4), np.float32), dst=nxt),
        "gather dst and group_dst": lambda: dist.gather(f32, None, dst=nxt, group_dst=0),
        "broadcast src and group_src": lambda: dist.broadcast(f32, src=0, group_src=0),
        "reduce dst and group_dst": lambda: dist.reduce(f32, dst=0, group_dst=0),
        "reduce group_dst": lambda: dist.reduce(f32, group_dst=n),
        "reduce group_dst bool": lambda: dist.reduce(f32, group_dst=True),
        # ops
        "reduce op": lambda: dist.reduce(f32, dst=0, op="median"),
        "reduce bxor on float": lambda: dist.reduce(f32, dst=0, op=ReduceOp.BXOR),
        "reduce_scatter op": lambda: dist.reduce_scatter(f32, lst, op=[1]),
        "reduce_scatter min on complex": lambda: dist.reduce_scatter(
            np.zeros(4, np.complex64), [np.zeros(4, np.complex64)] * n, op=ReduceOp.MIN),
        "reduce_scatter avg on bool": lambda: dist.reduce_scatter(
            np.zeros(4, bool), [np.zeros(4, bool)] * n, op=ReduceOp.AVG),
        "reduce_scatter_tensor dtype": lambda: dist.reduce_scatter_tensor(
            f32, np.zeros(4 * n, np.int32)),
        # all-to-all
        "all_to_all input dtype": lambda: dist.all_to_all(lst, lst[:-1] + [i32]),
        "all_to_all output dtype": lambda: dist.all_to_all([i32] * n, lst),
        "all_to_all own piece": lambda: dist.all_to_all(own_piece, lst),
        "all_to_all_single dtype": lambda: dist.all_to_all_single(
            np.zeros(n, np.int32), np.zeros(n, np.float32)),
        "all_to_all_single input dim 0": lambda: dist.all_to_all_single(
            np.zeros(n + 1), np.zeros(n + 1)),
        "all_to_all_single output dim 0": lambda: dist.all_to_all_single(
            np.zeros((n + 1, 2)), np.zeros((n, 2))),
        "all_to_all_single own piece": lambda: dist.all_to_all_single(
            np.zeros(n + 1), np.zeros(n), recv_splits, [1] * n),
        "all_to_all_single split sizes type": lambda: dist.all_to_all_single(
            np.zeros(n), np.zeros(n), n, n),
        "all_to_all_single split sizes bool": lambda: dist.all_to_all_single(
            np.zeros(n), np.zeros(n), [True] * n, [True] * n),
    }
    out = {name: _catch(case, dist.InvalidUsage) for name, case in cases.items()}
    # Nothing was sent: collectives still line up, and so does point-to-point (a send
    # posted by a refused batch would be what the receive below gets first).
    y = np.full(3, r + 1.0)
    dist.all_reduce(y)
    assert (y == n * (n + 1) / 2).all(), y
    got = np.zeros(4)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, np.full(4, float(r)), nxt),
                                    dist.P2POp(dist.irecv, got, prv)])
    for w in works:
        w.wait()
    assert (got == prv).all(), got
    objs = ["a", {"b": 1}] if r == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0)
    assert objs == ["a", {"b": 1}], objs
    if r == 0:
        dist.send_object_list([("to", 1)], dst=1)
    elif r == 1:
        box = [None]
        assert dist.recv_object_list(box, src=0) == 0 and box == [("to", 1)], box
    inside = groups[nxt]
    assert dist.get_group_rank(inside, r) == dist.get_rank(inside)
    assert dist.get_global_rank(inside, dist.get_rank(inside)) == r
    return out


# ------------------------------------------------------ inputs of every kind

def array_kinds() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    total = n * (n - 1) / 2
    # non-contiguous: every other element, and a transposed 2-D array
    base = np.zeros(10)
    view = base[::2]
    view[:] = r
    dist.all_reduce(view)
    assert (base[::2] == total).all() and (base[1::2] == 0).all()
    m = np.arange(6.0).reshape(2, 3).T.copy(order="F").T  # C-order values, F-layout memory
    m2 = (np.arange(6.0).reshape(2, 3) * (r + 1)).T  # transposed view: not C-contiguous
    dist.broadcast(m2, src=0)
    assert (m2 == np.arange(6.0).reshape(2, 3).T).all()
    del m
    # 0-d and zero-size
    s = np.array(float(r))
    dist.all_reduce(s)
    assert s == total
    z = np.zeros((0, 3))
    dist.all_reduce(z)
    dist.broadcast(z, src=0)
    out = [np.zeros((0, 3)) for _ in range(n)]
    dist.all_gather(out, z)
    # multi-dimensional all_gather_into_tensor with a (ws, N) output
    x = np.full((2, 2), r, np.int32)
    o = np.zeros((n, 2, 2), np.int32)
    dist.all_gather_into_tensor(o, x)
    assert all((o[q] == q).all() for q in range(n))
    # torch 2.13's names for the two (all_gather_single, reduce_scatter_single)
    o[...] = -1
    dist.all_gather_single(o, x)
    assert all((o[q] == q).all() for q in range(n))
    piece = np.zeros((2, 2), np.int32)
    dist.reduce_scatter_single(piece, o + r)
    assert (piece == n * r + total).all(), piece
    # float16 accumulates in float32: 2048 + 1 + 1 ... is exact in fp32, not in fp16
    h = np.array([2048.0 if r == 0 else 1.0], np.float16)
    dist.all_reduce(h)
    assert h[0] == np.float16(2048.0 + (n - 1)), h
    # AVG: floats divide; integers truncate toward zero
    a = np.array([r * 1.0, -(r + 1)], np.float64)
    dist.all_reduce(a, op=ReduceOp.AVG)
    assert a[0] == total / n
    i = np.array([r, -r], np.int64)
    dist.all_reduce(i, op=ReduceOp.AVG)
    assert i[0] == int(total / n) and i[1] == -int(total / n), i
    # every rank bitwise identical for a float sum whose result depends on order
    rng = np.random.default_rng(r)
    f = rng.standard_normal(1000).astype(np.float32)
    dist.all_reduce(f)
    gathered = [np.zeros_like(f) for _ in range(n)]
    dist.all_gather(gathered, f)
    assert all(g.tobytes() == f.tobytes() for g in gathered)


def torch_inputs() -> None:
    import torch

    r, n = dist.get_rank(), dist.get_world_size()
    total = n * (n - 1) / 2
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.complex64):
        t = torch.full((3, 2), r, dtype=dt)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((3, 2), total, dtype=dt)), (dt, t)
    # bfloat16 accumulates in float32 and is rounded once
    b = torch.tensor([256.0 if r == 0 else 1.0], dtype=torch.bfloat16)
    dist.all_reduce(b)
    assert b.item() == torch.tensor([256.0 + n - 1]).to(torch.bfloat16).item()
    # non-contiguous tensor written back; a leaf that requires grad
    base = torch.zeros(4, 4)
    v = base.t()
    v.fill_(r)
    dist.all_reduce(v)
    assert torch.equal(base, torch.full((4, 4), total))
    w = torch.ones(3, requires_grad=True)
    dist.all_reduce(w)
    assert torch.equal(w.detach(), torch.full((3,), float(n)))
    # tensor-variant collectives
    out = torch.zeros(n * 2)
    dist.all_gather_into_tensor(out, torch.full((2,), float(r)))
    assert torch.equal(out, torch.arange(n).repeat_interleave(2).float())
    rs = torch.zeros(2)
    dist.reduce_scatter_tensor(rs, torch.ones(2 * n) * (r + 1))
    assert torch.equal(rs, torch.full((2,), n * (n + 1) / 2))
    a2a_in = torch.arange(n, dtype=torch.int32) + r * n
    a2a_out = torch.zeros(n, dtype=torch.int32)
    dist.all_to_all_single(a2a_out, a2a_in)
    assert torch.equal(a2a_out, torch.arange(n, dtype=torch.int32) * n + r)


def torch_lane() -> list:
    """Torch CPU tensors through every call the tiny-call lane takes, against NumPy;
    returns, per call, whether the lane was expected to take it."""
    import torch

    r, n = dist.get_rank(), dist.get_world_size()
    expect = []
    for dt in (torch.float32, torch.int64, torch.float64, torch.bool):
        t = torch.full((3, 2), r % 2 if dt is torch.bool else r + 1, dtype=dt)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        want = np.full((3, 2), (n - 1) % 2 if n == 1 else 1, bool) if dt is torch.bool else (
            np.full((3, 2), n, t.numpy().dtype))
        assert (t.numpy() == want).all(), (dt, t)
        expect.append(("all_reduce", True))
    b = torch.arange(5, dtype=torch.int32) * (r + 1)
    dist.broadcast(b, src=n - 1)
    assert (b.numpy() == np.arange(5) * n).all()
    expect.append(("broadcast", True))
    red = torch.ones(4, dtype=torch.float64)
    dist.reduce(red, dst=0)
    assert r != 0 or (red.numpy() == n).all()
    expect.append(("reduce", True))
    out = torch.zeros(n * 2)
    dist.all_gather_into_tensor(out, torch.full((2,), float(r)))
    assert (out.numpy() == np.repeat(np.arange(n), 2)).all()
    expect.append(("all_gather", True))
    rs = torch.zeros(2)
    dist.reduce_scatter_tensor(rs, torch.ones(2 * n) * (r + 1))
    assert (rs.numpy() == n * (n + 1) / 2).all()
    expect.append(("reduce_scatter", True))
    a2a_out = torch.zeros(n, dtype=torch.int32)
    dist.all_to_all_single(a2a_out, torch.arange(n, dtype=torch.int32) + r * n)
    assert (a2a_out.numpy() == np.arange(n) * n + r).all()
    expect.append(("all_to_all", True))
    v = torch.zeros(4, 4).t()
    v.fill_(r + 1)
    dist.all_reduce(v)  # non-contiguous: the lane, through a contiguous copy written back
    assert (v.numpy() == n * (n + 1) / 2).all()
    expect.append(("all_reduce", True))
    bf = torch.full((3,), float(r + 1), dtype=torch.bfloat16)
    dist.all_reduce(bf)  # bfloat16 takes the lane too (its bits as ops.BFLOAT16)
    assert bf.float().tolist() == [n * (n + 1) / 2] * 3
    expect.append(("all_reduce", True))
    # what NumPy cannot view goes the general way, with the same results
    g = torch.ones(3, requires_grad=True)
    dist.all_reduce(g)
    assert (g.detach().numpy() == n).all()
    expect.append(("all_reduce", False))
    return expect if n > 1 else [(k, False) for k, _ in expect]


def async_everything() -> None:
    """Every collective with async_op=True, all outstanding at once (small and large
    sizes), waited on in reverse order; results checked after the waits only."""
    r, n = dist.get_rank(), dist.get_world_size()
    big = 300_000  # float64: past the one-shot range
    x = np.full(1000, r, np.float64)
    xl = np.full(big, r, np.float64)
    y = np.full(8, r, np.int32)
    red = np.full(5, r + 1, np.int64)
    lst = [np.zeros(8, np.int32) for _ in range(n)]
    agt = np.zeros((n, 3), np.float32)
    gat = [np.zeros(2 + q) for q in range(n)] if r == 0 else None
    sca = np.zeros(2 + r)
    rs = np.zeros(2 + r)
    rst = np.zeros(big // n)
    a2a = [np.zeros(1 + q) for q in range(n)]
    a2as = np.zeros(n * 2, np.int16)
    works = [
        dist.all_reduce(x, async_op=True),
        dist.all_reduce(xl, op=ReduceOp.MAX, async_op=True),
        dist.broadcast(y, src=n - 1, async_op=True),
        dist.reduce(red, dst=n - 1, op=ReduceOp.PRODUCT, async_op=True),
        dist.all_gather(lst, np.full(8, r, np.int32), async_op=True),
        dist.all_gather_into_tensor(agt, np.full(3, r, np.float32), async_op=True),
        dist.gather(np.full(2 + r, float(r)), gat, dst=0, async_op=True),
        dist.scatter(sca, [np.full(2 + q, 10.0 + q) for q in range(n)] if r == n - 1 else None,
                     src=n - 1, async_op=True),
        dist.reduce_scatter(rs, [np.full(2 + q, r + 1.0) for q in range(n)], async_op=True),
        dist.reduce_scatter_tensor(rst, np.full(big // n * n, float(r)), op=ReduceOp.AVG,
                                   async_op=True),
        dist.all_to_all(a2a, [np.full(1 + r, r * 10.0 + q) for q in range(n)], async_op=True),
        dist.all_to_all_single(a2as, np.repeat(np.arange(n, dtype=np.int16) + 10 * r, 2),
                               async_op=True),
        dist.barrier(async_op=True),
    ]
    assert all(w is not None for w in works), works
    for w in reversed(works):
        w.wait()
        assert w.is_completed() and w.exception() is None
    total = n * (n - 1) / 2
    assert (x == total).all() and (xl == n - 1).all()
    assert (y == n - 1).all()
    if r == n - 1:
        assert (red == np.prod(np.arange(1, n + 1))).all(), red
    else:
        assert (red == r + 1).all(), red  # non-roots unchanged
    assert all((lst[q] == q).all() for q in range(n))
    assert (agt == np.arange(n)[:, None]).all(), agt
    if r == 0:
        assert all((gat[q] == q).all() and gat[q].size == 2 + q for q in range(n)), gat
    assert (sca == 10.0 + r).all(), sca
    assert (rs == n * (n + 1) / 2).all(), rs
    assert (rst == total / n).all(), rst
    assert all((a2a[q] == q * 10.0 + r).all() for q in range(n)), a2a
    assert (a2as == np.repeat(np.arange(n, dtype=np.int16) * 10 + r, 2)).all(), a2as
    fut = dist.all_reduce(np.ones(3), async_op=True).get_future()
    fut.result(timeout=30)


def overlapping_subgroups() -> list:
    r, n = dist.get_rank(), dist.get_world_size()
    a = dist.new_group(list(range(0, n - 1)))
    b = dist.new_group(list(range(1, n)))
    results = []
    for _ in range(3):
        for g in (a, b):
            x = np.array([float(r)])
            w = dist.all_reduce(x, group=g, async_op=True)
            if w is None:
                results.append(None)
                continue
            w.wait()
            results.append(float(x[0]))
    dist.barrier()
    return results


def objects() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    objs = [{"rank": r}, f"s{r}", (r, [r] * r)]
    dist.broadcast_object_list(objs, src=n - 1)
    assert objs == [{"rank": n - 1}, f"s{n - 1}", (n - 1, [n - 1] * (n - 1))]
    gathered = [None] * n
    dist.all_gather_object(gathered, {"r": r, "pad": "x" * r * 100})
    assert [g["r"] for g in gathered] == list(range(n))
    got = [None] * n if r == 0 else None
    dist.gather_object(("hi", r), got, dst=0)
    if r == 0:
        assert got == [("hi", q) for q in range(n)]
    out = [None]
    dist.scatter_object_list(out, [f"piece{q}" * (q + 1) for q in range(n)] if r == 0 else None,
                             src=0)
    assert out[0] == f"piece{r}" * (r + 1)
    if n >= 2:
        if r == 0:
            dist.send_object_list([1, "two", {3: 4}], dst=1)
        elif r == 1:
            box = [None, None, None]
            assert dist.recv_object_list(box) == 0
            assert box == [1, "two", {3: 4}]
    dist.barrier()


def object_paths() -> None:
    """The object collectives on the tiny-call lane: objects of different sizes padded to
    the longest, the root given as a group rank (on a group whose ranks run backwards),
    with the groups' own array calls made to fail; then one object far larger than the
    others (past PAD_SLACK_BYTES), whose uneven pieces take the general path; last,
    send/recv_object_list between group ranks."""
    from meshcast import _objects

    r, n = dist.get_rank(), dist.get_world_size()
    backwards = dist.new_group(list(range(n - 1, -1, -1)))

    def obj(q: int, big: bool = False) -> dict:
        size = _objects.PAD_SLACK_BYTES + 1000 if big and q == n - 1 else q * 37
        return {"from": q, "pad": "x" * size}

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general path ran")

    for big in (False, True):
        for group in (None, backwards):
            pg = dist.group.WORLD if group is None else backwards
            kinds = ("all_gather", "gather", "scatter", "broadcast")
            if not big:
                for kind in kinds:
                    setattr(pg, kind, refuse)  # instance attributes
            try:
                every = [None] * n
                dist.all_gather_object(every, obj(r, big), group=group)
                want = [obj(q, big) for q in range(n)]  # (in group order)
                assert every == (want if group is None else want[::-1]), (big, group)
                got = [None] * n
                root = 0 if group is None else n - 1  # (global; group rank 0 of backwards)
                dist.gather_object(obj(r, big), got if r == root else None, group=group,
                                   group_dst=0)
                if r == root:
                    assert got == (want if group is None else want[::-1]), (big, group)
                out = [None]
                pieces = [obj(q, big) for q in range(n)]  # (in group order)
                dist.scatter_object_list(out, pieces if r == root else None, group=group,
                                         group_src=0)
                assert out[0] == pieces[r if group is None else n - 1 - r], (big, group)
                box = [obj(root), "tail"] if r == root else [None, None]
                dist.broadcast_object_list(box, group=group, group_src=0)
                assert box == [obj(root), "tail"], (big, group)
            finally:
                for kind in kinds:
                    pg.__dict__.pop(kind, None)
    # send/recv_object_list with group ranks: group rank 0 of backwards (global n - 1)
    # to its group rank 1 (global n - 2)
    if r == n - 1:
        dist.send_object_list([obj(r), "tail"], group=backwards, group_dst=1)
    elif r == n - 2:
        box = [None, None]
        assert dist.recv_object_list(box, group=backwards, group_src=0) == n - 1
        assert box == [obj(n - 1), "tail"], box
    dist.barrier()


def object_sizes_share_plans() -> None:
    """Object collectives whose pickles grow a little every call (60 sizes) give every
    object back, and the array calls under them plan once per size class, not once per
    size (each new plan costs tens of microseconds)."""
    from meshcast import _objects
    from meshcast.testing.paths import plans_built

    r, n = dist.get_rank(), dist.get_world_size()
    with plans_built() as built:
        sizes = set()
        for s in range(60):
            def obj(q: int, s: int = s) -> dict:
                return {"q": q, "pad": "x" * (100 + 7 * s + q)}

            sizes.add(len(pickle.dumps(obj(r), protocol=pickle.HIGHEST_PROTOCOL)))
            every = [None] * n
            dist.all_gather_object(every, obj(r))
            assert every == [obj(q) for q in range(n)], s
            got = [None] * n
            dist.gather_object(obj(r), got if r == 0 else None, dst=0)
            assert r != 0 or got == [obj(q) for q in range(n)], s
            out = [None]
            dist.scatter_object_list(out, [obj(q) for q in range(n)] if r == 0 else None, src=0)
            assert out[0] == obj(r), s
            box = [obj(0), s] if r == 0 else [None, None]
            dist.broadcast_object_list(box, src=0)
            assert box == [obj(0), s], s
    classes = {_objects._size_class(z) for z in sizes}
    assert len(sizes) == 60 and len(classes) < 12, (len(sizes), classes)
    # (per collective at most a plan per class and one for its sizes; 60 without classes)
    assert len(built) <= 4 * (len(classes) + 3), (len(built), len(classes), built[:8])
    dist.barrier()


def numpy_bfloat16() -> None:
    """NumPy bfloat16 (ml_dtypes): reductions accumulate in float32, layouts written back."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    r, n = dist.get_rank(), dist.get_world_size()
    x = np.array([256.0 if r == 0 else 1.0, r], dtype=bf16)
    dist.all_reduce(x)
    assert x[0] == bf16(256.0 + n - 1) and x[1] == bf16(n * (n - 1) / 2), x
    base = np.zeros((3, 4), dtype=bf16)
    view = base[:, ::2]
    view[...] = r + 1
    dist.all_reduce(view, op=ReduceOp.MAX)
    assert (base[:, ::2] == bf16(n)).all() and (base[:, 1::2] == 0).all()
    y = np.full(5, r, dtype=bf16)
    dist.broadcast(y, src=n - 1)
    assert (y == bf16(n - 1)).all()


def tiny_call_paths() -> bool:
    """The cached tiny-call lane (meshcast.lanes) and the general path agree, keep
    call order, and refuse bad input the same way. Returns whether the arena round ran
    compiled."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    total = n * (n - 1) // 2
    for k in range(3):  # rank 0: the tiny lane; others: the general path (strided views)
        base = np.zeros(8, np.int64)
        x = base[:4] if r == 0 else general_path(base[::2])
        x[:] = r + k
        dist.all_reduce(x)
        assert (x == total + n * k).all(), x
        y = base[:4] if r != 0 else general_path(base[::2])
        y[:] = r
        dist.broadcast(y, src=n - 1)
        assert (y == n - 1).all(), y
    for root in range(n):  # reduce: rank 0 on the lane, the others on the general path
        base = np.zeros(8, np.float64)
        z = base[:4] if r == 0 else general_path(base[::2])
        z[:] = r + 1
        dist.reduce(z, dst=root, op=ReduceOp.PRODUCT)
        want = float(np.prod(np.arange(1, n + 1))) if r == root else r + 1
        assert (z == want).all(), (root, z)
    # all_gather_into_tensor / reduce_scatter_tensor: rank 0 on the lane, the others
    # with strided inputs on the general path; then in place.
    for k in range(3):
        src = np.zeros((3, 2), np.int32)
        src[:, 0] = r + k
        inp = general_path(src[:, 0]) if r != 0 else src[:, 0].copy()
        out = np.zeros(3 * n, np.int32)
        dist.all_gather_into_tensor(out, inp)
        assert (out.reshape(n, 3) == (np.arange(n) + k)[:, None]).all(), out
        full = np.arange(2 * n, dtype=np.float64) * (r + 1)
        strided = np.zeros(4 * n)
        strided[::2] = full
        piece = np.zeros(2)
        dist.reduce_scatter_tensor(piece, full if r == 0 else general_path(strided[::2]),
                                   op=ReduceOp.AVG if k == 1 else ReduceOp.SUM)
        expected = np.arange(2 * r, 2 * r + 2) * (n * (n + 1) / 2)
        assert np.allclose(piece, expected / (n if k == 1 else 1)), (k, piece)
        whole = np.zeros(4 * n, np.int64)
        whole[4 * r:4 * r + 4] = r + 10
        dist.all_gather_into_tensor(whole, whole[4 * r:4 * r + 4])  # in place
        assert (whole.reshape(n, 4) == (np.arange(n) + 10)[:, None]).all()
    # (what each rank called on the lane: rank 0 all but broadcast, the others broadcast
    # and the in-place all_gather)
    lane_made = ({"all_reduce", "all_gather", "reduce_scatter", "reduce"} if r == 0
                 else {"broadcast", "all_gather"})
    assert {key[0] for key in pg.lane.plans} >= lane_made, pg.lane.plans.keys()
    assert any(plan for key, plan in pg.lane.plans.items() if key[0] == "reduce") or r != 0
    # Call order: a tiny synchronous call queues behind pending async work.
    big = np.full(300_000, r, np.float64)
    tiny = np.full(3, r, np.float64)
    work = dist.all_reduce(big, async_op=True)
    dist.all_reduce(tiny)
    work.wait()
    assert (big == total).all() and (tiny == total).all()
    # A cached (dtype, shape) does not skip validation of a new op or argument.
    f = np.ones(4, np.float32)
    dist.all_reduce(f)
    for call, text in ((lambda: dist.all_reduce(f, op=ReduceOp.BAND), "BAND"),
                       (lambda: dist.all_reduce(f, op=[1]), "'op'"),
                       (lambda: dist.broadcast(f, src=True), "'src'"),
                       (lambda: dist.broadcast(f, src=n + 3), "'src'"),
                       (lambda: dist.all_reduce(_read_only(f)), "read-only"),
                       (lambda: dist.reduce_scatter_tensor(np.zeros(1, np.float32),
                                                           np.ones(n, np.float32),
                                                           op=ReduceOp.BXOR), "BXOR"),
                       (lambda: dist.all_gather_into_tensor(np.zeros(n + 1, np.float32),
                                                            np.ones(1, np.float32)),
                        "'output_tensor' holds")):
        try:
            call()
        except dist.InvalidUsage as exc:
            assert text in str(exc) and f"(rank {r})" in str(exc), exc
        else:
            raise AssertionError(f"no error for {text}")
    # AVG, MIN, bool and 0-d through the lane, against NumPy
    a = np.array([float(r), -r - 1.0])
    dist.all_reduce(a, op=ReduceOp.AVG)
    assert (a == [total / n, -(total + n) / n]).all(), a
    m = np.array(r, np.int32)
    dist.all_reduce(m, op=ReduceOp.MIN)
    assert m == 0
    b = np.array([r == 0, False])
    dist.all_reduce(b, op=ReduceOp.BOR)
    assert b.tolist() == [True, False]
    dist.barrier()
    assert pg.last_algorithm == "barrier/oneshot" and ("barrier",) in pg.lane.plans
    return pg.arena._round is not None


def combine_kernels() -> bool:
    """Every (dtype, op) the tiny lane reduces, compiled combine or NumPy, gives bitwise
    NumPy's rank-order fold on every rank, also when odd ranks take the general path
    (strided arrays); extremes wrap, NaN and inf propagate. reduce_scatter reduces
    the same way; broadcast and all_gather copy every dtype. Returns whether the
    compiled combine was there to run."""
    r, n = dist.get_rank(), dist.get_world_size()
    ops_ = [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG,
            ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR]
    dtypes = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float32", "float64", "bool", "complex64"]
    kernels = {ReduceOp.SUM: np.add, ReduceOp.AVG: np.add, ReduceOp.PRODUCT: np.multiply,
               ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum,
               ReduceOp.BAND: np.bitwise_and, ReduceOp.BOR: np.bitwise_or,
               ReduceOp.BXOR: np.bitwise_xor}

    def data(rank: int, dtype: np.dtype, count: int) -> np.ndarray:
        rng = np.random.default_rng(rank * 7919 + count)
        if dtype.kind == "b":
            return rng.random(count) < 0.5
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            a = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
            a[:3] = [info.max, info.min, -1 if dtype.kind == "i" else 1][:count]
            return a
        a = (rng.standard_normal(count) * 100).astype(dtype)
        if count >= 3 and rank == 1:
            a[:3] = [np.nan, np.inf, -0.0]
        return a

    checked = 0
    for name in dtypes:
        dtype = np.dtype(name)
        for count in (1, 5, 1000, 20_000):
            every = [data(q, dtype, count) for q in range(n)]
            for op in ops_:
                if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and dtype.kind in "fc":
                    continue
                if (op in (ReduceOp.MIN, ReduceOp.MAX) and dtype.kind == "c") or (
                        op is ReduceOp.AVG and dtype.kind == "b"):
                    continue
                want = every[0].copy()
                if n > 1:
                    kernels[op](every[0], every[1], out=want)
                    for other in every[2:]:
                        kernels[op](want, other, out=want)
                if op is ReduceOp.AVG:
                    ops_mod.finish_average(want, n)
                for general in (False, True):  # odd ranks: strided arrays, general path
                    base = np.zeros(2 * count, dtype)
                    x = general_path(base[::2]) if general and r % 2 else base[:count]
                    x[...] = every[r]
                    with np.errstate(all="ignore"):
                        dist.all_reduce(x, op=op)
                    assert x.tobytes() == want.tobytes(), (name, count, op, general, x[:4],
                                                           want[:4])
                    root = checked % n
                    y = general_path(base[::2]) if general and r % 2 else base[:count]
                    y[...] = every[r]
                    with np.errstate(all="ignore"):
                        dist.reduce(y, dst=root, op=op)
                    assert y.tobytes() == (want if r == root else every[r]).tobytes(), (
                        "reduce", name, count, op, root)
                    checked += 1
                # reduce_scatter: my piece of the fold of every rank's whole input
                inputs = [data(q + n, dtype, count * n) for q in range(n)]
                piece = np.zeros(count, dtype)
                with np.errstate(all="ignore"):
                    dist.reduce_scatter_tensor(piece, inputs[r], op=op)
                mine = [a[r * count:(r + 1) * count] for a in inputs]
                want = mine[0].copy()
                for other in mine[1:]:
                    kernels[op](want, other, out=want)
                if op is ReduceOp.AVG:
                    ops_mod.finish_average(want, n)
                assert piece.tobytes() == want.tobytes(), ("reduce_scatter", name, count, op)
            z = np.zeros(count, dtype) if r else every[0].copy()
            dist.broadcast(z, src=0)
            assert z.tobytes() == every[0].tobytes(), ("broadcast", name, count)
            gathered = np.zeros((n, count), dtype)
            dist.all_gather_into_tensor(gathered, every[r])
            assert gathered.tobytes() == np.stack(every).tobytes(), ("all_gather", name, count)
    assert checked > 500, checked
    return dist.group.WORLD.arena.compiled_oneshot is not None


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v
