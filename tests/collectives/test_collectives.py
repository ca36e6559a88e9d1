"""Every collective x algorithm on real processes, against the NumPy reference."""

from __future__ import annotations

import pytest

from meshcast.algorithms import _registry
from meshcast.testing.world import spawn_world

from . import sweep

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_every_collective_and_algorithm(n):
    done = spawn_world(sweep.sweep, n, timeout=240, op_timeout=60)
    for coll in _registry.COLLECTIVES:
        assert done[0].get(coll, 0) > 0, f"{coll}: no algorithm ran"


def test_arena_chunking_with_tiny_slots():
    # 4 KiB slots: counts of 300 float32/complex128 need several pipelined chunks.
    spawn_world(sweep.sweep, 3, timeout=240, op_timeout=60,
                env={"MESHCAST_SLOT_BYTES": "4K"}, counts=(0, 1, 300, 5000), dtype_counts=(600,))
