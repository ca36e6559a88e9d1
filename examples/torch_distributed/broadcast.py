"""Broadcast: rank 0's tensor is copied to every rank.

Run with either launcher::

    torchrun --nproc-per-node 4 examples/torch_distributed/broadcast.py
    meshcast run -n 4 examples/torch_distributed/broadcast.py
"""

import torch
import torch.distributed as dist


def run(rank: int, world_size: int) -> None:
    tensor = torch.arange(4.0) if rank == 0 else torch.zeros(4)
    print(f"rank {rank}: before broadcast {tensor.tolist()}", flush=True)
    dist.broadcast(tensor, src=0)
    print(f"rank {rank}: after broadcast {tensor.tolist()}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")  # RANK, WORLD_SIZE, MASTER_* come from the launcher
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
