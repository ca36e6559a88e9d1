"""Start every replica from the same weights: broadcast rank 0's parameters.

Each rank initializes its model with a different seed; broadcasting every
parameter from rank 0 makes them identical (DDP does exactly this when it
wraps a model). Run with ``torchrun --nproc-per-node 4`` or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist


def checksum(model: torch.nn.Module) -> float:
    return sum(p.sum().item() for p in model.parameters())


def run(rank: int, world_size: int) -> None:
    torch.manual_seed(rank)  # deliberately different on every rank
    model = torch.nn.Linear(6, 3)
    print(f"rank {rank}: before broadcast checksum {checksum(model):.6f}", flush=True)
    with torch.no_grad():
        for param in model.parameters():
            dist.broadcast(param, src=0)
    print(f"rank {rank}: after broadcast checksum {checksum(model):.6f}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
