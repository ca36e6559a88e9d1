"""Animation data taken from the real schedules: every registered algorithm, run in the simulator.

Why this way: the guide must never show a hand-drawn copy of an algorithm
that can drift from the code. :func:`extract` therefore runs the registered
generator itself (``meshcast.algorithms``) through the in-memory simulator
(``_simulate.run``), with the same plans the tests use (``make_plans``). A
thin wrapper around the generator only *watches*: it keeps each yielded
:class:`~meshcast.algorithms._plan.Round` and, when the simulator resumes
the generator (the round is then complete on that rank), snapshots the
rank's buffers. The simulator does all data movement and checks the
matching rules; its event log is what the tests compare the animation with.

Animation steps
---------------
One animation step is one *round* of the schedule (the executor's unit: all
sends and receives of a round are posted together). Shared-memory (arena)
schedules do much of their work inside one round, ordered by signal/wait
phases; there a round is cut further at each ``Wait`` (and ``Enter``, the
one-host fast paths' entry) on a rank: step ``(round, wave)`` holds what
ranks do after their ``wave``-th wait of that round. For point-to-point
schedules ``wave`` is always 0, so the number of steps is exactly the
number of rounds.

The one-host fast paths (one-shot, single-copy, symmetric; described
schedules) move data through two more places: a rank's one-shot region
(``space: "region"``; the page draws a region box beside each rank) and a
peer's exposed buffer, which is one of its visible tensors, so those
transfers are located on the peer's cells like a message's.

Locations
---------
A buffer in a step is located as ``[row, start, n]``: ``row`` indexes the
rank's visible buffers (its input and output tensors, one row when they are
the same memory), ``start``/``n`` are elements; ``row = -1`` is scratch
memory the user never sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import algorithms  # noqa: F401  (registers every algorithm)
from ..algorithms import _registry, _simulate
from ..algorithms._plan import (
    EXPOSED,
    REGION,
    Copy,
    Enter,
    Expose,
    Get,
    Plan,
    Put,
    Recv,
    Reduce,
    ReduceSlots,
    Round,
    Send,
    Signal,
    Wait,
    Write,
)
from . import primitives

P2P_NAME = "direct"  # the send/recv card's one "algorithm"
ENTER_NOTE = "every rank enters the call (fingerprints compared, one signal), then reads"
EXPOSE_NOTE = "ranks expose their buffer to the peers"


def _addr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


@dataclass
class _Watch:
    """What the wrapper saw on one rank."""

    rows: list[tuple[str, np.ndarray]] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    snaps: list[list[list[float | None]]] = field(default_factory=list)

    exposed: np.ndarray | None = None  # the buffer this rank exposed (fast paths)

    def locate(self, buf: np.ndarray) -> list[int]:
        lo, n = _addr(buf), buf.nbytes
        for i, (_, arr) in enumerate(self.rows):
            a0 = _addr(arr)
            if arr.nbytes and a0 <= lo and lo + n <= a0 + arr.nbytes:
                # every element the bytes touch (a byte-split copy may cut one in two)
                first, end = (lo - a0) // arr.itemsize, -(-(lo + n - a0) // arr.itemsize)
                return [i, first, end - first]
        return [-1, 0, -(-n // max(1, buf.itemsize))]

    def locate_exposed(self, offset: int, nbytes: int) -> list[int]:
        """Where bytes ``[offset, offset + nbytes)`` of my exposed buffer are shown."""
        assert self.exposed is not None, "a peer reads a buffer this rank never exposed"
        raw = self.exposed.reshape(-1).view(np.uint8)[offset:offset + nbytes]
        return self.locate(raw)

    def snapshot(self) -> list[list[float | None]]:
        return [_values(arr) for _, arr in self.rows]


def _values(arr: np.ndarray) -> list[float | None]:
    """JSON-ready values: integers stay integers, garbage (NaN) becomes None ("not written")."""
    out: list[float | None] = []
    for v in arr.tolist():
        if v != v:  # NaN: a byte this rank has not received yet
            out.append(None)
        elif float(v).is_integer():
            out.append(int(v))
        else:
            out.append(round(float(v), 4))
    return out


def _visible_rows(plan: Plan) -> list[tuple[str, np.ndarray]]:
    """The rank's user-visible tensors: input and output, merged when they are the same memory."""
    rows: list[tuple[str, np.ndarray]] = []
    x, out = plan.input, plan.output
    if x is not None and out is not None and np.may_share_memory(x, out):
        # in-place: show the larger of the two (the output of gather/all_gather,
        # the input of scatter on the root)
        big = out if out.nbytes >= x.nbytes else x
        return [("tensor", big)]
    if x is not None and len(x):
        rows.append(("input" if out is not None else "tensor", x))
    if out is not None and len(out):
        rows.append(("output" if x is not None else "tensor", out))
    return rows


def _watched(fn: Callable[[Plan], Iterator[Round]], watches: list[_Watch]):
    """Wrap schedule ``fn`` so that it records rounds and post-round snapshots, changing nothing."""

    def run(plan: Plan) -> Iterator[Round]:
        w = watches[plan.rank]
        w.rows = _visible_rows(plan)
        for rnd in fn(plan):
            w.rounds.append(rnd)
            yield rnd
            w.snaps.append(w.snapshot())  # resumed: this round is complete on this rank

    return run


def _send_recv(plan: Plan) -> Iterator[Round]:
    """The send/recv card: rank 0 sends its tensor to rank 1 (one message, one round)."""
    if plan.rank == 0:
        yield Round(Send(1, plan.input))
    elif plan.rank == 1:
        yield Round(Recv(0, plan.output))


def _plans(key: str, size: int, n: int, family: str) -> list[Plan]:
    xs = primitives.inputs(key, size, n)
    if key == "send_recv":
        dt = primitives.DTYPE
        return [
            Plan("send_recv", r, size, dt,
                 input=xs[r] if r == 0 else None,
                 output=_simulate.garbage(n, dt) if r == 1 else None)
            for r in range(size)
        ]
    prim = primitives.BY_KEY[key]
    # an arena, one-shot regions, ... as the family needs (_simulate.host_options)
    kw: dict[str, Any] = {"dtype": primitives.DTYPE, **_simulate.host_options(family)}
    if prim.reduces:
        kw["op"] = "sum"
    if prim.rooted:
        kw["root"] = primitives.ROOT
    # in place exactly where the torch call on the card is (one tensor ``t``)
    kw["in_place"] = key in ("reduce", "all_reduce")
    return _simulate.make_plans(key, size, xs, **kw)


def algorithms_for(key: str) -> list[_registry.AlgorithmEntry] | list[dict[str, str]]:
    """The registry entries of a card's collective (send/recv: its one direct message)."""
    if key == "send_recv":
        return [{"name": P2P_NAME, "family": "p2p",
                 "description": "one message on the channel between the two ranks"}]
    return _registry.entries(key, described=True)


def _algo_info(key: str) -> list[dict[str, str]]:
    out = []
    for e in algorithms_for(key):
        if isinstance(e, dict):
            out.append(dict(e))
        else:
            out.append({"name": e.name, "family": e.family, "description": e.description,
                        "requires": e.conditions})
    return out


def simulate(key: str, algo: str, size: int, n: int) -> tuple[_simulate.SimResult, list[_Watch]]:
    """Run the real schedule ``key``/``algo`` for ``size`` ranks, ``n`` elements, watching it."""
    if key == "send_recv":
        fn, family, label = _send_recv, "p2p", "send_recv/direct"
    else:
        entry = _registry.get(key, algo)
        fn, family, label = entry.fn, entry.family, entry.qualname
    plans = _plans(key, size, n, family)
    watches = [_Watch() for _ in range(size)]
    befores = [_Watch(rows=_visible_rows(pl)).snapshot() for pl in plans]
    res = _simulate.run(_watched(fn, watches), plans, label=label)
    for w, b in zip(watches, befores):
        w.snaps.insert(0, b)
    return res, watches


def _steps_of(watches: list[_Watch]) -> list[dict[str, Any]]:
    """Group every rank's recorded rounds into animation steps (see the module doc)."""
    size = len(watches)
    steps: dict[tuple[int, int], dict[str, Any]] = {}

    def step(i: int, wave: int) -> dict[str, Any]:
        if (i, wave) not in steps:
            steps[(i, wave)] = {"round": i, "wave": wave, "xfers": [], "local": [], "notes": []}
        return steps[(i, wave)]

    def note(i: int, wave: int, text: str) -> None:
        """Words for what the arrows cannot show (an exposure, the entry), once per step."""
        if text not in step(i, wave)["notes"]:
            step(i, wave)["notes"].append(text)

    for w in watches:  # the exposures first: a peer may read one in the round it is made
        w.exposed = next((st.buf for rnd in w.rounds for st in rnd.then
                          if isinstance(st, Expose)), None)
    nrounds = max((len(w.rounds) for w in watches), default=0)
    for i in range(nrounds):
        # comm steps: pair the k-th send a->b with the k-th recv on b from a (the
        # simulator's matching rule; it has already checked that they match)
        for a in range(size):
            if i >= len(watches[a].rounds):
                continue
            nth: dict[int, int] = {}
            for s in watches[a].rounds[i].comms:
                if not isinstance(s, Send):
                    continue
                b, k = s.peer, nth.get(s.peer, 0)
                nth[b] = k + 1
                recvs = [c for c in watches[b].rounds[i].comms
                         if isinstance(c, Recv) and c.peer == a]
                step(i, 0)["xfers"].append({
                    "s": a, "d": b, "k": "send", "bytes": s.buf.nbytes,
                    "from": watches[a].locate(s.buf), "to": watches[b].locate(recvs[k].buf)})
        for r in range(size):
            if i >= len(watches[r].rounds):
                continue
            w, wave = watches[r], 0
            for st in w.rounds[i].then:
                if isinstance(st, Enter):
                    note(i, wave, ENTER_NOTE)
                if isinstance(st, Expose):
                    note(i, wave, EXPOSE_NOTE)
                if isinstance(st, (Wait, Enter)):
                    wave += 1
                    continue
                if isinstance(st, (Signal, Expose)):
                    continue
                if isinstance(st, Get):
                    step(i, wave)["xfers"].append({
                        "s": st.peer, "d": r, "k": "get", "bytes": st.dst.nbytes,
                        "space": st.space, "to": w.locate(st.dst),
                        "from": _source(watches[st.peer], st.space, st.offset, st.dst)})
                elif isinstance(st, ReduceSlots):
                    for q in st.ranks:
                        if q == r and st.own is not None:  # my operand: my own array
                            step(i, wave)["local"].append({
                                "r": r, "k": "reduce", "bytes": st.dst.nbytes,
                                "to": w.locate(st.dst), "from": w.locate(st.own)})
                            continue
                        step(i, wave)["xfers"].append({
                            "s": q, "d": r, "k": "reduce_slots", "bytes": st.dst.nbytes,
                            "space": st.space, "to": w.locate(st.dst),
                            "from": _source(watches[q], st.space, st.offset, st.dst)})
                elif isinstance(st, Write):
                    step(i, wave)["xfers"].append({
                        "s": r, "d": st.peer, "k": "write", "bytes": st.src.nbytes,
                        "space": EXPOSED, "from": w.locate(st.src),
                        "to": watches[st.peer].locate_exposed(st.offset, st.src.nbytes)})
                elif isinstance(st, (Reduce, Copy)):
                    step(i, wave)["local"].append({
                        "r": r, "k": "reduce" if isinstance(st, Reduce) else "copy",
                        "bytes": st.dst.nbytes, "to": w.locate(st.dst), "from": w.locate(st.src)})
                elif isinstance(st, Put):
                    step(i, wave)["local"].append({
                        "r": r, "k": "put", "bytes": st.src.nbytes, "space": st.space,
                        "to": [-1, 0, len(st.src)], "from": w.locate(st.src)})
        # a round in which nothing at all happens still counts (the executor runs it)
        step(i, 0)
    return [steps[k] for k in sorted(steps)]


def _source(owner: _Watch, space: str, offset: int, dst: np.ndarray) -> list[int]:
    """Where a read's bytes come from: the owner's cells for its exposed buffer, else
    memory the page draws apart (row -1: its arena slot or one-shot region)."""
    if space == EXPOSED:
        return owner.locate_exposed(offset, dst.nbytes)
    return [-1, 0, len(dst)]


def _attach_values(steps: list[dict[str, Any]], watches: list[_Watch]) -> None:
    """Each step's rank values: after round i on each rank, once the round's last wave is shown."""
    last_wave: dict[int, int] = {}
    for s in steps:
        last_wave[s["round"]] = max(last_wave.get(s["round"], 0), s["wave"])
    shown = [w.snaps[0] for w in watches]
    for s in steps:
        if s["wave"] == last_wave[s["round"]]:
            i = s["round"]
            shown = [w.snaps[min(i + 1, len(w.snaps) - 1)] for w in watches]
        s["values"] = shown


def extract(key: str, algo: str, size: int, n: int) -> dict[str, Any]:
    """The animation of one card for one algorithm, rank count and size (JSON-ready).

    Returns:
        ``{"key", "algo", "p", "n", "itemsize", "rows": [[name, length] per row] per rank,
        "before": values per rank, "steps": [{"round", "wave", "xfers", "local",
        "values"}], "events": simulator event count}``; see the module doc.
    """
    res, watches = simulate(key, algo, size, n)
    family = "p2p" if key == "send_recv" else _registry.get(key, algo).family
    steps = _steps_of(watches)
    _attach_values(steps, watches)
    for s in steps:
        sent = [0] * size
        recv = [0] * size
        for x in s["xfers"]:
            sent[x["s"]] += x["bytes"]
            recv[x["d"]] += x["bytes"]
        s["bytes"] = sum(sent)
        s["max_rank_bytes"] = max(max(sent), max(recv)) if size else 0
        s["messages"] = len(s["xfers"])
    return {
        "key": key, "algo": algo, "family": family, "p": size, "n": n,
        "itemsize": primitives.DTYPE.itemsize,
        # one-shot regions to draw beside the ranks (the page's region boxes)
        "regions": any(x.get("space") == REGION for s in steps for x in s["xfers"] + s["local"]),
        "rows": [[[name, len(arr)] for name, arr in w.rows] for w in watches],
        "before": [w.snaps[0] for w in watches],
        "steps": steps,
        "events": len(res.events),
    }


def _host_shapes() -> tuple[tuple[int, int], ...]:
    from .hosts import SHAPES

    return SHAPES


def guide_data(rank_counts: tuple[int, ...] = primitives.RANK_COUNTS) -> dict[str, Any]:
    """Everything the guide page embeds: the cards and every (algorithm, ranks, size) run."""
    cards, runs = [], {}
    for prim in primitives.PRIMITIVES:
        algos = _algo_info(prim.key)
        cards.append({
            "key": prim.key, "title": prim.title, "summary": prim.summary, "call": prim.call,
            "topology": prim.topology, "sizes": list(prim.sizes), "rooted": prim.rooted,
            "whole": prim.whole,
            "algos": algos,
        })
        for a in algos:
            for p in rank_counts:
                for n in prim.sizes:
                    runs[f"{prim.key}|{a['name']}|{p}|{n}"] = extract(prim.key, a["name"], p, n)
        from . import hosts  # imports this module's helpers

        # across hosts: the hierarchical code, recorded (runs keyed by shape, not rank count)
        cards[-1]["hosts"], more = hosts.guide_runs(prim.key, prim.sizes)
        runs.update(more)
    return {"cards": cards, "runs": runs, "rank_counts": list(rank_counts), "root": primitives.ROOT,
            "shapes": [f"{h}x{per}" for h, per in _host_shapes()]}


__all__ = ["algorithms_for", "extract", "guide_data", "simulate"]
