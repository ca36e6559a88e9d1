"""Latency of every collective on an 8-byte array, and of a blocking ping-pong.

Run:  meshcast run -n 2 --no-prefix benchmarks/tiny_latency.py   (any rank count)
Each call is timed over 5,000 repetitions after 2,000 warm-up calls, best of 3;
the figures are the per-call times rank 0 sees (the slowest rank sets the pace).
"""

import time

import numpy as np

import meshcast as dist


def main() -> None:
    dist.init_process_group()
    r, n = dist.get_rank(), dist.get_world_size()
    # zeros everywhere: repeated sums stay finite
    x = np.zeros(2, np.float32)
    y = np.zeros(2 * n, np.float32)
    z = np.zeros(2 * n, np.float32)
    pieces = [np.zeros(2, np.float32) for _ in range(n)]
    ball = np.zeros(2, np.float32)

    def ping_pong() -> None:  # one round trip between ranks 0 and 1
        if r == 0:
            dist.send(ball, 1)
            dist.recv(ball, 1)
        elif r == 1:
            dist.recv(ball, 0)
            dist.send(ball, 0)

    calls = {
        "barrier": dist.barrier,
        "all_reduce": lambda: dist.all_reduce(x),
        "broadcast": lambda: dist.broadcast(x, src=0),
        "reduce": lambda: dist.reduce(x, dst=0),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(y, x),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(x, y),
        "all_to_all_single": lambda: dist.all_to_all_single(z, y),
        "gather": lambda: dist.gather(x, pieces if r == 0 else None, dst=0),
        "scatter": lambda: dist.scatter(x, pieces if r == 0 else None, src=0),
        "send/recv round trip": ping_pong,
    }
    if r == 0:
        print(f"{n} ranks, 8-byte float32 arrays; microseconds per call")
    for name, call in calls.items():
        if name == "send/recv round trip" and n < 2:
            continue
        for _ in range(2000):
            call()
        best = float("inf")
        for _ in range(3):
            dist.barrier()
            t = time.perf_counter()
            for _ in range(5000):
                call()
            best = min(best, (time.perf_counter() - t) / 5000)
        if r == 0:
            print(f"{name:>24} {best * 1e6:8.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
