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


def release() -> str:
    """meshcast's installed version (``unknown`` when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("meshcast")
    except PackageNotFoundError:
        return "unknown"


def self_contained(template: str, *, title: str, css: str, js: str, data: Any,
                   **fills: str) -> str:
    """Fill ``template`` (``@@NAME@@`` placeholders) into one self-contained page.

    The one assembly step of every meshcast page (the guide, the replay, the
    benchmark plots), so they all escape alike: ``title`` goes through
    :func:`html.escape`, ``data`` through :func:`json_for_script`, and ``css``
    and ``js`` are inlined after checking that they cannot close their element.
    ``fills`` are further placeholders, already HTML (the caller escapes them).
    The template is filled in one pass, so no asset can inject a placeholder.
    """
    if "</script" in js.lower() or "</style" in css.lower():
        raise ValueError("an inline asset would close its own element")
    # U+2028/9 as character references: harmless in HTML text, but a raw one is a
    # line break to some tools that copy the page
    safe_title = html.escape(title).replace("\u2028", "&#8232;").replace("\u2029", "&#8233;")
    values = {"TITLE": safe_title, "VERSION": html.escape(release()), "CSS": css, "JS": js,
              "DATA": json_for_script(data), **fills}
    return re.sub(r"@@([A-Z]+)@@", lambda m: values[m.group(1)], template)


def render(data: dict[str, Any], *, title: str = DEFAULT_TITLE) -> str:
    """The guide's HTML for already extracted ``data`` (see :func:`schedules.guide_data`)."""
    return self_contained(_asset("guide.html"), title=title, css=_asset("guide.css"),
                          js=_asset("guide.js"), data=data)


def build_guide(*, title: str = DEFAULT_TITLE) -> str:
    """Run every registered schedule for every rank count and size, and return the page."""
    from . import schedules  # imported here: `meshcast --help` need not load the algorithms

    return render(schedules.guide_data(), title=title)


__all__ = ["DEFAULT_TITLE", "build_guide", "json_for_script", "release", "render",
           "self_contained"]
