"""The replay page of a recorded run: one self-contained HTML file (``meshcast viz trace DIR``).

Built like the guide (:mod:`.page`): a template, CSS and JS from ``static/``
(``replay.*``) and the data as inline JSON through
:func:`.page.json_for_script`, so the page opens from ``file://`` with no
network. Everything the trace controls (group names, hostnames, error
texts, the directory's name) reaches the page only as JSON data, which the
JS puts into the DOM with ``textContent``/``setAttribute``, or through
:func:`html.escape` (the title and the hang report's text copy).
"""

from __future__ import annotations

import html
from typing import Any

from . import hang
from .page import _asset, self_contained
from .trace_data import Timeline, busbw_factor, call_label, rank_label

DEFAULT_TITLE = "meshcast replay"

_CALL_FIELDS = ("id", "rank", "group", "seq", "kind", "dtype", "count", "bytes", "root", "peer",
                "tag", "op", "algorithm", "family", "lane", "compiled", "async", "error", "b",
                "e", "coll", "row", "wait_ns", "arrival_wait_ns", "algbw", "busbw")


def page_data(tl: Timeline, report: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the replay's JS draws: ranks, groups, calls (with rounds), collectives,
    messages and the hang report, times in ns since the trace's start."""
    report = report or hang.analyze(tl)
    calls = []
    for c in tl.calls:
        d = {k: c.get(k) for k in _CALL_FIELDS}
        d["label"] = call_label(c)
        d["rounds"] = [{"round": r.get("round", k), "b": r["b"], "wait_ns": r.get("wait_ns"),
                        "send": r.get("send") or [], "recv": r.get("recv") or []}
                       for k, r in enumerate(c["rounds"])]
        n = (len(tl.collectives[c["coll"]]["members"]) if c["coll"] is not None else 2)
        d["factor"] = busbw_factor(c["kind"], n)
        calls.append(d)
    ranks = []
    for r in range(tl.world_size):
        t = next((t for t in tl.traces if t.rank == r), None)
        rows = max([c["row"] for c in tl.calls if c["rank"] == r] + [0]) + 1
        ranks.append({"rank": r, "label": rank_label(tl, r),
                      "host": t.header.get("host") if t else None,
                      "pid": t.header.get("pid") if t else None,
                      "missing": t is None, "rows": rows})
    return {
        "directory": tl.directory, "start_ns": tl.start_ns, "duration_ns": tl.duration_ns,
        "world_size": tl.world_size, "ranks": ranks,
        "groups": [{"name": n, "ranks": g.get("ranks"), "engine": g.get("engine")}
                   for n, g in tl.groups.items()],
        "calls": calls, "collectives": tl.collectives, "messages": tl.messages,
        "hang": report,
    }


def render(tl: Timeline, *, title: str | None = None) -> str:
    """The replay's HTML for the timeline ``tl``."""
    report = hang.analyze(tl)
    return self_contained(
        _asset("replay.html"), title=title or f"{DEFAULT_TITLE}: {tl.directory}",
        css=_asset("replay.css"), js=_asset("replay.js"), data=page_data(tl, report),
        # as character references: harmless in HTML text, but a raw U+2028 is a
        # line break to some tools that copy the page
        REPORT=html.escape(hang.report_text(tl, report))
        .replace("\u2028", "&#8232;").replace("\u2029", "&#8233;"))


__all__ = ["DEFAULT_TITLE", "page_data", "render"]
