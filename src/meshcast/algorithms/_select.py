"""Which algorithm runs a call: explicit ``algorithm=`` > ``MESHCAST_ALGO`` > the decision table.

Theory of operation
-------------------
Every rank of a call selects on its own, so selection must be a function of
what all ranks share: the collective, group size, dtype, op, root, the
shared ``counts``, the message size (:func:`message_bytes`) and whether the
group has an arena (``plan.slot_bytes``). Buffer addresses and per-rank
split sizes never enter it. (all_to_all is the exception that proves the
rule: its split sizes are per rank, so no byte range may pick its algorithm.)

Order of precedence:

1. ``explicit`` (the ``algorithm=`` keyword): must name a registered
   algorithm of the collective that supports the call, else
   :class:`~meshcast.errors.InvalidUsage` says which names exist or why it
   cannot run.
2. ``tune`` (the ``MESHCAST_ALGO`` string), grammar::

       tune    := entry (";" entry)*
       entry   := [coll ":"] choice ("," choice)*
       choice  := name ["@" lo "-" hi]       half-open byte range [lo, hi)
       lo, hi  := integer with optional K, M, G suffix (binary) | "inf"

   e.g. ``all_reduce:recursive_doubling@0-64K,ring@64K-inf;broadcast:tree``.
   An entry without ``coll:`` applies to every collective that has an
   algorithm of that name; entries naming the collective win over it. The
   first choice whose range holds the message size and that supports the
   call is taken; if none does, the table decides (an environment variable
   applies to every call and must not break the ones it does not fit).
3. the decision table :data:`TABLE`: with an arena, the arena algorithm if
   it supports the call; otherwise the first rule whose size and byte limits
   hold and whose algorithm supports the call.

Before any of this, a call on one host with no algorithm named may take a
*fast path*: ``oneshot`` (data through the arena's one-shot regions, one
signal), ``cma`` (single-copy: straight from the owner's memory with
process_vm_readv) or ``symmetric`` (on buffers of a symmetric allocation).
Each is registered as a *described* schedule of its collective
(``algorithms/<coll>.py``, families ``oneshot``/``cma``/``symmetric``: simulated,
listed and animated), but the runtime still runs paths/*.py for them (issue 13
item 3), so :func:`select` never sees them; their thresholds live here, in
:func:`fast_path` and the predicates it is made of, which the group and its
tiny-call lane ask (they decide nothing of their own). Across hosts,
:data:`meshcast.algorithms.hierarchical.DEFAULTS` picks the family.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..config import parse_size
from ..errors import usage
from . import _registry
from ._common import piece_counts
from ._plan import Plan
from ._registry import AlgorithmEntry
from .hierarchical import FAMILIES as CROSS_HOST_FAMILIES

INF = math.inf
KiB = 1 << 10


@dataclass(frozen=True)
class Rule:
    """Use ``name`` when ``size <= max_size`` and ``message_bytes < max_bytes``."""

    name: str
    max_bytes: float = INF
    max_size: float = INF


# The p2p half of the decision table, per collective, first match wins.
# Thresholds are placeholders from the textbook cost models (latency-bound
# algorithms below ~16 KiB, bandwidth-optimal ones above; trees forward data
# ceil(log2 P) times, so they stop paying off for large messages). They are to
# be replaced by recorded `meshcast bench` runs, with the run (machine,
# transport, date) noted here, as Open MPI's tuned tables are.
TABLE: dict[str, tuple[Rule, ...]] = {
    "broadcast": (Rule("direct", max_size=2), Rule("tree", max_bytes=256 * KiB), Rule("ring")),
    "reduce": (Rule("tree", max_bytes=64 * KiB), Rule("ring")),
    "all_reduce": (
        Rule("recursive_doubling", max_size=2),
        Rule("recursive_doubling", max_bytes=16 * KiB),
        Rule("ring"),
    ),
    "gather": (Rule("direct", max_size=4), Rule("tree", max_bytes=256 * KiB), Rule("direct")),
    "scatter": (Rule("direct", max_size=4), Rule("tree", max_bytes=256 * KiB), Rule("direct")),
    "all_gather": (Rule("recursive_doubling", max_bytes=16 * KiB), Rule("ring")),
    "reduce_scatter": (Rule("recursive_halving", max_bytes=16 * KiB), Rule("ring")),
    # by size only: split sizes differ between ranks (see module doc); bruck
    # needs equal splits, which only the caller can promise, so only on request
    "all_to_all": (Rule("direct", max_size=8), Rule("pairwise")),
    "barrier": (Rule("dissemination"),),
}

ARENA_FIRST = "arena"  # the arena algorithm's name in every collective


def message_bytes(plan: Plan) -> int | None:
    """The call's size in bytes as every rank sees it, or None for all_to_all.

    broadcast/all_reduce: the buffer; reduce: the contribution;
    gather/all_gather/scatter/reduce_scatter: all pieces together; barrier: 0.
    """
    coll = plan.coll
    if coll in ("broadcast", "all_reduce"):
        return plan.count * plan.itemsize
    if coll == "reduce":
        return (0 if plan.input is None else len(plan.input)) * plan.itemsize
    if coll in ("gather", "all_gather", "scatter", "reduce_scatter"):
        return sum(piece_counts(plan)) * plan.itemsize
    if coll == "barrier":
        return 0
    return None


# ----------------------------------------------------------------- tuning


@dataclass(frozen=True)
class Choice:
    """One ``name[@lo-hi]`` of a tune entry."""

    name: str
    lo: float = 0
    hi: float = INF

    @property
    def ranged(self) -> bool:
        return self.lo > 0 or self.hi != INF

    def holds(self, nbytes: int | None) -> bool:
        if nbytes is None:
            return not self.ranged
        return self.lo <= nbytes < self.hi


def _size(text: str, tune: str) -> float:
    text = text.strip()
    if text.lower() in ("inf", "max"):
        return INF
    try:
        value = parse_size(text)
    except ValueError:
        value = -1
    if value < 0:
        raise usage("MESHCAST_ALGO", f"{text!r} is not a byte size in {tune!r}")
    return value


@lru_cache(maxsize=32)
def parse_tune(tune: str) -> dict[str, tuple[Choice, ...]]:
    """Parse a ``MESHCAST_ALGO`` string into ``{coll or "*": choices}``.

    Cross-host family names (``hierarchical.FAMILIES``: ``all_reduce:flat``) are
    checked and left out: they choose how a group spanning hosts composes a call.

    Raises:
        InvalidUsage: bad syntax, an unknown collective or algorithm name, an
            empty or reversed range, or a byte range on all_to_all.
    """
    table: dict[str, list[Choice]] = {}
    for entry in tune.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        coll, sep, rest = entry.partition(":")
        if not sep:
            coll, rest = "*", entry
        coll = coll.strip()
        if coll != "*" and coll not in _registry.COLLECTIVES:
            valid = ", ".join(_registry.COLLECTIVES)
            raise usage("MESHCAST_ALGO", f"unknown collective {coll!r} in {tune!r}; valid: {valid}")
        for part in rest.split(","):
            part = part.strip()
            if not part:
                raise usage("MESHCAST_ALGO", f"empty algorithm name in {tune!r}")
            name, _, span = part.partition("@")
            name = name.strip()
            if name in CROSS_HOST_FAMILIES:
                # a group spanning hosts reads these (spanning._forced_families); the
                # host-local groups inside it, and groups on one host, run as untuned
                if span:
                    raise usage("MESHCAST_ALGO", f"the cross-host family {name!r} takes no "
                                f"byte range: drop '@{span}' from {tune!r}")
                continue
            choice = Choice(name)
            if span:
                lo, dash, hi = span.partition("-")
                if not dash:
                    raise usage("MESHCAST_ALGO", f"range {span!r} must look like lo-hi in {tune!r}")
                choice = Choice(name, _size(lo, tune), _size(hi, tune))
                if choice.lo >= choice.hi:
                    raise usage("MESHCAST_ALGO", f"empty range {span!r} in {tune!r}")
            _check_name(coll, choice, tune)
            table.setdefault(coll, []).append(choice)
    return {coll: tuple(choices) for coll, choices in table.items()}


def tuned_collectives(tune: str) -> frozenset[str]:
    """The collectives a ``MESHCAST_ALGO`` string names a choice for.

    The group's fast paths (one-shot, single-copy, symmetric) are not chosen by
    :func:`select`; a collective named here skips them so that the choice applies.

    Raises:
        InvalidUsage: ``tune`` is malformed (see :func:`parse_tune`).
    """
    table = parse_tune(tune) if tune and tune.strip() else {}
    tuned = {coll for coll in table if coll != "*"}
    for choice in table.get("*", ()):
        tuned.update(c for c in _registry.COLLECTIVES if choice.name in _registry.names(c))
    return frozenset(tuned)


def _check_name(coll: str, choice: Choice, tune: str) -> None:
    if coll == "*":
        if not any(choice.name in _registry.names(c) for c in _registry.COLLECTIVES):
            known = sorted({e.name for e in _registry.entries()})
            raise usage(
                "MESHCAST_ALGO",
                f"no collective has an algorithm {choice.name!r} ({tune!r}); "
                f"known names: {', '.join(known)}",
            )
        return
    valid = _registry.names(coll)
    if choice.name not in valid:
        raise usage(
            "MESHCAST_ALGO",
            f"unknown algorithm {coll}/{choice.name} in {tune!r}; valid: {', '.join(valid)}",
        )
    if coll == "all_to_all" and choice.ranged:
        raise usage(
            "MESHCAST_ALGO",
            "all_to_all split sizes differ between ranks, so a byte range cannot pick its "
            f"algorithm consistently; drop '@{choice.lo:g}-{choice.hi:g}' from {tune!r}",
        )


def _from_tune(plan: Plan, tune: str) -> AlgorithmEntry | None:
    table = parse_tune(tune)
    nbytes = message_bytes(plan)
    for key in (plan.coll, "*"):
        for choice in table.get(key, ()):
            if choice.name not in _registry.names(plan.coll) or not choice.holds(nbytes):
                continue
            entry = _registry.get(plan.coll, choice.name)
            if entry.why_not(plan) is None:
                return entry
    return None


# ------------------------------------------------------------------ table


def decide(plan: Plan) -> AlgorithmEntry:
    """The decision table's choice for ``plan`` (see :data:`TABLE`)."""
    coll = plan.coll
    if plan.slot_bytes > 0 and ARENA_FIRST in _registry.names(coll):
        entry = _registry.get(coll, ARENA_FIRST)
        if entry.why_not(plan) is None:
            return entry
    nbytes = message_bytes(plan)
    for rule in TABLE.get(coll, ()):
        if plan.size > rule.max_size or (nbytes is not None and nbytes >= rule.max_bytes):
            continue
        entry = _registry.get(coll, rule.name)
        if entry.why_not(plan) is None:
            return entry
    for entry in _registry.entries(coll):  # the table is exhausted: anything that can run
        if entry.why_not(plan) is None:
            return entry
    raise usage(coll, f"no algorithm supports this call ({_describe(plan)})", plan.rank)


def _describe(plan: Plan) -> str:
    parts = [f"size={plan.size}", f"dtype={plan.dtype}"]
    nbytes = message_bytes(plan)
    if nbytes is not None:
        parts.append(f"bytes={nbytes}")
    if plan.op is not None:
        parts.append(f"op={plan.op!r}")
    if plan.root >= 0:
        parts.append(f"root={plan.root}")
    parts.append(f"slot_bytes={plan.slot_bytes}")
    return ", ".join(parts)


# ----------------------------------------------------------------- select


def algorithm_name(coll: str, explicit: str, valid: Sequence[str] | None = None, *,
                   caller: str | None = None, rank: int | None = None) -> str:
    """The bare name an ``algorithm=`` value picks for ``coll``: ``"ring"`` or ``"all_reduce/ring"``.

    The one rule for the keyword: the front door checks it with this before
    anything is sent, and :func:`select` again per call. Returning the bare
    name means both spellings reach the group, and the fingerprint's path
    byte, as the same value, so ranks that spell it differently still agree.

    Args:
        coll: the collective of the call.
        explicit: the caller's ``algorithm=`` value.
        valid: the names to accept (default: the registry's for ``coll``; a group
            that spans hosts passes its hierarchical families).
        caller: the name errors start with (default: ``coll``).
        rank: the rank errors name, or None.

    Raises:
        InvalidUsage: the prefix names another collective, or the name is not
            one of ``valid``; the message names the argument, the collective and
            the algorithms it has.
    """
    valid = list(_registry.names(coll) if valid is None else valid)
    caller = caller or coll
    name = explicit.strip()
    if "/" in name:
        prefix, _, name = name.partition("/")
        if prefix != coll:
            raise usage(caller, f"'algorithm'={explicit!r} belongs to {prefix!r}, not {coll!r}; "
                                f"{coll} has: {', '.join(valid)}", rank)
    if name not in valid:
        raise usage(caller, f"'algorithm'={explicit!r}: unknown algorithm {name!r} of {coll}; "
                            f"valid: {', '.join(valid)}", rank)
    return name


def select(plan: Plan, explicit: str | None = None, tune: str = "") -> AlgorithmEntry:
    """Pick the algorithm that runs ``plan``.

    Args:
        plan: the call (any rank's plan gives the same answer).
        explicit: the caller's ``algorithm=`` (``"ring"`` or ``"all_reduce/ring"``), or None.
        tune: the ``MESHCAST_ALGO`` string ("" for none).

    Returns:
        The registry entry to run.

    Raises:
        InvalidUsage: ``explicit`` names no algorithm of this collective (the
            message lists the valid ones) or cannot run this call (the message
            says why); ``tune`` is malformed.
    """
    coll = plan.coll
    if explicit:
        entry = _registry.get(coll, algorithm_name(coll, explicit, rank=plan.rank))
        why = entry.why_not(plan)
        if why is not None:
            raise usage(
                coll,
                f"algorithm {entry.qualname!r} cannot run this call: {why} ({_describe(plan)})",
                plan.rank,
            )
        return entry
    if tune and tune.strip():
        entry = _from_tune(plan, tune)
        if entry is not None:
            return entry
    return decide(plan)


# ------------------------------------------------------ fast paths (one host)


@dataclass(frozen=True)
class HostCaps:
    """What a one-host group offers, the same on every member.

    Attributes:
        size: ranks in the group.
        oneshot_bytes: one-shot region per rank and parity (0: the group has no arena).
        single_copy: members may read each other's memory (process_vm_readv).
        crowded: the machine runs more ranks than they have cores (so a rank that
            waits for all may wait for one that is not running).
    """

    size: int
    oneshot_bytes: int
    single_copy: bool
    crowded: bool = False


# One-shot while every rank's work (reading all P contributions) stays under this
# many bytes. `meshcast bench --iters 100` (best of both, 2 ranks): one-shot 13-31 us
# vs arena 53-89 us from 16 KiB to 256 KiB, 49 vs 91 us at 512 KiB, 103 vs 132 us at
# 1 MiB; at 4 ranks on 2 cores 305 vs 634 us at 512 KiB. The arena schedule's three
# synchronisations cost ~50 us of Python.
ONESHOT_WORK_BYTES = 2 << 20

# Where one-shot ends, non-reducing collectives copy each piece once, straight from the
# owner's buffer into the reader's (process_vm_readv), if a piece is this large.
SINGLE_COPY_MIN_BYTES = 64 << 10

# broadcast, all_gather, gather, scatter and all_to_all run one-shot wherever it fits
# (its region, ONESHOT_WORK_BYTES), single-copy only past it. Earlier stops (41-50)
# started single-copy inside the one-shot sizes (broadcast and rooted pieces from
# 64 KiB, all_gather from 128 KiB gathered, all_to_all from 64 KiB a piece), when
# one-shot copied in and out one after the other (stop 46: a 1 MiB broadcast 80 us
# one-shot, 24 single-copy). Since its readers copy as the stager goes (_tiny.c's
# pipelined copies) and its programs run compiled, one-shot is the faster wherever it
# runs. Stop 70, AMD EPYC VM, 2 ranks, meshcast one-shot (MESHCAST_CMA_BYTES=0) /
# single-copy (the old rule) / MPICH 5.0.2, us; hot (benchmarks/versus_mpi.py, by
# piece): broadcast 64 KiB 1.7 / 5.0-5.7 / 7.5-8.1, 256 KiB 4.8 / 11.0-11.4 / 19-20,
# 1 MiB 17.8-18.6 / 35.4-35.8 / 69-72; all_gather 64 KiB 5.5 / 8.4-9.0 / 9.5-13.3,
# 1 MiB 60-62 / 91-92 / 95-98; gather 64 KiB 2.4-2.5 / 8.0-8.5 / 7.8-8.1, 1 MiB
# 37-39 / 68-69 / 79; scatter 64 KiB 2.3 / 8.1-8.7 / 8.4-8.9, 512 KiB 12.8 / 32.8-33.6
# / 35-36; all_to_all 64 KiB 3.6 / 7.6-8.3 / 8.8-9.7, 256 KiB 13.7 / 22.9-23.9 /
# 24-25. Cold (`meshcast bench -n 2 --op gather,scatter,broadcast,all_gather,all_to_all
# -b 64K -e 2M -f 2 --iters 30 --rounds 3 --compare mpi`, the bench's sizes,
# out-of-place): broadcast 1 MiB 24.7 / 41.9 / 75.1; all_gather 1 MiB 34.4 / 51.4 /
# 50.8; gather 128 KiB 5.5 / 14.2 / 13.5, 2 MiB 42.9 / 76.7 / 94.4; scatter 1 MiB
# 19.8 / 38.9 / 46.7; all_to_all 512 KiB 16.5 / 27.7 / 27.7. 4 ranks on 2 cores, hot:
# all_gather 64-256 KiB 24-78 / 51-148, all_to_all 64 KiB 30.6 / 48.6 (broadcast,
# gather and scatter already ran one-shot there). Past one-shot (the arena schedules
# otherwise) single-copy stays far ahead: broadcast 2 MiB 75 against 103, scatter
# 2 MiB 73 against 106, all_to_all 1 MiB 52 against 98.

# all_reduce reads the peers' data for its share, then the reduced shares: two single
# copies instead of the arena's copy in, reduce and copy out. Past the one-shot sizes
# (`meshcast bench --algo arena` beside the default, 2 ranks, same run: see the note in
# benchmarks/README.md).
ALL_REDUCE_SINGLE_MIN_BYTES = 2 << 20

# Where the one-shot path runs (one synchronisation, a copy in), it beats the symmetric
# broadcast (two synchronisations, no copies), which therefore starts where the one-shot
# path ends. The symmetric all_reduce wins from 512 KiB (`meshcast bench --symmetric`, 2
# ranks, same run: 59.5 vs 79.2 us at 512 KiB, 85.6 vs 206 us at 1 MiB; a tie at
# 256 KiB), and all_gather / reduce_scatter, whose symmetric forms save a copy of every
# piece, from 512 KiB (gathered array, scattered input): below it the one-shot lane's
# compiled round costs less than the symmetric path's entry (2 ranks, same run:
# all_gather 31.5 vs 20.1 us at 128 KiB, a tie from 256 KiB; reduce_scatter 34.4 vs
# 14.4 us at 128 KiB, 33.5 vs 25.0 at 256 KiB, 36.9 vs 45.7 at 512 KiB).
SYMMETRIC_ALL_REDUCE_MIN_BYTES = 512 << 10
SYMMETRIC_MIN_BYTES = 512 << 10

# An async single-copy call whose ranks are all in at once runs inline up to this many
# bytes exposed a rank; a larger one goes to the group's worker thread, whose copies may
# overlap the caller's work (DDP's buckets, FSDP's prefetch).
ASYNC_INLINE_MAX_BYTES = 1 << 20


# batch_isend_irecv's compiled batch (TinyCallLane.make_batch: a sendrecv, a halo
# exchange) sends single-copy from this many bytes, where a lone send waits for the
# ring's sizes
# (ShmTransport.port_copy_bytes, 128 KiB: a blocking send through the ring returns at
# once, a single-copy one waits for its reader: a 64 KiB ping-pong takes 17 us through
# the ring, 26 single-copy). sendrecv, 2 ranks, one job with MPICH's Sendrecv (stop 43,
# /tmp/s43/ab_coll.py), us, ring / single-copy / MPICH: 16 KiB 5.5 / 5.4 / 4.3-4.7,
# 32 KiB 6.3 / 5.9-6.3 / 5.2-5.6, 64 KiB 9.5 / 7.5 / 6.4-6.9. Where ranks outnumber
# cores a single-copy send waits for a reader that may not be running: from the lone
# send's size there (`meshcast bench --op sendrecv`, 4 ranks: 32 KiB 78 us through the
# ring, 143 single-copy; 64 KiB 105 / 164; 8 ranks 215 / 410 and 288 / 441).
BATCH_SINGLE_MIN_BYTES = (32 << 10, 256 << 10)  # (ranks fit the cores, outnumber them)

# A single-copy gather's or scatter's root in place (its own piece is its input or
# output, so it has nothing of its own to copy) moves a part of every other rank's piece
# itself from this piece size (paths/single_copy.SPLIT), as a broadcast splits: below,
# the second kernel copy and its wait cost more than the half copy they save. 2 ranks,
# stop 50 (Intel Xeon VM), us, whole / split: hot (/tmp/s50/inpl.py) 64 KiB 6.8-7.0 /
# 11.5, 128 KiB 9.8-9.9 / 13.1-13.2, 256 KiB 13.5-14.2 / 14.9-16.8, 512 KiB 21.2-24.9 /
# 19.7-27.8, 1 MiB gather 42.8-44.8 / 29.3-29.9, scatter 87-90 / 40 (the split ones
# include the 3 us of finding that the root is in place, lanes._in_place); cold (`meshcast
# bench -n 2 --op gather,scatter --placement in-place -e 4M`), GB/s algbw, whole / split:
# 64 KiB pieces 10.0-10.5 / 8.2-10.7, 128 KiB 16.1 / 15.8-16.8, 256 KiB 15.8-17.0 /
# 19.7-23.4, 512 KiB 15.2-20.0 / 32.2-33.3, 1 MiB 18.4-19.3 / 36-39. Stop 52: that check
# is compiled (_tiny.same_start, 0.06 us), and a split root in place gained more than
# the 3 us (hot, /tmp/s52/inpl.py, 256 KiB 16.0-17.3 -> 12.5-13.0, 512 KiB 21.7-24.4 ->
# 17.9-19.9, 1 MiB 39-48 -> 30-38); at 128 KiB the split (~10 us less 3) still only ties.
ROOTED_SPLIT_MIN_BYTES = 256 << 10

# A one-shot scatter's root stages the other ranks' pieces and copies its own straight
# into place after the entry, once its piece is this large (below, one staging copy of
# every piece and the compiled combine cost less than a second call), where Python
# stages or the call is async. A synchronous compiled entry's root (one-sided) copies
# its own piece straight into place inside the entry, at every size.
SCATTER_ROOT_DIRECT_BYTES = 16 << 10


def oneshot(caps: HostCaps, nbytes: int) -> bool:
    """Whether a reducing or broadcasting call of ``nbytes`` per rank goes one-shot."""
    return (caps.size > 1 and nbytes <= caps.oneshot_bytes
            and nbytes * caps.size <= ONESHOT_WORK_BYTES)


def oneshot_broadcast(caps: HostCaps, nbytes: int) -> bool:
    """:func:`oneshot` for a broadcast of ``nbytes`` (one-shot wherever it fits: see
    :data:`SINGLE_COPY_MIN_BYTES`)."""
    return oneshot(caps, nbytes)


def symmetric_broadcast(caps: HostCaps, nbytes: int) -> bool:
    """Whether a broadcast of ``nbytes`` on a symmetric allocation takes the symmetric
    path: where one-shot ends (see :data:`SYMMETRIC_MIN_BYTES`; single-copy, which
    starts inside the one-shot sizes, is the faster there)."""
    return not oneshot(caps, nbytes)


def oneshot_all_gather(caps: HostCaps, piece: int) -> bool:
    """:func:`oneshot` for all_gather's ``piece`` bytes per rank (one-shot wherever it
    fits: see :data:`SINGLE_COPY_MIN_BYTES`)."""
    return oneshot(caps, piece)


def single_copy(caps: HostCaps, nbytes: int) -> bool:
    """Whether a non-reducing call whose largest contribution is ``nbytes`` goes
    single-copy (all_to_all has its own rule, :func:`all_to_all_single_copy`)."""
    return caps.single_copy and nbytes >= SINGLE_COPY_MIN_BYTES


def all_reduce_single_copy(caps: HostCaps, nbytes: int) -> bool:
    """Whether an all_reduce of ``nbytes`` (past one-shot) goes single-copy."""
    return caps.single_copy and caps.size > 1 and nbytes >= ALL_REDUCE_SINGLE_MIN_BYTES


def scatter_oneshot(caps: HostCaps, total: int, largest: int) -> bool:
    """Whether a scatter of ``total`` bytes whose largest piece holds ``largest`` goes
    one-shot: the root's region holds it all (one-shot wherever it fits: see
    :data:`SINGLE_COPY_MIN_BYTES`)."""
    return total <= direct_bytes(caps, 1)


def gather_oneshot(caps: HostCaps, largest: int) -> bool:
    """Whether a gather whose largest piece holds ``largest`` bytes goes one-shot: every
    piece fits a region and the root's reading (one-shot wherever it fits: see
    :data:`SINGLE_COPY_MIN_BYTES`)."""
    return largest <= direct_bytes(caps, caps.size)


def rooted_split(piece: int) -> bool:
    """Whether a single-copy gather's or scatter's root in place moves a part of every
    other rank's ``piece`` bytes itself (:data:`ROOTED_SPLIT_MIN_BYTES`)."""
    return piece >= ROOTED_SPLIT_MIN_BYTES


def direct_bytes(caps: HostCaps, readers: int) -> int:
    """The largest contribution a rank stages for a one-shot gather/scatter/all_to_all
    when ``readers`` contributions of that size land in one rank's reads."""
    return min(caps.oneshot_bytes, ONESHOT_WORK_BYTES // readers)


def all_to_all_direct_limit(caps: HostCaps, header: int) -> int:
    """The largest input (bytes) an all_to_all rank stages for the one-shot path
    (``header``: the split-size header in front of it): as far as its region and the
    one-shot work allow (one-shot wherever it fits: see :data:`SINGLE_COPY_MIN_BYTES`).
    Past it the call goes single-copy. Every rank applies it to its own input (splits
    may be uneven), and a rank's input past it means single-copy fits, so the two
    rules leave no gap."""
    return direct_bytes(caps, caps.size) - header


def all_to_all_single_copy(caps: HostCaps, largest: int, header: int) -> bool:
    """Whether an all_to_all whose largest input holds ``largest`` bytes goes single-copy:
    wherever some rank's input is past :func:`all_to_all_direct_limit` (it then does not
    stage it), members permitting. So no size falls between one-shot and single-copy
    (at 8 ranks, inputs of 256-512 KiB used to: the arena schedule ran them at 1.4 ms,
    single-copy runs 512 KiB in 0.5-0.8)."""
    return caps.single_copy and largest > all_to_all_direct_limit(caps, header)


def fast_path(kind: str, caps: HostCaps, piece: int, *, symmetric: bool = False,
              header: int = 0) -> str | None:
    """The fast path a call takes on one host with no algorithm named, or None when
    the schedules run it (then :func:`decide` picks one).

    Args:
        kind: the collective.
        caps: the group.
        piece: bytes per rank, equal on every rank: the buffer (broadcast,
            all_reduce, reduce; float16/bfloat16 reduce in float32, so count those
            bytes), each rank's piece (all_gather, gather, scatter), each rank's
            output (reduce_scatter), the piece for each peer (all_to_all); 0 for a
            barrier. Uneven pieces decide by their largest (gather, scatter: by
            their sum at the root, all_gather by the largest).
        symmetric: the buffer lies in a symmetric allocation (the gathered output,
            the reduce_scatter input, the all_reduce or broadcast array).
        header: all_to_all's split-size header, in bytes.

    Returns:
        ``"oneshot"``, ``"cma"``, ``"symmetric"`` or None.
    """
    n = caps.size
    if n < 2:
        return None
    if kind == "barrier":
        return "oneshot" if oneshot(caps, 0) else None
    if kind == "broadcast":
        if oneshot_broadcast(caps, piece):
            return "oneshot"
        if symmetric and symmetric_broadcast(caps, piece):
            return "symmetric"
        return "cma" if single_copy(caps, piece) else None
    if kind == "all_reduce":
        if symmetric and (piece >= SYMMETRIC_ALL_REDUCE_MIN_BYTES or not oneshot(caps, piece)):
            return "symmetric"
        if oneshot(caps, piece):
            return "oneshot"
        return "cma" if all_reduce_single_copy(caps, piece) else None
    if kind == "reduce":
        if oneshot(caps, piece):
            return "oneshot"
        return "cma" if single_copy(caps, piece) else None
    if kind == "all_gather":
        if symmetric and piece * n >= SYMMETRIC_MIN_BYTES:
            return "symmetric"
        if oneshot_all_gather(caps, piece):
            return "oneshot"
        return "cma" if single_copy(caps, piece) else None
    if kind in ("gather", "scatter"):
        # gather: the root reads n pieces; scatter: the root's region holds them all
        fits = (gather_oneshot(caps, piece) if kind == "gather"
                else scatter_oneshot(caps, piece * n, piece))
        if fits:
            return "oneshot"
        return "cma" if single_copy(caps, piece) else None
    if kind == "reduce_scatter":
        if symmetric and piece * n >= SYMMETRIC_MIN_BYTES:
            return "symmetric"
        if oneshot(caps, piece * n):
            return "oneshot"
        return "cma" if single_copy(caps, piece) else None
    if kind == "all_to_all":
        if piece * n <= all_to_all_direct_limit(caps, header):
            return "oneshot"
        return "cma" if all_to_all_single_copy(caps, piece * n, header) else None
    raise ValueError(f"no collective {kind!r}")


__all__ = ["ALL_REDUCE_SINGLE_MIN_BYTES", "ASYNC_INLINE_MAX_BYTES",
           "ONESHOT_WORK_BYTES", "ROOTED_SPLIT_MIN_BYTES",
           "SINGLE_COPY_MIN_BYTES",
           "SYMMETRIC_ALL_REDUCE_MIN_BYTES", "SYMMETRIC_MIN_BYTES", "TABLE", "Choice", "HostCaps",
           "Rule", "algorithm_name", "all_reduce_single_copy", "all_to_all_direct_limit",
           "all_to_all_single_copy", "decide", "direct_bytes", "fast_path", "message_bytes",
           "oneshot", "oneshot_all_gather", "oneshot_broadcast", "parse_tune", "select", "single_copy",
           "symmetric_broadcast", "tuned_collectives"]
