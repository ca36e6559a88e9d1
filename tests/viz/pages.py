"""Opening a meshcast page in the test browser, the same way for every browser test."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_page(browser: Any, page_file: Path, query: str = "", *, fake_clock: bool = True,
              **context: Any) -> tuple[Any, Any, list[str]]:
    """``(context, page, errors)`` for ``page_file`` at 1280x800, once it says it is ready.

    ``errors`` collects page errors, console errors and any request that leaves the
    file (the pages are self-contained: one would be a defect). With ``fake_clock``
    time moves only when a test says so (installed, it would follow real time).
    """
    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, **context)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("request", lambda r: errors.append("network: " + r.url)
            if not r.url.startswith("file:") else None)
    if fake_clock:
        page.clock.install(time=0)
        page.clock.pause_at(1000)
    page.goto(page_file.as_uri() + query)
    page.wait_for_selector("body[data-ready='1']")
    return ctx, page, errors
