"""The steps of a call across hosts, noted as its trace record's rounds.

A call of a :class:`~meshcast.spanning.HostSpanningGroup` is a composition
(:mod:`meshcast.algorithms.hierarchical`): the agreement's exchange of rows,
then calls on the host's group (shared memory) and on the inter-host
communicators (MPI or Gloo). Where the time of such a call goes is a question
of which of those steps waited: at 2 emulated hosts x 2 ranks sharing 2 cores,
every step of a 64 KiB ``rails`` all_reduce took 130-500 us where one host's
own call takes ~11 us. When ``MESHCAST_TRACE`` is set, the group hands each
call's steps a :class:`StepNotes` and the communicators wrapped by
:class:`Traced`; untraced groups never build either (nothing on the call path
asks).

A step's round says ``step`` (``agreement``, or ``<communicator>.<method>``:
``local`` the host's group, ``rail`` / ``leaders`` / ``flat`` the inter-host
communicators; a ``fused`` call's exchanges are named by what they do, e.g.
``fused.rail_all_reduce``, and where the compiled call ran them, their times
are the ones it took), ``peers`` (the global ranks the step involves, this one
left out) and ``bytes`` (the largest array handed to the step). ``send``/``recv``
stay empty: the engines choose their own messages. ``wait_ns`` is the step's
whole time, an upper bound of its waiting: an engine's call does not tell its
waits from its copies. A step posted now and waited for later (``start_*``)
ends when its wait returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any


class StepNotes:
    """The rounds list of one call's record, and how to note a step in it.

    ``ranks``: the global rank of every group rank, and ``me`` this rank's group rank
    (:meth:`peers` names a step's peers from them).
    """

    __slots__ = ("rounds", "ranks", "me")

    def __init__(self, rounds: list[dict[str, Any]], ranks: Sequence[int] = (),
                 me: int = -1) -> None:
        self.rounds, self.ranks, self.me = rounds, ranks, me

    def peers(self, members: Iterable[int]) -> list[int]:
        """The global ranks of the group ranks ``members``, this rank left out."""
        ranks, me = self.ranks, self.me
        return [ranks[g] for g in members if g != me]

    def begin(self, step: str, peers: Sequence[int], nbytes: int, at: int = 0
              ) -> dict[str, Any]:
        """Note that ``step`` starts, now or at ``time.time_ns()`` value ``at`` (in the
        list at once: a call stopped inside it shows where); pass the returned round to
        :meth:`end`."""
        rnd: dict[str, Any] = {"round": len(self.rounds), "step": step, "peers": list(peers),
                               "bytes": nbytes, "send": [], "recv": [],
                               "begin": at or time.time_ns(), "end": None, "wait_ns": None}
        self.rounds.append(rnd)
        return rnd

    @staticmethod
    def end(rnd: dict[str, Any], at: int | None = None) -> None:
        """Note that the step of ``rnd`` ended (now, or at ``time.time_ns()`` value ``at``)."""
        rnd["end"] = time.time_ns() if at is None else at
        rnd["wait_ns"] = rnd["end"] - rnd["begin"]

    @contextmanager
    def step(self, step: str, peers: Sequence[int], nbytes: int, begun: int = 0
             ) -> Iterator[None]:
        """Note ``step`` around a ``with`` block, which ends it also when it raises;
        ``begun``: when someone else started it (``time.time_ns()``'s clock), 0: now."""
        rnd = self.begin(step, peers, nbytes, begun)
        try:
            yield
        finally:
            self.end(rnd)

    def timed(self, step: str, peers: Sequence[int], nbytes: int, begin: int,
              end: int) -> None:
        """Note a step that someone else timed (the compiled fused call: see
        :mod:`meshcast.algorithms.hierarchical`), from ``begin`` to ``end``
        (``time.time_ns()``'s clock)."""
        self.end(self.begin(step, peers, nbytes, begin), end)


def _largest(args: Sequence[Any]) -> int:
    sizes = [getattr(a, "nbytes", 0) for a in args]
    sizes += [getattr(x, "nbytes", 0) for a in args if isinstance(a, (list, tuple))
              for x in a]
    return max((s for s in sizes if isinstance(s, int)), default=0)


class Traced:
    """``inner`` (a host's LocalOps or a bound inter-host communicator) whose every method
    call is a step of ``notes`` named ``<name>.<method>``; its other attributes as they are.
    """

    __slots__ = ("_inner", "_name", "_peers", "_notes")

    def __init__(self, inner: Any, name: str, peers: Sequence[int], notes: StepNotes) -> None:
        self._inner, self._name, self._peers, self._notes = inner, name, list(peers), notes

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr.startswith("_") or not callable(value):
            return value
        return self._step(attr, value)

    def _step(self, attr: str, method: Callable[..., Any]) -> Callable[..., Any]:
        notes, step, peers = self._notes, f"{self._name}.{attr}", self._peers

        def noted(*args: Any, **kwargs: Any) -> Any:
            rnd = notes.begin(step, peers, _largest(args))
            posted = attr.startswith("start_")
            try:
                result = method(*args, **kwargs)
            except BaseException:
                notes.end(rnd)
                raise
            if posted:
                return _TracedPending(result, rnd)
            notes.end(rnd)
            return result

        return noted


class _TracedPending:
    """A posted exchange whose step ends when its wait returns."""

    __slots__ = ("_inner", "_rnd")

    def __init__(self, inner: Any, rnd: dict[str, Any]) -> None:
        self._inner, self._rnd = inner, rnd

    def wait(self) -> None:
        try:
            self._inner.wait()
        finally:
            StepNotes.end(self._rnd)
