"""Bodies run on every rank of a traced world (module level: they are pickled)."""

from __future__ import annotations

import time

import numpy as np

import meshcast as dist
from meshcast.errors import MeshcastError
from meshcast.testing.paths import general_path


def _ran(log: list, kind: str, group=None) -> None:
    pg = group if group is not None else dist.group.WORLD
    log.append((kind, pg.last_algorithm))


def every_path() -> dict:
    """One call down each path a collective can take on one host; returns what
    ``last_algorithm`` said after each, in call order, for the trace to match."""
    r, n = dist.get_rank(), dist.get_world_size()
    log: list = []
    x = np.arange(4, dtype=np.float32) + r
    dist.all_reduce(x)  # the tiny lane
    _ran(log, "all_reduce")
    y = general_path(np.ones((3, 5), np.complex128)[:, ::2])  # the group's own path
    dist.all_reduce(y, op=dist.ReduceOp.PRODUCT)
    _ran(log, "all_reduce")
    z = np.ones(1000, np.int32)
    dist.all_reduce(z, algorithm="ring")  # a schedule: rounds are recorded
    _ran(log, "all_reduce")
    big = np.ones(1 << 19, np.float32)  # 2 MiB: single-copy where CMA is allowed
    dist.all_reduce(big)
    _ran(log, "all_reduce")
    w = dist.broadcast(np.full(8, r, np.int64), src=n - 1, async_op=True)
    w.wait()
    _ran(log, "broadcast")
    out = np.zeros(2 * n, np.float32)
    dist.all_gather_into_tensor(out, np.full(2, r, np.float32))
    _ran(log, "all_gather")
    dist.barrier()
    _ran(log, "barrier")
    if n > 1:  # a ring of sends: each rank sends right, receives from the left
        got = np.zeros(3, np.int16)
        send = dist.isend(np.full(3, r, np.int16), (r + 1) % n)
        dist.recv(got, (r - 1) % n)
        send.wait()
        assert (got == (r - 1) % n).all()
        pair = np.zeros(2, np.float32)  # a sendrecv pair: the lane's one compiled call
        for work in dist.batch_isend_irecv([
                dist.P2POp(dist.irecv, pair, (r - 1) % n),
                dist.P2POp(dist.isend, np.full(2, r, np.float32), (r + 1) % n)]):
            work.wait()
        assert (pair == (r - 1) % n).all()
    evens = dist.new_group([q for q in range(n) if q % 2 == 0])
    if r % 2 == 0:
        v = np.ones(2, np.float32)
        dist.all_reduce(v, group=evens)
        _ran(log, "all_reduce", evens)
    a = np.full(5, r, np.int32)
    dist.all_reduce(a, async_op=True).wait()  # async, through the lane too
    assert (a == sum(range(n))).all()
    _ran(log, "all_reduce")
    got = np.zeros(n, np.int64)
    dist.all_to_all_single(got, np.full(n, r, np.int64), [1] * n, [1] * n,
                           async_op=True).wait()  # (equal splits given: the lane's too)
    assert (got == np.arange(n)).all()
    _ran(log, "all_to_all")
    pieces = [np.zeros(3, np.float64) for _ in range(n)]
    dist.all_gather(pieces, np.full(3, float(r)))  # torch's list form, through the lane too
    assert all((p == q).all() for q, p in enumerate(pieces))
    _ran(log, "all_gather")
    outs = [np.zeros(2, np.float32) for _ in range(n)]
    dist.all_to_all(outs, [np.full(2, r * n + q, np.float32) for q in range(n)])  # lists
    assert all((p == q * n + r).all() for q, p in enumerate(outs))
    _ran(log, "all_to_all")
    # the lane again, with a fold the compiled kernels have (float32 MAX) and one they
    # lack (complex64 SUM: NumPy's)
    for dtype, op in ((np.float32, dist.ReduceOp.MAX), (np.complex64, dist.ReduceOp.SUM)):
        dist.all_reduce(np.arange(4, dtype=dtype) * r, op=op)
        _ran(log, "all_reduce")
    # the group's own one-shot path (a view the lane declines) with a fold the kernels
    # have: its program runs in the compiled interpreter
    s = general_path(np.ones((4, 2), np.int32)[:, 0])
    dist.all_reduce(s)
    assert (s == n).all()
    _ran(log, "all_reduce")
    return {"log": log, "ring_peer": (r + 1) % n}


def across_hosts() -> list:
    r = dist.get_rank()
    log: list = []
    x = np.full(3, r, np.float32)
    dist.all_reduce(x)
    _ran(log, "all_reduce")
    big = np.ones(1 << 16, np.float32)
    dist.all_reduce(big)
    _ran(log, "all_reduce")
    return log


def rank_never_arrives(late: int, sleep: float, algorithm: str | None = None) -> str:
    """Every rank but ``late`` enters an all_reduce that ``late`` enters only after
    the others have timed out; returns how the call ended here."""
    x = np.ones(4, np.float32)
    dist.all_reduce(x)  # all together once
    if dist.get_rank() == late:
        time.sleep(sleep)
        return "late"
    try:
        dist.all_reduce(x, algorithm=algorithm)
    except MeshcastError as exc:  # the first to time out aborts the group for the rest
        return "failed: " + "\n".join([str(exc), *getattr(exc, "__notes__", [])])
    return "completed"


def symmetric_calls() -> list:
    """A symmetric all_reduce whose fold the compiled kernels have (float32: the lane),
    one they lack (complex64: the general path, Python's executor runs the program), a
    symmetric all_gather (the lane) and an async all_reduce and all_gather (the lane); returns
    ``last_algorithm`` after each."""
    r, n = dist.get_rank(), dist.get_world_size()
    log: list = []
    for dtype in (np.float32, np.complex64):
        x = dist.empty(1 << 18, dtype)  # (past the one-shot sizes: the symmetric path)
        x[:] = r + 1
        dist.all_reduce(x)
        assert (x == n * (n + 1) // 2).all()
        _ran(log, "all_reduce")
    out = dist.empty(n * (1 << 17), np.float32)
    dist.all_gather_into_tensor(out, np.full(1 << 17, r, np.float32))
    assert (out.reshape(n, -1) == np.arange(n, dtype=np.float32)[:, None]).all()
    _ran(log, "all_gather")
    y = dist.empty(1 << 19, np.float32)  # 2 MiB, async: the copies on the worker
    y[:] = r
    dist.all_reduce(y, async_op=True).wait()
    assert (y == n * (n - 1) // 2).all()
    _ran(log, "all_reduce")
    dist.all_gather_into_tensor(out, np.full(1 << 17, r, np.float32), async_op=True).wait()
    assert (out.reshape(n, -1) == np.arange(n, dtype=np.float32)[:, None]).all()
    _ran(log, "all_gather")
    return log
