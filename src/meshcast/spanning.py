"""``HostSpanningGroup``: a process group whose ranks live on more than one host.

It has the methods of :class:`~meshcast.group.ProcessGroup` (the front door
and the torch backend call it the same way) and runs every collective as a
composition (:mod:`meshcast.algorithms.hierarchical`) of

* ``local``: a ProcessGroup of the members on this host (shared memory);
* ``rail``: an inter-host communicator of the members with this rank's local
  index on every host (the leaders' one is rail 0);
* ``flat``: an inter-host communicator of every member (point-to-point, the
  collectives' own messages, and the whole-call ``flat`` family).

Agreement. Every call starts with an exchange of rows: a fingerprint (kind,
dtype, count, op, root), each rank's own piece size, and, when the call's
data is small (``algorithms.hierarchical.eager_cap``), the data
itself. (A mid-size all_reduce over MPI, family ``fused``, has no separate
exchange: its cells ride in its data's first messages, and a rank whose call
differs makes every rank run this exchange after all; see
``hierarchical.all_reduce_fused``. The direct rows' tag alternates with the
call's sequence number, so such a rank's row is told from the next call's.)
Every row says its own length, so ranks that disagree about the call still
exchange alike. Over MPI, in groups of at most
``hierarchical.AGREEMENT_FLAT_MAX`` ranks, every rank sends its row straight to
every other; otherwise rows are gathered to each host's leader over shared
memory, exchanged among the leaders (each host's rows back to back), broadcast
back inside each host (``hierarchical.agreement_route``). Every rank then holds
every rank's fingerprint and raises the same :class:`MismatchError`, or
learns the piece size of every rank (uneven all_gather, gather, scatter). No
data moves before the ranks agree, except an *eager* call's, whose result
every rank computes from the slots (``algorithms/eager.py``, in group-rank
order, so bitwise alike everywhere): an 8-byte all_reduce crosses hosts once;
and a ``fused`` all_reduce's, which combines nothing before every rank has seen
the cells agree.
The exchange doubles as the barrier.

Calls run one at a time in call order on the group's :class:`~meshcast._fifo.CallFifo`
(inline when idle, on its worker for ``async_op``), as on one host.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import config, ops
from ._fifo import call_fifo
from ._fingerprint import KINDS, Fingerprint, compare, counts_hash, path_digest
from ._fingerprint import SIZE as FP_SIZE
from .agreement_rows import _WORDS, CELL, ROW_LENGTH, _row_length
from .algorithms import eager as from_rows
from .algorithms import hierarchical as hier
from .algorithms._common import as_bytes
from .algorithms.hierarchical import Layout
from .buffers import Buffer, store_back, working_copy
from .errors import MismatchError, usage
from .group import GroupRanks, ProcessGroup
from .spanning_lane import AcrossHostsLane
from .trace.steps import StepNotes, Traced
from .transport.interhost import AGREE_TAGS, HostComm, Request
from .work import Work


class LocalOps:
    """:class:`~meshcast.algorithms.hierarchical.LocalOps` on a host-local ProcessGroup."""

    def __init__(self, pg: ProcessGroup) -> None:
        self.pg = pg
        self.size = pg.size()
        self._leader = pg.global_ranks[0]  # the tiny-call lane names roots by global rank
        self._slots: tuple[np.ndarray, list[np.ndarray] | None] | None = None

    def gather_slots(self, block: np.ndarray, slot: np.ndarray) -> None:
        """The agreement's local phase: every rank's ``slot`` to the leader's ``block``."""
        if self.size == 1:
            block[:slot.nbytes] = slot
            return
        if self._slots is None or self._slots[0] is not block:
            n = slot.nbytes
            self._slots = (block, [block[i * n:(i + 1) * n] for i in range(self.size)]
                           if self.pg.rank() == 0 else None)
        outs = self._slots[1]
        if not self.pg.lane.gather(slot, outs, self._leader):
            self.gather(outs, slot, 0)

    def broadcast_table(self, table: np.ndarray) -> None:
        """The agreement's last phase: the leader's ``table`` to every rank of the host."""
        if self.size > 1 and not self.pg.lane.broadcast(table, self._leader):
            self.broadcast(table, 0)

    @staticmethod
    def _buf(a: np.ndarray) -> Buffer:
        return Buffer(a, a.dtype.name, a.shape, a, staged=False)

    def reduce(self, w: np.ndarray, op: ops.ReduceOp, root: int) -> None:
        if self.size > 1:
            self.pg.reduce(self._buf(w), op, root)

    def broadcast(self, w: np.ndarray, root: int) -> None:
        if self.size > 1:
            self.pg.broadcast(self._buf(w), root)

    def all_gather(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int]) -> None:
        if self.size > 1:
            self.pg.all_gather(out, mine, list(counts), mine.dtype.name, _nothing)
        elif out is not mine:
            out[:] = mine

    def reduce_scatter(self, out: np.ndarray, w: np.ndarray, counts: Sequence[int],
                       op: ops.ReduceOp) -> None:
        if self.size > 1:
            self.pg.reduce_scatter(self._buf(out), w, list(counts), op, _nothing)
        else:
            out[:] = w

    def gather(self, outs: list[np.ndarray] | None, mine: np.ndarray, root: int) -> None:
        if self.size > 1:
            self.pg.gather(outs, mine, root, mine.dtype.name, _nothing,
                           expected_counts=[o.size for o in outs] if outs is not None else None)
        elif outs is not None:
            outs[0][:] = mine

    def scatter(self, out: np.ndarray, ins: list[np.ndarray] | None, root: int) -> None:
        if self.size > 1:
            flat = np.concatenate(ins) if ins is not None else None
            self.pg.scatter(out, flat, root, out.dtype.name, _nothing,
                            expected_counts=[i.size for i in ins] if ins is not None else None)
        elif ins is not None:
            out[:] = ins[0]


def _nothing() -> None:
    pass


_NO_BYTES = np.zeros(0, np.uint8)


class _Ctx:
    """One call's view of the group for the algorithms (hierarchical.Ctx)."""

    __slots__ = ("layout", "local", "rail", "leaders", "p2p", "flat", "notes")

    def __init__(self, group: HostSpanningGroup, deadline: float, what: str) -> None:
        self.notes: StepNotes | None = None  # a traced fused call's (_fused_ctx)
        self.layout = group.layout
        self.local = group.local_ops
        self.rail = group.rail.bind(deadline, what) if group.rail is not None else None
        self.leaders = self.rail if group._leaders is not None else None
        self.p2p = self.flat = group.flat.bind(deadline, what)


class HostSpanningGroup(GroupRanks):
    """A group of ranks on several hosts (see the module docstring).

    Attributes:
        layout: which group ranks live on which host.
        local: the ProcessGroup of this host's members.
        flat, rail: the inter-host communicators.
    """

    def __init__(self, *, group_id: int, name: str, global_ranks: Sequence[int], rank: int,
                 layout: Layout, local: ProcessGroup, flat: HostComm, rail: HostComm | None,
                 timeout: float, engine_name: str, hostnames: Sequence[str]) -> None:
        super().__init__(group_id, name, global_ranks, rank)
        self.layout = layout
        self.local = local
        self.local_ops = LocalOps(local)
        self.flat = flat
        self.rail = rail
        self.timeout = timeout
        self.internode = engine_name
        self.hostnames = list(hostnames)  # per host index, for messages
        self.fifo = call_fifo(name)
        self._seq = itertools.count(1)
        self._p2p_seq = itertools.count(1)
        self.last_algorithm: str | None = None
        self.store = local.store
        self._forced = _forced_families(config.get("MESHCAST_ALGO"))
        # The agreement exchange's buffers (calls of a group run one at a time). The
        # leader gathers its host's rows one slot apart (block), packs them back to back
        # into its host's part of the table (cap bytes a host), and the leaders exchange
        # those parts at the length they have.
        route = hier.agreement_route(flat.engine, self._size)
        self._flat_rows = route == "flat"
        self._row_steps = hier.agreement_steps(layout) if self._flat_rows else ()
        self._route = route
        # each kind's eager cap (read on every call of the general path)
        self._eager_caps = {kind: hier.eager_cap(kind, route, layout, flat.engine)
                            for kind in KINDS}
        self._slot_bytes = CELL + hier.largest_eager_cap(route)
        widest = max(len(h) for h in layout.hosts)
        self._cap = widest * self._slot_bytes
        self._slot = np.zeros(self._slot_bytes, np.uint8)
        self._slot_view = memoryview(self._slot)
        self._block = np.zeros(self._cap, np.uint8)
        self._table = np.zeros(len(layout.hosts) * self._cap, np.uint8)
        # read in place: a copy of the table (32 KiB a rank on the direct route) would
        # cost every call across hosts ~15 us of memory traffic per rank
        self._table_view = memoryview(self._table)
        self._host_sizes = [len(h) for h in layout.hosts]
        self._my_host = layout.host
        # where group rank g's row is among the rows read host by host
        order = [g for members in layout.hosts for g in members]
        self._row_of = [order.index(g) for g in range(self._size)]
        self._leaders = rail if layout.local == 0 else None
        self.lane = AcrossHostsLane(self)  # tiny synchronous calls, cached (spanning_lane)
        self._fused_plans = hier.fused_plans()  # the fused calls' (hierarchical)
        self._kept_ctx: _Ctx | None = None  # the fused calls' context (_fused_ctx)
        self.tracer: Any = None  # meshcast.trace.recorder.Tracer when MESHCAST_TRACE is set
        self._notes: tuple[int, StepNotes] | None = None  # the traced call's (_step_notes)

    def algorithm_names(self, kind: str) -> tuple[str, ...]:
        """The ``algorithm=`` names a call of ``kind`` accepts on this group."""
        return hier.families(kind)

    def __repr__(self) -> str:
        hosts = "+".join(str(len(h)) for h in self.layout.hosts)
        return (f"<HostSpanningGroup {self.group_name} rank {self._rank}/{self._size} "
                f"on {len(self.layout.hosts)} hosts ({hosts}), {self.internode}>")

    # ------------------------------------------------------------- machinery

    def _what(self, kind: str, seq: int) -> str:
        return f"{kind} #{seq} on {self.group_name} (rank {self.global_ranks[self._rank]})"

    def _family(self, kind: str, nbytes: int, algorithm: str | None) -> tuple[str, int]:
        """The family that runs the call, and the fingerprint's path byte: a family
        forced on one rank but not another (``algorithm=``, ``MESHCAST_ALGO``) would
        run different exchanges, so it is a MismatchError instead."""
        forced = algorithm or self._forced.get(kind)
        if not forced and kind in hier.CHOSEN_FROM_COUNTS:
            return "", 0  # the agreed counts decide (:meth:`_chosen`)
        if not forced:
            return hier.choose(kind, self.layout, nbytes, None, self.flat.engine), 0
        why = hier.supports(kind, forced, self.layout, self.flat.engine)
        if why:
            raise usage(kind, why, self.global_ranks[self._rank])
        return forced, path_digest(forced, False)

    def _chosen(self, kind: str, counts: Sequence[int], itemsize: int) -> str:
        """The family of a gather or scatter that nobody forced (``hier.CHOSEN_FROM_COUNTS``):
        from the gathered array, which every rank knows once the ranks agreed."""
        return hier.choose(kind, self.layout, sum(counts) * itemsize, None, self.flat.engine)

    def _call(self, fp: Fingerprint, mine: int, aux: int, async_op: bool,
              body: Callable[[_Ctx, list[int], list[int]], None],
              payload: np.ndarray | None = None,
              eager: Callable[[list[np.ndarray], list[int], list[int]], None] | None = None
              ) -> Work | None:
        """Agree on ``fp`` with every rank, then run the call.

        ``payload`` (this rank's data as bytes, or None when the call cannot be eager)
        rides in the agreement exchange when it fits; if every rank's did, the call is
        done by ``eager(rows, counts, auxes)`` (``rows``: every rank's payload, in
        group-rank order), otherwise by ``body(ctx, counts, auxes)``.
        """
        what = self._what(fp.kind, fp.seq)

        def job() -> None:
            deadline = time.monotonic() + self.timeout
            self._agree_then_settle(fp, mine, aux, payload, body, eager, deadline, what)

        if async_op:
            return self.fifo.submit(job, Work(what), inline=False)
        self.fifo.call(job, what)
        return None

    def _call_fused(self, fp: Fingerprint, mine: int, async_op: bool,
                    run: Callable[[_Ctx], bool],
                    refused: Callable[[float, Any], None] | None = None) -> Work | None:
        """Run a call whose exchanges carry its agreement (family ``fused``): ``run(ctx)``
        returns False when the ranks' calls differ, and then every rank does; the
        agreement's rows, which every rank then exchanges, say how (the same
        MismatchError everywhere). ``refused(deadline, what)``: what a refused call
        runs instead (default: the rows, then the error)."""
        what = self._what(fp.kind, fp.seq)

        def job() -> None:
            deadline = time.monotonic() + self.timeout
            if not run(self._fused_ctx(deadline, what, fp.seq)):
                if refused is not None:
                    refused(deadline, what)
                    return
                self._fused_refused(fp, mine, deadline, what)

        if async_op:
            return self.fifo.submit(job, Work(what), inline=False)
        self.fifo.call(job, what)
        return None

    def _fused_refused(self, fp: Fingerprint, mine: int, deadline: float, what: Any) -> None:
        """After a fused call that some rank's call differed from: every rank runs the
        agreement's rows, which raise the MismatchError every rank raises."""
        self._agree(fp, mine, 0, None, deadline, what)
        raise self._mismatch(fp, "the ranks' messages differ in length, though their "
                                 "agreement rows agree")

    def _fused_ctx(self, deadline: float, what: Any, seq: int) -> _Ctx:
        """A fused call's context, bound to this call: its deadline, name and agreement
        tag (a member whose call runs another family sends this call's rows under it).
        One is kept per group: fused calls run one at a time (queued jobs in order, the
        lane only on the idle group)."""
        ctx = self._kept_ctx
        if ctx is None:
            ctx = self._kept_ctx = _Ctx(self, deadline, what)
        p2p = ctx.p2p
        p2p.deadline, p2p.what, p2p.probe = deadline, what, AGREE_TAGS[seq & 1]
        ctx.notes = self._step_notes(seq) if self.tracer is not None else None
        return ctx

    def eager_cap(self, kind: str) -> int:
        """The most data bytes a rank's row carries in a call of ``kind`` on this group."""
        return self._eager_caps[kind]

    def _settle(self, body: Callable[[_Ctx, list[int], list[int]], None],
                eager: Callable[[list[np.ndarray], list[int], list[int]], None] | None,
                counts: list[int], auxes: list[int], rows: list[np.ndarray] | None,
                deadline: float, what: Any, seq: int | None = None) -> None:
        """Finish an agreed call: ``eager`` from the rows when every rank's data rode in
        them, else ``body`` (the call's family). ``seq``: the call's number, whose trace
        record notes the family's steps when the group is traced."""
        if rows is not None and eager is not None:
            eager(rows, counts, auxes)
            return
        ctx = _Ctx(self, deadline, what)
        if self.tracer is not None and seq is not None:
            self._traced(ctx, self._step_notes(seq))
        body(ctx, counts, auxes)

    def _step_notes(self, seq: int) -> StepNotes:
        """Call ``seq``'s step notes, made once per call (see meshcast.trace.steps)."""
        kept = self._notes
        if kept is None or kept[0] != seq:
            kept = self._notes = (seq, StepNotes(self.tracer.rounds_of(self, seq),
                                                 self.global_ranks, self._rank))
        return kept[1]

    def _traced(self, ctx: _Ctx, notes: StepNotes) -> None:
        """Make every call on ``ctx``'s communicators a step of ``notes``."""
        lay, peers = self.layout, notes.peers
        ctx.local = Traced(ctx.local, "local", peers(lay.hosts[lay.host]), notes)
        if ctx.rail is not None:
            ctx.rail = Traced(ctx.rail, "rail", peers(lay.rail(lay.local)), notes)
        if ctx.leaders is not None:
            ctx.leaders = Traced(ctx.leaders, "leaders", peers(h[0] for h in lay.hosts), notes)
        ctx.flat = ctx.p2p = Traced(ctx.flat, "flat", peers(range(lay.size)), notes)

    def _agree_then_settle(self, fp: Fingerprint, mine: int, aux: int,
                           payload: np.ndarray | None,
                           body: Callable[[_Ctx, list[int], list[int]], None],
                           eager: Callable[[list[np.ndarray], list[int], list[int]], None]
                           | None, deadline: float, what: Any) -> None:
        """:meth:`_agree`, then :meth:`_settle` the call from the rows: the general path of
        every call, and how a refused fused all_to_all finishes."""
        counts, auxes, rows = self._agree(fp, mine, aux, payload, deadline, what)
        self._settle(body, eager, counts, auxes, rows, deadline, what, fp.seq)

    def _agree(self, fp: Fingerprint, mine: int, aux: int, payload: np.ndarray | None,
               deadline: float, what: str
               ) -> tuple[list[int], list[int], list[np.ndarray] | None]:
        """Every rank's (piece size, aux word), after checking that all fingerprints agree;
        plus every rank's payload when every rank carried one (else None).

        Runs on every call, so it is written for speed: plain bytes and struct, no
        per-call objects beyond the table's one copy.
        """
        packed = fp.pack()
        slot = self._slot_view
        slot[:FP_SIZE] = packed
        carried = -1
        cap = self.eager_cap(fp.kind)
        if payload is not None and payload.nbytes <= cap:
            carried = payload.nbytes
            slot[CELL:CELL + carried] = payload
        _WORDS.pack_into(slot, FP_SIZE, mine, aux, carried)
        if self.tracer is None:
            self._exchange(deadline, what, fp.seq)
        else:
            notes = self._step_notes(fp.seq)
            with notes.step("agreement", notes.peers(range(self._size)),
                            _row_length(self._slot, 0)):
                self._exchange(deadline, what, fp.seq)
        return self._read_rows(packed)

    def _exchange(self, deadline: float, what: Any, seq: int) -> None:
        """Every rank's row (its ``_slot``) into every rank's ``_table``: group rank g's
        at ``g * slot`` when the rows travel flat, else each host's rows back to back
        from ``host * cap`` (:func:`~meshcast.algorithms.hierarchical.agreement_route`).
        ``seq``: the call's sequence number (its parity picks the direct rows' tag)."""
        if self._flat_rows:
            used = _row_length(self._slot, 0)
            at = self._rank * self._slot_bytes
            self._table[at:at + used] = self._slot[:used]
            self.flat.exchange_rows(self._table, self._row_steps, self._slot_bytes,
                                    ROW_LENGTH, deadline, what, AGREE_TAGS[seq & 1])
            return
        # Through each host's leader: local gather, one exchange among the leaders, local
        # broadcast. Three rounds against two for rails (every rank's slot on its own
        # rail, then a local all-gather), but only one inter-host message per host, and
        # measured faster at 2 emulated hosts x 2 ranks on 2 cores: 8 B all_reduce 240 us
        # against 473 us over MPI, 4.7 ms against 7.8 ms over Gloo.
        self.local_ops.gather_slots(self._block, self._slot)
        table, cap = self._table, self._cap
        if self._leaders is not None:
            at = self._my_host * cap
            block = self._block
            for i in range(self._host_sizes[self._my_host]):
                row = i * self._slot_bytes
                used = _row_length(block, row)
                table[at:at + used] = block[row:row + used]
                at += used
            self._leaders.allgather_sized(table, at - self._my_host * cap, cap, deadline, what)
        self.local_ops.broadcast_table(table)

    def _eager_runners(self) -> tuple[Any, Any] | None:
        """The compiled runners of this group's exchange of rows (for calls of even and
        of odd sequence numbers: see ``interhost.AGREE_TAGS``), which run a tiny call
        whole (``MpiComm.eager_rows``), when the rows go straight between ranks over MPI
        and the helper was built; else None."""
        if not self._flat_rows:
            return None
        runners = tuple(self.flat.rows_runner(self._table, self._row_steps, self._slot_bytes,
                                              ROW_LENGTH, tag) for tag in AGREE_TAGS)
        return runners if hasattr(runners[0], "eager") else None

    def _read_rows(self, packed: bytes
                   ) -> tuple[list[int], list[int], list[np.ndarray] | None]:
        """Parse the exchanged ``_table`` (see :meth:`_agree`); raise MismatchError, the
        same on every rank, unless every row's fingerprint is ``packed``."""
        raw = self._table_view
        rows = self.row_offsets(raw)
        counts, auxes, sizes = [], [], []
        for at in rows:
            if raw[at:at + FP_SIZE] != packed:
                fps = [Fingerprint.unpack(bytes(raw[o:o + FP_SIZE])) for o in rows]
                compare(fps, self.global_ranks, self.group_name)
            count, word, size = _WORDS.unpack_from(raw, at + FP_SIZE)
            counts.append(count)
            auxes.append(word)
            sizes.append(size)
        if min(sizes) < 0:
            return counts, auxes, None
        return counts, auxes, [np.frombuffer(raw, np.uint8, size, at + CELL)
                               for at, size in zip(rows, sizes)]

    def row_offsets(self, carried: Sequence[int] | memoryview) -> list[int]:
        """Every group rank's row offset in the exchanged table, in group-rank order.

        Args:
            carried: every group rank's payload bytes (in group-rank order), or the
                leaders' table itself, whose rows say their own lengths.
        """
        if self._flat_rows:
            return [g * self._slot_bytes for g in range(self._size)]
        starts = []  # host by host, as the leaders pack them
        for h, members in enumerate(self.layout.hosts):
            at = h * self._cap
            for g in members:
                starts.append(at)
                at += (_row_length(carried, at) if isinstance(carried, memoryview)
                       else CELL + max(carried[g], 0))
        return [starts[i] for i in self._row_of]

    def _eager_payload(self, kind: str, algorithm: str | None, data: np.ndarray
                       ) -> np.ndarray | None:
        """``data`` when the call may ride in the agreement (no family forced)."""
        if algorithm or kind in self._forced:
            return None  # a forced family runs as asked, so that baselines stay measurable
        return data

    def _mismatch(self, fp: Fingerprint, text: str) -> MismatchError:
        return MismatchError(f"{fp.kind} #{fp.seq} on {self.group_name}: {text}")

    def _fp(self, kind: str, **fields: Any) -> Fingerprint:
        return Fingerprint(next(self._seq), kind, **fields)

    @staticmethod
    def _working(buf: Buffer, op: ops.ReduceOp) -> tuple[np.ndarray, bool]:
        if buf.dtype_name in ("float16", "bfloat16"):
            work_dtype = ops.working_dtype(buf.dtype_name if buf.dtype_name == "bfloat16"
                                           else np.dtype(np.float16), op)
            if buf.dtype_name == "bfloat16" or work_dtype != buf.flat.dtype:
                return working_copy(buf.flat, buf.dtype_name, work_dtype), True
        return buf.flat, False

    def _finish_reduction(self, buf: Buffer, w: np.ndarray, upcast: bool, op: ops.ReduceOp,
                          holds_result: bool = True) -> None:
        if holds_result:
            if op is ops.ReduceOp.AVG:
                ops.finish_average(w, self._size)
            if upcast:
                store_back(buf.flat, w, buf.dtype_name)
        buf.finish()

    # ------------------------------------------------------------- collectives

    def barrier(self, *, algorithm: str | None = None, async_op: bool = False
                ) -> Work | None:
        _, path = self._family("barrier", 0, algorithm)
        fp = self._fp("barrier", path=path)

        def body(ctx: _Ctx, counts: list[int], auxes: list[int]) -> None:
            self.last_algorithm = "barrier/agreement"  # the agreement is a full barrier

        return self._call(fp, 0, 0, async_op, body, _NO_BYTES,
                          lambda rows, counts, auxes: body(None, counts, auxes))

    def broadcast(self, buf: Buffer, root: int, *, algorithm: str | None = None,
                  async_op: bool = False) -> Work | None:
        family, path = self._family("broadcast", buf.nbytes, algorithm)
        fp = self._fp("broadcast", path=path, dtype=buf.dtype_name, root=root, count=buf.count)

        def body(ctx: _Ctx, counts: list[int], auxes: list[int]) -> None:
            self.last_algorithm = f"broadcast/{family}"
            hier.broadcast(ctx, family, buf.flat, root)
            buf.finish()

        def eager(rows: list[np.ndarray], counts: list[int], auxes: list[int]) -> None:
            self.last_algorithm = "broadcast/eager"
            from_rows.broadcast(rows, buf.flat, root, self._rank)
            buf.finish()

        mine = as_bytes(buf.flat) if self._rank == root else _NO_BYTES
        return self._call(fp, buf.count, 0, async_op, body,
                          self._eager_payload("broadcast", algorithm, mine), eager)

    def all_reduce(self, buf: Buffer, op: ops.ReduceOp, *, algorithm: str | None = None,
                   async_op: bool = False) -> Work | None:
        family, path = self._family("all_reduce", buf.nbytes, algorithm)
        fp = self._fp("all_reduce", path=path, dtype=buf.dtype_name, op=op.name, count=buf.count)
        w, upcast = self._working(buf, op)
        combine = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op

        def body(ctx: _Ctx, counts: list[int], auxes: list[int]) -> None:
            self.last_algorithm = f"all_reduce/{family}"
            hier.all_reduce(ctx, family, w, combine)
            self._finish_reduction(buf, w, upcast, op)

        def eager(rows: list[np.ndarray], counts: list[int], auxes: list[int]) -> None:
            self.last_algorithm = "all_reduce/eager"
            from_rows.all_reduce(rows, w, combine)
            self._finish_reduction(buf, w, upcast, op)

        payload = self._eager_payload("all_reduce", algorithm, as_bytes(w))
        if family == "fused" and (payload is None
                                  or payload.nbytes > self.eager_cap("all_reduce")):
            def fused(ctx: _Ctx) -> bool:
                if not hier.all_reduce_fused(ctx, w, combine, fp.pack(), self._fused_plans,
                                             ops.compiled_kernel(combine, w.dtype)):
                    return False
                self.last_algorithm = "all_reduce/fused"
                self._finish_reduction(buf, w, upcast, op)
                return True

            return self._call_fused(fp, buf.count, async_op, fused)
        if family == "fused":  # a call small enough rides in the agreement, as on the lane
            family = "flat"
        return self._call(fp, buf.count, 0, async_op, body, payload, eager)

    def reduce(self, buf: Buffer, op: ops.ReduceOp, root: int, *, algorithm: str | None = None,
               async_op: bool = False) -> Work | None:
        family, path = self._family("reduce", buf.nbytes, algorithm)
        fp = self._fp("reduce", path=path, dtype=buf.dtype_name, op=op.name, root=root, count=buf.count)
        w, upcast = self._working(buf, op)
        combine = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op
        at_root = self._rank == root

        def body(ctx: _Ctx, counts: list[int], auxes: list[int]) -> None:
            self.last_algorithm = f"reduce/{family}"
            mine = w if upcast or at_root else w.copy()  # non-roots' data stays as it was
            hier.reduce(ctx, family, mine, combine, root)
            self._finish_reduction(buf, mine, upcast, op, holds_result=at_root)

        def eager(rows: list[np.ndarray], counts: list[int], auxes: list[int]) -> None:
            self.last_algorithm = "reduce/eager"
            from_rows.reduce(rows, w, combine, at_root)
            self._finish_reduction(buf, w, upcast, op, holds_result=at_root)

        return self._call(fp, buf.count, 0, async_op, body,
                          self._eager_payload("reduce", algorithm, as_bytes(w)), eager)

    def all_gather(self, out_flat: np.ndarray, in_flat: np.ndarray, counts: Sequence[int],
                   dtype_name: str, finish: Callable[[], None], *,
                   algorithm: str | None = None, async_op: bool = False, **_: Any
                   ) -> Work | None:
        family, path = self._family("all_gather", out_flat.nbytes, algorithm)
        expected = list(counts)
        fp = self._fp("all_gather", path=path, dtype=dtype_name, extra=counts_hash(expected))

        def check(got: list[int]) -> None:
            if got != expected:
                raise self._mismatch(fp, f"the output pieces expect counts {expected} but the "
                                         f"ranks passed inputs of {got} elements")

        def body(ctx: _Ctx, got: list[int], auxes: list[int]) -> None:
            check(got)
            self.last_algorithm = f"all_gather/{family}"
            hier.all_gather(ctx, family, out_flat, in_flat, expected)
            finish()

        def eager(rows: list[np.ndarray], got: list[int], auxes: list[int]) -> None:
            check(got)
            self.last_algorithm = "all_gather/eager"
            from_rows.all_gather(rows, out_flat)
            finish()

        return self._call(fp, in_flat.size, 0, async_op, body,
                          self._eager_payload("all_gather", algorithm, as_bytes(in_flat)),
                          eager)

    def gather(self, out_pieces: Sequence[np.ndarray] | None, in_flat: np.ndarray, root: int,
               dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
               async_op: bool = False, expected_counts: Sequence[int] | None = None, **_: Any
               ) -> Work | None:
        family, path = self._family("gather", in_flat.nbytes, algorithm)
        fp = self._fp("gather", path=path, dtype=dtype_name, root=root)
        aux = counts_hash(expected_counts) if self._rank == root else 0
        body, eager = self._gather_steps(fp, family, out_pieces, in_flat, root, finish)
        return self._call(fp, in_flat.size, aux, async_op, body,
                          self._eager_payload("gather", algorithm, as_bytes(in_flat)), eager)

    def _gather_steps(self, fp: Fingerprint, family: str,
                      out_pieces: Sequence[np.ndarray] | None, in_flat: np.ndarray, root: int,
                      finish: Callable[[], None]) -> tuple[Callable[..., None],
                                                           Callable[..., None]]:
        """gather's (body, eager) once the ranks agreed (see :meth:`_settle`); the lane
        finishes a call whose rows it did not expect with them too."""

        def check(counts: list[int], auxes: list[int]) -> None:
            if auxes[root] != counts_hash(counts):
                raise self._mismatch(fp, f"the ranks' inputs hold {counts} elements, which "
                                         f"the root's gather_list does not match")

        def body(ctx: _Ctx, counts: list[int], auxes: list[int]) -> None:
            check(counts, auxes)
            fam = family or self._chosen("gather", counts, in_flat.itemsize)
            self.last_algorithm = f"gather/{fam}"
            outs = [p.reshape(-1) for p in out_pieces] if out_pieces else None
            hier.gather(ctx, fam, outs, in_flat, counts, root)
            finish()

        def eager(rows: list[np.ndarray], counts: list[int], auxes: list[int]) -> None:
            check(counts, auxes)
            self.last_algorithm = "gather/eager"
            from_rows.gather(rows, out_pieces)
            finish()

        return body, eager

    def scatter(self, out_flat: np.ndarray, in_flat: np.ndarray | None, root: int,
                dtype_name: str, finish: Callable[[], None], *, algorithm: str | None = None,
                async_op: bool = False, expected_counts: Sequence[int] | None = None, **_: Any
                ) -> Work | None:
        family, path = self._family("scatter", out_flat.nbytes, algorithm)
        fp = self._fp("scatter", path=path, dtype=dtype_name, root=root)
        aux = counts_hash(expected_counts) if self._rank == root else 0
        body, eager = self._scatter_steps(fp, family, out_flat, in_flat, root, finish)
        mine = as_bytes(in_flat) if in_flat is not None else _NO_BYTES
        return self._call(fp, out_flat.size, aux, async_op, body,
                          self._eager_payload("scatter", algorithm, mine), eager)

    def _scatter_steps(self, fp: Fingerprint, family: str, out_flat: np.ndarray,
                       in_flat: np.ndarray | None, root: int, finish: Callable[[], None]
                       ) -> tuple[Callable[..., None], Callable[..., None]]:
        """scatter's (body, eager) once the ranks agreed, as :meth:`_gather_steps`."""

        def check(counts: list[int], auxes: list[int]) -> None:
            if auxes[root] != counts_hash(counts):
                raise self._mismatch(fp, f"the ranks' outputs hold {counts} elements, which "
                                         f"the root's scatter_list does not match")

        def body(ctx: _Ctx, counts: list[int], auxes: list[int]) -> None:
            check(counts, auxes)
            fam = family or self._chosen("scatter", counts, out_flat.itemsize)
            self.last_algorithm = f"scatter/{fam}"
            ins = None
            if in_flat is not None:
                at = np.concatenate([[0], np.cumsum(counts)])
                ins = [in_flat[at[g]:at[g + 1]] for g in range(self._size)]
            hier.scatter(ctx, fam, out_flat, ins, counts, root)
            finish()

        def eager(rows: list[np.ndarray], counts: list[int], auxes: list[int]) -> None:
            check(counts, auxes)
            self.last_algorithm = "scatter/eager"
            from_rows.scatter(rows, out_flat, root, sum(counts[:self._rank]) * out_flat.itemsize)
            finish()

        return body, eager

    def reduce_scatter(self, out_buf: Buffer, in_flat: np.ndarray, counts: Sequence[int],
                       op: ops.ReduceOp, finish: Callable[[], None], *,
                       algorithm: str | None = None, async_op: bool = False, **_: Any
                       ) -> Work | None:
        family, path = self._family("reduce_scatter", in_flat.nbytes, algorithm)
        expected = list(counts)
        fp = self._fp("reduce_scatter", path=path, dtype=out_buf.dtype_name, op=op.name,
                      extra=counts_hash(expected))
        in_buf = Buffer(in_flat, out_buf.dtype_name, in_flat.shape, in_flat, staged=False)
        w, upcast = self._working(in_buf, op)
        combine = ops.ReduceOp.SUM if op is ops.ReduceOp.AVG else op

        def check(got: list[int]) -> None:
            if got != expected:
                raise self._mismatch(fp, f"the input pieces expect counts {expected} but the "
                                         f"ranks passed outputs of {got} elements")

        def body(ctx: _Ctx, got: list[int], auxes: list[int]) -> None:
            check(got)
            self.last_algorithm = f"reduce_scatter/{family}"
            out_w, _ = self._working(out_buf, op)
            # (in place, out_w is my piece of w: hier.reduce_scatter copies where it must)
            hier.reduce_scatter(ctx, family, out_w, w, expected, combine)
            self._finish_reduction(out_buf, out_w, out_w is not out_buf.flat, op)
            finish()

        def eager(rows: list[np.ndarray], got: list[int], auxes: list[int]) -> None:
            check(got)
            self.last_algorithm = "reduce_scatter/eager"
            out_w, _ = self._working(out_buf, op)
            from_rows.reduce_scatter(rows, out_w, combine, sum(expected[:self._rank]))
            self._finish_reduction(out_buf, out_w, out_w is not out_buf.flat, op)
            finish()

        payload = self._eager_payload("reduce_scatter", algorithm, as_bytes(w))
        if family == "fused" and (payload is None
                                  or payload.nbytes > self.eager_cap("reduce_scatter")) \
                and out_buf.count == expected[self._rank]:
            # (an output of another size goes to the agreement, which says so everywhere)
            def fused(ctx: _Ctx) -> bool:
                out_w, _ = self._working(out_buf, op)
                kernel = ops.compiled_kernel(combine, w.dtype)
                if not hier.reduce_scatter_fused(ctx, out_w, w, expected, combine, fp.pack(),
                                                 self._fused_plans, kernel):
                    return False
                self.last_algorithm = "reduce_scatter/fused"
                self._finish_reduction(out_buf, out_w, out_w is not out_buf.flat, op)
                finish()
                return True

            return self._call_fused(fp, out_buf.count, async_op, fused)
        if family == "fused":  # a call small enough rides in the agreement, as on the lane
            family = "flat"
        return self._call(fp, out_buf.count, 0, async_op, body, payload, eager)

    def all_to_all(self, out_flat: np.ndarray, in_flat: np.ndarray, send_counts: Sequence[int],
                   recv_counts: Sequence[int], dtype_name: str, finish: Callable[[], None], *,
                   algorithm: str | None = None, async_op: bool = False, **_: Any
                   ) -> Work | None:
        family, path = self._family("all_to_all", in_flat.nbytes, algorithm)
        fp = self._fp("all_to_all", path=path, dtype=dtype_name)
        send, recv = list(send_counts), list(recv_counts)
        n = self._size
        # Even pieces on every rank, all inputs of one size: every pair agrees, and the
        # agreement's rows say so (aux 1 and the counts), so no table of splits need go
        # round (2 hosts x 2 ranks over MPI, 128 KiB: a round of ~300 us).
        even = int(in_flat.size % n == 0 and send == recv == [in_flat.size // n] * n)

        body, eager = self._all_to_all_steps(fp, family, out_flat, in_flat, send, recv, finish)
        payload = (self._eager_payload("all_to_all", algorithm, as_bytes(in_flat)) if even
                   else None)
        if family == "fused" and even and (payload is None
                                           or payload.nbytes > self.eager_cap("all_to_all")):
            # the cell says the input's size: the pieces' length
            cell = fp.pack() + _WORDS.pack(in_flat.size, even, 0)

            def fused(ctx: _Ctx) -> bool:
                if not hier.all_to_all_fused(ctx, out_flat, in_flat, cell, self._fused_plans):
                    return False
                self.last_algorithm = "all_to_all/fused"
                finish()
                return True

            def refused(deadline: float, what: Any) -> None:
                # Not a mismatch yet: a rank with uneven pieces (a legal call) runs the
                # agreement first. Every rank settles the call from the rows, as they do.
                self._agree_then_settle(fp, in_flat.size, even, None, body, eager, deadline,
                                        what)

            return self._call_fused(fp, in_flat.size, async_op, fused, refused)
        if family == "fused":  # small, or uneven: the agreement, then the data
            family = "flat"
        return self._call(fp, in_flat.size, even, async_op, body, payload, eager)

    def _all_to_all_steps(self, fp: Fingerprint, family: str, out_flat: np.ndarray,
                          in_flat: np.ndarray, send: list[int], recv: list[int],
                          finish: Callable[[], None]) -> tuple[Callable[..., None],
                                                               Callable[..., None]]:
        """all_to_all's (body, eager) once the ranks agreed (see :meth:`_settle`); the
        lane finishes a call whose rows it did not expect with them too, so that a
        mismatch reads the same on every rank."""
        n = self._size
        if family == "fused":  # a call that settles through the agreement: the exchange after it
            family = "flat"

        def body(ctx: _Ctx, counts: list[int], auxes: list[int]) -> None:
            # every rank's pieces even and of one size: only the rows can tell
            uniform = all(auxes) and counts.count(counts[0]) == n
            if not uniform:
                self._check_splits(ctx, fp, send, recv)
            self.last_algorithm = f"all_to_all/{family}"
            # The engines' all-to-alls read and write at once: in place, from a copy.
            src = in_flat.copy() if np.may_share_memory(out_flat, in_flat) else in_flat
            hier.all_to_all(ctx, family, out_flat, recv, src, send, uniform)
            finish()

        def eager(rows: list[np.ndarray], counts: list[int], auxes: list[int]) -> None:
            # Only even pieces ride (the payload's condition), so the rows agree when
            # every input has one size; else the first pair that differs, as the
            # table's check would name it.
            for i in range(n):
                if counts[i] != counts[0]:
                    j = 0 if i else 1
                    raise self._split_mismatch(fp, i, counts[i] // n, j, counts[j] // n)
            self.last_algorithm = "all_to_all/eager"
            from_rows.all_to_all(rows, out_flat, self._rank)
            finish()

        return body, eager

    def _check_splits(self, ctx: _Ctx, fp: Fingerprint, send: list[int], recv: list[int]
                      ) -> None:
        """Every rank checks every pair of an all_to_all's split sizes (what rank i sends
        rank j against what j expects from i), so a disagreement is the same
        MismatchError everywhere."""
        n = self._size
        table = np.empty(2 * n * n, np.int64)
        ctx.flat.allgatherv(table, np.array(send + recv, np.int64), [2 * n] * n)
        m = table.reshape(n, 2, n)
        bad = [(i, j) for i in range(n) for j in range(n) if m[i, 0, j] != m[j, 1, i]]
        if bad:
            i, j = bad[0]
            raise self._split_mismatch(fp, i, m[i, 0, j], j, m[j, 1, i])

    def _split_mismatch(self, fp: Fingerprint, i: int, sends: int, j: int, expects: int
                        ) -> MismatchError:
        """Group rank ``i`` sends ``sends`` elements to group rank ``j``, which expects
        ``expects`` (all_to_all; the same text from the rows and from the table)."""
        return self._mismatch(fp, f"rank {self.global_ranks[i]} sends {sends} elements to "
                                  f"rank {self.global_ranks[j]}, which expects {expects}")

    # ------------------------------------------------------------- point-to-point

    def isend(self, flat: np.ndarray, dst: int, tag: int) -> Work:
        what = f"send #{next(self._p2p_seq)} to rank {self.global_ranks[dst]} (tag {tag})"
        data = np.ascontiguousarray(flat).reshape(-1).view(np.uint8)
        return self._p2p(what, lambda: self.flat._isend(data, dst, self.flat.user_tag(tag)),
                         lambda: None)

    def irecv(self, buf: Buffer, src: int | None, tag: int) -> Work:
        peer = "any rank" if src is None else f"rank {self.global_ranks[src]}"
        what = f"recv #{next(self._p2p_seq)} from {peer} (tag {tag})"
        data = buf.flat.view(np.uint8)
        return self._p2p(what, lambda: self.flat._irecv(data, src, self.flat.user_tag(tag)),
                         buf.finish)

    def _p2p(self, what: str, start: Callable[[], Request], after: Callable[[], None]) -> Work:
        deadline = time.monotonic() + self.timeout
        try:
            req = start()
        except Exception as exc:  # noqa: BLE001 - the engine's error, made ours
            raise self.flat.failure(what, exc) from exc
        return _InterHostP2PWork(what, self, req, deadline, after)

    def shutdown(self) -> None:
        self.fifo.close()
        hier.free_fused_plans(self._fused_plans)
        for comm in (self.rail, self.flat):
            if comm is not None:
                comm.close()
        self.local.shutdown()


class _InterHostP2PWork(Work):
    """A send or receive on the inter-host engine: completes when the engine's request does."""

    def __init__(self, what: str, group: HostSpanningGroup, req: Request, deadline: float,
                 after: Callable[[], None]) -> None:
        super().__init__(what)
        self._group, self._req, self._deadline, self._after = group, req, deadline, after

    def _done(self, error: BaseException | None) -> None:
        if error is None:
            self._after()
            src = self._req.source()
            if src is not None:
                self.source_rank = self._group.global_ranks[src]
        self._complete(error=error)

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None and hasattr(timeout, "total_seconds"):
            timeout = timeout.total_seconds()
        if not self._finished:
            deadline = self._deadline if timeout is None else min(
                self._deadline, time.monotonic() + timeout)
            try:
                self._group.flat.wait(self._req, deadline, self._describe)
            except BaseException as exc:
                if time.monotonic() >= self._deadline:
                    self._done(exc)
                raise
            self._done(None)
        return super().wait(0)

    def is_completed(self) -> bool:
        if not self._finished:
            try:
                if self._req.test():
                    self._done(None)
            except Exception as exc:  # noqa: BLE001 - the Work carries the engine's error
                self._done(self._group.flat.failure(self._describe, exc))
        return self._finished


def _forced_families(tune: str) -> dict[str, str]:
    """The cross-host family ``MESHCAST_ALGO`` forces per collective (``all_reduce:flat;
    *:leader``); names of single-host algorithms there are left to the host-local
    groups. ``*:NAME`` forces NAME on the collectives that have it, as on one host (the
    others keep their default); a collective named on its own wins over ``*``."""
    named: dict[str, str] = {}
    for part in (tune or "").split(";"):
        if ":" in part:
            coll, name = (s.strip() for s in part.split(":", 1))
            if name in hier.FAMILIES:
                named[coll] = name
    every = named.pop("*", None)
    out = {kind: every for kind in hier.ALGORITHMS if every in hier.families(kind)}
    out.update(named)
    return out


__all__ = ["HostSpanningGroup", "LocalOps"]
