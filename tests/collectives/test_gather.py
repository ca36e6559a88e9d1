"""gather: every registered algorithm and fast path, on real processes.

Where it lives:

* the schedules: ``src/meshcast/algorithms/gather.py``; every one registered there
  (``meshcast algorithms gather`` lists them) runs here, forced by name, and must
  run under that name (``last_algorithm``);
* the path a call takes with no algorithm named: ``algorithms/_select.py``
  (``fast_path("gather", ...)``, its thresholds beside it):
  one-shot while a piece fits ``direct_bytes`` (the 1 MiB region, and 2 MiB / ``n`` for
  the root's reading) and is smaller than ``ROOTED_SINGLE_MIN_BYTES`` (256 KiB, 512 KiB
  where ranks outnumber cores); past either, single-copy from 64 KiB pieces (every rank
  writes its own piece into the root's list: one buffer when it lies back to back, else
  through a table of where each piece lies; a root in place reads part of each from
  ``ROOTED_SPLIT_MIN_BYTES``; the lane runs it compiled for NumPy calls); otherwise
  the schedules;
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
    per_collective.check("gather", n)
