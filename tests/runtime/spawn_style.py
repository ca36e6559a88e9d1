"""The classic tutorial program: spawn() + init_process_group(rank, world_size) + MASTER_ADDR."""

import os
import sys
import time

import numpy as np

import meshcast as dist


def run(rank: int, world_size: int, out_dir: str) -> None:
    dist.init_process_group(rank=rank, world_size=world_size)
    x = np.array([float(rank)])
    dist.all_reduce(x)
    # Rank 0 (the store's host) is not in the subgroup and races to its end,
    # while ranks 1..n-1 still need the store to set the subgroup up.
    if rank == 1:
        time.sleep(0.5)
    sub = dist.new_group(list(range(1, world_size)))
    if rank > 0:
        y = np.ones(1)
        dist.all_reduce(y, group=sub)
        assert y[0] == world_size - 1
    with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
        f.write(str(x[0]))
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = sys.argv[1]
    n = int(sys.argv[3])
    dist.spawn(run, args=(n, sys.argv[2]), nprocs=n)
