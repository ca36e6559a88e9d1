"""``init_process_group("meshcast")`` on several hosts: ``torch_meshcast.py OUTDIR``.

One torchrun job does what three would (each torch job across hosts costs 10-20 s of
start-up on the 2-core machine):

1. prints ``RESULT {"group": ...}``: which meshcast group torch runs on (the test
   checks it really spans the hosts);
2. DDP training exactly as ``torch_ddp.py meshcast OUTDIR`` does (parameters saved to
   ``OUTDIR/meshcast-RANK.npz``, compared by the test with the Gloo job's), first, so
   that a failed check below does not hide the comparison;
3. the collectives torch calls, against NumPy (torch_collectives.py), then
   ``RESULT {"collectives": [...]}``;
4. the tutorial snippets of examples/torch_distributed, each example's ``run(rank,
   world_size)`` on the default group, as their ``__main__`` blocks do (their printed
   lines are checked by the test), then ``RESULT {"tutorial": "done"}``.
"""

import datetime
import importlib.util
import json
import socket
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch_collectives
import torch_ddp

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "torch_distributed"
TIMEOUT_S = 30
TUTORIAL = ["broadcast", "all_reduce", "scatter", "gather", "async_all_reduce", "send_recv",
            "gradient_averaging", "param_broadcast", "distributed_validation",
            "model_parallel", "ddp_train"]


START = time.monotonic()


def record(**fields: object) -> None:
    """``RESULT {json}`` with this rank and the seconds since the script started."""
    print("RESULT " + json.dumps({"rank": dist.get_rank(), **fields,
                                  "at": round(time.monotonic() - START, 2)}), flush=True)


def main() -> None:
    outdir = Path(sys.argv[1])
    torch.use_deterministic_algorithms(True)
    # A hang becomes meshcast's timeout report (which call, which ranks) within the test's time.
    dist.init_process_group("meshcast", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    rank, size = dist.get_rank(), dist.get_world_size()
    record(host=socket.gethostname(), size=size,
           group=repr(dist.group.WORLD.meshcast_group))

    params = {name: torch_ddp.train(rank, config) for name, config in torch_ddp.CONFIGS.items()}
    np.savez(outdir / f"meshcast-{rank}.npz", **params)
    record(ddp="saved")

    record(collectives=torch_collectives.check_all(rank, size))

    for name in TUTORIAL:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.run(rank, size)
        dist.barrier()
    record(tutorial="done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
