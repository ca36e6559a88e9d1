"""Process-global state in one object: the world's store, transport, default group and subgroups.

Bring-up (``bring_up``) is Gloo's full-mesh idea on one host: every rank
publishes who it is (host id, pid) in the store, waits for all the others,
then the host's first rank creates the node segment for point-to-point and
group rank 0 of each group creates the group's arena; the others attach, and
a store barrier confirms every rank mapped them before the creator drops the
descriptor (after which nothing is left to leak).

Once the ranks' pids are known, every store wait goes through
:func:`wait_for_ranks`, i.e. the one waiting primitive: each key is set by a
known rank, so a rank that died before setting its key is named within
``MESHCAST_LIVENESS_S`` (the store alone would report a timeout, naming nobody,
after the full timeout).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _sync, config
from .errors import CommTimeout, RendezvousError, TransportError
from .group import ProcessGroup
from .transport import cma
from .transport.arena import Arena
from .transport.segment import Segment
from .transport.shm import ShmTransport


def host_id() -> str:
    """Identifies this machine (and this boot of it): ranks with equal ids share memory."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


def wait_for_ranks(store: Any, keys: Mapping[int, str], timeout: float, what: str,
                   liveness: _sync.PeerCheck | None) -> None:
    """Return once every key of ``keys`` exists; each is set by the rank it is filed under.

    Args:
        store: the store the keys live in.
        keys: global rank -> the key that rank sets when it gets there.
        timeout: seconds before giving up.
        what: the operation, for error messages.
        liveness: checks the processes of the ranks not heard from yet.

    Raises:
        PeerGoneError: a rank whose key is still missing exited (noticed within
            ``MESHCAST_LIVENESS_S``; the store alone would wait out ``timeout``).
        CommTimeout: ``timeout`` passed; names the ranks not heard from.
    """
    wanted = list(keys.values())
    missing = dict(keys)  # ranks not yet seen to arrive; a key, once set, stays
    arrived = store.check(wanted)

    def ready() -> bool:
        return arrived

    def block(seconds: float) -> None:
        # The store's own blocking wait, in slices short enough for the liveness checks.
        nonlocal arrived
        try:
            store.wait(wanted, max(seconds, 0.001))
        except CommTimeout:
            return
        arrived = True

    def pending() -> list[int]:
        # Only ranks that have not arrived are suspects: one that arrived and then
        # exited (e.g. finished its job) must not fail the others' wait.
        for rank, key in list(missing.items()):
            if store.check([key]):
                del missing[rank]
        return list(missing)

    _sync.wait_until(ready, deadline=time.monotonic() + timeout, describe=lambda: what,
                     pending=pending, liveness=liveness, block=block)


def rank_barrier(store: Any, key: str, me: int, ranks: Sequence[int], timeout: float,
                 what: str, liveness: _sync.PeerCheck | None) -> None:
    """Return once every global rank of ``ranks`` (``me`` among them) reached ``key``.

    Raises:
        PeerGoneError: a member that has not arrived exited.
        CommTimeout: ``timeout`` passed; names the members not heard from.
    """
    store.set(f"{key}/{me}", b"1")
    wait_for_ranks(store, {r: f"{key}/{r}" for r in ranks}, timeout, what, liveness)


@dataclass
class World:
    """Everything ``init_process_group`` sets up for this process."""

    rank: int
    size: int
    store: Any
    timeout: float
    backend: str
    liveness: _sync.Liveness
    transport: ShmTransport
    node_segment: Segment
    default_group: ProcessGroup | None = None
    groups: list[ProcessGroup] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    next_group_id: int = 1

    def make_group(self, group_id: int, ranks: Sequence[int], name: str,
                   store: Any = None) -> ProcessGroup:
        """Collective over ``ranks`` (every member calls it): map the arena, build the group.

        Args:
            group_id: the same number on every member (keys and wire ids use it).
            ranks: global ranks of the members, in group-rank order.
            name: for messages.
            store: where members meet (default: the world's store); the torch
                backend passes the per-group store torch gives it.
        """
        n = len(ranks)
        me = ranks.index(self.rank)
        slot = config.get("MESHCAST_SLOT_BYTES")
        key = f"meshcast/group/{group_id}"
        store = self.store if store is None else store
        if n == 1:
            segment = Segment.create(f"g{group_id}-r{self.rank}", Arena.size(1, 0))
            segment.seal()
            slot = 0
        elif me == 0:
            segment = Segment.create(f"g{group_id}", Arena.size(n, slot))
            store.set(f"{key}/arena", segment.locator)
        else:
            wait_for_ranks(store, {ranks[0]: f"{key}/arena"}, self.timeout,
                           f"new_group {name}: waiting for the arena of rank {ranks[0]}",
                           self.liveness)
            segment = Segment.attach(store.get(f"{key}/arena").decode())
        if n > 1:
            try:
                rank_barrier(store, f"{key}/attached", self.rank, ranks, self.timeout,
                             f"new_group {name}: attaching the arena", self.liveness)
            finally:
                if me == 0:
                    segment.seal()
        self.segments.append(segment)
        arena = Arena(segment, me, n, slot, ranks, self.liveness, name)
        group = ProcessGroup(group_id=group_id, name=name, global_ranks=ranks, rank=me,
                             transport=self.transport, arena=arena, timeout=self.timeout,
                             liveness=self.liveness, store=store)
        self.groups.append(group)
        return group

    def exit_barrier(self) -> None:
        """Keep a rank-hosted store alive until every other rank has left (or died).

        In the tutorial style (``MASTER_ADDR`` set by hand, or the MPI bulletin
        file) rank 0's process hosts the store; if it left first, a slower rank
        still talking to the store would fail (pytorch#67204). Ranks that exit
        without ``destroy_process_group`` are waited for until they die.
        """
        try:
            self.store.set(f"meshcast/exit/{self.rank}", b"1")
        except Exception:  # noqa: BLE001 - the store may already be gone
            return
        if getattr(self.store, "server", None) is None:
            return
        deadline = time.monotonic() + self.timeout
        pending = [r for r in range(self.size) if r != self.rank]
        while pending and time.monotonic() < deadline:
            r = pending[0]
            try:
                self.store.wait([f"meshcast/exit/{r}"], 0.1)
            except CommTimeout:
                if _sync.pid_alive(self.liveness.pids.get(r, -1)):
                    continue
            except Exception:  # noqa: BLE001 - a broken store cannot be waited on
                return
            pending.pop(0)

    def close(self) -> None:
        for group in self.groups:
            group.shutdown()
        self.transport.close()
        for segment in self.segments:
            segment.close()
        self.node_segment.close()
        closer = getattr(self.store, "close", None)
        if closer is not None:
            try:
                closer()
            except Exception:  # noqa: BLE001 - teardown must not mask the real outcome
                pass


def bring_up(store: Any, rank: int, size: int, timeout: float, backend: str) -> World:
    """Meet every rank through ``store`` and set up the shared-memory engine."""
    probe = np.frombuffer(os.urandom(16), np.uint8).copy()  # read by a peer to test CMA
    me = {"host": host_id(), "pid": os.getpid(),
          "probe": [probe.ctypes.data, probe.tobytes().hex()]}
    store.set(f"meshcast/peer/{rank}", json.dumps(me))
    keys = [f"meshcast/peer/{r}" for r in range(size)]
    try:
        store.wait(keys, timeout)
    except CommTimeout:
        missing = [r for r, k in enumerate(keys) if not store.check([k])]
        raise RendezvousError(
            f"init_process_group: rank(s) {missing} of {size} did not arrive within "
            f"{timeout:.0f}s (rank {rank} waited)") from None
    peers = [json.loads(store.get(k)) for k in keys]
    hosts = sorted({p["host"] for p in peers})
    if len(hosts) > 1:
        raise TransportError(
            f"init_process_group: the ranks run on {len(hosts)} hosts; this version of meshcast "
            f"has only the shared-memory engine (one host). The TCP engine is not available yet.")
    pids = {r: p["pid"] for r, p in enumerate(peers)}
    liveness = _sync.Liveness(pids)
    _sync.spec().share_cores(len(pids))
    ranks = list(range(size))
    ring = config.get("MESHCAST_RING_BYTES")
    if rank == 0:
        segment = Segment.create("node", ShmTransport.segment_size(size, ring))
        store.set("meshcast/node", segment.locator)
    else:
        wait_for_ranks(store, {0: "meshcast/node"}, timeout,
                       "init_process_group: waiting for rank 0's shared memory", liveness)
        segment = Segment.attach(store.get("meshcast/node").decode())
    cma_ok = size > 1 and cma.probe(peers[(rank + 1) % size]["pid"],
                                    *_probe_args(peers[(rank + 1) % size]))
    store.set(f"meshcast/cma/{rank}", b"1" if cma_ok else b"0")
    try:
        rank_barrier(store, "meshcast/node/attached", rank, ranks, timeout,
                     "init_process_group: attaching shared memory", liveness)
    finally:
        if rank == 0:
            segment.seal()
    transport = ShmTransport(segment, ranks, rank, ring, liveness,
                             cma_min_bytes=_agree_on_cma(store, rank, size, peers, timeout))
    del probe  # every rank has probed (the node barrier above came after the probes)
    world = World(rank=rank, size=size, store=store, timeout=timeout, backend=backend,
                  liveness=liveness, transport=transport, node_segment=segment)
    world.default_group = world.make_group(0, ranks, "WORLD")
    return world


def _probe_args(peer: dict) -> tuple[int, bytes]:
    address, hexed = peer["probe"]
    return int(address), bytes.fromhex(hexed)


def _agree_on_cma(store: Any, rank: int, size: int, peers: list[dict], timeout: float) -> int:
    """Single-copy p2p only if every rank could read its neighbour's memory (else 0: off)."""
    threshold = config.get("MESHCAST_CMA_BYTES")
    if size == 1 or threshold <= 0:
        return 0
    votes = [store.get(f"meshcast/cma/{r}") for r in range(size)]
    return threshold if all(v == b"1" for v in votes) else 0


current: World | None = None
