"""The collectives torch calls, through ``torch.distributed`` on meshcast, against NumPy.

:func:`check_all` runs every call below on the default group (and on two subgroups)
and compares what each rank holds afterwards with the result NumPy computes from
every rank's input (each rank can build every rank's input: they come from seeds).
Values are small integers, also in floating point, so every reduction is exact
whatever the order of summation and the comparison is ``array_equal``. Sizes go from
a few elements (meshcast's small-message path between hosts) to 70,000 float32 per
rank (its large-message path). A wrong value raises AssertionError naming the call,
the rank and the first differing element.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

SIZES = (3, 1001, 70_000)


def data(rank: int, count: int, dtype: torch.dtype = torch.float32, seed: int = 0
         ) -> torch.Tensor:
    """Rank ``rank``'s input: ``count`` integers in [-8, 8) as ``dtype`` (exact sums)."""
    rng = np.random.default_rng([seed, rank, count])
    return torch.from_numpy(rng.integers(-8, 8, count)).to(dtype)


def same(what: str, got: torch.Tensor, want: np.ndarray) -> None:
    got_np = got.detach().to(torch.float64 if got.is_floating_point() else torch.int64).numpy()
    want = np.asarray(want).reshape(got_np.shape)
    if not np.array_equal(got_np, want):
        bad = np.flatnonzero(got_np.reshape(-1) != want.reshape(-1))
        i = int(bad[0])
        raise AssertionError(f"rank {dist.get_rank()}: {what}: {bad.size} of {want.size} "
                             f"elements differ, first at [{i}]: got "
                             f"{got_np.reshape(-1)[i]}, want {want.reshape(-1)[i]}")


def check_all(rank: int, n: int) -> list[str]:
    """Run every check; return the names of the checks that ran (all passed)."""
    done: list[str] = []

    def run(name: str, fn: Callable[[], None]) -> None:
        print(f"rank {rank}: checking {name}", file=sys.stderr, flush=True)  # where it hangs
        fn()
        done.append(name)

    def inputs(count: int, dtype: torch.dtype = torch.float32, seed: int = 0
               ) -> list[np.ndarray]:
        return [data(r, count, dtype, seed).to(torch.float64
                                               if dtype.is_floating_point else torch.int64
                                               ).numpy() for r in range(n)]

    def all_reduce() -> None:
        for count in SIZES:
            for op, fold in ((dist.ReduceOp.SUM, np.sum), (dist.ReduceOp.MAX, np.max),
                             (dist.ReduceOp.AVG, np.mean)):
                t = data(rank, count)
                dist.all_reduce(t, op=op)
                same(f"all_reduce {op} of {count}", t, fold(inputs(count), axis=0))
        for dtype in (torch.int64, torch.bfloat16, torch.float64):
            t = data(rank, 1001, dtype, seed=1)
            dist.all_reduce(t)
            same(f"all_reduce {dtype}", t, np.sum(inputs(1001, dtype, seed=1), axis=0))
        # Several in flight at once, as DDP issues its buckets.
        ts = [data(rank, c, seed=2) for c in SIZES]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        for w in works:
            w.wait()
        for t, c in zip(ts, SIZES):
            same(f"async all_reduce of {c}", t, np.sum(inputs(c, seed=2), axis=0))
        fut = dist.all_reduce(data(rank, 5, seed=3), async_op=True).get_future()
        same("all_reduce future", fut.wait()[0], np.sum(inputs(5, seed=3), axis=0))
        t = data(rank, 1001, seed=18)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        same("all_reduce PREMUL_SUM", t, 0.5 * np.sum(inputs(1001, seed=18), axis=0))
        c = torch.complex(data(rank, 6, seed=19), data(rank, 6, seed=20))
        dist.all_reduce(c)  # torch hands the backend view_as_real
        same("all_reduce complex (real part)", c.real, np.sum(inputs(6, seed=19), axis=0))
        same("all_reduce complex (imaginary part)", c.imag, np.sum(inputs(6, seed=20), axis=0))
        # The coalescing manager's fast path: one Work for the whole block.
        from torch.distributed.distributed_c10d import _coalescing_manager

        ts = [data(rank, c, seed=21) for c in SIZES]
        with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        for t, c in zip(ts, SIZES):
            same(f"coalesced all_reduce of {c}", t, np.sum(inputs(c, seed=21), axis=0))

    def broadcast() -> None:
        for root in range(n):
            for count in SIZES:
                t = data(rank, count, seed=4)
                dist.broadcast(t, src=root)
                same(f"broadcast of {count} from {root}", t, inputs(count, seed=4)[root])
        t = data(rank, 7, torch.int32, seed=4)
        dist.broadcast(t, src=n - 1)
        same("broadcast int32", t, inputs(7, torch.int32, seed=4)[n - 1])

    def all_gather_into_tensor() -> None:
        for count in SIZES:
            out = torch.empty(n * count)
            dist.all_gather_into_tensor(out, data(rank, count, seed=5))
            same(f"all_gather_into_tensor of {count}", out, np.concatenate(inputs(count, seed=5)))
        stacked = torch.empty(n, 10)
        dist.all_gather_into_tensor(stacked, data(rank, 10, seed=5))
        same("all_gather_into_tensor (ws, N)", stacked, np.stack(inputs(10, seed=5)))

    def all_gather() -> None:
        outs = [torch.empty(100) for _ in range(n)]
        dist.all_gather(outs, data(rank, 100, seed=6))
        for r, o in enumerate(outs):
            same(f"all_gather piece {r}", o, inputs(100, seed=6)[r])

    def reduce_scatter_tensor() -> None:
        for count in SIZES:
            out = torch.empty(count)
            dist.reduce_scatter_tensor(out, data(rank, n * count, seed=7))
            total = np.sum(inputs(n * count, seed=7), axis=0)
            same(f"reduce_scatter_tensor of {count}", out,
                 total[rank * count:(rank + 1) * count])

    def reduce_gather_scatter() -> None:
        t = data(rank, 1001, seed=8)
        dist.reduce(t, dst=n - 1)
        if rank == n - 1:
            same("reduce", t, np.sum(inputs(1001, seed=8), axis=0))
        pieces = [torch.empty(9) for _ in range(n)] if rank == 2 % n else None
        dist.gather(data(rank, 9, seed=9), gather_list=pieces, dst=2 % n)
        if pieces is not None:
            same("gather", torch.stack(pieces), np.stack(inputs(9, seed=9)))
        got = torch.empty(9)
        chunks = [data(r, 9, seed=10) for r in range(n)] if rank == 1 else None
        dist.scatter(got, scatter_list=chunks, src=1)
        same("scatter", got, inputs(9, seed=10)[rank])

    def all_to_all_single() -> None:
        # Rank r sends r + j + 1 elements to rank j: every pair a different size.
        send = [rank + j + 1 for j in range(n)]
        recv = [j + rank + 1 for j in range(n)]
        t = data(rank, sum(send), seed=11)
        out = torch.empty(sum(recv))
        dist.all_to_all_single(out, t, output_split_sizes=recv, input_split_sizes=send)
        want = []
        for j in range(n):
            theirs = inputs(sum(j + k + 1 for k in range(n)), seed=11)[j]
            start = sum(j + k + 1 for k in range(rank))
            want.append(theirs[start:start + j + rank + 1])
        same("all_to_all_single", out, np.concatenate(want))

    def all_to_all() -> None:
        outs = [torch.empty(j + 2) for j in range(n)]  # rank j sends me j + 2 elements
        dist.all_to_all(outs, [data(rank, rank + 2, seed=22 + j) for j in range(n)])
        for j, o in enumerate(outs):
            same(f"all_to_all piece from {j}", o, data(j, j + 2, seed=22 + rank))

    def barrier() -> None:
        # The last rank arrives late; nobody may leave before it arrived.
        if rank == n - 1:
            time.sleep(0.3)
        arrived = time.time()
        dist.barrier()
        left = time.time()
        times = torch.tensor([arrived, left], dtype=torch.float64)
        everyone = [torch.empty(2, dtype=torch.float64) for _ in range(n)]
        dist.all_gather(everyone, times)
        last_arrival = max(float(t[0]) for t in everyone)
        first_exit = min(float(t[1]) for t in everyone)
        assert first_exit >= last_arrival, (
            f"rank {rank}: a rank left the barrier at {first_exit} before the last "
            f"arrived at {last_arrival}")

    def send_recv() -> None:
        other = n - 1 - rank  # 0 <-> 3 and 1 <-> 2: always the other host at 2x2
        mine = data(rank, 1000, seed=12)
        got = torch.empty(1000)
        if rank < other:
            dist.send(mine, dst=other, tag=5)
            dist.recv(got, src=other, tag=5)
        else:
            dist.recv(got, src=other, tag=5)
            dist.send(mine, dst=other, tag=5)
        same("send/recv", got, inputs(1000, seed=12)[other])
        # isend/irecv around the ring; the receive's future must complete by itself.
        right, left = (rank + 1) % n, (rank - 1) % n
        incoming = torch.empty(70_000)
        recv = dist.irecv(incoming, src=left)
        send = dist.isend(data(rank, 70_000, seed=13), dst=right)
        got_ring = recv.get_future().wait()
        send.wait()
        same("irecv (future)", got_ring[0], inputs(70_000, seed=13)[left])
        # batch_isend_irecv, receives listed first (every rank does the same).
        bufs = [torch.empty(33), torch.empty(33)]
        ops = [dist.P2POp(dist.irecv, bufs[0], left), dist.P2POp(dist.irecv, bufs[1], right),
               dist.P2POp(dist.isend, data(rank, 33, seed=14), right),
               dist.P2POp(dist.isend, data(rank, 33, seed=14), left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same("batch_isend_irecv from left", bufs[0], inputs(33, seed=14)[left])
        same("batch_isend_irecv from right", bufs[1], inputs(33, seed=14)[right])
        # A receive from any rank learns who sent it.
        if rank == 0:
            senders = set()
            for _ in range(n - 1):
                t = torch.empty(4)
                src = dist.recv(t)
                senders.add(src)
                same(f"recv from any rank ({src})", t, inputs(4, seed=15)[src])
            assert senders == set(range(1, n)), senders
        else:
            dist.send(data(rank, 4, seed=15), dst=0)

    def subgroups() -> None:
        across = dist.new_group([1, 2])  # one rank per host
        local = dist.new_group([0, 1])  # both on the first host
        if rank in (1, 2):
            t = data(rank, 70_000, seed=16)
            dist.all_reduce(t, group=across)
            ins = inputs(70_000, seed=16)
            same("all_reduce on new_group([1, 2])", t, ins[1] + ins[2])
        if rank in (0, 1):
            t = data(rank, 11, seed=17)
            dist.broadcast(t, src=1, group=local)
            same("broadcast on new_group([0, 1])", t, inputs(11, seed=17)[1])
        dist.barrier()

    def objects() -> None:
        got: list = [None] * n
        dist.all_gather_object(got, {"rank": rank, "text": "x" * rank})
        assert got == [{"rank": r, "text": "x" * r} for r in range(n)], got
        box = [{"from": "root", "n": 42}] if rank == n - 1 else [None]
        dist.broadcast_object_list(box, src=n - 1)
        assert box == [{"from": "root", "n": 42}], box

    for name, fn in (("all_reduce", all_reduce), ("broadcast", broadcast),
                     ("all_gather_into_tensor", all_gather_into_tensor),
                     ("all_gather", all_gather),
                     ("reduce_scatter_tensor", reduce_scatter_tensor),
                     ("reduce/gather/scatter", reduce_gather_scatter),
                     ("all_to_all_single", all_to_all_single), ("all_to_all", all_to_all),
                     ("barrier", barrier),
                     ("send/recv", send_recv), ("subgroups", subgroups),
                     ("objects", objects)):
        run(name, fn)
    return done
