"""Symmetric buffers (meshcast.empty): collectives in place on shared memory, on real processes."""

from __future__ import annotations

import importlib.util

import pytest

from meshcast.testing.world import spawn_world

from . import symmetric_bodies as bodies

pytestmark = pytest.mark.timeout(180)


# The symmetric calls run their schedules as programs: in the compiled interpreter, and
# without it (MESHCAST_COMPILED=0) in Python's executor, which must give the same bytes.
@pytest.mark.parametrize("compiled", ["1", "0"])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_every_dtype_op_count_and_root_matches_numpy(n, compiled):
    counts = [0, 1, 3, 17, 1000, 70_001]
    out = spawn_world(bodies.all_reduce_and_broadcast, n, timeout=150, counts=counts,
                      env={"MESHCAST_COMPILED": compiled})
    if n > 1:
        assert set(out[0]) >= {"all_reduce/symmetric", "broadcast/symmetric"}, out[0]


@pytest.mark.parametrize("n", [2, 4])
def test_slices_shapes_async_avg_and_bitwise_identity(n):
    spawn_world(bodies.shapes_slices_and_async, n, timeout=90)


def test_subgroup_and_non_member():
    out = spawn_world(bodies.subgroup, 4, timeout=90, ranks=[1, 3])
    assert out == [False, True, False, True]


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_a_late_rank_is_waited_for(compiled):
    spawn_world(bodies.late_ranks, 3, timeout=90, sleep=0.05,
                env={"MESHCAST_COMPILED": compiled})


def test_no_stale_reads_or_writes_across_back_to_back_calls():
    spawn_world(bodies.hammer, 3, timeout=90, rounds=200)


@pytest.mark.parametrize("kind", ["plain", "offset"])
def test_ranks_passing_different_buffers_get_the_same_mismatch_error(kind):
    out = spawn_world(bodies.mixed_buffers, 3, timeout=60, op_timeout=20, kind=kind)
    assert all(o is not None for o in out), out
    assert len(set(out)) == 1, out
    assert "symmetric buffer #0 at byte 0" in out[0]
    if kind == "offset":
        assert "at byte 4096" in out[0] and "at byte 8192" in out[0]


def test_different_sizes_are_refused_on_every_rank():
    out = spawn_world(bodies.size_mismatch, 3, timeout=60, op_timeout=20)
    assert all(o is not None and "different sizes" in o for o in out), out
    assert len(set(out)) == 1


def test_bad_arguments_raise_before_anything_is_allocated():
    out = spawn_world(bodies.bad_arguments, 2, timeout=60)
    for r, lines in enumerate(out):
        assert len(lines) == 4, lines
        assert all(f"(rank {r})" in line and "empty" in line for line in lines), lines
    assert "'shape'" in out[0][0] and "'shape'" in out[0][1] and "'dtype'" in out[0][2]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_dtypes_give_tensors_on_the_same_memory():
    spawn_world(bodies.torch_tensors, 2, timeout=90)


@pytest.mark.parametrize("compiled", ["1", "0"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_all_gather_and_reduce_scatter_on_symmetric_buffers(n, compiled):
    out = spawn_world(bodies.gather_and_scatter_reduce, n, timeout=120,
                      counts=[0, 1, 5, 1000, 40_000], env={"MESHCAST_COMPILED": compiled})
    assert {"all_gather/symmetric", "reduce_scatter/symmetric"} <= set(out[0]), out[0]


def test_symmetric_all_reduce_starts_inside_the_one_shot_range():
    out = spawn_world(bodies.default_path_choice, 2, timeout=60)
    assert out[0] == ["all_reduce/symmetric", "all_reduce/oneshot", "all_reduce/oneshot"], out
