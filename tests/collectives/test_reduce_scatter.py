"""reduce_scatter and reduce_scatter_tensor: every registered algorithm and fast path,
on real processes.

Where it lives:

* the schedules: ``src/meshcast/algorithms/reduce_scatter.py``; every one registered there
  (``meshcast algorithms reduce_scatter`` lists them) runs here, forced by name, and must
  run under that name (``last_algorithm``);
* the path a call takes with no algorithm named: ``algorithms/_select.py``
  (``fast_path("reduce_scatter", ...)``, its thresholds beside it):
  the symmetric path on a ``meshcast.empty`` input from SYMMETRIC_MIN_BYTES (512 KiB);
  one-shot while the whole input passes the one-shot rule; single-copy from 64 KiB
  output pieces; otherwise the schedules;
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

from . import per_collective

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("n", per_collective.SIZES)
def test_every_algorithm_and_fast_path(n):
    per_collective.check("reduce_scatter", n)
