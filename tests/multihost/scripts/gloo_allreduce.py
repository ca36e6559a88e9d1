"""torch.distributed with Gloo under torchrun: all_reduce of ``argv[1]`` float32 elements."""

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
t = torch.full((n,), float(rank + 1))
dist.all_reduce(t)
ok = bool(torch.all(t == size * (size + 1) / 2))
print("RESULT " + json.dumps({"host": socket.gethostname(), "rank": rank, "size": size,
                              "ok": ok, "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}),
      flush=True)
dist.destroy_process_group()
