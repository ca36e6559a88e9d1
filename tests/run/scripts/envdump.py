"""Write this worker's environment, argv and module facts to <out_dir>/env-<rank>.json."""

import os
import sys

from _common import write_json

KEYS = [
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
    "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "MESHCAST_SECRET", "MESHCAST_RUN_ID", "MESHCAST_STORE_HOSTED",
    "MESHCAST_ERROR_FILE", "OMP_NUM_THREADS", "PYTHONUNBUFFERED",
]

out_dir = sys.argv[1]
write_json(out_dir, f"env-{os.environ['RANK']}.json", {
    "env": {k: os.environ.get(k) for k in KEYS},
    "argv": sys.argv,
    "name": __name__,
    "file": __file__,
    "path0": sys.path[0],
    "pid": os.getpid(),
    "stdin": os.path.realpath("/proc/self/fd/0"),
})
