"""Asynchronous all-reduce: start it, compute meanwhile, then wait for the result.

``async_op=True`` returns a ``Work`` at once; ``wait()`` blocks until the
result is in place (and re-raises a failure). Run with
``torchrun --nproc-per-node 4`` or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist


def run(rank: int, world_size: int) -> None:
    tensor = torch.full((1000,), float(rank))
    work = dist.all_reduce(tensor, async_op=True)
    local = sum(i * i for i in range(10_000))  # overlaps with the all-reduce
    work.wait()
    print(f"rank {rank}: local work {local}, all_reduce done: {work.is_completed()}, "
          f"result {tensor[0].item()}", flush=True)
    # The same through a future: the callback runs once the data is there.
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    print(f"rank {rank}: future value doubled {doubled.tolist()}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
