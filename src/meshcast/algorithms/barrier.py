"""barrier: no rank leaves before every rank has entered.

Layout: no buffers; point-to-point algorithms exchange 0-byte messages.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import topology
from ._common import others
from ._plan import Enter, Plan, Recv, Round, Send, Signal, Wait
from ._registry import register

_NOTHING = np.empty(0, dtype=np.uint8)  # the payload of every barrier message (read-only use)


@register(
    "barrier",
    "dissemination",
    description="ceil(log2 P) rounds; in round k send to rank+2^k, receive from rank-2^k",
)
def dissemination(plan: Plan) -> Iterator[Round]:
    """Dissemination barrier (Hensgen, Finkel, Manber).

    Steps: ``ceil(log2 P)`` rounds; in round ``k`` rank ``r`` sends a 0-byte
    message to ``(r + 2**k) % P`` and receives one from ``(r - 2**k) % P``.
    After round ``k`` a rank has heard, directly or not, from the ``2**(k+1) - 1``
    ranks before it, so after the last round from everybody.

    Bytes sent per rank: 0 (``ceil(log2 P)`` messages).

    Requires: nothing.
    """
    for to, frm in topology.dissemination_peers(plan.rank, plan.size):
        yield Round(Send(to, _NOTHING), Recv(frm, _NOTHING))


@register(
    "barrier",
    "tree",
    description="0-byte binomial gather to rank 0, then a 0-byte binomial broadcast",
)
def tree(plan: Plan) -> Iterator[Round]:
    """Tree barrier: everybody reports up a binomial tree to rank 0, which releases them down it.

    Steps: ``2 ceil(log2 P)`` rounds (see gather/tree and broadcast/tree).

    Bytes sent per rank: 0 (one message up, one per child down).

    Requires: nothing.
    """
    p, v = plan.size, plan.rank
    levels = topology.ceil_log2(p)
    for k in range(levels):
        m = 1 << k
        if v % (2 * m) == m:
            yield Round(Send(v - m, _NOTHING))
        elif v % (2 * m) == 0 and v + m < p:
            yield Round(Recv(v + m, _NOTHING))
        else:
            yield Round()
    for k in range(levels):
        m = 1 << (levels - 1 - k)
        if v % (2 * m) == 0 and v + m < p:
            yield Round(Send(v + m, _NOTHING))
        elif v % (2 * m) == m:
            yield Round(Recv(v - m, _NOTHING))
        else:
            yield Round()


@register(
    "barrier",
    "arena",
    description="signal phase 1, wait for everyone's phase 1",
    family="arena",
)
def arena(plan: Plan) -> Iterator[Round]:
    """Shared-memory barrier.

    Steps: signal 1, wait until every other rank signalled 1 (Rule 1 makes
    phase 1 mean "entered this barrier").

    Bytes sent per rank: 0.

    Requires: an arena (any slot size, even 0 bytes of data).
    """
    if plan.size > 1:
        yield Round(then=[Signal(1), Wait(others(plan.rank, plan.size), 1)])


@register(
    "barrier",
    "oneshot",
    description="the call's entry alone: every rank has arrived once it returns",
    family="oneshot",
)
def oneshot(plan: Plan) -> Iterator[Round]:
    """One-shot barrier (paths/oneshot.barrier; ``_select.oneshot(caps, 0)``).

    Steps: 1 round: ``Enter`` (the fingerprint exchange and one signal); it
    returns once every rank has entered, which is what a barrier is.

    Bytes sent per rank: 0 (one fingerprint and one signal word).

    Requires: the arena's entry (all ranks of the group on one host).
    """
    yield Round(then=[Enter()])
