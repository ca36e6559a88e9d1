"""Gather: every rank sends its tensor to rank 0, which receives one tensor per rank.

Run with ``torchrun --nproc-per-node 4`` or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist


def run(rank: int, world_size: int) -> None:
    mine = torch.tensor([float(rank), float(rank * rank)])
    gathered = [torch.zeros(2) for _ in range(world_size)] if rank == 0 else None
    dist.gather(mine, gather_list=gathered, dst=0)
    if rank == 0:
        print(f"rank {rank}: gathered {[g.tolist() for g in gathered]}", flush=True)
    else:
        print(f"rank {rank}: sent {mine.tolist()}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
