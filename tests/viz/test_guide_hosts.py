"""The guide's across-hosts options: the hierarchical code itself, recorded, against NumPy.

``meshcast.viz.hosts`` runs ``algorithms.hierarchical`` on the threaded hosts
simulator through a recording ``Ctx``. Here: every collective, family, shape
and size ends with NumPy's result; the steps hold exactly the calls the
code made (each recorded transfer is one a member of that call sends, and
their bytes add up to what the simulator's exchanges moved); links are
shared memory inside a host and the network between hosts; and a browser
plays one to the end.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from meshcast.viz import hosts, primitives

CASES = [(key, fam, shape, n) for key, fams in hosts.FAMILIES.items() for fam in fams
         for shape in hosts.SHAPES for n in primitives.BY_KEY[key].sizes]


def _final(run: dict[str, Any]) -> list:
    return run["steps"][-1]["values"] if run["steps"] else run["before"]


@pytest.mark.parametrize("key,family,shape,n", CASES,
                         ids=[f"{k}-{f}-{s[0]}x{s[1]}-{n}" for k, f, s, n in CASES])
def test_across_hosts_ends_with_numpys_result(key: str, family: str, shape: tuple[int, int],
                                              n: int) -> None:
    run = hosts.extract(key, family, shape, n)
    p = shape[0] * shape[1]
    assert run["p"] == p and run["hosts"] == hosts.hosts_of(shape)
    for r, want in enumerate(primitives.reference(key, p, n)):
        if want is None:
            continue
        names = [name for name, _ in run["rows"][r]]
        row = names.index("output") if "output" in names else names.index("tensor")
        np.testing.assert_array_equal(np.array(_final(run)[r][row], dtype=np.float32), want,
                                      err_msg=f"{key}/{family} {shape} n={n} rank {r}")
    host_of = {g: h for h, m in enumerate(run["hosts"]) for g in m}
    for s in run["steps"]:
        assert s["xfers"], "a step that moves nothing is not a step"
        for x in s["xfers"]:
            inside = host_of[x["s"]] == host_of[x["d"]]
            if x["via"].startswith("local"):
                assert x["link"] == "shm" and inside
            else:
                assert x["link"] == ("net-local" if inside else "net")
        assert s["bytes"] == s["shm_bytes"] + s["net_bytes"]
        # a rank takes part in at most one call per step (one rank's calls run in order)
        calls_of: dict[int, set[str]] = {}
        for x in s["xfers"]:
            for r in (x["s"], x["d"]):
                calls_of.setdefault(r, set()).add(x["via"])
        assert all(len(v) == 1 for v in calls_of.values()), calls_of


def _moved(key: str, family: str, shape: tuple[int, int], n: int) -> Counter:
    """What the hierarchical code asked the simulator to move, counted by a second,
    independent wrapper: every payload the simulator's exchanges carried to another member."""
    from meshcast.testing import hosts_sim

    seen: Counter = Counter()
    real = hosts_sim._Exchange.__call__

    def counting(self: Any, me: int, verb: str, value: Any) -> list[Any]:
        got = real(self, me, verb, value)
        seen[verb] += 1
        return got

    hosts_sim._Exchange.__call__ = counting  # type: ignore[method-assign]
    try:
        hosts.record(key, family, shape, n)
    finally:
        hosts_sim._Exchange.__call__ = real  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("key,family", [("all_reduce", "leader"), ("all_reduce", "rails"),
                                        ("all_gather", "rails"), ("reduce_scatter", "leader"),
                                        ("broadcast", "flat")])
def test_steps_are_the_calls_the_code_made(key: str, family: str) -> None:
    shape, n = (2, 3), 4  # 4 elements over 3 rails: no shard is empty (an empty call takes no step)
    run = hosts.extract(key, family, shape, n)
    calls = Counter()
    for s in run["steps"]:
        for c in s["calls"]:
            words = c.split()  # "local reduce on host 0", "rail 1 alltoallv", "leaders bcast"
            calls[words[1] if words[0] == "local" else words[-1]] += 1
    # every collective exchange the simulator matched shows up as one call of the page
    # (counted once per communicator instance: members of one call share its step)
    seen = _moved(key, family, shape, n)
    members = {"reduce": 3, "broadcast": 3, "all_gather": 3, "reduce_scatter": 3,
               "gather": 3, "scatter": 3}
    for verb, count in seen.items():
        if verb in members:
            assert calls[verb] == count // members[verb], (verb, calls, seen)
        elif verb in ("allgatherv", "alltoallv", "bcast"):
            width = 6 if family == "flat" else 2  # flat: all 6 ranks; a rail: one per host
            assert calls[verb] == count // width, (verb, calls, seen)


def test_leader_all_reduce_2x2_in_words() -> None:
    run = hosts.extract("all_reduce", "leader", (2, 2), 1)
    assert [s["calls"] for s in run["steps"]] == [
        ["local reduce on host 0", "local reduce on host 1"], ["leaders allgatherv"],
        ["local broadcast on host 0", "local broadcast on host 1"]]
    assert [[(x["s"], x["d"], x["link"]) for x in s["xfers"]] for s in run["steps"]] == [
        [(1, 0, "shm"), (3, 2, "shm")], [(0, 2, "net"), (2, 0, "net")],
        [(0, 1, "shm"), (2, 3, "shm")]]
    assert run["before"] == [[[1]], [[2]], [[3]], [[4]]]
    assert [s["values"] for s in run["steps"]] == [
        [[[3]], [[2]], [[7]], [[4]]], [[[10]], [[2]], [[10]], [[4]]], [[[10]]] * 4]


@pytest.mark.browser
def test_browser_plays_rails_across_hosts(browser: Any, guide_file: Path, tmp_path: Path) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.clock.install(time=0)
    page.clock.pause_at(1000)
    page.goto(guide_file.as_uri() + "?step_ms=100")
    page.wait_for_selector("body[data-ready='1']")
    out = Path(os.environ.get("MESHCAST_VIZ_SHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    for key, family, shape in (("all_reduce", "rails", "2x3"), ("all_gather", "leader", "3x2")):
        card = page.locator(f"#card-{key}")
        stage = card.locator("svg.stage")
        card.locator("select.algo").select_option(f"hosts:{family}")
        assert card.locator("select.ranks").is_hidden() and card.locator("select.shape").is_visible()
        card.locator("select.shape").select_option(shape)
        h, per = (int(v) for v in shape.split("x"))
        n = int(card.locator("select.size").input_value())
        run = hosts.extract(key, family, (h, per), n)
        assert card.locator("svg.stage rect.host").count() == h
        steps = len(run["steps"])
        assert stage.get_attribute("data-steps") == str(steps)
        # step by step: the arrows are the recorded transfers, styled by their link
        for k, s in enumerate(run["steps"], start=1):
            card.locator("button.step").click()
            assert stage.get_attribute("data-step") == str(k)
            links = Counter(card.locator("svg.stage path.arrow").evaluate_all(
                "ps => ps.map(p => p.dataset.link)"))
            assert links == Counter(x["link"] for x in s["xfers"])
            if k == 2 and key == "all_reduce":
                card.screenshot(path=str(out / f"hosts_{key}_{family}.png"))
        if key == "all_gather":
            card.screenshot(path=str(out / f"hosts_{key}_{family}.png"))
        # and Play from the start runs to NumPy's result
        card.locator("button.reset").click()
        card.locator("button.play").click()
        page.clock.run_for(140 * steps + 300)
        assert stage.get_attribute("data-state") == "done"
        cells = card.locator("svg.stage g.cell").evaluate_all(
            "cs => cs.map(c => [+c.dataset.rank, +c.dataset.row, c.textContent])")
        p = h * per
        for r, want in enumerate(primitives.reference(key, p, n)):
            names = [name for name, _ in run["rows"][r]]
            row = names.index("output") if "output" in names else names.index("tensor")
            got = [float(t) for rr, i, t in cells if rr == r and i == row]
            np.testing.assert_array_equal(np.array(got, dtype=np.float32), want)
    ctx.close()
    assert errors == []
