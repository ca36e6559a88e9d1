"""DDP training under torchrun on several hosts: ``torch_ddp.py BACKEND OUTDIR``.

Trains the same model under a few DDP configurations with ``BACKEND`` ("meshcast" or
"gloo"): every rank starts from its own seed (so DDP's initial broadcast from rank 0 has
to cross the hosts), sees its own batches, and takes a few SGD steps. Each rank saves
its final parameters, one flat float32 vector per configuration, to
``OUTDIR/BACKEND-RANK.npz`` (the emulated hosts share the file system), and prints
``RESULT {json}`` naming its host and the group torch runs on, so the test can compare
ranks and backends value by value. Under another backend than meshcast it then checks
meshcast groups made with ``new_group(backend="meshcast")`` across the hosts.
"""

import datetime
import json
import socket
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5

# The model's gradient is 77k float32 (300 KiB): one default bucket takes meshcast's
# large-message path between hosts, the 50 KiB buckets its small-message one, several
# all-reduces in flight at once.
CONFIGS = {
    "plain": {},
    "small_buckets": {"bucket_cap_mb": 0.05},
    "bucket_view": {"gradient_as_bucket_view": True, "bucket_cap_mb": 0.1},
    "allreduce_hook": {"hook": default_hooks.allreduce_hook},
}


def net() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(32, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10))


def train(rank: int, config: dict) -> np.ndarray:
    kw = dict(config)
    hook = kw.pop("hook", None)
    torch.manual_seed(rank)  # different on every rank: DDP broadcasts rank 0's
    model = DDP(net(), **kw)
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(STEPS):
        x, y = torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def meshcast_groups_under_another_backend(rank: int, n: int) -> list[str]:
    """``new_group(backend="meshcast")`` under a default group of another backend.

    Each such group brings up a World of its own (its ranks only): over every rank,
    and over ranks 1 and 2 (one on each host at 2x2). Returns the meshcast groups'
    descriptions; a wrong value raises AssertionError.
    """
    from torch_collectives import data, same

    everyone = dist.new_group(backend="meshcast")
    t = data(rank, 70_000, seed=30)
    dist.all_reduce(t, group=everyone)
    same("all_reduce on new_group(backend='meshcast')", t,
         sum(data(r, 70_000, seed=30).double().numpy() for r in range(n)))
    pair = dist.new_group([1, 2], backend="meshcast")
    if rank in (1, 2):
        u = data(rank, 5, seed=31)
        dist.broadcast(u, src=2, group=pair)
        same("broadcast on new_group([1, 2], backend='meshcast')", u, data(2, 5, seed=31))
    dist.barrier()
    return [repr(g.meshcast_group) for g in (everyone, pair) if g is not None
            and g != dist.GroupMember.NON_GROUP_MEMBER]


def main() -> None:
    backend, outdir = sys.argv[1], Path(sys.argv[2])
    torch.use_deterministic_algorithms(True)
    # A hang becomes an error naming the call within the test's time (torch's default: 30 min).
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    params = {name: train(rank, config) for name, config in CONFIGS.items()}
    np.savez(outdir / f"{backend}-{rank}.npz", **params)
    world = dist.group.WORLD
    print("RESULT " + json.dumps({
        "backend": backend, "rank": rank, "size": dist.get_world_size(),
        "host": socket.gethostname(),
        "group": repr(getattr(world, "meshcast_group", world))}), flush=True)
    if backend != "meshcast":
        groups = meshcast_groups_under_another_backend(rank, dist.get_world_size())
        print("RESULT " + json.dumps({"rank": rank, "meshcast_under": backend,
                                      "groups": groups}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
