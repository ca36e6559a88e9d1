"""Every rank records its pid, then rank <bad> fails as <how>; the others sleep until killed.

Usage: failer.py OUT_DIR BAD_RANK HOW [--ignore-sigterm RANK]
HOW: raise | sigkill | exit3 | none (nobody fails: everyone sleeps)
Rank 0 also starts a sleeping grandchild and records its pid (grandchild.json), and
records the directory of the error files (error_dir.json).
"""

import os
import signal
import subprocess
import sys
import time

from _common import wait_for_files, write_json

out_dir, bad, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if "--ignore-sigterm" in sys.argv and rank == int(sys.argv[sys.argv.index("--ignore-sigterm") + 1]):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if rank == 0:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    write_json(out_dir, "grandchild.json", child.pid)
    write_json(out_dir, "error_dir.json", os.path.dirname(os.environ["MESHCAST_ERROR_FILE"]))
write_json(out_dir, f"pid-{rank}.json", os.getpid())
wait_for_files(out_dir, [f"pid-{r}.json" for r in range(world)] + ["grandchild.json"])


def explode(n):
    raise ValueError(f"rank {n} exploded on purpose")


if rank == bad:
    if how == "raise":
        explode(rank)
    elif how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "exit3":
        sys.exit(3)
time.sleep(120)
