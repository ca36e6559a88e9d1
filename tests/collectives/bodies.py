"""Rank bodies for collective semantics tests (module level: spawned processes import them)."""

from __future__ import annotations

import numpy as np

import meshcast as dist
from meshcast import ReduceOp


def _catch(fn, exc_type):
    try:
        fn()
    except exc_type as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


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
    return _catch(call, dist.MeshcastError)


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


def async_everything() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    x = np.full(1000, r, np.float64)
    y = np.full(8, r, np.int32)
    lst = [np.zeros(8, np.int32) for _ in range(n)]
    works = [
        dist.all_reduce(x, async_op=True),
        dist.broadcast(y, src=n - 1, async_op=True),
        dist.all_gather(lst, np.full(8, r, np.int32), async_op=True),
        dist.barrier(async_op=True),
    ]
    for w in works:
        w.wait()
        assert w.is_completed() and w.exception() is None
    assert (x == n * (n - 1) / 2).all()
    assert (y == n - 1).all()
    assert all((lst[q] == q).all() for q in range(n))
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


def tiny_call_paths() -> None:
    """The cached tiny-call lane (meshcast.small_calls) and the general path agree, keep
    call order, and refuse bad input the same way."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    total = n * (n - 1) // 2
    for k in range(3):  # rank 0: the tiny lane; others: staged (non-contiguous) buffers
        base = np.zeros(8, np.int64)
        x = base[:4] if r == 0 else base[::2]
        x[:] = r + k
        dist.all_reduce(x)
        assert (x == total + n * k).all(), x
        y = base[:4] if r != 0 else base[::2]
        y[:] = r
        dist.broadcast(y, src=n - 1)
        assert (y == n - 1).all(), y
    # all_gather_into_tensor / reduce_scatter_tensor: rank 0 on the lane, the others
    # with non-contiguous (staged) inputs on the general path; then in place.
    for k in range(3):
        src = np.zeros((3, 2), np.int32)
        src[:, 0] = r + k
        inp = src[:, 0] if r != 0 else src[:, 0].copy()
        out = np.zeros(3 * n, np.int32)
        dist.all_gather_into_tensor(out, inp)
        assert (out.reshape(n, 3) == (np.arange(n) + k)[:, None]).all(), out
        full = np.arange(2 * n, dtype=np.float64) * (r + 1)
        strided = np.zeros(4 * n)
        strided[::2] = full
        piece = np.zeros(2)
        dist.reduce_scatter_tensor(piece, full if r == 0 else strided[::2],
                                   op=ReduceOp.AVG if k == 1 else ReduceOp.SUM)
        expected = np.arange(2 * r, 2 * r + 2) * (n * (n + 1) / 2)
        assert np.allclose(piece, expected / (n if k == 1 else 1)), (k, piece)
        whole = np.zeros(4 * n, np.int64)
        whole[4 * r:4 * r + 4] = r + 10
        dist.all_gather_into_tensor(whole, whole[4 * r:4 * r + 4])  # in place
        assert (whole.reshape(n, 4) == (np.arange(n) + 10)[:, None]).all()
    assert {key[0] for key in pg.small.plans} >= {"all_reduce", "broadcast", "all_gather",
                                                  "reduce_scatter"}, pg.small.plans.keys()
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


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v
