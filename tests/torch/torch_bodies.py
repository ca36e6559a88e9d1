"""What each rank runs in the torch backend tests (module-level, so the forkserver can import it).

Every body is SPMD and rank-agnostic: ``body(rank, world_size)``, data chosen
so the expected value is closed-form, checks done on the rank itself (an
AssertionError travels back to the parent with its traceback).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

#: Every dtype torch.distributed lets through on CPU. gloo rejects int16 and the
#: unsigned types wider than 8 bits ("Invalid scalar type"); meshcast carries them.
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.int16, torch.int8, torch.uint8, torch.uint16, torch.uint32,
          torch.uint64, torch.bool, torch.complex64, torch.complex128]


def _eq(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got, want.to(got.dtype), msg=lambda m: f"{what}: {m}",
                               atol=1e-2 if got.dtype in (torch.float16, torch.bfloat16) else 0,
                               rtol=1e-2 if got.dtype in (torch.float16, torch.bfloat16) else 0)


def _val(rank: int, dtype: torch.dtype, n: int = 5) -> torch.Tensor:
    """Rank-specific data that every dtype can hold."""
    if dtype == torch.bool:
        return torch.tensor([(rank + i) % 2 == 0 for i in range(n)])
    base = torch.arange(n, dtype=torch.float64) + rank + 1
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype)
    return base.to(dtype)


# ----------------------------------------------------------------- collectives


def collectives(rank: int, n: int) -> dict[str, Any]:
    """Every collective of torch.distributed, sync and async, on the default group."""
    assert dist.get_backend() == "meshcast"
    pg = dist.group.WORLD
    assert pg.group_name == "0" and pg.name() == "meshcast", (pg.group_name, pg.name())

    # broadcast: every root, every dtype, sync and async, non-contiguous.
    for root in range(n):
        for dtype in DTYPES:
            t = _val(rank, dtype)
            dist.broadcast(t, src=root)
            _eq(t, _val(root, dtype), f"broadcast {dtype} root {root}")
        t = torch.zeros(4, 6)[:, ::2] + rank
        dist.broadcast(t, src=root, async_op=True).wait()
        _eq(t, torch.full((4, 3), float(root)), "broadcast non-contiguous")
    big = torch.arange(300_000, dtype=torch.float32) * (rank + 1)
    dist.broadcast(big, src=n - 1)
    _eq(big, torch.arange(300_000, dtype=torch.float32) * n, "broadcast large")

    # all_reduce: every op that torch allows on CPU, every dtype.
    for dtype in DTYPES:
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]
        if dtype.is_complex:
            ops = [dist.ReduceOp.SUM]
        for op in ops:
            t = _val(rank, dtype)
            dist.all_reduce(t, op=op)
            vals = torch.stack([_val(r, dtype).to(torch.complex128 if dtype.is_complex
                                                  else torch.float64) for r in range(n)])
            if dtype == torch.bool:
                vals = vals.bool()
                want = {dist.ReduceOp.SUM: vals.any(0), dist.ReduceOp.MAX: vals.any(0),
                        dist.ReduceOp.MIN: vals.all(0), dist.ReduceOp.PRODUCT: vals.all(0)}[op]
            else:
                want = {dist.ReduceOp.SUM: vals.sum(0),
                        dist.ReduceOp.MAX: vals.amax(0) if not dtype.is_complex else None,
                        dist.ReduceOp.MIN: vals.amin(0) if not dtype.is_complex else None,
                        dist.ReduceOp.PRODUCT: vals.prod(0)}[op]
            if dtype in (torch.uint8, torch.int8):
                want = want.to(torch.int64).to(dtype)  # wraps as the integer type does
            _eq(t, want, f"all_reduce {op} {dtype}")
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16,
                  torch.uint32, torch.uint64):
        for op, fn in ((dist.ReduceOp.BAND, np.bitwise_and), (dist.ReduceOp.BOR, np.bitwise_or),
                       (dist.ReduceOp.BXOR, np.bitwise_xor)):
            t = torch.tensor([rank * 3 + 1, 7, rank], dtype=dtype)
            dist.all_reduce(t, op=op)
            want = fn.reduce(np.array([[r * 3 + 1, 7, r] for r in range(n)]), axis=0)
            _eq(t, torch.from_numpy(want), f"all_reduce {op} {dtype}")
    t = torch.full((7,), float(rank))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    _eq(t, torch.full((7,), (n - 1) / 2), "all_reduce AVG")
    t = torch.full((3,), 2.0 * rank)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    _eq(t, torch.full((3,), float(sum(range(n)))), "all_reduce PREMUL_SUM")
    t = torch.tensor(float(rank))  # 0-dim
    dist.all_reduce(t)
    _eq(t, torch.tensor(float(sum(range(n)))), "all_reduce 0-dim")
    c = torch.complex(torch.ones(3), torch.full((3,), float(rank)))
    w = dist.all_reduce(c, async_op=True)
    w.wait()
    _eq(c, torch.complex(torch.full((3,), float(n)), torch.full((3,), float(sum(range(n))))),
        "all_reduce complex")
    t = torch.ones(4, 4).t()[1:, :]  # a non-contiguous view
    dist.all_reduce(t)
    _eq(t, torch.full((3, 4), float(n)), "all_reduce transposed view")
    # requires_grad leaves, called in grad mode as DDP-less user code does: the backend
    # must hide its write from autograd itself (an in-place copy_ into a leaf that
    # requires grad raises otherwise). The strided leaf goes through a staging copy that
    # is written back with copy_, sync in this thread and async on meshcast's worker
    # (grad mode is per thread).
    assert torch.is_grad_enabled()
    leaf = torch.ones(3, requires_grad=True)
    strided = torch.empty_strided((3, 4), (1, 3)).fill_(1.0).requires_grad_()
    assert strided.is_leaf and not strided.is_contiguous()
    dist.all_reduce(leaf)
    dist.all_reduce(strided)
    _eq(leaf.detach(), torch.full((3,), float(n)), "all_reduce requires_grad leaf")
    _eq(strided.detach(), torch.full((3, 4), float(n)), "all_reduce strided leaf")
    dist.all_reduce(strided, async_op=True).wait()
    dist.broadcast(strided, src=n - 1, async_op=True).wait()
    _eq(strided.detach(), torch.full((3, 4), float(n * n)), "async ops on a strided leaf")
    assert strided.is_leaf and strided.requires_grad and strided.grad is None
    (strided * 2).sum().backward()  # autograd still sees an ordinary leaf
    _eq(strided.grad, torch.full((3, 4), 2.0), "grad of the leaf after the collectives")
    big = torch.ones(1_000_003)
    dist.all_reduce(big)
    _eq(big[:3], torch.full((3,), float(n)), "all_reduce large")
    assert big.min().item() == n

    # async: returns a torch Work with a future whose value is the outputs.
    t = torch.full((4,), float(rank))
    work = dist.all_reduce(t, async_op=True)
    assert isinstance(work, dist.Work)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    _eq(fut.wait(), torch.full((4,), 2.0 * sum(range(n))), "future.then")
    assert work.is_completed() and work.is_success() and work.exception() is None
    _eq(work.result()[0], torch.full((4,), float(sum(range(n)))), "work.result()")

    # coalesced all_reduce: deprecated API and the coalescing manager's fast path.
    ts = [torch.full((3,), float(rank)), torch.full((2, 2), 1.0)]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist.all_reduce_coalesced(ts)
    _eq(ts[0], torch.full((3,), float(sum(range(n)))), "all_reduce_coalesced[0]")
    _eq(ts[1], torch.full((2, 2), float(n)), "all_reduce_coalesced[1]")
    from torch.distributed.distributed_c10d import _coalescing_manager

    ts = [torch.full((5,), float(rank + i)) for i in range(3)]
    with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        for x in ts:
            dist.all_reduce(x)
    cm.wait()
    for i, x in enumerate(ts):
        _eq(x, torch.full((5,), float(sum(range(n)) + n * i)), f"coalescing manager [{i}]")
    outs = [torch.empty(n * 2), torch.empty(n * 3)]
    with _coalescing_manager(device=torch.device("cpu")):
        dist.all_gather_into_tensor(outs[0], torch.full((2,), float(rank)))
        dist.all_gather_into_tensor(outs[1], torch.full((3,), float(-rank)))
    _eq(outs[0], torch.arange(n).repeat_interleave(2).float(), "coalesced all_gather_into_tensor")
    _eq(outs[1], -torch.arange(n).repeat_interleave(3).float(), "coalesced all_gather [1]")
    outs = [torch.empty(2), torch.empty(1)]
    with _coalescing_manager(device=torch.device("cpu")):
        dist.reduce_scatter_tensor(outs[0], torch.arange(2.0 * n))
        dist.reduce_scatter_tensor(outs[1], torch.ones(n))
    _eq(outs[0], torch.tensor([2.0 * rank, 2.0 * rank + 1]) * n, "coalesced reduce_scatter")
    _eq(outs[1], torch.tensor([float(n)]), "coalesced reduce_scatter [1]")

    # reduce
    for root in range(n):
        t = torch.full((3,), float(rank + 1))
        dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
        want = float(n * (n + 1) // 2) if rank == root else float(rank + 1)
        _eq(t, torch.full((3,), want), f"reduce root {root}")
        t = torch.full((2,), float(rank + 1), dtype=torch.bfloat16)
        dist.reduce(t, dst=root, op=dist.ReduceOp.MAX, async_op=True).wait()
        _eq(t, torch.full((2,), float(n if rank == root else rank + 1)), "reduce bf16 MAX")

    # all_gather (equal and uneven), all_gather_into_tensor (both layouts), coalesced
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex128):
        outs = [torch.zeros(5, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, _val(rank, dtype))
        for r in range(n):
            _eq(outs[r], _val(r, dtype), f"all_gather {dtype} from {r}")
    outs = [torch.zeros(r + 1) for r in range(n)]
    dist.all_gather(outs, torch.full((rank + 1,), float(rank)))
    for r in range(n):
        _eq(outs[r], torch.full((r + 1,), float(r)), "all_gather uneven")
    flat = torch.empty(n * 3)
    dist.all_gather_into_tensor(flat, torch.full((3,), float(rank)))
    _eq(flat, torch.arange(n).repeat_interleave(3).float(), "all_gather_into_tensor")
    stacked = torch.empty(n, 2, 2)
    dist.all_gather_into_tensor(stacked, torch.full((2, 2), float(rank)), async_op=True).wait()
    _eq(stacked, torch.arange(n).float().view(n, 1, 1).expand(n, 2, 2), "stacked layout")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out_lists = [[torch.empty(2), torch.empty(3)] for _ in range(n)]
        dist.all_gather_coalesced(out_lists, [torch.full((2,), float(rank)),
                                              torch.full((3,), float(-rank))])
    for r in range(n):
        _eq(out_lists[r][0], torch.full((2,), float(r)), "all_gather_coalesced")
        _eq(out_lists[r][1], torch.full((3,), float(-r)), "all_gather_coalesced")

    # gather / scatter, every root
    for root in range(n):
        lst = [torch.empty(2) for _ in range(n)] if rank == root else None
        dist.gather(torch.full((2,), float(rank)), lst, dst=root)
        if rank == root:
            for r in range(n):
                _eq(lst[r], torch.full((2,), float(r)), f"gather root {root}")
        t = torch.empty(3, dtype=torch.int64)
        src = [torch.full((3,), r * 10, dtype=torch.int64) for r in range(n)]
        dist.scatter(t, src if rank == root else None, src=root)
        _eq(t, torch.full((3,), rank * 10, dtype=torch.int64), f"scatter root {root}")

    # reduce_scatter (list and tensor), with AVG
    out = torch.empty(2)
    dist.reduce_scatter(out, [torch.full((2,), float(rank + r)) for r in range(n)])
    _eq(out, torch.full((2,), float(sum(q + rank for q in range(n)))), "reduce_scatter")
    out = torch.empty(3)
    dist.reduce_scatter_tensor(out, torch.arange(3.0 * n) + rank, op=dist.ReduceOp.AVG)
    _eq(out, torch.arange(3.0 * rank, 3.0 * rank + 3) + (n - 1) / 2, "reduce_scatter_tensor")
    out = torch.empty(2, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(out, torch.ones(2 * n, dtype=torch.bfloat16), async_op=True).wait()
    _eq(out, torch.full((2,), float(n)), "reduce_scatter_tensor bf16")

    # all_to_all (list), all_to_all_single (equal and uneven splits)
    outs = [torch.empty(2) for _ in range(n)]
    dist.all_to_all(outs, [torch.full((2,), float(rank * 100 + r)) for r in range(n)])
    for r in range(n):
        _eq(outs[r], torch.full((2,), float(r * 100 + rank)), "all_to_all")
    out = torch.empty(n, 2)
    dist.all_to_all_single(out, torch.arange(2.0 * n).view(n, 2) + 100 * rank)
    _eq(out, torch.stack([torch.tensor([2.0 * rank, 2.0 * rank + 1]) + 100 * r
                          for r in range(n)]), "all_to_all_single")
    # rank r sends r+1 rows to every peer; receives q+1 rows from rank q
    inp = torch.full((n * (rank + 1),), float(rank))
    out = torch.empty(sum(q + 1 for q in range(n)))
    dist.all_to_all_single(out, inp, [q + 1 for q in range(n)], [rank + 1] * n)
    _eq(out, torch.cat([torch.full((q + 1,), float(q)) for q in range(n)]), "uneven a2a")

    # barrier, sync and async
    dist.barrier()
    dist.barrier(async_op=True).wait()

    # point to point: send/recv, isend/irecv, recv from any source, batch_isend_irecv
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    if rank == 0:
        dist.send(torch.arange(4.0), dst=n - 1, tag=3)
        got = torch.empty(1)
        # tag 5: the ring below also sends to rank 0 (tag 0) and may be early
        senders = sorted(dist.recv(got, tag=5) for _ in range(n - 1)) if n > 1 else []
        assert senders == list(range(1, n)), senders
    else:
        if rank == n - 1:
            t = torch.empty(4)
            assert dist.recv(t, src=0, tag=3) == 0
            _eq(t, torch.arange(4.0), "send/recv")
        dist.send(torch.tensor([float(rank)]), dst=0, tag=5)
    recv_t = torch.empty(3)
    ops = [dist.P2POp(dist.irecv, recv_t, prv), dist.P2POp(dist.isend, torch.full((3,),
                                                                                  float(rank)), nxt)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    _eq(recv_t, torch.full((3,), float(prv)), "batch_isend_irecv ring")
    bf = torch.empty(5, dtype=torch.bfloat16)
    rw = dist.irecv(bf, src=prv, tag=9)
    sw = dist.isend(torch.full((5,), rank + 0.5, dtype=torch.bfloat16), dst=nxt, tag=9)
    sw.wait()
    rw.wait()
    _eq(bf, torch.full((5,), prv + 0.5), "isend/irecv bf16")
    nc = torch.zeros(3, 4)[:, 1]  # non-contiguous receive target
    rw = dist.irecv(nc, src=prv)
    dist.send(torch.full((3,), float(rank)), dst=nxt)
    rw.wait()
    _eq(nc, torch.full((3,), float(prv)), "irecv into a view")

    _async_forms(rank, n)
    _backend_methods(rank, n)
    _tiny_calls_take_the_lane(rank, n)
    return {"ok": True}


def _async_forms(rank: int, n: int) -> None:
    """``async_op=True`` of the list and rooted collectives: all in flight at once, then wait."""
    root = n - 1
    works: list[tuple[str, Any]] = []
    gather_list = [torch.empty(2) for _ in range(n)] if rank == root else None
    works.append(("gather", dist.gather(torch.full((2,), float(rank)), gather_list, dst=root,
                                        async_op=True)))
    scattered = torch.empty(3, dtype=torch.int64)
    src = [torch.full((3,), 10 * r, dtype=torch.int64) for r in range(n)]
    works.append(("scatter", dist.scatter(scattered, src if rank == root else None, src=root,
                                          async_op=True)))
    gathered = [torch.empty(r + 1) for r in range(n)]  # uneven, as meshcast allows
    works.append(("all_gather", dist.all_gather(gathered, torch.full((rank + 1,), float(rank)),
                                                async_op=True)))
    reduced = torch.empty(2)
    works.append(("reduce_scatter", dist.reduce_scatter(
        reduced, [torch.full((2,), float(rank + r)) for r in range(n)], async_op=True)))
    a2a = [torch.empty(2) for _ in range(n)]
    works.append(("all_to_all", dist.all_to_all(
        a2a, [torch.full((2,), float(rank * 100 + r)) for r in range(n)], async_op=True)))
    a2a_single = torch.empty(sum(q + 1 for q in range(n)))
    works.append(("all_to_all_single", dist.all_to_all_single(
        a2a_single, torch.full((n * (rank + 1),), float(rank)), [q + 1 for q in range(n)],
        [rank + 1] * n, async_op=True)))
    # Reverse order: waiting on a later work must not depend on an earlier wait.
    for name, work in reversed(works):
        assert isinstance(work, dist.Work), (name, work)
        assert work.wait() is True, name
        assert work.is_completed() and work.is_success() and work.exception() is None, name
    if rank == root:
        for r in range(n):
            _eq(gather_list[r], torch.full((2,), float(r)), f"async gather from {r}")
    _eq(scattered, torch.full((3,), 10 * rank, dtype=torch.int64), "async scatter")
    for r in range(n):
        _eq(gathered[r], torch.full((r + 1,), float(r)), f"async all_gather from {r}")
        _eq(a2a[r], torch.full((2,), float(r * 100 + rank)), f"async all_to_all from {r}")
    _eq(reduced, torch.full((2,), float(sum(q + rank for q in range(n)))),
        "async reduce_scatter")
    _eq(a2a_single, torch.cat([torch.full((q + 1,), float(q)) for q in range(n)]),
        "async all_to_all_single")


def _tiny_calls_take_the_lane(rank: int, n: int) -> None:
    """Small calls (synchronous and async) and small sends go through the group's
    compiled tiny-call lane, as the front door's do: with the group's general methods made to fail, they
    still give the right values (a subgroup's root is a group rank, the lane's a global
    one)."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the general path ran")

    general = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "isend",
               "all_to_all", "gather", "scatter", "barrier")
    members = list(range(1, n)) if n > 2 else list(range(n))
    sub = dist.new_group(members, backend="meshcast")
    for pg, ranks in ((dist.group.WORLD, list(range(n))), (sub, members)):
        if rank not in ranks:
            continue
        group = pg.meshcast_group
        for name in general:
            setattr(group, name, refuse)  # instance attributes: deleted below
        try:
            m = len(ranks)
            for op, want in ((dist.ReduceOp.SUM, sum(ranks)), (dist.ReduceOp.MAX, max(ranks))):
                t = torch.full((2,), float(rank))
                dist.all_reduce(t, op=op, group=pg)
                _eq(t, torch.full((2,), float(want)), f"lane all_reduce {op}")
            root = ranks[-1]
            t = torch.full((3,), float(rank))
            dist.broadcast(t, src=root, group=pg)
            _eq(t, torch.full((3,), float(root)), "lane broadcast")
            t = torch.full((3,), float(rank + 1))
            dist.reduce(t, dst=root, group=pg)
            if rank == root:
                _eq(t, torch.full((3,), float(sum(ranks) + m)), "lane reduce")
            t = torch.full((3,), float(rank + 2))
            dist.reduce(t, dst=root, group=pg, async_op=True).wait()
            if rank == root:
                _eq(t, torch.full((3,), float(sum(ranks) + 2 * m)), "lane async reduce")
            dist.barrier(group=pg)
            dist.barrier(group=pg, async_op=True).wait()
            out = torch.empty(2 * m)
            dist.all_gather_into_tensor(out, torch.full((2,), float(rank)), group=pg)
            _eq(out, torch.tensor([float(r) for r in ranks for _ in range(2)]),
                "lane all_gather_into_tensor")
            piece = torch.empty(2)
            dist.reduce_scatter_tensor(piece, torch.arange(2.0 * m) + rank, group=pg)
            me = ranks.index(rank)
            _eq(piece, torch.arange(2.0 * me, 2.0 * me + 2) * m + sum(ranks),
                "lane reduce_scatter_tensor")
            # all_to_all_single, equal splits (torch passes [] when none are given),
            # synchronous and async (MoE's token exchange)
            sent = torch.arange(3.0 * m) + 100 * rank
            want = torch.tensor([3.0 * me + k + 100 * q for q in ranks for k in range(3)])
            for splits in (None, [3] * m):
                got = torch.empty(3 * m)
                dist.all_to_all_single(got, sent, splits, splits, group=pg)
                _eq(got, want, f"lane all_to_all_single, splits {splits}")
                got = torch.empty(3 * m)
                dist.all_to_all_single(got, sent, splits, splits, group=pg,
                                       async_op=True).wait()
                _eq(got, want, f"lane async all_to_all_single, splits {splits}")
            # uneven splits (MoE's token exchange), synchronous and async
            send = [1 + (me + d) % 2 for d in range(m)]
            recv = [1 + (s + me) % 2 for s in range(m)]
            sent_u = torch.cat([torch.full((c,), 100.0 * rank + d) for d, c in enumerate(send)])
            want_u = torch.cat([torch.full((c,), 100.0 * q + me)
                                for q, c in zip(ranks, recv)])
            for async_op in (False, True):
                got = torch.empty(sum(recv))
                work = dist.all_to_all_single(got, sent_u, recv, send, group=pg,
                                              async_op=async_op)
                if async_op:
                    work.wait()
                _eq(got, want_u, f"lane uneven all_to_all_single, async {async_op}")
                outs = [torch.empty(c) for c in recv]
                work = dist.all_to_all(outs, list(sent_u.split(send)), group=pg,
                                       async_op=async_op)
                if async_op:
                    work.wait()
                _eq(torch.cat(outs), want_u, f"lane uneven all_to_all of lists, async {async_op}")
            # the list forms and the rooted calls
            outs = [torch.empty(3) for _ in ranks]
            dist.all_to_all(outs, list(sent.split(3)), group=pg)
            _eq(torch.cat(outs), want, "lane all_to_all of lists")
            outs = [torch.empty(3) for _ in ranks]
            dist.all_to_all(outs, list(sent.split(3)), group=pg, async_op=True).wait()
            _eq(torch.cat(outs), want, "lane async all_to_all of lists")
            outs = [torch.empty(2) for _ in ranks]
            dist.all_gather(outs, torch.full((2,), float(rank)), group=pg)
            _eq(torch.cat(outs), torch.tensor([float(q) for q in ranks for _ in range(2)]),
                "lane all_gather into a list")
            piece = torch.empty(2)
            dist.reduce_scatter(piece, list((torch.arange(2.0 * m) + rank).split(2)), group=pg)
            _eq(piece, torch.arange(2.0 * me, 2.0 * me + 2) * m + sum(ranks),
                "lane reduce_scatter of a list")
            pieces = [torch.empty(3) for _ in ranks] if rank == root else None
            dist.gather(torch.full((3,), float(rank)), pieces, dst=root, group=pg)
            if rank == root:
                _eq(torch.cat(pieces), torch.tensor([float(q) for q in ranks for _ in range(3)]),
                    "lane gather")
            t = torch.empty(2)
            dist.scatter(t, [torch.full((2,), 10.0 + q) for q in ranks] if rank == root
                         else None, src=root, group=pg)
            _eq(t, torch.full((2,), 10.0 + rank), "lane scatter")
            pieces = [torch.empty(3) for _ in ranks] if rank == root else None
            dist.gather(torch.full((3,), float(rank) + 0.5), pieces, dst=root, group=pg,
                        async_op=True).wait()
            if rank == root:
                _eq(torch.cat(pieces),
                    torch.tensor([q + 0.5 for q in ranks for _ in range(3)]), "lane async gather")
            t = torch.empty(2)
            dist.scatter(t, [torch.full((2,), 20.0 + q) for q in ranks] if rank == root
                         else None, src=root, group=pg, async_op=True).wait()
            _eq(t, torch.full((2,), 20.0 + rank), "lane async scatter")
            outs = [torch.empty(2) for _ in ranks]
            dist.all_gather(outs, torch.full((2,), rank + 0.25), group=pg, async_op=True).wait()
            _eq(torch.cat(outs), torch.tensor([q + 0.25 for q in ranks for _ in range(2)]),
                "lane async all_gather into a list")
            piece = torch.empty(2)
            dist.reduce_scatter(piece, list((torch.arange(2.0 * m) + rank).split(2)), group=pg,
                                async_op=True).wait()
            _eq(piece, torch.arange(2.0 * me, 2.0 * me + 2) * m + sum(ranks),
                "lane async reduce_scatter of a list")
            if m > 1:  # a small send is written into the ring at once (its receive
                # may take either path: the message may be set aside before it comes)
                src, dst = ranks[0], ranks[-1]
                if rank == src:
                    dist.send(torch.full((3,), 7.0 + src), dst=dst, group=pg, tag=4)
                    dist.isend(torch.full((2,), 8.0), dst=dst, group=pg, tag=5).wait()
                elif rank == dst:
                    t, u = torch.empty(3), torch.empty(2)
                    assert dist.recv(t, src=src, group=pg, tag=4) == src
                    dist.irecv(u, src=src, group=pg, tag=5).wait()
                    _eq(t, torch.full((3,), 7.0 + src), "lane send")
                    _eq(u, torch.full((2,), 8.0), "lane isend")
        finally:
            for name in general:
                delattr(group, name)
    dist.destroy_process_group(sub)


def _backend_methods(rank: int, n: int) -> None:
    """The backend's methods under every name torch may call, on the group object itself.

    torch 2.13's Python layer calls the new names; older releases and parts of
    the C++ trampoline call the old ones (see the backend's aliases). A
    Python process group *is* its own backend (``_get_backend`` needs a C++
    one), so the methods are called on ``dist.group.WORLD``. Some calls leave
    ``opts`` out: the trampoline never does, but the defaults must work too.
    """
    from torch._C._distributed_c10d import AllgatherOptions

    from meshcast.integrations.torch import is_meshcast_group

    pg = dist.group.WORLD
    assert is_meshcast_group(pg), type(pg)
    ranks = torch.arange(n).float()

    for name in ("all_gather_single", "_allgather_base"):
        out = torch.empty(n * 2)
        getattr(pg, name)(out, torch.full((2,), float(rank)), AllgatherOptions()).wait()
        _eq(out, ranks.repeat_interleave(2), name)
        stacked = torch.empty(n, 3)
        getattr(pg, name)(stacked, torch.full((3,), float(rank))).wait()
        _eq(stacked, ranks.view(n, 1).expand(n, 3), f"{name} stacked, default opts")

    for name in ("all_gather_single_coalesced", "allgather_into_tensor_coalesced"):
        outs = [torch.empty(n * 2), torch.empty(n, dtype=torch.int64)]
        ins = [torch.full((2,), float(rank)), torch.tensor([-rank])]
        getattr(pg, name)(outs, ins, AllgatherOptions()).wait()
        _eq(outs[0], ranks.repeat_interleave(2), f"{name}[0]")
        _eq(outs[1], -torch.arange(n), f"{name}[1]")

    for name in ("reduce_scatter_single", "_reduce_scatter_base"):
        out = torch.empty(2)
        opts = dist.ReduceScatterOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        getattr(pg, name)(out, torch.arange(2.0 * n) * (rank + 1), opts).wait()
        _eq(out, torch.tensor([2.0 * rank, 2.0 * rank + 1]) * n, f"{name} MAX")
        out = torch.empty(3)
        getattr(pg, name)(out, torch.ones(3 * n)).wait()
        _eq(out, torch.full((3,), float(n)), f"{name} default opts (SUM)")

    for name in ("reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced"):
        outs = [torch.empty(1), torch.empty(2, dtype=torch.int32)]
        ins = [torch.arange(float(n)) + rank, torch.ones(2 * n, dtype=torch.int32)]
        getattr(pg, name)(outs, ins, dist.ReduceScatterOptions()).wait()
        _eq(outs[0], torch.tensor([float(n * rank + sum(range(n)))]), f"{name}[0]")
        _eq(outs[1], torch.full((2,), n, dtype=torch.int32), f"{name}[1]")

    for name in ("all_to_all_single", "alltoall_base"):
        out = torch.empty(n, 2)
        getattr(pg, name)(out, torch.arange(2.0 * n).view(n, 2) + 100 * rank, [], [],
                          dist.AllToAllOptions()).wait()
        _eq(out, torch.stack([torch.tensor([2.0 * rank, 2.0 * rank + 1]) + 100 * r
                              for r in range(n)]), f"{name} equal splits")
        out = torch.empty(sum(q + 1 for q in range(n)))
        getattr(pg, name)(out, torch.full((n * (rank + 1),), float(rank)),
                          [q + 1 for q in range(n)], [rank + 1] * n).wait()
        _eq(out, torch.cat([torch.full((q + 1,), float(q)) for q in range(n)]),
            f"{name} uneven, default opts")

    # Work.source_rank() is the public spelling of _source_rank().
    if rank == 0:
        got = sorted(_anysource_sender(pg) for _ in range(n - 1))
        assert got == list(range(1, n)), got
    else:
        pg.send([torch.tensor([float(rank)])], 0, 21).wait()
    pg.barrier().wait()


def _anysource_sender(pg: Any) -> int:
    """Receive one tensor from any rank with the backend call; return the sender."""
    t = torch.empty(1)
    work = pg.recv_anysource([t], 21)
    work.wait()
    assert work.source_rank() == work._source_rank() == int(t.item()), (t, work)
    return work.source_rank()


def groups_and_objects(rank: int, n: int) -> dict[str, Any]:
    """new_group, new_subgroups, non-members, object collectives, meshcast's own API alongside."""
    evens = [r for r in range(n) if r % 2 == 0]
    g = dist.new_group(evens)
    if rank in evens:
        assert dist.get_rank(g) == evens.index(rank) and dist.get_world_size(g) == len(evens)
        t = torch.full((3,), float(rank))
        dist.all_reduce(t, group=g)
        _eq(t, torch.full((3,), float(sum(evens))), "subgroup all_reduce")
        t = torch.full((2,), float(rank))
        dist.broadcast(t, src=evens[-1], group=g)
        _eq(t, torch.full((2,), float(evens[-1])), "subgroup broadcast")
        if len(evens) > 1:
            nxt = evens[(evens.index(rank) + 1) % len(evens)]
            prv = evens[(evens.index(rank) - 1) % len(evens)]
            r = torch.empty(1)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, r, prv, g),
                                           dist.P2POp(dist.isend, torch.tensor([float(rank)]),
                                                      nxt, g)])
            for w in reqs:
                w.wait()
            _eq(r, torch.tensor([float(prv)]), "subgroup p2p")
            if rank == evens[0]:
                got = torch.empty(1)
                assert dist.recv(got, group=g) == evens[1]  # global rank of the sender
            elif rank == evens[1]:
                dist.send(torch.ones(1), dst=evens[0], group=g)
    else:
        assert g == dist.GroupMember.NON_GROUP_MEMBER
    # torch sorts a group's ranks; group_src names a group rank
    rev = dist.new_group(list(reversed(range(n))))
    t = torch.full((1,), float(rank))
    dist.broadcast(t, group_src=n - 1, group=rev)
    _eq(t, torch.full((1,), float(n - 1)), "group_src broadcast")
    if n % 2 == 0:
        sub, subs = dist.new_subgroups(group_size=2)
        t = torch.full((2,), float(rank))
        dist.all_reduce(t, group=sub)
        base = rank - rank % 2
        _eq(t, torch.full((2,), float(2 * base + 1)), "new_subgroups")
        assert len(subs) == n // 2
    lst = [None] * n
    dist.all_gather_object(lst, {"rank": rank, "s": "x" * rank})
    assert lst == [{"rank": r, "s": "x" * r} for r in range(n)], lst
    objs = [f"from0-{i}" for i in range(3)] if rank == 0 else [None] * 3
    dist.broadcast_object_list(objs, src=0)
    assert objs == [f"from0-{i}" for i in range(3)]
    out = [None] * n if rank == n - 1 else None
    dist.gather_object((rank, [rank] * rank), out, dst=n - 1)
    if rank == n - 1:
        assert out == [(r, [r] * r) for r in range(n)], out
    got = [None]
    dist.scatter_object_list(got, [{"to": r} for r in range(n)] if rank == 0 else None, src=0)
    assert got == [{"to": rank}], got
    if n > 1:
        if rank == 0:
            dist.send_object_list([{"big": list(range(1000))}], dst=1)
        elif rank == 1:
            box = [None]
            dist.recv_object_list(box, src=0)
            assert box[0] == {"big": list(range(1000))}
    # meshcast's own NumPy API runs on the same engine without a second init.
    import meshcast

    a = np.full(3, rank, dtype=np.int64)
    meshcast.all_reduce(a)
    assert (a == sum(range(n))).all()
    # monitored_barrier is hard-wired to gloo in torch: it must say so.
    try:
        dist.monitored_barrier()
    except (ValueError, RuntimeError, NotImplementedError) as exc:
        assert "gloo" in str(exc).lower() or "monitored" in str(exc).lower(), exc
    else:
        raise AssertionError("monitored_barrier ran on meshcast; update the README's list")
    dist.destroy_process_group(g) if g != dist.GroupMember.NON_GROUP_MEMBER else None
    return {"ok": True}


def mesh_dtensor(rank: int, n: int) -> dict[str, Any]:
    """DeviceMesh, DTensor and functional collectives on a 1-D mesh."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (n,))
    x = torch.arange(4.0 * n).view(2 * n, 2)
    d = distribute_tensor(x, mesh, [Shard(0)])
    assert d.to_local().shape == (2, 2)
    full = d.redistribute(mesh, [Replicate()]).to_local()
    _eq(full, x, "DTensor Shard -> Replicate")
    y = (d * 2).sum()
    _eq(y.full_tensor(), x.sum() * 2, "DTensor sum")
    mm = distribute_tensor(torch.ones(2 * n, 3), mesh, [Shard(0)])
    w = distribute_tensor(torch.ones(3, 2), mesh, [Replicate()])
    _eq((mm @ w).full_tensor(), torch.full((2 * n, 2), 3.0), "DTensor matmul")
    t = funcol.all_reduce(torch.full((3,), float(rank)), "sum", mesh)
    _eq(t, torch.full((3,), float(sum(range(n)))), "funcol all_reduce")
    t = funcol.all_gather_tensor(torch.full((2,), float(rank)), 0, mesh)
    _eq(t, torch.arange(n).repeat_interleave(2).float(), "funcol all_gather")
    t = funcol.reduce_scatter_tensor(torch.ones(2 * n), "sum", 0, mesh)
    _eq(t, torch.full((2,), float(n)), "funcol reduce_scatter")
    t = funcol.all_to_all_single(torch.arange(float(n)) + 10 * rank, None, None, mesh)
    _eq(t, torch.arange(float(n)) * 10 + rank, "funcol all_to_all_single")
    t = funcol.broadcast(torch.full((2,), float(rank)), 0, mesh)
    _eq(t, torch.zeros(2), "funcol broadcast")
    return {"ok": True}


# ------------------------------------------------------------------------ DDP


class _Net(torch.nn.Module):
    def __init__(self, unused: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 16)
        if unused:  # a layer forward() never calls: DDP must be told
            self.unused = torch.nn.Linear(16, 4)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.b(torch.relu(self.a(x)))))


def _batches(rank: int, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(6, 8, generator=g), torch.randn(6, 2, generator=g))
            for _ in range(steps)]


def ddp_train(rank: int, n: int, steps: int = 4) -> dict[str, list[list[float]]]:
    """Train the same model under several DDP configurations; return the final parameters."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.use_deterministic_algorithms(True)
    configs = {
        "plain": dict(kw={}),
        "buckets": dict(kw={"bucket_cap_mb": 0.0005}),
        "unused": dict(kw={"find_unused_parameters": True}, unused=True),
        "static": dict(kw={"static_graph": True}),
        "bucket_view": dict(kw={"gradient_as_bucket_view": True, "bucket_cap_mb": 0.001}),
        "hook_allreduce": dict(kw={}, hook=default_hooks.allreduce_hook),
        "hook_fp16": dict(kw={}, hook=default_hooks.fp16_compress_hook),
        "no_sync": dict(kw={}, no_sync=True),
        "join": dict(kw={}, join=True),
    }
    results: dict[str, list[list[float]]] = {}
    for name, cfg in configs.items():
        torch.manual_seed(0)
        model = DDP(_Net(cfg.get("unused", False)), **cfg["kw"])
        if "hook" in cfg:
            model.register_comm_hook(None, cfg["hook"])
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        batches = _batches(rank, steps + (rank if cfg.get("join") else 0))
        if cfg.get("join"):
            with Join([model]):
                for x, y in batches:
                    opt.zero_grad()
                    torch.nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
        else:
            for i, (x, y) in enumerate(batches):
                opt.zero_grad()
                if cfg.get("no_sync") and i % 2 == 0:
                    with model.no_sync():
                        torch.nn.functional.mse_loss(model(x), y).backward()
                    x, y = batches[(i + 1) % len(batches)]
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        results[name] = [p.detach().reshape(-1).tolist() for p in model.parameters()]
    return results


def fsdp2_train(rank: int, n: int, steps: int = 4) -> list[list[float]]:
    """FSDP2 ``fully_shard`` on CPU: train, then return the full parameters."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = _Net()
    for layer in (model.a, model.b, model.head):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in _batches(rank, steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.full_tensor().reshape(-1).tolist() for p in model.parameters()]


# --------------------------------------------------------------------- errors


def mismatch(rank: int, n: int) -> str:
    """Ranks disagree on the size of an all_reduce: every rank gets meshcast's explanation."""
    t = torch.ones(3 + rank)
    try:
        dist.all_reduce(t)
    except dist.DistBackendError as exc:
        import meshcast

        assert isinstance(exc, meshcast.MismatchError), type(exc).__mro__
        return str(exc)
    raise AssertionError("no error")


def async_error(rank: int, n: int) -> str:
    """The failure of an async collective comes out of wait(), exception() and the future."""
    t = torch.ones(2, dtype=torch.float32 if rank == 0 else torch.float64)
    work = dist.all_reduce(t, async_op=True)
    try:
        work.wait()
    except dist.DistBackendError as exc:
        assert isinstance(work.exception(), dist.DistBackendError)
        assert not work.is_success()
        try:
            work.get_future().wait()
        except Exception as fexc:  # noqa: BLE001 - torch re-wraps future errors
            assert "dtype" in str(fexc) or "float" in str(fexc), fexc
        else:
            raise AssertionError("the future did not fail") from None
        return str(exc)
    raise AssertionError("no error")


def dead_peer(rank: int, n: int) -> str:
    """Rank 1 dies in the middle of the job; the others' next collective names it."""
    dist.barrier()
    if rank == 1:
        os._exit(3)
    time.sleep(0.2)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(100_000))
    except dist.DistBackendError as exc:
        return f"{time.monotonic() - start:.2f}s {exc}"
    raise AssertionError("no error")


def timeout(rank: int, n: int) -> str:
    """Rank 1 never joins the collective: the others time out with meshcast's report."""
    if rank == 1:
        time.sleep(4)  # past the others' 2 s timeout
        return "slept"
    try:
        dist.all_reduce(torch.ones(4))
    except dist.DistBackendError as exc:
        assert isinstance(exc, TimeoutError), type(exc).__mro__
        return str(exc)
    raise AssertionError("no error")


def subgroup_under_gloo(rank: int, n: int) -> bool:
    """A meshcast subgroup when the default group runs gloo gets a private engine."""
    g = dist.new_group(list(range(n)), backend="meshcast")
    t = torch.full((2,), float(rank))
    dist.all_reduce(t, group=g)
    _eq(t, torch.full((2,), float(sum(range(n)))), "meshcast subgroup under gloo")
    dist.all_reduce(t)  # gloo
    return dist.get_backend(g) == "meshcast" and dist.get_backend() == "gloo"
