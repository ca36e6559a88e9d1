"""Gloo (through torch.distributed) as meshcast's inter-host engine.

Each communicator is a ``ProcessGroupGloo`` among its members, which meet
through meshcast's own authenticated store (keys under
``meshcast/gloo/<key>/``), so no second, unauthenticated store is opened.
Gloo then connects every pair of members over TCP.

The interface Gloo binds to: ``MESHCAST_IFNAME`` (or Gloo's own
``GLOO_SOCKET_IFNAME``) when set, else the address this host's name
resolves to (torch's default), which on a machine whose name resolves to
127.0.0.1 is loopback: set the variable there.
"""

from __future__ import annotations

import datetime
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ops import ReduceOp
from ..rendezvous.torch_store import for_torch
from .interhost import COLL_TAG, Engine, HostComm, Request


def _torch() -> Any:
    import torch

    return torch


def _tensor(a: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only inputs: Gloo only reads them
        return _torch().from_numpy(a)


class _GlooRequest(Request):
    __slots__ = ("work", "keep", "after", "block")

    def __init__(self, work: Any, *keep: Any, after: Any = None) -> None:
        self.work, self.keep, self.after = work, keep, after
        # Waits block in Gloo's own wait (GIL released, no polling): its send/recv
        # complete only there (is_completed() stays False), and polling its collectives
        # from Python costs an oversubscribed host the core Gloo's threads need.
        self.block = self._block

    def _block(self, seconds: float) -> None:
        self.work.wait(datetime.timedelta(seconds=seconds))
        if self.after is not None:
            self.after()
            self.after = None

    def test(self) -> bool:
        if not self.work.is_completed():
            return False
        self.work.wait()  # raises the engine's error, if it failed
        if self.after is not None:
            self.after()
            self.after = None
        return True

    def source(self) -> int | None:
        try:
            return int(self.work._source_rank())
        except Exception:  # noqa: BLE001 - only receives from any rank have one
            return None


_NATIVE = {"SUM", "PRODUCT", "MIN", "MAX"}


class GlooComm(HostComm):
    engine = "gloo"

    def __init__(self, pg: Any, ranks: Sequence[int], rank: int, name: str) -> None:
        super().__init__(ranks, rank, name)
        self.pg = pg

    def _iallgatherv(self, out: np.ndarray, mine: np.ndarray, counts: list[int]) -> Request:
        # Gloo's allgather wants equal pieces: pad to the largest, then unpack.
        most = max(counts)
        if all(c == most for c in counts):
            return _GlooRequest(self.pg._allgather_base(_tensor(out), _tensor(mine)), out, mine)
        padded_in = np.zeros(most, np.uint8)
        padded_in[:mine.size] = mine
        padded_out = np.empty(most * self.size, np.uint8)

        def unpack() -> None:
            at = 0
            for i, c in enumerate(counts):
                out[at:at + c] = padded_out[i * most:i * most + c]
                at += c

        return _GlooRequest(self.pg._allgather_base(_tensor(padded_out), _tensor(padded_in)),
                            padded_out, padded_in, after=unpack)

    def _ialltoallv(self, out: np.ndarray, recv: list[int], inp: np.ndarray,
                    send: list[int]) -> Request:
        return _GlooRequest(self.pg.alltoall_base(_tensor(out), _tensor(inp), recv, send),
                            out, inp)

    def _ibcast(self, buf: np.ndarray, root: int) -> Request:
        dist = _torch().distributed
        opts = dist.BroadcastOptions()
        opts.rootRank = root
        return _GlooRequest(self.pg.broadcast([_tensor(buf)], opts), buf)

    def _isend(self, buf: np.ndarray, peer: int, tag: int) -> Request:
        return _GlooRequest(self.pg.send([_tensor(buf)], peer, tag), buf)

    def _irecv(self, buf: np.ndarray, peer: int | None, tag: int) -> Request:
        if peer is None:
            return _GlooRequest(self.pg.recv_anysource([_tensor(buf)], tag), buf)
        return _GlooRequest(self.pg.recv([_tensor(buf)], peer, tag), buf)

    def _allreduce(self, w: np.ndarray, op: ReduceOp, deadline: float, what: str) -> bool:
        if w.dtype.kind not in "iuf" or (op.name not in _NATIVE and op is not ReduceOp.AVG):
            return False
        dist = _torch().distributed
        opts = dist.AllreduceOptions()
        opts.reduceOp = getattr(dist.ReduceOp, "SUM" if op is ReduceOp.AVG else op.name)
        self.run(lambda: _GlooRequest(self.pg.allreduce([_tensor(w)], opts), w), deadline, what)
        return True

    def user_tag(self, tag: int) -> int:
        return tag if tag != COLL_TAG else tag + 1

    def close(self) -> None:
        self.pg = None


class GlooEngine(Engine):
    name = "gloo"

    def __init__(self, store: Any, rank: int, timeout: float) -> None:
        torch = _torch()
        self.store = store
        self.timeout = datetime.timedelta(seconds=timeout)
        gloo = torch.distributed.ProcessGroupGloo
        ifname = os.environ.get("MESHCAST_IFNAME") or os.environ.get("GLOO_SOCKET_IFNAME")
        self.interface = ifname or "(the address of this host's name)"
        self.device = (gloo.create_device(interface=ifname) if ifname
                       else gloo.create_default_device())
        self.version = torch.__version__

    def comm(self, ranks: Sequence[int], me: int, key: str) -> HostComm:
        gloo = _torch().distributed.ProcessGroupGloo
        ranks = list(ranks)
        opts = gloo._Options()
        opts._devices = [self.device]
        opts._timeout = self.timeout
        pg = gloo(for_torch(self.store, f"meshcast/gloo/{key}/"), ranks.index(me), len(ranks),
                  opts)
        return GlooComm(pg, ranks, ranks.index(me), key)

    def describe(self) -> str:
        return f"gloo (torch {self.version}, interface {self.interface})"
