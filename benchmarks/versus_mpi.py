"""meshcast against MPI's own collectives, in one job, with hot buffers.

Run:  mpiexec -n 2 python benchmarks/versus_mpi.py                 (8 B and 64 KiB .. 1 MiB)
      mpiexec -n 2 python benchmarks/versus_mpi.py --ops gather,scatter --sizes 64K,128K

Both libraries run in the same processes: meshcast through its torch.distributed-style
API (it finds the job mpiexec started, as any launcher's), MPI through mpi4py's buffer
methods (MPICH with the `mpich` wheel). For every collective and size the two take
turns: per turn a few warm-up calls, then the timed loop, 5 times; two turns each; a
call's time is the slowest rank's mean over its loop, and each library keeps its best.
The same arrays serve every call (hot buffers: the case of a training loop, and the
one `meshcast bench`, which moves through a larger buffer, does not show). Values are
zeros so that repeated reductions stay finite, written into every page (see calls).

A size is bytes per rank: the array of all_reduce, broadcast and reduce, each rank's
piece of all_gather, gather and scatter, each rank's output of reduce_scatter, and
the piece for each peer of all_to_all; barrier and the send/recv round trip run at
the first size only. The ratio is meshcast's time over MPI's (below 1: meshcast
faster); for a collective that moves data, that is MPI's busbw over meshcast's. "path" is what meshcast ran
(``last_algorithm``) on rank 0, blank for send/recv.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import meshcast as dist
from meshcast.config import parse_size

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
       "gather", "scatter", "barrier", "sendrecv")
LATENCY_ONLY = ("barrier", "sendrecv")  # (sendrecv: a blocking round trip of ranks 0, 1)


def calls(op: str, nbytes: int, comm: MPI.Intracomm) -> tuple[Callable[[], object],
                                                              Callable[[], object]]:
    """(meshcast's call, MPI's call) of ``op`` on ``nbytes`` a rank, on float32 zeros.

    The zeros are written (``np.full``), not ``np.zeros``' untouched pages: those all map
    the kernel's one zero page, so an input no call writes (all_gather's, all_to_all's,
    reduce_scatter's, a scatter root's) would be read from one cached 4 KiB page at any
    size (all_to_all of 64 KiB pieces at 2 ranks ran one-shot in 6.2 us where 13 on
    written pages, stop 74)."""
    r, n = comm.Get_rank(), comm.Get_size()
    e = max(nbytes // 4, 1)
    x = np.full(e, 0.0, np.float32)
    many = np.full(e * n, 0.0, np.float32)
    many_out = np.full(e * n, 0.0, np.float32)
    pieces = [np.full(e, 0.0, np.float32) for _ in range(n)]
    at_root = r == 0
    if op == "all_reduce":
        return lambda: dist.all_reduce(x), lambda: comm.Allreduce(MPI.IN_PLACE, x)
    if op == "broadcast":
        return lambda: dist.broadcast(x, 0), lambda: comm.Bcast(x, 0)
    if op == "reduce":
        return (lambda: dist.reduce(x, 0),
                lambda: comm.Reduce(MPI.IN_PLACE if at_root else x, x if at_root else None, root=0))
    if op == "all_gather":
        return (lambda: dist.all_gather_into_tensor(many_out, x),
                lambda: comm.Allgather(x, many_out))
    if op == "reduce_scatter":
        return (lambda: dist.reduce_scatter_tensor(x, many),
                lambda: comm.Reduce_scatter_block(many, x))
    if op == "all_to_all":
        return (lambda: dist.all_to_all_single(many_out, many),
                lambda: comm.Alltoall(many, many_out))
    if op == "gather":  # meshcast's root gathers into a list, as torch's does
        return (lambda: dist.gather(x, pieces if at_root else None, 0),
                lambda: comm.Gather(x, many_out if at_root else None, 0))
    if op == "scatter":
        return (lambda: dist.scatter(x, pieces if at_root else None, 0),
                lambda: comm.Scatter(many if at_root else None, x, 0))
    if op == "barrier":
        return dist.barrier, comm.Barrier
    if op == "sendrecv":
        def ours() -> None:
            if r == 0:
                dist.send(x, 1)
                dist.recv(x, 1)
            elif r == 1:
                dist.recv(x, 0)
                dist.send(x, 0)

        def theirs() -> None:
            if r == 0:
                comm.Send(x, 1)
                comm.Recv(x, 1)
            elif r == 1:
                comm.Recv(x, 0)
                comm.Send(x, 0)
        return ours, theirs
    raise SystemExit(f"no collective {op!r}; choose from {', '.join(OPS)}")


def best_time(call: Callable[[], object], loops: int, comm: MPI.Intracomm) -> float:
    """The best of 5 timed loops of ``call``, each the slowest rank's mean, in seconds."""
    for _ in range(max(loops // 10, 5)):
        call()
    best = float("inf")
    for _ in range(5):
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(loops):
            call()
        best = min(best, comm.allreduce(time.perf_counter() - t, MPI.MAX) / loops)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated collectives")
    parser.add_argument("--sizes", default="8,64K,128K,256K,512K,1M",
                        help="comma-separated bytes per rank (K, M suffixes)")
    args = parser.parse_args()
    dist.init_process_group()
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if comm.Get_rank() == 0:
        print(f"{n} ranks, float32, hot buffers; us per call, best of 2 turns x 5 loops; "
              f"MPI: {MPI.Get_library_version().splitlines()[0]}")
        print(f"{'collective':>15} {'bytes':>9} {'meshcast':>9} {'MPI':>9} {'ratio':>6}  path")
    for op in args.ops.split(","):
        for nbytes in sizes:
            if op in LATENCY_ONLY and nbytes != sizes[0] or op == "sendrecv" and n < 2:
                continue
            ours, theirs = calls(op, nbytes, comm)
            loops = 2000 if nbytes <= 4096 else 300 if nbytes <= 256 << 10 else 100
            best = [float("inf"), float("inf")]
            for _ in range(2):
                for i, call in enumerate((ours, theirs)):
                    best[i] = min(best[i], best_time(call, loops, comm))
            if comm.Get_rank() == 0:
                group = dist.group.WORLD
                # (send/recv set no algorithm: the last collective's would show)
                path = ("" if op == "sendrecv" or group is None
                        else group.last_algorithm or "")
                print(f"{op:>15} {nbytes:>9} {best[0] * 1e6:9.2f} {best[1] * 1e6:9.2f} "
                      f"{best[0] / best[1]:6.2f}  {path}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
