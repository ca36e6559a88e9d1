"""Random programs of every call (``random_programs.py``) on real processes, against the
oracle: one host at several world sizes, with torch tensors, and worlds posing as
several hosts (shared memory inside each, Gloo over loopback between them). The real
emulated hosts run the same body in tests/multihost."""

from __future__ import annotations

import pytest

from meshcast.testing.world import spawn_world

from . import random_programs

pytestmark = pytest.mark.timeout(240)

RUNS = {
    "1 rank": dict(n=1, seed=1),
    "2 ranks": dict(n=2, seed=2),
    "3 ranks": dict(n=3, seed=3),
    "5 ranks torch": dict(n=5, seed=5, torch_tensors=True),
    "8 ranks": dict(n=8, seed=8, calls=300),
    "2x2 hosts": dict(n=4, seed=22, hosts=[0, 0, 1, 1]),
    "3+1 hosts": dict(n=4, seed=31, hosts=[0, 0, 1, 0]),
}


@pytest.mark.parametrize("run", RUNS)
def test_random_program_matches_the_oracle(run):
    kw = dict(RUNS[run])
    n, hosts = kw.pop("n"), kw.pop("hosts", None)
    if kw.get("torch_tensors"):
        pytest.importorskip("torch")
    kw.setdefault("calls", 800)
    made = spawn_world(random_programs.random_program, n, timeout=200, op_timeout=60,
                       hosts=hosts, **kw)
    world = made[0]
    # the program is not trivial: the world itself made most kinds of call
    assert len(world) >= 12 and sum(world.values()) >= kw["calls"] // 4, made
