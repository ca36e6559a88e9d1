"""A group's shared arena on one host: signal words, fingerprints, an abort flag and data slots.

Theory of operation
-------------------
Layout (every field on its own 64-byte line so writers never share a line)::

    line 0          abort word (u32), then the abort message (up to 960 bytes)
    rank lines      per rank r: signal word (u64) at +0, "sleeping on" word (u32) at +8
    fingerprints    per rank r, two 64-byte entries, indexed by seq parity
    slots           per rank r, ``slot_bytes`` bytes, page aligned

Rule 1: rank r is the only writer of its signal word, its sleeping word, its
fingerprints and its slot. Anyone may set the abort word.

Rule 2: a signal word holds ``(seq << 24) | phase`` and only grows. Entering
collective ``seq`` (phase 0) means "I finished reading every slot for
``seq - 1``", which is why a schedule's first phase is 1 and why slots can be
reused without further handshakes (see algorithms/_plan.py).

Rule 3: fingerprints are double-buffered by seq parity: a rank can be at most
one collective ahead of the slowest rank that still reads its fingerprint,
because entering ``seq + 1`` requires everyone to have entered ``seq``.

One-sided rounds (the compiled lane's broadcast and scatter roots and reduce
non-roots, see ``_tiny.c``) signal and return without waiting for the other
ranks, and wait at the start of the rank's next call on the group instead
(:meth:`Arena.settle`), before it writes anything here: Rules 2 and 3 then hold
as if the round had been waited out. A mismatch or a dead peer found by that wait is raised by the next
call, naming the call it belongs to (MPI's eager sends report late the same way).

Waiting uses meshcast._wait.wait_until with a futex on the low 32 bits of the
peer's signal word; a waiter publishes which rank it sleeps on so a signaller
only makes the wake syscall when someone sleeps.
"""

from __future__ import annotations

import functools
import struct
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _wait
from .._fingerprint import SIZE as FP_SIZE
from .._fingerprint import Fingerprint, compare, counts_hash
from ..errors import CommTimeout, GroupAbortedError, MeshcastError, MismatchError
from . import compiled_helper
from .segment import Segment

_LINE = 64
_PAGE = 4096
_PHASE_BITS = 24
_MSG_BYTES = 960
_COUNT = 16  # byte offset of the count field in a packed fingerprint
SMALL_BYTES = 1 << 20  # per rank and parity: the largest one-shot contribution
_EXPOSED = struct.Struct("<QQQ")  # see Arena.expose
_U64 = struct.Struct("<Q")
assert FP_SIZE + _EXPOSED.size <= _LINE


def oneshot_bytes(slot_bytes: int) -> int:
    """Bytes of each one-shot region of an arena with ``slot_bytes`` slots (none
    without slots: a world of one, or MESHCAST_SLOT_BYTES=0)."""
    return SMALL_BYTES if slot_bytes else 0


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _compiled_round(segment: Segment, rank: int, n: int, ranks_off: int, fp_off: int,
                    small_off: int, small_bytes: int) -> object | None:
    """The compiled helper's ``Round`` for this arena, or None (not built, turned off
    with MESHCAST_COMPILED=0, or a single rank, which never signals)."""
    _tiny = compiled_helper("_tiny") if n > 1 else None
    if _tiny is None:
        return None
    yield_ns = int(_wait.spec().yield_s * 1e9)
    return _tiny.Round(segment.address, n, rank, ranks_off, fp_off, small_off, small_bytes,
                       FP_SIZE, yield_ns, segment)


class Arena:
    """The shared control block and slots of one group on one host.

    Args:
        segment: mapped segment of at least ``Arena.size(n, slot_bytes)`` bytes.
        rank: this process's group rank; ``n`` the group size.
        global_ranks: global rank of each group rank (for messages and liveness).
        liveness: pid table for noticing dead peers.
        name: the group's name, for messages.
    """

    @staticmethod
    def layout(n: int, slot_bytes: int) -> tuple[int, int, int, int, int]:
        ranks_off = 16 * _LINE
        fp_off = ranks_off + n * _LINE
        small_off = _align(fp_off + 2 * n * _LINE, _PAGE)
        small_bytes = oneshot_bytes(slot_bytes)
        slots_off = small_off + n * 2 * small_bytes
        total = slots_off + n * _align(slot_bytes, _PAGE)
        return ranks_off, fp_off, small_off, slots_off, total

    @classmethod
    def size(cls, n: int, slot_bytes: int) -> int:
        return cls.layout(n, slot_bytes)[4]

    def __init__(self, segment: Segment, rank: int, n: int, slot_bytes: int,
                 global_ranks: Sequence[int], liveness: _wait.Liveness, name: str,
                 timeout: float = 300.0) -> None:
        self.segment = segment
        self.timeout = timeout  # the group's: how long a one-sided round's end may wait
        self.rank = rank
        self.n = n
        self.slot_bytes = slot_bytes
        self.global_ranks = list(global_ranks)
        self.liveness = liveness
        self.name = name
        ranks_off, fp_off, small_off, slots_off, _ = self.layout(n, slot_bytes)
        self._abort = segment.view(0, 4, np.uint32)
        self._abort_msg = segment.view(_LINE, _MSG_BYTES)
        lines = segment.view(ranks_off, n * _LINE, np.uint64).reshape(n, _LINE // 8)
        self._words = lines[:, 0]
        self._sleeping = lines[:, 1]  # low half of the second u64: the u32 at +8
        # (the u64 at +16 is the compiled stager's progress: see pipelined copies in _tiny.c)
        self._word_addr = [segment.address + ranks_off + r * _LINE for r in range(n)]
        self._fp_off = fp_off
        stride = _align(slot_bytes, _PAGE)
        self.slots = [segment.view(slots_off + r * stride, slot_bytes) for r in range(n)]
        # One-shot regions for tiny calls, two per rank (by seq parity; see oneshot()).
        self.small_bytes = oneshot_bytes(slot_bytes)
        self.small = [[segment.view(small_off + (r * 2 + p) * self.small_bytes, self.small_bytes)
                       for p in (0, 1)] for r in range(n)]
        self._fp_tables = [segment.view(fp_off + p * _LINE, n * 2 * _LINE)
                           .reshape(n, 2 * _LINE)[:, :FP_SIZE] for p in (0, 1)]
        # Plain memoryviews of the same memory for the tiny-call paths (tiny_oneshot):
        # item access on them costs a fraction of a NumPy scalar access.
        self._mv = memoryview(segment.bytes)
        self._abort_word = memoryview(segment.bytes[0:4]).cast("I")
        self._qwords = memoryview(segment.bytes[ranks_off:ranks_off + n * _LINE]).cast("Q")
        self._fp_at = [[fp_off + p * _LINE + r * 2 * _LINE for r in range(n)] for p in (0, 1)]
        self.seq = 0
        self.deadline = float("inf")
        self.what = name
        # The compiled round of the tiny calls (transport/_tiny.c), if built and wanted.
        compiled = _compiled_round(segment, rank, n, ranks_off, fp_off, small_off,
                                   self.small_bytes)
        self._compiled = compiled
        if compiled is not None:  # (weakly: the arena's life is its group's)
            compiled.settle_slow = functools.partial(_settle_rest, weakref.ref(self))  # type: ignore[attr-defined]
        self._round = None if compiled is None else compiled.run  # type: ignore[attr-defined]
        self.compiled_oneshot = None if compiled is None else compiled.oneshot  # type: ignore[attr-defined]
        self.compiled_rooted = None if compiled is None else compiled.rooted  # type: ignore[attr-defined]
        # program(seq, fp or tail, spin_ns, packed program, inp, out, kernel, start): a
        # one-shot program run by the interpreter, its entry included (run_program)
        self.compiled_program = None if compiled is None else compiled.program  # type: ignore[attr-defined]
        # alike(pieces, like, writable): a gather/scatter root's list checked in one call
        self.compiled_alike = None if compiled is None else compiled.alike  # type: ignore[attr-defined]
        # same_start(a, b): whether two arrays start at one address (lanes._in_place)
        self.compiled_same = None if compiled is None else compiled_helper("_tiny").same_start
        # an uneven all_to_all's checks and copies after its entry (uneven_all_to_all)
        self.compiled_splits = None if compiled is None else compiled.splits  # type: ignore[attr-defined]
        # single-copy reads, then a round (paths.single_copy.run)
        self.compiled_reads = None if compiled is None else compiled.reads  # type: ignore[attr-defined]
        self._spec = _wait.spec()  # the process's wait settings (spin budget)
        self.spin_ns = int(self._spec.spin_s * 1e9)  # the compiled helper's spin budget

    # ------------------------------------------------------------------ signals

    def _value(self, phase: int) -> int:
        return (self.seq << _PHASE_BITS) | phase

    def signal(self, phase: int) -> None:
        """Publish ``(current seq, phase)``; wakes ranks sleeping on this rank."""
        # Words through the memoryview: item access costs a fraction of NumPy's.
        q, me = self._qwords, self.rank
        q[me * 8] = (self.seq << _PHASE_BITS) | phase
        _wait.fence()  # the store above before reading the sleeping words
        for r in range(self.n):
            if q[r * 8 + 1] == me + 1:
                _wait.futex_wake(self._word_addr[me])
                break

    def wait(self, ranks: Sequence[int], phase: int) -> None:
        """Block until every rank in ``ranks`` signalled ``phase`` or later in this seq."""
        target = (self.seq << _PHASE_BITS) | phase
        q = self._qwords
        for r in ranks:
            if q[r * 8] < target:
                self._wait_one(r, target, ranks, phase)

    def _wait_one(self, r: int, target: int, ranks: Sequence[int], phase: int) -> None:
        words = self._words
        addr = self._word_addr[r]

        def block(timeout: float) -> None:
            seen = int(words[r])
            self._sleeping[self.rank] = r + 1
            _wait.fence()
            if int(words[r]) == seen and not self._abort[0]:
                _wait.futex_wait(addr, seen & 0xFFFFFFFF, timeout)
            self._sleeping[self.rank] = 0

        q = self._qwords
        at = r * 8
        try:
            _wait.wait_until(
                lambda: q[at] >= target,
                deadline=self.deadline,
                describe=lambda: f"{self.what} (phase {phase})",
                pending=lambda: [self.global_ranks[p] for p in ranks if words[p] < target],
                liveness=self.liveness,
                block=block,
                check_abort=self.check_abort,
            )
        except CommTimeout as exc:
            # Say where the late ranks are: their signal words and fingerprints are here.
            late = [p for p in ranks if words[p] < target]
            where = "; ".join(self.position(p) for p in late)
            exc = CommTimeout(f"{exc}; {where}" if where else str(exc),
                              waiting_on=exc.waiting_on)
            self.abort(f"rank {self.global_ranks[self.rank]}: {exc}")
            raise exc from None
        except MeshcastError as exc:
            if not isinstance(exc, (GroupAbortedError, MismatchError)):
                self.abort(f"rank {self.global_ranks[self.rank]}: {exc}")
            raise

    def position(self, r: int) -> str:
        """Where group rank ``r`` is, from its signal word and fingerprint, in words
        ("rank 2 has not entered this call; its last one here: broadcast #16
        (phase 1)"), for timeout messages."""
        word = int(self._words[r])
        seq, phase = word >> _PHASE_BITS, word & ((1 << _PHASE_BITS) - 1)
        who = f"rank {self.global_ranks[r]}"
        if seq == 0:
            return f"{who} has not entered any call on {self.name}"
        at = self._fp_at[seq & 1][r]
        fp = Fingerprint.unpack(bytes(self._mv[at:at + FP_SIZE]))
        call = f"{fp.kind} #{seq}" if fp.seq == seq else f"call #{seq}"
        if seq < self.seq:
            return f"{who} has not entered this call; its last one here: {call} (phase {phase})"
        return f"{who} is in this call, at phase {phase}"

    # ---------------------------------------------------------- entry and abort

    def settle(self) -> None:
        """Finish this rank's pending one-sided round, if any (see the module's
        theory): every Python path calls this before it writes into the arena.

        Raises:
            what the round would have raised (MismatchError, CommTimeout,
            PeerGoneError, GroupAbortedError), naming that call.
        """
        compiled = self._compiled
        if compiled is not None and compiled.pending:
            compiled.settle(self.spin_ns)

    def settle_rest(self, seq: int, packed: bytes, what: object,
                    tails: tuple[bytes, ...] | None = None, root: int = -1) -> None:
        """The end of call ``seq``'s one-sided round (``what`` names the call, ``packed``
        is this rank's fingerprint; ``tails``, a rooted call's: every rank's fingerprint
        after the seq, and ``root`` its root) where the compiled settle found a rank
        late or a fingerprint different: wait until every rank entered the call
        (liveness, the group's timeout from now, abort), then compare as the round
        would have. The call under way keeps its seq, deadline and name."""
        current = self.seq, self.deadline, self.what
        self.seq, self.what = seq, what  # type: ignore[assignment]
        self.deadline = time.monotonic() + self.timeout
        try:
            self.wait(range(self.n), 0)
            if tails is None:
                table = self._fp_tables[seq & 1]
                if table.tobytes() != packed * self.n:
                    self._compare(table, seq, False, -1)
                return
            mv, prefix = self._mv, packed[:8]
            if not all(mv[a:a + 8] == prefix and mv[a + 8:a + FP_SIZE] == t
                       for a, t in zip(self._fp_at[seq & 1], tails)):
                self.compare_entered(seq, True, root)
        finally:
            self.seq, self.deadline, self.what = current

    def enter(self, fp: Fingerprint, what: str, deadline: float, *,
              per_rank_counts: bool = False, root_layout: int = -1) -> list[int]:
        """Start collective ``fp.seq``: publish and compare fingerprints (phase 0).

        Args:
            fp: this rank's fingerprint of the call.
            what: text naming the call, for messages.
            deadline: absolute deadline of the whole call.
            per_rank_counts: ranks may legitimately pass different ``count``
                values (gather, scatter, uneven all_gather...); compare
                everything but the count.
            root_layout: for gather/scatter, the root's group rank: only the
                root knows the list sizes, so it publishes their digest in
                ``extra`` and every rank checks it against the counts the ranks
                actually passed (the same verdict and message on every rank).

        Returns:
            every rank's ``count`` field, in group-rank order (so a root learns
            the others' piece sizes with no extra message).

        Raises:
            MismatchError: ranks called different collectives / shapes / ops / roots.
            CommTimeout, PeerGoneError: a rank never arrived.
            GroupAbortedError: another rank aborted the group.
        """
        self.settle()
        self.check_abort()
        self.seq = fp.seq
        self.deadline = deadline
        self.what = what
        table = self._publish(fp)
        if self.n == 1:
            self._words[0] = self._value(0)
            return [fp.count]
        self.signal(0)
        self.wait(range(self.n), 0)
        return self._compare(table, fp.seq, per_rank_counts, root_layout)

    def oneshot(self, fp: Fingerprint, what: str, deadline: float,
                per_rank_counts: bool = False) -> None:
        """The entry of a one-shot call: fingerprint, one signal, wait, compare.

        The caller has written its data into its one-shot region of parity
        ``seq & 1`` (``small[rank][seq & 1]``) before; this publishes the
        fingerprint, signals ``(seq, 1)`` and waits for everyone's. Once it
        returns, every rank's region of that parity holds that rank's data
        (read them before returning from the collective). Having seen
        ``(seq, 1)`` from all ranks means they all finished ``seq - 1``, so
        when this rank reuses a region of the same parity at ``seq + 2``
        nobody still reads it.

        Raises:
            the same errors as :meth:`enter`.
        """
        self.settle()
        self.check_abort()
        self.seq = fp.seq
        self.deadline = deadline
        self.what = what
        table = self._publish(fp)
        self.signal(1)
        if self.n > 1:
            self.wait(range(self.n), 1)
            self._compare(table, fp.seq, per_rank_counts, -1)

    def set_pids(self, pids: tuple[int, ...]) -> None:
        """Every rank's process id (by rank): where the compiled interpreter's copies from
        and into a peer's exposed buffer go (single-copy programs); nothing without it."""
        if self._compiled is not None:
            self._compiled.pids = pids  # type: ignore[attr-defined]

    def run_program(self, program: bytes, fp: Fingerprint, what: str, deadline: float,
                    buffers: tuple, kernel: int, per_rank_counts: bool,
                    one_sided: bool = False) -> None:
        """Run a packed one-shot program (``_execute.pack_program``) on ``buffers`` (the
        call's flat input and output, C-contiguous, or None) in the compiled interpreter
        (``Round.program`` in _tiny.c), its entry the round of :meth:`oneshot` with
        fingerprint ``fp``, with the same rules and errors.
        ``kernel``: the fold's code (``ops.compiled_kernel``), -1 for none.
        ``one_sided``: a one-sided entry of the program awaits only its ranks (a
        synchronous call, whose errors may come at the next call); otherwise every rank.

        Raises:
            the errors of :meth:`oneshot`.
        """
        seq, packed = fp.seq, fp.pack()
        inp, out = buffers
        status = self._compiled.program(  # type: ignore[union-attr]
            seq, packed, self.spin_ns, program, inp, out, kernel, 0,
            what if one_sided else None)
        if status:
            self.program_rest(seq, packed, what, deadline, program, inp, out, kernel, status,
                              per_rank_counts)

    def program_rest(self, seq: int, packed: bytes, what: object, deadline: float,
                     program: bytes, inp: Any, out: Any, kernel: int, status: int,
                     per_rank_counts: bool = False) -> None:
        """The rest of a compiled program (``compiled_program``) that returned ``status``
        (nonzero: the round could not finish in C, a rank being late, fingerprints
        differing or the group aborted): the round ends here in Python (its wait,
        liveness and ``deadline``, the comparison, the errors of :meth:`oneshot`), then
        the program resumes after its entry. ``packed``: the fingerprint, or its tail
        after ``seq`` (the tiny-call lane's); the other arguments are the compiled call's."""
        if len(packed) != FP_SIZE:
            packed = _U64.pack(seq) + packed
        self.seq, self.deadline, self.what = seq, deadline, what  # type: ignore[assignment]
        self._round_trip(seq, 1, packed, None, status & 7, compare=False)
        mv = self._mv
        if any(mv[a:a + FP_SIZE] != packed for a in self._fp_at[seq & 1]):
            self._compare(self._fp_tables[seq & 1], seq, per_rank_counts, -1)
        self._compiled.program(  # type: ignore[union-attr]
            seq, packed, self.spin_ns, program, inp, out, kernel, status >> 3)

    def tiny_oneshot(self, seq: int, tail: bytes, what: object, timeout: float,
                     data: Any) -> None:
        """:meth:`oneshot` for the tiny-call lane's calls that run no program (no
        compiled fold for their op, or no compiled helper): ``data`` (a C-contiguous
        array, a list of them staged one after the other, or None) into this rank's
        one-shot region of parity ``seq & 1``, the fingerprint ``seq`` then ``tail``
        published, phase 1 signalled and awaited, with the rules and errors of
        :meth:`oneshot` (the deadline ``timeout`` seconds from now; ``what``
        formatted on errors only). One compiled call where the helper is built. The
        caller then reads every rank's region of that parity."""
        run = self.compiled_oneshot
        status = None
        if run is not None:
            status = run(seq, tail, data, self.spin_ns)
            if status == 0:  # nothing went wrong: the call's seq, what and deadline
                return  # are needed by the slow path only
        self.oneshot_rest(seq, tail, what, timeout, data, status)

    def oneshot_rest(self, seq: int, tail: bytes, what: object, timeout: float,
                     data: np.ndarray | None, status: int | None) -> None:
        """:meth:`tiny_oneshot` where the compiled call (``compiled_oneshot``) did not finish
        the round: ``status`` is what it returned, or None when it did not run. Then
        the caller reads the regions of parity ``seq & 1``."""
        self.seq = seq
        self.deadline = time.monotonic() + timeout
        self.what = what  # type: ignore[assignment]
        self._round_trip(seq, 1, _U64.pack(seq) + tail, data, status)

    def rooted_entry(self, seq: int, tails: tuple[bytes, ...], what: object, timeout: float,
                     data: np.ndarray | tuple[np.ndarray, ...] | list[np.ndarray] | None,
                     exposure: tuple[int, int] | np.ndarray | None, status: int | None,
                     root: int,
                     use: Callable[..., None], *args: Any) -> list[int]:
        """The tiny-call lane's gather/scatter entry, where the compiled one
        (``compiled_rooted``, which the lane calls itself, since one Python frame is a
        tenth of an 8-byte gather) did not finish it: ``status`` is what that
        returned, or None when it did not run.

        With ``status`` None: stage ``data`` (one array, or a tuple or list of them,
        one after the other, where an int skips that many bytes) in my one-shot region,
        expose ``exposure`` (address, nbytes), or the array whose memory that is, as
        :meth:`expose` does; then publish ``seq`` and my tail
        (``tails[rank]``), signal phase 0 and wait for every rank's (the compiled
        call stopped somewhere along that way; this goes on from there).

        When every rank published its own tail (the call agrees everywhere),
        ``use(parity, *args)`` combines the regions of that parity, and it returns [].
        Otherwise nothing is combined and it returns every rank's count
        (:meth:`compare_entered`, the root's layout read from its tail), or raises
        the MismatchError every rank raises. ``timeout``: seconds from now.
        """
        self.seq = seq
        self.deadline = time.monotonic() + timeout
        self.what = what  # type: ignore[assignment]
        parity = seq & 1
        if status is None:  # what the compiled helper does before signalling
            self.settle()
            if self._abort_word[0]:
                self.check_abort()
            region, at = self.small[self.rank][parity], 0
            for part in (() if data is None else data if type(data) in (tuple, list)
                         else (data,)):
                if type(part) is int:  # bytes left as they are
                    at += part
                    continue
                nbytes = part.nbytes
                region[at:at + nbytes] = part.reshape(-1).view(np.uint8)
                at += nbytes
            if isinstance(exposure, np.ndarray):
                exposure = (exposure.ctypes.data, exposure.nbytes)
            if exposure is not None:
                self.expose(seq, *exposure)
        prefix = _U64.pack(seq)
        self._round_trip(seq, 0, prefix + tails[self.rank], None, status, compare=False)
        mv = self._mv
        if all(mv[a:a + 8] == prefix and mv[a + 8:a + FP_SIZE] == t
               for a, t in zip(self._fp_at[parity], tails)):
            use(parity, *args)
            return []
        return self.compare_entered(seq, True, root)

    def packed_enter(self, seq: int, packed: bytes, what: object, deadline: float) -> bool:
        """:meth:`enter` for the tiny-call lane, with the fingerprint already packed.

        Publishes ``packed``, signals phase 0 and waits for every rank's. Returns
        True when every rank published ``packed``: then the call agrees everywhere
        and every count is the one the caller expects. False means something
        differs; the caller compares with :meth:`compare_entered`, which raises or
        returns the counts. ``what`` is formatted on errors only.
        """
        self.seq = seq  # (the single-copy path that may follow reads them too)
        self.deadline = deadline
        self.what = what  # type: ignore[assignment]
        run = self._round
        status = None
        if run is not None:
            status = run(seq, 0, packed, None, self.spin_ns)
            if status == 0:  # every rank published what the caller expected of it
                return True
        return self.finish_entry(seq, packed, what, deadline, status)

    def finish_entry(self, seq: int, packed: bytes, what: object, deadline: float,
                     status: int | None) -> bool:
        """The rest of an entry (phase 0) of call ``seq`` (named ``what``, due by
        ``deadline``) that a compiled call began and returned ``status`` for (1 to 4;
        None: the whole entry in Python, publishing ``packed``): wait for every rank,
        then what :meth:`packed_enter` returns."""
        self.seq = seq
        self.deadline = deadline
        self.what = what  # type: ignore[assignment]
        self._round_trip(seq, 0, packed, None, status, compare=False)
        mv = self._mv
        return all(mv[a:a + FP_SIZE] == packed for a in self._fp_at[seq & 1])

    def _round_trip(self, seq: int, phase: int, packed: bytes, data: np.ndarray | None,
                    status: int | None, compare: bool = True) -> None:
        """The rest of a round the compiled helper began and returned ``status`` (1 to 4,
        see _tiny.c) for, or, with ``status`` None, the whole round in Python:
        copy ``data`` into my one-shot region, publish ``packed``, signal ``phase`` and
        wait for every rank's. Then (``compare``) raise on differing fingerprints as
        :meth:`enter` does. ``self.seq``, ``deadline`` and ``what`` are the call's."""
        parity = seq & 1
        if status is not None:
            if status == 3:
                self.check_abort()
            if status == 2:  # not everyone is there yet: the waiting primitive takes over
                self.wait(range(self.n), phase)
        else:
            self.settle()
            if self._abort_word[0]:
                self.check_abort()
            if data is not None:
                self.small[self.rank][parity][:data.nbytes] = data.reshape(-1).view(np.uint8)
            mine = self._fp_at[parity][self.rank]
            self._mv[mine:mine + FP_SIZE] = packed
            self.signal(phase)
            self.wait(range(self.n), phase)
        if not compare:
            return
        mv = self._mv
        for a in self._fp_at[parity]:
            if mv[a:a + FP_SIZE] != packed:
                self._compare(self._fp_tables[parity], seq, False, -1)
                break

    def compare_entered(self, seq: int, per_rank_counts: bool, root_layout: int = -1
                        ) -> list[int]:
        """After :meth:`packed_enter` returned False: what :meth:`enter` would have
        returned (every rank's count), or the MismatchError it would have raised."""
        return self._compare(self._fp_tables[seq & 1], seq, per_rank_counts, root_layout)

    def expose(self, seq: int, address: int, nbytes: int, meta: int = 0) -> None:
        """Tell the peers where call ``seq``'s data lies in this process (for
        single-copy reads, see cma.py), before entering the call.

        The three words sit in the unused tail of this rank's fingerprint entry of
        the call's parity, so they follow the fingerprints' Rule 3.
        """
        self.settle()
        at = self._fp_at[seq & 1][self.rank] + FP_SIZE
        self._mv[at:at + 24] = _EXPOSED.pack(address, nbytes, meta)

    def exposed(self, r: int, seq: int) -> tuple[int, int, int]:
        """``(address, nbytes, meta)`` that rank ``r`` exposed for call ``seq``."""
        at = self._fp_at[seq & 1][r] + FP_SIZE
        return _EXPOSED.unpack(self._mv[at:at + 24])

    def _publish(self, fp: Fingerprint) -> np.ndarray:
        at = self._fp_at[fp.seq & 1][self.rank]
        self._mv[at:at + FP_SIZE] = fp.pack()
        return self._fp_tables[fp.seq & 1]

    def _compare(self, table: np.ndarray, seq: int, per_rank_counts: bool, root_layout: int
                 ) -> list[int]:
        mine = table[self.rank]
        end = _COUNT + 8 if root_layout >= 0 else FP_SIZE  # extra is the root's alone
        if not per_rank_counts and root_layout < 0:
            # Hot path (every small call): one bytes comparison, no NumPy reductions.
            if table.tobytes() == mine.tobytes() * self.n:
                return []
            same = False
        elif per_rank_counts:
            # Bytes, not NumPy: a handful of short slices compare faster than two reductions.
            mv, at = self._mv, self._fp_at[seq & 1]
            me = at[self.rank]
            head, tail = mv[me:me + _COUNT], mv[me + _COUNT + 8:me + end]
            same = all(mv[a:a + _COUNT] == head and mv[a + _COUNT + 8:a + end] == tail
                       for a in at)
        else:
            same = (table == mine).all()
        if not same:
            # Counts stay as passed (they name what each rank called) though they need
            # not agree here: some other field differs, so this is a mismatch anyway.
            # (compare leaves out what only a gather's or scatter's root fills in)
            fps = [Fingerprint.unpack(table[r].tobytes()) for r in range(self.n)]
            try:
                compare(fps, self.global_ranks, self.name)
            except MismatchError as exc:
                # Usually every rank finds this itself; the abort also reaches a rank
                # that took another path (e.g. the one-shot one) and waits for more.
                self.abort(str(exc), mismatch=True)
                raise
        if not per_rank_counts and root_layout < 0:
            return []
        mv, at = self._mv, self._fp_at[seq & 1]
        result = [_U64.unpack_from(mv, a + _COUNT)[0] for a in at]
        if root_layout >= 0:
            expected = _U64.unpack_from(mv, at[root_layout] + _COUNT + 8)[0]
            if expected and expected != counts_hash(result):
                raise MismatchError(
                    f"collective #{seq} on {self.name}: the list sizes on the root (rank "
                    f"{self.global_ranks[root_layout]}) do not match what the ranks passed "
                    f"(element counts by rank: {result})")
        return result

    def abort(self, message: str, *, mismatch: bool = False) -> None:
        """Mark the group failed for every rank (first message wins) and wake all sleepers.

        With ``mismatch`` the other ranks raise MismatchError with the same
        message; otherwise GroupAbortedError.
        """
        if not self._abort[0]:
            data = message.encode()[:_MSG_BYTES - 1]
            self._abort_msg[:len(data)] = np.frombuffer(data, np.uint8)
            self._abort_msg[len(data)] = 0
            self._abort[0] = 2 if mismatch else 1
        _wait.fence()
        for addr in self._word_addr:
            _wait.futex_wake(addr)

    def aborted(self) -> str | None:
        if not self._abort[0]:
            return None
        raw = self._abort_msg.tobytes()
        return raw[:raw.index(0)].decode(errors="replace") if 0 in raw else raw.decode()

    def check_abort(self) -> None:
        """Raise GroupAbortedError if any rank aborted the group."""
        code = self._abort[0]
        if code == 2:
            raise MismatchError(self.aborted() or "ranks disagree")
        if code:
            raise GroupAbortedError(f"{self.name} was aborted: {self.aborted()}")


def _settle_rest(arena: weakref.ref, seq: int, packed: bytes, what: object,
                 tails: tuple[bytes, ...] | None, root: int) -> None:
    """The compiled Round's settle_slow: :meth:`Arena.settle_rest` of the arena, if alive."""
    live = arena()
    if live is not None:
        live.settle_rest(seq, packed, what, tails, root)
