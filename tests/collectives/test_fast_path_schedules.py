"""The described schedules of the one-host fast paths are pinned to what the runtime does.

For each collective, at 2 and 3 ranks (real processes), one call per fast path the
decision table sends it down on this host (one-shot; single-copy where the kernel
allows process_vm_readv; symmetric on ``meshcast.empty`` buffers), and beside it the
registered schedule of the same name run in the simulator on the same inputs:

* the family that ran (``last_algorithm``) is the generator's name, and a described
  registry entry;
* every rank's result equals the schedule's;
* one-shot: the bytes each rank wrote into its one-shot region (the call's parity,
  read back after the call: nothing overwrites it before the call after next) equal
  the bytes the schedule ``Put`` there, byte for byte and at the same offsets;
* single-copy: the bytes each rank read from and wrote into each peer's buffer
  (``cma.read``/``cma.write`` counted in the rank, with the compiled helper off so
  that every copy goes through them) equal the schedule's ``Get``/``ReduceSlots``/
  ``Write`` bytes on the exposed space, peer by peer.

The symmetric path moves its bytes with plain loads and stores, which nothing can
count from outside: there the name and the results are pinned.
"""

from __future__ import annotations

import pytest

from meshcast.algorithms import _registry
from meshcast.testing.world import spawn_world

from . import schedule_pin_bodies as bodies

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("n", [2, 3])
def test_fast_paths_are_their_schedules(n):
    out = spawn_world(bodies.pinned, n, timeout=200, env={"MESHCAST_COMPILED": "0"},
                      paths=("oneshot", "cma", "symmetric"))
    ran = set()
    for rank, rows in enumerate(out):
        for row in rows:
            label = f"{row['kind']}/{row['path']} rank {rank} piece {row['piece']}"
            assert row["ran"] == f"{row['kind']}/{row['path']}", (label, row["ran"])
            assert not _registry.get(row["kind"], row["path"]).executed, label
            assert row["region_equal"], label
            if row["path"] != "symmetric":  # plain stores: nothing to count (module doc)
                assert row["reads"][0] == row["reads"][1], (label, row["reads"])
                assert row["writes"][0] == row["writes"][1], (label, row["writes"])
            ran.add(row["path"])
        if rank == 0:
            assert {r["kind"] for r in rows if r["path"] == "oneshot"} == set(bodies.KINDS)
            assert any(r["region_bytes"] for r in rows), "no call staged anything: vacuous"
    assert {"oneshot", "symmetric"} <= ran, ran
