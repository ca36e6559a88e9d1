"""Collectives across hosts until something fails; every rank writes down what it saw.

    fault_job.py OUT_DIR

Each rank loops over a 4 KiB all_reduce (the hierarchical path) and an 8-byte one (the
eager path that rides in the agreement exchange). After 20 rounds it writes
``OUT_DIR/ready-<rank>.json`` ({rank, pid, host}): the test injects its fault once
every rank is ready. When a call raises, the rank writes ``OUT_DIR/error-<rank>.json``
({rank, host, t: time.time(), type, message}) and re-raises, so that its launcher
fails and prints its summary. Records go to files, not stdout, because a launcher
cut off from the network (mpiexec's proxy on a host whose link is down) cannot
forward output. The loop stops after 120 s whatever happens (a test that failed to
inject its fault must not leave ranks running).
"""

import json
import os
import socket
import sys
import time

import numpy as np

import meshcast as dist


def write(name: str, record: dict) -> None:
    tmp = os.path.join(out_dir, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(out_dir, name))  # the test never reads half a file


out_dir = sys.argv[1]
dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
big = np.ones(1024, np.float32)
small = np.ones(2, np.float32)
end = time.monotonic() + 120
i = 0
try:
    while time.monotonic() < end:
        big[:] = 1
        dist.all_reduce(big)
        small[:] = 1
        dist.all_reduce(small)
        assert big[0] == small[0] == size, (big[0], small[0])
        i += 1
        if i == 20:
            write(f"ready-{rank}.json", {"rank": rank, "pid": os.getpid(),
                                         "host": socket.gethostname()})
        time.sleep(0.005)
except Exception as exc:
    write(f"error-{rank}.json", {"rank": rank, "host": socket.gethostname(), "t": time.time(),
                                 "type": type(exc).__name__, "message": str(exc)})
    raise
print(f"rank {rank}: no fault within 120 s", file=sys.stderr)
sys.exit(3)
