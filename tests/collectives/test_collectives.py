"""Every collective x algorithm on real processes, against the NumPy reference."""

from __future__ import annotations

import pytest

from meshcast.algorithms import _registry
from meshcast.testing.world import spawn_world

from . import sweep

pytestmark = pytest.mark.timeout(300)


def _never_ran(done: dict[tuple[str, str], int], n: int) -> list[str]:
    """Registered algorithms that no call of some swept function ran."""
    missing = []
    for label, coll in sweep.FUNCTIONS.items():
        for entry in _registry.entries(coll):
            if n == 1 and entry.family == "arena":
                continue  # a world of one has no arena: these refuse every call, by design
            if done.get((label, entry.name), 0) == 0:
                missing.append(f"{label}/{entry.name}")
    return missing


def _same_paths_everywhere(out: list[dict]) -> dict[tuple[str, str], int]:
    # Ranks choose their paths independently: they must all have chosen alike.
    assert all(d == out[0] for d in out), out
    return out[0]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_every_collective_and_algorithm(n):
    done = _same_paths_everywhere(spawn_world(sweep.sweep, n, timeout=240, op_timeout=60))
    assert not _never_ran(done, n), f"never ran: {_never_ran(done, n)}"
    if n > 1:  # small calls take the one-shot path by default, for every function
        assert {label for label, ran in done if ran == "oneshot"} == set(sweep.FUNCTIONS), done


def test_every_collective_async():
    # Every function and algorithm with async_op=True: the Work carries the result.
    done = _same_paths_everywhere(spawn_world(sweep.sweep, 3, timeout=240, op_timeout=60,
                                              counts=(1, 300), async_op=True))
    assert not _never_ran(done, 3), f"never ran: {_never_ran(done, 3)}"


@pytest.mark.parametrize("members", [[2, 0], [1, 2]])
def test_rooted_collectives_in_a_subgroup_translate_roots(members):
    # Group ranks differ from global ranks: roots are passed both ways (src=global,
    # group_src=group rank) and every result is checked in group-rank order.
    out = spawn_world(sweep.sweep, 3, timeout=240, op_timeout=60, members=members,
                      colls=sweep.ROOTED, counts=(0, 1, 300))
    outsider = ({0, 1, 2} - set(members)).pop()
    assert out[outsider] == {}, out[outsider]
    done = _same_paths_everywhere([out[q] for q in members])
    missing = [m for m in _never_ran(done, 2) if m.split("/")[0] in sweep.ROOTED]
    assert not missing, f"never ran: {missing}"


def test_arena_chunking_with_tiny_slots():
    # 4 KiB slots: counts of 300 float32/complex128 need several pipelined chunks.
    spawn_world(sweep.sweep, 3, timeout=240, op_timeout=60,
                env={"MESHCAST_SLOT_BYTES": "4K"}, counts=(0, 1, 300, 5000), dtype_counts=(600,))
