"""Faults in collectives: dead peers and timeouts become errors that name the culprit."""

from __future__ import annotations

import pytest

from meshcast.testing.world import spawn_world

from . import bodies

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("algorithm", [None, "ring"])
def test_dead_peer_in_a_collective_is_named_within_two_seconds(algorithm):
    out = spawn_world(bodies.collective_with_dying_peer, 4, timeout=60, op_timeout=30,
                      expect_failure=True, algorithm=algorithm)
    assert out[2][0] == "error"
    for r in (0, 1, 3):
        status, text = out[r]
        assert status == "ok", text
        elapsed, message = text.split("|", 1)
        assert float(elapsed) < 2.0, text
        assert "rank 2" in message, message


def test_collective_timeout_names_op_seq_and_missing_rank():
    out = spawn_world(bodies.collective_timeout, 2, timeout=60, op_timeout=1.0)
    assert "all_reduce #1" in out[0], out[0]
    assert "not heard from rank(s) [1]" in out[0], out[0]


@pytest.mark.parametrize("victim", [2, 0], ids=["member", "arena-creator"])
def test_dead_peer_during_new_group_is_named_within_two_seconds(victim):
    # op_timeout 30 s: a wait that ignored liveness would sit there and fail the 2 s bound.
    out = spawn_world(bodies.new_group_with_dead_member, 3, timeout=60, op_timeout=30,
                      expect_failure=True, victim=victim)
    assert out[victim][0] == "error"
    for r in {0, 1, 2} - {victim}:
        status, text = out[r]
        assert status == "ok", text
        elapsed, message = text.split("|", 1)
        assert float(elapsed) < 2.0, text
        assert f"rank {victim} " in message and "new_group" in message, message
