"""Assemble the guide: one self-contained HTML file (inline CSS, JS and data; no network).

Why inline everything: the page must open from ``file://`` (where browsers
block ES modules and ``fetch``), be mailable and be a CI artifact. The
template, the CSS and the JS are package data (``static/``); Python fills
the template in one pass, so no asset can inject a placeholder into another.

Escaping: text goes into HTML through :func:`html.escape`; the data goes
into an inline ``<script type="application/json">`` through :func:`json_for_script`,
which escapes ``<``, ``>`` and ``&`` (so no ``</script>`` can close the
element early) and U+2028/U+2029. The JS puts data into the page only
through ``textContent``/``setAttribute``.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any

DEFAULT_TITLE = "meshcast: a guide to collective communication"


def _asset(name: str) -> str:
    return resources.files("meshcast.viz").joinpath("static", name).read_text("utf-8")


def json_for_script(data: Any) -> str:
    """``data`` as JSON that is safe inside an HTML ``<script>`` element."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render(data: dict[str, Any], *, title: str = DEFAULT_TITLE) -> str:
    """The guide's HTML for already extracted ``data`` (see :func:`schedules.guide_data`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("meshcast")
    except PackageNotFoundError:
        release = "unknown"
    js, css = _asset("guide.js"), _asset("guide.css")
    # the inline elements must not be closable from inside
    assert "</script" not in js.lower() and "</style" not in css.lower()
    fills = {
        "TITLE": html.escape(title),
        "VERSION": html.escape(release),
        "CSS": css,
        "JS": js,
        "DATA": json_for_script(data),
    }
    return re.sub(r"@@([A-Z]+)@@", lambda m: fills[m.group(1)], _asset("guide.html"))


def build_guide(*, title: str = DEFAULT_TITLE) -> str:
    """Run every registered schedule for every rank count and size, and return the page."""
    from . import schedules  # imported here: `meshcast --help` need not load the algorithms

    return render(schedules.guide_data(), title=title)


__all__ = ["DEFAULT_TITLE", "build_guide", "json_for_script", "render"]
