"""``meshcast viz``: the animated guide (``guide``, ``serve``) and the replay of a run (``trace``).

``guide`` writes one self-contained HTML file that opens from ``file://``;
``serve`` builds the same page and serves it from memory with
:mod:`http.server` on the loopback interface only, so nothing is exposed to
the network. ``trace DIR`` turns a recorded run (``MESHCAST_TRACE=DIR``)
into a replay page, optionally a merged Perfetto/Chrome trace
(``--perfetto``), and prints the hang view when the run hung (``--hang``
prints it always).
"""

from __future__ import annotations

import argparse
import http.server
import sys
from pathlib import Path

from .page import DEFAULT_TITLE, build_guide

HELP = ("an animated guide to every collective, drawn from meshcast's own schedules; "
        "the replay of a recorded run")

DESCRIPTION = """\
  meshcast viz guide -o guide.html     write the guide (one self-contained HTML file)
  meshcast viz serve [--port 8000]     serve it on http://127.0.0.1:PORT/
  meshcast viz trace DIR [-o replay.html] [--perfetto FILE] [--hang]
                                       replay a run recorded with MESHCAST_TRACE=DIR
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``meshcast viz`` (its actions are sub-subcommands)."""
    p.description = "meshcast's visualizer.\n\n" + DESCRIPTION
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = p.add_subparsers(title="actions", metavar="<action>", dest="viz_action")
    g = sub.add_parser("guide", help="write the guide as one self-contained HTML file")
    g.add_argument("-o", "--output", default="meshcast-guide.html",
                   help="where to write it (default: %(default)s; '-' for stdout)")
    g.add_argument("--title", default=DEFAULT_TITLE, help="the page's title")
    s = sub.add_parser("serve", help="serve the guide on 127.0.0.1")
    s.add_argument("--port", type=int, default=8000, help="port (0: any free one; default %(default)s)")
    s.add_argument("--title", default=DEFAULT_TITLE, help="the page's title")
    t = sub.add_parser("trace", help="replay a run recorded with MESHCAST_TRACE=DIR",
                       description="Turn a recorded run into a replay page (a lane per rank, "
                       "spans, message arrows, skew, busbw, the hang view).")
    t.add_argument("directory", metavar="DIR", help="the trace directory (rank-*.jsonl)")
    t.add_argument("-o", "--output", default="replay.html",
                   help="the replay page (default: %(default)s; '-' for stdout; '' for none)")
    t.add_argument("--perfetto", metavar="FILE", default=None,
                   help="also write one Chrome trace event JSON of every rank (ui.perfetto.dev)")
    t.add_argument("--hang", action="store_true",
                   help="print the hang view even if every call finished")
    t.add_argument("--title", default=None, help="the page's title")


def _serve(page: bytes, port: int) -> int:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] not in ("/", "/index.html", "/guide.html"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, fmt: str, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler) as srv:
        print(f"meshcast viz: serving the guide on http://127.0.0.1:{srv.server_port}/ "
              "(Ctrl-C stops)", flush=True)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


def _trace(ns: argparse.Namespace) -> int:
    from . import hang, perfetto, trace_data, trace_page

    try:
        tl = trace_data.load(ns.directory)
    except (OSError, ValueError) as exc:
        print(f"meshcast viz trace: {exc}", file=sys.stderr)
        return 1
    report = hang.analyze(tl)
    # the page goes to stdout with '-': then the report must not mix into it
    say = sys.stderr if ns.output == "-" else sys.stdout
    if ns.output:
        page = trace_page.render(tl, title=ns.title)
        if ns.output == "-":
            sys.stdout.write(page)
        else:
            out = Path(ns.output)
            out.write_text(page, encoding="utf-8")
            print(f"meshcast viz: wrote {out} ({len(tl.traces)} ranks, {len(tl.calls)} calls); "
                  f"open it in a browser (file://{out.resolve()})", file=say)
    if ns.perfetto:
        n = perfetto.write(tl, ns.perfetto)
        print(f"meshcast viz: wrote {ns.perfetto} ({n} events); open it in "
              "https://ui.perfetto.dev or chrome://tracing", file=say)
    if ns.hang or report["hung"]:
        say.write(hang.report_text(tl, report))
    return 0


def handle(ns: argparse.Namespace) -> int:
    """Run ``meshcast viz <action>``; returns the exit status (2: no or unknown action)."""
    action = getattr(ns, "viz_action", None)
    if action == "guide":
        page = build_guide(title=ns.title)
        if ns.output == "-":
            sys.stdout.write(page)
        else:
            out = Path(ns.output)
            out.write_text(page, encoding="utf-8")
            print(f"meshcast viz: wrote {out} ({len(page.encode()) / 1e6:.1f} MB); "
                  f"open it in a browser (file://{out.resolve()})")
        return 0
    if action == "serve":
        return _serve(build_guide(title=ns.title).encode("utf-8"), ns.port)
    if action == "trace":
        return _trace(ns)
    print("meshcast viz: choose an action: guide, serve or trace (see meshcast viz --help)",
          file=sys.stderr)
    return 2
