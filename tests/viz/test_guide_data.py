"""The guide's data against the schedules themselves and NumPy (no browser).

The animation must be the schedule, not a drawing of it: for every card,
algorithm, rank count 2..8 and size, the steps the page animates are held
against the events of an independent simulator run of the registered
algorithm (unwatched), and the rank boxes' final values against NumPy.
"""

from __future__ import annotations

import html.parser
import json
from collections import Counter

import numpy as np
import pytest
from schedule_steps import expected_steps, independent_run

from meshcast.algorithms import _registry
from meshcast.viz import page, primitives, schedules

CASES = [
    (prim.key, a["name"], p, n)
    for prim in primitives.PRIMITIVES
    for a in schedules._algo_info(prim.key)
    for p in primitives.RANK_COUNTS
    for n in prim.sizes
]


@pytest.mark.parametrize("key,algo,p,n", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_steps_are_the_schedules_and_values_are_numpys(key: str, algo: str, p: int, n: int) -> None:
    run = schedules.extract(key, algo, p, n)
    res = independent_run(key, algo, p, n)
    events = res.events

    got: dict[tuple[int, int], Counter] = {}
    for s in run["steps"]:
        c: Counter = Counter()
        for x in s["xfers"]:
            c[(x["k"], x["s"], x["d"], x["bytes"])] += 1
        for loc in s["local"]:
            c[(loc["k"], loc["r"], loc["bytes"])] += 1
        got[(s["round"], s["wave"])] = c
    assert got == dict(expected_steps(res))
    rounds = max(res.rounds, default=0)
    assert sorted({s["round"] for s in run["steps"]}) == list(range(rounds))
    if key == "send_recv" or _registry.get(key, algo).family == "p2p":
        # point to point: one animation step per round, exactly
        assert len(run["steps"]) == rounds
    assert run["events"] == len(events)

    final = run["steps"][-1]["values"] if run["steps"] else run["before"]
    for r, want in enumerate(primitives.reference(key, p, n)):
        names = [name for name, _ in run["rows"][r]]
        if want is None:
            continue
        row = names.index("output") if "output" in names else names.index("tensor")
        np.testing.assert_array_equal(np.array(final[r][row], dtype=np.float32), want,
                                      err_msg=f"{key}/{algo} p={p} n={n} rank {r}")


def test_before_values_are_the_inputs() -> None:
    run = schedules.extract("all_reduce", "ring", 3, 1)
    assert run["before"] == [[[1]], [[2]], [[3]]]
    assert run["steps"][-1]["values"] == [[[6]], [[6]], [[6]]]


class _Refs(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: Counter = Counter()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "srcset") and v is not None:
                self.refs.append((tag, k, v))


@pytest.fixture(scope="module")
def guide_html() -> str:
    return page.build_guide()


def test_page_is_self_contained(guide_html: str) -> None:
    parser = _Refs()
    parser.feed(guide_html)
    assert parser.refs == []  # no src/href at all: scripts, styles and data are inline
    assert parser.tags["link"] == 0 and parser.tags["iframe"] == 0
    low = guide_html.lower()
    assert "http://" not in low and "https://" not in low and "@import" not in low
    data = guide_html.split('<script type="application/json" id="guide-data">')[1]
    data = json.loads(data.split("</script>")[0])
    assert {c["key"] for c in data["cards"]} == {p.key for p in primitives.PRIMITIVES}


def test_user_text_is_escaped() -> None:
    evil = '</script><script>alert("x")</script><!--'
    data = {"cards": [{"key": "k", "title": evil, "summary": "a & b \u2028"}], "runs": {},
            "rank_counts": [2], "root": 0}
    out = page.render(data, title=evil)
    assert out.count("</script>") == 2  # the data's and the code's own closing tags only
    assert "<script>alert" not in out and "<!--" not in out
    assert "&lt;/script&gt;&lt;script&gt;alert(&quot;x&quot;)" in out
    blob = out.split('id="guide-data">')[1].split("</script>")[0]
    assert json.loads(blob) == data
    assert "\u2028" not in blob
