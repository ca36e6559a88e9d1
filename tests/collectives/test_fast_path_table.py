"""The fast paths' table (algorithms/_select.fast_path) is what runs, on both sides
of every threshold, for every collective, on real processes."""

from __future__ import annotations

import pytest

from meshcast.testing.world import spawn_world

from . import table_bodies

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("symmetric", [False, True], ids=["plain", "symmetric"])
def test_the_table_says_what_runs(n, symmetric):
    out = spawn_world(table_bodies.run_table, n, timeout=200, symmetric=symmetric)
    rows = out[0]
    assert all(o == rows for o in out[1:])  # every rank took the same paths
    wrong = [row for row in rows if row[2] != row[3]]
    assert not wrong, "\n".join(f"{k} {p} B: ran {ran}, the table says {said}"
                                for k, p, ran, said in wrong)
    # Not vacuous: every kind with a threshold shows both of its sides.
    for kind in {row[0] for row in rows} - {"barrier"}:
        answers = {row[3] for row in rows if row[0] == kind}
        assert len(answers) >= 2, (kind, answers)
