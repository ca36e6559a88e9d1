"""The hang view: where the ranks of a recorded run stopped agreeing, in words.

Like the NCCL flight recorder's analyzer (``torchfrtrace``), it walks the
collectives matched across ranks by ``(group, seq)`` in the order they began
and reports the first one where a member rank never arrived or where ranks
called different things (a mismatch), then every call that never finished,
and the last calls of every rank side by side. :func:`analyze` returns the
structure the page draws; :func:`report_text` the same for a terminal.
"""

from __future__ import annotations

from typing import Any

from .trace_data import Timeline, call_label, expected_file

LAST = 5  # calls per rank in the side-by-side table


def secs(rel_ns: float) -> str:
    """A relative time as seconds since the trace's start, to a useful precision."""
    s = rel_ns / 1e9
    if s >= 10:
        return f"{s:.1f} s"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s:.3f} s"


def _ranks(rs: list[int]) -> str:
    rs = sorted(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ",".join(str(r) for r in rs)


def _state(c: dict[str, Any]) -> str:
    if c.get("error"):
        return "error"
    return "unfinished" if c["e"] is None else "done"


def _error_type(error: str) -> str:
    """``CommTimeout`` of ``CommTimeout: all_reduce #4 ...``."""
    head = error.split(":", 1)[0].strip()
    return head if head and " " not in head else error


def _fingerprint(c: dict[str, Any]) -> str:
    bits = [c.get("dtype") or "?"]
    if c.get("op"):
        bits.append(str(c["op"]))
    if c.get("root") is not None:
        bits.append(f"root {c['root']}")
    return f"{c['kind']} ({', '.join(bits)})"


def _where(tl: Timeline, rank: int) -> str:
    """Where a rank that did not arrive was instead."""
    if rank in tl.missing_ranks:
        return f"rank {rank} left no trace ({expected_file(rank)} is missing or empty)"
    calls = tl.calls_of(rank)
    if not calls:
        return f"rank {rank} recorded no call at all"
    last = max(calls, key=lambda c: c["b"])
    if last["e"] is None:
        return f"rank {rank} is inside {call_label(last)} since {secs(last['b'])}"
    tail = f" with {last['error']}" if last.get("error") else ""
    return f"rank {rank}'s last call, {call_label(last)}, ended at {secs(last['e'])}{tail}"


def _missing_finding(tl: Timeline, coll: dict[str, Any]) -> dict[str, Any]:
    calls = [tl.calls[i] for i in coll["calls"].values()]
    name = f"{coll['kind']} #{coll['seq']} on {coll['group']}"
    later = set()
    for r in coll["missing"]:
        if any(c["group"] == coll["group"] and c["kind"] not in ("send", "recv")
               and c["seq"] > coll["seq"] for c in tl.calls_of(r)):
            later.add(r)
    never = [r for r in coll["missing"] if r not in later]
    parts = []
    if never:
        parts.append(f"{_ranks(never)} never entered {name}")
    if later:
        parts.append(f"{_ranks(sorted(later))} left no record of {name} but of later calls")
    stuck = [c for c in calls if c["e"] is None or c.get("error")]
    failed = [c for c in stuck if c.get("error")]
    if stuck:
        verb = "waited" if len(failed) == len(stuck) else "wait"
        parts.append(f"{_ranks([c['rank'] for c in stuck])} {verb} in it since "
                     f"{secs(min(c['b'] for c in stuck))}")
    if failed:
        # the error's type per rank: the full texts are in the unfinished list and
        # the page's details, and they repeat one another across ranks
        by_type: dict[str, list[int]] = {}
        for c in failed:
            by_type.setdefault(_error_type(c["error"]), []).append(c["rank"])
        at = max(c["e"] if c["e"] is not None else c["b"] for c in failed)
        who = "; ".join(f"{_ranks(rs)}: {t}" if len(failed) > 1 else t
                        for t, rs in by_type.items())
        by = "by" if len(failed) > 1 else "at"
        parts.append(f"{_ranks([c['rank'] for c in failed])} gave up {by} {secs(at)} ({who})")
    done = [c for c in calls if c["e"] is not None and not c.get("error")]
    if done:
        parts.append(f"{_ranks([c['rank'] for c in done])} finished it")
    return {"type": "missing", "group": coll["group"], "seq": coll["seq"], "kind": coll["kind"],
            "coll": coll["id"], "ranks_in": coll["ranks"], "ranks_missing": coll["missing"],
            "since_ns": min(c["b"] for c in calls), "text": "; ".join(parts),
            "where": [_where(tl, r) for r in coll["missing"]]}


def _mismatch_finding(tl: Timeline, coll: dict[str, Any]) -> dict[str, Any]:
    calls = [tl.calls[i] for i in coll["calls"].values()]
    by_fp: dict[str, list[int]] = {}
    for c in sorted(calls, key=lambda c: c["rank"]):
        by_fp.setdefault(_fingerprint(c), []).append(c["rank"])
    said = ", ".join(f"{_ranks(rs)} called {fp}" for fp, rs in by_fp.items())
    text = f"ranks disagree on call #{coll['seq']} of {coll['group']} (mismatch): {said}"
    if coll["missing"]:
        text += f"; {_ranks(coll['missing'])} never entered it"
    # the error's type only: its text repeats what the sentence already says
    errs = sorted({_error_type(c["error"]) for c in calls if c.get("error")})
    if errs:
        text += f"; {_ranks([c['rank'] for c in calls if c.get('error')])} failed with " + \
            " / ".join(errs)
    return {"type": "mismatch", "group": coll["group"], "seq": coll["seq"], "kind": coll["kind"],
            "coll": coll["id"], "ranks_in": coll["ranks"], "ranks_missing": coll["missing"],
            "since_ns": coll["first_b"], "text": text,
            "where": [_where(tl, r) for r in coll["missing"]]}


def analyze(tl: Timeline) -> dict[str, Any]:
    """The hang view's content.

    Returns:
        ``{"hung": bool, "headline": str, "findings": [...], "unfinished": [...],
        "last": {rank: [...]}}``: ``findings`` are the collectives where ranks
        disagreed (``type`` ``mismatch``) or a member never arrived
        (``missing``), in the order they began, each with a sentence
        (``text``) and where the absent ranks were (``where``);
        ``unfinished`` the calls with no end; ``last`` the last
        :data:`LAST` calls of every rank. ``hung`` is true when anything is
        amiss (a finding, an unfinished call or a missing rank file).
    """
    findings = []
    for coll in tl.collectives:
        if coll["mismatch"]:
            findings.append(_mismatch_finding(tl, coll))
        elif coll["missing"]:
            findings.append(_missing_finding(tl, coll))
    unfinished = [{"call": c["id"], "rank": c["rank"], "label": call_label(c),
                   "since_ns": c["b"], "error": c.get("error")}
                  for c in sorted(tl.calls, key=lambda c: (c["b"], c["rank"])) if c["e"] is None]
    last: dict[str, list[dict[str, Any]]] = {}
    for r in list(tl.ranks) + tl.missing_ranks:
        tail = sorted(tl.calls_of(r), key=lambda c: c["b"])[-LAST:]
        last[str(r)] = [{"call": c["id"], "label": call_label(c), "kind": c["kind"],
                         "algorithm": c.get("algorithm"),
                         "state": _state(c), "b": c["b"], "e": c["e"], "error": c.get("error")}
                        for c in tail]
    # a run that hung is read for where it hangs: the headline is the first
    # finding some rank still waits in; an earlier disagreement that failed
    # cleanly (a caught mismatch) stays first in ``findings``
    waiting = {u["call"] for u in unfinished}
    stuck = [f for f in findings
             if any(i in waiting for i in tl.collectives[f["coll"]]["calls"].values())]
    if stuck:
        headline = stuck[0]["text"]
    elif findings:
        headline = findings[0]["text"]
    elif unfinished:
        u = unfinished[0]
        headline = f"rank {u['rank']} never finished {u['label']} (since {secs(u['since_ns'])})"
    elif tl.missing_ranks:
        headline = _where(tl, tl.missing_ranks[0])
    else:
        headline = "every rank finished every call it began; no collective is missing a rank"
    return {"hung": bool(findings or unfinished or tl.missing_ranks), "headline": headline,
            "findings": findings, "unfinished": unfinished, "last": last,
            "missing_files": tl.missing_ranks}


def report_text(tl: Timeline, report: dict[str, Any] | None = None) -> str:
    """:func:`analyze` as plain text: the headline, the other findings, the unfinished
    calls and the last calls of every rank in columns."""
    rep = report or analyze(tl)
    out = [f"meshcast trace {tl.directory}: {len(tl.traces)} of {tl.world_size} ranks, "
           f"{len(tl.calls)} calls over {secs(tl.duration_ns)}",
           ("HANG / DESYNC: " if rep["hung"] else "OK: ") + rep["headline"]]
    if rep["findings"]:
        out.append("where ranks disagreed or one never arrived, first one first:")
        for k, f in enumerate(rep["findings"], 1):
            out.append(f"  {k}. {f['text']}")
            out += [f"     {w}" for w in f["where"]]
    if rep["unfinished"]:
        out.append("calls that never finished (end=null):")
        for u in rep["unfinished"]:
            err = f" ({u['error']})" if u["error"] else ""
            out.append(f"  rank {u['rank']}: {u['label']} since {secs(u['since_ns'])}{err}")
    out.append("last calls of every rank (oldest first):")
    cols = []
    for r, calls in rep["last"].items():
        col = [f"rank {r}"] + [f"{c['label']} [{c['state']}]" for c in calls]
        if int(r) in tl.missing_ranks:
            col.append("(no trace file)")
        cols.append(col)
    width = [max(len(s) for s in col) for col in cols]
    for i in range(max(len(col) for col in cols)):
        cells = [(col[i] if i < len(col) else "").ljust(w) for col, w in zip(cols, width)]
        out.append("  " + " | ".join(cells).rstrip())
    return "\n".join(out) + "\n"


__all__ = ["analyze", "report_text", "secs"]
