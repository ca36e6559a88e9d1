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


LARGE = 600_000  # float32 elements: 2.4 MB, past the one-shot range at any world size

# Each run makes every kind of disagreement (bodies.MISMATCH_KINDS) in 3 ranks.
MISMATCH_RUNS = {
    "schedules": {"count": LARGE},
    "forced_algorithm": {"count": LARGE, "forced": True},
    "subgroup_reordered": {"count": 4, "members": [2, 0]},
    "subgroup_schedules_async": {"count": LARGE, "members": [1, 2], "async_op": True},
    "async": {"count": 4, "async_op": True},
    # non-contiguous arrays: the group's own one-shot path (its programs, compiled)
    "general_path": {"count": 4, "strided": True},
}


def _kind_text(kind: str, count: int, members: list[int]) -> list[str]:
    """What the error must say each side called, for one kind of disagreement."""
    coll = {"reduce_root": "reduce(", "gather_root": "gather(", "scatter_root": "scatter("}
    # roots are group ranks 0 and 1; the message names them by global rank, like the ranks
    return {
        "collective": ["broadcast(", "all_reduce("],
        "count": [f"count={count}", f"count={count + 1}"],
        "dtype": ["dtype=float32", "dtype=float64"],
        "op": ["op=SUM", "op=MAX"],
        "gather_or_broadcast": ["broadcast(", "gather(", f"root={members[1]}"],
        "scatter_or_broadcast": ["broadcast(", "scatter(", f"root={members[1]}"],
    }.get(kind, [coll.get(kind, "broadcast("), f"root={members[0]}", f"root={members[1]}"])


@pytest.mark.parametrize("run", list(MISMATCH_RUNS))
def test_every_kind_of_mismatch_on_every_path(run):
    kw = MISMATCH_RUNS[run]
    out = spawn_world(bodies.mismatches, 3, timeout=90, op_timeout=20, **kw)
    members = kw.get("members", [0, 1, 2])
    for q in set(range(3)) - set(members):
        assert out[q] == [], out[q]  # outside the group: no call, no error
    rows = [out[q] for q in members]
    assert [case[0] for case in rows[0]] == list(bodies.MISMATCH_KINDS), rows[0]
    for case in zip(*rows):
        assert len(set(case)) == 1, case  # same path, word for word the same error
        kind, path, error = case[0]
        assert error is not None and error.startswith("MismatchError"), case
        assert "ranks disagree about the call" in error, case
        # the message names the ranks by their global ranks, in each camp
        rest = ", ".join(map(str, members[1:]))
        assert f"rank {members[0]} called" in error, case
        assert f"rank{'s' if len(members) > 2 else ''} {rest} called" in error, case
        for text in _kind_text(kind, kw["count"], members):
            assert text in error, (text, case)
        coll, _, algorithm = path.partition("/")
        if kw.get("forced"):
            assert algorithm == bodies.FORCED[coll], case  # the forced schedule ran
        elif kw["count"] == LARGE:
            assert algorithm not in ("oneshot", ""), case  # past the one-shot path
        else:
            assert algorithm == "oneshot", case


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


def test_algorithm_spelled_with_or_without_its_collective_is_one_choice():
    # "all_reduce/ring" on one rank and "ring" on the other must not be a path mismatch
    out = spawn_world(bodies.qualified_algorithm_names, 2, timeout=60, op_timeout=20)
    assert out == [["all_reduce/ring", "broadcast/tree"]] * 2, out


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


# case of bodies.bad_arguments_everywhere -> what its error must say (at 3 ranks; the
# argument it names, quoted, whenever there is one to name).
BAD_ARGUMENT_TEXT = {
    "broadcast_object_list not a list": "'object_list' must be a list",
    "broadcast_object_list src": "'src'=3 is not a rank",
    "broadcast_object_list src and group_src": "either 'src' or 'group_src'",
    "all_gather_object unpicklable": "'obj' cannot be pickled",
    "broadcast_object_list unpicklable": "'object_list[1]' cannot be pickled",
    "all_gather_object not a list": "'object_list' must be a list",
    "all_gather_object length": "'object_list' must have 3 entries",
    "gather_object length on dst": "'object_gather_list' must have 3 entries",
    "gather_object no list on dst": "'object_gather_list' must be a list",
    "gather_object dst": "'dst'=3 is not a rank",
    "scatter_object_list empty output": "'scatter_object_output_list' must have at least one",
    "scatter_object_list output not a list": "'scatter_object_output_list' must be a list",
    "scatter_object_list input length": "'scatter_object_input_list' must have 3 entries",
    "scatter_object_list input not a list": "'scatter_object_input_list' must be a list",
    "send_object_list not a list": "'object_list' must be a list",
    "send_object_list to itself": "'dst' is this rank itself",
    "send_object_list dst": "'dst'=3 is not a rank",
    "send_object_list no dst": "'dst' is required",
    "recv_object_list not a list": "'object_list' must be a list",
    "recv_object_list from itself": "'src' is this rank itself",
    "recv_object_list src": "'src'=3 is not a rank",
    "P2POp op": "'op' must be isend or irecv",
    "P2POp blocking op": "'op' must be isend or irecv",
    "batch_isend_irecv not a list": "'p2p_op_list' must be a list of P2POp",
    "batch_isend_irecv not P2POps": "'p2p_op_list' must be a list of P2POp",
    "batch_isend_irecv peer": "'src'=3 is not a rank",
    "batch_isend_irecv to itself": "'dst' is this rank itself",
    "batch_isend_irecv tag": "'tag' must be an int",
    "get_global_rank out of range": "'group_rank'=3 is not a rank",
    "get_global_rank negative": "'group_rank'=-1 is not a rank",
    "get_global_rank not an int": "'group_rank' must be an int",
    "get_global_rank non-member": "'group' is GroupMember.NON_GROUP_MEMBER",
    "get_group_rank not a member": "is not a member of",
    "get_group_rank out of range": "'global_rank'=3 is not a member",
    "get_group_rank not an int": "'global_rank' must be an int",
    "get_group_rank non-member": "'group' is GroupMember.NON_GROUP_MEMBER",
    "scatter list length": "'scatter_list' must hold 3",
    "scatter dtype": "scatter_list[0] has dtype int32 but 'tensor' has float32",
    "scatter own piece": "holds 5 elements but 'tensor' holds 4",
    "scatter list on a non-root rank": "'scatter_list' must be None or empty",
    "scatter array on a non-root rank": "'scatter_list' must be None or empty",
    "scatter src and group_src": "either 'src' or 'group_src'",
    "gather list on a non-root rank": "'gather_list' must be None or empty",
    "gather array on a non-root rank": "'gather_list' must be None or empty",
    "gather dst and group_dst": "either 'dst' or 'group_dst'",
    "broadcast src and group_src": "either 'src' or 'group_src'",
    "reduce dst and group_dst": "either 'dst' or 'group_dst'",
    "reduce group_dst": "'group_dst'=3 is not a rank",
    "reduce group_dst bool": "'group_dst'=True is not a rank",
    "reduce op": "'op' must be a meshcast.ReduceOp",
    "reduce bxor on float": "ReduceOp.BXOR is not supported for dtype=float32",
    "reduce_scatter op": "'op' must be a meshcast.ReduceOp",
    "reduce_scatter min on complex": "ReduceOp.MIN is not supported for dtype=complex64",
    "reduce_scatter avg on bool": "ReduceOp.AVG is not supported for dtype=bool",
    "reduce_scatter_tensor dtype": "'input' has dtype int32 but 'output' has float32",
    "all_to_all input dtype": "input_tensor_list[2] has dtype int32",
    "all_to_all output dtype": "output_tensor_list[0] has dtype int32",
    "all_to_all own piece": "holds 4 elements but output_tensor_list[{r}] holds 5",
    "all_to_all_single dtype": "'output' has dtype int32 but 'input' has float32",
    "all_to_all_single input dim 0": "'input' has 4 rows along dim 0, not divisible",
    "all_to_all_single output dim 0": "'output' has 4 rows along dim 0, not divisible",
    "all_to_all_single own piece": "sends 1 elements to itself",
    "all_to_all_single split sizes type": "split sizes for 'input' must be a list",
    "all_to_all_single split sizes bool": "split sizes for 'input' must be 3 non-negative",
}


def test_bad_arguments_of_every_function_name_it_and_send_nothing():
    # Every rank makes every bad call (so no rank waits for another); each must raise
    # InvalidUsage from the function called, naming the argument and the rank, and
    # the body then proves nothing was sent (collectives, p2p and objects still line up).
    out = spawn_world(bodies.bad_arguments_everywhere, 3, timeout=60, op_timeout=20)
    for r, texts in enumerate(out):
        assert set(texts) == set(BAD_ARGUMENT_TEXT), set(texts) ^ set(BAD_ARGUMENT_TEXT)
        for case, text in texts.items():
            assert text is not None, f"{case}: no InvalidUsage on rank {r}"
            function = case.split()[0]
            assert text.startswith(f"InvalidUsage: {function}: "), (case, text)
            assert text.endswith(f"(rank {r})"), (case, text)
            assert BAD_ARGUMENT_TEXT[case].format(r=r) in text, (case, text)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_noncontiguous_zero_size_0d_fp16_avg_bitwise(n):
    spawn_world(bodies.array_kinds, n, timeout=60)


@pytest.mark.parametrize("n", [1, 3])
def test_torch_tensors(n):
    pytest.importorskip("torch")
    spawn_world(bodies.torch_inputs, n, timeout=90)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_torch_cpu_tensors_take_the_tiny_call_lane(n, tmp_path):
    # A contiguous torch CPU tensor is viewed as an ndarray and takes the compiled lane,
    # as NumPy arrays do; the trace says which calls the lane ran.
    pytest.importorskip("torch")
    from meshcast.trace import read_dir

    out = spawn_world(bodies.torch_lane, n, timeout=90, env={"MESHCAST_TRACE": str(tmp_path)})
    for t, expect in zip(read_dir(str(tmp_path)), out):
        calls = [(c["kind"], c["lane"]) for c in t.calls]
        assert calls == [tuple(e) for e in expect], (t.rank, calls)


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


@pytest.mark.parametrize("n", [2, 3])
def test_object_collectives_of_different_sizes_stay_on_the_lane(n):
    spawn_world(bodies.object_paths, n, timeout=60)


@pytest.mark.parametrize("n", [2, 3])
def test_object_collectives_of_growing_sizes_share_plans(n):
    spawn_world(bodies.object_sizes_share_plans, n, timeout=60)


@pytest.mark.parametrize("n", [1, 3])
def test_numpy_bfloat16_through_ml_dtypes(n):
    pytest.importorskip("ml_dtypes")
    spawn_world(bodies.numpy_bfloat16, n, timeout=60)


@pytest.mark.parametrize("compiled", ["1", "0"])
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("body", [bodies.tiny_call_paths, bodies.combine_kernels],
                         ids=["lane_agrees_with_the_general_path",
                              "reductions_are_bitwise_numpy_for_every_dtype_and_op"])
def test_tiny_call_lane(body, n, compiled):
    """Both with the compiled arena round and combine (transport/_tiny.c) and without:
    results, call order and refusals as on the general path, and for every (dtype, op)
    bitwise the same result as NumPy's rank-order fold."""
    out = spawn_world(body, n, timeout=120, env={"MESHCAST_COMPILED": compiled})
    assert out == [compiled == "1"] * n, out
