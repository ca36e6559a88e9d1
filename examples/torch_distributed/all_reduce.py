"""All-reduce: every rank ends up with the sum of all ranks' tensors.

Run with ``torchrun --nproc-per-node 4`` or ``meshcast run -n 4``.
"""

import torch
import torch.distributed as dist


def run(rank: int, world_size: int) -> None:
    tensor = torch.ones(3) * (rank + 1)
    print(f"rank {rank}: before all_reduce {tensor.tolist()}", flush=True)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    # 1 + 2 + ... + world_size on every rank
    print(f"rank {rank}: after all_reduce {tensor.tolist()}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("meshcast")
    run(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
