"""all_reduce across hosts: meshcast (hierarchical, MPI between hosts) beside MPICH's own
``Allreduce`` (flat, mpi4py) on the same ranks, in the same run.

Run under mpiexec, one process per rank (see README.md here for the emulated-host
command). Prints, on rank 0, the median time per call of each and busbw (nccl-tests:
2(n-1)/n x bytes / time) for float32 at 8 B, 128 KiB, 2 MiB and 32 MiB.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

import meshcast as dist

SIZES = [8, 128 << 10, 2 << 20, 32 << 20]


def timed(fn, reps: int) -> float:
    """Mean time per call over ``reps`` back-to-back calls (nccl-tests' loop), the slowest
    rank's: a barrier between calls would time the ranks' skew, and MPICH's barrier
    busy-polls the cores that oversubscribed ranks share."""
    MPI.COMM_WORLD.Barrier()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    mine = (time.perf_counter() - t) / reps
    return MPI.COMM_WORLD.allreduce(mine, op=MPI.MAX)


def main() -> None:
    dist.init_process_group()
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    sizes = [int(s) for s in sys.argv[1:]] or SIZES
    rows = []
    for nbytes in sizes:
        x = np.ones(nbytes // 4, np.float32)
        reps = 200 if nbytes <= (16 << 10) else (30 if nbytes <= (2 << 20) else 5)
        dist.all_reduce(x)  # warm: connections, pages
        comm.Allreduce(MPI.IN_PLACE, x)
        mc = timed(lambda x=x: dist.all_reduce(x), reps)
        algo = dist.group.WORLD.last_algorithm
        mp = timed(lambda x=x: comm.Allreduce(MPI.IN_PLACE, x), reps)
        bus = 2 * (n - 1) / n * nbytes
        rows.append((nbytes, mc, mp, bus, algo))
    if rank == 0:
        print(f"{'bytes':>10} {'meshcast':>12} {'MPICH flat':>12} {'mc busbw':>10} "
              f"{'mpi busbw':>10} {'ratio':>6}  algorithm")
        for nbytes, mc, mp, bus, algo in rows:
            print(f"{nbytes:>10} {mc * 1e6:>10.0f}us {mp * 1e6:>10.0f}us "
                  f"{bus / mc / 1e9:>8.3f}GB {bus / mp / 1e9:>8.3f}GB {mp / mc:>6.2f}  {algo}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
