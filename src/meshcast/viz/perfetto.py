"""One Chrome trace event JSON for every rank of a recorded run (``viz trace --perfetto``).

Opens in https://ui.perfetto.dev and chrome://tracing. Layout:

* a process per rank (``pid`` = global rank, named ``rank N (host)``);
* a thread per group (``tid``; a second thread ``GROUP · overlap k`` when an
  async call overlaps the next call of that group on that rank, because
  Perfetto shows slices on one thread only if they nest or are disjoint);
* each call an ``X`` slice named by its algorithm, with the record's fields
  in ``args``; its rounds nested inside it (``round i``, and inside that the
  time the round waited for its messages); a call that never finished runs
  to the end of the trace with ``args.unfinished``;
* messages as flow arrows (flow v2: ``bind_id`` with ``flow_out``/``flow_in``)
  between zero-length marker slices on a ``messages`` thread: ``posted`` on
  the sender when the round began, ``arrived`` on the receiver when its wait
  ended. Perfetto draws an arrow from the *end* of the source slice to the
  *start* of the target, so arrows between the call slices themselves would
  point backwards whenever a receiver entered before the sender.

Timestamps are microseconds since the trace's start (``otherData.start_ns``
is that start as wall-clock nanoseconds).
"""

from __future__ import annotations

import json
from typing import Any

from . import hang
from .trace_data import Timeline, rank_label

MESSAGES_TID = 1_000_000  # after every group thread


def _us(ns: float) -> float:
    return round(ns / 1e3, 3)


def _args(c: dict[str, Any]) -> dict[str, Any]:
    keep = ("group", "seq", "kind", "dtype", "count", "bytes", "root", "peer", "tag", "op",
            "algorithm", "family", "lane", "compiled", "async", "error", "wait_ns",
            "arrival_wait_ns", "algbw", "busbw")
    a = {k: c.get(k) for k in keep if c.get(k) is not None}
    if c["e"] is None:
        a["unfinished"] = True
    return a


def events(tl: Timeline) -> dict[str, Any]:
    """The trace as a Chrome trace event JSON object (``{"traceEvents": [...], ...}``)."""
    ev: list[dict[str, Any]] = []
    end = float(tl.duration_ns)
    tids: dict[tuple[str, int], int] = {}
    for g in tl.groups:  # group threads in the same order on every rank
        tids[(g, 0)] = len(tids) + 1
    for rank in tl.ranks:
        ev.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                   "args": {"name": rank_label(tl, rank)}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                   "args": {"sort_index": rank}})
        ev.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": MESSAGES_TID,
                   "args": {"name": "messages"}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": MESSAGES_TID,
                   "args": {"sort_index": MESSAGES_TID}})
        rows: dict[str, list[float]] = {}
        used: set[int] = set()
        for c in sorted(tl.calls_of(rank), key=lambda c: c["b"]):
            e = c["e"] if c["e"] is not None else end
            lanes = rows.setdefault(c["group"], [])
            row = next((k for k, last in enumerate(lanes) if c["b"] >= last), len(lanes))
            if row == len(lanes):
                lanes.append(e)
            else:
                lanes[row] = e
            if (c["group"], row) not in tids:
                tids[(c["group"], row)] = len(tids) + 1
            tid = tids[(c["group"], row)]
            if tid not in used:
                used.add(tid)
                name = c["group"] if row == 0 else f"{c['group']} · overlap {row}"
                ev.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": name}})
                ev.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid,
                           "args": {"sort_index": tid}})
            ev.append({"ph": "X", "name": c.get("algorithm") or c["kind"],
                       "cat": "p2p" if c["kind"] in ("send", "recv") else "collective",
                       "pid": rank, "tid": tid, "ts": _us(c["b"]), "dur": _us(e - c["b"]),
                       "args": _args(c)})
            rounds = c["rounds"]
            for k, r in enumerate(rounds):
                # clamped into the call so that the slices nest even if clocks jitter
                rb = min(max(r["b"] if r["b"] is not None else c["b"], c["b"]), e)
                nxt = rounds[k + 1]["b"] if k + 1 < len(rounds) else None
                re_ = min(max(nxt if nxt is not None else e, rb), e)
                ev.append({"ph": "X", "name": r.get("step") or f"round {r.get('round', k)}",
                           "cat": "round",
                           "pid": rank, "tid": tid, "ts": _us(rb), "dur": _us(re_ - rb),
                           "args": {"send": r.get("send") or [], "recv": r.get("recv") or [],
                                    "wait_ns": r.get("wait_ns")}})
                w = min(float(r.get("wait_ns") or 0), re_ - rb)
                if w > 0:
                    ev.append({"ph": "X", "name": "wait", "cat": "wait", "pid": rank,
                               "tid": tid, "ts": _us(rb), "dur": _us(w), "args": {}})
            if c.get("error"):
                ev.append({"ph": "i", "s": "t", "name": "error", "cat": "error", "pid": rank,
                           "tid": tid, "ts": _us(e), "args": {"error": c["error"]}})
    for k, m in enumerate(tl.messages):
        args = {"bytes": m["bytes"], "src": m["src"], "dst": m["dst"]}
        if m["coll"] is not None:
            co = tl.collectives[m["coll"]]
            args.update(group=co["group"], seq=co["seq"], round=m["round"])
        ev.append({"ph": "X", "name": f"posted to {m['dst']}", "cat": "message",
                   "pid": m["src"], "tid": MESSAGES_TID, "ts": _us(m["t0"]), "dur": 0,
                   "bind_id": k + 1, "flow_out": True, "args": args})
        ev.append({"ph": "X", "name": f"arrived from {m['src']}", "cat": "message",
                   "pid": m["dst"], "tid": MESSAGES_TID, "ts": _us(max(m["t1"], m["t0"])),
                   "dur": 0, "bind_id": k + 1, "flow_in": True, "args": args})
    report = hang.analyze(tl)
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"generator": "meshcast viz trace", "start_ns": tl.start_ns,
                          "world_size": tl.world_size, "ranks": tl.ranks,
                          "hang": report["headline"] if report["hung"] else None}}


def write(tl: Timeline, path: str) -> int:
    """Write :func:`events` to ``path``; returns the number of events."""
    data = events(tl)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"), allow_nan=False)
    return len(data["traceEvents"])


__all__ = ["events", "write"]
