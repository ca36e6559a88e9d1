"""Quick all_reduce timing at the sizes issue #3 asks about (8 B, 1 MiB, 64 MiB).

Run:  meshcast run -n 2 --no-prefix benchmarks/quick_all_reduce.py [algorithm]
Prints time per call and nccl-tests' busbw (2 (n-1)/n * bytes / time). The
full sweep with peers side by side is `meshcast bench`.
"""

import sys
import time

import numpy as np

import meshcast as dist


def main() -> None:
    dist.init_process_group()
    n = dist.get_world_size()
    algo = sys.argv[1] if len(sys.argv) > 1 else None
    if dist.get_rank() == 0:
        print(f"{'bytes':>10} {'us/call':>10} {'busbw GB/s':>11}  algorithm")
    for nbytes in (8, 1 << 20, 64 << 20):
        x = np.zeros(nbytes // 4, np.float32)
        iters = 2000 if nbytes == 8 else (50 if nbytes == 1 << 20 else 5)
        for _ in range(5):
            dist.all_reduce(x, algorithm=algo)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x, algorithm=algo)
        t = (time.perf_counter() - t0) / iters
        if dist.get_rank() == 0:
            busbw = 2 * (n - 1) / n * nbytes / t / 1e9
            name = dist.group.WORLD.last_algorithm
            print(f"{nbytes:>10} {t * 1e6:>10.1f} {busbw:>11.2f}  {name}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
