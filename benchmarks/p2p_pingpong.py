"""Point-to-point ping-pong between 2 ranks: latency for small messages, bandwidth for large.

Run:  meshcast run -n 2 --no-prefix benchmarks/p2p_pingpong.py
Each size: rank 0 sends, rank 1 sends it back; the round trip / 2 is the
one-way time; bandwidth = bytes / one-way time.
"""

import time

import numpy as np

import meshcast as dist


def main() -> None:
    dist.init_process_group()
    rank = dist.get_rank()
    assert dist.get_world_size() == 2, "run with -n 2"
    sizes = [8, 64, 1024, 16 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20]
    if rank == 0:
        print(f"{'bytes':>10} {'one-way us':>12} {'GB/s':>8}")
    for size in sizes:
        buf = np.zeros(size, np.uint8)
        iters = 200 if size <= 64 << 10 else (20 if size <= 1 << 20 else 5)
        for it in range(iters + 3):  # 3 warm-up round trips
            if it == 3:
                dist.barrier()
                t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
        one_way = (time.perf_counter() - t0) / iters / 2
        if rank == 0:
            print(f"{size:>10} {one_way * 1e6:>12.1f} {size / one_way / 1e9:>8.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
