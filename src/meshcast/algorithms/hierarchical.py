"""Collectives across hosts, composed from a host-local phase and an inter-host phase.

Theory of operation
-------------------
A group that spans hosts runs every collective in phases (Open MPI HAN,
MPICH's multi-leader compositions, Horovod's hierarchical all-reduce):

* ``local``: a collective among the ranks of *this host*, on meshcast's
  shared-memory engine (a :class:`LocalOps`);
* ``rail``: the ranks with the same local index on every host (HAN's
  "up-communicators"): with L ranks per host there are L rails, each moving
  1/L of the data over its own inter-host stream;
* ``leaders``: rail 0 (the first rank of every host);
* ``p2p``: point-to-point between any two ranks of the group.

The inter-host pieces run on an existing engine (MPI or Gloo) through the
:class:`Across` contract; this module imports neither, nor the shared-memory
engine: the same functions run in :mod:`meshcast.testing.hosts_sim` (every
rank a thread, hosts as lists) for any hosts x ranks shape.

Four families, picked per call by :func:`choose` from the measured
:data:`DEFAULTS` (a collective has those whose code differs for it; each is one
function, registered in :data:`ALGORITHMS`, whose docstring gives its steps and
what it sends between hosts):

``leader``  local reduce/gather to the host's leader, one exchange among the
            leaders, local broadcast/scatter. One inter-host message per host;
            runs every layout (hosts may hold different numbers of ranks).
``rails``   (every host the same number of ranks) local reduce-scatter, each
            rail all-reduces its shard across hosts, local all-gather; the
            data crosses hosts once in L parallel streams, so a host sends
            what a flat ring would make it send, without the intra-host hops.
``flat``    the whole call on the inter-host engine, every rank a peer: the
            baseline (and what MPI's own hierarchy, if any, does).
``fused``   (all_reduce and reduce_scatter, every host the same number of
            ranks; all_to_all in even pieces; MPI, in groups whose agreement rows
            go straight between ranks) the data path of ``rails`` (all_to_all:
            of ``flat``) in point-to-point messages that also carry the call's
            agreement (:func:`all_reduce_fused`): one synchronisation fewer.

Reductions across hosts combine the hosts' partial results in host order, so
every rank gets bitwise the same result; the order differs from a flat
rank-order reduction only in how floating-point sums associate.

Every function takes ``w``: the rank's data as a flat array (already in the
working dtype for reductions) and the per-rank element ``counts`` that the
agreement step (``spanning.py``) made every rank know.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from ..ops import ReduceOp, reduce_many
from ._common import as_bytes, displs
from ._common import split as _pieces
from ._plan import split_even

#: From this many bytes, an all-reduce among hosts (the leaders', or a rail's) is a
#: reduce-scatter plus an all-gather; below, one all-gather of everything and a local
#: combine (one exchange instead of two). Measured on 2 emulated hosts x 2 ranks.
RAILS_MIN_BYTES = 64 << 10
#: Chunk size of the leader family's pipelined all_reduce (the link carries one chunk
#: while the host reduces the next). 32 MiB on 2 emulated hosts x 2 ranks, 2 Gbit/s, four
#: alternating runs in one job (ms): one piece 188/186/163/161, 8 MiB chunks
#: 172/173/156/153, 4 MiB 164/169/177/156 (link floor 134). The gain is small on 2 cores:
#: the hosts' work and the kernel's network work share them.
PIPELINE_BYTES = 8 << 20

FAMILIES = ("leader", "rails", "flat", "fused")

_F = TypeVar("_F", bound=Callable[..., Any])

#: ``ALGORITHMS[kind][family]``: the function that runs collective ``kind`` with
#: ``family``, called as ``fn(ctx, *args)`` with :func:`run`'s arguments after the
#: family. A collective has only the families whose code differs (reduce, gather and
#: scatter ``leader`` and ``flat``; all_to_all only the engine's exchange, ``flat`` and
#: ``fused``), so a name never runs another family's code. Each function's docstring
#: says what it does, its steps and what crosses hosts (``meshcast algorithms`` lists
#: them); :func:`supports` and :func:`choose` know no other. A ``fused`` function
#: returns False when the ranks' calls differ (:func:`run` raises then; spanning.py
#: calls them itself, with the call's cell, and settles a False).
ALGORITHMS: dict[str, dict[str, Callable[..., Any]]] = {
    kind: {} for kind in ("broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
                          "reduce_scatter", "all_to_all")}


def _runs(kind: str, family: str) -> Callable[[_F], _F]:
    """Decorator: ``fn`` runs ``kind`` with ``family`` (see :data:`ALGORITHMS`)."""
    def deco(fn: _F) -> _F:
        ALGORITHMS[kind][family] = fn
        return fn
    return deco


def families(kind: str) -> tuple[str, ...]:
    """The families that can run ``kind`` on some layout, in :data:`FAMILIES` order."""
    return tuple(f for f in FAMILIES if f in ALGORITHMS.get(kind, {}))


def _runs_what(family: str) -> str:
    kinds = [k for k in ALGORITHMS if family in ALGORITHMS[k]]
    return ", ".join(kinds[:-1]) + " and " + kinds[-1] if len(kinds) > 1 else kinds[0]


class LocalOps(Protocol):
    """Collectives among the ranks of this host (local ranks), on flat arrays."""

    size: int

    def reduce(self, w: np.ndarray, op: ReduceOp, root: int) -> None: ...
    def broadcast(self, w: np.ndarray, root: int) -> None: ...
    def all_gather(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int]) -> None: ...
    def reduce_scatter(self, out: np.ndarray, w: np.ndarray, counts: Sequence[int],
                       op: ReduceOp) -> None: ...
    def gather(self, outs: list[np.ndarray] | None, mine: np.ndarray, root: int) -> None: ...
    def scatter(self, out: np.ndarray, ins: list[np.ndarray] | None, root: int) -> None: ...


class Pending(Protocol):
    """An exchange posted with ``Across.start_*``: local work may run before :meth:`wait`."""

    def wait(self) -> None: ...


class Across(Protocol):
    """An inter-host communicator bound to one call (deadline and name are the call's).

    Counts are in elements of the arrays passed; members are numbered 0..size-1.
    """

    size: int
    rank: int

    def allgatherv(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int]) -> None: ...
    def start_allgatherv(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int],
                         displs: Sequence[int]) -> Pending: ...
    # uniform: every member's counts are the same even split, known from agreed data
    # (the engine may then run its plain all-to-all; every member passes the same value)
    def alltoallv(self, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                  send_counts: Sequence[int], uniform: bool = False) -> None: ...
    def start_alltoallv(self, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                        send_counts: Sequence[int], uniform: bool = False) -> Pending: ...
    def bcast(self, w: np.ndarray, root: int) -> None: ...
    def start_bcast(self, w: np.ndarray, root: int) -> Pending: ...
    #: the leader family's broadcast and the rails' reduce_scatter move larger data in
    #: chunks of this many bytes, so that the hosts' own steps overlap the link (0: in
    #: one piece)
    pipeline_chunk: int
    def send(self, w: np.ndarray, peer: int) -> None: ...
    def recv(self, w: np.ndarray, peer: int) -> None: ...
    def allreduce(self, w: np.ndarray, op: ReduceOp) -> bool: ...
    # the engine's own rooted calls (``flat``); reduce: False where it lacks the op
    def reduce(self, w: np.ndarray, op: ReduceOp, root: int) -> bool: ...
    def gatherv(self, out: np.ndarray | None, mine: np.ndarray, counts: Sequence[int],
                root: int) -> None: ...
    def scatterv(self, out: np.ndarray, ins: np.ndarray | None, counts: Sequence[int],
                 root: int) -> None: ...
    def prepare(self, recvs: Sequence[tuple[int, np.ndarray]],
                sends: Sequence[tuple[int, np.ndarray]]) -> Any: ...
    def run(self, prepared: Any, settled: bool = False, started: Any = None) -> bool: ...


class Ctx(Protocol):
    """What an algorithm sees of its group for one call."""

    layout: Layout
    local: LocalOps
    rail: Across | None      # None when no other host has a rank with my local index
    leaders: Across | None   # set on each host's leader
    p2p: Across              # every rank of the group, in group-rank order
    flat: Across             # the same members, for whole-call delegation
    notes: Any               # a traced call's meshcast.trace.steps.StepNotes, else None


@dataclass(frozen=True)
class Layout:
    """Where the group's ranks live.

    Attributes:
        hosts: group ranks per host, hosts ordered by their lowest group rank,
            ranks of a host in group-rank order.
        me: this rank's group rank.
    """

    hosts: tuple[tuple[int, ...], ...]
    me: int

    @property
    def size(self) -> int:
        return sum(len(h) for h in self.hosts)

    @property
    def host(self) -> int:
        return next(i for i, h in enumerate(self.hosts) if self.me in h)

    @property
    def local(self) -> int:
        return self.hosts[self.host].index(self.me)

    @property
    def contiguous(self) -> bool:
        """Every host's ranks are consecutive group ranks (a host's pieces of an array in
        group-rank order are one span)."""
        return all(h == tuple(range(h[0], h[0] + len(h))) for h in self.hosts)

    @property
    def uniform(self) -> bool:
        """Every host holds the same number of ranks (rails need it)."""
        return len({len(h) for h in self.hosts}) == 1

    @property
    def one_rank_a_host(self) -> bool:
        """Every host holds one rank: no local phase (:data:`ONE_RANK_A_HOST`)."""
        return all(len(h) == 1 for h in self.hosts)

    def where(self, g: int) -> tuple[int, int]:
        """(host index, local index) of group rank ``g``."""
        for i, h in enumerate(self.hosts):
            if g in h:
                return i, h.index(g)
        raise ValueError(f"group rank {g} is not in the layout")

    def rail(self, j: int) -> list[int]:
        """Group ranks with local index ``j``, in host order."""
        return [h[j] for h in self.hosts if len(h) > j]


#: The default family per engine and collective: ascending ``(from bytes, family)``
#: steps, ``bytes`` being the call's nccl-tests size (the buffer; the gathered array for
#: all_gather, the input for reduce_scatter). Measured with every family forced, the
#: three alternating in one job (2 emulated hosts x 2 ranks, 2 Gbit/s links, float32;
#: the best of two runs, ms; ``flat`` is meshcast's agreement plus the engine's own call).
#:
#: Over MPI (MPICH 5, ofi/tcp), at 128 KiB / 512 KiB / 2 MiB / 32 MiB:
#:
#: ==============  ==========================  ==========================  ======================
#: collective      leader                      rails                       flat
#: ==============  ==========================  ==========================  ======================
#: all_reduce      1.63 / 2.17 / 9.46 / 161    1.67 / 2.32 / 10.7 / 167    1.10 / 2.67 / 9.11 / 171
#: broadcast       0.79 / 2.17 / 9.09 / 145    0.85 / 2.17 / 8.96 / 150    0.55 / 2.18 / 8.75 / 146
#: all_gather      0.76 / 1.14 / 4.94 / 97.0   0.71 / 1.07 / 4.37 / 76.5   0.50 / 1.60 / 6.70 / 113
#: reduce_scatter  0.88 / 3.66 / 11.7 / 116    0.82 / 1.11 / 4.82 / 92.4   0.62 / 2.26 / 10.7 / 157
#: ==============  ==========================  ==========================  ======================
#:
#: and all_gather / reduce_scatter at 32 / 64 / 256 KiB: leader 0.77 / 0.71 / 1.32 and
#: 0.86 / 0.80 / 1.81, rails 0.71 / 0.70 / 0.74 and 0.79 / 0.83 / 0.93, flat 0.41 / 0.39 /
#: 1.10 and 0.57 / 0.59 / 1.06.
#:
#: Over Gloo (torch 2.13), noisier (runs differ up to 2x), at 128 KiB / 2 MiB / 32 MiB:
#: broadcast leader 1.28 / 10.7 / 149, flat 3.68 / 18.0 / 281 (Gloo's own broadcast uses
#: half the link); reduce_scatter leader 1.95 / 10.5 / 179, rails 3.61 / 8.28 / 152, flat
#: 6.62 / 12.7 / 204; all_reduce leader 4.46 / 15.3 / 189, flat 8.88 / 14.1 / 219.
#:
#: ``fused`` (all_reduce; its steps, checks and folds in one C call, its messages between
#: hosts at most FUSED_CHUNK long, its plans on the caller's own array) against ``flat``
#: and MPICH's own Iallreduce in one job, median of 5 alternating rounds (us):
#:
#: ===========  ============================  ============================
#: size         2 Gbit/s: fused / flat / MPI  unlimited: fused / flat / MPI
#: ===========  ============================  ============================
#: 64 KiB       442 / 591 / 294               558 / 708 / 455
#: 128 KiB      587 / 640 / 553               707 / 774 / 537
#: 256 KiB      1178 / 1655 / 2121            1056 / 1417 / 860
#: 512 KiB      2507 / 3418 / 3442            1772 / 1865 / 1548
#: 1 MiB        5168 / 4835 / 4521            2714 / 1821 / 1271
#: 2 MiB        10513 / 9689 / 9255           5409 / 5045 / 2573
#: ===========  ============================  ============================
#:
#: From 1 MiB the link idles while the hosts run steps 1 and 3 (the steps do not overlap),
#: where MPICH's own schedule keeps it busy; so ``flat`` from there.
#:
#: ``fused`` reduce_scatter (steps 1 and 2 only) against ``flat``, ``rails`` and MPICH's own
#: Ireduce_scatter_block, same setup, median of 3 alternating rounds (us), by input size:
#:
#: ===========  ====================================  ====================================
#: input        2 Gbit/s: fused / flat / rails / MPI  unlimited: fused / flat / rails / MPI
#: ===========  ====================================  ====================================
#: 64 KiB       383 / 668 / 966 / 268                 427 / 717 / 825 / 150
#: 128 KiB      461 / 654 / 848 / 967                 452 / 647 / 935 / 237
#: 256 KiB      671 / 1628 / 991 / 1861               631 / 1472 / 1216 / 573
#: 512 KiB      1211 / 7077 / 1281 / 2973             956 / 1468 / 1170 / 824
#: 1 MiB        3213 / 6164 / 3350 / 4436             1984 / 1958 / 2080 / 1385
#: 2 MiB        5857 / 9652 / 5968 / 8781             3828 / 3104 / 2931 / 2078
#: 4 MiB        12732 / 19134 / 10690 / 17904         7450 / 6537 / 4712 / 4914
#: ===========  ====================================  ====================================
#:
#: Below 1 MiB a call's time on this 2-core machine is mostly CPU (4 ranks share 2 cores):
#: ``fused`` spends ~200 us of CPU per 128 KiB call, ~100 of them in meshcast's Python
#: around the compiled steps, MPICH ~90.
#:
#: ``fused`` all_to_all (even pieces: each pair's cell and piece in one message) against
#: ``flat`` (the agreement, then MPI's Ialltoall) and MPICH's own Ialltoall, same setup,
#: one job, best of 3 (us), by a rank's input, forced by ``algorithm=`` (the general
#: path; the lane takes a little less):
#:
#: ===========  =============================  =============================
#: input        2 Gbit/s: fused / flat / MPI   unlimited: fused / flat / MPI
#: ===========  =============================  =============================
#: 64 KiB       294 / 399 / 277                303 / 451 / 171
#: 128 KiB      548 / 547 / 546                312 / 457 / 187
#: 256 KiB      1668 / 1380 / 1361             370 / 460 / 226
#: 512 KiB      2324 / 2647 / 2352             472 / 555 / 310
#: 1 MiB        4382 / 4452 / 4372             791 / 787 / 477
#: 2 MiB        9036 / 8836 / 8762             1840 / 1128 / 1163
#: ===========  =============================  =============================
#:
#: ``fused`` below 1 MiB: faster than ``flat`` there on unlimited links, and at 2 Gbit/s
#: alike within the noise (from 256 KiB runs of one job differ up to 2x); from 1 MiB
#: ``flat``, which copies nothing on the way.
#:
#: broadcast ``leader`` (its pipeline: each host broadcasts one 1 MiB chunk while the link
#: carries the next) against ``rails``, ``flat`` and MPICH's own Bcast, one job, four
#: alternating rounds (best / typical, us), by size; below 1 MiB an eager broadcast runs:
#:
#: ===========  ==========================================  ==================================
#: size         unlimited: leader / rails / flat / MPI      2 Gbit/s: leader / flat / MPI
#: ===========  ==========================================  ==================================
#: 1 MiB        1308-1625 / 1384-1475 / 1674-1875 / 1325    4454 / 4403 / 4396
#: 2 MiB        2428-2725 / 2707-2888 / 3191-3359 / 2433    8962 / 9064 / 8794
#: 4 MiB        4295-4812 / 5235-5646 / 5632-6086 / 4000    17820 / 19966 / 18433
#: ===========  ==========================================  ==================================
#:
#: so ``leader`` from 1 MiB: as fast as ``flat`` at 2 Gbit/s, 1.2-1.3x faster unlimited,
#: where ``flat`` pays MPICH's nonblocking Ibcast and its progress on shared cores.
#:
#: gather and scatter, ``leader`` against ``flat`` (MPI's Igatherv / Iscatterv) and MPICH's
#: own blocking calls, each family forced in its own bench job (2 jobs for 128 KiB - 8
#: MiB, 1 for 16 MiB), out of place, by the gathered array (us):
#:
#: =======  ==========================================  =========================================
#: call     unlimited: 128 K / 2 M / 8 M / 16 M / 32 M  2 Gbit/s: 128 K / 2 M / 8 M / 16 M / 32 M
#: =======  ==========================================  =========================================
#: gather   leader 623 / 2055 / 4724 / 8694 / 19596     leader 525 / 4419 / 18496 / 38498 / 77761
#:          flat 406 / 1881 / 4900 / 10306 / 33844      flat 403 / 4371 / 18428 / 38575 / 88722
#:          MPICH 94 / 1314 / 3953 / 5942 / 16523       MPICH 234 / 4378 / 17536 / 35194 / 71997
#: scatter  leader 694 / 2822 / 6710 / 9403 / 19767     leader 631 / 4452 / 19314 / 40779 / 81436
#:          flat 421 / 2265 / 5375 / 9283 / 33874       flat 348 / 4397 / 18969 / 39738 / 91183
#:          MPICH 67 / 1334 / 4320 / 6913 / 16701       MPICH 230 / 4363 / 17619 / 36370 / 73154
#: =======  ==========================================  =========================================
#:
#: so ``flat`` below 8 MiB (gather) and 16 MiB (scatter), where they tie within 4%, and
#: ``leader`` past them (MPICH's nonblocking calls of 32 MiB take twice its blocking ones).
#: reduce stays ``leader``: MPI's Ireduce was 0.5-0.9x as fast from 512 KiB (2 Gbit/s and
#: unlimited), and at 128 KiB 1.4x unlimited but 0.7x at 2 Gbit/s. Smaller calls are
#: mostly eager. A gather's or scatter's ranks know only their own piece, so they choose
#: once they agreed (:data:`CHOSEN_FROM_COUNTS`).
#:
#: ``rails`` needs every host to hold the same number (> 1) of ranks; where it cannot run,
#: ``leader`` does, or ``flat`` where every host holds one rank (:data:`ONE_RANK_A_HOST`,
#: :data:`SAME_EXCHANGE_ALONE`). Calls of at most :data:`EAGER_BYTES` per rank never get
#: here: their data rides in the agreement.
DEFAULTS: dict[str, dict[str, tuple[tuple[int, str], ...]]] = {
    "mpi": {
        "all_reduce": ((0, "fused"), (1 << 20, "flat"), (16 << 20, "leader")),
        "broadcast": ((0, "flat"), (1 << 20, "leader")),
        "all_gather": ((0, "flat"), (256 << 10, "rails")),
        "reduce_scatter": ((0, "fused"), (2 << 20, "rails")),
        "all_to_all": ((0, "fused"), (1 << 20, "flat")),
        "gather": ((0, "flat"), (8 << 20, "leader")),
        "scatter": ((0, "flat"), (16 << 20, "leader")),
    },
    "gloo": {
        "all_reduce": ((0, "leader"), (1 << 20, "flat"), (16 << 20, "leader")),
        "broadcast": ((0, "leader"),),
        "all_gather": ((0, "flat"), (256 << 10, "rails")),
        "reduce_scatter": ((0, "leader"), (1 << 20, "rails")),
        "all_to_all": ((0, "flat"),),
    },
}


#: Where every host holds one rank there is no local phase: ``leader``'s and ``rails``'
#: steps inside a host are copies, and a fused all_reduce's one exchange sends each host's
#: whole array (its pieces are the other hosts' own) in chunks of at most
#: :data:`FUSED_CHUNK`. So over MPI the engine's own calls win there, except for
#: reduce_scatter and all_to_all below 512 KiB, where ``fused`` saves an exchange. 2
#: emulated hosts x 1 rank over MPICH (ofi/tcp). Each family forced in its own bench job
#: (rotating buffers), best of 2 jobs, us, by nccl-tests size:
#:
#: ==========================  ======================  ======================  ======================
#: call, links                 leader: 2 / 8 / 32 MiB  flat: 2 / 8 / 32 MiB    MPICH: 2 / 8 / 32 MiB
#: ==========================  ======================  ======================  ======================
#: all_gather, unlimited       1242 / 4171 / 24400     919 / 3248 / 12511      829 / 3120 / 12055
#: reduce_scatter, unlimited   1593 / 5519 / 42221     1196 / 4067 / 20772     903 / 3496 / 16317
#: broadcast, unlimited        1205 / 4192 / 17437     1040 / 3831 / 14953     935 / 3716 / 14477
#: all_reduce, unlimited       1868 / 6476 / 39636     1689 / 5578 / 30701     1519 / 5515 / 30401
#: all_gather, 2 Gbit/s        4383 / 20385 / 84138    4389 / 21525 / 74088    4385 / 18772 / 74305
#: reduce_scatter, 2 Gbit/s    4402 / 21985 / 100681   4388 / 21268 / 81600    4383 / 19026 / 77929
#: ==========================  ======================  ======================  ======================
#:
#: (broadcast and all_reduce at 2 Gbit/s: all three within 2% from 128 KiB to 32 MiB, the
#: link's pace.) ``fused`` against ``flat``, alternating jobs of 200-300 calls on one hot
#: buffer, best / median of 2-3 jobs (us; MPICH's own takes 1x or 2x, job to job):
#:
#: ====================  ======================================  =============================
#: call, family          unlimited: 128 K / 256 K / 512 K / 1 M  2 Gbit/s: 128 K / 512 K / 1 M
#: ====================  ======================================  =============================
#: all_reduce, fused     89-91 / 180 / 377-399 / 843-845         551 / 2200 / 4401
#: all_reduce, flat      79-80 / 108 / 179-183 / 337-338         549 / 2196 / 4390
#: reduce_scatter, fused 70 / 138 / 283 / 589                    274 / 1100 / 2198
#: reduce_scatter, flat  77 / 172 / 172 / 314                    274 / 1098 / 2195
#: all_to_all, fused     47 / 67 / 280 / 555                     274 / 1098 / 2195
#: all_to_all, flat      58 / 147 / 113 / 225                    275 / 1098 / 2195
#: ====================  ======================================  =============================
ONE_RANK_A_HOST: dict[str, dict[str, tuple[tuple[int, str], ...]]] = {
    "mpi": {
        "all_reduce": ((0, "flat"),),
        "broadcast": ((0, "flat"),),
        "all_gather": ((0, "flat"),),
        "reduce_scatter": ((0, "fused"), (512 << 10, "flat")),
        "all_to_all": ((0, "fused"), (512 << 10, "flat")),
    },
}


def choose(kind: str, layout: Layout, nbytes: int, forced: str | None,
           engine: str = "mpi") -> str:
    """The family that runs a call: ``forced`` if given, else the measured table of the
    inter-host ``engine`` (:data:`ONE_RANK_A_HOST` where every host holds one rank, else
    :data:`DEFAULTS`; ``leader`` for the collectives it does not list), where the layout
    can run it (see :data:`WITHOUT_FUSED` and :data:`SAME_EXCHANGE_ALONE`)."""
    if forced:
        return forced
    alone = layout.one_rank_a_host
    table = ONE_RANK_A_HOST.get(engine, DEFAULTS[engine]) if alone else DEFAULTS[engine]
    family = _from_table(table.get(kind, ()), nbytes)
    if family == "fused" and supports(kind, family, layout, engine):
        family = _from_table(WITHOUT_FUSED[kind], nbytes)
    if family == "rails" and (alone or not layout.uniform):
        family = "leader"
    if family == "leader" and alone and kind in SAME_EXCHANGE_ALONE:
        return "flat"
    return family


#: The collectives whose ranks cannot choose a family from their own call: a gather's or a
#: scatter's rank knows only its own piece, so the family follows from the gathered array
#: (the agreed counts), chosen once the agreement ran (spanning.py); ranks whose pieces lie
#: on both sides of a step would otherwise run different families.
CHOSEN_FROM_COUNTS = ("gather", "scatter")


#: The collectives whose ``leader`` family, where every host holds one rank, runs the very
#: exchange ``flat`` runs (the leaders are every rank: the same engine call) plus the
#: local phases' copies and scratch; there ``flat`` runs instead, over any engine and where
#: ``fused`` cannot run (see :data:`ONE_RANK_A_HOST` for what it cost).
SAME_EXCHANGE_ALONE = ("all_gather", "reduce_scatter")


#: Where ``fused`` cannot run (uneven hosts, more than 8 ranks), the families measured
#: best before it: the table's steps below its first step past ``fused``.
WITHOUT_FUSED = {"all_reduce": ((0, "flat"),),
                 "reduce_scatter": ((0, "flat"), (256 << 10, "rails")),
                 "all_to_all": ((0, "flat"),)}


def _from_table(steps: Sequence[tuple[int, str]], nbytes: int) -> str:
    family = "leader"
    for start, name in steps:
        if nbytes >= start:
            family = name
    return family


#: Up to how many ranks the agreement's rows go straight from every rank to every other
#: over an MPI engine (``flat``: one exchange, 2(n - 1) messages a rank); past it, and over
#: Gloo, through each host's leader (``leaders``: local gather, one exchange among the
#: leaders, local broadcast). Measured at 2 emulated hosts x 2 ranks on 2 cores, 8 B
#: all_reduce over MPICH (ofi/tcp), alternating in one session: flat 66-80 us, leaders
#: 115-150 us (MPICH's own 42-58 us); raw persistent sends and receives of 56 B rows
#: among the 4 ranks take 55-58 us. Three phases cost three wake-ups of ranks that
#: share cores, where MPI moves a row within a host through its own shared memory.
#: Over Gloo every exchange pays Gloo's per-call overhead, so one among the leaders wins.
AGREEMENT_FLAT_MAX = 8

#: The most data bytes per rank that ride in the agreement's rows (an *eager* call, which
#: crosses hosts once), per route. Direct rows go to each rank at their own length, so a
#: larger cap costs only the receive buffers; at 2 emulated hosts x 2 ranks over MPICH,
#: 2 Gbit/s, one session, caps of 976 B against 8 KiB: all_reduce of 2 / 4 / 8 KiB took
#: 306 / 398 / 415 us against 188 / 183 / 202 us, broadcast 282 / 274 / 284 against 122 /
#: 114 / 131 us, all_gather of 4 / 8 KiB 378 / 361 against 158 / 155 us. With the rows in
#: two phases and the eager call in C, caps of 8 KiB against 64 KiB, unlimited links and
#: 2 Gbit/s, two alternating jobs each: all_reduce of 16 / 32 KiB 583-726 / 396-647 us
#: against 160-306 / 170-280 us, all_gather of 16 / 32 KiB 394-584 / 367-685 against
#: 182-261 / 156-290 us, broadcast of 16 / 32 KiB 269-420 / 275-415 against 98-172 /
#: 89-163 us; at 64 KiB it was mixed (all_reduce 413-691 against 223-863 us), so the cap
#: stops at 32 KiB. Through the leaders the rows are padded to the cap over Gloo, so it
#: stays small there. An all_reduce's or a reduce_scatter's cap is shared by the host
#: where ``fused`` runs past it (see :data:`SHARED_BY_HOST`), as is an all_to_all's own.
EAGER_BYTES = {"flat": 32 << 10, "leaders": 976}

#: The collectives whose eager cap on the direct route is :data:`EAGER_BYTES` shared by
#: the ranks of a host, where ``fused`` runs past the cap: an eager row carries a rank's
#: whole input to every other host, so a host's link carries (ranks per host) x (the
#: input), where ``fused`` (reduce-scatter inside the host first) carries about one
#: input. The cap was measured against ``flat``, before ``fused`` existed. Against
#: ``fused``, at 2 emulated hosts x 2 ranks over MPICH, one session, alternating jobs of
#: 300 calls, best / median of the ranks' worst median (us; MPICH's own in brackets):
#:
#: ==================  ===========================  ========================
#: call (input)        2 Gbit/s: eager / fused      unlimited: eager / fused
#: ==================  ===========================  ========================
#: all_reduce 8 KiB    62-71 / 60-63 (58-66)        58-60 / 53-56 (58-67)
#: all_reduce 16 KiB   137-138 / 101-106 (73-82)    67-71 / 100-101 (73-78)
#: all_reduce 32 KiB   276-277 / 118-122 (132-140)  79-90 / 110 (84-87)
#: reduce_scatter 8K   58-62 / 58-59 (31-33)        50-58 / 47-48 (29-30)
#: reduce_scatter 16K  135-137 / 83-84 (65-68)      54-67 / 76-79 (32-33)
#: reduce_scatter 32K  273-277 / 89 (138-140)       69-85 / 82-84 (45)
#: ==================  ===========================  ========================
#:
#: The eager call wins where the link is not the limit, ``fused`` where it is, and a
#: host's eager bytes grow with its ranks; sharing 32 KiB by the 2 ranks (16 KiB each)
#: keeps the 16 KiB call eager and sends the 32 KiB one through ``fused``.
#:
#: An all_to_all's eager row, too, carries the rank's whole input to every other host,
#: where ``fused`` sends each rank only its piece: a host's link carries (hosts) x what
#: ``fused`` carries, and (ranks per host) x the input. Its cap
#: (:data:`EAGER_ALL_TO_ALL_BYTES`) is shared alike, and by the largest host where hosts
#: differ (``fused`` all_to_all runs there too). Same setup and figures, all_to_all_single
#: by a rank's input:
#:
#: ==================  ===========================  ========================
#: call (input)        2 Gbit/s: eager / fused      unlimited: eager / fused
#: ==================  ===========================  ========================
#: all_to_all 8 KiB    70-79 / 110-114 (67-71)      82-83 / 105-108 (67-69)
#: all_to_all 16 KiB   136-140 / 116-124 (72-76)    85-90 / 112-116 (68-70)
#: all_to_all 32 KiB   269-273 / 134-139 (130-136)  104-112 / 123-144 (82-85)
#: ==================  ===========================  ========================
SHARED_BY_HOST = ("all_reduce", "reduce_scatter", "all_to_all")

#: The most bytes a broadcast's root carries in its row (an eager broadcast), per route.
#: Only the root's row is long (the others carry no data), so the data crosses the link
#: once per other host, as a broadcast's must, together with the agreement instead of
#: after it. At 2 emulated hosts x 2 ranks over MPICH, one job, eager against ``flat``
#: (the agreement, then MPI's Ibcast) against MPICH's own Ibcast (us), unlimited links:
#: 64 / 128 / 256 KiB 86 / 114 / 153 against 283 / 316 / 363 (MPICH 78 / 98 / 137); 512
#: KiB / 1 MiB 285 / 1039 against 507 / 1347 (MPICH 262 / 995). At 2 Gbit/s 64 KiB 278
#: against 432 (MPICH 275), the link's time for all three from 128 KiB. Every row's
#: buffer is this long on the direct route (virtual memory: a row's pages are touched
#: only as far as rows reach).
EAGER_BROADCAST_BYTES = {"flat": 1 << 20, "leaders": 976}

#: The most bytes each rank's row carries in an eager all_gather, per route: every row
#: goes to every rank, which is an all_gather's own traffic, in two phases (the rail,
#: then inside the host, forwarding), so each piece crosses the link once per other
#: host. Same setup, eager against ``flat`` / ``rails`` / MPICH's Iallgather, by gathered
#: size (us): unlimited 512 KiB 506 against 616 / 1273 / 343, 2 MiB 1712 against 1362 /
#: 2025 / 1008; 2 Gbit/s 512 KiB 1472 against 1667 / 1523 / 1649, 2 MiB 4442 against
#: 6861 / 5153 / 6780. At 1 MiB a rank (4 MiB gathered) ``rails`` won (4119 against
#: 5118 unlimited, 10185 against 10842 at 2 Gbit/s), so the cap stops at 512 KiB.
EAGER_ALL_GATHER_BYTES = {"flat": 512 << 10, "leaders": 976}


#: The most bytes of input an all_to_all rank's row carries (even pieces only): every row
#: goes to every rank, which takes its piece, so the link carries each host's inputs
#: once per other host, hosts times what ``flat``'s Ialltoallv carries, in one round
#: instead of two (the agreement, then the exchange). 2 emulated hosts x 2 ranks over
#: MPICH, one job, all_to_all_single by input size, eager against ``flat`` against
#: MPICH's Ialltoall (us): unlimited 16 B 46 / 292 / 62, 4 KiB 87 / 334 / 114, 16 KiB
#: 162 / 359 / 128, 32 KiB 219 / 402 / 152, 64 KiB 292 / 423 / 179; 2 Gbit/s 16 KiB
#: 159 / 357 / 138, 32 KiB 273 / 407 / 158, 64 KiB 773 / 451 / 275 (the link's time).
#: Measured against ``flat``, before ``fused``; where ``fused`` runs, a host's ranks
#: share it (see :data:`SHARED_BY_HOST`).
EAGER_ALL_TO_ALL_BYTES = {"flat": 32 << 10, "leaders": 976}


#: The collectives whose eager cap is not :data:`EAGER_BYTES`.
_EAGER_CAPS = {"broadcast": EAGER_BROADCAST_BYTES, "all_gather": EAGER_ALL_GATHER_BYTES,
               "all_to_all": EAGER_ALL_TO_ALL_BYTES}


def eager_cap(kind: str, route: str, layout: Layout | None = None,
              engine: str = "mpi") -> int:
    """The most data bytes a rank's row carries in a call of ``kind`` on ``route``, in a
    group of ``layout`` over ``engine`` (None: a layout where ``fused`` cannot run;
    see :data:`SHARED_BY_HOST`)."""
    cap = _EAGER_CAPS.get(kind, EAGER_BYTES)[route]
    if (layout is not None and route == "flat" and kind in SHARED_BY_HOST
            and supports(kind, "fused", layout, engine) is None):
        # the host with the most ranks puts the most rows on its link
        return cap // max(len(h) for h in layout.hosts)
    return cap


def largest_eager_cap(route: str) -> int:
    """The longest payload any row carries on ``route`` (every row's buffer is this long)."""
    return max(EAGER_BYTES[route], *(caps[route] for caps in _EAGER_CAPS.values()))


def agreement_route(engine: str, size: int) -> str:
    """How a group's agreement rows travel: ``"flat"`` or ``"leaders"`` (see
    :data:`AGREEMENT_FLAT_MAX`); :data:`EAGER_BYTES` of the route caps its eager calls."""
    return "flat" if engine == "mpi" and size <= AGREEMENT_FLAT_MAX else "leaders"


#: One operation of a direct route's row exchange: (kind, peer, rows): kind 0 receives
#: the rows of the group ranks ``rows`` from group rank ``peer``, kind 1 sends them to
#: ``peer`` (as one message when they are short: see ``transport.mpi_rows``).
RowStep = tuple[int, int, tuple[int, ...]]


def agreement_steps(layout: Layout) -> tuple[tuple[RowStep, ...], ...]:
    """How every rank's agreement row reaches every rank on the direct route: phases
    of point-to-point operations for ``layout.me`` (run by
    ``transport.mpi.MpiComm.exchange_rows``).

    When every host holds the same number of ranks (at least 2, on at least 2 hosts),
    two phases: first each rank swaps rows with its rail (the ranks of the same local
    index on the other hosts), then with the ranks of its host, forwarding its rail's
    rows: its own row and its rail's, as one operation a mate, which the transport
    sends as one message when they are short (``transport.mpi_rows.PACK_BYTES``). Each
    row then crosses the network once per other host, as in one phase, but each rank
    makes one message per other host instead of one per remote rank, and on a machine
    whose cores the ranks share, every message's CPU is on the critical path: at 2
    emulated hosts x 2 ranks over MPICH on 2 cores, a raw 56 B exchange took 31 us in
    two phases against 45 us in one (MPICH's own 8 B allreduce: 43 us).
    Otherwise one phase: every rank sends its row to every other.

    Between two ranks, both sides list the rows in the same order: a rank sends its
    own row, then its rail's rows in host order, and receives them so.
    """
    me, hosts = layout.me, layout.hosts
    if not (layout.uniform and len(hosts) >= 2 and len(hosts[0]) >= 2):
        others = [g for g in range(layout.size) if g != me]
        return (tuple((0, g, (g,)) for g in others) + tuple((1, g, (me,)) for g in others),)
    host, local = layout.host, layout.local
    rail = tuple(h[local] for i, h in enumerate(hosts) if i != host)
    first = tuple((0, g, (g,)) for g in rail) + tuple((1, g, (me,)) for g in rail)
    mates = [peer for peer in hosts[host] if peer != me]
    receive = []
    for peer in mates:
        at = hosts[host].index(peer)
        receive.append((0, peer, (peer,) + tuple(h[at] for i, h in enumerate(hosts)
                                                  if i != host)))
    send = [(1, peer, (me,) + rail) for peer in mates]
    return first, tuple(receive + send)


def supports(kind: str, family: str, layout: Layout, engine: str = "mpi") -> str | None:
    """Why ``family`` cannot run ``kind`` on ``layout`` over ``engine`` (None: it can)."""
    if family in ("eager", "agreement"):  # (algorithms/eager.py: never forced)
        others = families(kind)
        return (f"'{family}' is not forced: a call runs it whenever its data fit the "
                f"agreement's rows (eager_cap)"
                + (f"; the families to force are {', '.join(others)}" if others else ""))
    if family not in FAMILIES:
        return f"unknown algorithm {family!r} across hosts (known: {', '.join(FAMILIES)})"
    if family not in ALGORITHMS.get(kind, {}):
        return f"'{family}' runs {_runs_what(family)}, not {kind}"
    if family == "fused" and (engine != "mpi" or agreement_route(engine, layout.size) != "flat"):
        return (f"'fused' needs MPI between hosts and at most {AGREEMENT_FLAT_MAX} ranks "
                f"(this group: {engine}, {layout.size} ranks)")
    # (fused all_to_all's exchange is flat: every pair, any hosts)
    if family in ("rails", "fused") and not layout.uniform and kind != "all_to_all":
        return (f"'{family}' needs the same number of ranks on every host "
                f"(this group has {[len(h) for h in layout.hosts]})")
    return None


def requires(kind: str, family: str) -> str:
    """What ``family`` needs of a group to run ``kind``, in words ("": any group that
    spans hosts, over either engine): the conditions :func:`supports` checks."""
    needs = []
    if family == "fused":
        needs.append(f"MPI between hosts and at most {AGREEMENT_FLAT_MAX} ranks")
    if family in ("rails", "fused") and kind != "all_to_all":
        needs.append("the same number of ranks on every host")
    return "; ".join(needs)


def _even(counts: Sequence[int]) -> bool:
    """Whether an exchange whose every member sends ``counts`` (one list, computed alike
    from agreed data on every member) and receives its own entry from each is uniform."""
    return counts.count(counts[0]) == len(counts) if len(counts) else True


def _combine(op: ReduceOp, dst: np.ndarray, parts: Sequence[np.ndarray]) -> None:
    """``dst`` = the reduction of ``parts`` in order (parts may include ``dst`` first)."""
    if len(parts) == 1:
        if parts[0] is not dst:
            np.copyto(dst, parts[0])
        return
    if parts[0] is dst:
        first = dst.copy()
        reduce_many(op, dst, [first, *parts[1:]])
    else:
        reduce_many(op, dst, list(parts))


# ------------------------------------------------------------------ all_reduce


def all_reduce(ctx: Ctx, family: str, w: np.ndarray, op: ReduceOp) -> None:
    """``w`` becomes the reduction over every rank of the group, in place."""
    run("all_reduce", ctx, family, w, op)


@_runs("all_reduce", "leader")
def all_reduce_leader(ctx: Ctx, w: np.ndarray, op: ReduceOp) -> None:
    """Reduce to each host's leader, all-reduce among the leaders, broadcast inside the host.

    Steps: a local reduce to local rank 0 (shared memory); below RAILS_MIN_BYTES the
    leaders all-gather their hosts' sums and fold them in host order (one exchange),
    from it they reduce-scatter then all-gather, in chunks of PIPELINE_BYTES so that the
    link carries one chunk while the hosts reduce the next; a local broadcast.

    Bytes across hosts: per host, from its leader alone, (H-1) S below RAILS_MIN_BYTES,
    else 2 S (H-1)/H (S the array, H hosts).
    """
    if w.nbytes >= RAILS_MIN_BYTES:
        _all_reduce_leader_pipelined(ctx, w, op)
        return
    ctx.local.reduce(w, op, 0)
    if ctx.leaders is not None:
        _allgather_reduce(ctx.leaders, w, op)
    ctx.local.broadcast(w, 0)


@_runs("all_reduce", "rails")
def all_reduce_rails(ctx: Ctx, w: np.ndarray, op: ReduceOp) -> None:
    """Reduce-scatter inside the host, each rail all-reduces its shard, all-gather inside.

    Steps: a local reduce-scatter into L shards (shared memory); each rail (the ranks
    of one local index, one per host) all-reduces its shard across hosts, a
    reduce-scatter then an all-gather, L rails at once; a local all-gather.

    Bytes across hosts: per host 2 S (H-1)/H, in L parallel streams of 1/L of it (S the
    array, H hosts, L ranks a host).
    """
    L = ctx.local.size
    counts = [c for _, c in split_even(w.size, L)]
    shard = np.empty(counts[ctx.layout.local], w.dtype)
    ctx.local.reduce_scatter(shard, w, counts, op)
    if ctx.rail is not None:
        _rail_all_reduce(ctx.rail, shard, op)
    ctx.local.all_gather(w, shard, counts)


@_runs("all_reduce", "flat")
def all_reduce_flat(ctx: Ctx, w: np.ndarray, op: ReduceOp) -> None:
    """The whole call on the inter-host engine, every rank a peer: the baseline.

    Steps: the engine's own all-reduce (MPI's Iallreduce, Gloo's allreduce); where it
    has no such op for the dtype, an all-gather of every rank's array and a fold in
    rank order on every rank.

    Bytes across hosts: what the engine's algorithm sends, ranks of one host included
    as peers (a ring: 2 S (P-1)/P a rank, P ranks).
    """
    lay = ctx.layout
    if not ctx.flat.allreduce(w, op):
        everyone = np.empty(w.size * lay.size, w.dtype)
        ctx.flat.allgatherv(everyone, w, [w.size] * lay.size)
        _combine(op, w, [everyone[g * w.size:(g + 1) * w.size] for g in range(lay.size)])


#: The byte after a fused exchange's cell: the sender's host found that its ranks'
#: calls differ, and the sender sends no data.
_DIFFER = 1


@_runs("all_reduce", "fused")
def all_reduce_fused(ctx: Ctx, w: np.ndarray, op: ReduceOp, cell: bytes = b"",
                     plans: FusedPlans | None = None, kernel: int | None = None) -> bool:
    """The ``rails`` data path in the engine's messages, which carry the call's agreement.

    ``w`` becomes the reduction over every rank, with no exchange of agreement rows
    before the data moves.

    Steps: three exchanges of point-to-point messages on the engine (``ctx.p2p``), the
    ``rails`` data path with the engine's messages in place of shared memory inside a
    host, every host the same number L of ranks; each message begins with the call's
    cell. In detail:

    1. inside the host, each rank sends local rank j its ``cell`` and piece j of ``w``
       (``split_even`` in L), and folds what it gets into its host's partial sum of its
       own piece (local-rank order);
    2. along the rail, each rank sends every other host's rank of its local index its
       cell and that partial sum (a rank whose host's cells differed sends its cell
       marked, and no data), and folds the hosts' partial sums in host order;
    3. inside the host, each rank sends its finished piece to the others.

    After step 2 a rank has seen the cells of its host and, through its rail, the
    cells that the ranks of every other host agreed on; so every rank of the group
    ends step 2 knowing whether all cells are equal, and only then writes to ``w``.
    Unlike the agreement's rows, these messages have the lengths the sender's call
    gives: a message longer than its receive ends the exchange (refused), and a rank
    whose call runs another family is in the agreement's exchange of rows instead,
    which ends the others' waits (see ``Bound.prepare``). Either way the ranks find
    out in step 1 or 2, together. The link carries what ``rails`` makes it carry,
    with two synchronisations of every rank fewer (the rows' and the shared-memory
    engine's entries), which is what a call of 64 KiB - 1 MiB waits on.

    Bytes across hosts: per host (H-1) S in step 2, in 32 KiB messages (FUSED_CHUNK)
    on L parallel rails: what ``rails`` sends at 2 hosts (S the array, H hosts).

    ``plans`` (:func:`fused_plans`): where the exchanges and buffers are kept from call
    to call (on MPI, persistent requests): for an array seen before, on its own memory
    (the plan keeps the array); else per (size, dtype, cell length), with the data
    copied in and out (see :class:`FusedPlans`). None: made for this call. ``kernel``:
    the compiled fold's code for ``op`` on ``w``'s dtype (``ops.compiled_kernel``), with
    which an engine that can (MPI with the compiled helper) runs the steps, checks and
    folds in one call; None: NumPy folds.

    Returns:
        True when every rank ran this call (``w`` holds the result), False when some
        cell, message or member said otherwise: ``w`` is unchanged, and the caller
        settles the difference with the agreement's rows (the plans are dropped: the
        exchanges may not all have been matched).
    """
    shape = (w.size, w.dtype.str, len(cell))
    at = ("at", w.__array_interface__["data"][0], *shape)
    plan = None
    if plans is not None:
        direct = plans.address(at[1])
        plan = plans.get(at)
        if plan is None and direct:
            plan = _FusedPlan(ctx, w.size, w.dtype, len(cell), w)
            plans.keep(at, plan)
        elif plan is None:
            plan = plans.get(shape)
    if plan is None:
        plan = _FusedPlan(ctx, w.size, w.dtype, len(cell))
        _keep(plans, shape, plan)
    return _settle(plans, plan, plan.run(ctx.p2p, w, w, op, cell, kernel, ctx.notes))


@_runs("reduce_scatter", "fused")
def reduce_scatter_fused(ctx: Ctx, out: np.ndarray, w: np.ndarray, counts: Sequence[int],
                         op: ReduceOp, cell: bytes = b"", plans: FusedPlans | None = None,
                         kernel: int | None = None) -> bool:
    """The fused all_reduce's first two steps: the agreement rides in the data's messages.

    ``out`` = piece ``me`` of the reduction of every rank's ``w`` (pieces of ``counts``
    elements in group-rank order), with the call's agreement riding in the data's
    messages, as :func:`all_reduce_fused` does it.

    Steps: two exchanges of point-to-point messages on the engine, each message
    beginning with the call's cell. In detail:

    1. inside the host, each rank sends local rank j its ``cell`` and the pieces of
       rail j's ranks (the ranks of local index j, in host order), and folds what it
       gets into its host's partial sums of its own rail's pieces;
    2. along the rail, each rank sends every other host's rank of its local index its
       cell and that rank's partial sum, and folds the hosts' sums of its own piece, in
       host order, into ``out``.

    Bytes across hosts: each host's partial sums for the other hosts' ranks, once, what
    ``rails`` makes the link carry: (H-1) S/H a host with even pieces (S the input, H
    hosts).

    Nothing is written to ``out`` before every rank has seen that all cells agree. ``w`` is read (copied into rail order) before
    anything is sent, so ``out`` may alias it. ``plans``, ``kernel`` and the result:
    as :func:`all_reduce_fused` (plans per size and ``counts``; the input is always
    copied, into rail order).
    """
    shape = ("reduce_scatter", w.size, w.dtype.str, len(cell), tuple(counts))
    plan = plans.get(shape) if plans is not None else None
    if plan is None:
        plan = _FusedPlan(ctx, w.size, w.dtype, len(cell), counts=counts)
        _keep(plans, shape, plan)
    return _settle(plans, plan, plan.run(ctx.p2p, w, out, op, cell, kernel, ctx.notes))


def all_to_all_fused(ctx: Ctx, out: np.ndarray, w: np.ndarray, cell: bytes,
                     plans: FusedPlans | None = None) -> bool:
    """``out`` = piece ``me`` of every rank's ``w`` (even pieces, group-rank order), with
    the call's agreement riding in the data's messages (family ``fused``): each rank
    sends every other rank one message, its ``cell`` and then that rank's piece of
    ``w``, in one exchange, and receives theirs.

    Every rank then holds every rank's cell, so all decide alike whether the calls
    agree, and only then is ``out`` written (``w`` is copied before anything is sent,
    so ``out`` may be ``w``). The cell must say what the pieces' length depends on
    (the input's size): a message longer than its receive ends the exchange, one
    shorter is caught by its cell, and a member in the agreement's exchange of rows
    (its call is not this one, or runs another way) ends the others' waits (see
    ``Bound.prepare``). Flat: every pair over the engine, as ``flat``'s own
    all_to_all, one synchronisation instead of two.

    Returns:
        True when every rank ran this call (``out`` holds the result); False when some
        cell, message or member said otherwise: ``out`` is unchanged, and the caller
        settles with the agreement's rows. ``plans``: as :func:`all_reduce_fused`.
    """
    shape = ("all_to_all", w.size, w.dtype.str, len(cell))
    plan = plans.get(shape) if plans is not None else None
    if plan is None:
        plan = _FusedAllToAllPlan(ctx.p2p, w.size, w.dtype, len(cell))
        _keep(plans, shape, plan)
    notes = ctx.notes
    if notes is None:
        return _settle(plans, plan, plan.run(ctx.p2p, w, out, cell))
    # traced: the one exchange is the call's one step
    with notes.step("fused.all_to_all", notes.peers(range(ctx.layout.size)), w.nbytes):
        done = plan.run(ctx.p2p, w, out, cell)
    return _settle(plans, plan, done)


class _FusedAllToAllPlan:
    """The buffers and prepared exchange of a fused all_to_all of one size, in bytes:
    row g of ``work`` is my cell, a flag byte and my piece for rank g (the input,
    copied: the sends' source); row g of ``got`` is rank g's cell, flag and piece for
    me.

    Each row is one message, the cell at its head. 2 emulated hosts x 2 ranks over
    MPICH, a bare exchange of these rows (one job, best of 4, us): unlimited, by input
    size, in 32 KiB chunks / whole / MPICH's Ialltoall: 128 KiB 240 / 135 / 184,
    512 KiB 699 / 268 / 285, 1 MiB 1406 / 366 / 421, 2 MiB (64 KiB chunks) 2694 /
    1478 / 1704; at 2 Gbit/s all three run at the link's pace from 1 MiB (4.4 ms),
    512 KiB 2203 / 2274 / 2802-4049. The cell in a message of its own doubled what the
    engine carries one by one for nothing.
    """

    def __init__(self, p2p: Across, size: int, dtype: np.dtype, cell: int) -> None:
        n, me = p2p.size, p2p.rank
        self.me = me
        self.k = k = cell + 1
        piece = (size // n) * np.dtype(dtype).itemsize
        self.head = np.zeros(k, np.uint8)
        self.work = np.zeros((n, k + piece), np.uint8)
        self.got = np.zeros((n, k + piece), np.uint8)
        others = [g for g in range(n) if g != me]
        self.step = p2p.prepare([(g, self.got[g]) for g in others],
                                [(g, self.work[g]) for g in others])
        # (the binding it was made for, the compiled runner or None): see interhost.Bound.swap_runner
        self.runner: tuple[Any, Any] = (None, None)

    def free(self) -> None:
        getattr(self.step, "free", lambda: None)()

    def run(self, p2p: Across, w: np.ndarray, out: np.ndarray, cell: bytes) -> bool:
        me, k, head, work, got = self.me, self.k, self.head, self.work, self.got
        head[:-1] = np.frombuffer(cell, np.uint8)
        src, dst = as_bytes(w), as_bytes(out)
        started = None
        bound, runner = self.runner
        if bound is not p2p:
            make = getattr(p2p, "swap_runner", None)
            runner = make(self.step) if make is not None else None
            self.runner = (p2p, runner)
        if runner is not None:
            # the engine may pack, run, check and unpack in one call (compiled); it stops
            # where anything but the happy path begins
            state, started = runner((head, src, work, got, dst), me)
            if started is None:
                return state == 0
        if started is None:
            work[:, :k] = head
            np.copyto(work[:, k:], src.reshape(len(work), -1))
        if not p2p.run(self.step, started=started):
            return False
        got[me] = work[me]
        if not (got[:, :k] == head).all():
            return False
        np.copyto(dst.reshape(len(got), -1), got[:, k:])
        return True


def _keep(plans: FusedPlans | None, key: Any, plan: _FusedPlan | _FusedAllToAllPlan) -> None:
    """Keep ``plan`` under ``key`` (None: the call runs without a cache)."""
    if plans is not None:
        plans.keep(key, plan)


def _settle(plans: FusedPlans | None, plan: _FusedPlan | _FusedAllToAllPlan,
            done: bool) -> bool:
    """After a fused call: a plan made for this call alone is freed; after a refusal the
    plans are dropped (not freed: some requests may still be active)."""
    if plans is None:
        plan.free()
    elif not done:
        plans.drop()
    return done


class FusedPlans:
    """The plans of a group's fused calls, kept from call to call: at most
    :data:`FUSED_PLANS`, the least recently used one freed to make room.

    A plan is made per size (its exchanges on buffers of its own, the data copied in
    and out) or, for an all_reduce on an array whose address was seen before, on that
    array itself (no copies; the plan keeps the array, so its memory cannot go to
    another one). Making a plan costs several calls' time (its persistent requests),
    so an address plan never pushes out a plan used within the last
    ``2 * FUSED_PLANS`` calls: more arrays in turn than there is room for (a
    benchmark's windows over one buffer) share their size's plan instead of each
    pushing out the next one's. An address plan pushed out unused since it was made (a
    temporary array whose memory the plan held, so the next one lives elsewhere) stops
    address plans for a while, doubling each time.
    """

    def __init__(self) -> None:
        # key -> [plan, the last call that used it, how many calls did], least recent first
        self._kept: OrderedDict[Any, list[Any]] = OrderedDict()
        self._seen: OrderedDict[int, None] = OrderedDict()  # addresses of recent arrays
        self._calls = 0
        self._direct_after = 0  # no address plans before this call
        self._strikes = 0

    def get(self, key: Any) -> Any:
        """The plan kept under ``key`` (marked used by this call), or None."""
        entry = self._kept.get(key)
        if entry is None:
            return None
        self._kept.move_to_end(key)
        entry[1] = self._calls
        entry[2] += 1
        return entry[0]

    def keep(self, key: Any, plan: Any) -> None:
        """Keep ``plan`` under ``key``, freeing the least recently used plan past the cap."""
        while len(self._kept) >= FUSED_PLANS:
            old_key, (old, _, calls) = self._kept.popitem(last=False)
            if old_key[0] == "at" and calls <= 1:
                self._direct_after = self._calls + (64 << min(self._strikes, 10))
                self._strikes += 1
            old.free()
        self._kept[key] = [plan, self._calls, 1]

    def address(self, at: int) -> bool:
        """Count a call on an array at ``at``: whether it gets a plan of its own (its
        address was seen before, and room for one is there)."""
        self._calls += 1
        seen = at in self._seen
        if seen:
            self._seen.move_to_end(at)
        else:
            self._seen[at] = None
            if len(self._seen) > 4 * FUSED_PLANS:
                self._seen.popitem(last=False)
        if not seen or self._calls < self._direct_after:
            return False
        if len(self._kept) < FUSED_PLANS:
            return True
        _, last, _ = next(iter(self._kept.values()))
        return last < self._calls - 2 * FUSED_PLANS

    def drop(self) -> None:
        """Forget every plan without freeing it (some requests may still be active)."""
        self._kept.clear()
        self._seen.clear()

    def free(self) -> None:
        """Free every plan's requests (the group is shutting down)."""
        for plan, _, _ in self._kept.values():
            plan.free()
        self.drop()

    def __len__(self) -> int:
        return len(self._kept)


def fused_plans() -> FusedPlans:
    """An empty cache of the fused collectives' plans, for a group to keep."""
    return FusedPlans()


def free_fused_plans(plans: FusedPlans) -> None:
    """Free the requests of every plan in ``plans`` (the group is shutting down)."""
    plans.free()


#: How many sizes of fused calls keep their buffers and requests (a training loop
#: repeats a few bucket sizes).
FUSED_PLANS = 8

#: The largest message of a fused call's step between hosts: MPICH over TCP sends
#: a longer one only after the receiver answers, and on a loaded link that answer waits
#: behind the other rails' data (128 KiB at 2 emulated hosts x 2 ranks, 2 Gbit/s: 1225
#: us in 64 KiB messages against MPICH's own 588).
FUSED_CHUNK = 32 << 10


def _chunks(a: np.ndarray) -> list[np.ndarray]:
    """``a`` in consecutive pieces of at most :data:`FUSED_CHUNK` bytes (at least one)."""
    step = max(1, FUSED_CHUNK // a.itemsize)
    return [a[i:i + step] for i in range(0, max(a.size, 1), step)] if a.size else [a]


class _FusedPlan:
    """The buffers and prepared exchanges of a fused all_reduce (``counts`` None) or
    reduce_scatter (``counts``: the pieces per group rank) of one size.

    Its geometry: ``work`` holds the data in the order step 1 sends it (the caller's
    array itself, or a copy; for reduce_scatter the pieces in rail order), piece j
    (``spans[j]``) goes to local rank j; step 2 sends each other host's rail rank
    ``sends2[h]`` of the host's partial sum and folds the rows of ``got`` with the
    partial's ``[own, own + mine)`` into the call's destination.
    """

    def __init__(self, ctx: Ctx, size: int, dtype: np.dtype, cell: int,
                 direct: np.ndarray | None = None,
                 counts: Sequence[int] | None = None) -> None:
        lay, p2p = ctx.layout, ctx.p2p
        #: the caller's array itself, when the plan was made for it (no copies)
        self.direct = direct
        mates = lay.hosts[lay.host]
        me = lay.me
        self.at = lay.local
        rail = lay.rail(self.at)
        self.rail_at = rail.index(me)
        if counts is None:
            self.spans = spans = split_even(size, len(mates))
            self.order: list[tuple[int, int]] | None = None
            own, mine = 0, spans[self.at][1]
            sends2 = [(0, mine)] * len(rail)
        else:
            # the input's pieces in rail order: rail 0's ranks host by host, then rail 1's
            rails = [lay.rail(j) for j in range(len(mates))]
            starts = displs(counts)
            self.order = [(starts[g], counts[g]) for r in rails for g in r]
            sums = [sum(counts[g] for g in r) for r in rails]
            self.spans = spans = list(zip(displs(sums), sums))
            in_rail = displs([counts[g] for g in rail])
            sends2 = [(in_rail[h], counts[g]) for h, g in enumerate(rail)]
            own, mine = sends2[self.rail_at][0], counts[me]
        self.start, n = spans[self.at]
        self.own, self.mine = own, mine
        self.k = k = cell + 1  # the cell and my flag byte
        self.work = work = np.empty(size, dtype) if direct is None else direct
        self.head = np.zeros(k, np.uint8)
        self.cells = np.zeros((len(mates), k), np.uint8)
        self.parts = np.empty((len(mates), n), dtype)
        self.partial = np.empty(n, dtype)
        self.heads = np.zeros((len(rail), k), np.uint8)
        self.got = np.empty((len(rail), mine), dtype)

        def piece(j: int) -> np.ndarray:
            return work[spans[j][0]:spans[j][0] + spans[j][1]]

        def sent(h: int) -> np.ndarray:
            return self.partial[sends2[h][0]:sends2[h][0] + sends2[h][1]]

        others = [(j, g) for j, g in enumerate(mates) if g != me]
        self.step1 = p2p.prepare(
            [r for j, g in others for r in ((g, self.cells[j]), (g, self.parts[j]))],
            [s for j, g in others for s in ((g, self.head), (g, piece(j)))])
        far = [(h, g) for h, g in enumerate(rail) if g != me]
        recvs2 = [r for h, g in far
                  for r in [(g, self.heads[h])] + [(g, c) for c in _chunks(self.got[h])]]
        self.step2 = p2p.prepare(recvs2, [s for h, g in far for s in [(g, self.head)] + [
            (g, c) for c in _chunks(sent(h))]])
        # (a host whose cells differ sends its cell and empty chunks: the same messages)
        self.step2_differ = p2p.prepare(recvs2, [s for h, g in far for s in [(g, self.head)] + [
            (g, c[:0]) for c in _chunks(sent(h))]])
        # all_reduce: the finished pieces go round the host; reduce_scatter is done
        self.step3 = p2p.prepare([(g, piece(j)) for j, g in others],
                                 [(g, piece(self.at)) for _, g in others]
                                 ) if counts is None else p2p.prepare([], [])
        # what every call hands the compiled steps (the destination is added per call)
        self.head_bytes = memoryview(self.head)
        self.buffers = (self.head, self.cells, self.parts, self.partial, self.heads, self.got,
                        work)
        self.geometry = (self.at, self.rail_at, self.start * work.itemsize,
                         self.partial.nbytes, own * work.itemsize)
        # all_reduce's step 2 folds into my piece of work; reduce_scatter's into its output
        self.finished = work[self.start:self.start + mine] if counts is None else None
        # a traced call's steps as rounds (meshcast.trace.steps): their names, peers (group
        # ranks) and bytes; reduce_scatter's third step moves nothing and is not noted
        self.step_names = (("fused.local_reduce_scatter", "fused.rail_all_reduce",
                            "fused.local_all_gather") if counts is None else
                           ("fused.local_reduce_scatter", "fused.rail_reduce_scatter"))
        self.step_peers = (mates, rail, mates)
        self.step_bytes = (work.nbytes, self.partial.nbytes, piece(self.at).nbytes)
        self.times = np.zeros(6, np.int64)  # each step's begin and end, when compiled

    def free(self) -> None:
        for step in (self.step1, self.step2, self.step2_differ, self.step3):
            getattr(step, "free", lambda: None)()

    def _step(self, p2p: Across, i: int, exchange: Any, notes: Any, started: Any = None,
              settled: bool = False) -> bool:
        """``p2p.run`` of step ``i``'s ``exchange``; when the call is traced (``notes``),
        noted as a round, from when the compiled call began it if it did."""
        if notes is None or i >= len(self.step_names):
            return p2p.run(exchange, settled=settled, started=started)
        begun = int(self.times[2 * i]) if started is not None else 0
        with notes.step(self.step_names[i], notes.peers(self.step_peers[i]),
                        self.step_bytes[i], begun):
            return p2p.run(exchange, settled=settled, started=started)

    def _note_compiled(self, notes: Any, done: int) -> None:
        """Note the ``done`` steps the compiled call ran whole, at the times it took."""
        times = self.times
        for i in range(min(done, len(self.step_names))):
            notes.timed(self.step_names[i], notes.peers(self.step_peers[i]),
                        self.step_bytes[i], int(times[2 * i]), int(times[2 * i + 1]))

    def run(self, p2p: Across, w: np.ndarray, out: np.ndarray, op: ReduceOp, cell: bytes,
            kernel: int | None = None, notes: Any = None) -> bool:
        """One call: ``w`` the input, ``out`` the destination (all_reduce: ``w``).
        ``notes``: a traced call's step notes (meshcast.trace.steps.StepNotes), which get
        a round per step; None when untraced."""
        head, cells, parts, work = self.head, self.cells, self.parts, self.work
        k = self.k - 1
        self.head_bytes[:k] = cell
        head[k] = 0
        if self.order is not None:
            np.concatenate([w[s:s + c] for s, c in self.order], out=work)
        elif self.direct is None:
            np.copyto(work, w)
        start, partial, own, mine = self.start, self.partial, self.own, self.mine
        # where step 2 folds: the finished piece (all_reduce) or the output
        dest = self.finished if self.order is None else out
        done, started = 0, None
        run_fused = getattr(p2p, "run_fused", None)
        if kernel is not None and run_fused is not None:
            # the engine may run the steps, checks and folds whole (compiled); it stops
            # where something differs or waits, and the steps below go on from there
            times = None
            if notes is not None:
                times = self.times
                times[:] = 0
            ran = run_fused((self.step1, self.step2, self.step3), (*self.buffers, dest),
                            self.geometry, kernel, times)
            if ran is not None:
                done, started = ran
                if notes is not None:
                    self._note_compiled(notes, done)
        if done < 1:
            if not self._step(p2p, 0, self.step1, notes, started):
                return False  # (a member diverted to the agreement; nobody waits on step 2)
            started = None
            cells[self.at] = head
            host_agrees = bool((cells == head).all())
            if host_agrees:
                _combine(op, partial, [work[start:start + partial.size] if j == self.at
                                       else parts[j] for j in range(len(parts))])
            else:
                head[-1] = _DIFFER
            if not self._step(p2p, 1, self.step2 if host_agrees else self.step2_differ,
                              notes) or not host_agrees:
                return False
        if done < 2:
            if started is not None and not self._step(p2p, 1, self.step2, notes, started):
                return False
            started = None
            heads, got = self.heads, self.got
            heads[self.rail_at] = head
            if not (heads == head).all():
                return False
            got[self.rail_at] = partial[own:own + mine]
            # every rank of the group runs this call: combine (all_reduce: and send the
            # piece round the host)
            _combine(op, dest, list(got))
        if done < 3:
            self._step(p2p, 2, self.step3, notes, started, settled=True)
        if self.order is None and self.direct is None:
            np.copyto(w, work)
        return True


def _all_reduce_leader_pipelined(ctx: Ctx, w: np.ndarray, op: ReduceOp) -> None:
    """The leader family for large data, in chunks of about :data:`PIPELINE_BYTES`.

    Each chunk is reduced to the host's leader, and the leaders reduce-scatter it
    among themselves right away (posted, not waited for), so the link carries chunk
    k while the host reduces chunk k + 1; then each chunk is combined, all-gathered
    among the leaders and broadcast inside the host while later chunks are still on
    the link. Elementwise ops make every chunk an all_reduce of its own.
    """
    spans = split_even(w.size, max(1, w.nbytes // PIPELINE_BYTES))
    chunks = [w[start:start + length] for start, length in spans]
    leaders = ctx.leaders
    halves = []
    for c in chunks:
        ctx.local.reduce(c, op, 0)
        if leaders is not None:
            halves.append(_start_reduce_scatter(leaders, c))
    gathers = []
    for c, (posted, got, counts) in zip(chunks, halves):
        posted.wait()
        gathers.append(leaders.start_allgatherv(c, _reduced_piece(leaders, got, counts, op),
                                                counts, displs(counts)[:-1]))
    for i, c in enumerate(chunks):
        if gathers:
            gathers[i].wait()
        ctx.local.broadcast(c, 0)


def _allgather_reduce(comm: Across, w: np.ndarray, op: ReduceOp) -> None:
    """All-reduce among ``comm``'s members in one exchange (small data)."""
    everyone = np.empty(w.size * comm.size, w.dtype)
    comm.allgatherv(everyone, w, [w.size] * comm.size)
    _combine(op, w, [everyone[i * w.size:(i + 1) * w.size] for i in range(comm.size)])


def _rail_all_reduce(comm: Across, w: np.ndarray, op: ReduceOp) -> None:
    """Reduce-scatter then all-gather among ``comm``'s members: each sends 2(P-1)/P of ``w``."""
    posted, got, counts = _start_reduce_scatter(comm, w)
    posted.wait()
    comm.allgatherv(w, _reduced_piece(comm, got, counts, op), counts)


def _start_reduce_scatter(comm: Across, w: np.ndarray) -> tuple[Pending, np.ndarray, list[int]]:
    """Post the first half of a reduce-scatter/all-gather all-reduce among ``comm``'s
    members: every member's piece i of ``w`` to member i. Returns (posted, what arrives:
    member-major pieces of mine, the piece counts)."""
    P = comm.size
    counts = [c for _, c in split_even(w.size, P)]
    mine = counts[comm.rank]
    got = np.empty(mine * P, w.dtype)
    return comm.start_alltoallv(got, [mine] * P, w, counts, _even(counts)), got, counts


def _reduced_piece(comm: Across, got: np.ndarray, counts: Sequence[int],
                   op: ReduceOp) -> np.ndarray:
    """My piece, combined from what :func:`_start_reduce_scatter` brought (member order)."""
    mine = counts[comm.rank]
    part = np.empty(mine, got.dtype)
    _combine(op, part, [got[i * mine:(i + 1) * mine] for i in range(comm.size)])
    return part


# ------------------------------------------------------------------ broadcast


def broadcast(ctx: Ctx, family: str, w: np.ndarray, root: int) -> None:
    """Every rank's ``w`` becomes the root's (``root`` a group rank)."""
    run("broadcast", ctx, family, w, root)


@_runs("broadcast", "leader")
def broadcast_leader(ctx: Ctx, w: np.ndarray, root: int) -> None:
    """Broadcast inside the root's host, among the leaders, then inside every other host.

    Steps: on the root's host a local broadcast (shared memory) reaches its leader; the
    leaders broadcast on the engine; every other host broadcasts inside itself. Past the
    engine's pipeline chunk, in chunks, each host broadcasting one chunk while the link
    carries the next.

    Bytes across hosts: S into each other host, once, between the leaders (S the array).
    """
    lay = ctx.layout
    rh, rl = lay.where(root)
    chunk = ctx.flat.pipeline_chunk
    if chunk and w.nbytes > chunk:
        _broadcast_leader_pipelined(ctx, w, rh, rl, chunk)
        return
    if lay.host == rh:
        ctx.local.broadcast(w, rl)
    if ctx.leaders is not None:  # on the root's host the local broadcast reached the leader
        ctx.leaders.bcast(w, rh)
    if lay.host != rh:
        ctx.local.broadcast(w, 0)


@_runs("broadcast", "rails")
def broadcast_rails(ctx: Ctx, w: np.ndarray, root: int) -> None:
    """Broadcast inside the root's host, each rail carries 1/L of it, all-gather inside.

    Steps: a local broadcast on the root's host (shared memory); rail j broadcasts
    part j of L from the root's host to the others, L rails at once; every other host
    all-gathers the parts.

    Bytes across hosts: S into each other host, once, in L parallel streams of S/L (S the
    array, L ranks a host).
    """
    lay = ctx.layout
    rh, rl = lay.where(root)
    if lay.host == rh:
        ctx.local.broadcast(w, rl)
    spans = split_even(w.size, ctx.local.size)
    start, length = spans[lay.local]
    if ctx.rail is not None and length:
        ctx.rail.bcast(w[start:start + length], rh)
    if lay.host != rh:
        ctx.local.all_gather(w, w[start:start + length].copy(), [c for _, c in spans])


@_runs("broadcast", "flat")
def broadcast_flat(ctx: Ctx, w: np.ndarray, root: int) -> None:
    """The whole call on the inter-host engine, every rank a peer: the baseline.

    Steps: the engine's own broadcast (MPI's Ibcast, Gloo's broadcast).

    Bytes across hosts: what the engine's algorithm sends, ranks of one host included as
    peers: at least S into each other host (S the array).
    """
    ctx.flat.bcast(w, root)


def _broadcast_leader_pipelined(ctx: Ctx, w: np.ndarray, rh: int, rl: int, chunk: int
                                ) -> None:
    """The leader family's broadcast in chunks of about ``chunk`` bytes (the engine's
    :attr:`Across.pipeline_chunk`): the leaders' broadcasts of every chunk are posted at
    once, and each other host broadcasts chunk k inside itself while later chunks are
    still on the link; on the root's host the local broadcast runs while the link
    carries the data (when the root is its host's leader; else it must come first).

    Over MPI (MPICH ofi/tcp, 2 emulated hosts x 2 ranks, 1 MiB chunks, one job each,
    ms, pipelined / one piece / flat / MPICH's own Bcast): 2 Gbit/s 8 MiB 36.6 / 38.8 /
    39.3 / 35.9, 32 MiB 144 / 149 / 148 / 146; unlimited 16 MiB 14.9 / - / 16.5 /
    12.6, 32 MiB 24.4 / 31.8 / 30.1 / 27.0. 2 MiB chunks did no better. Over Gloo,
    whose posted operations run one after another, chunks made unlimited links slower
    (32 MiB 48.6 against 28.3 in one piece), so Gloo sends one piece."""
    lay = ctx.layout
    spans = split_even(w.size, max(1, w.nbytes // chunk))
    chunks = [w[start:start + length] for start, length in spans]
    leaders = ctx.leaders
    if lay.host == rh:
        if rl != 0:
            ctx.local.broadcast(w, rl)
        posted = [leaders.start_bcast(c, rh) for c in chunks] if leaders is not None else []
        if rl == 0:
            ctx.local.broadcast(w, 0)
        for p in posted:
            p.wait()
        return
    posted = [leaders.start_bcast(c, rh) for c in chunks] if leaders is not None else []
    for i, c in enumerate(chunks):
        if posted:
            posted[i].wait()
        ctx.local.broadcast(c, 0)


# ------------------------------------------------------------------ reduce


def reduce(ctx: Ctx, family: str, w: np.ndarray, op: ReduceOp, root: int) -> None:
    """The root's ``w`` becomes the reduction over every rank; others' ``w`` may change."""
    run("reduce", ctx, family, w, op, root)


@_runs("reduce", "leader")
def reduce_leader(ctx: Ctx, w: np.ndarray, op: ReduceOp, root: int) -> None:
    """Reduce inside every host, each host's sum straight to the root, folded in host order.

    Steps: a local reduce (shared memory) to the root on its host, to local rank 0 on
    the others; each other host's leader sends its sum to the root (the engine's
    point-to-point), which folds the hosts' sums in host order.

    Bytes across hosts: S from each other host to the root's (S the array).
    """
    lay = ctx.layout
    rh, rl = lay.where(root)
    delegate = rl if lay.host == rh else 0
    ctx.local.reduce(w, op, delegate)
    if lay.local != delegate:
        return
    if lay.me == root:
        parts: list[np.ndarray] = []
        for h, members in enumerate(lay.hosts):
            if h == rh:
                parts.append(w.copy())
            else:
                buf = np.empty_like(w)
                ctx.p2p.recv(buf, members[0])
                parts.append(buf)
        _combine(op, w, parts)
    else:
        ctx.p2p.send(w, root)


@_runs("reduce", "flat")
def reduce_flat(ctx: Ctx, w: np.ndarray, op: ReduceOp, root: int) -> None:
    """The whole call on the inter-host engine, every rank a peer: the baseline.

    Steps: the engine's own reduce (MPI's Ireduce, Gloo's reduce); where it has no such
    op for the dtype, a gather of every rank's array to the root and a fold there in
    rank order.

    Bytes across hosts: what the engine's algorithm sends, ranks of one host included as
    peers: at least S out of each host but the root's (S the array).
    """
    lay = ctx.layout
    if ctx.flat.reduce(w, op, root):
        return
    at_root = lay.me == root
    everyone = np.empty(w.size * lay.size, w.dtype) if at_root else None
    ctx.flat.gatherv(everyone, w, [w.size] * lay.size, root)
    if at_root:
        _combine(op, w, _pieces(everyone, [w.size] * lay.size))


# ------------------------------------------------------------------ all_gather


def all_gather(ctx: Ctx, family: str, out: np.ndarray, mine: np.ndarray,
               counts: Sequence[int]) -> None:
    """``out`` (every rank's piece, in group-rank order) from each rank's ``mine``."""
    run("all_gather", ctx, family, out, mine, counts)


@_runs("all_gather", "leader")
def all_gather_leader(ctx: Ctx, out: np.ndarray, mine: np.ndarray,
                      counts: Sequence[int]) -> None:
    """Gather inside the host, all-gather among the leaders, broadcast inside the host.

    Steps: a local gather of the host's pieces to local rank 0 (shared memory); the
    leaders all-gather their hosts' blocks on the engine; a local broadcast of the
    whole, then every rank puts the pieces in group-rank order.

    Bytes across hosts: each host's block to every other host, from the leaders alone:
    (H-1) S/H a host with even pieces (S the gathered array, H hosts).
    """
    lay = ctx.layout
    at = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    host_counts = [sum(counts[g] for g in h) for h in lay.hosts]
    members = lay.hosts[lay.host]
    block = np.empty(host_counts[lay.host], out.dtype)
    ctx.local.gather(_pieces(block, [counts[g] for g in members]) if lay.local == 0 else None,
                     mine, 0)
    everything = np.empty(sum(host_counts), out.dtype)
    if ctx.leaders is not None:
        ctx.leaders.allgatherv(everything, block, host_counts)
    ctx.local.broadcast(everything, 0)
    _place(out, at, everything, [g for h in lay.hosts for g in h])


@_runs("all_gather", "rails")
def all_gather_rails(ctx: Ctx, out: np.ndarray, mine: np.ndarray,
                     counts: Sequence[int]) -> None:
    """Each rail all-gathers its ranks' pieces across hosts, then the host all-gathers.

    Steps: rail j (local rank j of every host) all-gathers its pieces on the engine, L
    rails at once; a local all-gather of the rails' blocks (shared memory). Where every
    host's ranks are consecutive, straight into ``out``: the rail's pieces land in
    place while the host all-gathers its own span.

    Bytes across hosts: as ``leader``, (H-1) S/H a host with even pieces, in L parallel
    streams (S the gathered array, H hosts, L ranks a host).
    """
    lay = ctx.layout
    at = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if lay.contiguous:
        _all_gather_rails_in_place(ctx, out, mine, counts, at)
        return
    # rail j gathers the pieces of local rank j of every host; the host then
    # all-gathers the rails' blocks (each in host order)
    L = ctx.local.size
    rails = [lay.rail(j) for j in range(L)]
    block_counts = [sum(counts[g] for g in rail) for rail in rails]
    block = np.empty(block_counts[lay.local], out.dtype)
    if ctx.rail is not None:
        ctx.rail.allgatherv(block, mine, [counts[g] for g in rails[lay.local]])
    else:
        block[:] = mine
    blocks = np.empty(sum(block_counts), out.dtype)
    ctx.local.all_gather(blocks, block, block_counts)
    _place(out, at, blocks, [g for rail in rails for g in rail])


@_runs("all_gather", "flat")
def all_gather_flat(ctx: Ctx, out: np.ndarray, mine: np.ndarray,
                    counts: Sequence[int]) -> None:
    """The whole call on the inter-host engine, every rank a peer: the baseline.

    Steps: the engine's own all-gather (MPI's Iallgatherv, Gloo's all_gather).

    Bytes across hosts: what the engine's algorithm sends, ranks of one host included as
    peers (a ring: (P-1) S/P a rank, S the gathered array, P ranks).
    """
    ctx.flat.allgatherv(out, mine, counts)


def _all_gather_rails_in_place(ctx: Ctx, out: np.ndarray, mine: np.ndarray,
                                counts: Sequence[int], at: np.ndarray) -> None:
    """Rails all_gather when every host's pieces are one span of ``out``: no scratch.

    My rail brings local rank j's piece of every host straight to its place in
    ``out``; while those bytes cross the link, my host's own span is all-gathered
    inside the host (the two touch different parts of ``out``). Then each other
    host's span is completed inside my host, every rank passing the piece its rail
    brought. Measured at 32 MiB on 2 emulated hosts x 2 ranks, 2 Gbit/s: 96 -> 80 ms
    (link floor 67 ms), the scratch blocks and their placement copies gone.
    """
    lay = ctx.layout
    j = lay.local
    span = lambda h: out[at[h[0]]:at[h[-1] + 1]]  # noqa: E731
    piece = lambda g: out[at[g]:at[g + 1]]  # noqa: E731
    rail = lay.rail(j)
    posted = ctx.rail.start_allgatherv(out, mine, [counts[g] for g in rail],
                                       [int(at[g]) for g in rail]) if ctx.rail else None
    own = lay.hosts[lay.host]
    ctx.local.all_gather(span(own), mine, [counts[g] for g in own])
    if posted is not None:
        posted.wait()
    for h in lay.hosts:
        if h is not own:
            ctx.local.all_gather(span(h), piece(h[j]), [counts[g] for g in h])


def _place(out: np.ndarray, at: np.ndarray, packed: np.ndarray, order: Sequence[int]) -> None:
    """Copy the pieces of ``packed`` (group ranks in ``order``) to their places in ``out``."""
    pos = 0
    for g in order:
        n = int(at[g + 1] - at[g])
        out[at[g]:at[g + 1]] = packed[pos:pos + n]
        pos += n


def _pack(inp: np.ndarray, at: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """The pieces of ``inp`` (indexed by group rank) back to back in ``order``."""
    return np.concatenate([inp[at[g]:at[g + 1]] for g in order]) if order else inp[:0].copy()


# ------------------------------------------------------------------ reduce_scatter


def reduce_scatter(ctx: Ctx, family: str, out: np.ndarray, w: np.ndarray,
                   counts: Sequence[int], op: ReduceOp) -> None:
    """``out`` = piece ``me`` (``counts`` long pieces in group-rank order) of the reduction of
    every rank's ``w``. ``w`` is left as it was (the caller's input), but for ``out``
    itself: ``out`` may be a part of ``w`` (in place). Every family but ``rails`` over
    contiguous hosts has read the whole of ``w`` (sent, packed or copied it) before it
    writes ``out``, so it needs no copy of ``w`` (at 2 hosts x 1, flat, 32 MiB in place
    took 31.7 ms with one, out of place 20.8). ``rails`` over contiguous hosts lets the
    host's ranks read spans of ``w`` in its local steps; it reads a copy in place (kept
    to be safe: its last local step returns before it writes ``out``, and the simulator
    shows no difference without the copy)."""
    run("reduce_scatter", ctx, family, out, w, counts, op)


@_runs("reduce_scatter", "leader")
def reduce_scatter_leader(ctx: Ctx, out: np.ndarray, w: np.ndarray, counts: Sequence[int],
                          op: ReduceOp) -> None:
    """Reduce to each host's leader, reduce-scatter among the leaders, scatter inside.

    Steps: a local reduce of the whole input to local rank 0 (shared memory); the
    leaders exchange each host's block of the sum (an all-to-all on the engine) and
    fold the blocks for their own host in host order; a local scatter of the pieces.

    Bytes across hosts: each other host's block of the sum, from the leaders alone:
    (H-1) S/H a host with even pieces (S the input, H hosts).
    """
    lay = ctx.layout
    at = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    members = lay.hosts[lay.host]
    w = w.copy()  # the local reduce leaves its result in the leader's buffer
    ctx.local.reduce(w, op, 0)
    host_counts = [sum(counts[g] for g in h) for h in lay.hosts]
    block = np.empty(host_counts[lay.host], w.dtype)
    if ctx.leaders is not None:
        send = _pack(w, at, [g for h in lay.hosts for g in h])
        got = np.empty(host_counts[lay.host] * len(lay.hosts), w.dtype)
        ctx.leaders.alltoallv(got, [host_counts[lay.host]] * len(lay.hosts), send, host_counts,
                              _even(host_counts))
        _combine(op, block, _pieces(got, [host_counts[lay.host]] * len(lay.hosts)))
    ctx.local.scatter(out, _pieces(block, [counts[g] for g in members])
                      if lay.local == 0 else None, 0)


@_runs("reduce_scatter", "rails")
def reduce_scatter_rails(ctx: Ctx, out: np.ndarray, w: np.ndarray, counts: Sequence[int],
                         op: ReduceOp) -> None:
    """Reduce-scatter inside the host by rail, then each rail finishes its ranks' pieces.

    Steps: a local reduce-scatter that leaves local rank j the host's partial sums of
    rail j's pieces (shared memory); rail j exchanges them across hosts (an all-to-all
    on the engine, L rails at once) and each rank folds its piece's partial sums in
    host order. Where every host's ranks are consecutive, no packing: the other hosts'
    spans first, in chunks, so the link works while the host reduces its own span.

    Bytes across hosts: (H-1) S/H a host with even pieces, in L parallel streams (S the
    input, H hosts, L ranks a host).
    """
    lay = ctx.layout
    at = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if lay.contiguous:
        _reduce_scatter_rails_by_host(ctx, out, w.copy() if np.may_share_memory(out, w)
                                      else w, counts, at, op)
        return
    L = ctx.local.size
    rails = [lay.rail(j) for j in range(L)]
    order = [g for rail in rails for g in rail]
    block_counts = [sum(counts[g] for g in rail) for rail in rails]
    block = np.empty(block_counts[lay.local], w.dtype)
    ctx.local.reduce_scatter(block, _pack(w, at, order), block_counts, op)
    mine = rails[lay.local]
    if ctx.rail is not None:
        n = counts[lay.me]
        got = np.empty(n * len(mine), w.dtype)
        rail_counts = [counts[g] for g in mine]
        ctx.rail.alltoallv(got, [n] * len(mine), block, rail_counts, _even(rail_counts))
        _combine(op, out, _pieces(got, [n] * len(mine)))
    else:
        out[:] = block


@_runs("reduce_scatter", "flat")
def reduce_scatter_flat(ctx: Ctx, out: np.ndarray, w: np.ndarray, counts: Sequence[int],
                        op: ReduceOp) -> None:
    """Every rank's piece of every input straight to its owner on the engine, folded there.

    Steps: one all-to-all on the inter-host engine, every rank a peer (MPI's
    Ialltoall(v), Gloo's all_to_all), then each rank folds the P copies of its piece in
    rank order. (MPICH's nonblocking reduce-scatter measured slower than this.)

    Bytes across hosts: each rank's pieces for the other hosts' ranks, (P-L) S/P a rank
    with even pieces (S the input, P ranks, L on its host).
    """
    lay = ctx.layout
    P = lay.size
    got = np.empty(counts[lay.me] * P, w.dtype)
    ctx.flat.alltoallv(got, [counts[lay.me]] * P, w, counts, _even(counts))
    _combine(op, out, _pieces(got, [counts[lay.me]] * P))


def _reduce_scatter_rails_by_host(ctx: Ctx, out: np.ndarray, w: np.ndarray,
                                  counts: Sequence[int], at: np.ndarray, op: ReduceOp) -> None:
    """Rails reduce_scatter when every host's pieces are one span of ``w``: no packing.

    The other hosts' spans are reduce-scattered inside my host first, so that my
    rail can carry my share of their results while my own host's span is
    reduce-scattered. Then ``out`` combines the hosts' partials, in host order.
    Measured at 32 MiB on 2 emulated hosts x 2 ranks, 2 Gbit/s: 106 -> 91..101 ms
    (link floor 67 ms), the input's repacking into rail order gone.

    With a pipelining engine (:attr:`Across.pipeline_chunk`), the link does not wait
    for the whole of that first step: a chunk at the outer ends of each other host's
    span (the start of its first member's piece, the end of its last member's) is
    reduced first, alone, and put on the link; the rest, between them, is still one
    contiguous slice of the caller's input, reduce-scattered in one step while the
    chunks travel. The rest travels in pieces of 4 chunks, so that the partials that
    came back are combined while the later ones are still on the link. Only where a
    piece holds 4 chunks or more: below, the early chunks' own steps cost more than
    the link's wait they save.

    32 MiB on 2 emulated hosts x 2 ranks over MPICH (ofi/tcp), one job, the calls
    alternating one by one, mean of 4-6 calls in 4-5 rounds (ms), one piece against
    1 MiB chunks with the rest in pieces of 1 / 4 chunks: 2 Gbit/s 82.5-86.5 against
    74.6-77.8 / 77.5-81.3 (link floor 67; a raw 16 MiB exchange between the hosts takes
    71); unlimited 37.5-41.7 against 3-10% more / 1-5% more (MPICH's own: 44). At 2-8
    MiB, early chunks of half a piece gained 1-3% at 2 Gbit/s and lost 7-11% unlimited.
    Reducing the early chunks of every piece in turn, without the contiguous rest,
    cost 47 against 38 ms unlimited (each local step then runs one rank's reduction).
    """
    lay = ctx.layout
    j = lay.local
    mine = lay.hosts[lay.host]
    n = counts[lay.me]
    others = len(lay.hosts) - 1
    rail = ctx.rail if others else None
    chunk = _pipeline_chunk(ctx.flat, counts, w.itemsize)
    last = len(mine) - 1

    def early(count: int, i: int) -> tuple[int, int]:
        """(start, length) of the part of member i's piece that goes on the link first."""
        return _outer_chunk(count, i, last, chunk)

    # 1. the early chunks, each reduced to its rail's rank alone (the others' counts 0)
    early_counts = [0 if h is mine else early(counts[h[j]], j)[1] for h in lay.hosts]
    first = np.empty(sum(early_counts), w.dtype)
    for h, part in zip(lay.hosts, _pieces(first, early_counts)):
        for i in (0, last) if last and h is not mine else ():
            start, length = early(counts[h[i]], i)
            if length:
                alone = [0] * len(h)
                alone[i] = length
                ctx.local.reduce_scatter(part if i == j else part[:0],
                                         w[at[h[i]] + start:at[h[i]] + start + length],
                                         alone, op)
    mine_early = early(n, j)
    posted: list[tuple[tuple[int, int], Pending, np.ndarray]] = []
    if rail is not None and any(early(counts[h[j]], j)[1] for h in lay.hosts):
        got = np.empty(mine_early[1] * others, w.dtype)
        posted.append((mine_early, rail.start_alltoallv(
            got, [0 if h is mine else mine_early[1] for h in lay.hosts], first, early_counts),
            got))
    # 2. the rest of each other host's span, between its early chunks, in one step
    rest_counts = [0 if h is mine else counts[h[j]] - early_counts[x]
                   for x, h in enumerate(lay.hosts)]
    rest = np.empty(sum(rest_counts), w.dtype)
    for h, part in zip(lay.hosts, _pieces(rest, rest_counts)):
        if h is not mine:
            cut = [early(counts[g], i)[1] for i, g in enumerate(h)]
            lo = at[h[0]] + cut[0]
            ctx.local.reduce_scatter(part, w[lo:lo + sum(counts[g] for g in h) - sum(cut)],
                                     [counts[g] - c for g, c in zip(h, cut)], op)
    if rail is not None:
        r0 = mine_early[1] if j == 0 else 0  # where the rest starts in my piece
        r_len = n - mine_early[1]
        # between two hosts the rest goes in pieces of 4 chunks (as many on both sides of
        # the rail: from its longer piece); among more, each exchange would need every
        # host's chunk side by side, so it goes in one piece
        parts = (max(1, max(rest_counts + [r_len]) // (4 * chunk)) if chunk and others == 1
                 else 1)
        for (start, length), (s0, l0) in zip(split_even(r_len, parts),
                                             split_even(len(rest), parts)):
            got = np.empty(length * others, w.dtype)
            posted.append(((r0 + start, length), rail.start_alltoallv(
                got, [0 if h is mine else length for h in lay.hosts],
                rest[s0:s0 + l0] if others == 1 else rest,
                [0 if h is mine else l0 for h in lay.hosts] if others == 1
                else rest_counts), got))
    own = out if rail is None else np.empty_like(out)  # reduce_many: dst aliases no part
    ctx.local.reduce_scatter(own, w[at[mine[0]]:at[mine[-1] + 1]], [counts[g] for g in mine], op)
    for (start, length), p, got in posted:
        p.wait()
        received = iter(_pieces(got, [length] * others))
        _combine(op, out[start:start + length],
                 [own[start:start + length] if h is mine else next(received)
                  for h in lay.hosts])


def _pipeline_chunk(engine: Across, counts: Sequence[int], itemsize: int) -> int:
    """Elements of a rails call's chunks (the ``engine``'s :attr:`Across.pipeline_chunk`),
    or 0 for one piece: the same on every rank (from the counts, which all ranks know).
    Only where a piece holds 4 chunks or more: below, the chunks' own steps cost more
    than the link's wait they save."""
    chunk = engine.pipeline_chunk // itemsize
    return chunk if chunk and max(counts) >= 4 * chunk else 0


def _outer_chunk(count: int, i: int, last: int, chunk: int) -> tuple[int, int]:
    """(start, length) of the part of a ``count`` long piece of local member ``i`` (of
    ``last + 1``) that lies at the outer edges of its host's span: the start of the
    first member's piece and the end of the last's, ``chunk`` long (at most half the
    piece); none for the members between them, nor for a host of one rank. What is
    left of the span between the two is one contiguous slice, which the host can
    reduce in one step."""
    c = min(chunk, count // 2) if last else 0
    return (0, c) if i == 0 else (count - c, c) if i == last else (0, 0)


# ------------------------------------------------------------------ gather / scatter


def gather(ctx: Ctx, family: str, outs: list[np.ndarray] | None, mine: np.ndarray,
           counts: Sequence[int], root: int) -> None:
    """The root's ``outs[g]`` becomes rank g's ``mine`` (``counts[g]`` elements)."""
    run("gather", ctx, family, outs, mine, counts, root)


@_runs("gather", "leader")
def gather_leader(ctx: Ctx, outs: list[np.ndarray] | None, mine: np.ndarray,
                  counts: Sequence[int], root: int) -> None:
    """Gather inside every host, each host's block straight to the root.

    Steps: a local gather (shared memory), to the root on its host, to local rank 0 on
    the others; each other host's leader sends its block to the root (the engine's
    point-to-point), which puts the pieces in place.

    Bytes across hosts: each other host's pieces, once, to the root's host.
    """
    lay = ctx.layout
    rh, rl = lay.where(root)
    delegate = rl if lay.host == rh else 0
    members = lay.hosts[lay.host]
    if lay.host == rh:
        ctx.local.gather([outs[g] for g in members] if lay.me == root else None, mine, rl)
    else:
        block = np.empty(sum(counts[g] for g in members), mine.dtype)
        ctx.local.gather(_pieces(block, [counts[g] for g in members])
                         if lay.local == delegate else None, mine, 0)
        if lay.local == delegate:
            ctx.p2p.send(block, root)
    if lay.me == root:
        for h, hm in enumerate(lay.hosts):
            if h == rh:
                continue
            block = np.empty(sum(counts[g] for g in hm), mine.dtype)
            ctx.p2p.recv(block, hm[0])
            for g, piece in zip(hm, _pieces(block, [counts[g] for g in hm])):
                outs[g][:] = piece


@_runs("gather", "flat")
def gather_flat(ctx: Ctx, outs: list[np.ndarray] | None, mine: np.ndarray,
                counts: Sequence[int], root: int) -> None:
    """The whole call on the inter-host engine, every rank a peer: the baseline.

    Steps: the engine's own gather (MPI's Igatherv; Gloo's gather, pieces padded to the
    largest) into one array on the root, then copied into its list.

    Bytes across hosts: each other host's pieces, once, to the root's host.
    """
    at_root = ctx.layout.me == root
    whole = np.empty(sum(counts), mine.dtype) if at_root else None
    ctx.flat.gatherv(whole, mine, counts, root)
    if at_root:
        for out, piece in zip(outs, _pieces(whole, counts)):
            out[:] = piece


def scatter(ctx: Ctx, family: str, out: np.ndarray, ins: list[np.ndarray] | None,
            counts: Sequence[int], root: int) -> None:
    """Rank g's ``out`` becomes the root's ``ins[g]``."""
    run("scatter", ctx, family, out, ins, counts, root)


@_runs("scatter", "leader")
def scatter_leader(ctx: Ctx, out: np.ndarray, ins: list[np.ndarray] | None,
                   counts: Sequence[int], root: int) -> None:
    """The root sends each host its block, every host scatters it inside.

    Steps: the root sends each other host's leader the pieces of that host's ranks in
    one message (the engine's point-to-point); a local scatter (shared memory), from
    the root on its host, from local rank 0 on the others.

    Bytes across hosts: each other host's pieces, once, from the root's host.
    """
    lay = ctx.layout
    rh, rl = lay.where(root)
    members = lay.hosts[lay.host]
    if lay.me == root:
        for h, hm in enumerate(lay.hosts):
            if h != rh:
                ctx.p2p.send(np.concatenate([ins[g] for g in hm]), hm[0])
    if lay.host == rh:
        ctx.local.scatter(out, [ins[g] for g in members] if lay.me == root else None, rl)
        return
    block = None
    if lay.local == 0:
        block = np.empty(sum(counts[g] for g in members), out.dtype)
        ctx.p2p.recv(block, root)
    ctx.local.scatter(out, _pieces(block, [counts[g] for g in members])
                      if block is not None else None, 0)


@_runs("scatter", "flat")
def scatter_flat(ctx: Ctx, out: np.ndarray, ins: list[np.ndarray] | None,
                 counts: Sequence[int], root: int) -> None:
    """The whole call on the inter-host engine, every rank a peer: the baseline.

    Steps: the root's pieces copied into one array, then the engine's own scatter (MPI's
    Iscatterv; Gloo's scatter, pieces padded to the largest).

    Bytes across hosts: each other host's pieces, once, from the root's host.
    """
    whole = np.concatenate(ins) if ctx.layout.me == root else None
    ctx.flat.scatterv(out, whole, counts, root)


# ------------------------------------------------------------------ all_to_all


def all_to_all(ctx: Ctx, family: str, out: np.ndarray, recv_counts: Sequence[int],
               inp: np.ndarray, send_counts: Sequence[int], uniform: bool = False) -> None:
    """Rank g's piece for rank h (``send_counts[h]`` of g) lands in h's ``out``.
    ``uniform``: every rank's pieces are even and of one size, as the agreement found
    (this rank's counts alone cannot tell: see ``Across.alltoallv``)."""
    run("all_to_all", ctx, family, out, recv_counts, inp, send_counts, uniform)


@_runs("all_to_all", "flat")
def all_to_all_flat(ctx: Ctx, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                    send_counts: Sequence[int], uniform: bool = False) -> None:
    """The whole call on the inter-host engine, every rank a peer.

    Steps: the engine's own all-to-all (MPI's Ialltoall, or Ialltoallv for uneven
    pieces; Gloo's all_to_all), after the agreement.

    Bytes across hosts: each rank's pieces for the other hosts' ranks, once.
    """
    ctx.flat.alltoallv(out, recv_counts, inp, send_counts, uniform)


@_runs("all_to_all", "fused")
def _all_to_all_fused(ctx: Ctx, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                      send_counts: Sequence[int], uniform: bool = False) -> bool:
    """Every pair's cell and piece in one message: the agreement rides in the data.

    Steps: one exchange of point-to-point messages on the engine, every rank a peer,
    each message a rank's cell and its piece for the receiver (even pieces only:
    uneven ones take the agreement, then ``flat``); see :func:`all_to_all_fused`.

    Bytes across hosts: as ``flat``, each rank's pieces for the other hosts' ranks, once,
    with one synchronisation fewer.
    """
    if not uniform:
        raise ValueError("'fused' all_to_all runs even pieces only (uneven: 'flat')")
    return all_to_all_fused(ctx, out, inp, b"")


def run(kind: str, ctx: Ctx, family: str, *args: Any) -> None:
    """Run ``kind`` with ``family`` on ``ctx`` (the one entry point of the executor): the
    function :data:`ALGORITHMS` registers for them.

    Raises:
        ValueError: ``family`` does not run ``kind`` (see :func:`supports`).
        RuntimeError: a ``fused`` call found the ranks' calls differ (spanning.py runs
            fused calls itself, with the call's cell, and settles that).
    """
    fn = ALGORITHMS[kind].get(family)
    if fn is None:
        raise ValueError(supports(kind, family, ctx.layout) or f"no {family!r} for {kind}")
    if fn(ctx, *args) is False:
        raise RuntimeError(f"{fn.__name__}: the ranks' calls differ (no cell told)")
