"""A recorded run (``MESHCAST_TRACE=DIR``) as one timeline: calls, matched collectives, messages.

The replay page, the Perfetto export and the hang view all read a trace
directory through :func:`load`, so the three agree on what happened: which
calls belong to one collective (``(group, seq)``, as
:func:`meshcast.trace.calls_by_key` matches them), which send met which
receive (the arrows), and how long each rank waited.

Times: the files hold wall-clock nanoseconds (``time.time_ns``); here every
time is relative to the trace's start (the earliest header ``start``, or the
earliest call if that is earlier), so ``0`` is when the first rank started
recording.

Bus bandwidth follows the nccl-tests convention
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
``algbw = size / time`` with ``size`` the collective's whole message (an
all_gather's gathered output, an all_reduce's buffer) and ``busbw = algbw *
factor(kind, n)``, the factor that makes busbw comparable with the link's
peak whatever the collective.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from ..trace import RankTrace, calls_by_key, read_dir
from ..trace.records import file_name

P2P_KINDS = ("send", "recv")


def busbw_factor(kind: str, n: int) -> float | None:
    """nccl-tests' bus-bandwidth factor of ``kind`` on ``n`` ranks (None: no bytes move)."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    if kind in ("broadcast", "reduce", "send", "recv"):
        return 1.0
    return None  # barrier


def message_bytes(kind: str, nbytes: int, n: int) -> int:
    """The collective's whole message (nccl-tests' ``size``) from one rank's ``bytes``.

    A trace's ``bytes`` is the rank's input: the piece it contributes to a
    gather or all_gather and the piece it receives in a scatter (the whole
    message is ``n`` pieces); the whole buffer for the others.
    """
    if kind in ("all_gather", "gather", "scatter"):
        return nbytes * n
    return nbytes


@dataclass
class Timeline:
    """Every rank's calls on one clock, with the derived views the pages share.

    ``calls`` holds one dict per call, in rank order then call order, each
    with ``id`` (its index in ``calls``), ``rank``, the file's fields and
    relative times ``b``/``e`` (``e`` None: never finished), ``coll`` (index
    into ``collectives`` or None) and ``row`` (the sub-lane that keeps
    overlapping async calls apart).
    """

    directory: str
    traces: list[RankTrace]
    start_ns: int
    duration_ns: int
    world_size: int
    missing_ranks: list[int]
    groups: dict[str, dict[str, Any]]
    calls: list[dict[str, Any]] = field(default_factory=list)
    collectives: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return [t.rank for t in self.traces]

    def calls_of(self, rank: int) -> list[dict[str, Any]]:
        """``rank``'s calls in the order it made them."""
        return [c for c in self.calls if c["rank"] == rank]

    def seconds(self, rel_ns: float) -> float:
        """A relative time in seconds since the trace's start."""
        return rel_ns / 1e9


def _rel(ns: Any, start: int) -> float | None:
    return None if ns is None else float(ns - start)


def load(directory: str) -> Timeline:
    """Read a trace directory and derive the matched collectives and the messages.

    Args:
        directory: what ``MESHCAST_TRACE`` pointed at (``rank-00000.jsonl`` ...).

    Raises:
        FileNotFoundError: no trace files there.
        ValueError: a file is not a meshcast trace (see :func:`meshcast.trace.read_rank`).
    """
    traces = read_dir(directory)  # one record per call, empty files left out
    world = max([int(t.header.get("world_size") or 0) for t in traces]
                + [t.rank + 1 for t in traces])
    have = {t.rank for t in traces}
    missing = [r for r in range(world) if r not in have]
    times = [int(t.header["start"]) for t in traces if t.header.get("start") is not None]
    times += [int(c["begin"]) for t in traces for c in t.calls]
    start = min(times) if times else 0
    groups: dict[str, dict[str, Any]] = {}
    for t in traces:
        for name, g in t.groups.items():
            groups.setdefault(name, dict(g))

    calls: list[dict[str, Any]] = []
    index: dict[tuple[int, int], int] = {}  # (rank, position in its file) -> id
    for t in traces:
        for i, c in enumerate(t.calls):
            d = dict(c)
            d.update(id=len(calls), rank=t.rank, i=i, b=_rel(c["begin"], start),
                     e=_rel(c.get("end"), start), coll=None, row=0)
            d["rounds"] = [dict(r, b=_rel(r.get("begin"), start)) for r in (c.get("rounds") or [])]
            waits = [r.get("wait_ns") for r in d["rounds"] if r.get("wait_ns") is not None]
            d["wait_ns"] = sum(waits) if waits else None
            index[(t.rank, i)] = d["id"]
            calls.append(d)
    end = max([c["e"] if c["e"] is not None else c["b"] for c in calls] + [0.0])
    tl = Timeline(directory, traces, start, int(end), world, missing, groups, calls)
    _match_collectives(tl, index)
    _rate(tl)
    _messages(tl)
    _rows(tl)
    return tl


def _members(tl: Timeline, group: str, present: dict[int, Any]) -> list[int]:
    g = tl.groups.get(group)
    if g and g.get("ranks"):
        return [int(r) for r in g["ranks"]]
    return sorted(present)


def _match_collectives(tl: Timeline, index: dict[tuple[int, int], int]) -> None:
    by_obj = {id(c): (t.rank, i) for t in tl.traces for i, c in enumerate(t.calls)}
    for (group, seq), per_rank in calls_by_key(tl.traces):
        ids = {r: index[by_obj[id(c)]] for r, c in per_rank.items()}
        members = _members(tl, group, per_rank)
        entries = [tl.calls[i] for i in ids.values()]
        begins = [c["b"] for c in entries]
        kinds = sorted({c["kind"] for c in entries})
        fps = {(c["kind"], c.get("dtype"), c.get("root"), c.get("op")) for c in entries}
        majority = max(kinds, key=lambda k: sum(c["kind"] == k for c in entries))
        algos = sorted({c.get("algorithm") or "" for c in entries} - {""})
        coll = {
            "id": len(tl.collectives), "group": group, "seq": seq, "kind": majority,
            "kinds": {str(r): tl.calls[i]["kind"] for r, i in ids.items()},
            "algorithm": algos[0] if len(algos) == 1 else " | ".join(algos) or None,
            "calls": {str(r): i for r, i in sorted(ids.items())},
            "ranks": sorted(ids), "members": members,
            "missing": [r for r in members if r not in ids],
            "mismatch": len(fps) > 1,
            "unfinished": sorted(r for r, i in ids.items() if tl.calls[i]["e"] is None),
            "errors": sorted(r for r, i in ids.items() if tl.calls[i].get("error")),
            "first_b": min(begins), "last_b": max(begins), "skew_ns": max(begins) - min(begins),
            "bytes": max(c.get("bytes") or 0 for c in entries),
        }
        for i in ids.values():
            tl.calls[i]["coll"] = coll["id"]
            # how long this rank sat in the call before the last member arrived
            tl.calls[i]["arrival_wait_ns"] = coll["last_b"] - tl.calls[i]["b"]
        tl.collectives.append(coll)


def _rate(tl: Timeline) -> None:
    for c in tl.calls:
        c["algbw"] = c["busbw"] = None
        if c["e"] is None or not c.get("bytes") or c.get("error"):
            continue  # a failed call's time says nothing about bandwidth
        dur = (c["e"] - c["b"]) / 1e9
        if dur <= 0:
            continue
        if c["coll"] is not None:
            n = len(tl.collectives[c["coll"]]["members"])
        else:
            n = 2
        factor = busbw_factor(c["kind"], n)
        if factor is None:
            continue
        c["algbw"] = message_bytes(c["kind"], c["bytes"], n) / dur
        c["busbw"] = c["algbw"] * factor
    for coll in tl.collectives:
        ends = [tl.calls[i]["e"] for i in coll["calls"].values()]
        coll["span_ns"] = (max(ends) - coll["first_b"]) if None not in ends else None
        durs = [tl.calls[i]["e"] - tl.calls[i]["b"] for i in coll["calls"].values()
                if tl.calls[i]["e"] is not None]
        coll["max_dur_ns"] = max(durs) if durs else None
        rates = [tl.calls[i]["busbw"] for i in coll["calls"].values()
                 if tl.calls[i]["busbw"] is not None]
        # the slowest rank's rate: the collective is done only when it is
        coll["busbw"] = min(rates) if rates and len(rates) == len(coll["calls"]) else None


def _round_arrival(call: dict[str, Any], k: int) -> float:
    """When round ``k``'s messages had arrived on ``call``'s rank: the round's begin
    plus its wait, bounded by the next round's begin (or the call's end)."""
    rounds = call["rounds"]
    r = rounds[k]
    b = r["b"] if r["b"] is not None else call["b"]
    t = b + (r.get("wait_ns") or 0)
    nxt = rounds[k + 1]["b"] if k + 1 < len(rounds) and rounds[k + 1]["b"] is not None else call["e"]
    return min(t, nxt) if nxt is not None else t


def _messages(tl: Timeline) -> None:
    # A schedule's sends and receives between two ranks inside one collective
    # are matched in order (the k-th send from a to b is the k-th receive on b
    # from a): the channels between a pair are FIFO per call, whatever the round
    # numbers of the two sides.
    for coll in tl.collectives:
        ids = {int(r): i for r, i in coll["calls"].items()}
        recvs: dict[tuple[int, int], deque[tuple[int, int]]] = defaultdict(deque)
        for r, i in ids.items():
            for k, rnd in enumerate(tl.calls[i]["rounds"]):
                for peer, _nb in rnd.get("recv") or []:
                    recvs[(int(peer), r)].append((i, k))
        for r, i in ids.items():
            src = tl.calls[i]
            for k, rnd in enumerate(src["rounds"]):
                t0 = rnd["b"] if rnd["b"] is not None else src["b"]
                for peer, nb in rnd.get("send") or []:
                    q = recvs.get((r, int(peer)))
                    if not q:
                        continue  # the peer never got to that receive (or is missing)
                    j, kk = q.popleft()
                    dst = tl.calls[j]
                    t1 = _round_arrival(dst, kk)
                    tl.messages.append({
                        "src": r, "dst": int(peer), "t0": t0, "t1": max(t0, t1), "bytes": nb,
                        "coll": coll["id"], "round": rnd.get("round", k), "from": i, "to": j})
    # point-to-point: a send meets the first unmatched recv on its peer from
    # this rank (or from any source) with the same tag and group
    pending: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for c in tl.calls:
        if c["kind"] == "recv":
            pending[c["rank"]].append(c)
    for c in sorted((c for c in tl.calls if c["kind"] == "send"), key=lambda c: c["b"]):
        if c.get("peer") is None:
            continue
        for rc in pending.get(int(c["peer"]), []):
            if (rc.get("peer") in (None, c["rank"]) and rc.get("tag") == c.get("tag")
                    and rc.get("group") == c.get("group")):
                pending[int(c["peer"])].remove(rc)
                t1 = rc["e"] if rc["e"] is not None else rc["b"]
                tl.messages.append({
                    "src": c["rank"], "dst": rc["rank"], "t0": c["b"], "t1": max(c["b"], t1),
                    "bytes": c.get("bytes") or 0, "coll": None, "round": None,
                    "from": c["id"], "to": rc["id"]})
                break


def _rows(tl: Timeline) -> None:
    """Sub-lanes per rank: a call goes on the first row where the previous call has
    ended, so async calls that overlap a later call get a row of their own."""
    end_of = float(tl.duration_ns)
    for rank in tl.ranks:
        rows: list[float] = []
        for c in sorted(tl.calls_of(rank), key=lambda c: c["b"]):
            e = c["e"] if c["e"] is not None else end_of
            for k, last in enumerate(rows):
                if c["b"] >= last:
                    rows[k] = e
                    c["row"] = k
                    break
            else:
                c["row"] = len(rows)
                rows.append(e)


def rank_label(tl: Timeline, rank: int) -> str:
    """``rank 3 (host-a)``: how the pages name a rank."""
    for t in tl.traces:
        if t.rank == rank and t.header.get("host"):
            return f"rank {rank} ({t.header['host']})"
    return f"rank {rank}"


def call_label(c: dict[str, Any]) -> str:
    """``all_reduce #17 on WORLD`` (collectives) or ``send #3 to 2 (tag 7) on WORLD``."""
    if c["kind"] == "send":
        return f"send #{c['seq']} to {c.get('peer')} (tag {c.get('tag')}) on {c['group']}"
    if c["kind"] == "recv":
        src = "any source" if c.get("peer") is None else c.get("peer")
        return f"recv #{c['seq']} from {src} (tag {c.get('tag')}) on {c['group']}"
    return f"{c['kind']} #{c['seq']} on {c['group']}"


def expected_file(rank: int) -> str:
    """The file a rank writes (to name it when it is missing)."""
    return file_name(rank)


__all__ = ["Timeline", "busbw_factor", "call_label", "load", "message_bytes", "rank_label"]
