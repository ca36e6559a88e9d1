"""Scatter: rank 0 holds one chunk per rank and sends chunk r to rank r.

Run with ``torchrun --nproc-per-node 4`` or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist


def run(rank: int, world_size: int) -> None:
    received = torch.zeros(2)
    chunks = None
    if rank == 0:
        chunks = [torch.full((2,), 10.0 * r) for r in range(world_size)]
        print(f"rank {rank}: scattering {[c.tolist() for c in chunks]}", flush=True)
    dist.scatter(received, scatter_list=chunks, src=0)
    print(f"rank {rank}: received {received.tolist()}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
