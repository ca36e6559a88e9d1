"""One all_reduce across hosts, then ``RESULT {json}`` per rank: what the launcher said
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), the host, and the sum (which is
right only if every rank has its own RANK and all agree on WORLD_SIZE)."""

import json
import os
import socket

import numpy as np

import meshcast as dist

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
x = np.array([rank + 1], np.int64)
dist.all_reduce(x)
print("RESULT " + json.dumps({
    "rank": rank, "size": size, "host": socket.gethostname(), "sum": int(x[0]),
    **{k: int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")},
}), flush=True)
dist.destroy_process_group()
