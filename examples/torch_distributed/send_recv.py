"""Point-to-point: blocking send/recv, then non-blocking isend/irecv around a ring.

Run with ``torchrun --nproc-per-node 4`` or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist


def run(rank: int, world_size: int) -> None:
    # Blocking: rank 0 sends a tensor to every other rank.
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        for dst in range(1, world_size):
            dist.send(tensor=tensor, dst=dst)
    else:
        dist.recv(tensor=tensor, src=0)
    print(f"rank {rank}: has data {tensor[0].item()}", flush=True)

    # Non-blocking: pass our rank to the right neighbour, receive from the left.
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    incoming = torch.zeros(1)
    req_recv = dist.irecv(incoming, src=left)
    req_send = dist.isend(torch.tensor([float(rank)]), dst=right)
    req_send.wait()
    req_recv.wait()
    print(f"rank {rank}: received {incoming[0].item()} from rank {left}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
