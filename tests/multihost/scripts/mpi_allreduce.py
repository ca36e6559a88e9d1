"""mpi4py under mpiexec: a small allreduce, then an Allreduce of ``argv[1]`` bytes of float64.

Prints ``RESULT {json}`` per rank: host, rank, size, the small sum and the big one's ends.
"""

import json
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
small = comm.allreduce(rank + 1)
nbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 8 << 20
send = np.full(nbytes // 8, float(rank + 1))
recv = np.empty_like(send)
comm.Barrier()
t0 = time.perf_counter()
comm.Allreduce(send, recv)
seconds = time.perf_counter() - t0
ok = bool(np.all(recv == size * (size + 1) / 2))
print("RESULT " + json.dumps({"host": socket.gethostname(), "rank": rank, "size": size,
                              "small": small, "big_ok": ok, "seconds": seconds}), flush=True)
