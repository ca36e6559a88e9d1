"""Run one schedule for every rank of a group in one process: the executable semantics of ``_plan``.

Theory of operation
-------------------
Each rank's generator is a small state machine that moves through
*fetch* (resume the generator for its next round) -> *comms* (the round's
sends and receives are posted and wait to be paired) -> *then* (local and
arena steps, one at a time) -> *fetch* ... -> *done*. A scheduler picks which
rank moves next (``order``); with ``order="random"`` a rank may run as far
ahead as its waits allow, so a schedule that relies on luck produces wrong
data or a race report instead of passing by accident.

What the simulator enforces (each violation raises a :class:`ScheduleError`
naming the ranks and the round; "Rule n" in messages refers to ``_plan``'s
arena rules):

Matching: round ``i`` of rank ``a`` pairs with round ``i`` of rank
``b``; the k-th ``Send`` from ``a`` to ``b`` matches the k-th ``Recv`` from
``a`` on ``b``, with equal byte lengths. A rank that has nothing to do in a
round must still yield it (an empty ``Round()``), because the executor tags
messages with the round index; trailing empty rounds may be left out.
Sends are *rendezvous* (a send completes when its receive is posted), the
strictest transport behaviour, so a schedule that passes here also runs on
buffered transports.

Buffers: within one round no ``Recv`` buffer may overlap any other
comm buffer of that rank (the transport writes it while the others are read
or written); ``Copy``/``Reduce`` operands must be the same dtype and length
and must not partially overlap; sends to oneself are errors.

Arena: a slot of ``plan.slot_bytes`` per rank, filled with garbage
at the start; signal words only grow; ``Put``/``Get``/``ReduceSlots`` stay
inside the slot. The one-host fast paths' spaces work alike: a one-shot
region of ``plan.region_bytes`` per rank, and the buffer a rank exposed
(which its owner may also change through local steps, and peers through
``Write``). ``Enter`` blocks until every rank it awaits (all, unless
one-sided) has reached its own and then synchronises with them (what the
fingerprint exchange guarantees); a one-sided one after an ``Expose`` is an
error. With ``check_races`` every arena access is checked with
vector clocks: a ``Wait`` synchronises with the *earliest* signal that
satisfies it (the weakest guarantee real hardware gives), a ``Recv`` with
its sender. A read of slot bytes that the reader has not synchronised with
(``Put`` not ordered before it, or never written in this collective) and a
``Put`` over bytes a peer may still be reading (its read not ordered before
the ``Put``) are reported as :class:`RaceError`, whatever the interleaving;
so are writes into an exposed buffer (the owner's or a peer's ``Write``)
not ordered against another rank's read or write of those bytes.

Deadlock: when no rank can move, :class:`DeadlockError` lists every
unfinished rank's round and pending step.

The simulator also records one :class:`Event` per step (rank, round, kind,
peer, bytes, ...) in global order for the tracer, the visualizer and cost
models.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import ops
from . import _registry
from ._plan import (
    EXPOSED,
    REGION,
    SLOT,
    Copy,
    Enter,
    Expect,
    Expose,
    Get,
    Plan,
    Put,
    Recv,
    Reduce,
    ReduceSlots,
    Round,
    Send,
    Signal,
    Wait,
    Write,
    split_even,
)

# --------------------------------------------------------------------- errors


class ScheduleError(RuntimeError):
    """A schedule broke the rules of ``_plan`` (the message names ranks and round)."""


class MatchError(ScheduleError):
    """A send or receive has no partner in the same round, or the byte lengths differ."""


class DeadlockError(ScheduleError):
    """No rank can make progress; the message lists what each unfinished rank waits for."""


class RaceError(ScheduleError):
    """An arena access is not ordered by signals/waits against a conflicting one."""


# --------------------------------------------------------------------- events

EVENT_KINDS = ("send", "recv", "copy", "reduce", "put", "get", "reduce_slots", "signal", "wait",
               "enter", "expose", "write")


@dataclass(frozen=True, slots=True)
class Event:
    """One executed step, in global simulation order.

    Attributes:
        tick: position in the global order (0, 1, 2, ...).
        rank: the rank that ran the step.
        round: index of the round on that rank.
        kind: one of :data:`EVENT_KINDS`.
        peer: the other rank (send/recv: the partner; get: the slot owner; write: the
            owner of the exposed buffer), else -1.
        nbytes: bytes moved, reduced or written (0 for signal/wait).
        ranks: slots read by reduce_slots, ranks waited on by wait.
        own: reduce_slots took my own operand from my own array (ReduceSlots.own), not
            from my slot; ``ranks`` then leaves me out.
        offset: byte offset in a slot (put/get/reduce_slots), else -1.
        phase: the phase of a signal or wait, else 0.
        space: the memory put/get/reduce_slots address (``_plan.SPACES``), else "".
    """

    tick: int
    rank: int
    round: int
    kind: str
    peer: int = -1
    nbytes: int = 0
    ranks: tuple[int, ...] = ()
    offset: int = -1
    phase: int = 0
    space: str = ""
    own: bool = False


@dataclass
class SimResult:
    """What :func:`simulate` returns.

    Attributes:
        label: ``"coll/name"`` of the schedule.
        plans: the plans it ran on (outputs hold the results).
        events: every executed step in global order.
        rounds: rounds yielded per rank.
        regions: each rank's one-shot region as the schedule left it, the bytes it
            never wrote masked (known when races are checked, the default).
    """

    label: str
    plans: list[Plan]
    events: list[Event]
    rounds: list[int]
    regions: list[np.ma.MaskedArray] = field(default_factory=list)

    @property
    def outputs(self) -> list[np.ndarray | None]:
        """Each rank's ``plan.output``."""
        return [plan.output for plan in self.plans]

    def count(self, kind: str, rank: int | None = None) -> int:
        """Number of events of ``kind`` (on one rank, or all)."""
        return sum(1 for e in self.events if e.kind == kind and (rank is None or e.rank == rank))


# ------------------------------------------------------------------- helpers


def _raw(buf: np.ndarray, what: str | Callable[[], str]) -> np.ndarray:
    """The bytes of a flat contiguous buffer as a uint8 view (``what`` names it in errors)."""
    if not isinstance(buf, np.ndarray) or not buf.flags.c_contiguous:
        where = what() if callable(what) else what
        kind = type(buf).__name__ if not isinstance(buf, np.ndarray) else "non-contiguous array"
        raise ScheduleError(f"{where}: buffers must be contiguous NumPy arrays, got {kind}")
    return buf.reshape(-1).view(np.uint8)


def _span(buf: np.ndarray) -> tuple[int, int]:
    start = buf.__array_interface__["data"][0]
    return start, start + buf.nbytes


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    a0, a1 = _span(a)
    b0, b1 = _span(b)
    return a.nbytes > 0 and b.nbytes > 0 and a0 < b1 and b0 < a1


def garbage(n: int, dtype: np.dtype) -> np.ndarray:
    """``n`` elements that no correct schedule leaves in an output (NaN, 0xA5.. bytes, True)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.ones(n, dtype=dtype)
    if dtype.kind in "fc":
        return np.full(n, np.nan, dtype=dtype)
    out = np.empty(n, dtype=dtype)
    out.view(np.uint8)[:] = 0xA5
    return out


# --------------------------------------------------------------- rank state

_FETCH, _COMMS, _THEN, _DONE = "fetch", "comms", "then", "done"


@dataclass(eq=False)
class _Rank:
    rank: int
    plan: Plan
    gen: Iterator[Round]
    clock: np.ndarray
    idx: int = -1  # current round (comms/then) or last completed round (fetch)
    stage: str = _FETCH
    rnd: Round | None = None
    pc: int = 0
    by_peer: dict[int, tuple[list[Send], list[Recv]]] = field(default_factory=dict)
    pending: set[int] = field(default_factory=set)
    phase: int = 0
    sig_phases: list[int] = field(default_factory=list)
    sig_clocks: list[np.ndarray] = field(default_factory=list)
    arrived: np.ndarray | None = None  # my clock when I reached Enter (None: not yet)
    entered: bool = False  # past my Enter (every rank arrived)
    exposure: _Slot | None = None  # the buffer I exposed, with its race shadow


class _Slot:
    """One rank's arena slot (or one-shot region, or exposed buffer) plus the race
    detector's shadow state, grown on demand."""

    def __init__(self, size: int, limit: int, owner: int, kind: str = SLOT) -> None:
        self.size = size
        self.limit = limit
        self.owner = owner
        self.kind = kind  # a _plan.SPACES name, for messages
        self.data = np.empty(0, dtype=np.uint8)
        # step counters as int32: p * p * extent of them per collective adds up
        self.last_write = np.empty(0, dtype=np.int32)
        self.writer = np.empty(0, dtype=np.int32)  # who wrote each byte last (Write: a peer)
        self.last_read = np.empty((size, 0), dtype=np.int32)

    @classmethod
    def exposing(cls, size: int, owner: int, buf: np.ndarray, clock: int) -> _Slot:
        """The shadow of ``buf`` exposed by ``owner``: valid as of its step ``clock``."""
        slot = cls(size, buf.nbytes, owner, EXPOSED)
        slot.data = buf.reshape(-1).view(np.uint8)
        slot.last_write = np.full(buf.nbytes, clock, dtype=np.int32)
        slot.writer = np.full(buf.nbytes, owner, dtype=np.int32)
        slot.last_read = np.full((size, buf.nbytes), -1, dtype=np.int32)
        return slot

    def ensure(self, hi: int) -> None:
        n = len(self.data)
        if hi <= n:
            return
        m = min(self.limit, max(hi, 2 * n, 256))
        self.data = np.concatenate([self.data, np.full(m - n, 0xA5, dtype=np.uint8)])
        self.last_write = np.concatenate([self.last_write, np.full(m - n, -1, dtype=np.int32)])
        self.writer = np.concatenate([self.writer, np.full(m - n, self.owner, dtype=np.int32)])
        pad = np.full((self.size, m - n), -1, dtype=np.int32)
        self.last_read = np.concatenate([self.last_read, pad], axis=1)


# ---------------------------------------------------------------- simulator


class _Simulator:
    def __init__(
        self,
        schedules: Sequence[Iterator[Round]],
        plans: Sequence[Plan],
        label: str,
        check_races: bool,
    ) -> None:
        p = len(plans)
        self.p = p
        self.label = label
        self.plans = list(plans)
        self.check_races = check_races
        self.ranks = [
            _Rank(r, plans[r], iter(schedules[r]), np.zeros(p, dtype=np.int64)) for r in range(p)
        ]
        self.slot_bytes = plans[0].slot_bytes if plans else 0
        self.region_bytes = plans[0].region_bytes if plans else 0
        self.slots = [_Slot(p, self.slot_bytes, r) for r in range(p)]
        self.regions = [_Slot(p, self.region_bytes, r, REGION) for r in range(p)]
        self.events: list[Event] = []

    # ---------------------------------------------------------- messages

    def where(self, st: _Rank) -> str:
        return f"{self.label}: rank {st.rank} round {st.idx}"

    def fail(self, cls: type[ScheduleError], st: _Rank, message: str) -> None:
        raise cls(f"{self.where(st)}: {message}")

    def tick(self, st: _Rank, kind: str, **kw: Any) -> None:
        st.clock[st.rank] += 1
        self.events.append(Event(len(self.events), st.rank, st.idx, kind, **kw))

    # --------------------------------------------------------- progress

    def advance(self, st: _Rank) -> bool:
        """Do one unit of work on ``st``; False if it is blocked or done."""
        if st.stage == _FETCH:
            self.fetch(st)
            return True
        if st.stage == _COMMS:
            if st.pending:
                return False
            st.stage = _THEN
            return True
        if st.stage == _THEN:
            assert st.rnd is not None
            if st.pc == len(st.rnd.then):
                st.stage = _FETCH
                return True
            step = st.rnd.then[st.pc]
            if isinstance(step, Enter):
                return self.enter(st)
            if isinstance(step, Wait) and not self.satisfied(step):
                return False
            self.run_local(st, step)
            st.pc += 1
            return True
        return False

    def enter(self, st: _Rank) -> bool:
        """``Enter``: arrive (once), then pass when every rank it awaits has arrived,
        synchronised with those only (a one-sided round relies on nothing else)."""
        if st.entered:
            self.fail(ScheduleError, st, "Enter twice: a call has one entry")
        assert st.rnd is not None
        awaits = st.rnd.then[st.pc].awaits
        awaited = self.ranks if awaits is None else [self.ranks[r] for r in awaits
                                                     if 0 <= r < self.p]
        if st.arrived is None:
            self.need_fast_path_host(st, "Enter")
            if awaits is not None and len(awaited) != len(awaits):
                self.fail(ScheduleError, st, f"Enter awaits {awaits}: not ranks of the group")
            if awaits is not None and st.exposure is not None and len(set(awaits)) < self.p:
                self.fail(ScheduleError, st, "a one-sided Enter after Expose: the rank may "
                          "return while peers still use its buffer (Rule 4)")
            self.tick(st, "enter")
            st.arrived = st.clock.copy()
            return True
        if any(other.arrived is None for other in awaited):
            return False
        for other in awaited:
            np.maximum(st.clock, other.arrived, out=st.clock)
        st.entered = True
        st.pc += 1
        return True

    def fetch(self, st: _Rank) -> None:
        try:
            rnd = next(st.gen)
        except StopIteration:
            st.stage = _DONE
            self.check_nobody_waits(st, st.idx + 1, finished=True)
            return
        except ScheduleError:
            raise
        except Exception as exc:
            raise ScheduleError(
                f"{self.label}: rank {st.rank} failed building round {st.idx + 1}: {exc!r}"
            ) from exc
        st.idx += 1
        if not isinstance(rnd, Round):
            self.fail(ScheduleError, st, f"yielded {type(rnd).__name__}, not a Round")
        st.rnd, st.pc = rnd, 0
        self.post(st)

    def post(self, st: _Rank) -> None:
        """Post the round's comms and pair them with peers already in the same round."""
        assert st.rnd is not None
        by_peer: dict[int, tuple[list[Send], list[Recv]]] = {}
        for step in st.rnd.comms:
            if not isinstance(step, (Send, Recv)):
                self.fail(ScheduleError, st, f"{type(step).__name__} is not a comm step")
            if not 0 <= step.peer < self.p or step.peer == st.rank:
                self.fail(ScheduleError, st, f"{type(step).__name__} to invalid peer {step.peer}")
            _raw(step.buf, lambda step=step: f"{self.where(st)}: {type(step).__name__}")
            sends, recvs = by_peer.setdefault(step.peer, ([], []))
            (sends if isinstance(step, Send) else recvs).append(step)
        for step in st.rnd.then:
            if isinstance(step, (Send, Recv)):
                self.fail(ScheduleError, st, f"{type(step).__name__} in then=; put it in the comms")
        self.check_comm_overlap(st)
        st.by_peer = by_peer
        st.pending = set(by_peer)
        st.stage = _COMMS if by_peer else _THEN
        self.check_nobody_waits(st, st.idx, finished=False)
        for q in sorted(by_peer):
            other = self.ranks[q]
            if other.stage == _COMMS and other.idx == st.idx:
                self.pair(st, other)
            elif (
                other.stage == _DONE
                or other.idx > st.idx
                or (other.idx == st.idx and other.stage != _COMMS)
            ):
                state = "has finished" if other.stage == _DONE else f"is past round {st.idx}"
                self.fail(
                    MatchError,
                    st,
                    f"{self.describe(by_peer[q])} rank {q} has no partner: rank {q} {state} "
                    f"without a comm with rank {st.rank} in round {st.idx}",
                )

    def check_nobody_waits(self, st: _Rank, idx: int, finished: bool) -> None:
        """Fail if a rank posted round ``idx`` with comms to ``st`` that ``st`` does not have."""
        for other in self.ranks:
            if other is st or other.stage != _COMMS or st.rank not in other.pending:
                continue
            if other.idx < idx or finished or (other.idx == idx and other.rank not in st.by_peer):
                what = (
                    "has finished"
                    if finished
                    else f"round {idx} has no comm with rank {other.rank}"
                )
                raise MatchError(
                    f"{self.where(other)}: {self.describe(other.by_peer[st.rank])} rank "
                    f"{st.rank} has no partner: rank {st.rank} {what}"
                )

    @staticmethod
    def describe(pair: tuple[list[Send], list[Recv]]) -> str:
        sends, recvs = pair
        parts = []
        if sends:
            parts.append(f"{len(sends)} send(s) of {[s.buf.nbytes for s in sends]} bytes to")
        if recvs:
            parts.append(f"{len(recvs)} recv(s) of {[r.buf.nbytes for r in recvs]} bytes from")
        return " and ".join(parts) if parts else "comms with"

    def check_comm_overlap(self, st: _Rank) -> None:
        assert st.rnd is not None
        comms = [c for c in st.rnd.comms if c.buf.nbytes]
        if not any(isinstance(c, Recv) for c in comms):
            return  # sends may share buffers (e.g. one buffer sent to every peer)
        spans = [_span(c.buf) for c in comms]  # computed once: _span is the costly part
        for i, a in enumerate(comms):
            if not isinstance(a, Recv):
                continue
            a0, a1 = spans[i]
            for j, (b0, b1) in enumerate(spans):
                if i != j and a0 < b1 and b0 < a1:
                    b = comms[j]
                    self.fail(
                        ScheduleError,
                        st,
                        f"Recv buffer from rank {a.peer} overlaps the buffer of "
                        f"{type(b).__name__} {'to' if isinstance(b, Send) else 'from'} rank "
                        f"{b.peer} in the same round",
                    )

    def pair(self, a: _Rank, b: _Rank) -> None:
        """Match and deliver every comm between ``a`` and ``b`` in their (common) round."""
        for src, dst in ((a, b), (b, a)):
            sends = src.by_peer.get(dst.rank, ([], []))[0]
            recvs = dst.by_peer.get(src.rank, ([], []))[1]
            sizes_s = [s.buf.nbytes for s in sends]
            sizes_r = [r.buf.nbytes for r in recvs]
            if sizes_s != sizes_r:
                raise MatchError(
                    f"{self.label}: round {a.idx}: rank {src.rank} sends {sizes_s} bytes to rank "
                    f"{dst.rank}, which receives {sizes_r} bytes from it"
                )
            for s, r in zip(sends, recvs):
                _raw(r.buf, "Recv")[:] = _raw(s.buf, "Send")
                self.tick(src, "send", peer=dst.rank, nbytes=s.buf.nbytes)
                self.tick(dst, "recv", peer=src.rank, nbytes=r.buf.nbytes)
            if sends:
                np.maximum(dst.clock, src.clock, out=dst.clock)
        a.pending.discard(b.rank)
        b.pending.discard(a.rank)

    # ------------------------------------------------------------ local

    def satisfied(self, step: Wait) -> bool:
        return all(self.ranks[q].phase >= step.phase for q in step.ranks)

    def run_local(self, st: _Rank, step: Any) -> None:
        if isinstance(step, Copy):
            self.check_operands(st, step.dst, step.src, "Copy")
            self.local_write(st, step.dst)
            np.copyto(step.dst, step.src)
            self.tick(st, "copy", nbytes=step.dst.nbytes)
        elif isinstance(step, Reduce):
            self.check_operands(st, step.dst, step.src, "Reduce")
            if st.plan.op is None:
                self.fail(ScheduleError, st, "Reduce in a plan without an op")
            self.local_write(st, step.dst)
            ops.reduce_into(st.plan.op, step.dst, step.src)
            self.tick(st, "reduce", nbytes=step.dst.nbytes)
        elif isinstance(step, Put):
            src = _raw(step.src, lambda: f"{self.where(st)}: Put")
            if step.space == EXPOSED:
                self.fail(ScheduleError, st, "Put into an exposed buffer: use Write")
            space = self.space(st, st.rank, step.space, "Put")
            slot = self.slot_range(st, space, step.offset, len(src), "Put")
            self.tick(st, "put", nbytes=len(src), offset=step.offset, space=step.space)
            self.race_write(st, space, step.offset, len(src))
            slot[:] = src
        elif isinstance(step, Get):
            dst = _raw(step.dst, lambda: f"{self.where(st)}: Get")
            raw = self.read_peer(st, step, len(dst), "Get")
            self.local_write(st, step.dst)
            dst[:] = raw
        elif isinstance(step, Expect):  # (a program's: see _plan.Expect)
            value = _raw(step.value, lambda: f"{self.where(st)}: Expect")
            if not np.array_equal(self.read_peer(st, step, len(value), "Expect"), value):
                self.fail(ScheduleError, st, f"Expect: rank {step.peer}'s bytes at "
                                             f"{step.offset} are not what the program presumes")
        elif isinstance(step, Write):
            src = _raw(step.src, lambda: f"{self.where(st)}: Write")
            space = self.space(st, step.peer, EXPOSED, "Write")
            raw = self.slot_range(st, space, step.offset, len(src), "Write")
            self.tick(st, "write", peer=step.peer, nbytes=len(src), offset=step.offset,
                      space=EXPOSED)
            self.race_write(st, space, step.offset, len(src))
            raw[:] = src
        elif isinstance(step, Expose):
            if st.exposure is not None or st.arrived is not None:
                self.fail(ScheduleError, st, "Expose twice, or after Enter")
            if not (st.plan.single_copy or st.plan.symmetric):
                self.fail(ScheduleError, st, "Expose needs plan.single_copy or plan.symmetric "
                                             "(a host or buffers that let peers reach it)")
            _raw(step.buf, lambda: f"{self.where(st)}: Expose")
            self.tick(st, "expose", nbytes=step.buf.nbytes)
            st.exposure = _Slot.exposing(self.p, st.rank, step.buf, int(st.clock[st.rank]))
        elif isinstance(step, ReduceSlots):
            self.reduce_slots(st, step)
        elif isinstance(step, Signal):
            if step.phase < 1 or step.phase < st.phase:
                self.fail(
                    ScheduleError,
                    st,
                    f"Signal({step.phase}) after phase {st.phase}: "
                    "phases start at 1 and never go down",
                )
            self.tick(st, "signal", phase=step.phase)
            self.need_signals(st, "Signal")
            st.phase = step.phase
            st.sig_phases.append(step.phase)
            st.sig_clocks.append(st.clock.copy())
        elif isinstance(step, Wait):
            self.need_signals(st, "Wait")
            for q in step.ranks:
                if not 0 <= q < self.p:
                    self.fail(ScheduleError, st, f"Wait on invalid rank {q}")
                other = self.ranks[q]
                if q != st.rank:  # synchronise with the earliest signal that satisfies the wait
                    at = bisect.bisect_left(other.sig_phases, step.phase)
                    np.maximum(st.clock, other.sig_clocks[at], out=st.clock)
            self.tick(st, "wait", ranks=tuple(step.ranks), phase=step.phase)
        else:
            self.fail(ScheduleError, st, f"unknown step {type(step).__name__}")

    def check_operands(self, st: _Rank, dst: np.ndarray, src: np.ndarray, what: str) -> None:
        if dst.dtype != src.dtype or dst.shape != src.shape:
            self.fail(
                ScheduleError,
                st,
                f"{what}: dst {dst.dtype}[{dst.size}] and src {src.dtype}[{src.size}] differ",
            )
        if _overlap(dst, src) and _span(dst) != _span(src):
            self.fail(ScheduleError, st, f"{what}: dst and src overlap partially")

    def need_arena(self, st: _Rank, what: str) -> None:
        if self.slot_bytes <= 0:
            self.fail(ScheduleError, st, f"{what} needs an arena but plan.slot_bytes is 0")

    def need_fast_path_host(self, st: _Rank, what: str) -> None:
        """The fast paths' own steps (the entry, regions, exposures) exist only in their
        described schedules: a plan without one-shot regions or exposures (what the
        executor runs) must not use them (_plan, "The one-host fast paths")."""
        plan = st.plan
        if not (plan.region_bytes > 0 or plan.single_copy or plan.symmetric):
            self.fail(ScheduleError, st, f"{what} is a fast-path step, but the plan has no "
                                         "one-shot regions or exposures")

    def need_signals(self, st: _Rank, what: str) -> None:
        """Signal words are the arena's: there is one if the plan has slots or the
        schedule entered the call itself (the entry is the arena's)."""
        if st.arrived is None:
            self.need_arena(st, what)

    def read_peer(self, st: _Rank, step: Get | Expect, n: int, what: str) -> np.ndarray:
        """The ``n`` bytes a Get or Expect reads from its peer's memory (ticked and
        race-checked as a read)."""
        space = self.space(st, step.peer, step.space, what)
        raw = self.slot_range(st, space, step.offset, n, what)
        self.tick(st, "get", peer=step.peer, nbytes=n, offset=step.offset, space=step.space)
        self.race_read(st, space, step.offset, n)
        return raw

    def space(self, st: _Rank, owner: int, space: str, what: str) -> _Slot:
        """Rank ``owner``'s memory of kind ``space`` (``_plan.SPACES``)."""
        if not 0 <= owner < self.p:
            self.fail(ScheduleError, st, f"{what} from invalid rank {owner}")
        if space == SLOT:
            self.need_arena(st, what)
            return self.slots[owner]
        if space == REGION:
            if self.region_bytes <= 0:
                self.fail(ScheduleError, st, f"{what} needs one-shot regions but "
                                             "plan.region_bytes is 0")
            return self.regions[owner]
        if space != EXPOSED:
            self.fail(ScheduleError, st, f"{what} in unknown space {space!r}")
        exposure = self.ranks[owner].exposure
        if exposure is None:
            self.fail(ScheduleError, st, f"{what}: rank {owner} has exposed no buffer")
        assert exposure is not None
        return exposure

    def slot_range(self, st: _Rank, slot: _Slot, offset: int, n: int, what: str) -> np.ndarray:
        if offset < 0 or offset + n > slot.limit:
            self.fail(
                ScheduleError,
                st,
                f"{what} of {n} bytes at offset {offset} is outside the {slot.limit}-byte "
                f"{slot.kind} of rank {slot.owner}",
            )
        slot.ensure(offset + n)
        return slot.data[offset : offset + n]

    def local_write(self, st: _Rank, dst: np.ndarray) -> None:
        """Note a local step's write into my own exposed buffer (peers may read it)."""
        exposure = st.exposure
        if exposure is None or not dst.nbytes or not len(exposure.data):
            return
        d0, d1 = _span(dst)
        e0, e1 = _span(exposure.data)
        lo, hi = max(d0, e0), min(d1, e1)
        if lo < hi:
            self.race_write(st, exposure, lo - e0, hi - lo)

    def reduce_slots(self, st: _Rank, step: ReduceSlots) -> None:
        dst = step.dst
        _raw(dst, lambda: f"{self.where(st)}: ReduceSlots")
        if not step.ranks:
            self.fail(ScheduleError, st, "ReduceSlots over no ranks")
        if st.plan.op is None:
            self.fail(ScheduleError, st, "ReduceSlots in a plan without an op")
        n = dst.nbytes
        own = step.own
        mine = own is not None and st.rank in step.ranks
        self.tick(st, "reduce_slots", nbytes=n, offset=step.offset, space=step.space, own=mine,
                  ranks=tuple(q for q in step.ranks if not (mine and q == st.rank)))
        if own is not None:
            _raw(own, lambda: f"{self.where(st)}: ReduceSlots' own operand")
            if own.nbytes != n or own.dtype != dst.dtype:
                self.fail(ScheduleError, st, "ReduceSlots' own operand is not like its dst")
        operands = []
        for q in step.ranks:
            if q == st.rank and own is not None:
                operands.append(own.copy())  # (my own array, not staged: no race to check)
                continue
            space = self.space(st, q, step.space, "ReduceSlots")
            raw = self.slot_range(st, space, step.offset, n, "ReduceSlots")
            self.race_read(st, space, step.offset, n)
            operands.append(raw.copy().view(dst.dtype))  # copy: aligned, and immune to aliasing
        self.local_write(st, dst)
        ops.reduce_many(st.plan.op, dst, operands)

    # ------------------------------------------------------------ races

    def race_write(self, st: _Rank, slot: _Slot, lo: int, n: int) -> None:
        if not self.check_races or n == 0:
            return
        seen = slot.last_read[:, lo : lo + n].max(axis=1)
        late = np.flatnonzero(seen > st.clock)
        late = late[late != st.rank]
        if len(late):
            q = int(late[0])
            raise RaceError(
                f"{self.where(st)}: writes bytes [{lo}, {lo + n}) of rank {slot.owner}'s {slot.kind} "
                f"that rank {q} may still be reading (rank {q} read them at its step {seen[q]}, "
                f"rank {st.rank} has synchronised with rank {q} only up to step {st.clock[q]}): "
                f"wait for a phase rank {q} signals after that read (Rule 2)"
            )
        self.ordered_after_writes(st, slot, lo, n, "writes")
        slot.last_write[lo : lo + n] = st.clock[st.rank]
        slot.writer[lo : lo + n] = st.rank

    def ordered_after_writes(self, st: _Rank, slot: _Slot, lo: int, n: int, verb: str) -> None:
        """Fail unless every write of bytes ``[lo, lo + n)`` by another rank happened
        before ``st``'s current step (Rule 3; an exposed buffer has many writers)."""
        written, writer = slot.last_write[lo : lo + n], slot.writer[lo : lo + n]
        late = np.flatnonzero((writer != st.rank) & (written > st.clock[writer]))
        if len(late):
            q, at = int(writer[late[0]]), int(written[late[0]])
            raise RaceError(
                f"{self.where(st)}: {verb} bytes [{lo}, {lo + n}) of rank {slot.owner}'s {slot.kind} "
                f"written by rank {q} at its step {at}, but rank {st.rank} has synchronised "
                f"with rank {q} only up to step {st.clock[q]}: wait for a phase rank "
                f"{q} signals after that write (Rule 3)"
            )

    def race_read(self, st: _Rank, slot: _Slot, lo: int, n: int) -> None:
        if not self.check_races or n == 0:
            return
        written = slot.last_write[lo : lo + n]
        if written.min() < 0:
            first = lo + int(np.flatnonzero(written < 0)[0])
            raise RaceError(
                f"{self.where(st)}: reads byte {first} of rank {slot.owner}'s {slot.kind}, which "
                f"nothing wrote in this collective (stale data)"
            )
        self.ordered_after_writes(st, slot, lo, n, "reads")
        slot.last_read[st.rank, lo : lo + n] = st.clock[st.rank]

    # ------------------------------------------------------------ driver

    def run(self, order: str, seed: int, max_units: int) -> None:
        rng = random.Random(seed)
        ranks = list(self.ranks)
        units = 0
        while True:
            live = [st for st in ranks if st.stage != _DONE]
            if not live:
                return
            if order == "random":
                rng.shuffle(live)
            elif order == "reverse":
                live.reverse()
            moved = False
            for st in live:
                if order == "lockstep":
                    budget = 1
                elif order == "random":
                    budget = 1 + int(rng.expovariate(0.25))  # bursts let a rank run ahead
                else:  # greedy/reverse: run each rank until it blocks
                    budget = max_units
                while budget and self.advance(st):
                    moved = True
                    budget -= 1
                    units += 1
                    if units > max_units:
                        raise ScheduleError(
                            f"{self.label}: more than {max_units} steps; runaway schedule?"
                        )
            if not moved:
                raise DeadlockError(self.deadlock_report())

    def deadlock_report(self) -> str:
        lines = [f"{self.label}: deadlock, no rank can make progress:"]
        for st in self.ranks:
            if st.stage == _DONE:
                continue
            if st.stage == _COMMS:
                peers = []
                for q in sorted(st.pending):
                    other = self.ranks[q]
                    where = (
                        "finished"
                        if other.stage == _DONE
                        else f"at round {other.idx} ({other.stage})"
                    )
                    peers.append(f"{self.describe(st.by_peer[q])} rank {q} (rank {q} is {where})")
                lines.append(f"  rank {st.rank} round {st.idx}: waiting for " + "; ".join(peers))
            else:
                assert st.rnd is not None
                step = st.rnd.then[st.pc]
                if isinstance(step, Enter):
                    missing = [o.rank for o in self.ranks if o.arrived is None]
                    lines.append(f"  rank {st.rank} round {st.idx} step {st.pc}: Enter; "
                                 f"ranks {missing} never entered")
                    continue
                assert isinstance(step, Wait)
                have = {
                    q: self.ranks[q].phase for q in step.ranks if self.ranks[q].phase < step.phase
                }
                lines.append(
                    f"  rank {st.rank} round {st.idx} step {st.pc}: Wait(ranks={tuple(step.ranks)}, "
                    f"phase={step.phase}); still below: {have}"
                )
        return "\n".join(lines)


ORDERS = ("lockstep", "greedy", "reverse", "random")


def run(
    fn: Callable[[Plan], Iterator[Round]],
    plans: Sequence[Plan],
    *,
    label: str = "schedule",
    order: str = "lockstep",
    seed: int = 0,
    check_races: bool = True,
    max_units: int = 10_000_000,
) -> SimResult:
    """Run schedule function ``fn`` on every plan (one per rank) in memory.

    Args:
        fn: ``fn(plan) -> Iterator[Round]``, e.g. a registered algorithm.
        plans: one plan per rank, ``plans[r].rank == r``.
        label: names the schedule in error messages.
        order: ``"lockstep"`` (ranks take turns one step at a time),
            ``"greedy"`` / ``"reverse"`` (each rank runs until it blocks, in
            rank order / reverse order), or ``"random"`` (random rank order and
            random bursts, from ``seed``).
        seed: seed of ``order="random"``.
        check_races: check every arena access with vector clocks (see module doc).
        max_units: bound on executed units (guards against runaway generators).

    Returns:
        A :class:`SimResult`; the results are in the plans' outputs.

    Raises:
        MatchError, DeadlockError, RaceError, ScheduleError: the schedule is wrong.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    plans = list(plans)
    for r, plan in enumerate(plans):
        if plan.rank != r or plan.size != len(plans):
            raise ValueError(
                f"plans[{r}] has rank {plan.rank} size {plan.size}; expected {r}, {len(plans)}"
            )
        if (plan.slot_bytes, plan.region_bytes) != (plans[0].slot_bytes, plans[0].region_bytes):
            raise ValueError("every plan of one call must have the same slot_bytes and "
                             "region_bytes")
    sim = _Simulator([fn(plan) for plan in plans], plans, label, check_races)
    sim.run(order, seed, max_units)
    regions = [np.ma.masked_array(r.data.copy(), mask=r.last_write < 0) for r in sim.regions]
    return SimResult(label, plans, sim.events, [st.idx + 1 for st in sim.ranks], regions)


def simulate(coll: str, name: str, plans: Sequence[Plan], **kwargs: Any) -> SimResult:
    """Run registered algorithm ``coll``/``name`` on ``plans`` (one per rank); see :func:`run`."""
    entry = _registry.get(coll, name)
    for plan in plans:
        if plan.coll != coll:
            raise ValueError(f"plan for {plan.coll!r} passed to {coll}/{name}")
    return run(entry.fn, plans, label=entry.qualname, **kwargs)


# ------------------------------------------------------------- plan builder

SLOT_BYTES = 1 << 12  # the arena slot of simulated one-host calls: many chunks at small sizes
REGION_BYTES = 1 << 16  # the one-shot region of simulated calls (the runtime's: arena.oneshot_bytes)


def host_options(family: str) -> dict[str, Any]:
    """The :func:`make_plans` keywords of a group a family's schedules can run on:
    none for ``p2p``; an arena for ``arena``; for a described fast path also the
    one-shot regions, and the host capability or buffers it needs."""
    if family == "p2p":
        return {}
    if family == "arena":
        return {"slot_bytes": SLOT_BYTES}
    return {"slot_bytes": SLOT_BYTES, "region_bytes": REGION_BYTES,
            "single_copy": family == "cma", "symmetric": family == "symmetric"}



def make_plans(
    coll: str,
    size: int,
    inputs: Sequence[np.ndarray | None] | None = None,
    *,
    dtype: Any = None,
    op: Any = None,
    root: int = -1,
    counts: Sequence[int] | None = None,
    send_counts: Sequence[Sequence[int]] | None = None,
    in_place: bool = False,
    slot_bytes: int = 0,
    segment_bytes: int = 1 << 20,
    region_bytes: int = 0,
    single_copy: bool = False,
    symmetric: bool = False,
    root_splits: bool = False,
) -> list[Plan]:
    """Build one plan per rank with garbage-filled outputs and scratch (for tests, CLI, viz).

    Args:
        coll: the collective.
        size: number of ranks.
        inputs: per-rank data, as the user would pass it: broadcast reads
            ``inputs[root]``; scatter reads the flat ``inputs[root]``; all_to_all
            reads each rank's flat input; barrier needs none.
        dtype: element dtype (default: that of the first input).
        op: reduce op for reducing collectives.
        root: root of rooted collectives.
        counts: per-rank piece counts (gather, all_gather, scatter,
            reduce_scatter); default equal pieces.
        send_counts: all_to_all: ``send_counts[r][q]`` elements from ``r`` to ``q``
            (default: equal splits of each input).
        in_place: output aliases input where the collective allows it
            (all_reduce; all_gather; reduce, gather and scatter on the root).
        slot_bytes, segment_bytes, region_bytes, single_copy, symmetric, root_splits:
            copied into every plan.
    """
    first = next((x for x in inputs or () if x is not None), None)
    dt = np.dtype(dtype if dtype is not None else (first.dtype if first is not None else np.uint8))
    op = ops.ReduceOp.coerce(op) if op is not None else None

    def scratch(n: int) -> np.ndarray:
        return garbage(n, dt)

    def plan(r: int, x: np.ndarray | None, out: np.ndarray | None, **kw: Any) -> Plan:
        return Plan(
            coll,
            r,
            size,
            dt,
            op=op,
            root=root,
            input=x,
            output=out,
            slot_bytes=slot_bytes,
            segment_bytes=segment_bytes,
            region_bytes=region_bytes,
            single_copy=single_copy,
            symmetric=symmetric,
            root_splits=root_splits,
            scratch=scratch,
            **kw,
        )

    def data(r: int) -> np.ndarray:
        x = inputs[r] if inputs is not None else None
        return np.array(x if x is not None else [], dtype=dt)

    plans = []
    if coll == "barrier":
        return [plan(r, None, None) for r in range(size)]
    if coll == "broadcast":
        src = data(root)
        for r in range(size):
            plans.append(plan(r, None, src.copy() if r == root else garbage(len(src), dt)))
        return plans
    if coll in ("reduce", "all_reduce"):
        for r in range(size):
            x = data(r)
            if coll == "reduce" and r != root:
                plans.append(plan(r, x, None))
            elif in_place:
                plans.append(plan(r, x, x))
            else:
                plans.append(plan(r, x, garbage(len(x), dt)))
        return plans
    if coll in ("gather", "all_gather"):
        cs = tuple(counts) if counts is not None else tuple(len(data(r)) for r in range(size))
        offsets = np.concatenate([[0], np.cumsum(cs)]).astype(int)
        for r in range(size):
            x = data(r)
            if coll == "gather" and r != root:
                plans.append(plan(r, x, None, counts=cs))
                continue
            out = garbage(int(offsets[-1]), dt)
            if in_place:
                out[offsets[r] : offsets[r + 1]] = x
                x = out[offsets[r] : offsets[r + 1]]
            plans.append(plan(r, x, out, counts=cs))
        return plans
    if coll in ("scatter", "reduce_scatter"):
        if coll == "scatter":
            total = len(data(root))
        else:
            total = len(data(0))
        cs = tuple(counts) if counts is not None else tuple(n for _, n in split_even(total, size))
        offsets = np.concatenate([[0], np.cumsum(cs)]).astype(int)
        for r in range(size):
            if coll == "scatter":
                x = data(r) if r == root else None
                out = garbage(cs[r], dt)
                if in_place and r == root:
                    out = x[offsets[r] : offsets[r + 1]]
            else:
                x, out = data(r), garbage(cs[r], dt)
            plans.append(plan(r, x, out, counts=cs))
        return plans
    if coll == "all_to_all":
        if send_counts is None:
            send_counts = [[n for _, n in split_even(len(data(r)), size)] for r in range(size)]
        matrix = [tuple(int(c) for c in row) for row in send_counts]
        for r in range(size):
            recv = tuple(matrix[q][r] for q in range(size))
            plans.append(
                plan(r, data(r), garbage(sum(recv), dt), counts=matrix[r], recv_counts=recv)
            )
        return plans
    raise ValueError(f"unknown collective {coll!r}")


__all__ = [
    "EVENT_KINDS",
    "ORDERS",
    "DeadlockError",
    "Event",
    "MatchError",
    "RaceError",
    "ScheduleError",
    "SimResult",
    "SLOT_BYTES",
    "REGION_BYTES",
    "garbage",
    "host_options",
    "make_plans",
    "run",
    "simulate",
]
