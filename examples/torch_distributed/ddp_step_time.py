"""Time one DDP training step on meshcast and on gloo, in the same job.

The default group runs on meshcast; a second group over the same ranks runs
on gloo; the example model of ``ddp_train.py`` is trained for ``--steps``
steps on each (alternating rounds, so both see the same machine load) and
rank 0 prints the median step time of each. Run with::

    torchrun --nproc-per-node 2 examples/torch_distributed/ddp_step_time.py
    meshcast run -n 2 examples/torch_distributed/ddp_step_time.py --width 512
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from ddp_train import Net
from torch.nn.parallel import DistributedDataParallel as DDP


def step_times(model: DDP, steps: int, batch: int) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(dist.get_rank())
    x, y = torch.randn(batch, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=64, help="hidden width of the model")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    dist.init_process_group("meshcast")
    groups = {"meshcast": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    times: dict[str, list[float]] = {name: [] for name in groups}
    for _ in range(args.rounds):
        for name, group in groups.items():
            torch.manual_seed(0)
            model = DDP(Net(args.width), process_group=group)
            step_times(model, 10, args.batch)  # warm-up: buckets get rebuilt after step 1
            times[name] += step_times(model, args.steps, args.batch)
            # Drop each model while its group is still referenced: torch 2.13 frees a
            # Gloo group whose last holder is DDP's reducer with the GIL held, and
            # that can deadlock with Gloo's worker thread (which needs the GIL to
            # free the work of a backward pass). Freed through the group's own
            # Python object, torch releases the GIL first.
            del model
    if dist.get_rank() == 0:
        params = sum(p.numel() for p in Net(args.width).parameters())
        print(f"DDP step, {dist.get_world_size()} ranks, {params} parameters, batch "
              f"{args.batch}, {args.rounds} x {args.steps} steps each:")
        for name, ts in times.items():
            print(f"  {name:9s} median {statistics.median(ts) * 1e3:7.3f} ms   "
                  f"p90 {sorted(ts)[int(0.9 * len(ts))] * 1e3:7.3f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
