"""Calls across hosts that run a hierarchical family, under MESHCAST_TRACE: the test reads
the steps each rank's trace noted."""

import numpy as np

import meshcast as dist

dist.init_process_group()
n = dist.get_world_size()
x = np.ones(64 << 10, np.float32)  # 256 KiB: past every eager size
dist.all_reduce(x, algorithm="rails")
dist.all_reduce(x, algorithm="leader")
assert (x == n * n).all(), x[:4]
dist.destroy_process_group()
