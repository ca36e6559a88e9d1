"""Tiny calls across hosts under MESHCAST_TRACE: what the trace says ran (the test reads it)."""

import numpy as np

import meshcast as dist

dist.init_process_group()
x = np.ones(2, np.float32)
for _ in range(3):
    dist.all_reduce(x)
assert x[0] == dist.get_world_size() ** 3, x
pieces = [np.empty(2, np.float32) for _ in range(dist.get_world_size())]
dist.gather(x, pieces if dist.get_rank() == 0 else None, dst=0)
dist.destroy_process_group()
