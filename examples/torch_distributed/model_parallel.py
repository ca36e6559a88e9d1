"""Two-stage model parallelism with send/recv: stage 1 on an even rank, stage 2 on the next.

Ranks pair up (0 -> 1, 2 -> 3, ...). The even rank runs the first half of
the model and sends its activations; the odd rank runs the second half,
computes the loss, and sends the gradient of the activations back so the
even rank can finish the backward pass. With an odd world size the last
rank has no partner and sits out. Run with ``torchrun --nproc-per-node 4``
or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist

BATCH, HIDDEN = 8, 16


def run(rank: int, world_size: int) -> None:
    if rank % 2 == 0 and rank + 1 >= world_size:
        print(f"rank {rank}: no partner, idle", flush=True)
        return
    torch.manual_seed(rank // 2)
    first = rank % 2 == 0
    peer = rank + 1 if first else rank - 1
    if first:
        stage = torch.nn.Sequential(torch.nn.Linear(4, HIDDEN), torch.nn.ReLU())
    else:
        stage = torch.nn.Linear(HIDDEN, 1)
    optimizer = torch.optim.SGD(stage.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank // 2)
    for step in range(4):
        optimizer.zero_grad()
        if first:
            x = torch.randn(BATCH, 4, generator=g)
            activations = stage(x)
            dist.send(activations.detach(), dst=peer)
            grad = torch.empty(BATCH, HIDDEN)
            dist.recv(grad, src=peer)
            activations.backward(grad)
        else:
            activations = torch.empty(BATCH, HIDDEN, requires_grad=False)
            dist.recv(activations, src=peer)
            activations.requires_grad_(True)
            target = torch.ones(BATCH, 1)
            loss = torch.nn.functional.mse_loss(stage(activations), target)
            loss.backward()
            dist.send(activations.grad, dst=peer)
            print(f"rank {rank}: step {step} loss {loss.item():.4f}", flush=True)
        optimizer.step()
    print(f"rank {rank}: stage {1 if first else 2} done", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
