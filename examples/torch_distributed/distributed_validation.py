"""Distributed validation: each rank scores its shard, one all-reduce gives the total.

Run with ``torchrun --nproc-per-node 4`` or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist


def run(rank: int, world_size: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)  # the same "trained" classifier on every rank
    g = torch.Generator().manual_seed(7)
    inputs = torch.randn(100, 5, generator=g)
    labels = torch.randint(0, 3, (100,), generator=g)
    # Rank r validates samples r, r + world_size, ... (as DistributedSampler does).
    mine = slice(rank, None, world_size)
    with torch.no_grad():
        predicted = model(inputs[mine]).argmax(dim=1)
    counts = torch.tensor([(predicted == labels[mine]).sum().item(), len(predicted)],
                          dtype=torch.int64)
    print(f"rank {rank}: {counts[0].item()} of {counts[1].item()} correct", flush=True)
    dist.all_reduce(counts)
    print(f"rank {rank}: accuracy {counts[0].item()}/{counts[1].item()} = "
          f"{counts[0].item() / counts[1].item():.2f}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
