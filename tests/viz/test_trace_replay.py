"""``meshcast viz trace`` without a browser: the hang analysis, the Perfetto file, escaping.

Most tests read a 4-rank trace written by hand in the recorder's format
(``conftest.write_trace``: its numbers are set there, and the expectations here
are derived from those numbers, not from the code under test); the last ones
record real runs with ``MESHCAST_TRACE`` (each with a timeout).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from tracegen import MS, REPO, write_trace

from meshcast.viz import hang, perfetto, trace_data, trace_page

# ------------------------------------------------------------------ hang analysis


def test_hang_names_the_rank_that_never_arrived(hang_trace: Path) -> None:
    tl = trace_data.load(str(hang_trace))
    rep = hang.analyze(tl)
    assert rep["hung"]
    assert rep["headline"].startswith(
        "rank 2 never entered all_reduce #17 on WORLD; ranks 0,1,3 wait in it since 12.3 s")
    assert "rank 0 gave up at 14.3 s (MeshcastTimeout)" in rep["headline"]
    miss = [f for f in rep["findings"] if f["type"] == "missing"]
    assert [(f["group"], f["seq"], f["ranks_missing"], f["ranks_in"]) for f in miss] == [
        ("WORLD", 17, [2], [0, 1, 3])]
    # where the absent rank was instead
    assert miss[0]["where"] == ["rank 2 is inside recv #1 from 1 (tag 99) on WORLD since 12.1 s"]
    # every call with end=null, oldest first
    assert [(u["rank"], u["label"]) for u in rep["unfinished"]] == [
        (2, "recv #1 from 1 (tag 99) on WORLD"), (1, "all_reduce #17 on WORLD"),
        (3, "all_reduce #17 on WORLD")]
    # the last calls side by side: the newest of each rank, and its state
    newest = {r: calls[-1] for r, calls in rep["last"].items()}
    assert {r: (c["label"], c["state"]) for r, c in newest.items()} == {
        "0": ("all_reduce #17 on WORLD", "error"), "1": ("all_reduce #17 on WORLD", "unfinished"),
        "2": ("recv #1 from 1 (tag 99) on WORLD", "unfinished"),
        "3": ("all_reduce #17 on WORLD", "unfinished")}
    assert all(len(calls) == hang.LAST for calls in rep["last"].values())


def test_the_first_disagreement_is_the_mismatch(hang_trace: Path) -> None:
    rep = hang.analyze(trace_data.load(str(hang_trace)))
    first = rep["findings"][0]
    assert (first["type"], first["group"], first["seq"]) == ("mismatch", "EVEN", 1)
    assert "rank 0 called all_reduce (float32, sum)" in first["text"]
    assert "rank 2 called broadcast (float32, root 2)" in first["text"]
    assert "ranks 0,2 failed with CollectiveMismatch" in first["text"]
    # the headline is the hang (where ranks still wait), not the mismatch they survived
    assert "never entered all_reduce #17" in rep["headline"]


def test_a_clean_run_is_not_a_hang(tmp_path: Path) -> None:
    tl = trace_data.load(str(write_trace(tmp_path / "ok", hang=False, mismatch=False)))
    rep = hang.analyze(tl)
    assert not rep["hung"] and rep["findings"] == [] and rep["unfinished"] == []
    assert rep["headline"].startswith("every rank finished")
    assert "HANG" not in hang.report_text(tl)


def test_a_missing_rank_file(tmp_path: Path) -> None:
    d = write_trace(tmp_path / "t", hang=False, mismatch=False)
    (d / "rank-00002.jsonl").unlink()
    tl = trace_data.load(str(d))
    assert tl.world_size == 4 and tl.missing_ranks == [2] and tl.ranks == [0, 1, 3]
    rep = hang.analyze(tl)
    assert rep["headline"].startswith("rank 2 never entered barrier #0 on WORLD")
    assert rep["findings"][0]["where"] == [
        "rank 2 left no trace (rank-00002.jsonl is missing or empty)"]


def test_a_call_written_twice_is_one_call(tmp_path: Path) -> None:
    """The recorder writes running calls with end=null when it flushes; if one finishes
    later it is written again: one call, with the later record's end."""
    d = write_trace(tmp_path / "t", hang=False, mismatch=False)
    path = d / "rank-00001.jsonl"
    lines = path.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if '"seq": 17' in line)
    early = json.loads(lines[k])
    early["end"] = None
    lines.insert(k, json.dumps(early))
    path.write_text("\n".join(lines) + "\n")
    tl = trace_data.load(str(d))
    calls = [c for c in tl.calls_of(1) if c["group"] == "WORLD" and c["seq"] == 17]
    assert len(calls) == 1 and calls[0]["e"] is not None
    assert not hang.analyze(tl)["hung"]


# ------------------------------------------------------------------ skew, busbw, messages


def _coll(tl: trace_data.Timeline, group: str, seq: int) -> dict[str, Any]:
    return next(c for c in tl.collectives if (c["group"], c["seq"]) == (group, seq))


def test_skew_and_busbw(hang_trace: Path) -> None:
    tl = trace_data.load(str(hang_trace))
    ring = _coll(tl, "WORLD", 2)  # rank r enters at 10 ms + 0.3 ms * r, ends at 18 ms + 20 µs * r
    assert ring["algorithm"] == "all_reduce/ring"
    assert ring["skew_ns"] == pytest.approx(0.9 * MS)
    for r in range(4):
        c = tl.calls[ring["calls"][str(r)]]
        dur = (8 * MS + r * 20_000 - r * 300_000) / 1e9
        assert c["algbw"] == pytest.approx((1 << 20) / dur)
        assert c["busbw"] == pytest.approx((1 << 20) / dur * 2 * 3 / 4)  # nccl-tests: 2(n-1)/n
        assert c["arrival_wait_ns"] == pytest.approx((3 - r) * 300_000)
        assert c["wait_ns"] == sum(MS // 3 + 10_000 * r for _ in range(6))
    slowest = (8 * MS) / 1e9  # rank 0: in it longest
    assert ring["busbw"] == pytest.approx((1 << 20) / slowest * 1.5)
    ag = _coll(tl, "WORLD", 3)  # 256 B each: the gathered message is 4 pieces, factor 3/4
    c0 = tl.calls[ag["calls"]["0"]]
    assert c0["async"] and c0["busbw"] == pytest.approx(256 * 4 / 0.006 * 0.75)
    assert tl.calls[_coll(tl, "WORLD", 0)["calls"]["0"]]["busbw"] is None  # a barrier moves nothing
    # the async all_gather overlaps rank 0's send, 1's recv: they get a row of their own
    overlapped = [c for c in tl.calls if c["kind"] in ("send", "recv") and c["b"] < 26 * MS]
    assert overlapped and all(c["row"] == 1 for c in overlapped)


def test_messages_follow_the_rounds(hang_trace: Path) -> None:
    tl = trace_data.load(str(hang_trace))
    per: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for m in tl.messages:
        assert m["t1"] >= m["t0"]
        key = ("p2p", 0) if m["coll"] is None else (tl.collectives[m["coll"]]["group"],
                                                    tl.collectives[m["coll"]]["seq"])
        per[key].append((m["src"], m["dst"]))
    # ring: six rounds, each rank sends to its right neighbour
    assert sorted(per[("WORLD", 2)]) == sorted([(r, (r + 1) % 4) for r in range(4)] * 6)
    assert sorted(per[("WORLD", 1)]) == [(0, 1), (0, 2), (2, 3)]  # the binomial tree
    assert sorted(per[("WORLD", 3)]) == sorted((r, r ^ (1 << i)) for r in range(4) for i in range(2))
    assert sorted(per[("p2p", 0)]) == [(0, 1), (3, 2)]  # 3 -> 2 met a recv from any source
    # the message arrives when the receiver's round stopped waiting
    m = next(m for m in tl.messages if m["coll"] == _coll(tl, "WORLD", 2)["id"]
             and m["src"] == 0 and m["round"] == 0)
    assert m["t0"] == 11 * MS and m["t1"] == 11 * MS + MS // 3 + 10_000


# ------------------------------------------------------------------ perfetto


def check_chrome_trace(data: dict[str, Any]) -> dict[str, Any]:
    """Structural checks of a Chrome trace event file as Perfetto reads it; returns counts."""
    assert isinstance(data["traceEvents"], list) and data["displayTimeUnit"] in ("ms", "ns")
    named = {e["pid"] for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    flows: dict[Any, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {"out": [], "in": []})
    for e in data["traceEvents"]:
        assert e["ph"] in ("X", "M", "i"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            continue
        assert e["pid"] in named, e
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
            if "bind_id" in e:
                flows[e["bind_id"]]["out" if e.get("flow_out") else "in"].append(e)
    # Perfetto shows slices on one thread only if they nest or are disjoint
    for key, spans in slices.items():
        stack: list[float] = []
        for b, e in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= b:
                stack.pop()
            assert not stack or e <= stack[-1] + 1e-6, f"overlapping slices on {key}"
            stack.append(e)
    for bind, f in flows.items():
        assert len(f["out"]) == 1 and len(f["in"]) == 1, bind
        assert f["out"][0]["ts"] <= f["in"][0]["ts"]
    return {"flows": len(flows), "pids": named}


def test_perfetto_structure(hang_trace: Path, tmp_path: Path) -> None:
    tl = trace_data.load(str(hang_trace))
    out = tmp_path / "t.json"
    perfetto.write(tl, str(out))
    data = json.loads(out.read_text())
    got = check_chrome_trace(data)
    assert got["pids"] == {0, 1, 2, 3}
    assert got["flows"] == len(tl.messages) == 6 * 4 + 3 + 8 + 2 + 2
    calls = [e for e in data["traceEvents"] if e["ph"] == "X" and e["cat"] in ("collective", "p2p")]
    assert sorted((e["pid"], e["args"]["group"], e["args"]["kind"], e["args"]["seq"]) for e in calls) \
        == sorted((c["rank"], c["group"], c["kind"], c["seq"]) for c in tl.calls)
    threads = {(e["pid"], e["args"]["name"]) for e in data["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(0, "WORLD"), (0, "EVEN"), (2, "EVEN"), (0, "WORLD · overlap 1")} <= threads
    ring = [e for e in calls if e["name"] == "all_reduce/ring" and e["pid"] == 1][0]
    assert ring["args"]["busbw"] > 0 and ring["args"]["op"] == "sum"
    assert len([e for e in data["traceEvents"] if e.get("cat") == "round" and e["pid"] == 1
                and ring["ts"] <= e["ts"] <= ring["ts"] + ring["dur"]]) == 6
    # a call that never finished runs to the end of the trace, flagged
    stuck = [e for e in calls if e["args"].get("unfinished")]
    assert sorted(e["pid"] for e in stuck) == [1, 2, 3]
    assert all(e["ts"] + e["dur"] == pytest.approx(tl.duration_ns / 1e3) for e in stuck)
    assert [e["pid"] for e in data["traceEvents"] if e["ph"] == "i"] == [0, 0, 2]  # errors
    assert "never entered all_reduce #17" in data["otherData"]["hang"]


# ------------------------------------------------------------------ the page and escaping

EVIL = '</script><img src=x onerror="alert(1)">&amp;\u2028'


def _embedded(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.S)
    assert m
    return json.loads(m.group(1))


def test_page_is_self_contained_and_escaped(tmp_path: Path) -> None:
    d = write_trace(tmp_path / "t", hosts=(EVIL, "node-a", "node-a", "node-b"),
                    world_name="W<b>" + EVIL)
    path = d / "rank-00000.jsonl"
    path.write_text(path.read_text().replace('"MeshcastTimeout: ', json.dumps(EVIL)[:-1] + ": "))
    tl = trace_data.load(str(d))
    page = trace_page.render(tl)
    assert "<img" not in page and "\u2028" not in page
    assert page.count("</script>") == 2  # the data's and the code's own ends
    assert not re.search(r"<(script|link)[^>]+src=", page)  # nothing loaded from elsewhere
    assert "http://" not in page.replace("http' + '://www.w3.org/2000/svg", "")
    data = _embedded(page)
    assert data["ranks"][0]["host"] == EVIL and data["ranks"][0]["label"] == f"rank 0 ({EVIL})"
    assert {g["name"] for g in data["groups"]} == {"W<b>" + EVIL, "EVEN"}
    assert any(EVIL in (c["error"] or "") for c in data["calls"])
    # the text report's copy in the page is HTML-escaped
    assert "&lt;/script&gt;&lt;img" in page


def test_page_data_has_every_call_message_and_rank(hang_trace: Path) -> None:
    tl = trace_data.load(str(hang_trace))
    data = _embedded(trace_page.render(tl))
    assert len(data["calls"]) == sum(len(t.calls) for t in tl.traces) == 80
    assert [r["rank"] for r in data["ranks"]] == [0, 1, 2, 3]
    assert len(data["messages"]) == len(tl.messages)
    assert data["hang"]["headline"] == hang.analyze(tl)["headline"]


# ------------------------------------------------------------------ the command


def _viz(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, "-m", "meshcast", "viz", "trace", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_writes_page_perfetto_and_hang_text(hang_trace: Path, tmp_path: Path) -> None:
    page, pf = tmp_path / "r.html", tmp_path / "r.json"
    proc = _viz(str(hang_trace), "-o", str(page), "--perfetto", str(pf))
    assert proc.returncode == 0, proc.stderr
    # the run never finished: the hang view is printed unasked
    assert "HANG / DESYNC: rank 2 never entered all_reduce #17 on WORLD" in proc.stdout
    assert "calls that never finished (end=null):" in proc.stdout
    assert page.stat().st_size > 20_000 and check_chrome_trace(json.loads(pf.read_text()))


def test_cli_on_a_clean_run_and_a_wrong_dir(tmp_path: Path) -> None:
    d = write_trace(tmp_path / "ok", hang=False, mismatch=False)
    quiet = _viz(str(d), "-o", str(tmp_path / "ok.html"))
    assert quiet.returncode == 0 and "last calls" not in quiet.stdout
    loud = _viz(str(d), "-o", "", "--hang")
    assert loud.returncode == 0 and loud.stdout.splitlines()[1].startswith("OK: every rank")
    bad = _viz(str(tmp_path))
    assert bad.returncode == 1 and "no meshcast trace files" in bad.stderr


# ------------------------------------------------------------------ recorded runs


@pytest.mark.timeout(180)
def test_a_recorded_tour(recorded_tour: Path, tmp_path: Path) -> None:
    page, pf = tmp_path / "tour.html", tmp_path / "tour.json"
    proc = _viz(str(recorded_tour), "-o", str(page), "--perfetto", str(pf))
    assert proc.returncode == 0, proc.stderr
    assert "HANG" not in proc.stdout
    tl = trace_data.load(str(recorded_tour))
    assert tl.ranks == [0, 1, 2, 3] and tl.missing_ranks == []
    per_rank = {r: len(tl.calls_of(r)) for r in tl.ranks}
    assert min(per_rank.values()) > 20  # the tour makes dozens of calls on every rank
    kinds = {c["kind"] for c in tl.calls}
    assert {"broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter",
            "reduce_scatter", "all_to_all", "barrier", "send", "recv"} <= kinds
    # every collective matched on all four ranks, with one kind
    assert all(c["ranks"] == [0, 1, 2, 3] and not c["mismatch"] for c in tl.collectives)
    data = json.loads(pf.read_text())
    check_chrome_trace(data)
    counted = defaultdict(int)
    for e in data["traceEvents"]:
        if e["ph"] == "X" and e["cat"] in ("collective", "p2p"):
            counted[e["pid"]] += 1
    assert counted == per_rank
    embedded = _embedded(page.read_text())
    assert len(embedded["calls"]) == sum(per_rank.values())
    # the tour's isend/irecv ring: each rank's send met its right neighbour's recv
    p2p = sorted((m["src"], m["dst"]) for m in tl.messages if m["coll"] is None)
    assert p2p == [(r, (r + 1) % 4) for r in range(4)]


@pytest.mark.timeout(180)
def test_a_recorded_hang(recorded_hang: Path) -> None:
    proc = _viz(str(recorded_hang), "-o", "")
    assert proc.returncode == 0, proc.stderr
    assert "rank 2 never entered all_reduce #4 on WORLD; ranks 0,1,3 " in proc.stdout
    tl = trace_data.load(str(recorded_hang))
    rep = hang.analyze(tl)
    (f,) = rep["findings"]
    assert (f["type"], f["seq"], f["ranks_missing"]) == ("missing", 4, [2])
    # rank 2 was stopped (SIGTERM) inside its recv: written with end=null
    # (ranks 1 and 3 may be stopped inside all_reduce #4 too, or aborted with rank 0)
    assert (2, "recv #1 from 1 (tag 99) on WORLD") in [(u["rank"], u["label"])
                                                     for u in rep["unfinished"]]
    assert {u["rank"] for u in rep["unfinished"]} <= {1, 2, 3}
    assert f["where"][0].startswith("rank 2 is inside recv #1 from 1 (tag 99) on WORLD since")
    assert rep["last"]["0"][-1]["state"] == "error"
    # the three ring all_reduces that completed: 2(p-1) rounds, each rank to its right
    done = [c for c in tl.collectives if c["seq"] in (1, 2, 3)]
    assert all(c["algorithm"] == "all_reduce/ring" for c in done)
    pairs = sorted((m["src"], m["dst"]) for m in tl.messages if m["coll"] in {c["id"] for c in done})
    assert pairs == sorted([(r, (r + 1) % 4) for r in range(4)] * 6 * 3)
