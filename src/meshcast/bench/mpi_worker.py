"""One rank of ``meshcast bench`` on MPI through mpi4py's buffer (uppercase) methods.

Run by the parent as ``mpiexec -n N python -m meshcast.bench.mpi_worker
--spec JSON``. These are the "near C-speed" calls (``Allreduce``,
``Allgather``, ``Reduce_scatter_block``, ``Bcast``, ``Reduce``, ``Gather``,
``Scatter``, ``Alltoall``, ``Sendrecv``) on NumPy arrays, so the figure is
the MPI library's plus mpi4py's thin call overhead. In place uses
``MPI.IN_PLACE`` with MPI's own rules; for ``Reduce_scatter_block`` those put
the result at the start of the buffer rather than at the rank's block, so
that is where it is checked. ``MPI_Bcast`` has one buffer (in place only) and
MPI has no average op.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._worker import run
from .sweep import Call, Prepared, Unsupported


class MpiComm:
    """:class:`.sweep.Comm` over ``mpi4py.MPI.COMM_WORLD``."""

    library = "mpi"

    def __init__(self, args: argparse.Namespace) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._redops = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}

    def barrier(self) -> None:
        self.comm.Barrier()

    def allreduce_scalar(self, value: float, how: str) -> float:
        x = np.array([value], np.float64)
        if how == "rank0":
            self.comm.Bcast(x, root=0)
            return float(x[0])
        op = {"sum": "sum", "avg": "sum", "max": "max", "min": "min"}[how]
        self.comm.Allreduce(self.MPI.IN_PLACE, x, op=self._redops[op])
        return float(x[0]) / (self.size if how == "avg" else 1)

    def algorithm(self) -> str:
        return ""  # MPICH chooses inside the library and does not say

    def prepare(self, call: Call) -> Prepared:
        comm, IN_PLACE = self.comm, self.MPI.IN_PLACE  # noqa: N806 - MPI's spelling
        rop: Any = None
        if call.op in ("all_reduce", "reduce", "reduce_scatter"):
            if call.redop not in self._redops:
                raise Unsupported(f"MPI has no reduce op {call.redop!r}")
            rop = self._redops[call.redop]
        send, recv, base, root = call.send, call.recv, call.base, call.root
        me_root = self.rank == root
        ip = call.inplace
        if call.op == "all_reduce":
            if ip:
                return Prepared(lambda: comm.Allreduce(IN_PLACE, recv, op=rop), recv)
            return Prepared(lambda: comm.Allreduce(send, recv, op=rop), recv)
        if call.op == "all_gather":
            if ip:
                return Prepared(lambda: comm.Allgather(IN_PLACE, recv), recv)
            return Prepared(lambda: comm.Allgather(send, recv), recv)
        if call.op == "reduce_scatter":
            if ip:  # input is the whole buffer; MPI leaves the result at its start
                return Prepared(lambda: comm.Reduce_scatter_block(IN_PLACE, base, op=rop),
                                base[:call.counts.recv])
            return Prepared(lambda: comm.Reduce_scatter_block(send, recv, op=rop), recv)
        if call.op == "broadcast":
            if not ip:
                raise Unsupported("MPI_Bcast has one buffer: in place only")
            return Prepared(lambda: comm.Bcast(recv, root=root), recv)
        if call.op == "reduce":
            if ip and me_root:
                return Prepared(lambda: comm.Reduce(IN_PLACE, recv, op=rop, root=root), recv)
            src = recv if ip else send
            dst = recv if me_root else None
            return Prepared(lambda: comm.Reduce(src, dst, op=rop, root=root), recv)
        if call.op == "gather":
            if ip and me_root:
                return Prepared(lambda: comm.Gather(IN_PLACE, recv, root=root), recv)
            dst = recv if me_root else None
            return Prepared(lambda: comm.Gather(send, dst, root=root), recv)
        if call.op == "scatter":
            if ip and me_root:
                return Prepared(lambda: comm.Scatter(base, IN_PLACE, root=root), recv)
            src = send if me_root else None
            return Prepared(lambda: comm.Scatter(src, recv, root=root), recv)
        if call.op == "all_to_all":
            return Prepared(lambda: comm.Alltoall(send, recv), recv)
        if call.op == "sendrecv":
            nxt, prv = (self.rank + 1) % self.size, (self.rank - 1) % self.size
            return Prepared(lambda: comm.Sendrecv(send, dest=nxt, recvbuf=recv, source=prv),
                            recv)
        raise Unsupported(f"no {call.op} in MPI")


def versions() -> dict[str, str]:
    import mpi4py
    from mpi4py import MPI

    return {"mpi4py": mpi4py.__version__,
            "mpi": " ".join(MPI.Get_library_version().strip().splitlines()[0].split()),
            "numpy": np.__version__, "python": sys.version.split()[0]}


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv, "mpi", MpiComm, versions)


if __name__ == "__main__":
    sys.exit(main())
