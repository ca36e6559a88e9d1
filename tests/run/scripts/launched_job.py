"""Started by another tool's launcher (mpiexec, torchrun): init with no arguments, all_reduce.

Prints one ``RESULT {json}`` line per rank for tests/run/test_foreign_launchers.py.
"""

from __future__ import annotations

import json

import numpy as np

import meshcast as dist

dist.init_process_group()
env = dist.launch_env()
x = np.array([dist.get_rank() + 1.0])
dist.all_reduce(x)
report = {"launcher": env.launcher, "env_rank": env.rank, "env_size": env.world_size,
          "rank": dist.get_rank(), "size": dist.get_world_size(), "sum": float(x[0])}
print("RESULT " + json.dumps(report), flush=True)
dist.destroy_process_group()
