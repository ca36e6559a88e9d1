"""Data-parallel training of a small PyTorch model on CPU, with meshcast's functions.

Run it with:  meshcast run -n 4 examples/data_parallel_torch.py

What DistributedDataParallel does, written out by hand. meshcast's
collectives take CPU ``torch.Tensor``s directly (in place, without copies
for contiguous tensors), so the recipe is the one of data_parallel.py with
autograd computing the gradients:

1. ``broadcast`` every parameter from rank 0, so all replicas start equal;
2. at each step every rank runs forward and backward on its own mini-batch
   of ``BATCH`` examples;
3. ``all_reduce(p.grad, op=ReduceOp.AVG)`` for every parameter, then the SGD
   step. Equal per-rank batches make the average of the per-rank mean
   gradients equal to the mean gradient of the combined batch.

So N ranks with batch B train like one process with batch N*B: the example
checks that against a single-process twin of the model, and checks that
every rank ends with bitwise identical parameters. (meshcast also plugs into
torch.distributed as a backend, to run DDP itself; this example uses
meshcast's own functions to show the mechanics. It does not use
torch.distributed at all.)
"""

import copy

import torch

import meshcast as dist

D, HIDDEN, BATCH = 6, 16, 32  # features, hidden units, examples per rank per step
STEPS, LR = 100, 0.1


def show(title, t):
    """Print every rank's copy of tensor ``t`` on rank 0 (gathered as torch tensors)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    t = t.detach().reshape(-1).contiguous()
    pieces = [torch.empty_like(t) for _ in range(size)] if rank == 0 else None
    dist.gather(t, pieces, dst=0)
    if rank == 0:
        print(f"  {title}")
        for r, p in enumerate(pieces):
            print(f"    rank {r}: [{', '.join(f'{v:7.4f}' for v in p.tolist())}]")


def step(name):
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"\n== {name}")


def target(x):
    """The function the model learns: mostly linear, a little curved."""
    return x[:, :3].sum(dim=1, keepdim=True) + 0.5 * torch.tanh(2 * x[:, 3:4])


def global_batch(step_index, size):
    """The combined batch of one step (every rank can make it; each uses its slice)."""
    g = torch.Generator().manual_seed(1000 + step_index)
    x = torch.randn(size * BATCH, D, generator=g)
    return x, target(x)


def sgd_step(model):
    """Plain SGD written out (torch.optim.SGD does the same, but is slow to import)."""
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
            p.grad = None


def mse(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def main():
    torch.set_num_threads(1)  # several ranks share the cores
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"meshcast data parallel (torch {torch.__version__}, CPU): MLP {D}-{HIDDEN}-1, "
              f"batch {BATCH} per rank, {size} ranks")

    step("1. same start: broadcast every parameter from rank 0")
    torch.manual_seed(rank)  # a different random init on every rank...
    model = torch.nn.Sequential(torch.nn.Linear(D, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, 1))
    first = model[0].weight
    show("before: first layer weight[0, :4]", first[0, :4])
    for p in model.parameters():
        dist.broadcast(p, src=0)  # ...replaced by rank 0's, in place
    show("after:  first layer weight[0, :4]", first[0, :4])
    twin = copy.deepcopy(model)  # single-process reference, trained on the combined batch

    step(f"2. train {STEPS} steps: local backward, all_reduce(grad, AVG), SGD step")
    x_val = torch.randn(256, D, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        val_before = mse(model, x_val, target(x_val)).item()
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    for i in range(STEPS):
        x, y = global_batch(i, size)
        loss = mse(model, x[mine], y[mine])
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        sgd_step(model)

        mse(twin, x, y).backward()
        sgd_step(twin)

        if i % 25 == 0 or i == STEPS - 1:
            batch_loss = loss.detach().reshape(1)  # mean of the ranks' losses:
            dist.all_reduce(batch_loss, op=dist.ReduceOp.AVG)  # the combined batch's loss
            if rank == 0:
                print(f"  step {i:3d}  training loss {batch_loss.item():.4f}")
    with torch.no_grad():
        val_after = mse(model, x_val, target(x_val)).item()

    step("3. every rank holds the same parameters")
    show("first layer weight[0, :4]", first[0, :4])
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    everyone = torch.empty(size, flat.numel())
    dist.all_gather_into_tensor(everyone, flat)
    assert all(torch.equal(row, flat) for row in everyone), "ranks disagree"
    gap = (flat - torch.nn.utils.parameters_to_vector(twin.parameters())).abs().max().item()
    assert gap < 1e-4, f"data-parallel and single-process training differ by {gap}"
    assert val_after < 0.2 * val_before, (val_before, val_after)
    if rank == 0:
        print(f"  identical on all ranks; largest difference from single-process training "
              f"with batch {size * BATCH}: {gap:.1e}")
        print(f"  validation loss {val_before:.4f} -> {val_after:.4f}")
        print("\ndata parallel (torch) OK")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
