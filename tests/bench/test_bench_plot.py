"""``meshcast bench --plot``: the HTML page (self-contained, inline data), the PNG through the
``plot`` extra, and the refusal of ``.png`` without matplotlib *before* any sweep runs.

The runs are tiny (2 ranks, 8 B .. 64 KiB, 3 iterations): nothing here looks at a time.
"""

from __future__ import annotations

import html.parser
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meshcast.bench import plot

SRC = str(Path(__file__).resolve().parents[2] / "src")
TINY = ["-n", "2", "-b", "8", "-e", "64K", "-f", "64", "-w", "1", "--iters", "3"]


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": SRC + (os.pathsep + path if path else "")}


class _Refs(html.parser.HTMLParser):
    """Every attribute that could make a browser fetch something."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "srcset") and v is not None:
                self.refs.append((tag, k, v))


def page_data(text: str) -> dict:
    """The inline JSON of a plot page."""
    blob = text.split('<script type="application/json" id="bench-data">')[1]
    return json.loads(blob.split("</script>")[0])


def assert_self_contained(text: str) -> None:
    parser = _Refs()
    parser.feed(text)
    assert parser.refs == []  # no src/href at all: script, style, charts and data are inline
    assert "link" not in parser.tags and "iframe" not in parser.tags
    low = text.lower().replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "http://" not in low and "https://" not in low and "@import" not in low


def _records() -> list[dict]:
    """A made-up sweep of two libraries (for what needs no real run)."""
    out = []
    for lib, scale in (("meshcast", 1.0), ("mpi", 1.5)):
        for size in (8, 512, 32768):
            t = scale * (5 + size / 1000)
            out.append({"op": "all_reduce", "library": lib, "placement": "in-place",
                        "size": size, "requested_size": size, "time_us": t,
                        "busbw": size / t / 1e3, "wrong": 0})
    return out


def test_html_plot_of_a_tiny_run(tmp_path: Path) -> None:
    out = tmp_path / "plot.html"
    proc = subprocess.run([sys.executable, "-m", "meshcast", "bench", *TINY, "--op",
                           "all_reduce,all_gather", "--plot", str(out)],
                          capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"# wrote {out}" in proc.stdout
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    data = page_data(text)
    assert [op["name"] for op in data["ops"]] == ["all_reduce", "all_gather"]
    for op in data["ops"]:
        (series,) = op["series"]
        assert series["library"] == "meshcast"
        assert [p[0] for p in series["points"]] == [8, 512, 32768] or op["name"] == "all_gather"
        assert all(p[2] > 0 for p in series["points"])  # time (us) of every size
    assert text.count("<svg") == 4  # busbw and time per collective, inline
    assert "meshcast bench" in text and "busbw = algbw x" in text  # the run's header


def test_page_escapes_library_names() -> None:
    evil = '"><script>alert(1)</script>'
    recs = [dict(r, library=evil) for r in _records() if r["library"] == "mpi"]
    text = plot.html_page("t</title><b>", recs, ["all_reduce"], [evil], 2, ["</pre><i>x"])
    assert "<script>alert" not in text and "<b>" not in text and "</pre><i>" not in text
    assert page_data(text)["libraries"][0]["name"] == evil
    assert_self_contained(text)


def test_png_without_matplotlib_is_refused_before_the_sweep(tmp_path: Path) -> None:
    # a finder that makes `import matplotlib` (and find_spec) fail, as on a machine without it
    hide = ("import sys\n"
            "class Hide:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'matplotlib' or name.startswith('matplotlib.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'matplotlib'\")\n"
            "sys.meta_path.insert(0, Hide())\n"
            "from meshcast.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    out = tmp_path / "plot.png"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", hide, "bench", *TINY, "--plot", str(out)],
                          capture_output=True, text=True, timeout=60, env=_env())
    took = time.monotonic() - t0
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert "matplotlib" in err and "pip install 'meshcast[plot]'" in err
    assert str(tmp_path / "plot.html") in err and str(tmp_path / "plot.svg") in err
    # nothing ran: no header (printed after the memory bandwidth is measured), no table
    assert proc.stdout == "" and not out.exists()
    assert not (tmp_path / "plot.html").exists()
    assert took < 30, took  # generous: only to catch a sweep that ran anyway


def test_unknown_plot_type_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from meshcast.bench import cli

    assert cli.main(["--plot", "x.pdf"]) == 2
    assert "unknown file type '.pdf'" in capsys.readouterr().err


def test_write_refuses_png_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    monkeypatch.setattr(plot, "have_matplotlib", lambda: False)
    with pytest.raises(plot.PlotUnavailable, match=r"meshcast\[plot\]"):
        plot.write(str(tmp_path / "x.png"), _records(), ["all_reduce"], ["meshcast"], 2)
    assert list(tmp_path.iterdir()) == []  # and writes nothing else in its place


def test_png_with_matplotlib(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # the `plot` extra (in `test` too, so CI runs this)
    path = plot.write(str(tmp_path / "x.png"), _records(), ["all_reduce"], ["meshcast", "mpi"], 2)
    data = Path(path).read_bytes()
    assert path.endswith("x.png") and data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
