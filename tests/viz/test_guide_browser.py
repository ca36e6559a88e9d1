"""The guide in a real browser: every card plays to the NumPy result, in the schedule's steps.

Playwright's fake clock (``page.clock``) drives requestAnimationFrame and
timers, so the animations are deterministic and no test sleeps. The page is
opened from ``file://``, as a user who double-clicks the written file would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pages import open_page
from schedule_steps import step_count

from meshcast.algorithms import _registry
from meshcast.viz import primitives, schedules

pytestmark = pytest.mark.browser

STEP_MS = 100  # ?step_ms=: base duration of one animation step (fake time)
RANKS = (2, 3, 8)
KEYS = [p.key for p in primitives.PRIMITIVES]


def _open(browser: Any, guide_file: Path, **context: Any) -> tuple[Any, Any, list[str]]:
    return open_page(browser, guide_file, f"?step_ms={STEP_MS}", **context)


@pytest.fixture(scope="module")
def shared_page(browser: Any, guide_file: Path) -> Iterator[tuple[Any, list[str]]]:
    """One page for the module (loading the 2 MB guide is the slow part); cards are independent."""
    ctx, pg, errors = _open(browser, guide_file)
    yield pg, errors
    ctx.close()


@pytest.fixture
def page(shared_page: tuple[Any, list[str]]) -> Iterator[Any]:
    pg, errors = shared_page
    yield pg
    assert errors == []


def _schedule_steps(key: str, algo: str, p: int, n: int) -> int:
    """Steps the page must show: the schedule's rounds (shared memory: rounds cut at waits
    and at the entry), from the schedule run again in the simulator, unwatched."""
    return step_count(key, algo, p, n)


def _stage(page: Any, key: str) -> tuple[str, int, int]:
    """(data-state, data-step, data-steps) of a card's stage, in one round trip."""
    st = page.evaluate("key => ({...document.querySelector('#card-' + key + ' svg.stage').dataset})",
                       key)
    return st["state"], int(st["step"]), int(st["steps"])


def _cells(page: Any, key: str) -> dict[int, dict[int, list[float | None]]]:
    raw = page.evaluate(
        """key => Array.from(document.querySelectorAll('#card-' + key + ' svg.stage g.cell'))
             .map(c => [+c.dataset.rank, +c.dataset.row, +c.dataset.idx, c.textContent])""",
        key)
    out: dict[int, dict[int, list[float | None]]] = {}
    for r, row, idx, text in raw:
        cells = out.setdefault(r, {}).setdefault(row, [])
        assert idx == len(cells)
        cells.append(None if text == "·" else float(text))
    return out


def _check_result(page: Any, key: str, algo: str, p: int, n: int) -> None:
    run = schedules.extract(key, algo, p, n)
    cells = _cells(page, key)
    for r, want in enumerate(primitives.reference(key, p, n)):
        if want is None:
            continue
        names = [name for name, _ in run["rows"][r]]
        row = names.index("output") if "output" in names else names.index("tensor")
        got = np.array(cells[r][row], dtype=np.float32)
        np.testing.assert_array_equal(got, want, err_msg=f"{key}/{algo} p={p} rank {r}")


@pytest.mark.parametrize("key", KEYS)
def test_play_every_algorithm_to_numpys_result(page: Any, key: str) -> None:
    card = page.locator(f"#card-{key}")
    n = int(card.locator("select.size").input_value())
    algos = [a["name"] for a in schedules._algo_info(key)]
    card.locator("select.speed").select_option("4")  # fewer frames to run: same steps
    for p in RANKS:
        card.locator("select.ranks").select_option(str(p))
        for algo in algos:
            card.locator("select.algo").select_option(algo)
            steps = _schedule_steps(key, algo, p, n)
            assert _stage(page, key) == ("idle", 0, steps), (key, algo, p)
            card.locator("button.play").click()
            page.clock.run_for((STEP_MS // 4 + 40) * steps + 300)
            assert _stage(page, key) == ("done", steps, steps), (key, algo, p)
            _check_result(page, key, algo, p, n)


@pytest.mark.parametrize("key,algo", [("all_reduce", "ring"), ("all_to_all", "bruck"),
                                      ("reduce", "arena")])
def test_keyboard_steps_one_round_at_a_time(page: Any, key: str, algo: str) -> None:
    card = page.locator(f"#card-{key}")
    stage = card.locator("svg.stage")
    card.locator("select.ranks").select_option("3")
    card.locator("select.algo").select_option(algo)
    n = int(card.locator("select.size").input_value())
    run = schedules.extract(key, algo, 3, n)
    card.focus()
    for k, step in enumerate(run["steps"], start=1):
        page.keyboard.press("ArrowRight")
        assert stage.get_attribute("data-step") == str(k)
        arrows = card.locator("svg.stage path.arrow").count()
        assert arrows == len(step["xfers"])
        cells = _cells(page, key)
        shown = [[cells.get(r, {}).get(i, []) for i in range(len(run["rows"][r]))]
                 for r in range(3)]
        assert shown == step["values"]
    assert stage.get_attribute("data-state") == "done"
    _check_result(page, key, algo, 3, n)
    page.keyboard.press("r")
    assert stage.get_attribute("data-state") == "idle"
    assert stage.get_attribute("data-step") == "0"


FAST_PATH_CARDS = [(key, algo) for key in ("all_reduce", "broadcast", "all_gather")
                   for algo in ("oneshot", "cma")]


@pytest.mark.parametrize("key,algo", FAST_PATH_CARDS)
def test_fast_path_cards_step_their_schedules(page: Any, key: str, algo: str) -> None:
    """The one-shot and single-copy cards: as many steps as the described generator's
    (independent simulator run), one-shot regions drawn beside the ranks and lit by the
    puts, single-copy lines from the peer's own cells, and NumPy's result at the end."""
    assert not _registry.get(key, algo).executed  # a described fast path, not a forced one
    card = page.locator(f"#card-{key}")
    stage = card.locator("svg.stage")
    for p in (2, 3, 5):
        card.locator("select.ranks").select_option(str(p))
        card.locator("select.algo").select_option(algo)
        n = int(card.locator("select.size").input_value())
        run = schedules.extract(key, algo, p, n)
        steps = step_count(key, algo, p, n)
        assert _stage(page, key) == ("idle", 0, steps), (key, algo, p)
        assert card.locator("svg.stage g.region").count() == (p if algo == "oneshot" else 0)
        card.focus()
        for k, step in enumerate(run["steps"], start=1):
            page.keyboard.press("ArrowRight")
            assert stage.get_attribute("data-step") == str(k)
            puts = [loc for loc in step["local"] if loc.get("space") == "region"]
            assert card.locator("svg.stage path.arrow.put").count() == len(puts)
            assert card.locator("svg.stage g.region.hit").count() == len(puts)
            cma = [x for x in step["xfers"] if x.get("space") == "exposed"]
            assert card.locator("svg.stage path.arrow.cma").count() == len(cma)
            assert card.locator("svg.stage path.arrow").count() == len(step["xfers"]) + len(puts)
        assert _stage(page, key) == ("done", steps, steps), (key, algo, p)
        _check_result(page, key, algo, p, n)
        assert card.locator(".legend .lg-region").is_visible() == (algo == "oneshot")
        assert card.locator(".legend .lg-cma").is_visible() == (algo == "cma")


def test_play_pause_and_packets_in_flight(page: Any) -> None:
    card = page.locator("#card-all_gather")
    stage = card.locator("svg.stage")
    card.locator("select.speed").select_option("1")
    card.locator("select.ranks").select_option("4")
    card.locator("select.algo").select_option("ring")
    card.locator("button.play").click()
    page.clock.run_for(STEP_MS * 0.3)
    assert stage.get_attribute("data-state") == "playing"
    assert stage.get_attribute("data-step") == "0"
    assert card.locator("svg.stage g.packet").count() == 4  # every rank sends one piece
    page.clock.run_for(STEP_MS * 0.75)  # frames come every 16 ms: values change by 0.65 + 0.16
    assert stage.get_attribute("data-step") == "1"
    card.locator("button.play").click()  # pause
    assert stage.get_attribute("data-state") == "paused"
    page.clock.run_for(STEP_MS * 10)
    assert stage.get_attribute("data-step") == "1"


def test_reduced_motion_moves_no_packets(browser: Any, guide_file: Path) -> None:
    ctx, page, errors = _open(browser, guide_file, reduced_motion="reduce")
    card = page.locator("#card-broadcast")
    stage = card.locator("svg.stage")
    card.locator("select.ranks").select_option("8")
    card.locator("select.algo").select_option("tree")
    card.locator("button.play").click()
    assert card.locator("svg.stage g.packet").count() == 0
    page.clock.run_for(STEP_MS * 5)
    assert stage.get_attribute("data-state") == "done"
    _check_result(page, "broadcast", "tree", 8, int(card.locator("select.size").input_value()))
    ctx.close()
    assert errors == []


def test_screenshot_of_a_one_shot_card(page: Any, tmp_path: Path) -> None:
    """The one-shot all_reduce at 4 ranks, its regions being read (MESHCAST_VIZ_SHOTS=docs/viz
    keeps it as guide_all_reduce_oneshot.png)."""
    out = Path(os.environ.get("MESHCAST_VIZ_SHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    card = page.locator("#card-all_reduce")
    card.locator("select.ranks").select_option("4")
    card.locator("select.algo").select_option("oneshot")
    card.locator("button.step").click()
    card.locator("button.step").click()
    card.screenshot(path=str(out / "guide_all_reduce_oneshot.png"))
    assert (out / "guide_all_reduce_oneshot.png").stat().st_size > 10_000


def test_screenshots_of_every_card(page: Any, tmp_path: Path) -> None:
    """One picture per card mid-animation (MESHCAST_VIZ_SHOTS=docs/viz keeps them)."""
    out = Path(os.environ.get("MESHCAST_VIZ_SHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "top.png"))
    for key in KEYS:
        card = page.locator(f"#card-{key}")
        card.locator("select.ranks").select_option("4")  # loads the card afresh
        card.locator("button.step").click()
        if key in ("all_reduce", "reduce_scatter", "all_gather"):
            card.locator("button.step").click()
        card.screenshot(path=str(out / f"{key}.png"))
        assert (out / f"{key}.png").stat().st_size > 10_000
    page.locator("#topologies").screenshot(path=str(out / "topologies.png"))
