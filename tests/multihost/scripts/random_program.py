"""A random program of every call (tests/collectives/random_programs.py) across hosts,
started by a launcher: SEED and CALLS from the environment."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.collectives import random_programs  # noqa: E402

import meshcast as dist  # noqa: E402

dist.init_process_group(timeout=float(os.environ.get("TIMEOUT", "60")))
made = random_programs.random_program(int(os.environ["SEED"]), int(os.environ["CALLS"]))
if dist.get_rank() == 0:
    print(f"random program: ok {sum(made.values())} calls", flush=True)
dist.destroy_process_group()
