"""The trace file format: what ``MESHCAST_TRACE=DIR`` writes, and how to read it back.

Every process writes one file, ``DIR/rank-<global rank, 5 digits>.jsonl``, one
JSON object per line. The first line is the header; then, in the order they
happened on that rank, group lines (the first time a group is used) and call
lines. Times are ``time.time_ns()`` (wall clock, nanoseconds), so files of
ranks on different hosts merge into one timeline as well as the hosts' clocks
agree.

Lines (``"type"`` says which)::

    header  version, rank, world_size, host, pid, start (ns), meshcast (version)
    group   group (name), id, ranks (global ranks in group-rank order),
            engine ("shm": one host; "shm+mpi" / "shm+gloo": across hosts)
    call    group, seq, kind, dtype, count, bytes, root, peer, tag, op,
            algorithm, family, lane, compiled, async, begin, end, error, rounds

``call`` fields:

* ``seq``: the group's call number; collective ``seq`` is the same call on
  every member (that is how ranks' records are matched). Point-to-point calls
  (``kind`` ``send``/``recv``) count separately (``seq`` numbers them per rank).
* ``kind``: ``barrier``, ``broadcast``, ``reduce``, ``all_reduce``, ``gather``,
  ``all_gather``, ``scatter``, ``reduce_scatter``, ``all_to_all``, ``send``,
  ``recv``.
* ``dtype``, ``count``, ``bytes``: this rank's input (the piece it contributes;
  for scatter and recv the buffer it receives into).
* ``root`` (rooted collectives) and ``peer`` (point-to-point; for a recv from
  any source, null) are *global* ranks; ``tag`` for point-to-point.
* ``op``: the reduce op's name for reducing collectives, else null.
* ``algorithm``: what ran, ``<kind>/<name>`` (``all_reduce/oneshot``,
  ``all_reduce/ring``, ``all_reduce/leader``...); ``family``: ``oneshot``,
  ``single_copy``, ``symmetric``, ``schedule`` (a registered schedule run by
  the executor), ``eager``/``agreement``/``hierarchical``/``internode``
  (across hosts) or ``p2p``. Both are null for a call that failed before it
  chose (in its entry round, where every rank checks that all arrived and
  agree).
* ``lane``: the tiny-call lane ran it. ``compiled``: the compiled helper
  (transport/_tiny.c) did the call's work, fold included: the lane's compiled
  round, or, off the lane, a one-shot program run by the compiled interpreter
  (``Round.program``) instead of Python's steps.
* ``async``: the call returned a Work; ``end`` is when that work completed.
* ``begin``/``end``: ns; ``end`` is null when the call had not finished when
  the file was written (the rank was stopped inside it: see the hang view). A
  call written unfinished is written again when it finishes; readers keep the
  last line for a (group, kind, seq) (:func:`read_rank` does).
* ``error``: the exception's type and text, or null.
* ``rounds``: for schedules, one entry per round: ``{"round": i, "send":
  [[peer, bytes], ...], "recv": [[peer, bytes], ...], "begin": ns, "end": ns,
  "wait_ns": ns}`` (peers are global ranks; ``wait_ns`` is the time spent
  waiting for the round's messages and signals). A round is noted when it
  starts: one with ``end`` null is where the call failed or was stopped.
  Other families run one entry round (plus, for single-copy, a closing one)
  and leave this empty. Across hosts, a call past the eager size lists its
  steps instead (:mod:`meshcast.trace.steps`): ``{"round": i, "step":
  "agreement" | "<communicator>.<method>" | "fused.<what>", "peers": [global
  ranks], "bytes": n, "send": [], "recv": [], "begin", "end", "wait_ns"}``,
  ``wait_ns`` being the step's whole time. A call whose data rides in the
  agreement lists at most that step (none through the tiny-call lane); a
  fused one its exchanges (``fused.local_reduce_scatter``,
  ``fused.rail_all_reduce`` / ``fused.rail_reduce_scatter``,
  ``fused.local_all_gather``; ``fused.all_to_all``), timed by the compiled
  call where it ran them.
* point-to-point calls have ``algorithm`` null and ``family`` ``"p2p"``.

Calls a group makes on its inner groups (a group spanning hosts calls its
host's group) are recorded as calls of those groups, whose names say so
(``"WORLD on host-a"``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

VERSION = 1
KINDS = ("barrier", "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
         "reduce_scatter", "all_to_all", "send", "recv")


def file_name(rank: int) -> str:
    """The trace file of global rank ``rank`` inside the trace directory."""
    return f"rank-{rank:05d}.jsonl"


@dataclass
class RankTrace:
    """One rank's file: its header, its groups (by name) and its calls in order."""

    header: dict[str, Any]
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return int(self.header["rank"])


def read_rank(path: str) -> RankTrace:
    """Parse one rank's trace file.

    Raises:
        ValueError: the file is not a meshcast trace, or of a version this
            meshcast does not read (names the file and the line).
    """
    trace: RankTrace | None = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                if trace is not None and number > 1 and not line.endswith("\n"):
                    break  # the last line of a rank killed while writing
                raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
            kind = rec.get("type")
            if trace is None:
                if kind != "header":
                    raise ValueError(f"{path}:{number}: expected a header line first")
                if rec.get("version") != VERSION:
                    raise ValueError(f"{path}: trace version {rec.get('version')!r}; this "
                                     f"meshcast reads version {VERSION}")
                trace = RankTrace(rec)
            elif kind == "group":
                trace.groups[rec["group"]] = rec
            elif kind == "call":
                trace.calls.append(rec)
    if trace is None:
        raise ValueError(f"{path}: empty trace file")
    trace.calls = _latest(trace.calls)
    return trace


def _latest(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A call written while running (``end: null``) and again once finished: keep the
    last line, at the first one's place."""
    where: dict[tuple[str, str, int], int] = {}
    kept: list[dict[str, Any]] = []
    for c in calls:
        key = (c["group"], c["kind"], c["seq"])
        if c["seq"] is not None and key in where:
            kept[where[key]] = c
            continue
        if c["seq"] is not None:
            where[key] = len(kept)
        kept.append(c)
    return kept


def read_dir(directory: str) -> list[RankTrace]:
    """Every rank's trace in ``directory``, by rank. An empty file (a rank killed before
    its header reached the disk) is left out: that rank is missing, not unreadable.

    Raises:
        FileNotFoundError: no trace files there.
        ValueError: a file is not a readable trace (see :func:`read_rank`), or every
            file is empty.
    """
    names = sorted(n for n in os.listdir(directory)
                   if n.startswith("rank-") and n.endswith(".jsonl"))
    if not names:
        raise FileNotFoundError(f"no meshcast trace files (rank-*.jsonl) in {directory}")
    paths = [os.path.join(directory, n) for n in names]
    traces = [read_rank(p) for p in paths if os.path.getsize(p) > 0]
    if not traces:
        raise ValueError(f"every trace file in {directory} is empty")
    return sorted(traces, key=lambda t: t.rank)


def calls_by_key(traces: list[RankTrace]
                 ) -> Iterator[tuple[tuple[str, int], dict[int, dict[str, Any]]]]:
    """Collective calls matched across ranks: ``((group, seq), {rank: call})``, in
    order of first begin. Ranks that disagreed on the call (a mismatch) still
    share the key: compare their ``kind``. Point-to-point calls are not matched
    (their seq is per rank)."""
    matched: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    first: dict[tuple[str, int], int] = {}
    for t in traces:
        for c in t.calls:
            if c["kind"] in ("send", "recv"):
                continue
            key = (c["group"], c["seq"])
            matched.setdefault(key, {})[t.rank] = c
            first[key] = min(first.get(key, c["begin"]), c["begin"])
    for key in sorted(matched, key=lambda k: first[k]):
        yield key, matched[key]
