"""A real browser for the guide's tests: Debian's chromium driven by Playwright.

No browser is ever downloaded (no ``playwright install``): Playwright drives
the system's chromium through ``executable_path``. Without one the browser
tests skip, except when ``MESHCAST_REQUIRE_BROWSER=1`` (CI sets it), where a
missing browser or Playwright fails them, so a green run cannot hide a
missing install step.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tracegen import HANG_SCRIPT, REPO, record_run, write_trace

CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               "--hide-scrollbars"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: needs a real browser (chromium + playwright)")


def _unavailable(why: str) -> None:
    if os.environ.get("MESHCAST_REQUIRE_BROWSER") == "1":
        pytest.fail(f"MESHCAST_REQUIRE_BROWSER=1 but {why}", pytrace=False)
    pytest.skip(why)


def chromium_path() -> str | None:
    """The system chromium (``MESHCAST_CHROMIUM`` overrides), or None."""
    override = os.environ.get("MESHCAST_CHROMIUM")
    if override:
        return override if os.path.exists(override) else None
    for c in CANDIDATES:
        path = c if os.path.isabs(c) else shutil.which(c)
        if path and os.path.exists(path):
            return path
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install playwright; no browser download)")
    exe = chromium_path()
    if exe is None:
        _unavailable("no chromium found (apt-get install --no-install-recommends chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def guide_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from meshcast.viz import build_guide

    path = tmp_path_factory.mktemp("viz") / "guide.html"
    path.write_text(build_guide(), encoding="utf-8")
    return path


@pytest.fixture
def hang_trace(tmp_path: Path) -> Path:
    """A 4-rank trace where rank 2 never enters all_reduce #17 on WORLD (and EVEN #1 mismatches)."""
    return write_trace(tmp_path / "hang")


@pytest.fixture(scope="session")
def recorded_hang(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 4-rank run where rank 2 never enters all_reduce #4 on WORLD; the all_reduces
    run the ring schedule (forced: 4 KiB would take the one-shot path, which records no
    rounds), so the trace has rounds, hence arrows."""
    base = tmp_path_factory.mktemp("realhang")
    script = base / "hang.py"
    script.write_text(HANG_SCRIPT, encoding="utf-8")
    proc = record_run(base / "trace", script, env={"MESHCAST_ALGO": "all_reduce:ring"})
    assert proc.returncode != 0, proc.stdout + proc.stderr  # the launcher reports the failure
    return base / "trace"


@pytest.fixture(scope="session")
def recorded_tour(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``MESHCAST_TRACE=DIR meshcast run -n 4 examples/tour.py``, as a user would run it."""
    base = tmp_path_factory.mktemp("realtour")
    proc = record_run(base / "trace", REPO / "examples" / "tour.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return base / "trace"
