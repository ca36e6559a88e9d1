"""What the guide must animate for a card, from an independent simulator run of its schedule.

The guide's tests hold the page's steps against these (the schedule run again,
straight through the simulator, with nothing watching it), so the animation
cannot drift from the registered generators, the described fast paths included.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from meshcast.algorithms import _registry, _simulate
from meshcast.viz import schedules


def independent_run(key: str, algo: str, p: int, n: int) -> _simulate.SimResult:
    """The schedule run again, straight through the simulator, with nothing watching it."""
    if key == "send_recv":
        plans = schedules._plans(key, p, n, "p2p")
        return _simulate.run(schedules._send_recv, plans)
    family = _registry.get(key, algo).family
    return _simulate.simulate(key, algo, schedules._plans(key, p, n, family))


def expected_steps(res: _simulate.SimResult) -> dict[tuple[int, int], Counter]:
    """Events grouped as the guide groups them: (round, waits or entries passed on that
    rank in it) -> what moves, by kind, source, destination and bytes."""
    waves: dict[tuple[int, int], int] = defaultdict(int)
    steps: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for i in range(max(res.rounds, default=0)):
        steps[(i, 0)]  # noqa: B018  (a round with nothing in it is still a step)
    for e in res.events:
        w = waves[(e.rank, e.round)]
        if e.kind in ("wait", "enter"):
            waves[(e.rank, e.round)] = w + 1
        elif e.kind == "send":
            steps[(e.round, 0)][("send", e.rank, e.peer, e.nbytes)] += 1
        elif e.kind == "get":
            steps[(e.round, w)][("get", e.peer, e.rank, e.nbytes)] += 1
        elif e.kind == "write":
            steps[(e.round, w)][("write", e.rank, e.peer, e.nbytes)] += 1
        elif e.kind == "reduce_slots":
            for q in e.ranks:
                steps[(e.round, w)][("reduce_slots", q, e.rank, e.nbytes)] += 1
            if e.own:  # my operand from my own array: a local step
                steps[(e.round, w)][("reduce", e.rank, e.nbytes)] += 1
        elif e.kind in ("reduce", "copy", "put"):
            steps[(e.round, w)][(e.kind, e.rank, e.nbytes)] += 1
    return steps


def step_count(key: str, algo: str, p: int, n: int) -> int:
    """How many steps the page must show for ``key``/``algo`` on ``p`` ranks, ``n`` elements."""
    return len(expected_steps(independent_run(key, algo, p, n)))
