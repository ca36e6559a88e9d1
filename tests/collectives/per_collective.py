"""What every ``tests/collectives/test_<collective>.py`` runs, in one world per rank count.

:func:`run` is the rank body: for one collective (and the API functions in front
of its schedules, :data:`sweep.VARIANTS`) it runs

* the sweep (:mod:`.sweep`): the default path and every registered algorithm
  forced, every dtype x op, every root, counts 0 / 1 / 7 / 300, uneven pieces,
  against :mod:`meshcast.testing.reference`; the default path also past the
  one-shot sizes (:func:`sweep.path_count`), where the single-copy path takes over,
  with every op;
* the same with non-contiguous inputs and outputs (float32, counts 0 / 1 / 300 and
  past one-shot);
* at 2 and 3 ranks, the fast-path table (:mod:`.table_bodies`): both sides of
  every threshold of ``algorithms/_select.fast_path``, plain and symmetric
  (``meshcast.empty``) buffers, the path that ran beside the one the table names;
* at 3 ranks, the sweep again with ``async_op=True`` (past the one-shot sizes too),
  in two subgroups (roots by
  group and by global rank), in a group with 4 KiB arena slots (every algorithm
  pipelines its chunks) and in a group without the compiled helper
  (``MESHCAST_COMPILED=0``: Python's one-shot rounds and single-copy reads).

One world runs all of it because starting a world costs more than hundreds of
calls; the first wrong result raises with the exact case. :func:`check` spawns
the world and asserts which paths ran.
"""

from __future__ import annotations

import os
from typing import Any

import meshcast as dist
from meshcast.algorithms import _registry
from meshcast.testing.world import spawn_world

from . import sweep, table_bodies

#: Rank counts every collective runs at: one rank, the smallest pair, and odd counts;
#: at 5 the schedules for powers of two fold a rank in and take two steps among 4; 8 is
#: a power of two past 4 (three recursive steps) and the largest world the mission names.
SIZES = (1, 2, 3, 5, 8)
TABLE_SIZES = (2, 3)
EXTRAS_SIZE = 3
SYMMETRIC = ("broadcast", "all_reduce", "all_gather", "reduce_scatter")
# Group ranks differ from global ranks in both: roots are checked both ways.
SUBGROUPS = {"members [2, 0]": [2, 0], "members [1, 2]": [1, 2]}


def labels(coll: str) -> list[str]:
    """The swept API functions that run ``coll``'s schedules."""
    return [label for label, c in sweep.FUNCTIONS.items() if c == coll]


def _in_group_with(env: dict[str, str], **kwargs: Any) -> dict[tuple[str, str], int]:
    """The sweep in a new group of every rank made under ``env`` (the knobs read when
    a group's arena is made: MESHCAST_SLOT_BYTES, MESHCAST_COMPILED)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return sweep.sweep(members=list(range(dist.get_world_size())), **kwargs)
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def run(coll: str) -> dict[str, Any]:
    """Rank body: every phase of the module docstring that applies at this world size;
    returns each phase's ``{(function, algorithm that ran): calls}`` (the table's rows
    under ``"table"``)."""
    n = dist.get_world_size()
    colls = labels(coll)
    out: dict[str, Any] = {
        "plain": sweep.sweep(colls=colls, path_counts=True),
        "strided": sweep.sweep(colls=colls, counts=(0, 1, 300), dtype_counts=(), strided=True,
                               path_counts=True, path_ops=False),
    }
    if n in TABLE_SIZES:
        out["table"] = (table_bodies.run_table(False, kinds=(coll,))
                        + table_bodies.run_table(True, kinds=(coll,)))
    if n == EXTRAS_SIZE:
        out["async"] = sweep.sweep(colls=colls, counts=(1, 300), async_op=True,
                                   path_counts=True, path_ops=False)
        for phase, members in SUBGROUPS.items():
            out[phase] = sweep.sweep(colls=colls, members=members, counts=(0, 1, 300))
        out["4 KiB slots"] = _in_group_with({"MESHCAST_SLOT_BYTES": "4K"}, colls=colls,
                                            counts=(0, 1, 300, 5000), dtype_counts=(600,))
        out["not compiled"] = _in_group_with({"MESHCAST_COMPILED": "0"}, colls=colls,
                                             counts=(0, 1, 300), path_counts=True,
                                             path_ops=False)
    out["single copy"] = dist.group.WORLD.transport.cma_min_bytes > 0
    return out


def _never_ran(done: dict[tuple[str, str], int], coll: str, n: int) -> list[str]:
    """Registered algorithms of ``coll`` that no call of some swept function ran."""
    missing = []
    for label in labels(coll):
        for entry in _registry.entries(coll):
            if n == 1 and entry.family == "arena":
                continue  # a world of one has no arena: these refuse every call, by design
            if done.get((label, entry.name), 0) == 0:
                missing.append(f"{label}/{entry.name}")
    return missing


def _paths(done: dict[tuple[str, str], int], label: str) -> set[str]:
    """What ran calls of API function ``label``."""
    return {ran for lab, ran in done if lab == label}


def check(coll: str, n: int) -> None:
    """Run :func:`run` on ``n`` ranks and assert what ran: every registered algorithm in
    every phase, the one-shot path for small calls and the single-copy path past it
    (where the machine allows ranks to read each other's memory), and the table's
    answer at both sides of every threshold."""
    out = spawn_world(run, n, timeout=240, op_timeout=60, coll=coll)
    # Ranks choose their paths independently: they must all have chosen alike (a
    # subgroup's outsider saw nothing).
    for phase, done in out[0].items():
        if phase in SUBGROUPS:
            members = SUBGROUPS[phase]
            got = [o[phase] for q, o in enumerate(out) if q in members]
            assert all(d == got[0] for d in got), (phase, got)
            assert all(o[phase] == {} for q, o in enumerate(out) if q not in members), phase
        else:
            assert all(o[phase] == done for o in out), (phase, [o[phase] for o in out])
    first = out[0]
    for phase in ("plain", "strided", "async", *SUBGROUPS, "4 KiB slots", "not compiled"):
        if phase in first:
            if phase in SUBGROUPS:
                size, done = 2, out[SUBGROUPS[phase][0]][phase]
            else:
                size, done = n, first[phase]
            missing = _never_ran(done, coll, size)
            assert not missing, f"{phase}: never ran: {missing}"
    if n > 1:
        # small calls take the one-shot path by default, large ones the single-copy
        # path (where the machine lets ranks read each other's memory); every API
        # function of the collective does
        want = {"oneshot", "cma"} if first["single copy"] and coll != "barrier" else {"oneshot"}
        for phase in ("plain", "strided", "async", "not compiled"):
            for label in labels(coll) if phase in first else ():
                got = _paths(first[phase], label)
                assert want <= got, f"{phase}: {label} ran {sorted(got)}, not all of {want}"
    if "table" in first:
        rows = first["table"]
        wrong = [row for row in rows if row[2] != row[3]]
        assert not wrong, "\n".join(f"{k} {p} B: ran {ran}, the table says {said}"
                                    for k, p, ran, said in wrong)
        # Not vacuous: both sides of the thresholds ran (the fast paths and, past
        # them, a schedule), and the symmetric path where the collective has one.
        said = {row[3].split("/")[1] for row in rows}
        if coll != "barrier":
            assert len(said) >= 2, said
        if coll in SYMMETRIC:
            assert "symmetric" in said, said
