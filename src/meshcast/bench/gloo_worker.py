"""One rank of ``meshcast bench`` on torch.distributed's Gloo backend (the peer meshcast replaces).

Ranks meet through a FileStore (no port to race for) and Gloo's pairs use
the loopback interface (``GLOO_SOCKET_IFNAME=lo``, set by the parent unless
the user set it), i.e. Gloo over TCP on 127.0.0.1, which is what a
single-machine CPU job gets from ``init_process_group("gloo")``. Tensors are
``torch.from_numpy`` views of the sweep's buffers, so the same memory is
checked. Calls are torch's own, as in :mod:`.meshcast_worker`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._worker import run
from .sweep import Call, Prepared, Unsupported

_ONE_BUFFER = "torch.distributed's API has one buffer for {op}: in place only"


class GlooComm:
    """:class:`.sweep.Comm` over ``torch.distributed`` with the Gloo backend."""

    library = "gloo"

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        import torch.distributed as dist

        if not dist.is_gloo_available():
            raise RuntimeError("this torch build has no Gloo backend")
        if args.init:
            dist.init_process_group("gloo", init_method=f"file://{args.init}",
                                    rank=args.rank, world_size=args.world_size)
        else:  # started by torchrun (or another launcher that sets env://)
            dist.init_process_group("gloo")
        self.torch = torch
        self.dist = dist
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self._redops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
                        "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}

    def barrier(self) -> None:
        self.dist.barrier()

    def allreduce_scalar(self, value: float, how: str) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64)
        if how == "rank0":
            self.dist.broadcast(t, src=0)
            return float(t[0])
        op = {"sum": "sum", "avg": "sum", "max": "max", "min": "min"}[how]
        self.dist.all_reduce(t, op=self._redops[op])
        return float(t[0]) / (self.size if how == "avg" else 1)

    def algorithm(self) -> str:
        return ""  # Gloo chooses inside the backend and does not say

    def _t(self, a: np.ndarray) -> Any:
        return self.torch.from_numpy(a)

    def prepare(self, call: Call) -> Prepared:
        d = self.dist
        if call.op in ("all_reduce", "broadcast", "reduce") and not call.inplace:
            raise Unsupported(_ONE_BUFFER.format(op=call.op))
        rop = None
        if call.op in ("all_reduce", "reduce", "reduce_scatter"):
            if call.redop not in self._redops:
                raise Unsupported(f"Gloo has no reduce op {call.redop!r}")
            rop = self._redops[call.redop]
        send, recv, root, n, c = (self._t(call.send), self._t(call.recv), call.root, self.size,
                                  call.counts.param)
        if call.op == "all_reduce":
            return Prepared(lambda: d.all_reduce(recv, op=rop), call.recv)
        if call.op == "broadcast":
            return Prepared(lambda: d.broadcast(recv, src=root), call.recv)
        if call.op == "reduce":
            return Prepared(lambda: d.reduce(recv, dst=root, op=rop), call.recv)
        if call.op == "all_gather":
            # (torch 2.13's names where they exist: the old ones warn there)
            gather = getattr(d, "all_gather_single", None) or d.all_gather_into_tensor
            return Prepared(lambda: gather(recv, send), call.recv)
        if call.op == "reduce_scatter":
            scatter = getattr(d, "reduce_scatter_single", None) or d.reduce_scatter_tensor
            return Prepared(lambda: scatter(recv, send, op=rop), call.recv)
        if call.op == "gather":
            parts = [recv[r * c:(r + 1) * c] for r in range(n)] if self.rank == root else None
            return Prepared(lambda: d.gather(send, parts, dst=root), call.recv)
        if call.op == "scatter":
            parts = [send[r * c:(r + 1) * c] for r in range(n)] if self.rank == root else None
            return Prepared(lambda: d.scatter(recv, parts, src=root), call.recv)
        if call.op == "all_to_all":
            return Prepared(lambda: d.all_to_all_single(recv, send), call.recv)
        if call.op == "sendrecv":
            if n == 1:
                raise Unsupported("a rank cannot send to itself in torch.distributed's API")
            nxt, prv = (self.rank + 1) % n, (self.rank - 1) % n

            def sendrecv() -> None:
                for work in d.batch_isend_irecv([d.P2POp(d.isend, send, nxt),
                                                 d.P2POp(d.irecv, recv, prv)]):
                    work.wait()

            return Prepared(sendrecv, call.recv)
        raise Unsupported(f"no {call.op} in torch.distributed")


def versions() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0]}


def main(argv: Sequence[str] | None = None) -> int:
    state: dict[str, GlooComm] = {}

    def connect(args: argparse.Namespace) -> GlooComm:
        state["comm"] = GlooComm(args)
        return state["comm"]

    def close() -> None:
        if "comm" in state:
            state["comm"].dist.destroy_process_group()

    return run(argv, "gloo", connect, versions, close)


if __name__ == "__main__":
    sys.exit(main())
