"""Animation data of the collectives across hosts, recorded from the real hierarchical code.

Why this way: :mod:`meshcast.algorithms.hierarchical` is not a generator of
rounds the guide's simulator can step through; it is plain code that calls
collectives on a :class:`~meshcast.algorithms.hierarchical.Ctx` (this host's
shared-memory group, the rails, the leaders, the inter-host engine). So the
guide runs those very functions, every rank a thread, on
:mod:`meshcast.testing.hosts_sim` (the simulator its tests use), through a
*recording* ``Ctx``: each wrapper notes which ranks send which bytes to
which in each call, then lets the simulator move the data, and snapshots the
rank's tensors before every call and at the end. Nothing is drawn by hand.

Steps
-----
Each call on a communicator is matched across its members (the k-th call of
each member of that communicator; a ``send`` with the matching ``recv``)
and placed at the earliest step after every participant's previous call,
so calls on different hosts or rails that do not wait for each other share a
step, as they run at the same time. A call that moves no bytes takes no
step. The values shown after step ``s`` on a rank are its tensors as its
next call after ``s`` found them (so local work, a combine or a copy into
place, shows with the step it follows), or as the call left them at the end.

Links
-----
``shm``: a transfer inside a host, on meshcast's shared-memory engine (the
``local`` phase). ``net``: between hosts, on the inter-host engine (MPI or
Gloo). ``net-local``: the inter-host engine between two ranks of one host
(the ``flat`` family treats every rank as a peer of the engine).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..algorithms import hierarchical as hier
from ..ops import ReduceOp
from ..testing import hosts_sim
from . import primitives
from .schedules import _addr, _values

#: hosts x ranks per host the guide offers (hosts_sim runs any shape; these stay readable)
SHAPES: tuple[tuple[int, int], ...] = ((2, 2), (2, 3), (3, 2))

#: The families the guide draws per collective: those of algorithms/hierarchical.py
#: (all_to_all runs on the inter-host engine), but ``fused``, whose steps are the
#: engine's prepared messages.
FAMILIES: dict[str, tuple[str, ...]] = {
    kind: tuple(f for f in hier.families(kind) if f != "fused") for kind in hier.ALGORITHMS}

DESCRIPTIONS = {
    "leader": "across hosts: each host combines or collects on its leader over shared memory, "
              "the leaders exchange over the network, each leader hands the result back inside "
              "its host; one network message per host",
    "rails": "across hosts: a local reduce-scatter (or piece per rank), then each rail (the "
             "ranks with the same local index on every host) exchanges its shard over the "
             "network in parallel, then a local all-gather",
    "flat": "across hosts: the whole call on the inter-host engine (MPI or Gloo), every rank a "
            "peer of every other, even on the same host",
}


def _loc(rows: Sequence[tuple[str, np.ndarray]], buf: np.ndarray | None) -> list[int]:
    """``[row, start, n]`` of ``buf`` in the rank's visible tensors; row -1: scratch."""
    if buf is None:
        return [-1, 0, 0]
    lo, n = _addr(buf), buf.nbytes
    for i, (_, arr) in enumerate(rows):
        a0 = _addr(arr)
        if arr.nbytes and a0 <= lo and lo + n <= a0 + arr.nbytes:
            return [i, (lo - a0) // arr.itemsize, buf.size]
    return [-1, 0, buf.size]


class _Rank:
    """What the recording wrappers saw on one rank."""

    def __init__(self, g: int, rows: list[tuple[str, np.ndarray]]) -> None:
        self.g, self.rows = g, rows
        self.ops: list[dict[str, Any]] = []
        self.final: list[list[float | None]] = []

    def snapshot(self) -> list[list[float | None]]:
        return [_values(arr) for _, arr in self.rows]

    def note(self, comm: tuple[Any, ...], verb: str, sends: list[tuple[int, np.ndarray]],
             into: np.ndarray | None, via: str) -> None:
        self.ops.append({"comm": comm, "verb": verb, "via": via, "before": self.snapshot(),
                         "sends": [(d, int(b.nbytes), _loc(self.rows, b)) for d, b in sends],
                         "into": _loc(self.rows, into)})


class _RecLocal:
    """hierarchical.LocalOps that records, then lets the simulator's do the work."""

    def __init__(self, inner: hosts_sim.SimLocal, rec: _Rank, members: Sequence[int],
                 host: int) -> None:
        self.inner, self.rec, self.m, self.host = inner, rec, list(members), host
        self.size, self.me = inner.size, inner.rank

    def _note(self, verb: str, sends: list[tuple[int, np.ndarray]], into: np.ndarray | None
              ) -> None:
        self.rec.note(("local", self.host), verb, sends, into, f"local {verb} on host {self.host}")

    def _others(self) -> list[int]:
        return [i for i in range(self.size) if i != self.me]

    def reduce(self, w: np.ndarray, op: ReduceOp, root: int) -> None:
        self._note("reduce", [] if self.me == root else [(self.m[root], w)], w)
        self.inner.reduce(w, op, root)

    def broadcast(self, w: np.ndarray, root: int) -> None:
        self._note("broadcast", [(self.m[i], w) for i in self._others()]
                   if self.me == root else [], w)
        self.inner.broadcast(w, root)

    def all_gather(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int]) -> None:
        self._note("all_gather", [(self.m[i], mine) for i in self._others()], out)
        self.inner.all_gather(out, mine, counts)

    def reduce_scatter(self, out: np.ndarray, w: np.ndarray, counts: Sequence[int],
                       op: ReduceOp) -> None:
        at = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        self._note("reduce_scatter", [(self.m[i], w[at[i]:at[i + 1]]) for i in self._others()],
                   out)
        self.inner.reduce_scatter(out, w, counts, op)

    def gather(self, outs: list[np.ndarray] | None, mine: np.ndarray, root: int) -> None:
        self._note("gather", [] if self.me == root else [(self.m[root], mine)],
                   outs[0] if outs else None)
        self.inner.gather(outs, mine, root)

    def scatter(self, out: np.ndarray, ins: list[np.ndarray] | None, root: int) -> None:
        sends = [(self.m[i], ins[i]) for i in self._others()] if ins is not None else []
        self._note("scatter", sends, out)
        self.inner.scatter(out, ins, root)


class _RecAcross:
    """hierarchical.Across that records, then lets the simulator's do the work."""

    def __init__(self, inner: hosts_sim.SimAcross, rec: _Rank, comm: tuple[Any, ...],
                 name: str) -> None:
        self.inner, self.rec, self.comm, self.name = inner, rec, comm, name
        self.size, self.rank, self.m = inner.size, inner.rank, inner.members
        self.pipeline_chunk = 0  # the guide draws a broadcast in one piece

    def _note(self, verb: str, sends: list[tuple[int, np.ndarray]], into: np.ndarray | None
              ) -> None:
        self.rec.note(self.comm, verb, sends, into, f"{self.name} {verb}")

    def _others(self) -> list[int]:
        return [i for i in range(self.size) if i != self.rank]

    def allgatherv(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int]) -> None:
        self._note("allgatherv", [(self.m[i], mine) for i in self._others()], out)
        self.inner.allgatherv(out, mine, counts)

    def start_allgatherv(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int],
                         displs: Sequence[int]) -> Any:
        # posted exchanges are drawn where they are posted: the simulator completes them there
        self._note("allgatherv", [(self.m[i], mine) for i in self._others()], out)
        return self.inner.start_allgatherv(out, mine, counts, displs)

    def alltoallv(self, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                  send_counts: Sequence[int], uniform: bool = False) -> None:
        self.start_alltoallv(out, recv_counts, inp, send_counts, uniform).wait()

    def start_alltoallv(self, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                        send_counts: Sequence[int], uniform: bool = False) -> Any:
        at = np.concatenate([[0], np.cumsum(send_counts)]).astype(int)
        self._note("alltoallv", [(self.m[i], inp[at[i]:at[i + 1]]) for i in self._others()
                                 if send_counts[i]], out)
        return self.inner.start_alltoallv(out, recv_counts, inp, send_counts, uniform)

    def bcast(self, w: np.ndarray, root: int) -> None:
        self._note("bcast", [(self.m[i], w) for i in self._others()] if self.rank == root
                   else [], w)
        self.inner.bcast(w, root)

    def start_bcast(self, w: np.ndarray, root: int) -> Any:
        # drawn where it is posted, as start_allgatherv
        self._note("bcast", [(self.m[i], w) for i in self._others()] if self.rank == root
                   else [], w)
        return self.inner.start_bcast(w, root)

    def send(self, w: np.ndarray, peer: int) -> None:
        # a message is its own pair, not a call of every member: matched with its recv
        self.rec.note(("p2p", self.m[self.rank], self.m[peer]), "send", [(self.m[peer], w)],
                      None, "network send")
        self.inner.send(w, peer)

    def recv(self, w: np.ndarray, peer: int) -> None:
        self.rec.note(("p2p", self.m[peer], self.m[self.rank]), "recv", [], w, "network recv")
        self.inner.recv(w, peer)

    def allreduce(self, w: np.ndarray, op: ReduceOp) -> bool:
        # hosts_sim has no engine all-reduce (False: the algorithm all-gathers and combines,
        # as on an engine without the op); asked, not recorded: it moves nothing
        return self.inner.allreduce(w, op)

    def reduce(self, w: np.ndarray, op: ReduceOp, root: int) -> bool:
        return self.inner.reduce(w, op, root)  # (as allreduce: the algorithm gathers)

    def gatherv(self, out: np.ndarray | None, mine: np.ndarray, counts: Sequence[int],
                root: int) -> None:
        self._note("gatherv", [(self.m[root], mine)] if self.rank != root else [], out)
        self.inner.gatherv(out, mine, counts, root)

    def scatterv(self, out: np.ndarray, ins: np.ndarray | None, counts: Sequence[int],
                 root: int) -> None:
        at = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        self._note("scatterv", [(self.m[i], ins[at[i]:at[i + 1]]) for i in self._others()]
                   if self.rank == root else [], out)
        self.inner.scatterv(out, ins, counts, root)


class _RecCtx:
    """hierarchical.Ctx of one rank with every communicator recording."""

    def __init__(self, sim: hosts_sim.SimCtx, rec: _Rank) -> None:
        lay = sim.layout
        self.layout = lay
        self.local = _RecLocal(sim.local, rec, lay.hosts[lay.host], lay.host)
        # the leaders are rail 0 (one communicator, so one matching key); named by how
        # the algorithm reached it
        self.rail = (_RecAcross(sim.rail, rec, ("rail", lay.local), f"rail {lay.local}")
                     if sim.rail is not None else None)
        self.leaders = (_RecAcross(sim.leaders, rec, ("rail", 0), "leaders")
                        if sim.leaders is not None else None)
        self.flat = self.p2p = _RecAcross(sim.flat, rec, ("flat",), "inter-host engine")


def hosts_of(shape: tuple[int, int]) -> list[list[int]]:
    """Group ranks per host for ``hosts x per_host``: host h holds ranks h*L .. h*L+L-1."""
    h, per = shape
    return [[i * per + j for j in range(per)] for i in range(h)]


def _garbage(n: int) -> np.ndarray:
    return np.full(n, np.nan, primitives.DTYPE)


def _setup(key: str, g: int, p: int, n: int
           ) -> tuple[list[tuple[str, np.ndarray]], Callable[[Any, str], None]]:
    """Rank ``g``'s visible tensors and the call of ``hierarchical`` it makes."""
    x = primitives.inputs(key, p, n)[g]
    root, counts, sum_ = primitives.ROOT, [n] * p, ReduceOp.SUM
    if key in ("all_reduce", "broadcast"):
        w = x.copy()
        fn = hier.all_reduce if key == "all_reduce" else hier.broadcast
        arg = sum_ if key == "all_reduce" else root
        return [("tensor", w)], lambda ctx, fam: fn(ctx, fam, w, arg)
    if key == "reduce":
        w = x.copy()
        # as HostSpanningGroup.reduce: a non-root's tensor stays as it was (it works on a copy)
        return [("tensor", w)], lambda ctx, fam: hier.reduce(
            ctx, fam, w if g == root else w.copy(), sum_, root)
    if key in ("all_gather", "gather", "all_to_all"):
        mine, out = x.copy(), _garbage(n * p)
        if key == "all_gather":
            return ([("input", mine), ("output", out)],
                    lambda ctx, fam: hier.all_gather(ctx, fam, out, mine, counts))
        if key == "all_to_all":
            out = _garbage(n * p)
            return ([("input", mine), ("output", out)],
                    lambda ctx, fam: hier.all_to_all(ctx, fam, out, counts, mine, counts,
                                                   uniform=True))
        outs = [out[i * n:(i + 1) * n] for i in range(p)] if g == root else None
        return ([("input", mine), ("output", out)] if g == root else [("tensor", mine)],
                lambda ctx, fam: hier.gather(ctx, fam, outs, mine, counts, root))
    if key == "reduce_scatter":
        w, out = x.copy(), _garbage(n)
        return ([("input", w), ("output", out)],
                lambda ctx, fam: hier.reduce_scatter(ctx, fam, out, w, counts, sum_))
    if key == "scatter":
        out = _garbage(n)
        if g == root:
            src = x.copy()
            ins = [src[i * n:(i + 1) * n] for i in range(p)]
            return ([("input", src), ("output", out)],
                    lambda ctx, fam: hier.scatter(ctx, fam, out, ins, counts, root))
        return [("output", out)], lambda ctx, fam: hier.scatter(ctx, fam, out, None, counts, root)
    raise KeyError(f"{key} has no hierarchical form in the guide")


def record(key: str, family: str, shape: tuple[int, int], n: int) -> list[_Rank]:
    """Run ``hierarchical``'s ``key`` with ``family`` on ``shape`` hosts, recording every rank."""
    hosts = hosts_of(shape)
    p = shape[0] * shape[1]
    ranks: list[_Rank] = []
    calls = []
    for g in range(p):
        rows, call = _setup(key, g, p, n)
        ranks.append(_Rank(g, rows))
        calls.append(call)
    before = [r.snapshot() for r in ranks]

    def one(sim: hosts_sim.SimCtx, g: int) -> None:
        # each thread touches only its own rank's record
        calls[g](_RecCtx(sim, ranks[g]), family)
        ranks[g].final = ranks[g].snapshot()

    hosts_sim.simulate(hosts, one, timeout=10.0)
    for r, b in zip(ranks, before):
        r.before = b  # type: ignore[attr-defined]
    return ranks


def _schedule(ranks: list[_Rank]) -> list[int]:
    """The step of every op, flattened rank by rank (see the module doc); 0: moves nothing."""
    nth: dict[tuple[int, tuple[Any, ...]], int] = {}
    key_of: list[list[tuple[Any, ...]]] = []
    members: dict[tuple[Any, ...], set[int]] = {}
    for r in ranks:
        keys = []
        for op in r.ops:
            k = nth.get((r.g, op["comm"]), 0)
            nth[(r.g, op["comm"])] = k + 1
            inst = (op["comm"], k)
            keys.append(inst)
            members.setdefault(inst, set()).add(r.g)
        key_of.append(keys)
    moves: dict[tuple[Any, ...], int] = {}
    for r in ranks:
        for op, inst in zip(r.ops, key_of[r.g]):
            moves[inst] = moves.get(inst, 0) + sum(b for _, b, _ in op["sends"])
    pos = [0] * len(ranks)
    level = [0] * len(ranks)
    step_of: dict[tuple[Any, ...], int] = {}
    while True:
        progressed = False
        for r in ranks:
            if pos[r.g] >= len(r.ops):
                continue
            inst = key_of[r.g][pos[r.g]]
            who = members[inst]
            if all(pos[q] < len(key_of[q]) and key_of[q][pos[q]] == inst for q in who):
                base = max(level[q] for q in who)
                s = base + 1 if moves[inst] else base
                step_of[inst] = s
                for q in who:
                    level[q], pos[q] = s, pos[q] + 1
                progressed = True
        if not progressed:
            break
    if any(pos[r.g] < len(r.ops) for r in ranks):
        raise RuntimeError("the recorded calls do not match across ranks")
    return [step_of[inst] for r in ranks for inst in key_of[r.g]]


def extract(key: str, family: str, shape: tuple[int, int], n: int) -> dict[str, Any]:
    """The animation of ``key`` with ``family`` on ``shape`` = (hosts, ranks per host).

    Returns the guide's run format (see :func:`.schedules.extract`) plus ``hosts``
    (group ranks per host); each transfer has ``link`` (shm / net / net-local) and
    ``via`` (the call it belongs to), each step ``shm_bytes``/``net_bytes`` and the
    most bytes a rank moves on each (``max_shm``/``max_net``).
    """
    ranks = record(key, family, shape, n)
    hosts = hosts_of(shape)
    host_of = {g: h for h, members in enumerate(hosts) for g in members}
    flat_steps = _schedule(ranks)
    nsteps = max(flat_steps, default=0)
    steps: list[dict[str, Any]] = [{"round": i, "wave": 0, "xfers": [], "local": [], "calls": []}
                                   for i in range(nsteps)]
    # receivers' destinations per (instance-ish) op: the op of rank d matching the comm
    it = iter(flat_steps)
    per_rank_steps = [[next(it) for _ in r.ops] for r in ranks]

    def into(d: int, comm: tuple[Any, ...], s: int) -> list[int]:
        for op, st in zip(ranks[d].ops, per_rank_steps[d]):
            if op["comm"] == comm and st == s:
                return op["into"]
        return [-1, 0, 0]

    for r in ranks:
        for op, s in zip(r.ops, per_rank_steps[r.g]):
            if not s:
                continue
            st = steps[s - 1]
            if op["via"] not in st["calls"] and any(b for _, b, _ in op["sends"]):
                st["calls"].append(op["via"])
            for d, nbytes, src in op["sends"]:
                if not nbytes:
                    # an empty piece (1 element over 2 rails: one rail's shard is empty):
                    # its call takes no step of its own, so drawing it would misplace it
                    continue
                if op["comm"][0] == "local":
                    link = "shm"
                else:
                    link = "net" if host_of[d] != host_of[r.g] else "net-local"
                st["xfers"].append({"s": r.g, "d": d, "k": "send", "bytes": nbytes,
                                    "link": link, "via": op["via"], "from": src,
                                    "to": into(d, op["comm"], s)})
    # values after step s: as each rank's next call after s found them, else its final state
    for i, st in enumerate(steps, start=1):
        vals = []
        for r in ranks:
            nxt = next((op for op, s in zip(r.ops, per_rank_steps[r.g]) if s > i), None)
            vals.append(nxt["before"] if nxt is not None else r.final)
        st["values"] = vals
        sent: dict[tuple[str, int], int] = {}
        recv: dict[tuple[str, int], int] = {}
        for x in st["xfers"]:
            kind = "shm" if x["link"] == "shm" else "net"
            sent[(kind, x["s"])] = sent.get((kind, x["s"]), 0) + x["bytes"]
            recv[(kind, x["d"])] = recv.get((kind, x["d"]), 0) + x["bytes"]
        st["bytes"] = sum(x["bytes"] for x in st["xfers"])
        st["messages"] = len(st["xfers"])
        for kind in ("shm", "net"):
            st[f"{kind}_bytes"] = sum(x["bytes"] for x in st["xfers"]
                                      if (x["link"] == "shm") == (kind == "shm"))
            st[f"max_{kind}"] = max([v for (k, _), v in sent.items() if k == kind]
                                    + [v for (k, _), v in recv.items() if k == kind] + [0])
        st["max_rank_bytes"] = max(st["max_shm"], st["max_net"])
    return {
        "key": key, "algo": family, "p": len(ranks), "n": n,
        "itemsize": primitives.DTYPE.itemsize, "hosts": hosts,
        "rows": [[[name, len(arr)] for name, arr in r.rows] for r in ranks],
        "before": [r.before for r in ranks],  # type: ignore[attr-defined]
        "steps": steps,
        "calls": sum(len(r.ops) for r in ranks),
    }


def shape_name(shape: tuple[int, int]) -> str:
    """``2x3``: the key of a shape in the page's data."""
    return f"{shape[0]}x{shape[1]}"


def guide_runs(key: str, sizes: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """The across-hosts options of a card and their runs, keyed ``key|hosts:family|HxL|n``."""
    algos, runs = [], {}
    for family in FAMILIES.get(key, ()):
        name = f"hosts:{family}"
        algos.append({"name": name, "family": "hosts", "description": DESCRIPTIONS[family]})
        for shape in SHAPES:
            for n in sizes:
                runs[f"{key}|{name}|{shape_name(shape)}|{n}"] = extract(key, family, shape, n)
    return algos, runs


__all__ = ["DESCRIPTIONS", "FAMILIES", "SHAPES", "extract", "guide_runs", "hosts_of", "record",
           "shape_name"]
