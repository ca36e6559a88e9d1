"""The ``meshcast bench --plot x.html`` page in a real browser: it draws, offline.

Built from a made-up two-library sweep (a real tiny run is in tests/bench):
the charts are there with a line per library, the numbers' tables come from
the inline JSON, and a library's checkbox hides its lines. The page is opened
from ``file://`` and must not ask the network for anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from meshcast.bench import plot

pytestmark = pytest.mark.browser


def _records() -> list[dict]:
    out = []
    for op in ("all_reduce", "all_gather"):
        for lib, scale in (("meshcast", 1.0), ("gloo", 2.5)):
            for size in (8, 512, 32768, 1 << 20):
                t = scale * (5 + size / 800)
                out.append({"op": op, "library": lib, "placement": "in-place", "size": size,
                            "requested_size": size, "time_us": t, "busbw": size / t / 1e3,
                            "wrong": 0})
    return out


def test_plot_page_draws(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "plot.html"
    plot.write(str(path), _records(), ["all_reduce", "all_gather"], ["meshcast", "gloo"], 4,
               ["# meshcast bench -n 4 (made-up numbers for the test)"])
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("request", lambda r: errors.append("network: " + r.url)
            if not r.url.startswith("file:") else None)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("section.op").count() == 2
    assert page.locator("section.op svg").count() == 4
    # every chart has a visible line per library, and it has a size on screen
    for i in range(4):
        chart = page.locator("section.op svg").nth(i)
        box = chart.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 200
        assert chart.locator("polyline").count() == 2
    line = page.locator("section#op-all_reduce svg polyline[data-lib='gloo']").first
    assert line.is_visible()
    # the numbers' table, from the inline JSON: 4 sizes, both libraries
    page.locator("section#op-all_reduce details summary").click()
    table = page.locator("table.nums[data-op='all_reduce']")
    assert table.locator("tr").count() == 1 + 4
    assert table.locator("th").all_text_contents() == [
        "size (B)", "meshcast µs", "busbw GB/s", "gloo µs", "busbw GB/s"]
    assert table.locator("tr").nth(1).locator("td").first.text_content() == "8"
    # a library's checkbox hides its lines and points in every chart
    page.locator("#libs input[data-lib='gloo']").uncheck()
    assert not line.is_visible()
    assert page.locator("svg polyline[data-lib='meshcast']").first.is_visible()
    out = Path(os.environ.get("MESHCAST_VIZ_SHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    page.locator("#libs input[data-lib='gloo']").check()
    page.screenshot(path=str(out / "bench_plot.png"))
    ctx.close()
    assert errors == []
