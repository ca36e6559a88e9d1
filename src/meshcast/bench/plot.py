"""Plots of a sweep: busbw and time against size, one line per library, one pair per collective.

``--plot FILE.png`` draws with matplotlib, the optional extra
``pip install 'meshcast[plot]'``; without it the command refuses the flag
before it runs anything (:func:`problem`), never after a long sweep.
``--plot FILE.html`` is a self-contained page assembled by the viz pages'
machinery (:func:`meshcast.viz.page.self_contained`): the charts as inline
SVG drawn here, the numbers as inline JSON (a table per collective and a
checkbox per library come from a small inline script), nothing fetched from
anywhere. ``.svg`` writes the charts as one SVG file and needs nothing
either. The results page (``--report``) embeds the per-collective SVGs and
writes the same HTML page.
"""

from __future__ import annotations

import html
import importlib.util
import math
import os
from collections.abc import Sequence
from typing import Any

from .report import compare_placement, human_bytes

Record = dict[str, Any]
Series = dict[str, list[tuple[int, float, float]]]  # library -> [(size, busbw, time_us)]

COLORS = {"meshcast": "#1f6fb4", "meshcast-symmetric": "#17becf", "gloo": "#e8710a",
          "mpi": "#2a9d3c"}
_EXTRA = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


#: The file types ``--plot`` writes, and what each needs.
KINDS = {".png": "matplotlib", ".html": "", ".htm": "", ".svg": ""}
EXTRA = "pip install 'meshcast[plot]'"


class PlotUnavailable(RuntimeError):
    """The plot asked for cannot be written here (its message says what to do instead)."""


def _color(library: str, i: int) -> str:
    return COLORS.get(library, _EXTRA[i % len(_EXTRA)])


def series(records: Sequence[Record], op: str, libraries: Sequence[str]) -> tuple[str, Series]:
    """The placement used for ``op`` and each library's (size, busbw, time) points."""
    place = compare_placement(records, op, libraries[0] if libraries else "meshcast")
    out: Series = {}
    for lib in libraries:
        pts = [(r["size"], r["busbw"], r["time_us"]) for r in records
               if r["op"] == op and r["library"] == lib and r["placement"] == place
               and r["time_us"] is not None and r["size"] > 0]
        if pts:
            out[lib] = pts
    return place, out


# ----------------------------------------------------------------------------- SVG


def _nice_step(span: float) -> float:
    raw = span / 5 if span > 0 else 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def svg_chart(title: str, data: dict[str, list[tuple[int, float]]], ylabel: str, *,
              logy: bool, width: int = 460, height: int = 300) -> str:
    """One line chart: x = size in bytes (log2), y = ``ylabel`` (log10 if ``logy``)."""
    left, right, top, bottom = 62, 26, 30, 46
    pw, ph = width - left - right, height - top - bottom
    pts = [p for v in data.values() for p in v if p[0] > 0 and (p[1] > 0 or not logy)]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="13">'
             f'{html.escape(title)}</text>']
    if not pts:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>')
        return "\n".join(parts + ["</svg>"])
    xs = [math.log2(p[0]) for p in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if logy:
        ys = [math.log10(p[1]) for p in pts]
        y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
        if y1 == y0:
            y1 += 1
    else:
        y0, y1 = 0.0, max(p[1] for p in pts) * 1.08 or 1.0

    def sx(x: float) -> float:
        return left + (math.log2(x) - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        v = math.log10(y) if logy else y
        return top + ph - (v - y0) / (y1 - y0) * ph

    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
                 f'stroke="#999"/>')
    # x ticks: every power of two, labelled so that at most ~8 labels fit
    span = int(x1) - int(math.ceil(x0)) + 1
    every = max(1, math.ceil(span / 8))
    for e in range(int(math.ceil(x0)), int(x1) + 1):
        x = left + (e - x0) / (x1 - x0) * pw
        parts.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" '
                     f'stroke="#999"/>')
        if (e - int(math.ceil(x0))) % every == 0:
            label = human_bytes(1 << e).replace(" ", "")
            parts.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">'
                         f'{label}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">'
                 f'message size</text>')
    # y ticks
    if logy:
        ticks = [10.0 ** e for e in range(int(y0), int(y1) + 1)]
    else:
        step = _nice_step(y1)
        ticks = [i * step for i in range(int(y1 / step) + 1)]
    for t in ticks:
        y = sy(t)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" '
                     f'stroke="#eee"/>')
        label = f"{t:g}"
        parts.append(f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    parts.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {top + ph / 2})">{html.escape(ylabel)}</text>')
    # lines
    for i, (lib, points) in enumerate(data.items()):
        color = _color(lib, i)
        good = sorted(p for p in points if p[0] > 0 and (p[1] > 0 or not logy))
        if not good:
            continue
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in good)
        # data-lib: the HTML page's checkboxes hide a library by it (quoted: escaped)
        tag = f'data-lib="{html.escape(lib)}"'
        parts.append(f'<polyline {tag} points="{path}" fill="none" stroke="{color}" '
                     f'stroke-width="2"/>')
        for x, y in good:
            # a <title> is the hover text in browsers and SVG viewers alike
            parts.append(f'<circle {tag} cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" '
                         f'fill="{color}"><title>{html.escape(lib)}: {human_bytes(x)}, '
                         f'{y:.4g} {html.escape(ylabel)}</title></circle>')
        ly = top + 8 + 14 * i
        parts.append(f'<line {tag} x1="{left + 8}" y1="{ly}" x2="{left + 26}" y2="{ly}" '
                     f'stroke="{color}" stroke-width="2"/>')
        parts.append(f'<text {tag} x="{left + 30}" y="{ly + 4}">{html.escape(lib)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def op_svgs(records: Sequence[Record], op: str, libraries: Sequence[str], n: int
            ) -> tuple[str, str]:
    """(busbw chart, time chart) of ``op`` as SVG text."""
    place, data = series(records, op, libraries)
    bw = {lib: [(s, b) for s, b, _ in pts] for lib, pts in data.items()}
    tm = {lib: [(s, t) for s, _, t in pts] for lib, pts in data.items()}
    return (svg_chart(f"{op} busbw ({place}, {n} ranks)", bw, "busbw (GB/s)", logy=False),
            svg_chart(f"{op} time ({place}, {n} ranks)", tm, "time (us)", logy=True))


def page_data(records: Sequence[Record], ops: Sequence[str], libraries: Sequence[str],
              n: int) -> dict[str, Any]:
    """The numbers the HTML page embeds: per op its placement and each library's points."""
    out_ops = []
    for op in ops:
        place, data = series(records, op, libraries)
        out_ops.append({"name": op, "placement": place,
                        "series": [{"library": lib, "points": [list(p) for p in pts]}
                                   for lib, pts in data.items()]})
    return {"nranks": n, "ops": out_ops,
            "libraries": [{"name": lib, "color": _color(lib, i)}
                          for i, lib in enumerate(libraries)]}


def html_page(title: str, records: Sequence[Record], ops: Sequence[str],
              libraries: Sequence[str], n: int, lines: Sequence[str] = ()) -> str:
    """A self-contained page: ``lines`` (header text), two inline charts per op, the numbers.

    Built with the viz pages' machinery, so it escapes and inlines as the guide does.
    """
    from ..viz.page import _asset, self_contained

    head = ("<pre class='head'>" + html.escape("\n".join(lines)) + "</pre>") if lines else ""
    charts = []
    for op in ops:
        bw, tm = op_svgs(records, op, libraries, n)
        oid = html.escape(op)
        charts.append(f"<section id='op-{oid}' class='op' data-op='{oid}'>"
                      f"<h2>{oid}</h2><div class='row'>{bw}{tm}</div></section>")
    return self_contained(_asset("benchplot.html"), title=title, css=_asset("benchplot.css"),
                          js=_asset("benchplot.js"), data=page_data(records, ops, libraries, n),
                          HEAD=head, CHARTS="\n".join(charts))


def combined_svg(records: Sequence[Record], ops: Sequence[str], libraries: Sequence[str],
                 n: int) -> str:
    """Every op's two charts stacked in one SVG."""
    w, h = 460, 300
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{h * len(ops)}">']
    for i, op in enumerate(ops):
        bw, tm = op_svgs(records, op, libraries, n)
        out.append(f'<g transform="translate(0,{i * h})">{bw}</g>')
        out.append(f'<g transform="translate({w},{i * h})">{tm}</g>')
    out.append("</svg>")
    return "\n".join(out)


# ------------------------------------------------------------------------ matplotlib


def have_matplotlib() -> bool:
    """Whether matplotlib can be imported (``--plot FILE.png`` needs it)."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a half-removed install
        return False


def problem(path: str) -> str | None:
    """Why ``--plot path`` cannot be written here, or None: checked before any sweep runs."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in KINDS:
        return (f"--plot {path}: unknown file type {ext or '(none)'!r}; "
                f"write .png, .html or .svg")
    if KINDS[ext] == "matplotlib" and not have_matplotlib():
        stem = os.path.splitext(path)[0]
        return (f"--plot {path}: a PNG needs matplotlib, which is not installed: "
                f"{EXTRA} (or pip install matplotlib); or write {stem}.html (a "
                f"self-contained page) or {stem}.svg, which need nothing")
    return None


def png(path: str, records: Sequence[Record], ops: Sequence[str], libraries: Sequence[str],
        n: int) -> None:
    """Two panels per op (busbw, time) drawn with matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(ops), 2, figsize=(11, 3.2 * len(ops)), squeeze=False)
    for row, op in enumerate(ops):
        place, data = series(records, op, libraries)
        ax_bw, ax_t = axes[row]
        for i, (lib, pts) in enumerate(data.items()):
            sizes = [p[0] for p in pts]
            ax_bw.plot(sizes, [p[1] for p in pts], marker="o", ms=3, label=lib,
                       color=_color(lib, i))
            ax_t.plot(sizes, [p[2] for p in pts], marker="o", ms=3, label=lib,
                      color=_color(lib, i))
        for ax, ylabel in ((ax_bw, "busbw (GB/s)"), (ax_t, "time (us)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (B)")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        ax_t.set_yscale("log")
        ax_bw.set_title(f"{op} busbw ({place}, {n} ranks)", fontsize=10)
        ax_t.set_title(f"{op} time ({place}, {n} ranks)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(path: str, records: Sequence[Record], ops: Sequence[str], libraries: Sequence[str],
          n: int, lines: Sequence[str] = ()) -> str:
    """Write the plot ``path`` asks for (.png, .html, .svg); returns ``path``.

    Raises:
        PlotUnavailable: the type is unknown, or ``.png`` without matplotlib (see
            :func:`problem`, which the CLI asks before running the sweep).
    """
    why = problem(path)
    if why:
        raise PlotUnavailable(why)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".png":
        png(path, records, ops, libraries, n)
        return path
    if ext == ".svg":
        text = combined_svg(records, ops, libraries, n)
    else:
        text = html_page("meshcast bench", records, ops, libraries, n, lines)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
