"""Data-parallel training by hand: every rank trains on its shard, gradients are averaged.

The classic loop from the torch.distributed tutorial, before DDP: after
``backward()`` each gradient is all-reduced and divided by the world size,
so every rank takes the same optimizer step and the replicas stay equal.
Run with ``torchrun --nproc-per-node 4`` or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist


def average_gradients(model: torch.nn.Module) -> None:
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad /= size


def run(rank: int, world_size: int) -> None:
    torch.manual_seed(0)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    # A synthetic regression data set, split into one shard per rank.
    g = torch.Generator().manual_seed(42)
    x = torch.randn(64 * world_size, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)
    shard_x, shard_y = x[rank::world_size], y[rank::world_size]
    for epoch in range(3):
        epoch_loss = 0.0
        for i in range(0, len(shard_x), 16):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(shard_x[i:i + 16]), shard_y[i:i + 16])
            loss.backward()
            average_gradients(model)
            optimizer.step()
            epoch_loss += loss.item()
        print(f"rank {rank}: epoch {epoch} loss {epoch_loss:.4f}", flush=True)
    checksum = sum(p.sum().item() for p in model.parameters())
    print(f"rank {rank}: replica checksum {checksum:.6f}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
