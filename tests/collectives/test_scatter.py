"""scatter: every registered algorithm and fast path, on real processes.

Where it lives:

* the schedules: ``src/meshcast/algorithms/scatter.py``; every one registered there
  (``meshcast algorithms scatter`` lists them) runs here, forced by name, and must
  run under that name (``last_algorithm``);
* the path a call takes with no algorithm named: ``algorithms/_select.py``
  (``fast_path("scatter", ...)``, its thresholds beside it):
  one-shot while the root's pieces together fit its 1 MiB region and a piece is smaller
  than ``ROOTED_SINGLE_MIN_BYTES`` (256 KiB, 512 KiB where ranks outnumber cores); past
  either, single-copy from 64 KiB pieces (each rank reads its piece from the root's
  list; a root in place writes part of each from ``ROOTED_SPLIT_MIN_BYTES``; the lane
  runs it compiled for NumPy calls); otherwise the schedules;
* the engine: ``transport/arena.py`` (the group's signal words, fingerprints,
  one-shot regions and slots; its compiled round in ``transport/_tiny.c``),
  ``transport/shm.py`` (the rings the p2p schedules send through) and
  ``transport/cma.py`` (single-copy reads). Their own checks: ``tests/transport``.

What one world runs (every algorithm and path, dtype x op, root, zero-size and
non-contiguous arrays, against meshcast.testing.reference; at 2 and 3 ranks the
fast-path table on both sides of every threshold; at 3 ranks async, subgroups, 4 KiB
slots and no compiled helper) is in ``per_collective.py``; the first wrong result fails
with its exact case. Across collectives: test_fast_paths.py (the tiny-call lane beside
the general path, hand-overs, a random mix), test_symmetric.py, test_semantics.py,
test_numerics.py.
"""

from __future__ import annotations

import pytest

from meshcast.algorithms import _select
from meshcast.testing.world import spawn_world

from . import fast_path_bodies, per_collective

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("n", per_collective.SIZES)
def test_every_algorithm_and_fast_path(n):
    per_collective.check("scatter", n)


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_a_root_with_large_pieces_copies_its_own_directly(compiled):
    """Both sides of _select.SCATTER_ROOT_DIRECT_BYTES, every root, 3 ranks, with and
    without the compiled helper: the root's own piece never passes through its region
    (the compiled entry copies it straight into place at every size), also when the
    root's out is that piece, and pieces of an equal dtype take the lane too."""
    edge = _select.SCATTER_ROOT_DIRECT_BYTES // 4
    out = spawn_world(fast_path_bodies.scatter_root_pieces, 3, timeout=120,
                      env={"MESHCAST_COMPILED": compiled}, sizes=(edge - 1, edge, 3 * edge))
    assert all(seen == ["scatter/oneshot"] * 18 for seen in out), out
