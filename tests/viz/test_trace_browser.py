"""The replay page in a real browser: lanes, spans, arrows, details, scrubber, hang view.

Same pattern as the guide's browser tests: Debian's chromium through Playwright
(``conftest.browser``; skipped without one unless ``MESHCAST_REQUIRE_BROWSER=1``),
pages opened from ``file://`` and Playwright's fake clock for Play. Two traces:
a real 4-rank run that hangs (``conftest.recorded_hang``: ring all_reduces,
then rank 2 waits in a recv while the others enter all_reduce #4) and the
hand-written one (``tracegen.write_trace``), whose numbers are known exactly.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pages import open_page
from tracegen import MS

from meshcast.viz import hang, trace_data, trace_page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

PLAY_MS = 8000  # replay.js: Play crosses the view in 8 s


def _write_page(trace: Path, out: Path) -> tuple[Path, trace_data.Timeline]:
    tl = trace_data.load(str(trace))
    out.write_text(trace_page.render(tl), encoding="utf-8")
    return out, tl


def _open(browser: Any, page_file: Path, query: str = "", **context: Any
          ) -> tuple[Any, Any, list[str]]:
    return open_page(browser, page_file, query, **context)


@pytest.fixture(scope="module")
def real(recorded_hang: Path, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[Path, trace_data.Timeline]:
    return _write_page(recorded_hang, tmp_path_factory.mktemp("replay") / "real.html")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, trace_data.Timeline]:
    from tracegen import write_trace

    base = tmp_path_factory.mktemp("replay_made")
    return _write_page(write_trace(base / "trace"), base / "made.html")


@pytest.fixture
def opened(browser: Any) -> Any:
    """Open pages; after the test, close them and check that none logged an error."""
    pages: list[tuple[Any, list[str]]] = []

    def open_(page_file: Path, query: str = "", **context: Any) -> Any:
        ctx, page, errors = _open(browser, page_file, query, **context)
        pages.append((ctx, errors))
        return page

    yield open_
    for ctx, errors in pages:
        ctx.close()
        assert errors == []


def _spans(page: Any) -> list[dict[str, str]]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('rect.span'))
        .map(r => ({...r.dataset, cls: r.getAttribute('class')}))""")


def _arrows(page: Any) -> list[tuple[int, int, str]]:
    raw = page.evaluate("""() => Array.from(document.querySelectorAll('path.msg'))
        .map(p => [+p.dataset.src, +p.dataset.dst, p.dataset.coll])""")
    return [(a, b, c) for a, b, c in raw]


def test_a_recorded_run_lanes_spans_and_arrows(opened: Any, real: tuple[Path, Any]) -> None:
    page_file, tl = real
    page = opened(page_file)
    lanes = page.locator("svg#timeline g.lane")
    assert lanes.count() == 4
    host = tl.traces[0].header["host"]
    assert [lanes.nth(r).locator("text.lane-label").text_content() for r in range(4)] == [
        f"rank {r} ({host})" for r in range(4)]
    spans = _spans(page)  # the fit view draws every call
    assert Counter(int(s["rank"]) for s in spans) == Counter(c["rank"] for c in tl.calls)
    assert sorted(int(s["call"]) for s in spans) == list(range(len(tl.calls)))
    # the hang: rank 0 timed out in all_reduce #4; ranks 1 and 3 were either aborted
    # with it (an error) or stopped by the launcher inside it (no end), as the race goes;
    # rank 2 sat in its recv until the launcher stopped it
    state = {(int(s["rank"]), s["kind"], tl.calls[int(s["call"])]["seq"]):
             {"open", "err"} & set(s["cls"].split()) for s in spans}
    assert state[(0, "all_reduce", 4)] == {"err"}
    assert state[(1, "all_reduce", 4)] in ({"err"}, {"open"})
    assert state[(3, "all_reduce", 4)] in ({"err"}, {"open"})
    assert state[(2, "recv", 1)] == {"open"}
    assert all(not v for k, v in state.items() if k[2] < 4 and k[1] == "all_reduce")
    # spans are labelled with their algorithm (wide enough ones: zoom to one all_reduce)
    ring = next(c for c in tl.collectives if c["seq"] == 2)
    page.locator(f"#colls tr[data-coll='{ring['id']}']").click()
    page.locator("button.zoom-sel").click()  # (the row zooms only if the call is thin)
    labels = page.locator("svg#timeline text.span-label").all_text_contents()
    assert labels.count("ring") >= 4
    # one arrow per message of the ring's rounds: rank r to rank r+1
    arrows = [a for a in _arrows(page) if a[2] == str(ring["id"])]
    assert sorted((a, b) for a, b, _ in arrows) == sorted([(r, (r + 1) % 4) for r in range(4)] * 6)
    hot = page.locator("path.msg.hot").count()
    assert hot == len(arrows)  # the selected collective's arrows stand out


def test_the_hang_view_of_a_recorded_run(opened: Any, real: tuple[Path, Any]) -> None:
    page_file, tl = real
    page = opened(page_file)
    rep = hang.analyze(tl)
    banner = page.locator("#banner").text_content()
    assert "rank 2 never entered all_reduce #4 on WORLD; ranks 0,1,3 wait" in banner
    assert "rank 2 is inside recv #1 from 1 (tag 99) on WORLD since" in banner
    sec = page.locator("#hang")
    assert sec.get_attribute("data-hung") == "1"
    assert sec.locator("li.finding").count() == len(rep["findings"]) == 1
    assert sec.locator("li.finding").get_attribute("data-seq") == "4"
    assert sec.locator("ul.unfinished li").all_text_contents()[0].startswith(
        "rank 2: recv #1 from 1 (tag 99) on WORLD since")
    # the last calls side by side: a column per rank, the newest call on the last row
    table = sec.locator("table.last")
    assert table.locator("th").all_text_contents() == [f"rank {r} ({tl.traces[r].header['host']})"
                                                       for r in range(4)]
    last_row = table.locator("tr").last.locator("td")
    states = [last_row.nth(r).get_attribute("class") for r in range(4)]
    assert states[0] == "st-error" and states[2] == "st-unfinished"
    assert {states[1], states[3]} <= {"st-error", "st-unfinished"}  # aborted or stopped
    assert "recv #1 from 1 (tag 99) on WORLD" in last_row.nth(2).text_content()
    # a click on it selects the call: details say it never finished
    last_row.nth(2).locator("button").click()
    details = page.locator("#details")
    assert details.locator("h2").text_content() == "recv #1 from 1 (tag 99) on WORLD — rank 2"
    assert details.locator("dd[data-field='end']").text_content() == "never finished"
    assert page.locator("rect.span.sel").get_attribute("data-rank") == "2"


def test_details_of_a_collective(opened: Any, made: tuple[Path, Any]) -> None:
    page_file, tl = made
    ring = next(c for c in tl.collectives if (c["group"], c["seq"]) == ("WORLD", 2))
    call = ring["calls"]["1"]
    page = opened(page_file, "?view=0.0095,0.0275")
    page.locator(f"rect.span[data-call='{call}']").click()
    details = page.locator("#details")
    assert details.get_attribute("data-call") == str(call)
    assert details.locator("h2").text_content() == "all_reduce #2 on WORLD — rank 1"
    field = lambda k: details.locator(f"dd[data-field='{k}']").text_content()  # noqa: E731
    assert field("group") == "WORLD (ranks 0,1,2,3)"
    assert field("algorithm") == "all_reduce/ring (schedule)"
    assert field("bytes") == "1.00 MiB (262144 × float32)"
    assert field("duration") == "7.720 ms"  # 18.02 ms - 10.3 ms
    assert field("wait time") .startswith("2.060 ms")  # 6 rounds of 333.3 µs + 10 µs
    assert field("arrival wait").startswith("600.0 µs")  # rank 3 came 0.6 ms later
    busbw = (1 << 20) / 7.72e-3 * 1.5
    assert field("busbw").startswith(f"{busbw / 1e6:.2f} MB/s (algbw × 1.500")
    assert details.locator("h3").first.text_content() == "Across ranks: skew 900.0 µs"
    assert details.locator("table.per-rank tr[data-rank]").count() == 4
    assert details.locator("table.rounds tr").count() == 1 + 6
    # its peers on the other ranks and its 24 arrows are highlighted
    assert page.locator("rect.span.peer").count() == 3
    assert page.locator("path.msg.hot").count() == 24


def test_keyboard_moves_the_selection(opened: Any, made: tuple[Path, Any]) -> None:
    page_file, tl = made
    first = tl.calls_of(1)[0]
    page = opened(page_file, f"?select={first['id']}")
    page.locator("svg#timeline").focus()
    page.keyboard.press("ArrowRight")
    second = sorted(tl.calls_of(1), key=lambda c: c["b"])[1]
    assert page.locator("#details").get_attribute("data-call") == str(second["id"])
    page.keyboard.press("ArrowDown")
    now = tl.calls[int(page.locator("#details").get_attribute("data-call"))]
    assert now["rank"] == 2 and (now["group"], now["seq"]) == (second["group"], second["seq"])
    page.keyboard.press("0")  # fit
    assert page.locator("svg#timeline").get_attribute("data-view") == f"0,{tl.duration_ns}"
    page.keyboard.press("+")
    a, b = map(int, page.locator("svg#timeline").get_attribute("data-view").split(","))
    assert b - a == pytest.approx(tl.duration_ns / 2, rel=1e-6)
    # the collectives table: Enter on a row selects the rank that arrived last
    row = page.locator("#colls tr[data-coll]").nth(2)
    row.focus()
    page.keyboard.press("Enter")
    assert page.locator("#details h2").text_content() == "all_reduce #2 on WORLD — rank 3"


def test_scrubber_and_play(opened: Any, made: tuple[Path, Any]) -> None:
    page_file, tl = made
    page = opened(page_file, "?view=0.0095,0.0275&t=0.0095")
    svg, cursor = page.locator("svg#timeline"), page.locator("line#cursor")
    n_ring_msgs = 24
    # at the view's start nothing in it has begun: every span of the view is ahead
    assert page.locator("rect.span.future").count() == page.locator("rect.span").count()
    # scrub to 11.2 ms: the ring's round-0 messages (posted at 11 ms) are in flight
    value = round((11.2 - 9.5) / (27.5 - 9.5) * 1000)
    page.locator("input.scrub").evaluate(
        "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }", value)
    t = int(cursor.get_attribute("data-t"))
    assert t == pytest.approx(9.5 * MS + value / 1000 * 18 * MS, abs=1)
    flying = page.locator("path.msg.flight").count()
    assert flying == 4  # one per rank: round 0 sent at 11 ms, arrives 0.34 ms later
    assert page.locator("path.msg.future").count() == len(
        [m for m in tl.messages if 9.5 * MS <= m["t0"] <= 27.5 * MS and m["t0"] > t]) > n_ring_msgs - 8
    assert "rank 0: all_reduce #2 on WORLD" in page.locator("#now").text_content()
    # Play moves the cursor with the (fake) clock and stops at the view's end
    page.keyboard.press("Home")  # no effect: the timeline is not focused
    page.locator("button.play").click()
    assert svg.get_attribute("data-state") == "playing"
    page.clock.run_for(PLAY_MS // 4)
    t2 = int(cursor.get_attribute("data-t"))
    assert t < t2 < 27.5 * MS
    page.locator("button.play").click()
    assert svg.get_attribute("data-state") == "paused"
    page.clock.run_for(PLAY_MS)
    assert int(cursor.get_attribute("data-t")) == t2
    page.locator("button.play").click()
    page.clock.run_for(PLAY_MS * 2)
    assert svg.get_attribute("data-state") == "paused"
    assert int(cursor.get_attribute("data-t")) >= 27.5 * MS - 1
    assert page.locator("path.msg.future").count() == 0


def test_reduced_motion_plays_in_still_frames(opened: Any, made: tuple[Path, Any]) -> None:
    page_file, _ = made
    page = opened(page_file, "?view=0.0095,0.0275&t=0.0095", reduced_motion="reduce")
    page.locator("button.play").click()
    page.clock.run_for(499)
    assert page.locator("line#cursor").get_attribute("data-t") == str(9_500_000)
    page.clock.run_for(2)
    assert page.locator("line#cursor").get_attribute("data-t") == str(9_500_000 + 1_800_000)


def test_screenshot_of_the_replay(opened: Any, recorded_hang: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay of the recorded hang, zoomed on the last ring all_reduce and the one rank 2
    never entered (MESHCAST_VIZ_SHOTS=docs/viz keeps it as replay.png)."""
    out = Path(os.environ.get("MESHCAST_VIZ_SHOTS") or tmp_path).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # named as in the README's command (MESHCAST_TRACE=t ...; meshcast viz trace t)
    shutil.copytree(recorded_hang, tmp_path / "t")
    monkeypatch.chdir(tmp_path)
    page_file, tl = _write_page(Path("t"), tmp_path / "replay.html")
    third = next(c for c in tl.collectives if c["seq"] == 3)
    stuck = next(c for c in tl.collectives if c["seq"] == 4)
    a = third["first_b"] - 50_000
    b = stuck["first_b"] + (stuck["first_b"] - a) * 0.7
    page = opened(page_file.resolve(), f"?view={a / 1e9},{b / 1e9}&select={stuck['calls']['1']}")
    page.screenshot(path=str(out / "replay.png"))
    assert (out / "replay.png").stat().st_size > 30_000
