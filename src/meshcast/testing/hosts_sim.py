"""Every rank of a multi-host layout as a thread of this process: the hierarchical simulator.

``simulate(hosts, fn)`` builds a :class:`~meshcast.algorithms.hierarchical.Layout`
from ``hosts`` (group ranks per host, e.g. ``[[0, 1], [2, 3]]`` or the
uneven ``[[0, 2, 3], [1]]``), gives each rank a context whose local phase and
inter-host communicators exchange NumPy arrays in memory, runs
``fn(ctx, rank)`` on one thread per rank and returns the results in rank
order. The algorithms cannot tell it from the real group: the same code
(:mod:`meshcast.algorithms.hierarchical`) runs here for any hosts x ranks
shape in milliseconds, with no processes, sockets or shared memory.

Each simulated exchange checks what a real engine would refuse (members
calling different operations, counts that disagree) and raises instead of
hanging; a rank that never arrives fails the others after ``timeout``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..algorithms.hierarchical import Layout
from ..ops import ReduceOp, reduce_many
from ..transport.interhost import place


class _Exchange:
    """Matches the n members' k-th calls and hands every member all n contributions."""

    def __init__(self, n: int, timeout: float) -> None:
        self.n, self.timeout = n, timeout
        self.cv = threading.Condition()
        self.calls = [0] * n
        self.rounds: dict[int, dict[int, Any]] = {}
        self.read: dict[int, int] = {}

    def __call__(self, me: int, verb: str, value: Any) -> list[Any]:
        with self.cv:
            k = self.calls[me]
            self.calls[me] += 1
            slot = self.rounds.setdefault(k, {})
            slot[me] = (verb, value)
            self.cv.notify_all()
            if not self.cv.wait_for(lambda: len(slot) == self.n, self.timeout):
                raise TimeoutError(f"simulated {verb} #{k}: members {sorted(slot)} of "
                                   f"{self.n} arrived")
            verbs = {v for v, _ in slot.values()}
            if len(verbs) > 1:
                raise AssertionError(f"simulated exchange #{k}: members called {verbs}")
            out = [slot[i][1] for i in range(self.n)]
            self.read[k] = self.read.get(k, 0) + 1
            if self.read[k] == self.n:
                del self.rounds[k], self.read[k]
            return out


class _Done:
    """A posted exchange that the simulation already carried out."""

    def wait(self) -> None:
        pass


class SimAcross:
    """An in-memory inter-host communicator (hierarchical.Across)."""

    #: small, so that the simulated families run their chunked pipelines too
    pipeline_chunk = 64

    def __init__(self, exchange: _Exchange, mailboxes: dict, members: Sequence[int],
                 rank: int) -> None:
        self.x, self.mail, self.members = exchange, mailboxes, list(members)
        self.size, self.rank = len(members), rank

    def allgatherv(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int]) -> None:
        got = self.x(self.rank, "allgatherv", (mine.copy(), list(counts)))
        assert all(c == list(counts) for _, c in got), "allgatherv counts disagree"
        out[:] = np.concatenate([m for m, _ in got]) if got else out

    def start_allgatherv(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int],
                         displs: Sequence[int]) -> _Done:
        packed = np.empty(sum(counts), out.dtype)
        self.allgatherv(packed, mine, counts)
        place(out, packed, counts, displs)
        return _Done()

    def alltoallv(self, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                  send_counts: Sequence[int], uniform: bool = False) -> None:
        got = self.x(self.rank, "alltoallv", (inp.copy(), list(send_counts), uniform))
        pieces = []
        # an engine's plain all-to-all beside its v-form on another member would hang
        assert len({u for _, _, u in got}) == 1, "members disagree about 'uniform'"
        for src, (data, sends, even) in enumerate(got):
            assert not even or len(set(sends)) <= 1, "'uniform' with uneven counts"
            at = sum(sends[:self.rank])
            assert sends[self.rank] == recv_counts[src], "alltoallv counts disagree"
            pieces.append(data[at:at + sends[self.rank]])
        out[:] = np.concatenate(pieces)

    def start_alltoallv(self, out: np.ndarray, recv_counts: Sequence[int], inp: np.ndarray,
                        send_counts: Sequence[int], uniform: bool = False) -> _Done:
        self.alltoallv(out, recv_counts, inp, send_counts, uniform)
        return _Done()

    def bcast(self, w: np.ndarray, root: int) -> None:
        got = self.x(self.rank, "bcast", w.copy() if self.rank == root else None)
        w[:] = got[root]

    def start_bcast(self, w: np.ndarray, root: int) -> _Done:
        self.bcast(w, root)
        return _Done()

    def send(self, w: np.ndarray, peer: int) -> None:
        key = (self.members[self.rank], self.members[peer])
        with self.mail["cv"]:
            self.mail.setdefault(key, []).append(w.copy())
            self.mail["cv"].notify_all()

    def recv(self, w: np.ndarray, peer: int) -> None:
        key = (self.members[peer], self.members[self.rank])
        cv = self.mail["cv"]
        with cv:
            if not cv.wait_for(lambda: self.mail.get(key), 10):
                raise TimeoutError(f"simulated recv {key}: nothing came")
            w[:] = self.mail[key].pop(0)

    def allreduce(self, w: np.ndarray, op: ReduceOp) -> bool:
        return False  # the algorithms combine themselves, as on engines without the op

    def reduce(self, w: np.ndarray, op: ReduceOp, root: int) -> bool:
        return False  # (as allreduce)

    def gatherv(self, out: np.ndarray | None, mine: np.ndarray, counts: Sequence[int],
                root: int) -> None:
        got = self.x(self.rank, "gatherv", (mine.copy(), list(counts)))
        assert all(c == list(counts) for _, c in got), "gatherv counts disagree"
        assert all(m.size == c for (m, _), c in zip(got, counts)), "gatherv sizes disagree"
        if self.rank == root:
            out[:] = np.concatenate([m for m, _ in got]) if got else out

    def scatterv(self, out: np.ndarray, ins: np.ndarray | None, counts: Sequence[int],
                 root: int) -> None:
        got = self.x(self.rank, "scatterv", (ins.copy() if self.rank == root else None,
                                             list(counts)))
        assert all(c == list(counts) for _, c in got), "scatterv counts disagree"
        at = sum(counts[:self.rank])
        out[:] = got[root][0][at:at + counts[self.rank]]

    def exchange(self, recvs: Sequence[tuple[int, np.ndarray]],
                 sends: Sequence[tuple[int, np.ndarray]], settled: bool = False) -> bool:
        for peer, a in sends:
            self.send(a.reshape(-1).view(np.uint8), peer)
        whole = True
        for peer, a in recvs:
            key = (self.members[peer], self.members[self.rank])
            cv = self.mail["cv"]
            with cv:
                if not cv.wait_for(lambda key=key: self.mail.get(key), 10):
                    raise TimeoutError(f"simulated exchange {key}: nothing came")
                got = self.mail[key].pop(0)
            into = a.reshape(-1).view(np.uint8)
            whole = whole and got.size <= into.size  # a longer message is refused
            into[:min(got.size, into.size)] = got[:into.size]
        return whole

    def prepare(self, recvs: Sequence[tuple[int, np.ndarray]],
                sends: Sequence[tuple[int, np.ndarray]]) -> Any:
        return recvs, sends

    def run(self, prepared: Any, settled: bool = False, started: Any = None) -> bool:
        return self.exchange(*prepared, settled)


class SimLocal:
    """In-memory collectives among one host's ranks (hierarchical.LocalOps)."""

    def __init__(self, exchange: _Exchange, rank: int, size: int) -> None:
        self.x, self.rank, self.size = exchange, rank, size

    def reduce(self, w: np.ndarray, op: ReduceOp, root: int) -> None:
        got = self.x(self.rank, "reduce", w.copy())
        if self.rank == root and len(got) > 1:
            reduce_many(op, w, got)

    def broadcast(self, w: np.ndarray, root: int) -> None:
        got = self.x(self.rank, "broadcast", w.copy() if self.rank == root else None)
        w[:] = got[root]

    def all_gather(self, out: np.ndarray, mine: np.ndarray, counts: Sequence[int]) -> None:
        got = self.x(self.rank, "all_gather", mine.copy())
        assert [g.size for g in got] == list(counts), "local all_gather counts disagree"
        out[:] = np.concatenate(got)

    def reduce_scatter(self, out: np.ndarray, w: np.ndarray, counts: Sequence[int],
                       op: ReduceOp) -> None:
        got = self.x(self.rank, "reduce_scatter", w.copy())
        total = np.empty_like(w)
        reduce_many(op, total, got)
        at = sum(counts[:self.rank])
        out[:] = total[at:at + counts[self.rank]]

    def gather(self, outs: list[np.ndarray] | None, mine: np.ndarray, root: int) -> None:
        got = self.x(self.rank, "gather", mine.copy())
        if outs is not None:
            for o, g in zip(outs, got):
                o[:] = g

    def scatter(self, out: np.ndarray, ins: list[np.ndarray] | None, root: int) -> None:
        got = self.x(self.rank, "scatter", [i.copy() for i in ins] if ins is not None else None)
        out[:] = got[root][self.rank]


class SimCtx:
    """hierarchical.Ctx for one simulated rank."""

    def __init__(self, layout: Layout, local: SimLocal, rail: SimAcross | None,
                 flat: SimAcross) -> None:
        self.layout, self.local, self.rail, self.flat, self.p2p = layout, local, rail, flat, flat
        self.leaders = rail if layout.local == 0 else None
        self.notes = None  # (a traced call's step notes: the simulator traces nothing)


def simulate(hosts: Sequence[Sequence[int]], fn: Callable[[SimCtx, int], Any],
             timeout: float = 20.0) -> list[Any]:
    """Run ``fn(ctx, group_rank)`` for every rank of ``hosts``; return results in rank order.

    Raises:
        the first rank's exception (with the rank named in a note).
    """
    hosts = tuple(tuple(h) for h in hosts)
    n = sum(len(h) for h in hosts)
    mail: dict = {"cv": threading.Condition()}
    flat_x = _Exchange(n, timeout)
    local_x = [_Exchange(len(h), timeout) for h in hosts]
    most = max(len(h) for h in hosts)
    rails = [[h[j] for h in hosts if len(h) > j] for j in range(most)]
    rail_x = [_Exchange(len(r), timeout) for r in rails]
    results: list[Any] = [None] * n
    errors: dict[int, BaseException] = {}

    def one(g: int) -> None:
        lay = Layout(hosts, g)
        members = rails[lay.local]
        rail = (SimAcross(rail_x[lay.local], mail, members, members.index(g))
                if len(members) > 1 else None)
        ctx = SimCtx(lay, SimLocal(local_x[lay.host], lay.local, len(hosts[lay.host])), rail,
                     SimAcross(flat_x, mail, list(range(n)), g))
        try:
            results[g] = fn(ctx, g)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors[g] = exc

    threads = [threading.Thread(target=one, args=(g,), daemon=True) for g in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    if errors:
        g = min(errors)
        exc = errors[g]
        exc.add_note(f"(simulated rank {g} of hosts {hosts})")
        raise exc
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"simulated ranks still running after {timeout} s: hosts {hosts}")
    return results


__all__ = ["SimAcross", "SimCtx", "SimLocal", "simulate"]
