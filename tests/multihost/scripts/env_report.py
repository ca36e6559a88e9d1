"""Print, as ``RESULT {json}``, which host this process is on and its launcher variables."""

import json
import os
import socket

KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "HARNESS_PROBE")

print("RESULT " + json.dumps({"host": socket.gethostname(),
                              **{k: os.environ.get(k) for k in KEYS}}), flush=True)
