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

# Stop 70 (AMD EPYC VM, 2 ranks) moved single-copy's start inside the one-shot sizes up
# for broadcast (BROADCAST_SINGLE_MIN_BYTES), all_gather (ALL_GATHER_SINGLE_MIN_BYTES),
# gather and scatter (ROOTED_SINGLE_MIN_BYTES) and all_to_all
# (ALL_TO_ALL_SINGLE_MIN_BYTES): since one-shot's readers copy as the stager goes and its
# programs run compiled, one-shot is the faster at the old thresholds, hot or not; it
# loses only once its two copies leave the caches (the bench's windows spread over
# 32 MiB, so each call's data comes from memory). Each new line is where one-shot stops
# winning there. Us, one-shot / single-copy, out-of-place (the bench's sizes):
# `meshcast bench -n 2 -b 32K -e 4M -f 2 --iters 30 --rounds 3` (windows within the
# L3): broadcast 64 KiB 2.9 / 5.2, 256 KiB 7.9 / 14.0, 1 MiB 22.8 / 28.4; all_gather
# 256 KiB 11.2 / 17.6, 2 MiB 62 / 72; gather 1 MiB 19.5 / 26.5; scatter 1 MiB 20.0 /
# 26.0; all_to_all 512 KiB 17.5 / 24.2. `-b 8 -e 32M` (from memory): broadcast 256 KiB
# 13.9-15.1 / 13.3-13.5, 1 MiB 54-59 / 43-44; all_gather 128 KiB 9.8 / 12.0, 512 KiB
# 33.6 / 31.1, 1 MiB 80 / 64; all_to_all 256 KiB 19.3 / 15.5; gather 1 MiB 46 / 42;
# scatter 512 KiB 20.8 / 16.3. Hot (benchmarks/versus_mpi.py, by piece, with MPICH
# 5.0.2): broadcast 64 KiB 1.7 / 5.0 / 7.5, 1 MiB 17.8 / 35.4 / 69; gather 64 KiB
# 2.4 / 8.0 / 7.8 (the gap to MPICH the stop 69 note named); scatter 64 KiB 2.3 / 8.1 /
# 8.4; all_to_all 64 KiB 3.6 / 7.6 / 8.8. 4 ranks on 2 cores, hot: all_gather
# 64-256 KiB pieces 24-78 / 51-148.

# all_reduce reads the peers' data for its share, then the reduced shares: two single
# copies instead of the arena's copy in, reduce and copy out. Past the one-shot sizes
# (`meshcast bench --algo arena` beside the default, 2 ranks, same run: see the note in
# benchmarks/README.md).
ALL_REDUCE_SINGLE_MIN_BYTES = 2 << 20

# all_gather leaves one-shot for single-copy once the gathered array reaches this (and a
# piece SINGLE_COPY_MIN_BYTES). Since the lane's single-copy entry is compiled too (the
# reads were already), single-copy wins at 128 KiB gathered: 2 ranks, one job with
# MPICH's Allgather, best of 5 x 30-100 calls, us, one-shot / single-copy / MPICH: one
# window 13.7-14.1 / 9.6-9.8 / 15-16.3, 64 windows 17.1-19.5 / 13.0-15.2 / 13.6-16.0.
# (At 64 KiB, 32 KiB pieces, single-copy wins with hot buffers only: 10.3 / 7.2 / 10.4,
# 64 windows 10.9 / 10.1 / 9.7.)
# (stop 70: from 256 KiB gathered, see above; at 256 KiB, the bench from memory ran
# one-shot in place at 11.8-12.3 us against 10.1-11.3, within the L3 9.7-10.8 against
# 11.6-12.0: a tie, left to single-copy)
# (stop 74: both lines stay, and the figures that moved them back and forth are the
# machine's two states. This VM's two cores trade a cache line in ~100 ns or ~530 ns,
# switching every few minutes (a line ping-pong between two processes tells which; a
# 64 KiB copy written by one core and read by the other takes 1.8 or 4.2 us). One-shot
# copies through a region the other core has just used, so the far state costs it
# most; single-copy reads the owner's buffer once. 64 KiB pieces at 2 ranks, us,
# one-shot / single-copy / MPICH, state measured before and after each run, cold
# (`meshcast bench --paired`): all_gather near 5.5-6.2 / 6.4-6.7 / 5.7-7.5, far
# 8.9-9.9 / 6.9-9.1 / 7.1-9.9; all_to_all near 5.9-6.0 / 7.0 / 7.1-7.8, far 7.9 / 7.1
# / 8.1-9.4 (one-shot 13.2-13.5 there before its staged input moved to a page of its
# own, _onehost.split_head). Hot (benchmarks/versus_mpi.py), far, one-shot / MPICH:
# all_gather 8.4 / 13.2, all_to_all 6.4 / 9.9. So single-copy would win only
# all_gather's cold rows in the far state, and by less than one-shot wins elsewhere.)
ALL_GATHER_SINGLE_MIN_BYTES = 256 << 10

# Where the one-shot path runs (one synchronisation, a copy in), it beats the symmetric
# broadcast (two synchronisations, no copies), which therefore starts where the one-shot
# path ends. The symmetric all_reduce, a program the lane runs in one compiled call
# (paths/symmetric.InlineCalls, stop 72), wins from 64 KiB with hot buffers (one job
# each; one-shot / symmetric us: 2 ranks 32 KiB 5.2-7.3 / 4.4-5.7, 64 KiB 8.3-10.8 /
# 5.1-6.2, 128 KiB 12.5-18.1 / 5.6-6.9; 4 ranks 64 KiB 20-42 / 17-34; 8 ranks 64 KiB
# 82-88 / 57-63) but from 128 KiB in the bench's rotated (cold) windows, where the
# symmetric fold reads every peer's window from memory and one-shot's regions stay
# cached (`meshcast bench --symmetric --compare meshcast`, symmetric / plain busbw:
# 2 ranks 64 KiB 0.97, 128 KiB 1.44; 4 ranks 64 KiB 0.33-0.74, 128 KiB 1.20-1.22).
# (Before, through the general path, from 512 KiB: 59.5 vs 79.2 us at 512 KiB, a tie
# at 256 KiB.) all_gather / reduce_scatter, whose symmetric forms save a copy of every
# piece, from 512 KiB (gathered array, scattered input): below it the one-shot lane's
# compiled round costs less than the symmetric path's entry (2 ranks, same run:
# all_gather 31.5 vs 20.1 us at 128 KiB, a tie from 256 KiB; reduce_scatter 34.4 vs
# 14.4 us at 128 KiB, 33.5 vs 25.0 at 256 KiB, 36.9 vs 45.7 at 512 KiB).
SYMMETRIC_ALL_REDUCE_MIN_BYTES = 128 << 10
# (Measured again on the lane, stop 72: at 256 KiB, all_gather at 8 ranks ran 66 / 75
# us hot, and reduce_scatter 2 ranks in the cold bench 0.87x plain; from 512 KiB both
# win at 2, 4 and 8 ranks, hot and cold.)
SYMMETRIC_MIN_BYTES = 512 << 10

# The symmetric broadcast on the lane (stop 72; one-shot or single-copy / symmetric us,
# hot, one job per rank count): 2 ranks 128 KiB 4.3-5.1 / 4.6-5.9, 256 KiB 12.3-14.0 /
# 5.3-6.7, 1 MiB 41.1 / 13.5; 4 ranks 128 KiB 15.7-22.4 / 15.2-23.4, 256 KiB 24.8-32.5
# / 18.6-27.0; 8 ranks 128 KiB 54.5 / 62.9, 256 KiB 80.2 / 71.3. In the bench's cold
# windows, symmetric / plain busbw at 256 KiB: 2 ranks 2.56, 4 ranks 0.93-1.17; against
# the old rule (symmetric where one-shot ends), time new / old: 2 ranks 256 KiB-1 MiB
# 0.36-0.41, but 4 ranks on 2 cores 256 KiB 1.12, 512 KiB 1.25, 8 ranks 256 KiB 1.72: so
# where the ranks outnumber the cores the old rule stays (symmetric_broadcast).
SYMMETRIC_BROADCAST_MIN_BYTES = 256 << 10

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

# gather and scatter go single-copy from this piece size where the kernel allows it
# (ranks fit the cores, outnumber them), one-shot sizes included: every rank writes its
# piece straight into the root's list (gather) or reads it straight from the root's
# pieces (scatter), one copy, where one-shot copies every piece into a region and out
# again; the root copies its own piece meanwhile, or, in place, moves a part of every
# other rank's (paths/single_copy.SPLIT). Since the lane runs that compiled (stop 47:
# the root's pieces exposed as a table by the compiled entry, one compiled call for the
# copies; 2 ranks, 64 KiB pieces, hot: gather 40 -> 7.3 us, scatter 25.6 -> 7.4),
# single-copy wins from 256 KiB pieces where ranks fit the cores. `meshcast bench -n 2
# --op gather,scatter --iters 100` (cold), two runs each, us, one-shot -> single-copy,
# out-of-place / in-place, by piece (half the bench's size): 64 KiB gather 10.6-10.8 ->
# 9.6-11.3 / 6.8 -> 10.0-11.4, scatter 11.2-11.5 -> 11.2-13.4 / 6.7-6.8 -> 11.5-12.2;
# 128 KiB gather 19.4-20.1 -> 12.3-15.5 / 9.1-9.3 -> 11.5-13.7, scatter 21.4-21.6 ->
# 12.3-14.7 / 9.5-9.8 -> 13.1-13.9; 256 KiB gather 37.3-38.0 -> 19.7-25.1 / 19.3-20.1
# -> 16.4-18.7, scatter 40.9-41.9 -> 22.3-24.4 / 17.6-17.8 -> 14.0-16.9. Hot, 2 ranks
# against MPICH's Gather/Scatter (/tmp/s47/allcmp.py), us, single-copy / MPICH: 256 KiB
# pieces gather 12.5 / 16.7, scatter 12.3 / 18.1; 512 KiB 21.2 / 56.6, 21.6 / 30.8 (at
# 64 and 128 KiB pieces single-copy won hot, 5.6-6.1 / 6.3-6.5 and 7.7-7.8 / 9.3-10.7,
# but lost the bench's in-place rows above). Where ranks outnumber the cores the bench's scatter (3
# and 4 ranks) kept one-shot ahead to 512 KiB, so the old line stays there; the older
# figures below are of the Python single-copy body. Lane calls, cold rotating
# windows, two runs, us, one-shot / single-copy: scatter, 2 ranks 128 KiB 24.7-24.8 /
# 26.9-27.9, 256 KiB 46.9-47.4 / 36.6-39.2, 512 KiB 98-102 / 62-72; 4 ranks on 2 cores
# 128 KiB 65-95 / 117-165, 256 KiB 203-212 / 134-141; gather, 2 ranks (the root's list
# back to back) 128 KiB 28 / 47, 256 KiB 65.5 / 59-60, 512 KiB 186-190 / 118-119
# (/tmp/s41/gs_cold2.py, stop 41). Since one-shot copies overlap (a gather root and a
# scatter's or broadcast's readers copy as the stager goes, _tiny.c's pipelined copies)
# and a gather root's own piece skips its region (stop 45), one-shot wins to 512 KiB:
# `meshcast bench --op gather,scatter` (cold), the bench's size (n pieces), us,
# out-of-place and in-place, single-copy -> one-shot: 2 ranks, 512 KiB gather 48-53 /
# 52 -> 33-35 / 19-20, scatter 34 / 32-40 -> 29-37 / 18; 1 MiB gather 71 / 63-66 ->
# 66-71 / 39-47, scatter 47-52 / 45-46 -> 53-67 / 42-50; 4 ranks, 1 MiB gather 205-219
# / 231-360 -> 142-215 / 114-146, scatter 173-204 / 126-294 -> 165-182 / 120-137; 2 MiB
# gather 290-349 / 236-504 -> 436-492 / 222-257. Hot, 2 ranks, the root's list of
# separate arrays, us: 256 KiB pieces gather 42-49 -> 27-28, scatter 32-33 -> 22-23
# (MPICH 20-22); 512 KiB gather 52-57 -> 48-49, scatter 48-49 -> 54.
# Stop 50 (Intel Xeon VM, 2 cores): single-copy from 64 KiB pieces where ranks fit the
# cores, once a root in place no longer splits small pieces (ROOTED_SPLIT_MIN_BYTES;
# the split was most of what lost the in-place rows above) nor spends 3 us finding out
# that it is in place. Hot, 2 ranks, one job with MPICH (benchmarks/versus_mpi.py), us,
# one-shot -> single-copy (MPICH): 64 KiB gather 7.3-8.0 -> 6.6 (6.1-6.5), scatter
# 8.5-8.8 -> 6.6 (6.4-6.9); 128 KiB gather 12.1-13.0 -> 9.2 (9.6-10.4), scatter
# 10.8-11.2 -> 9.0 (9.9-10.7); the root in place (/tmp/s50/inpl.py) 64 KiB 7.2-7.6 ->
# 6.4-6.6, 128 KiB 8.9-9.6 -> 8.8-9.1. Cold (`meshcast bench -n 2 --op gather,scatter -e
# 32M --iters 30 --compare mpi`: every call a window not touched since the start), the
# bench's 128 KiB and 256 KiB rows (64 and 128 KiB pieces), out-of-place: gather 17.6 ->
# 16.3 (MPICH 21.0), 36.9 -> 26.9 (43.0); scatter 18.1 -> 16.4 (22.9), 34.7 -> 28.1
# (44.3). Left worse: the cold in-place rows, 8.5-12.2 -> 14.0-15.3 and 15.5-17.4 ->
# 19.7-27 (a kernel copy between windows just mapped in costs 3x a user copy, and a
# root in place has none of its own to overlap it with; MPICH has no in-place row
# there). Stop 49 (AMD EPYC VM, hot) had gather at 128-255 KiB pieces faster one-shot,
# 16.6-18.2 against 19.3-25 us, and scatter faster single-copy, 19.5-19.9 against 22.8.
# (stop 70: from 256 KiB pieces where ranks fit the cores, see above)
ROOTED_SINGLE_MIN_BYTES = (256 << 10, 512 << 10)  # (ranks fit the cores, outnumber them)

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

# A broadcast goes single-copy from this size where the kernel allows it and the ranks
# fit the cores, one-shot sizes included: the root writes each reader's part while the
# reader reads the others (one compiled call with the closing round), where one-shot
# copies it all in, then out. Where ranks outnumber the cores, one-shot as far as it
# runs: its root awaits nobody, where single-copy waits for every rank twice. One job
# with MPICH's Bcast (stop 46, /tmp/s46/sc.py and lat_mpi.py), us, one-shot /
# single-copy / MPICH; 2 ranks, hot loop (best of 5 x 300 calls): 16 KiB 2.7 / 4.4-4.6 /
# 3.4-3.6, 32 KiB 4.3 / 5.0-5.2 / 4.3, 64 KiB 7.5-7.8 / 5.5-6.1 / 5.5-6.2, 128 KiB
# 9.1-9.3 / 6.7-6.9 / 8.1-8.5, 256 KiB 17.5 / 9.2-9.5 / 12.5-13.1, 512 KiB 36 /
# 14.8-15.0 / 20-28, 1 MiB 80 / 23.6 / 38-46; synchronized starts (median of 400): 16
# KiB 3.9 / 3.9-4.0 / 2.9-3.1, 32 KiB 5.7 / 4.2-4.6 / 3.4-3.7, 64 KiB 8.6 / 5.0-5.2 /
# 4.7-4.9, 128 KiB 15.0-15.5 / 6.0 / 6.9-7.2, 512 KiB 36 / 14.5-15.4 / 28-30. 4 ranks on
# 2 cores, hot (100 calls): 64 KiB 19 / 43-61, 256 KiB 40-41 / 65-69, 512 KiB 69-76 /
# 81-84; 3 ranks 64 KiB 20-22 / 36-42, 256 KiB 35-44 / 52-57.
# (stop 70: from 256 KiB, see above)
BROADCAST_SINGLE_MIN_BYTES = 256 << 10

# all_to_all stages its input one-shot while each piece is under this (and its region
# and the one-shot work allow), ranks fitting the cores / outnumbering them: see
# all_to_all_direct_limit (stop 70 moved the first from 64 KiB, see above; the second
# stays where stop 44 measured it; stop 74 kept both, see ALL_GATHER_SINGLE_MIN_BYTES).
ALL_TO_ALL_SINGLE_MIN_BYTES = (128 << 10, 64 << 10)

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
    """:func:`oneshot` for a broadcast of ``nbytes``: not from
    :data:`BROADCAST_SINGLE_MIN_BYTES` where single-copy runs and the ranks fit the
    cores."""
    return oneshot(caps, nbytes) and not (caps.single_copy and not caps.crowded
                                          and nbytes >= BROADCAST_SINGLE_MIN_BYTES)


def symmetric_broadcast(caps: HostCaps, nbytes: int) -> bool:
    """Whether a broadcast of ``nbytes`` on a symmetric allocation takes the symmetric
    path: from :data:`SYMMETRIC_BROADCAST_MIN_BYTES` where the ranks fit the cores,
    where one-shot ends where they outnumber them (below, one-shot is the faster)."""
    if caps.crowded:
        return not oneshot(caps, nbytes)
    return caps.size > 1 and nbytes >= SYMMETRIC_BROADCAST_MIN_BYTES


def oneshot_all_gather(caps: HostCaps, piece: int) -> bool:
    """:func:`oneshot` for all_gather's ``piece`` bytes per rank: not once the gathered
    array is large enough for single-copy, which reads each piece once where one-shot
    copies it twice."""
    return oneshot(caps, piece) and not (piece * caps.size >= ALL_GATHER_SINGLE_MIN_BYTES
                                         and single_copy(caps, piece))


def single_copy(caps: HostCaps, nbytes: int) -> bool:
    """Whether a non-reducing call whose largest contribution is ``nbytes`` goes
    single-copy (all_to_all has its own rule, :func:`all_to_all_single_copy`)."""
    return caps.single_copy and nbytes >= SINGLE_COPY_MIN_BYTES


def all_reduce_single_copy(caps: HostCaps, nbytes: int) -> bool:
    """Whether an all_reduce of ``nbytes`` (past one-shot) goes single-copy."""
    return caps.single_copy and caps.size > 1 and nbytes >= ALL_REDUCE_SINGLE_MIN_BYTES


def scatter_oneshot(caps: HostCaps, total: int, largest: int) -> bool:
    """Whether a scatter of ``total`` bytes whose largest piece holds ``largest`` goes
    one-shot: the root's region holds it all, and single-copy does not start earlier
    (:data:`ROOTED_SINGLE_MIN_BYTES`)."""
    return total <= direct_bytes(caps, 1) and not _rooted_single_copy(caps, largest)


def gather_oneshot(caps: HostCaps, largest: int) -> bool:
    """Whether a gather whose largest piece holds ``largest`` bytes goes one-shot: every
    piece fits a region and the root's reading, and single-copy does not start
    earlier (:data:`ROOTED_SINGLE_MIN_BYTES`)."""
    return largest <= direct_bytes(caps, caps.size) and not _rooted_single_copy(caps, largest)


def _rooted_single_copy(caps: HostCaps, largest: int) -> bool:
    """Whether a gather or scatter whose largest piece holds ``largest`` bytes goes
    single-copy even where one-shot could run (:data:`ROOTED_SINGLE_MIN_BYTES`)."""
    return caps.single_copy and largest >= ROOTED_SINGLE_MIN_BYTES[caps.crowded]


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
    one-shot work allow, and, where single-copy runs, short of
    :data:`ALL_TO_ALL_SINGLE_MIN_BYTES` a piece. Past it the call goes
    single-copy. Every rank applies it to its own input (splits may be uneven), and
    a rank's input past it means single-copy fits, so the two rules leave no gap.

    One-shot copies every piece twice (in, out), single-copy once; since the lane's
    single-copy all_to_all is compiled too (entry, then reads and closing round), it
    is the faster from that rule on. One job, MPICH's Alltoall alternating with
    meshcast's (windows of a larger buffer, best of 5 x 50 calls, us), 2 ranks, input
    128 / 256 / 512 KiB: one-shot 13-16 / 35 / 72, single-copy 12-13 / 26-29 /
    46-51, MPICH 9.5-12.4 / 23-27 / 43-47; 4 ranks on 2 cores, 256 KiB: one-shot
    116-122, single-copy 100-101, MPICH 95-112. (Single-copy used to start only past
    the one-shot regions, 1 MiB at 2 ranks, when its entry was Python.)"""
    limit = direct_bytes(caps, caps.size) - header
    if caps.single_copy:
        limit = min(limit, ALL_TO_ALL_SINGLE_MIN_BYTES[caps.crowded] * caps.size - 1)
    return limit


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
        if symmetric and symmetric_broadcast(caps, piece):
            return "symmetric"
        if oneshot_broadcast(caps, piece):
            return "oneshot"
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


__all__ = ["ALL_GATHER_SINGLE_MIN_BYTES", "ALL_REDUCE_SINGLE_MIN_BYTES",
           "ALL_TO_ALL_SINGLE_MIN_BYTES", "ASYNC_INLINE_MAX_BYTES",
           "BROADCAST_SINGLE_MIN_BYTES",
           "ONESHOT_WORK_BYTES", "ROOTED_SINGLE_MIN_BYTES", "ROOTED_SPLIT_MIN_BYTES",
           "SINGLE_COPY_MIN_BYTES",
           "SYMMETRIC_ALL_REDUCE_MIN_BYTES", "SYMMETRIC_BROADCAST_MIN_BYTES",
           "SYMMETRIC_MIN_BYTES", "TABLE", "Choice", "HostCaps",
           "Rule", "algorithm_name", "all_reduce_single_copy", "all_to_all_direct_limit",
           "all_to_all_single_copy", "decide", "direct_bytes", "fast_path", "message_bytes",
           "oneshot", "oneshot_all_gather", "oneshot_broadcast", "parse_tune", "select", "single_copy",
           "symmetric_broadcast", "tuned_collectives"]
