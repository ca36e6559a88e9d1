r"""Train a small classifier with DistributedDataParallel on meshcast.

DDP all-reduces the gradients in buckets during ``backward()``, overlapping
communication with the rest of the backward pass; every rank sees a
different shard of the data (``DistributedSampler``) and all replicas stay
identical. Run with::

    torchrun --nproc-per-node 4 examples/torch_distributed/ddp_train.py
    meshcast run -n 4 examples/torch_distributed/ddp_train.py
    meshcast run -n 4 examples/torch_distributed/ddp_train.py --backend gloo   # to compare

On two machines, one torchrun on each (shared memory inside each machine, Gloo
between them; tests/multihost/test_torch_across_hosts.py runs this on emulated
hosts)::

    node0$ torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr node0 \
               --master-port 29500 examples/torch_distributed/ddp_train.py
    node1$ torchrun --nnodes 2 --node-rank 1 --nproc-per-node 4 --master-addr node0 \
               --master-port 29500 examples/torch_distributed/ddp_train.py
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(torch.nn.Module):
    """A small MLP: 32 features in, 10 classes out (about 7k parameters)."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(32, width), torch.nn.ReLU(),
            torch.nn.Linear(width, width), torch.nn.ReLU(),
            torch.nn.Linear(width, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def dataset(n: int = 512) -> TensorDataset:
    """A synthetic, learnable data set (the class is a function of the features)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 32, generator=g)
    y = x[:, :10].argmax(dim=1)
    return TensorDataset(x, y)


def run(rank: int, world_size: int, epochs: int = 5) -> None:
    torch.manual_seed(0)
    model = DDP(Net())  # broadcasts rank 0's parameters to every rank
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    data = dataset()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()  # gradients are averaged across ranks here
            optimizer.step()
            total += torch.tensor([loss.item() * len(y), len(y)])
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {total[0].item() / total[1].item():.4f}",
                  flush=True)
    checksum = sum(p.sum().item() for p in model.parameters())
    print(f"rank {rank}: parameter checksum {checksum:.6f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="meshcast")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    dist.init_process_group(args.backend)
    run(dist.get_rank(), dist.get_world_size(), args.epochs)
    dist.destroy_process_group()
