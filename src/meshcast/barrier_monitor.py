"""monitored_barrier: a barrier that names the ranks that did not reach it.

torch.distributed's ``monitored_barrier`` (Gloo only there) has every rank but the
group's first report to that rank, which waits for each of them up to a timeout
and raises naming the ones that did not come. Here the ranks meet through the
job's rendezvous store, not the shared-memory engine: a rank that hangs in some
earlier collective, or whose host is gone, leaves the engine in a state this
barrier must not depend on, and the store reaches every rank of any group, on
one host or several.

Keys, under ``meshcast/monitored_barrier/<group id>/<call>``: ``arrived/<rank>``
(each rank but the monitor, as it enters), ``verdict`` (the monitor's: ``ok``, or
the ranks it names and the message every rank raises), ``read`` (a counter: the last rank to read the
verdict deletes the call's keys, so a long run leaves nothing behind).
"""

from __future__ import annotations

import time
from typing import Any

from .errors import CommTimeout

# How much longer than the barrier's timeout a rank waits for the monitor's verdict: the
# monitor gives its verdict once its own wait ended, a store round trip or two later.
VERDICT_GRACE_S = 2.0


def run(pg: Any, store: Any, call: int, timeout: float, wait_all_ranks: bool) -> None:
    """Call number ``call`` of monitored_barrier on ``pg`` (a group this rank is in),
    meeting through ``store``; see :func:`meshcast.monitored_barrier`.

    Raises:
        CommTimeout: a rank did not arrive within ``timeout`` seconds (every rank that
            reaches the verdict raises the monitor's message, which names them), or
            the monitor gave no verdict within ``timeout`` + :data:`VERDICT_GRACE_S`.
    """
    ranks = list(pg.global_ranks)
    me = ranks[pg.rank()]
    base = f"meshcast/monitored_barrier/{pg.group_id}/{call}"
    verdict_key = f"{base}/verdict"
    if pg.rank() == 0:
        missing = _await_arrivals(store, base, ranks[1:], timeout, wait_all_ranks)
        if missing:
            verdict = (f"monitored_barrier #{call} on {pg.group_name}: rank(s) {missing} did "
                       f"not reach it within {timeout:g} s (monitored by rank {me})")
            store.set(verdict_key, f"{','.join(map(str, missing))}|{verdict}")
            raise CommTimeout(verdict, missing)
        for r in ranks[1:]:  # (every rank arrived: their keys can go)
            store.delete_key(f"{base}/arrived/{r}")
        if len(ranks) > 1:
            store.set(verdict_key, "ok")
        return
    store.set(f"{base}/arrived/{me}", b"1")
    try:
        store.wait([verdict_key], timeout + VERDICT_GRACE_S)
    except CommTimeout:
        raise CommTimeout(
            f"monitored_barrier #{call} on {pg.group_name}: rank {ranks[0]}, which monitors "
            f"it, gave no verdict within {timeout + VERDICT_GRACE_S:g} s (rank {me})",
            [ranks[0]]) from None
    verdict = store.get(verdict_key).decode()
    if verdict != "ok":
        named, _, message = verdict.partition("|")
        raise CommTimeout(message, [int(r) for r in named.split(",")])
    if store.add(f"{base}/read", 1) == len(ranks) - 1:  # (the last reader cleans up)
        store.delete_key(verdict_key)
        store.delete_key(f"{base}/read")


def _await_arrivals(store: Any, base: str, ranks: list[int], timeout: float,
                    wait_all_ranks: bool) -> list[int]:
    """The ranks of ``ranks`` whose arrival key did not appear within ``timeout``, in
    order: the first one only unless ``wait_all_ranks`` (torch's fail-fast default)."""
    deadline = time.monotonic() + timeout
    missing: list[int] = []
    for r in ranks:
        key = f"{base}/arrived/{r}"
        left = deadline - time.monotonic()
        if left > 0:  # (past the deadline, only what is there counts)
            try:
                store.wait([key], left)
                continue
            except CommTimeout:
                pass
        if not store.check([key]):
            missing.append(r)
            if not wait_all_ranks:
                break
    return missing


__all__ = ["VERDICT_GRACE_S", "run"]
