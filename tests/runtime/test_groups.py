"""Process groups, barrier, broadcast, async work and call-order guarantees."""

from __future__ import annotations

import pytest

from meshcast.testing.world import spawn_world

from . import bodies

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("n", [1, 3, 4])
def test_subgroups_and_non_members(n):
    out = spawn_world(bodies.subgroups, n, timeout=60)
    for r, info in enumerate(out):
        mine = [q for q in range(n) if q % 2 == r % 2]
        assert info == {"group_rank": mine.index(r), "group_size": len(mine), "ranks": mine}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_monitored_barrier_names_the_ranks_that_did_not_come(n):
    out = spawn_world(bodies.monitored_barriers, n, timeout=60)
    for r, seen in enumerate(out):
        assert seen["keys left"] == [], seen
        assert seen["{'timeout': -1}"] is True and seen["{'wait_all_ranks': 1}"] is True, seen
        assert seen["all_reduce"] == [n * (n + 1) / 2] * 3, seen
        if n == 1:
            continue
        late = [1, 2][:n - 1]
        message, named = seen["fail fast"]
        assert named == (1,) and "rank(s) [1] did not reach it within 0.4 s" in message, seen
        message, named = seen["wait all"]
        assert named == tuple(late) and f"rank(s) {late} did not" in message, seen
        if r == 0:  # the monitor, late itself, finds everyone there
            assert seen["monitor late"] is None, seen
        else:
            message, named = seen["monitor late"]
            assert named == (0,) and "rank 0, which monitors it, gave no verdict" in message


@pytest.mark.parametrize("n", [1, 3, 4])
def test_new_subgroups_and_by_enumeration(n):
    out = spawn_world(bodies.subgroup_helpers, n, timeout=60)
    for r, info in enumerate(out):
        assert info["default"] == (1, list(range(n))), info  # one host: all its ranks
        if n % 2 == 0:
            pair = [r - r % 2, r - r % 2 + 1]
            assert info["pairs"] == (pair, float(sum(pair)), n // 2, n // 2 - 1), info
        if n > 1:
            evens = [q for q in range(n - 1) if q % 2 == 0]
            odds = [q for q in range(n - 1) if q % 2]
            assert info["enum_made"] == len([g for g in (evens, odds) if g])
            want = None if r == n - 1 else (
                (evens, float(sum(q + 1 for q in evens))) if r % 2 == 0
                else (odds, float(sum(q + 1 for q in odds))))
            assert info["enum"] == want, (r, info)
        assert info["errors"] == ["new_subgroups"] * 3 + ["new_subgroups_by_enumeration"] * 3
        assert info["after"] == float(n)
        assert info["local"] == -1, info  # (spawned with no launcher: the fallback)


def test_async_op_returns_at_once():
    posted = spawn_world(bodies.async_overlap, 2, timeout=60)
    assert max(posted) < 0.05


def test_operations_on_a_group_run_in_call_order():
    spawn_world(bodies.ordering_async_then_sync, 3, timeout=60)


def test_async_all_reduce_completes_while_the_caller_sleeps():
    # 16 MiB: a few ms per call, long enough that finishing it takes real work.
    out = spawn_world(bodies.async_all_reduce_completes_alone, 2, timeout=60, count=4 << 20)
    for r, info in enumerate(out):
        assert info["finished_alone"], (r, info)
        assert info["waited"] < 0.05, (r, info)


@pytest.mark.parametrize("n", [1, 3])
def test_tiny_calls_follow_the_default_group_across_reinit(n, tmp_path):
    out = spawn_world(bodies.tiny_calls_across_reinit, n, timeout=60,
                      store_path=str(tmp_path / "store2"))
    total = n * (n + 1) / 2
    assert out == [[total, 2 * total]] * n


@pytest.mark.parametrize("hosts", [None, [0, 1]], ids=["one host", "two hosts"])
def test_new_group_timeout_is_the_groups_own(hosts):
    """A group made with new_group(timeout=2 s) times out in about 2 s while the world's
    timeout is 40 s; on one host and across (emulated) hosts alike."""
    out = spawn_world(bodies.group_timeout, 2, timeout=80, op_timeout=40, hosts=hosts,
                      seconds=2.0)
    assert out[1] is None
    assert 1.9 <= out[0] < 15, out
