"""Collective semantics on real processes: mismatches, bad arguments, every kind of input."""

from __future__ import annotations

import pytest

from meshcast.testing.world import spawn_world

from . import bodies

pytestmark = pytest.mark.timeout(120)

MISMATCH_TEXT = {
    "collective": ["broadcast(", "all_reduce("],
    "count": ["count=4", "count=5"],
    "dtype": ["dtype=float32", "dtype=float64"],
    "op": ["op=SUM", "op=MAX"],
    "root": ["root=0", "root=1"],
    "path": ["path#"],
    "gather_sizes": ["do not match what the ranks passed", "[3, 5, 3]"],
}


@pytest.mark.parametrize("kind", list(MISMATCH_TEXT))
def test_mismatch_is_the_same_error_on_every_rank(kind):
    out = spawn_world(bodies.mismatch, 3, timeout=60, op_timeout=20, kind=kind)
    assert all(o is not None and o.startswith("MismatchError") for o in out), out
    assert len(set(out)) == 1, out  # word for word the same
    for text in MISMATCH_TEXT[kind]:
        assert all(text in o for o in out), (text, out)


def test_all_to_all_split_disagreement_is_the_same_error_on_every_rank():
    # Split sizes are per rank; every rank publishes its own before the entry and checks
    # the whole matrix after it, so each rank raises the same MismatchError, whatever
    # path or algorithm runs the call.
    out = spawn_world(bodies.all_to_all_split_mismatch, 3, timeout=90, op_timeout=20)
    assert len(out[0]) == 8, out
    for case in zip(*out):
        assert len(set(case)) == 1, case  # same case name, same text on every rank
        error = case[0][1]
        assert error.startswith("MismatchError"), case
        assert "rank 0 sends" in error and "rank 1, which expects" in error, case


def test_group_is_unusable_after_a_mismatch():
    out = spawn_world(bodies.mismatch_then_poisoned, 2, timeout=60, op_timeout=20)
    assert all(o and "GroupAbortedError" in o and "earlier failure" in o for o in out), out


@pytest.mark.parametrize("n", [1, 3])
def test_bad_arguments_name_argument_and_rank_and_send_nothing(n):
    out = spawn_world(bodies.bad_arguments, n, timeout=60)
    for r, lines in enumerate(out):
        for line in lines:
            assert f"(rank {r})" in line, line
    text = "\n".join(out[0])
    for fragment in ("'tensor' must be a NumPy array", "'op' must be a meshcast.ReduceOp",
                     "BAND", "AVG", "MIN", "read-only", "'async_op' must be a bool",
                     "unknown algorithm 'teleport'", "'src'=", "'dst'=-1",
                     "'tensor_list' must hold", "has dtype int32", "'output_tensor' holds",
                     "'gather_list' must be a list", "'scatter_list' must be a list",
                     "'input_list' must hold", "'input' holds", "split sizes",
                     "'group' must be a ProcessGroup", "'ranks' holds"):
        assert fragment in text, fragment


@pytest.mark.parametrize("n", [1, 2, 3])
def test_noncontiguous_zero_size_0d_fp16_avg_bitwise(n):
    spawn_world(bodies.array_kinds, n, timeout=60)


@pytest.mark.parametrize("n", [1, 3])
def test_torch_tensors(n):
    pytest.importorskip("torch")
    spawn_world(bodies.torch_inputs, n, timeout=90)


def test_async_variants():
    spawn_world(bodies.async_everything, 3, timeout=60)


def test_overlapping_subgroups_and_non_members():
    out = spawn_world(bodies.overlapping_subgroups, 4, timeout=60)
    a_sum, b_sum = 0 + 1 + 2, 1 + 2 + 3
    assert out[0] == [a_sum, None] * 3
    assert out[1] == [a_sum, b_sum] * 3
    assert out[3] == [None, b_sum] * 3


@pytest.mark.parametrize("n", [1, 2, 4])
def test_object_collectives(n):
    spawn_world(bodies.objects, n, timeout=60)


@pytest.mark.parametrize("n", [1, 3])
def test_numpy_bfloat16_through_ml_dtypes(n):
    pytest.importorskip("ml_dtypes")
    spawn_world(bodies.numpy_bfloat16, n, timeout=60)


@pytest.mark.parametrize("n", [2, 3])
def test_tiny_call_lane_agrees_with_the_general_path(n):
    spawn_world(bodies.tiny_call_paths, n, timeout=90)
