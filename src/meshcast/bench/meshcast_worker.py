"""One rank of ``meshcast bench`` on meshcast itself, through its torch.distributed-style API.

The calls are the ones a user writes (``all_reduce(x)``,
``all_gather_into_tensor(out, x)``, ...), so their front-door cost is part of
the figure; ``algorithm=`` is passed only when ``--algo`` forces one. torch's
API has a single buffer for all_reduce, broadcast and reduce, so those run
in place only (the out-of-place column is N/A, as it is for Gloo). With
``--symmetric`` (library ``meshcast-symmetric``) the send and receive buffers
come from ``meshcast.empty``, so the calls that can run in place on
symmetric memory do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from ._worker import run
from .sweep import Call, Prepared, Unsupported

_ONE_BUFFER = "torch.distributed's API has one buffer for {op}: in place only"


class MeshcastComm:
    """:class:`.sweep.Comm` over meshcast's public functions."""

    library = "meshcast"

    def __init__(self, args: argparse.Namespace) -> None:
        import meshcast as dist

        if args.init:
            dist.init_process_group(init_method=f"file://{args.init}", rank=args.rank,
                                    world_size=args.world_size)
        else:  # started by a launcher (meshcast run, torchrun, mpiexec): its environment
            dist.init_process_group()
        self.dist = dist
        self.symmetric = bool(args.symmetric)
        if self.symmetric:
            self.library = "meshcast-symmetric"
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self._last_op = ""

    def allocate(self, count: int, dtype: np.dtype) -> np.ndarray:
        """The sweep's buffers: symmetric ones with ``--symmetric``, else plain arrays."""
        if self.symmetric:
            buf = self.dist.empty(count, dtype)
            buf[...] = 1
            return buf
        return np.ones(count, dtype)

    def barrier(self) -> None:
        self.dist.barrier()

    def allreduce_scalar(self, value: float, how: str) -> float:
        x = np.array([value], np.float64)
        if how == "rank0":
            self.dist.broadcast(x, src=0)
            return float(x[0])
        op = {"sum": "sum", "avg": "sum", "max": "max", "min": "min"}[how]
        self.dist.all_reduce(x, op=self.dist.ReduceOp.coerce(op))
        return float(x[0]) / (self.size if how == "avg" else 1)

    def algorithm(self) -> str:
        if self._last_op == "sendrecv":
            return "p2p"
        group = self.dist.group.WORLD
        return (group.last_algorithm or "") if group is not None else ""

    def prepare(self, call: Call) -> Prepared:
        d = self.dist
        self._last_op = call.op
        algo = call.algorithm
        rop = d.ReduceOp.coerce("product" if call.redop == "prod" else call.redop)
        send, recv, root, n = call.send, call.recv, call.root, self.size
        c = call.counts.param
        if call.op in ("all_reduce", "broadcast", "reduce") and not call.inplace:
            raise Unsupported(_ONE_BUFFER.format(op=call.op))
        if call.op == "all_reduce":
            return Prepared(lambda: d.all_reduce(recv, op=rop, algorithm=algo), recv)
        if call.op == "broadcast":
            return Prepared(lambda: d.broadcast(recv, src=root, algorithm=algo), recv)
        if call.op == "reduce":
            return Prepared(lambda: d.reduce(recv, dst=root, op=rop, algorithm=algo), recv)
        if call.op == "all_gather":
            return Prepared(lambda: d.all_gather_into_tensor(recv, send, algorithm=algo), recv)
        if call.op == "reduce_scatter":
            return Prepared(lambda: d.reduce_scatter_tensor(recv, send, op=rop, algorithm=algo),
                            recv)
        if call.op == "gather":
            parts = [recv[r * c:(r + 1) * c] for r in range(n)] if self.rank == root else None
            return Prepared(lambda: d.gather(send, parts, dst=root, algorithm=algo), recv)
        if call.op == "scatter":
            parts = [send[r * c:(r + 1) * c] for r in range(n)] if self.rank == root else None
            return Prepared(lambda: d.scatter(recv, parts, src=root, algorithm=algo), recv)
        if call.op == "all_to_all":
            return Prepared(lambda: d.all_to_all_single(recv, send, algorithm=algo), recv)
        if call.op == "sendrecv":
            if n == 1:
                raise Unsupported("a rank cannot send to itself in torch.distributed's API")
            nxt, prv = (self.rank + 1) % n, (self.rank - 1) % n

            def sendrecv() -> None:
                for work in d.batch_isend_irecv([d.P2POp(d.isend, send, nxt),
                                                 d.P2POp(d.irecv, recv, prv)]):
                    work.wait()

            return Prepared(sendrecv, recv)
        raise Unsupported(f"meshcast has no {call.op}")


def versions() -> dict[str, str]:
    import meshcast

    return {"meshcast": meshcast.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0]}


def main(argv: Sequence[str] | None = None) -> int:
    state: dict[str, MeshcastComm] = {}

    def connect(args: argparse.Namespace) -> MeshcastComm:
        state["comm"] = MeshcastComm(args)
        return state["comm"]

    def close() -> None:
        if "comm" in state:
            state["comm"].dist.destroy_process_group()

    return run(argv, "meshcast", connect, versions, close)


if __name__ == "__main__":
    sys.exit(main())
