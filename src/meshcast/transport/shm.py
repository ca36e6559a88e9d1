"""Point-to-point over shared memory: one SPSC byte ring per directed pair, one progress thread.

Theory of operation
-------------------
All ranks on a host share one *node segment*: a doorbell line per rank and a
ring of ``MESHCAST_RING_BYTES`` for every ordered pair (sender, receiver).
A message is a 32-byte header (group id, kind, tag, payload length) followed
by the payload, streamed through the ring in as many pieces as it takes, so
a message may be far larger than the ring.

Each process runs one progress thread that owns all ring I/O:

* it streams posted sends into the outgoing rings as space frees up;
* it drains every incoming ring eagerly: a message that matches a posted
  receive lands straight in the receiver's buffer; one that does not is kept
  as an *unexpected* message (a private copy) until a receive claims it.

Draining eagerly is what keeps two ranks that ``isend`` large messages to
each other at the same time from deadlocking: neither depends on the other
posting its receive first. Matching follows MPI: receives are matched in the
order they were posted, messages in the order they arrived, and messages
between one pair with one (group, kind, tag) never overtake each other.

Rule 1: ring heads, tails and data are read and written only under
``self._lock``: by a progress pass (the progress thread's, or a waiting user
thread's through :meth:`ShmTransport.poll`), and by the blocking fast path of
a user thread, which moves a whole small message straight into or out of a
ring when nothing queued or posted could claim it first (``send_now``,
``recv_now``, the lane's compiled ports, which take the same lock, and
``take_posted``). Otherwise user threads only post operations (under the
lock) and ring the process's own doorbell.

Rule 2: the producer of a ring writes data, then ``head`` (stores in order,
see meshcast._wait), then bumps the consumer's doorbell; the consumer reads
``head``, then data, then writes ``tail`` and bumps the producer's doorbell.
Doorbells are 32-bit futex words; a bump from two processes at once may lose
an increment, which is harmless because the sleeper only cares that the value
differs from the one it saw.

Dead peers: a rank whose process is gone fails every operation waiting on it
(:class:`~meshcast.errors.PeerGoneError` naming it), after its incoming ring is
drained, so what it sent before it died is still delivered. A receive from any
rank waits on every rank that could send it (its group's other members) and
fails as soon as one of them is found dead, as in Gloo (and MPI's ULFM): the
message it waits for may have been the dead rank's, so finishing it by luck
from a live rank would hide the failure on some runs and not on others.
"""

from __future__ import annotations

import collections
import itertools
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import _wait
from ..errors import GroupAbortedError, MismatchError, PeerGoneError, TransportError
from . import cma, compiled_helper
from .segment import Segment

KIND_P2P = 0  # user send/recv: tags are the user's
KIND_COLL = 1  # schedules run by the executor: tags are (seq << 20) | round
_KIND_FIN = 2  # "I copied your message": completes a single-copy (CMA) send; tag = send id
_MODE_CMA = 1  # header's reserved field: the payload is (address, send id), not the data
_CMA = struct.Struct("<QQ")

_HEADER = struct.Struct("<IIqQQ")  # group, kind, tag, nbytes, reserved
# Single-copy through a compiled port from this size (see ShmTransport.send_address),
# [ranks each on a core, ranks outnumbering cores]. Measured, sendrecv between 2 ranks
# on 2 cores, hot buffers, us, ring / single-copy: 64 KiB 12.5 / 13.5, 96 KiB 17.2 /
# 14.1, 128 KiB 20.8 / 16.4, 512 KiB 89 / 39; 4 ranks on 2 cores: 128 KiB 170-176 /
# 240-250, 256 KiB 330-338 / 286-295.
PORT_COPY_BYTES = (128 << 10, 256 << 10)
# A rank's "wake my progress thread" word (Rules 3 and 5)
_WAKE_NEVER, _WAKE_ALWAYS, _WAKE_URGENT = 0, 1, 2
_LINE = 64
_PAGE = 4096
_RING_HEADER = 128  # head u64 at +0, tail u64 at +64: separate cache lines


_EVENT_LOCK = threading.Lock()


class Handle:
    """A posted send or receive. Complete it with :meth:`wait`; poll with :meth:`test`."""

    __slots__ = ("done", "_event", "error", "source", "nbytes", "describe", "peer", "peers",
                 "_transport", "recv", "fin")

    def __init__(self, transport: ShmTransport, peer: int | None, describe: str,
                 peers: tuple[int, ...] = ()) -> None:
        # The Event is made only by a thread that blocks on this handle: most finish
        # while their waiter polls, and an Event costs a Condition and two locks.
        self.done = False
        self._event: threading.Event | None = None
        self.error: BaseException | None = None
        self.source: int | None = peer
        self.peer = peer
        self.peers = peers  # a receive from any rank: the global ranks that could send it
        self.nbytes = 0
        self.describe = describe
        self._transport = transport
        # The posted receive from one rank this handle completes, which :meth:`wait`
        # may take straight out of its ring (ShmTransport.take_posted); None for sends
        # and receives from any rank.
        self.recv: _RecvOp | None = None
        # A single-copy send posted through a compiled port (ShmTransport.send_address):
        # (port, send id), whose FIN :meth:`wait` may take straight out of the ring.
        self.fin: tuple[Any, int] | None = None

    def _finish(self, error: BaseException | None = None) -> None:
        self.error = error
        # done before the event is read, and a blocker stores its event before it
        # reads done (both under the GIL): one of the two always sees the other.
        self.done = True
        event = self._event
        if event is not None:
            event.set()

    def test(self) -> bool:
        """True once the operation finished (successfully or not); drives progress once."""
        if not self.done:
            self._transport.poll()
        return self.done

    def waiting_on(self) -> tuple[int, ...]:
        """Global ranks this operation still waits on (every candidate sender of an
        unmatched receive from any rank)."""
        if self.done:
            return ()
        source = self.source  # set by a match, for a receive from any rank
        return self.peers if source is None else (source,)

    def check(self, ranks: Iterable[int], what: str) -> None:
        """The liveness check of :meth:`wait` (a :class:`meshcast._wait.PeerCheck`).

        A dead rank among ``ranks`` fails, through the transport, every operation
        waiting on it, once what it sent before dying has been drained; so this
        handle either completes from that data or finishes with the error that
        :meth:`wait` raises.

        Raises:
            PeerGoneError: this handle still waits on a dead rank (backstop).
        """
        dead = self._transport.liveness.dead(ranks)
        if not dead:
            return
        self._transport.reap(dead)
        if not self.done:
            raise PeerGoneError(f"{what}: rank {dead[0]} exited", peer=dead[0])

    def _block(self, timeout: float) -> None:
        """Sleep until finished or ``timeout`` seconds passed."""
        with _EVENT_LOCK:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not self.done:
            event.wait(timeout)

    def wait(self, deadline: float, check_abort: Callable[[], None] | None = None) -> None:
        """Block until done or until ``time.monotonic()`` passes ``deadline``.

        ``check_abort`` (from a group's arena) raises if another rank aborted
        the collective this operation belongs to.

        Raises:
            CommTimeout: the deadline passed; names the peer not heard from.
            PeerGoneError: the peer exited while this was pending.
            MismatchError: the message did not fit the posted buffer.
        """
        if not self.done and self.recv is not None:
            self._transport.take_posted(self.recv)
        elif not self.done and self.fin is not None:
            self._transport.take_fin(self)
        if not self.done:
            poll = self._transport.poll

            transport = self._transport

            def ready() -> bool:
                # The waiting thread drives progress itself (as MPI_Wait does): no
                # hand-off to the progress thread and back on the fast path.
                if self.done:
                    return True
                poll()
                return self.done

            def block(timeout: float) -> None:
                # Long wait: let the progress thread take over, and be woken by it.
                transport.end_poll(blocked=True)
                try:
                    self._block(timeout)
                finally:
                    transport.begin_poll(blocked=True)

            transport.begin_poll()
            try:
                _wait.wait_until(
                    ready,
                    deadline=deadline,
                    describe=lambda: self.describe,
                    pending=self.waiting_on,
                    liveness=self,
                    block=block,
                    check_abort=check_abort,
                )
            finally:
                transport.end_poll()
        if self.error is not None:
            raise self.error


class _SendOp:
    __slots__ = ("header", "data", "sent", "handle", "header_sent", "done_when_pushed")

    def __init__(self, header: bytes, data: np.ndarray, handle: Handle | None,
                 done_when_pushed: bool = True) -> None:
        self.header = header
        self.data = data
        self.sent = 0
        self.header_sent = False
        self.handle = handle
        self.done_when_pushed = done_when_pushed


class _RecvOp:
    __slots__ = ("group", "kind", "tag", "src", "dest", "handle")

    def __init__(self, group: int, kind: int, tag: int, src: int | None, dest: np.ndarray,
                 handle: Handle) -> None:
        self.group, self.kind, self.tag, self.src = group, kind, tag, src
        self.dest = dest
        self.handle = handle

    def matches(self, group: int, kind: int, tag: int, src: int) -> bool:
        return (self.group == group and self.kind == kind and self.tag == tag
                and (self.src is None or self.src == src))


class _Incoming:
    """A message being drained from one ring."""

    __slots__ = ("group", "kind", "tag", "src", "nbytes", "dest", "got", "recv", "error",
                 "cma")

    def __init__(self, group: int, kind: int, tag: int, src: int, nbytes: int) -> None:
        self.group, self.kind, self.tag, self.src, self.nbytes = group, kind, tag, src, nbytes
        self.dest: np.ndarray | None = None
        self.got = 0
        self.recv: _RecvOp | None = None
        self.error: BaseException | None = None
        self.cma: tuple[int, int] | None = None  # (address in the sender, send id)


class ShmTransport:
    """Rank-addressed, tag-matched point-to-point between the ranks of one host.

    Args:
        segment: the node segment (created by the host's first rank, attached by the rest).
        ranks: global ranks on this host, in local order.
        me: this process's global rank.
        ring_bytes: data bytes of each directed ring.
        liveness: pid table used to notice dead peers.
    """

    name = "shm"

    # Ring bytes to add so a message of a given size fits whole: its header, rounded
    # up to keep the rings 64-byte aligned.
    MESSAGE_HEADER_ROOM = _LINE

    @staticmethod
    def segment_size(nlocal: int, ring_bytes: int) -> int:
        return nlocal * _LINE + nlocal * nlocal * (_RING_HEADER + ring_bytes)

    def __init__(self, segment: Segment, ranks: list[int], me: int, ring_bytes: int,
                 liveness: _wait.Liveness, cma_min_bytes: int = 0) -> None:
        self.segment = segment
        self.ranks = list(ranks)
        self.local = {g: i for i, g in enumerate(ranks)}
        self.me = me
        self.li = self.local[me]
        self.n = len(ranks)
        self.ring_bytes = ring_bytes
        self.liveness = liveness
        n = self.n
        # Per local rank, on its own line: doorbell (u32 at +0) and sleeping flag (+8).
        # Plain memoryviews: an item access costs a fraction of a NumPy scalar's,
        # and these words are read on every progress pass.
        self._words = memoryview(segment.view(0, n * _LINE)).cast("I")
        self._bell_at = [i * (_LINE // 4) for i in range(n)]
        self._sleep_at = [i * (_LINE // 4) + 2 for i in range(n)]
        self._bell_addr = [segment.address + i * _LINE for i in range(n)]
        base = n * _LINE
        stride = _RING_HEADER + ring_bytes

        def ring(src: int, dst: int) -> tuple[memoryview, memoryview, np.ndarray, memoryview]:
            off = base + (src * n + dst) * stride
            # head and "producer waits for space" on the producer's line, tail on the consumer's
            return (memoryview(segment.view(off, 8)).cast("Q"),
                    memoryview(segment.view(off + 64, 8)).cast("Q"),
                    segment.view(off + _RING_HEADER, ring_bytes),
                    memoryview(segment.view(off + 8, 8)).cast("Q"))

        # Outgoing rings (me -> peer) and incoming rings (peer -> me), by local index.
        self._out = {j: ring(self.li, j) for j in range(n) if j != self.li}
        self._in = {j: ring(j, self.li) for j in range(n) if j != self.li}
        for _, _, data, _ in (*self._out.values(), *self._in.values()):
            # Map every page of my rings now (a read of one byte a page; peers may be
            # writing already): on first use each page would fault, and a call that
            # reaches new pages pays (2 ranks, the bench's 20 calls of 32 KiB, the first
            # to go past the smaller sizes' part of the ring: 26 us a call, 11.5 warm).
            int(data[::_PAGE].sum())
        # their addresses, for the compiled send_now/recv_now (None: Python moves the bytes)
        self._rings = compiled_helper("_rings")
        self._out_at = {j: segment.address + base + (self.li * n + j) * stride for j in self._out}
        self._in_at = {j: segment.address + base + (j * n + self.li) * stride for j in self._in}
        # The same, by the peer's global rank, with the doorbell its put or take rings
        # (send_now, recv_now and their compiled ports, see port).
        self._put_to = {} if self._rings is None else {
            self.ranks[j]: (j, at, self._bell_addr[j]) for j, at in self._out_at.items()}
        self._take_from = {} if self._rings is None else {
            self.ranks[j]: (j, at, self._bell_addr[j]) for j, at in self._in_at.items()}
        self._lock = threading.Lock()
        self._flag_lock = threading.Lock()  # guards _pollers, _blocked, _asleep, our _sleeping word
        self._pollers = 0
        self._blocked = 0  # user threads blocked on a handle (Rule 5)
        # While a user thread polls, it runs the passes, and the progress thread steps
        # aside: two threads contending for the lock and the GIL made a 1 MiB stream
        # through the ring 2-3x slower (2 ranks). Not where ranks share cores: the user
        # thread is often off its core then, and large single-copy transfers stall
        # without the progress thread (8 ranks on 2 cores, 4-32 MiB sendrecv 20-30%
        # slower when it stepped aside).
        self._step_aside = not _wait.spec().oversubscribed
        self._asleep = False
        self._sendq: dict[int, collections.deque[_SendOp]] = {j: collections.deque() for j in self._out}
        self._incoming: dict[int, _Incoming | None] = {j: None for j in self._in}
        self._posted: list[_RecvOp] = []
        self._unexpected: list[_Incoming] = []
        # Messages of at least this many bytes go single-copy (0: never; see cma.py), and
        # so does every message that cannot sit in the ring whole: streamed in pieces,
        # each piece waits for the other side's progress (2 ranks exchanging 2 MiB
        # through 1 MiB rings, cold buffers: 420-540 us a sendrecv streamed, 440-590
        # single-copy; 8 MiB: 1.5-2.2 ms against 1.3-1.6).
        self.cma_min_bytes = (min(cma_min_bytes, ring_bytes - _HEADER.size) if cma_min_bytes > 0
                              else 0)
        # ... and through a compiled port (send_address, the port's recv and fin) from
        # PORT_COPY_BYTES already: there the protocol costs a few microseconds, where the
        # interpreter's costs 70 (0: never).
        self.port_copy_bytes = min(self.cma_min_bytes,
                                   PORT_COPY_BYTES[_wait.spec().oversubscribed])
        # send id -> (peer, handle, data): the data stays referenced until the receiver's
        # FIN, since the receiver copies it out of our memory (a temporary array passed
        # to isend would otherwise be freed, and its memory reused, meanwhile)
        self._cma_sends: dict[int, tuple[int, Handle, np.ndarray]] = {}
        self._cma_ids = itertools.count(1)
        # FINs a progress pass took before their send was registered (adopt_address_send)
        self._early_fins: set[int] = set()
        # The compiled ports made (see port), by (peer, group, kind): a receive posted
        # before its single-copy message came is taken by its port's recv (take_posted).
        self._port_of: dict[tuple[int, int, int], Any] = {}
        self._closed: BaseException | None = None
        self._gone: set[int] = set()
        self._thread = threading.Thread(target=self._run, name=f"meshcast-shm-progress-{me}",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ posting

    def isend(self, peer: int, group: int, kind: int, tag: int, data: np.ndarray,
              describe: str) -> Handle:
        """Post a send of ``data`` (a contiguous array) to global rank ``peer``."""
        handle = Handle(self, peer, describe)
        if peer == self.me:
            raise TransportError(f"{describe}: a rank cannot send to itself over shm")
        raw = data.reshape(-1).view(np.uint8)
        handle.nbytes = raw.nbytes
        with self._lock:
            self._check_open(peer, describe)
            if self.cma_min_bytes and raw.nbytes >= self.cma_min_bytes:
                # Only the address travels; the receiver copies straight out of our
                # memory and answers with a FIN, which completes this send.
                send_id = next(self._cma_ids)
                self._cma_sends[send_id] = (peer, handle, raw)
                op = _SendOp(_HEADER.pack(group, kind, tag, raw.nbytes, _MODE_CMA),
                             np.frombuffer(_CMA.pack(raw.ctypes.data, send_id), np.uint8),
                             handle, done_when_pushed=False)
                op.handle = None
            else:
                op = _SendOp(_HEADER.pack(group, kind, tag, raw.nbytes, 0), raw, handle)
            self._sendq[self.local[peer]].append(op)
            self._pass()  # small messages usually go out right here
        # No need to wake our progress thread: whatever is left moves when the
        # peer frees ring space, and the peer rings our doorbell when it does.
        return handle

    def irecv(self, peer: int | None, group: int, kind: int, tag: int, dest: np.ndarray,
              describe: str, peers: Sequence[int] | None = None) -> Handle:
        """Post a receive into ``dest`` from global rank ``peer`` (None: any rank).

        ``peers``: for a receive from any rank, the global ranks that could send
        it (its group's other members; default: every other rank of this host).
        If one of them is or becomes dead while no message matched, the receive
        fails with PeerGoneError (see the module docstring).
        """
        if peer is None:
            senders = tuple(r for r in (self.ranks if peers is None else peers) if r != self.me)
        else:
            senders = ()
        handle = Handle(self, peer, describe, senders)
        raw = dest.reshape(-1).view(np.uint8)
        recv = _RecvOp(group, kind, tag, peer, raw, handle)
        if peer is not None:
            handle.recv = recv
        with self._lock:
            self._check_open(None, describe)
            if not self._claim_unexpected(recv):
                # Only now: a message a rank sent before it died is still delivered.
                for sender in (senders if peer is None else (peer,)):
                    self._check_open(sender, describe)
                self._posted.append(recv)
                if self._copy_port(peer, group, kind, raw.nbytes) is not None:
                    # Its message is likely a single-copy one: left for the wait, whose
                    # port copies it in C (take_posted), not this pass in the interpreter.
                    return handle
            self._pass()
        # The sender rings our doorbell when the message arrives: no wake-up here.
        return handle

    def _copy_port(self, peer: int | None, group: int, kind: int, nbytes: int) -> Any:
        """The compiled port that sends and receives a message of ``nbytes`` from ``peer``
        single-copy (see :meth:`send_address`); None when it does not."""
        if 0 < self.port_copy_bytes <= nbytes:
            return self._port_of.get((peer, group, kind))
        return None

    def _claim_unexpected(self, recv: _RecvOp) -> bool:
        """Hand ``recv`` the first unclaimed unexpected message it matches, if any (under
        the lock): what posting a receive does first."""
        for msg in self._unexpected:
            if recv.matches(msg.group, msg.kind, msg.tag, msg.src) and msg.recv is None:
                self._claim(msg, recv)
                return True
        return False

    def _takeable(self, peer: int, nbytes: int) -> bool:
        """Whether :meth:`take_posted` may take a receive of ``nbytes`` from ``peer``:
        another rank of this host whose message would sit in the ring whole."""
        j = self.local.get(peer)
        return (j is not None and j != self.li and not self.streams(nbytes)
                and not (self.cma_min_bytes and nbytes >= self.cma_min_bytes))

    def take_posted(self, recv: _RecvOp) -> bool:
        """The start of a wait for a posted receive from one peer of this host: take its
        message straight out of the ring, as a blocking receive does (:meth:`recv_now`,
        within the spin time), instead of polling the progress machinery for it.

        Only when no other posted receive could match what it matches: it is then
        withdrawn for the look, so that it cannot be matched twice, and posted again
        when nothing was taken, ahead of every receive posted meanwhile (none of which
        was there to compete with it, so the order of matching is the order of
        posting, as before). A message that reached the unexpected list meanwhile is
        claimed by it then, as a newly posted receive would. Returns True when the
        message was taken (the handle is finished); False: the general wait goes on.

        A send then ``irecv(...).wait()``, 8 B round trip between 2 ranks (each on a
        core): 18.7 us when the wait polled the progress machinery, 3.2 us so (a
        blocking send/recv: 2). Ranks sharing cores do not spin, so they skip it.
        """
        spin_s = _wait.spec().spin_s
        if spin_s <= 0:  # ranks share cores: the look would rarely find it, the general
            return False  # wait yields its core instead
        if recv.src is None:
            return False
        nbytes = recv.dest.nbytes
        # a single-copy message a compiled port sends: that port's recv copies it
        port = self._copy_port(recv.src, recv.group, recv.kind, nbytes)
        if port is None and not self._takeable(recv.src, nbytes):
            return False
        with self._lock:
            if recv.handle.done or recv not in self._posted:
                return False  # finished, or being received in pieces by the progress pass
            for other in self._posted:
                if other is not recv and other.matches(recv.group, recv.kind, recv.tag,
                                                       recv.src):
                    return False
            self._posted.remove(recv)
        took = False
        try:
            if port is not None:
                took = port.recv(recv.dest, recv.tag, int(spin_s * 1e9)) > 0
            else:
                took = self.recv_now(recv.src, recv.group, recv.kind, recv.tag, recv.dest,
                                     spin_s)
        finally:
            if not took:
                self._repost(recv)
        if took:
            recv.handle.source = recv.src
            recv.handle._finish()
        return took

    def _repost(self, recv: _RecvOp) -> None:
        """Post a receive :meth:`take_posted` withdrew again, first in line."""
        with self._lock:
            if self._closed is not None:
                recv.handle._finish(self._closed)
                return
            if self._claim_unexpected(recv):
                return
            if recv.src in self._gone:  # as reap fails a receive still waiting on it
                recv.handle._finish(PeerGoneError(f"{recv.handle.describe}: rank {recv.src} "
                                                  f"exited", peer=recv.src))
                return
            self._posted.insert(0, recv)

    def send_address(self, port: Any, peer: int, raw: np.ndarray, tag: int,
                     describe: Any) -> Handle | None:
        """Post a single-copy send of ``raw`` (C-contiguous, at least ``port_copy_bytes``)
        to global rank ``peer`` through its compiled ``port`` (see :meth:`port`), in the
        quiet case: only the address goes into the ring, as :meth:`isend` would send
        it, but in one C call. Returns the send's Handle, which the receiver's FIN
        completes; None: nothing was sent, take :meth:`isend`.

        The single-copy messages of :meth:`isend` cost 70 us a sendrecv at 2 ranks in
        the interpreter before their copy; see ``_rings.c``'s port_take_address for the
        receiving side."""
        send_id = next(self._cma_ids)
        handle = Handle(self, peer, describe)
        handle.nbytes = raw.nbytes
        # Known before the address can be read: the FIN may come at once, to any pass.
        self._cma_sends[send_id] = (peer, handle, raw)
        if port.send_address(raw, tag, send_id) <= 0:
            del self._cma_sends[send_id]  # never sent: no FIN can name it
            return None
        handle.fin = (port, send_id)
        return handle

    def batch(self, op_type: type, ports: dict[int, Any], dtypes: dict, works: dict,
              seq: Any, group: Any, default: bool, tags: tuple[int, int], single_min: int,
              spin_ns: int) -> Any:
        """The compiled batch_isend_irecv of a list of P2POps of ``group``, or naming
        none if it is the ``default`` one (``_rings.Batch``: see
        TinyCallLane.make_batch), over the ``ports`` of :meth:`port`: single-copy from
        ``single_min`` bytes (send ids from this transport's count), its finished
        Works from ``works`` by (verb, peer, tag), the messages numbered by ``seq``.
        None without the compiled helper or ports."""
        if self._rings is None or not ports:
            return None
        return self._rings.Batch(op_type, np.ndarray, ports, dtypes, works, seq, self._cma_ids,
                                 group, default, tags[0], tags[1], single_min, spin_ns)

    def adopt_address_send(self, port: Any, peer: int, raw: np.ndarray, send_id: int,
                           describe: Any) -> Handle:
        """The Handle of a single-copy send a compiled batch (:meth:`batch`) wrote under
        ``send_id`` and returned before its FIN came: registered now, as
        :meth:`send_address` does before it writes (a progress pass that took the FIN
        meanwhile left it in ``_early_fins``). ``raw`` stays referenced until the FIN."""
        handle = Handle(self, peer, describe)
        handle.nbytes = raw.nbytes
        with self._lock:
            if send_id in self._early_fins:
                self._early_fins.discard(send_id)
                handle._finish()
            elif self._closed is not None or peer in self._gone:
                # (the peer's loss swept _cma_sends before this send was in it)
                try:
                    self._check_open(peer, describe)
                except (GroupAbortedError, PeerGoneError) as exc:
                    handle._finish(exc)
            else:
                self._cma_sends[send_id] = (peer, handle, raw)
                handle.fin = (port, send_id)
        return handle

    def take_fin(self, handle: Handle) -> None:
        """The start of a wait for a :meth:`send_address` send: take its FIN straight out
        of the ring when it comes first within the patience for its copy (as
        :meth:`take_posted` does for a receive); otherwise the general wait, whose
        progress passes take FINs wherever they are."""
        port, send_id = handle.fin
        spin_s = _wait.spec().spin_s
        wait_ns = int(self.patience(spin_s, handle.nbytes) * 1e9)
        state = port.fin(send_id, wait_ns)
        if state < 0:
            # Something else came first: in a sendrecv, the peer's own message, for a
            # receive posted behind this send. Take it as that receive's wait would (a
            # progress pass would copy it in the interpreter), then look again.
            for recv in [r for r in self._posted if r.src == handle.peer]:
                if self.take_posted(recv):
                    state = port.fin(send_id, wait_ns)
                    break
        if state > 0 and self._cma_sends.pop(send_id, None) is not None:
            handle._finish()

    # ------------------------------------------------------- blocking fast path

    def streams(self, nbytes: int) -> bool:
        """Whether a message of ``nbytes`` to a rank of this host is streamed through
        its ring in pieces: too large to sit in it whole, and not single-copy."""
        return (_HEADER.size + nbytes > self.ring_bytes
                and not (self.cma_min_bytes and nbytes >= self.cma_min_bytes))

    @staticmethod
    def patience(spin_s: float, nbytes: int) -> float:
        """How long a blocking send or receive of ``nbytes`` looks at its ring before it
        takes the general path: the spin time, plus for a large message the time the
        other side takes to copy it (at 2 GB/s: cold buffers on a busy host). Given up
        sooner, a message being copied sends its receiver down the general path, late
        for the next call, whose peer then gives up too: 2 ranks exchanging 512 KiB
        took 2-3x as long once a fifth of the receives gave up. 0 when not spinning."""
        return spin_s + nbytes * 5e-10 if spin_s > 0 else 0.0

    def send_now(self, peer: int, group: int, kind: int, tag: int, raw: np.ndarray,
                 spin_s: float = 0.0) -> bool:
        """Write a whole message into the ring to ``peer`` at once, if it fits and no
        earlier send to ``peer`` is still queued (the order of messages between two
        ranks is the ring's order); no Handle, nothing left to do. False: nothing
        was done, take :meth:`isend` (it also reports closed groups and dead peers).
        ``raw``: a C-contiguous array of any dtype (its bytes are the message).
        ``spin_s``: with the compiled helper, wait up to :meth:`patience` for room
        while the peer copies out an earlier message (0: look once).
        """
        nbytes = raw.nbytes
        if self.cma_min_bytes and nbytes >= self.cma_min_bytes:
            return False
        rings = self._rings
        spot = None if rings is None else self._put_to.get(peer)
        if spot is not None:  # the compiled helper; one lookup, then one C call
            j, ring, bell = spot
            with self._lock:
                if self._closed is not None or self._sendq[j] or peer in self._gone:
                    return False
                if rings.put(ring, self.ring_bytes, bell, group, kind, tag, raw):
                    return True
            return spin_s > 0 and self._send_when_room(peer, j, group, kind, tag, raw, spin_s)
        j = self.local.get(peer)
        if j is None or j == self.li:
            return False
        with self._lock:
            if self._closed is not None or peer in self._gone or self._sendq[j]:
                return False
            raw = raw.reshape(-1).view(np.uint8)
            head_v, tail_v, data, _ = self._out[j]
            head = int(head_v[0])
            if self.ring_bytes - (head - int(tail_v[0])) < _HEADER.size + nbytes:
                return False
            start = head % self.ring_bytes
            if start + _HEADER.size + nbytes <= self.ring_bytes:
                _HEADER.pack_into(data, start, group, kind, tag, nbytes, 0)
                data[start + _HEADER.size:start + _HEADER.size + nbytes] = raw
            else:
                self._write(data, head, np.frombuffer(_HEADER.pack(group, kind, tag, nbytes, 0),
                                                      np.uint8))
                self._write(data, head + _HEADER.size, raw)
            head_v[0] = head + _HEADER.size + nbytes  # after the data (Rule 2)
            self._ring_bell(j)
        return True

    def _send_when_room(self, peer: int, j: int, group: int, kind: int, tag: int,
                        raw: np.ndarray, spin_s: float) -> bool:
        """:meth:`send_now` once its first look found the ring too full: wait for room
        (the compiled helper's spin, without the lock and the GIL) and try again, until
        :meth:`patience` runs out."""
        need = _HEADER.size + raw.nbytes
        if need > self.ring_bytes:
            return False
        rings = self._rings
        until = time.monotonic() + self.patience(spin_s, raw.nbytes)
        while True:
            now = time.monotonic()
            if now >= until or not rings.room(self._out_at[j], self.ring_bytes, need,
                                              int((until - now) * 1e9)):
                return False
            with self._lock:
                if self._closed is not None or peer in self._gone or self._sendq[j]:
                    return False
                if rings.put(self._out_at[j], self.ring_bytes, self._bell_addr[j],
                             group, kind, tag, raw):
                    return True

    def port(self, peer: int, group: int, kind: int) -> object | None:
        """A compiled :meth:`send_now` and :meth:`recv_now` with ``peer`` for messages of
        ``group`` and ``kind`` (``_rings.Port``: ``send(data, tag)``, ``recv(out, tag,
        spin_ns)``, each 1 done, 0 no room / nothing came, -1 ask send_now/recv_now),
        serving the common case in one C call; for single-copy messages (at least
        ``port_copy_bytes``) also :meth:`send_address`'s ``send_address`` and ``fin``, and a
        ``recv`` that copies out of the sender; None without the compiled helper or
        when ``peer`` is not another rank of this host."""
        out, into = self._put_to.get(peer), self._take_from.get(peer)
        if self._rings is None or out is None or into is None:
            return None
        j, out_ring, out_bell = out
        _, in_ring, in_bell = into
        # a message the ring cannot hold whole, or one that goes single-copy, is not sent here
        max_bytes = self.ring_bytes - _HEADER.size + 1
        if self.port_copy_bytes:
            max_bytes = min(max_bytes, self.port_copy_bytes)
        # messages of port_copy_bytes and more: send_address, fin, and recv's single copy
        port = self._rings.Port(out_ring, out_bell, in_ring, in_bell, self.ring_bytes,
                                max_bytes, group, kind, self._lock, self, self._sendq[j],
                                self._gone, peer, self._incoming, j, self._posted,
                                self._unexpected, pid=self.liveness.pids[peer],
                                copy_bytes=self.port_copy_bytes)
        self._port_of[(peer, group, kind)] = port
        return port

    def recv_now(self, peer: int, group: int, kind: int, tag: int, raw: np.ndarray,
                 spin_s: float) -> bool:
        """Receive the next message from ``peer`` straight out of its ring, polling for
        up to ``spin_s`` seconds, if it is the message this receive would match
        anyway: first in the ring, complete, with this (group, kind, tag) and
        size, and no earlier message or posted receive that could claim it. False:
        nothing was consumed, take :meth:`irecv` (which also reports errors).
        ``raw``: a writable C-contiguous array of any dtype.
        """
        # No begin_poll here: a message written whole wakes our progress thread only
        # while another user thread of ours is blocked (Rule 5); if it drains ours
        # into the unexpected list meanwhile, _take says so and irecv claims it.
        rings, size = self._rings, self.ring_bytes
        spot = None if rings is None else self._take_from.get(peer)
        if spot is not None:
            j, ring, bell = spot
        else:  # Python moves the bytes (or peer is not another rank of this host)
            j = self.local.get(peer)
            if j is None or j == self.li:
                return False
            ring = bell = 0
        until = None
        # A look, then (the message is usually not there yet) the wait without the lock
        # and the GIL, then another look. (Waiting first was slower, measured: the
        # wait's GIL hand-off costs more than a look.)
        while True:
            with self._lock:
                state = self._first_claim(j, peer, group, kind, tag) or (
                    rings.take(ring, size, bell, group, kind, tag, raw) if ring
                    else self._take(j, group, kind, tag, raw))
            if state:
                return state > 0
            now = time.monotonic()
            if until is None:
                until = now + self.patience(spin_s, raw.nbytes)
            elif now >= until:
                return False
            if ring and not rings.wait(ring, int((until - now) * 1e9)):
                return False  # (looked at until the spin time was up, without the GIL)

    def _first_claim(self, j: int, peer: int, group: int, kind: int, tag: int) -> int:
        """-1 when something else must see ring ``j``'s next message from ``peer``
        first, or may claim it (the group closed, the peer gone, a message being
        received in pieces, an earlier message of this kind, an earlier matching
        receive): the general path handles it. 0: :meth:`recv_now` may take it."""
        if self._closed is not None or peer in self._gone or self._incoming[j] is not None:
            return -1
        for msg in self._unexpected:
            if msg.src == peer and msg.group == group and msg.kind == kind and msg.tag == tag:
                return -1
        for recv in self._posted:
            if recv.matches(group, kind, tag, peer):
                return -1
        return 0

    def _take(self, j: int, group: int, kind: int, tag: int, raw: np.ndarray) -> int:
        """:meth:`recv_now`'s look at ring ``j`` in Python, under the lock, once
        :meth:`_first_claim` allowed it: 1 taken, 0 empty, -1 the general path must
        handle what is there."""
        raw = raw.reshape(-1).view(np.uint8)
        head_v, tail_v, data, waiting_v = self._in[j]
        tail = int(tail_v[0])
        avail = int(head_v[0]) - tail
        if avail <= 0:
            return 0
        if avail < _HEADER.size:
            return -1
        g, k, t, nbytes, mode = self._unpack(_HEADER, data, tail)
        if (g != group or k != kind or t != tag or mode != 0 or nbytes != raw.nbytes
                or avail < _HEADER.size + nbytes):
            return -1
        if nbytes:
            self._read(data, tail + _HEADER.size, raw)
        tail_v[0] = tail + _HEADER.size + nbytes
        self._space_freed(j, waiting_v)
        return 1

    def _check_open(self, peer: int | None, describe: str) -> None:
        if self._closed is not None:
            raise GroupAbortedError(f"{describe}: {self._closed}")
        if peer is not None and peer in self._gone:
            raise PeerGoneError(f"{describe}: rank {peer} has exited", peer=peer)

    def _claim(self, msg: _Incoming, recv: _RecvOp) -> None:
        """Hand an unexpected message to a receive (copying it now if it is complete)."""
        recv.handle.source = msg.src
        if msg.nbytes != recv.dest.nbytes:
            self._unexpected.remove(msg)
            if msg.cma is not None:
                self._cma_finish(msg)
            recv.handle._finish(self._size_error(recv, msg))
            return
        msg.recv = recv
        if msg.cma is not None:
            self._unexpected.remove(msg)
            self._cma_copy(msg, recv)
            return
        if msg.got == msg.nbytes:
            self._unexpected.remove(msg)
            if msg.nbytes:
                recv.dest[:] = msg.dest
            recv.handle._finish()

    @staticmethod
    def _size_error(recv: _RecvOp, msg: _Incoming) -> MismatchError:
        return MismatchError(
            f"{recv.handle.describe}: rank {msg.src} sent {msg.nbytes} bytes but the receive "
            f"buffer holds {recv.dest.nbytes} bytes (tag {msg.tag})"
        )

    # ----------------------------------------------------------------- progress

    # Rule 4: a consumer rings the producer's doorbell after freeing ring space only
    # when the producer has flagged that it waits for space (it sets the flag, then
    # fences and re-reads the tail; the consumer writes the tail, fences, reads the
    # flag), so a steady stream of small messages wakes nobody on the way back.
    #
    # Rule 3: peers wake our progress thread (futex on our doorbell) only while it
    # sleeps and no user thread of ours is polling (``_sleeping[li]`` is not
    # _WAKE_NEVER). A wake-up costs ~20 us of thread hand-off and GIL contention
    # per message, and a thread that is polling sees the data anyway. Flipping the
    # flag back on is followed by a fence and one more pass, so a message whose
    # sender saw the flag off is never left for the progress thread to find late.
    #
    # Rule 5: while no user thread is blocked on a handle (_WAKE_URGENT), a message
    # written whole into the ring wakes nobody: it waits there, as an eager MPI
    # message waits in the receive queue, until a call of ours polls. Only what
    # cannot finish without us does: a ring too full for the message (its producer
    # waits for space) and freed space a producer waits for. With a user thread
    # blocked on a handle (_WAKE_ALWAYS), every message wakes the progress thread,
    # which completes the handle and wakes that thread.

    def begin_poll(self, blocked: bool = False) -> None:
        """A user thread starts polling (Handle.wait): peers need not wake our progress
        thread. ``blocked``: it was blocked on a handle until now (see end_poll)."""
        with self._flag_lock:
            self._pollers += 1
            if blocked:
                self._blocked -= 1
            self._words[self._sleep_at[self.li]] = _WAKE_NEVER

    def end_poll(self, blocked: bool = False) -> None:
        """A user thread stops polling: re-arm wake-ups if the progress thread sleeps.
        ``blocked``: it now blocks on a handle, which only the progress thread
        completes (Rule 5)."""
        with self._flag_lock:
            self._pollers -= 1
            if blocked:
                self._blocked += 1
            self._words[self._sleep_at[self.li]] = self._wake_flag()
        _wait.fence()
        self.poll()

    def _wake_flag(self) -> int:
        """What peers should wake our progress thread for (under _flag_lock; Rules 3, 5)."""
        if self._pollers or not self._asleep:
            return _WAKE_NEVER
        return _WAKE_ALWAYS if self._blocked else _WAKE_URGENT

    def poll(self) -> bool:
        """One progress pass from the calling thread, unless another thread is in one."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self._closed is None and self._pass()
        finally:
            self._lock.release()

    def _ring_bell(self, li: int, urgent: bool = False) -> None:
        """Bump local rank ``li``'s doorbell; wake its progress thread if it asked to be
        woken for this (``urgent``: a stalled ring, see Rule 5)."""
        self._words[self._bell_at[li]] = (int(self._words[self._bell_at[li]]) + 1) & 0xFFFFFFFF
        _wait.fence()
        flag = self._words[self._sleep_at[li]]
        if flag == _WAKE_ALWAYS or (urgent and flag == _WAKE_URGENT):
            _wait.futex_wake(self._bell_addr[li])

    def _run(self) -> None:
        s = _wait.spec()
        next_live = time.monotonic() + s.liveness_s
        my_bell = self._bell_addr[self.li]
        while self._closed is None:
            seen = int(self._words[self._bell_at[self.li]])
            with self._lock:
                if self._closed is not None:
                    break
                progressed = self._pass()
                busy = self._busy()
                now = time.monotonic()
                if not progressed and busy and now >= next_live:
                    next_live = now + s.liveness_s
                    self._check_peers()
            if progressed and not (self._pollers and self._step_aside):
                continue
            # Nothing moved: sleep on the doorbell at once. No spinning here: a
            # spinning thread would hold the GIL that a waiting user thread (which
            # drives progress itself, see Handle.wait) needs.
            with self._flag_lock:
                self._asleep = True
                self._words[self._sleep_at[self.li]] = self._wake_flag()
            _wait.fence()
            if int(self._words[self._bell_at[self.li]]) == seen and self._closed is None:
                _wait.futex_wait(my_bell, seen, s.liveness_s if busy else 1.0)
            with self._flag_lock:
                self._asleep = False
                self._words[self._sleep_at[self.li]] = _WAKE_NEVER

    def _busy(self) -> bool:
        return bool(self._posted or self._cma_sends or any(self._sendq.values())
                    or any(m is not None for m in self._incoming.values()))

    def _pass(self) -> bool:
        progressed = False
        for j in self._sendq:
            progressed |= self._send_queued(j)
        for j in self._in:
            while self._pull(j):
                progressed = True
        return progressed

    def _send_queued(self, j: int) -> bool:
        """Push what is queued for local rank ``j``, in order, as far as its ring allows;
        whether anything moved."""
        queue = self._sendq[j]
        progressed = False
        while queue:
            moved, done = self._push(j, queue[0])
            progressed |= moved
            if not done:
                break
            op = queue.popleft()
            if op.handle is not None:
                op.handle._finish()
        return progressed

    def _push(self, j: int, op: _SendOp) -> tuple[bool, bool]:
        head_v, tail_v, data, waiting_v = self._out[j]
        if waiting_v[0]:
            waiting_v[0] = 0
        head, tail = int(head_v[0]), int(tail_v[0])
        free = self.ring_bytes - (head - tail)
        moved = 0
        if not op.header_sent:
            if free < _HEADER.size:
                return False, False
            self._write(data, head, np.frombuffer(op.header, np.uint8))
            head += _HEADER.size
            free -= _HEADER.size
            moved += _HEADER.size
            op.header_sent = True
        n = min(free, op.data.nbytes - op.sent)
        if n > 0:
            self._write(data, head, op.data[op.sent:op.sent + n])
            op.sent += n
            head += n
            moved += n
        done = op.header_sent and op.sent == op.data.nbytes
        if moved:
            head_v[0] = head  # after the data: the consumer trusts bytes below head
        if moved or not done:
            # A stalled message needs the consumer to drain even while it computes.
            self._ring_bell(j, urgent=not done)
        if not done:
            # Ring full: ask the consumer to ring our doorbell when it frees space
            # (Rule 4), then look once more in case it freed some meanwhile.
            waiting_v[0] = 1
            _wait.fence()
            if int(tail_v[0]) != tail:
                more, done = self._push(j, op)
                return moved > 0 or more, done
        return moved > 0, done

    def _space_freed(self, j: int, waiting_v: memoryview) -> None:
        """After consuming: wake the producer only if it waits for space (Rule 4)."""
        _wait.fence()
        if waiting_v[0]:
            self._ring_bell(j, urgent=True)

    def _write(self, ring: np.ndarray, pos: int, src: np.ndarray) -> None:
        start = pos % self.ring_bytes
        first = min(src.nbytes, self.ring_bytes - start)
        ring[start:start + first] = src[:first]
        if first < src.nbytes:
            ring[: src.nbytes - first] = src[first:]

    def _read(self, ring: np.ndarray, pos: int, dst: np.ndarray) -> None:
        start = pos % self.ring_bytes
        first = min(dst.nbytes, self.ring_bytes - start)
        dst[:first] = ring[start:start + first]
        if first < dst.nbytes:
            dst[first:] = ring[: dst.nbytes - first]

    def _unpack(self, fmt: struct.Struct, ring: np.ndarray, pos: int) -> tuple:
        """``fmt``'s fields at ring position ``pos`` (which may wrap around the end)."""
        start = pos % self.ring_bytes
        if start + fmt.size <= self.ring_bytes:
            return fmt.unpack_from(ring, start)
        raw = np.empty(fmt.size, np.uint8)
        self._read(ring, pos, raw)
        return fmt.unpack(raw.tobytes())

    def _pull(self, j: int) -> bool:
        head_v, tail_v, data, waiting_v = self._in[j]
        head, tail = int(head_v[0]), int(tail_v[0])
        avail = head - tail
        if avail <= 0:
            return False
        msg = self._incoming[j]
        if msg is None:
            if avail < _HEADER.size:
                return False
            group, kind, tag, nbytes, mode = self._unpack(_HEADER, data, tail)
            if kind == _KIND_FIN:
                tail += _HEADER.size
                tail_v[0] = tail
                self._space_freed(j, waiting_v)
                sent = self._cma_sends.pop(tag, None)
                if sent is None:
                    # A compiled batch gave up waiting for this FIN and has not
                    # registered its send yet (adopt_address_send finds it here).
                    self._early_fins.add(tag)
                else:
                    sent[1]._finish()
                return True
            if mode == _MODE_CMA:
                if avail < _HEADER.size + _CMA.size:
                    return False  # the sender writes header and address together
                cma_fields = self._unpack(_CMA, data, tail + _HEADER.size)
                tail += _HEADER.size + _CMA.size
                tail_v[0] = tail
                self._space_freed(j, waiting_v)
                msg = _Incoming(group, kind, tag, self.ranks[j], nbytes)
                msg.cma = cma_fields
                self._match(msg)
                return True
            tail += _HEADER.size
            avail -= _HEADER.size
            msg = _Incoming(group, kind, tag, self.ranks[j], nbytes)
            self._match(msg)
            self._incoming[j] = msg
        n = min(avail, msg.nbytes - msg.got)
        if n > 0:
            if msg.dest is not None:
                self._read(data, tail, msg.dest[msg.got:msg.got + n])
            msg.got += n  # (a message with no destination is being discarded)
            tail += n
        tail_v[0] = tail
        self._space_freed(j, waiting_v)
        if msg.got == msg.nbytes:
            self._incoming[j] = None
            self._complete(msg)
        return True

    def _match(self, msg: _Incoming) -> None:
        for recv in self._posted:
            if recv.matches(msg.group, msg.kind, msg.tag, msg.src):
                self._posted.remove(recv)
                recv.handle.source = msg.src
                if recv.dest.nbytes != msg.nbytes:
                    msg.error = self._size_error(recv, msg)
                    recv.handle._finish(msg.error)
                    msg.dest = None  # discard the payload
                    if msg.cma is not None:
                        self._cma_finish(msg)
                    return
                msg.recv = recv
                msg.dest = recv.dest
                if msg.cma is not None:
                    self._cma_copy(msg, recv)
                return
        if msg.cma is None:
            msg.dest = np.empty(msg.nbytes, np.uint8)
        else:
            msg.got = msg.nbytes  # nothing to stream: complete until a receive claims it
        self._unexpected.append(msg)

    def _cma_copy(self, msg: _Incoming, recv: _RecvOp) -> None:
        """Copy a single-copy message straight from the sender into ``recv``, then FIN it."""
        assert msg.cma is not None
        error: BaseException | None = None
        if msg.nbytes:
            try:
                cma.read(self.liveness.pids[msg.src], msg.cma[0], recv.dest)
            except OSError as exc:
                error = PeerGoneError(f"{recv.handle.describe}: could not copy from rank "
                                      f"{msg.src}: {exc}", peer=msg.src)
        self._cma_finish(msg)
        recv.handle._finish(error)

    def _cma_finish(self, msg: _Incoming) -> None:
        assert msg.cma is not None
        header = _HEADER.pack(0, _KIND_FIN, msg.cma[1], 0, 0)
        j = self.local[msg.src]
        self._sendq[j].append(_SendOp(header, np.empty(0, np.uint8), None))
        # Out at once: the receive is complete, and its process may return and exit
        # before any further pass, leaving the sender waiting for a FIN that never comes.
        self._send_queued(j)

    def _complete(self, msg: _Incoming) -> None:
        if msg.error is not None:
            return
        recv = msg.recv
        if recv is None:
            return  # unexpected, still waiting for its receive
        if msg in self._unexpected:  # claimed while still streaming
            self._unexpected.remove(msg)
            if msg.nbytes:
                recv.dest[:] = msg.dest
        recv.handle._finish()

    def _check_peers(self) -> None:
        waiting = {self.ranks[j] for j, q in self._sendq.items() if q}
        for r in self._posted:
            if r.src is None:
                waiting.update(r.handle.peers)
            else:
                waiting.add(r.src)
        waiting |= {self.ranks[j] for j, m in self._incoming.items() if m is not None}
        waiting |= {peer for peer, _, _ in self._cma_sends.values()}
        self._reap_locked(self.liveness.dead(waiting - self._gone))

    def reap(self, dead: Sequence[int]) -> None:
        """Fail every operation waiting on one of the ``dead`` ranks (a waiting thread
        calls this when its liveness check finds them gone)."""
        if all(peer in self._gone for peer in dead):
            return
        with self._lock:
            self._reap_locked(dead)

    def _reap_locked(self, dead: Sequence[int]) -> None:
        dead = [peer for peer in dead if peer not in self._gone]
        if not dead or self._closed is not None:  # closed: fail_all finished everything
            return
        while self._pass():  # what they sent before they died is still in the rings
            pass
        for peer in dead:
            self._peer_gone(peer)

    def _peer_gone(self, peer: int) -> None:
        self._gone.add(peer)
        j = self.local[peer]

        def error(what: str) -> PeerGoneError:
            return PeerGoneError(f"{what}: rank {peer} exited", peer=peer)

        for op in self._sendq[j]:
            if op.handle is not None:
                op.handle._finish(error(op.handle.describe))
        self._sendq[j].clear()
        for send_id, (dst, handle, _) in list(self._cma_sends.items()):
            if dst == peer:
                del self._cma_sends[send_id]
                handle._finish(error(handle.describe))
        for recv in [r for r in self._posted
                     if r.src == peer or (r.src is None and peer in r.handle.peers)]:
            self._posted.remove(recv)
            recv.handle._finish(error(recv.handle.describe))
        msg = self._incoming[j]
        if msg is not None and msg.recv is not None:
            msg.recv.handle._finish(error(msg.recv.handle.describe))
        self._incoming[j] = None
        # Its complete messages stay claimable; a partial one or a single-copy one
        # (whose data is in the dead process) could only hang the receive that claims it.
        self._unexpected[:] = [m for m in self._unexpected  # (in place: ports hold it)
                               if m.src != peer or (m.cma is None and m.got == m.nbytes)]

    # ------------------------------------------------------------------ closing

    def fail_all(self, reason: BaseException, on_ops: Callable[[], None] | None = None) -> None:
        """Fail every pending operation with ``reason`` and stop the progress thread."""
        with self._lock:
            if self._closed is None:
                self._closed = reason
            for q in self._sendq.values():
                for op in q:
                    if op.handle is not None:
                        op.handle._finish(reason)
                q.clear()
            for _, handle, _ in self._cma_sends.values():
                handle._finish(reason)
            self._cma_sends.clear()
            for recv in self._posted:
                recv.handle._finish(reason)
            self._posted.clear()
        self._ring_bell(self.li, urgent=True)
        _wait.futex_wake(self._bell_addr[self.li])  # whatever its flag says: it must stop

    def close(self) -> None:
        """Stop the progress thread; pending operations fail with GroupAbortedError."""
        self.fail_all(GroupAbortedError("the process group was destroyed"))
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
