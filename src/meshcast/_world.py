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
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _wait, config
from ._hostwatch import HostLiveness, HostWatch
from .errors import CommTimeout, RendezvousError
from .group import ProcessGroup
from .transport import cma
from .transport.arena import Arena
from .transport.segment import Segment
from .transport.shm import ShmTransport


def host_id() -> str:
    """Identifies this machine (and this boot of it): ranks with equal ids share memory.

    ``MESHCAST_HOST_ID`` overrides it (tests pose as several hosts on one machine; a
    container whose hostname and boot id say nothing useful can name its host).
    """
    forced = config.get("MESHCAST_HOST_ID")
    if forced:
        return forced if "/" in forced else f"{forced}/"
    return f"{socket.gethostname()}/{_boot_id()}"


def _boot_id() -> str:
    """This boot of this machine (shared by containers and namespaces running on it)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def wait_for_ranks(store: Any, keys: Mapping[int, str], timeout: float, what: str,
                   liveness: _wait.PeerCheck | None) -> None:
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

    _wait.wait_until(ready, deadline=time.monotonic() + timeout, describe=lambda: what,
                     pending=pending, liveness=liveness, block=block)


def rank_barrier(store: Any, key: str, me: int, ranks: Sequence[int], timeout: float,
                 what: str, liveness: _wait.PeerCheck | None) -> None:
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
    liveness: _wait.Liveness
    transport: ShmTransport
    node_segment: Segment
    host_of: list[str] = field(default_factory=list)  # host id of every global rank
    internode: Any = None  # the inter-host engine (transport.interhost.Engine), if any
    hostwatch: HostWatch | None = None  # heartbeats between hosts, if the job spans several
    default_group: Any = None  # ProcessGroup, or HostSpanningGroup across hosts
    groups: list[Any] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    next_group_id: int = 1
    tracer: Any = None  # meshcast.trace.recorder.Tracer when MESHCAST_TRACE is set

    def make_group(self, group_id: int, ranks: Sequence[int], name: str,
                   store: Any = None, timeout: float | None = None) -> Any:
        """Collective over ``ranks`` (every member calls it): map the arena, build the group.

        Members on one host get a :class:`ProcessGroup` on shared memory; members
        on several hosts a :class:`~meshcast.spanning.HostSpanningGroup` (a
        ProcessGroup of this host's members plus inter-host communicators).

        Args:
            group_id: the same number on every member (keys and wire ids use it).
            ranks: global ranks of the members, in group-rank order.
            name: for messages.
            store: where members meet (default: the world's store); the torch
                backend passes the per-group store torch gives it.
            timeout: seconds the group's calls (and its creation) may wait
                (default: the world's).
        """
        store = self.store if store is None else store
        timeout = self.timeout if timeout is None else timeout
        ranks = list(ranks)
        if len({self.host_of[r] for r in ranks}) == 1:
            group = self._shm_group(group_id, ranks, name, store, f"meshcast/group/{group_id}",
                                    None, timeout)
        else:
            group = self._spanning_group(group_id, ranks, name, store, timeout)
        self.groups.append(group)
        return group

    def _spanning_group(self, group_id: int, ranks: list[int], name: str, store: Any,
                        timeout: float) -> Any:
        from .algorithms.hierarchical import Layout
        from .spanning import HostSpanningGroup

        hosts: dict[str, list[int]] = {}
        for g, r in enumerate(ranks):
            hosts.setdefault(self.host_of[r], []).append(g)
        layout = Layout(tuple(tuple(h) for h in hosts.values()), ranks.index(self.rank))
        members = [ranks[g] for g in layout.hosts[layout.host]]
        # The host's members form a group of their own: its id must be unique among this
        # host's groups only (bit 31 is above every other id) and its keys per host.
        # Its waits also watch the group's other hosts: a rank waiting there on its
        # leader, who waits on a lost host, must not wait out the whole timeout.
        watched = (HostLiveness(self.liveness, self.hostwatch, ranks)
                   if self.hostwatch is not None else None)
        local = self._shm_group((1 << 31) | group_id, members,
                                f"{name} on {_hostname(self.host_of[self.rank])}", store,
                                f"meshcast/group/{group_id}/host/{layout.host}", watched,
                                timeout)
        flat = self._comm(ranks, f"{group_id}/flat")
        rail_members = [ranks[g] for g in layout.rail(layout.local)]
        rail = (self._comm(rail_members, f"{group_id}/rail{layout.local}")
                if len(rail_members) > 1 else None)
        group = HostSpanningGroup(
            group_id=group_id, name=name, global_ranks=ranks, rank=layout.me, layout=layout,
            local=local, flat=flat, rail=rail, timeout=timeout,
            engine_name=self.internode.describe(),
            hostnames=[_hostname(self.host_of[ranks[h[0]]]) for h in layout.hosts])
        if self.tracer is not None:
            self.tracer.attach(group)
        return group

    def _comm(self, ranks: list[int], key: str) -> Any:
        """An inter-host communicator whose waits check the hosts' heartbeats."""
        assert self.internode is not None
        comm = self.internode.comm(ranks, self.rank, key)
        comm.watch = self.hostwatch
        return comm

    def _shm_group(self, group_id: int, ranks: list[int], name: str, store: Any,
                   key: str, liveness: _wait.Liveness | None, timeout: float) -> ProcessGroup:
        liveness = self.liveness if liveness is None else liveness
        n = len(ranks)
        me = ranks.index(self.rank)
        slot = config.get("MESHCAST_SLOT_BYTES")
        if n == 1:
            segment = Segment.create(f"g{group_id}-r{self.rank}", Arena.size(1, 0))
            segment.seal()
            slot = 0
        elif me == 0:
            segment = Segment.create(f"g{group_id}", Arena.size(n, slot))
            store.set(f"{key}/arena", segment.locator)
        else:
            wait_for_ranks(store, {ranks[0]: f"{key}/arena"}, timeout,
                           f"new_group {name}: waiting for the arena of rank {ranks[0]}",
                           self.liveness)
            segment = Segment.attach(store.get(f"{key}/arena").decode())
        if n > 1:
            try:
                rank_barrier(store, f"{key}/attached", self.rank, ranks, timeout,
                             f"new_group {name}: attaching the arena", self.liveness)
            finally:
                if me == 0:
                    segment.seal()
        self.segments.append(segment)
        arena = Arena(segment, me, n, slot, ranks, liveness, name, timeout)
        group = ProcessGroup(group_id=group_id, name=name, global_ranks=ranks, rank=me,
                             transport=self.transport, arena=arena, timeout=timeout,
                             liveness=liveness, store=store)
        if self.tracer is not None:
            self.tracer.attach(group)
        return group

    def exit_barrier(self) -> None:
        """Keep a rank-hosted store alive until every other rank has left (or died).

        In the tutorial style (``MASTER_ADDR`` set by hand, or the MPI bulletin
        file) rank 0's process hosts the store; if it left first, a slower rank
        still talking to the store would fail (pytorch#67204). Ranks that exit
        without ``destroy_process_group`` are waited for until they die.
        """
        if self.hostwatch is not None and self.hostwatch.cut_off:
            return  # the store does not answer this host: every request would block
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
                if _wait.pid_alive(self.liveness.pids.get(r, -1)):
                    continue
            except Exception:  # noqa: BLE001 - a broken store cannot be waited on
                return
            pending.pop(0)

    def close(self) -> None:
        if self.tracer is not None:
            self.tracer.flush()
        if self.hostwatch is not None:
            self.hostwatch.close(left=True)  # leaving on purpose: not a lost host
        for group in self.groups:
            group.shutdown()
        self.transport.close()
        if self.internode is not None:
            self.internode.close()
        for segment in self.segments:
            segment.close()
        self.node_segment.close()
        closer = getattr(self.store, "close", None)
        if closer is not None:
            try:
                closer()
            except Exception:  # noqa: BLE001 - teardown must not mask the real outcome
                pass


def bring_up(store: Any, rank: int, size: int, timeout: float, backend: str,
             internode: str | None = None) -> World:
    """Meet every rank through ``store``, set up the shared-memory engine of this host and,
    when the ranks run on several hosts, the inter-host engine (``internode``: see
    :func:`meshcast.transport.interhost.choose`)."""
    if config.get("MESHCAST_CMA_BYTES") > 0:
        cma.allow_peers()  # (before the probe: a peer reads us right after the meeting)
    probe = np.frombuffer(os.urandom(16), np.uint8).copy()  # read by a peer to test CMA
    me = {"host": host_id(), "machine": _boot_id(), "pid": os.getpid(),
          "cores": _wait.usable_cores(), "probe": [probe.ctypes.data, probe.tobytes().hex()]}
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
    host_of = [p["host"] for p in peers]
    hosts = list(dict.fromkeys(host_of))  # in order of their first rank
    engine_name = None
    if len(hosts) > 1:
        from .rendezvous.env import launch_env
        from .transport import interhost

        engine_name = interhost.choose(internode, launch_env().launcher)
    h = hosts.index(host_of[rank])
    # Shared memory only among the ranks of this host; every key below is per host.
    local = [r for r in range(size) if host_of[r] == host_of[rank]]
    pids = {r: peers[r]["pid"] for r in local}
    liveness = _wait.Liveness(pids)
    # Cores are the machine's, not the host's: emulated hosts (and containers) on one
    # machine share them, and a spinning waiter would hold a core its peer needs.
    # The fewest cores any of them may use, so every rank of the machine decides alike
    # (the fast paths' table reads it: _select.HostCaps.crowded).
    mates = [p for p in peers if p.get("machine") == me["machine"]]
    _wait.spec().share_cores(len(mates), min(p.get("cores", me["cores"]) for p in mates))
    # Room for a message's header on top, so a message of MESHCAST_RING_BYTES sits in
    # the ring whole (1 MiB sendrecv, 2 ranks, cold buffers: 160-190 us through the
    # ring, 240-350 single-copy).
    ring = config.get("MESHCAST_RING_BYTES") + ShmTransport.MESSAGE_HEADER_ROOM
    node_key = "meshcast/node" if len(hosts) == 1 else f"meshcast/node/{h}"
    if rank == local[0]:
        segment = Segment.create("node", ShmTransport.segment_size(len(local), ring))
        store.set(node_key, segment.locator)
    else:
        wait_for_ranks(store, {local[0]: node_key}, timeout,
                       f"init_process_group: waiting for rank {local[0]}'s shared memory",
                       liveness)
        segment = Segment.attach(store.get(node_key).decode())
    neighbour = local[(local.index(rank) + 1) % len(local)]
    cma_ok = len(local) > 1 and cma.probe(peers[neighbour]["pid"],
                                          *_probe_args(peers[neighbour]))
    store.set(f"meshcast/cma/{rank}", b"1" if cma_ok else b"0")
    try:
        rank_barrier(store, f"{node_key}/attached", rank, local, timeout,
                     "init_process_group: attaching shared memory", liveness)
    finally:
        if rank == local[0]:
            segment.seal()
    transport = ShmTransport(segment, local, rank, ring, liveness,
                             cma_min_bytes=_agree_on_cma(store, local))
    del probe  # every rank has probed (the node barrier above came after the probes)
    world = World(rank=rank, size=size, store=store, timeout=timeout, backend=backend,
                  liveness=liveness, transport=transport, node_segment=segment,
                  host_of=host_of)
    trace_dir = config.get("MESHCAST_TRACE")
    if trace_dir:
        from .trace.recorder import process_tracer

        world.tracer = process_tracer(trace_dir, rank, size, _hostname(host_of[rank]))
    if len(hosts) > 1:
        world.hostwatch = HostWatch(store, rank, host_of)
        world.hostwatch.start()
    try:
        if engine_name is not None:
            from .transport import interhost

            world.internode = interhost.open_engine(engine_name, store=store, rank=rank,
                                                    size=size, timeout=timeout,
                                                    watch=world.hostwatch)
        world.default_group = world.make_group(0, list(range(size)), "WORLD")
    except BaseException:
        if world.hostwatch is not None:
            world.hostwatch.close()  # failing, not leaving: the other hosts must not wait on us
        world.close()
        raise
    if world.internode is not None and rank == 0:
        # Which ranks each host holds: a launcher's failure summary may name only a host
        # and a pid (Hydra's does), and a lost host's ranks are named by host too.
        where = "; ".join(
            f"{_hostname(h)}: ranks {_spans([r for r in range(size) if host_of[r] == h])}"
            for h in hosts)
        print(f"meshcast: {size} ranks on {len(hosts)} hosts ({where}); shared memory inside "
              f"each host, {world.internode.describe()} between hosts",
              file=sys.stderr, flush=True)
    return world


def _spans(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _hostname(host: str) -> str:
    """The host name part of a :func:`host_id`."""
    return host.rsplit("/", 1)[0]


def _probe_args(peer: dict) -> tuple[int, bytes]:
    address, hexed = peer["probe"]
    return int(address), bytes.fromhex(hexed)


def _agree_on_cma(store: Any, local: Sequence[int]) -> int:
    """The p2p single-copy threshold: MESHCAST_CMA_BYTES, or the ring's size where ranks
    outnumber cores; only if every rank of this host could read its neighbour's memory
    (else 0: off)."""
    threshold = config.get("MESHCAST_CMA_BYTES")
    if len(local) == 1 or threshold <= 0:
        return 0
    votes = [store.get(f"meshcast/cma/{r}") for r in local]
    if not all(v == b"1" for v in votes):
        return 0
    if _wait.spec().oversubscribed:
        # Cores are scarce: a message the size of the ring is copied once (by its
        # receiver) rather than twice through the ring, which also needs both ranks on
        # a core at once (4 ranks on 2 cores, 1 MiB sendrecv: 550-1075 us single-copy,
        # 1070-1740 through the ring; 2 ranks on 2 cores: 160-190 through the ring,
        # 240-350 single-copy).
        return min(threshold, config.get("MESHCAST_RING_BYTES"))
    return threshold


current: World | None = None
# The tiny-call lane of current's default group (None without one): the front door
# reads it for group=None instead of calling _api._lane, which cost 65 ns of a 1.7 us
# call. Only set_current writes either.
default_lane: Any = None


def set_current(world: World | None) -> None:
    """Make ``world`` this process's world (None: none), and its default group's lane
    the front door's."""
    global current, default_lane
    current = world
    default_lane = getattr(None if world is None else world.default_group, "lane", None)
