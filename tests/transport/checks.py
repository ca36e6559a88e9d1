"""Conformance checks of the shared-memory engine, as :mod:`meshcast.testing.store_checks`
is for stores: the point-to-point rings (``transport/shm.py``) and the group arena
(``transport/arena.py``), each driven directly, not through a ProcessGroup.

Every check is a rank body: it runs on every rank of a world that
:func:`meshcast.testing.world.spawn_world` started, builds its own transport or
arena on a fresh shared segment (so its sizes are the check's, not the
environment's, and nothing of the world's own groups is disturbed), and raises on
the first wrong result. A check may return a value for the test to compare
across ranks. :data:`CHECKS` lists them with the world each needs::

    @pytest.mark.parametrize("check", checks.SHM_CHECKS, ids=checks.name)
    def test_conformance(check):
        checks.run_world(check)

The world is used only to bring the processes up (its store, its pid table, its
collectives to share a segment's locator and to line ranks up between steps).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import meshcast as dist
from meshcast._fingerprint import Fingerprint
from meshcast.errors import CommTimeout, GroupAbortedError, MismatchError, PeerGoneError
from meshcast.testing.world import spawn_world
from meshcast.transport import compiled_helper
from meshcast.transport.arena import Arena
from meshcast.transport.segment import Segment
from meshcast.transport.shm import KIND_COLL, KIND_P2P, Handle, ShmTransport

#: Ring size of the transports the checks make: small, so that a few KiB already
#: wrap the ring and a message larger than it streams in pieces.
RING = 4096
#: The message header in front of every payload in a ring (shm.py's _HEADER).
HEADER = 32
GROUP = 7  # the group id the checks' messages carry (the world's are 0, 1, ...)


@dataclass(frozen=True)
class Check:
    """One conformance check and the world it needs."""

    fn: Callable[..., Any]
    size: int = 2
    exits: tuple[int, ...] = ()  # ranks that end their process on purpose
    kwargs: dict[str, Any] = field(default_factory=dict)


#: The point-to-point checks (shm.py), the arena checks (arena.py), and both.
SHM_CHECKS: list[Check] = []
ARENA_CHECKS: list[Check] = []
CHECKS: list[Check] = []


def check(size: int = 2, exits: tuple[int, ...] = ()) -> Callable[[Callable], Callable]:
    """Register a check run on ``size`` ranks, of which ``exits`` end their process."""
    def deco(fn: Callable) -> Callable:
        c = Check(fn, size, exits)
        (ARENA_CHECKS if _ARENA else SHM_CHECKS).append(c)
        CHECKS.append(c)
        return fn
    return deco


def name(c: Check) -> str:
    return c.fn.__name__.removeprefix("check_")


def run_world(c: Check) -> list[Any]:
    """Run check ``c`` on its world; every rank but those it ends must report success.
    Returns each rank's value (None for the ended ones)."""
    out = spawn_world(_body, c.size, timeout=60, op_timeout=20, expect_failure=True,
                      check=c.fn)
    failed = {r: value for r, (status, value) in enumerate(out)
              if status != "ok" and r not in c.exits}
    assert not failed, "\n".join(f"rank {r}: {text}" for r, text in failed.items())
    return [value if r not in c.exits else None for r, (_, value) in enumerate(out)]


def _body(check: Callable[[], Any]) -> Any:
    return check()


# ------------------------------------------------------------------- rigs


def _shared_segment(size: int, tag: str) -> Segment:
    """A fresh zeroed segment mapped by every rank of the world (rank 0 creates it)."""
    rank = dist.get_rank()
    box: list[Any] = [None]
    segment = None
    if rank == 0:
        segment = Segment.create(f"check-{tag}", size)
        box = [segment.locator]
    dist.broadcast_object_list(box, src=0)
    if rank != 0:
        segment = Segment.attach(box[0])
    dist.barrier()  # everyone attached: the creator may drop the name
    if rank == 0:
        segment.seal()
    assert segment is not None
    return segment


def _liveness() -> Any:
    # the world's pid table: the checks' peers are the world's ranks
    return dist.group.WORLD.transport.liveness


@contextmanager
def shm(ring_bytes: int = RING, cma_min_bytes: int = 0, *, close: bool = True
        ) -> Iterator[ShmTransport]:
    """A ShmTransport among every rank of the world, on its own rings."""
    n, me = dist.get_world_size(), dist.get_rank()
    segment = _shared_segment(ShmTransport.segment_size(n, ring_bytes), "rings")
    t = ShmTransport(segment, list(range(n)), me, ring_bytes, _liveness(), cma_min_bytes)
    try:
        yield t
    finally:
        if close:
            t.close()


def arena(slot_bytes: int = 64 << 10) -> Arena:
    """An Arena of every rank of the world, on its own segment (seq starts at 0)."""
    n, me = dist.get_world_size(), dist.get_rank()
    segment = _shared_segment(Arena.size(n, slot_bytes), "arena")
    return Arena(segment, me, n, slot_bytes, list(range(n)), _liveness(), "check-arena")


def _deadline(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


def _value(src: int, i: int, nbytes: int) -> np.ndarray:
    """Message ``i`` from rank ``src``: bytes distinct per sender, message and position."""
    return ((np.arange(nbytes, dtype=np.int64) * 7 + src * 131 + i * 31) % 251).astype(np.uint8)


def _send(t: ShmTransport, peer: int, tag: int, data: np.ndarray, kind: int = KIND_P2P,
          group: int = GROUP) -> Handle:
    return t.isend(peer, group, kind, tag, data, f"send to {peer} tag {tag}")


def _recv(t: ShmTransport, peer: int | None, tag: int, nbytes: int, kind: int = KIND_P2P,
          group: int = GROUP) -> tuple[Handle, np.ndarray]:
    out = np.zeros(nbytes, np.uint8)
    return t.irecv(peer, group, kind, tag, out, f"recv from {peer} tag {tag}"), out


def _raises(exc_type: type[BaseException], fn: Callable[[], object], what: str) -> Any:
    try:
        fn()
    except exc_type as exc:
        return exc
    raise AssertionError(f"{what}: expected {exc_type.__name__}, nothing was raised")


# ----------------------------------------------------- point to point (shm.py)

_ARENA = False


@check()
def check_order_per_peer_and_tag() -> None:
    """Messages from one peer with one tag arrive in the order sent, whatever the
    sizes (some fit the ring whole, some stream through it) and however the
    receiver interleaves its receives with another tag."""
    sizes = [1, 0, 100, 3 * RING + 5, 17, RING - HEADER, 2 * RING]
    with shm() as t:
        if dist.get_rank() == 1:
            handles = []
            for i, size in enumerate(sizes):
                handles.append(_send(t, 0, 5, _value(1, i, size)))
                handles.append(_send(t, 0, 6, _value(1, 100 + i, size)))
            for h in handles:
                h.wait(_deadline())
        else:
            # every tag-6 message first (the tag-5 ones wait, unexpected, meanwhile),
            # then tag 5 in posting order
            for tag, base in ((6, 100), (5, 0)):
                for i, size in enumerate(sizes):
                    h, out = _recv(t, 1, tag, size)
                    h.wait(_deadline())
                    np.testing.assert_array_equal(out, _value(1, base + i, size),
                                                  f"tag {tag} message {i}")
        dist.barrier()


@check()
def check_tags_kinds_and_groups_are_kept_apart() -> None:
    """A receive matches (group, kind, tag) exactly: messages that differ in any one
    of them never land in it, even when they arrive first."""
    keys = [(GROUP, KIND_P2P, 3), (GROUP, KIND_P2P, 4), (GROUP, KIND_COLL, 3),
            (GROUP + 1, KIND_P2P, 3)]
    with shm() as t:
        if dist.get_rank() == 0:
            hs = [_send(t, 1, tag, _value(0, i, 64), kind, group)
                  for i, (group, kind, tag) in enumerate(keys)]
            for h in hs:
                h.wait(_deadline())
        else:
            time.sleep(0.05)  # let every message arrive before any receive is posted
            for i, (group, kind, tag) in reversed(list(enumerate(keys))):
                h, out = _recv(t, 0, tag, 64, kind, group)
                h.wait(_deadline())
                np.testing.assert_array_equal(out, _value(0, i, 64), f"key {keys[i]}")
        dist.barrier()


@check(size=3)
def check_receive_from_any_source_names_the_sender() -> None:
    """A receive from any rank takes a message that matches, says who sent it
    (``Handle.source``), and two of them get the two senders' messages: posted
    before the messages arrive, and posted after (claiming them as unexpected)."""
    with shm() as t:
        r = dist.get_rank()
        for i, posted_first in enumerate((True, False)):
            if r == 0:
                if posted_first:
                    recvs = [_recv(t, None, 9, 40) for _ in range(2)]
                    dist.barrier()  # the senders send only now
                else:
                    dist.barrier()
                    time.sleep(0.05)  # both messages arrive before the receives
                    recvs = [_recv(t, None, 9, 40) for _ in range(2)]
                for h, _ in recvs:
                    h.wait(_deadline())
                assert sorted(h.source for h, _ in recvs) == [1, 2], [h.source for h, _ in recvs]
                for h, out in recvs:
                    np.testing.assert_array_equal(out, _value(h.source, i, 40),
                                                  f"from {h.source}, posted first: {posted_first}")
            else:
                dist.barrier()
                _send(t, 0, 9, _value(r, i, 40)).wait(_deadline())
        dist.barrier()


@check()
def check_message_sizes_around_the_ring() -> None:
    """0 bytes, 1 byte, exactly a ring (header included), a ring of payload, several
    rings: each delivered whole, both ways at once (neither side waits for the
    other to post its receive first)."""
    sizes = [0, 1, RING - HEADER, RING - HEADER + 1, RING, 5 * RING + 3]
    with shm() as t:
        me, peer = dist.get_rank(), 1 - dist.get_rank()
        sends = [_send(t, peer, i, _value(me, i, s)) for i, s in enumerate(sizes)]
        for i, s in reversed(list(enumerate(sizes))):  # receives in the opposite order
            h, out = _recv(t, peer, i, s)
            h.wait(_deadline())
            np.testing.assert_array_equal(out, _value(peer, i, s), f"{s} bytes")
        for h in sends:
            h.wait(_deadline())
        dist.barrier()


@check()
def check_blocking_fast_path_around_the_ring() -> str:
    """send_now/recv_now (the blocking send and receive of a message that fits the ring,
    through transport/_rings.c when built, else in Python): arrays of several dtypes
    and sizes, so the ring wraps many times and headers and data straddle its end;
    a message that is not the one asked for, or one that does not fit, leaves
    everything to the general path. Every message arrives whole and in order, on
    both paths, and the fast path really carried most of them (each message is
    answered, so the ring always has room)."""
    report = []
    built = compiled_helper("_rings") is not None
    for mode in ("port", "compiled", "python") if built else ("python",):
        with shm() as t:
            if mode == "python":
                t._rings = None
            else:
                assert t._rings is not None, "the compiled ring helper is built but unused"
            fast = _fast_path_messages(t, mode == "port")
            assert fast > 500, f"only {fast} of 600 messages took the fast path ({mode})"
            report.append(f"{mode} {fast}")
            dist.barrier()
    return ", ".join(report)


def _fast_path_messages(t: ShmTransport, by_port: bool) -> int:
    """check_blocking_fast_path_around_the_ring's exchange on ``t``: how many messages
    this rank moved through send_now/recv_now, or with ``by_port`` through the
    transport's compiled port (one C call a message)."""
    me, peer = dist.get_rank(), 1 - dist.get_rank()
    fast = 0
    port = t.port(peer, GROUP, KIND_P2P) if by_port else None
    assert (port is not None) == by_port

    def send(tag: int, arr: np.ndarray) -> None:
        nonlocal fast
        if port.send(arr, tag) > 0 if port else t.send_now(peer, GROUP, KIND_P2P, tag, arr):
            fast += 1
        else:
            _send(t, peer, tag, arr.view(np.uint8)).wait(_deadline())

    def recv(tag: int, out: np.ndarray) -> None:
        nonlocal fast
        if (port.recv(out, tag, 500_000_000) > 0 if port
                else t.recv_now(peer, GROUP, KIND_P2P, tag, out, 0.5)):
            fast += 1
        else:
            t.irecv(peer, GROUP, KIND_P2P, tag, out.view(np.uint8), "recv").wait(_deadline())

    ack = np.zeros(0, np.uint8)
    for i in range(300):  # each message answered by an empty one: the ring is free
        nbytes = (0, 1, 7, 100, 1000, RING - HEADER, 333)[i % 7]
        dtype = (np.uint8, np.float32, np.int64)[i % 3] if nbytes % 8 == 0 else np.uint8
        data = _value(0, i, nbytes).view(np.uint8)
        if me == 0:
            send(i % 5, data.view(dtype))
            recv(1000, ack)
        else:
            out = np.full(nbytes, 255, np.uint8).view(dtype)
            recv(i % 5, out)
            np.testing.assert_array_equal(out.view(np.uint8), data, f"message {i}")
            send(1000, ack)
    if me == 1:  # another tag first: the fast path must leave both to irecv
        dist.barrier()
        out = np.zeros(8, np.uint8)
        assert not t.recv_now(peer, GROUP, KIND_P2P, 99, out, 0.01)
        if port:
            assert port.recv(out, 99, 10_000_000) == -1
        h, first = _recv(t, peer, 98, 8)
        h.wait(_deadline())
        h, second = _recv(t, peer, 99, 8)
        h.wait(_deadline())
        assert (first == 98).all() and (second == 99).all(), (first, second)
    else:
        assert t.send_now(peer, GROUP, KIND_P2P, 98, np.full(8, 98, np.uint8))
        assert t.send_now(peer, GROUP, KIND_P2P, 99, np.full(8, 99, np.uint8))
        dist.barrier()
    # a message larger than the ring never takes the fast path
    assert not t.send_now(peer, GROUP, KIND_P2P, 0, np.zeros(RING, np.uint8))
    if port:  # nor through the port, nor a strided array or a read-only receive buffer
        assert port.send(np.zeros(RING, np.uint8), 0) == -1
        assert port.send(np.zeros(16, np.uint8)[::2], 0) == -1
        read_only = np.zeros(8, np.uint8)
        read_only.flags.writeable = False
        assert port.recv(read_only, 0, 0) == -1
    return fast


@check()
def check_a_blocking_send_waits_for_room_while_the_peer_copies_out() -> str | None:
    """send_now with a spin time waits, without the lock, for the room an earlier
    message still takes while the receiver copies it out, then writes the message
    whole; without one (isend's look) it gives up at once. Compiled helper only:
    the Python path always looks once."""
    if compiled_helper("_rings") is None:
        return "no compiled ring helper"
    me, peer = dist.get_rank(), 1 - dist.get_rank()
    nbytes = RING * 3 // 4
    with shm() as t:
        if me == 0:
            dist.barrier()
            assert t.send_now(peer, GROUP, KIND_P2P, 1, _value(0, 1, nbytes)), "first"
            # the first message still fills most of the ring: one look fails...
            assert not t.send_now(peer, GROUP, KIND_P2P, 2, _value(0, 2, nbytes)), "look"
            dist.barrier()
            # ...while a look that may wait succeeds once rank 1 takes the first
            start = time.monotonic()
            assert t.send_now(peer, GROUP, KIND_P2P, 2, _value(0, 2, nbytes), 2.0), "wait"
            waited = time.monotonic() - start
            assert waited > 0.05, f"the second message went in after {waited:.3f} s"
            dist.barrier()
        else:
            # Our progress thread would drain the first message aside (it may, at
            # any time): holding the transport's lock keeps it in the ring.
            with t._lock:
                dist.barrier()
                dist.barrier()
                time.sleep(0.1)  # rank 0 is waiting for room by now
            for i in (1, 2):
                out = np.zeros(nbytes, np.uint8)
                assert t.recv_now(peer, GROUP, KIND_P2P, i, out, 2.0)
                np.testing.assert_array_equal(out, _value(0, i, nbytes), f"message {i}")
            dist.barrier()
    return None


@check()
def check_single_copy_messages() -> str | None:
    """Messages of at least ``cma_min_bytes`` travel as an address the receiver copies
    from (process_vm_readv); the data arrives whole, the send completes once the
    receiver copied it, and smaller messages still go through the ring."""
    if dist.group.WORLD.transport.cma_min_bytes == 0:
        dist.barrier()
        return "skip: ranks may not read each other's memory on this machine"
    sizes = [64 << 10, (64 << 10) - 1, 3 << 20]
    with shm(cma_min_bytes=64 << 10) as t:
        if dist.get_rank() == 0:
            for i, s in enumerate(sizes):
                h = _send(t, 1, i, _value(0, i, s))
                h.wait(_deadline())
                assert h.done and h.error is None
        else:
            for i, s in enumerate(sizes):
                h, out = _recv(t, 0, i, s)
                h.wait(_deadline())
                np.testing.assert_array_equal(out, _value(0, i, s), f"{s} bytes")
        dist.barrier()
    return None


@check()
def check_compiled_batch_both_ways_and_its_late_fins() -> str | None:
    """The compiled batch_isend_irecv (``_rings.Batch``, straight from P2POps): both
    ranks send and receive at once, through the ring and single-copy, and every
    message arrives whole; each op's state, or with every op done and its finished
    Work kept, the Works in op order. A list it cannot take as it is (an array that
    is not C-contiguous, an output not writable, another group) sends nothing; one
    whose first send cannot go now says so. A single-copy send whose FIN has not come
    when it returns completes once registered (adopt_address_send), also when a
    progress pass took that FIN first."""
    import itertools

    if compiled_helper("_rings") is None:
        return "no compiled ring helper"
    if dist.group.WORLD.transport.cma_min_bytes == 0:
        dist.barrier()
        return "skip: ranks may not read each other's memory on this machine"
    me, peer = dist.get_rank(), 1 - dist.get_rank()
    spin = 500_000_000
    tags = (-(1 << 62), 1 << 62)
    send, recv = dist.isend, dist.irecv
    with shm(cma_min_bytes=RING - HEADER) as t:
        port = t.port(peer, GROUP, KIND_P2P)
        copy = t.port_copy_bytes
        dtypes = {np.dtype(np.uint8): True}
        kept = {("send", peer, 99): "sent", ("recv", peer, 99): "received"}
        batch = t.batch(dist.P2POp, {peer: port}, dtypes, kept, itertools.count(1), None,
                        True, tags, copy, spin)
        fast = 0
        for i, nbytes in enumerate((0, 8, 1000, copy - 1, copy, 100_000) * 8):
            data = _value(me, i, nbytes)
            out = np.full(nbytes, 255, np.uint8)
            ops = [dist.P2POp(send, data, peer, tag=i), dist.P2POp(recv, out, peer, tag=i)]
            if i % 2:
                ops.reverse()
            dist.barrier()
            states = batch(ops)
            assert type(states) is tuple and len(states) == 2, (nbytes, states)
            sent, received = states if i % 2 == 0 else states[::-1]
            assert sent == 1 or (sent < 0 and nbytes >= copy), (nbytes, states)
            if sent < 0:
                t.adopt_address_send(port, peer, data, -sent, "send").wait(_deadline())
            if received == 1:
                fast += 1
            else:  # (a progress pass may take the peer's message aside: the general path)
                assert received == 0, states
                h = t.irecv(peer, GROUP, KIND_P2P, i, out, "recv")
                h.wait(_deadline())
            np.testing.assert_array_equal(out, _value(peer, i, nbytes), f"{nbytes} bytes")
        assert fast > 40, f"only {fast} of 48 receives were taken in the call"
        # every op done, its Work kept: the Works, in op order
        out = np.zeros(4, np.uint8)
        dist.barrier()
        got = batch([dist.P2POp(recv, out, peer, tag=99),
                     dist.P2POp(send, np.full(4, me, np.uint8), peer, tag=99)])
        if got != ["received", "sent"]:  # (the peer's message came late: the general path)
            assert got[1] == 1 and got[0] == 0, got
            t.irecv(peer, GROUP, KIND_P2P, 99, out, "recv").wait(_deadline())
        assert (out == peer).all(), out
        dist.barrier()
        # not C-contiguous, an output not writable, another group's op: nothing sent
        data = np.zeros(64, np.uint8)
        read_only = np.zeros(32, np.uint8)
        read_only.setflags(write=False)
        ok = dist.P2POp(send, data[:32], peer, tag=1)
        for bad in (dist.P2POp(send, data[::2], peer, tag=1),
                    dist.P2POp(recv, read_only, peer, tag=1),
                    dist.P2POp(recv, data[:32], peer, tag=1, group=dist.group.WORLD),
                    dist.P2POp(recv, data[:32].view(np.int8), peer, tag=1)):
            assert batch([ok, bad]) is None and batch([bad, ok]) is None, bad
        # a first send that cannot go now (no room for it whole, not single-copy here)
        whole = t.batch(dist.P2POp, {peer: port}, dtypes, {}, itertools.count(1), None,
                        True, tags, 1 << 40, 0)
        assert whole([dist.P2POp(send, np.zeros(RING, np.uint8), peer, tag=1)]) is False
        dist.barrier()
        # a late FIN, registered before it comes, then one a progress pass took first
        lone = t.batch(dist.P2POp, {peer: port}, dtypes, {}, itertools.count(1), None,
                       True, tags, copy, 0)
        for early in (False, True):
            data = _value(me, 7, copy)
            if me == 0:
                (state,) = lone([dist.P2POp(send, data, peer, tag=7)])
                assert state < 0, state
                if not early:
                    h = t.adopt_address_send(port, peer, data, -state, "send")
                    assert not h.done
                dist.barrier()  # rank 1 copies, then answers with the FIN
                dist.barrier()
                if early:
                    with t._lock:
                        t._pass()  # the FIN goes aside: its send is not registered yet
                    assert -state in t._early_fins
                    h = t.adopt_address_send(port, peer, data, -state, "send")
                    assert h.done and h.error is None and -state not in t._early_fins
                h.wait(_deadline())
            else:
                dist.barrier()
                out = np.zeros(copy, np.uint8)
                assert port.recv(out, 7, spin) == 1
                np.testing.assert_array_equal(out, _value(peer, 7, copy))
                dist.barrier()
            dist.barrier()
    return None


@check()
def check_size_mismatch_is_an_error() -> str | None:
    """A message larger than the posted buffer fails the receive with MismatchError
    (ring and single-copy alike), instead of overrunning it or hanging."""
    with shm(cma_min_bytes=1024 if dist.group.WORLD.transport.cma_min_bytes else 0) as t:
        if dist.get_rank() == 0:
            for i in range(2):
                h = _send(t, 1, i, _value(0, i, 100 if i == 0 else 8192))
                if i == 0:
                    h.wait(_deadline())
            dist.barrier()
            return None
        texts = []
        for i, s in ((0, 100), (1, 8192)):
            h, _ = _recv(t, 0, i, s // 2)
            texts.append(str(_raises(MismatchError, lambda h=h: h.wait(_deadline()),
                                     f"{s} bytes into {s // 2}")))
        dist.barrier()
        return " | ".join(texts)


@check(exits=(1,))
def check_a_peer_that_exits_fails_what_waits_on_it() -> str:
    """Rank 1 sends one message and is killed: that message is still delivered, then
    a receive from it and a receive from any rank fail with PeerGoneError naming
    rank 1 (``peer``), within two seconds, and so does a send into its full ring."""
    with shm(close=False) as t:
        if dist.get_rank() == 1:
            _send(t, 0, 1, _value(1, 0, 10)).wait(_deadline())
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
        h, out = _recv(t, 1, 1, 10)
        h.wait(_deadline())
        np.testing.assert_array_equal(out, _value(1, 0, 10))
        texts = []
        for what, op in (("recv", lambda: _recv(t, 1, 2, 10)[0]),
                         ("recv from any", lambda: _recv(t, None, 2, 10)[0]),
                         ("send", lambda: _send(t, 1, 3, np.zeros(4 * RING, np.uint8)))):
            t0 = time.monotonic()
            exc = _raises(PeerGoneError, lambda op=op: op().wait(_deadline(20)), what)
            assert time.monotonic() - t0 < 2.5, (what, time.monotonic() - t0)
            assert exc.peer == 1 and "rank 1" in str(exc), (what, exc)
            texts.append(str(exc))
        return " | ".join(texts)


@check()
def check_a_silent_peer_times_out_naming_it() -> str:
    """A receive nobody sends fails with CommTimeout at its deadline, naming the
    operation and the peer it did not hear from (``waiting_on``); the peer is alive."""
    with shm() as t:
        text = ""
        if dist.get_rank() == 0:
            h, _ = _recv(t, 1, 11, 8)
            t0 = time.monotonic()
            exc = _raises(CommTimeout, lambda: h.wait(time.monotonic() + 0.5), "recv")
            assert 0.4 < time.monotonic() - t0 < 3.0, time.monotonic() - t0
            assert exc.waiting_on == (1,), exc.waiting_on
            assert "recv from 1 tag 11" in str(exc) and "[1]" in str(exc), str(exc)
            text = str(exc)
        dist.barrier()  # rank 1 stays alive (and silent) until then
        return text


@check()
def check_close_fails_pending_operations() -> None:
    """Closing a transport fails its pending operations with GroupAbortedError, and
    nothing can be posted on it afterwards."""
    with shm(close=False) as t:
        h, _ = _recv(t, 1 - dist.get_rank(), 12, 8)
        t.close()
        _raises(GroupAbortedError, lambda: h.wait(_deadline()), "pending recv")
        _raises(GroupAbortedError, lambda: _recv(t, 1 - dist.get_rank(), 13, 8), "new recv")
        dist.barrier()


# ------------------------------------------------------------------ arena.py

_ARENA = True


def _fp(seq: int, kind: str = "all_reduce", **kw: Any) -> Fingerprint:
    return Fingerprint(seq=seq, kind=kind, dtype="float32", op="SUM", count=4, **kw)


@check(size=3)
def check_enter_agrees_and_returns_every_count() -> None:
    """enter: ranks that agree pass; with per-rank counts every rank learns every
    rank's count, in group-rank order."""
    a = arena()
    r = dist.get_rank()
    assert a.enter(_fp(1), "call #1", _deadline()) == []
    counts = a.enter(Fingerprint(seq=2, kind="gather", dtype="int8", root=0, count=10 + r),
                     "call #2", _deadline(), per_rank_counts=True)
    assert counts == [10, 11, 12], counts
    dist.barrier()


@check(size=3)
def check_a_fingerprint_mismatch_is_the_same_error_on_every_rank() -> str:
    """Rank 2 enters with another op: every rank raises MismatchError, with one text,
    naming what each rank called; the arena is aborted for whoever comes next."""
    a = arena()
    r = dist.get_rank()
    a.enter(_fp(1), "call #1", _deadline())
    fp = _fp(2) if r != 2 else Fingerprint(seq=2, kind="all_reduce", dtype="float32",
                                           op="MAX", count=4)
    exc = _raises(MismatchError, lambda: a.enter(fp, "call #2", _deadline()), "mismatch")
    _raises(MismatchError, a.check_abort, "after the mismatch")
    dist.barrier()
    return str(exc)


@check(size=3)
def check_abort_reaches_every_waiter() -> None:
    """Rank 0 aborts instead of entering: ranks 1 and 2, asleep in enter, raise
    GroupAbortedError carrying its message at once, not at their deadline."""
    a = arena()
    a.enter(_fp(1), "call #1", _deadline())
    if dist.get_rank() == 0:
        time.sleep(0.3)  # let the others block (past their spin) in enter
        a.abort("rank 0: giving up on purpose")
    else:
        t0 = time.monotonic()
        exc = _raises(GroupAbortedError, lambda: a.enter(_fp(2), "call #2", _deadline(30)),
                      "waiting for rank 0")
        assert time.monotonic() - t0 < 2.0, time.monotonic() - t0
        assert "giving up on purpose" in str(exc), str(exc)
    dist.barrier()


@check(size=3)
def check_one_shot_regions_alternate_by_parity() -> None:
    """oneshot: what every rank wrote into its region of parity ``seq & 1`` before the
    entry of call ``seq`` is there for every rank once the entry returns, and stays
    there while a faster rank already writes call ``seq + 1`` into its other region:
    rank 0 reads the regions late, after ranks 1 and 2 moved on."""
    a = arena()
    r, n = dist.get_rank(), dist.get_world_size()
    for seq in range(1, 41):
        a.small[r][seq & 1][:100] = _value(r, seq, 100)
        a.oneshot(_fp(seq), f"call #{seq}", _deadline())
        if r == 0:
            time.sleep(0.002)  # the others are writing call seq + 1 meanwhile
        for q in range(n):
            np.testing.assert_array_equal(a.small[q][seq & 1][:100], _value(q, seq, 100),
                                          f"call {seq}, rank {q}'s region")
    dist.barrier()


@check()
def check_timeout_says_where_the_late_rank_is() -> str:
    """Rank 1 stays out of call #2: rank 0's enter times out with CommTimeout naming
    rank 1 and its position (``Arena.position``: its last call here, and phase)."""
    a = arena()
    a.enter(_fp(1, kind="broadcast", root=0), "broadcast #1", _deadline())
    text = ""
    if dist.get_rank() == 0:
        exc = _raises(CommTimeout, lambda: a.enter(_fp(2), "all_reduce #2",
                                                   time.monotonic() + 0.5), "enter")
        text = str(exc)
        assert exc.waiting_on == (1,), exc.waiting_on
        assert "rank 1 has not entered this call; its last one here: broadcast #1 (phase 0)" \
            in text, text
    dist.barrier()
    return text


@check(exits=(1,))
def check_a_rank_that_exits_before_entering_is_named() -> None:
    """A rank whose process is gone fails enter with PeerGoneError naming it, within
    two seconds."""
    a = arena()
    a.enter(_fp(1), "call #1", _deadline())
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    exc = _raises(PeerGoneError, lambda: a.enter(_fp(2), "call #2", _deadline(20)), "enter")
    assert time.monotonic() - t0 < 2.0, time.monotonic() - t0
    assert exc.peer == 1, exc
