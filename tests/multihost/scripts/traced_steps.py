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
# 128 KiB: the size the fused family runs at 2 hosts x 2 over MPI, compiled (the lane's
# call, the first) and through the general path (forced)
y = np.ones(32 << 10, np.float32)
dist.all_reduce(y)
dist.all_reduce(y, algorithm="fused")
assert (y == n * n).all(), y[:4]
out = np.empty(y.size // n, np.float32)
dist.reduce_scatter_tensor(out, y)
assert (out == n ** 3).all(), out[:4]
a2a = np.empty_like(y)
dist.all_to_all_single(a2a, y)
assert (a2a == n * n).all(), a2a[:4]
dist.destroy_process_group()
