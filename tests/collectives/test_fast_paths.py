"""The group's fast paths (one-shot and single-copy) across collectives on real processes:
the tiny-call lane beside the general path, hand-overs, chunked and in-place lists, a
random mix, MESHCAST_ALGO, and the schedules when single-copy is off.

Each collective's own paths (one-shot, single-copy and symmetric at every rank count,
root, dtype and op, and the fast-path table's thresholds) are in
tests/collectives/test_<collective>.py."""

from __future__ import annotations

import pytest

from meshcast.testing.world import WorldFailure, spawn_world

from . import fast_path_bodies as bodies

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def single_copy() -> None:
    """Skip a test of the single-copy paths where ranks may not read each other's memory
    (e.g. Yama ptrace_scope 1 between sibling processes): meshcast then falls back to the
    arena, which test_without_single_copy_the_schedules_run covers."""
    if not all(spawn_world(bodies.single_copy_enabled, 2, timeout=60)):
        pytest.skip("process_vm_readv between ranks is not permitted on this machine")


def _paths(seen: list[str]) -> set[str]:
    return {name.split("/")[1] for name in seen}


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("base", [bodies.SMALL, bodies.LARGE])
def test_chunked_lists_and_in_place_all_to_all(n, base, request):
    if base == bodies.LARGE:
        request.getfixturevalue("single_copy")
    out = spawn_world(bodies.chunked_and_in_place, n, timeout=180, base=base)
    assert _paths(out[0]) == ({"oneshot"} if base == bodies.SMALL else {"cma"}), out[0]


def test_single_copy_all_reduce_mixed_with_the_lane(single_copy):
    # Every op, dtype and root at these sizes runs in test_all_reduce.py and
    # test_reduce.py; this adds a rank on the tiny-call lane's entry beside ranks on
    # the general path, and float16 MAX on reduce.
    out = spawn_world(bodies.large_all_reduces, 2, timeout=180)
    assert _paths(out[0]) == {"cma"}, out[0]


def test_without_single_copy_the_schedules_run():
    env = {"MESHCAST_CMA_BYTES": "0"}
    out = spawn_world(bodies.rooted_and_gathering, 3, timeout=180, env=env, base=bodies.LARGE)
    assert "cma" not in _paths(out[0]), out[0]
    out = spawn_world(bodies.all_to_alls, 3, timeout=180, env=env, base=bodies.LARGE)
    assert _paths(out[0]) == {"arena"}, out[0]
    out = spawn_world(bodies.large_all_reduces, 3, timeout=180, env=env)
    assert _paths(out[0]) == {"arena"}, out[0]


def test_meshcast_algo_applies_to_tiny_calls():
    env = {"MESHCAST_ALGO": "all_reduce:ring;broadcast:tree"}
    out = spawn_world(bodies.algo_env_picks_schedules, 3, timeout=120, env=env)
    assert out[0] == ["all_reduce/ring", "broadcast/tree", "all_gather/oneshot"], out[0]


def test_malformed_meshcast_algo_fails_at_init():
    with pytest.raises(WorldFailure) as info:
        spawn_world(bodies.algo_env_picks_schedules, 2, timeout=60,
                    env={"MESHCAST_ALGO": "all_reduce:teleport"})
    assert "teleport" in str(info.value) and "MESHCAST_ALGO" in str(info.value)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_all_to_all_lane_mixes_with_the_general_path_and_hands_over(n):
    out = spawn_world(bodies.all_to_all_lane, n, timeout=180, base=bodies.LARGE)
    assert out[0][:3] == ["all_to_all/oneshot"] * 3, out[0]
    # uneven counts leave the one-shot range: single-copy where allowed, else a schedule
    assert all(s.split("/")[1] in ("cma", "arena", "pairwise") for s in out[0][3:]), out[0]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_uneven_all_to_all_takes_the_lane(n):
    out = spawn_world(bodies.uneven_all_to_all_lane, n, timeout=120, base=bodies.LARGE)
    for seen in out:
        assert seen[:10] == ["all_to_all/oneshot"] * 10, seen
        # too large to stage on one rank: single-copy where allowed, else a schedule
        assert seen[10].split("/")[1] in ("cma", "arena", "pairwise"), seen
        assert seen[11:] == ["all_to_all/oneshot", "mismatch: True"], seen


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("uneven_refused", [False, True])
def test_all_to_all_past_one_shot_takes_the_lane_and_mixes_with_the_general_path(
        n, uneven_refused, single_copy):
    out = spawn_world(bodies.all_to_all_past_one_shot, n, timeout=120, base=bodies.LARGE,
                      uneven_refused=uneven_refused)
    paths = 8 if uneven_refused else 9 + 2 * (n >= 3)
    assert all(seen == ["all_to_all/cma"] * paths + ["mismatch: True"] for seen in out), out


@pytest.mark.parametrize("n, compiled", [(2, "1"), (3, "1"), (5, "1"), (3, "0")])
def test_gather_scatter_lane_mixes_with_the_general_path_and_hands_over(n, compiled):
    """With the compiled entry round (transport/_tiny.c) and with Python's."""
    out = spawn_world(bodies.rooted_lane, n, timeout=180, base=bodies.LARGE,
                      env={"MESHCAST_COMPILED": compiled})
    even = 4 * n  # the calls with pieces all alike
    assert set(out[0][:even]) == {"gather/oneshot", "scatter/oneshot"}, out[0]
    # the uneven calls leave the one-shot range: single-copy where allowed, else a schedule
    assert all(s.split("/")[1] != "oneshot" for s in out[0][even:]), out[0]


@pytest.mark.parametrize("n", [2, 3])
def test_lanes_past_one_shot_mix_with_the_general_path(n, single_copy):
    out = spawn_world(bodies.lanes_past_one_shot, n, timeout=120, base=bodies.LARGE)
    assert all(seen == ["all_gather/cma"] * 2 + ["reduce_scatter/cma"] * 3 + ["mismatch: True"]
               for seen in out), out


@pytest.mark.parametrize("kind", ["gather", "scatter"])
@pytest.mark.parametrize("n, compiled, base", [
    (2, "1", bodies.LARGE), (3, "1", bodies.LARGE), (3, "0", bodies.LARGE)])
def test_rooted_past_one_shot_takes_the_lane_and_mixes_with_the_general_path(
        kind, n, compiled, base, single_copy):
    """With the compiled entry and copies (transport/_tiny.c) and with Python's."""
    out = spawn_world(getattr(bodies, f"{kind}_past_one_shot"), n, timeout=120,
                      base=base, env={"MESHCAST_COMPILED": compiled})
    # every call runs the registered cma schedule's program on every rank; where the
    # root on the lane is in place (the last three cases), with the root splitting
    runs = [f"{kind}/cma program" + (" split" if in_place else "")
            for *_, in_place in bodies._PAST_ONE_SHOT_CASES]
    assert all(seen == runs + ["mismatch: True"] for seen in out), out


def test_gather_without_one_shot_regions(single_copy):
    out = spawn_world(bodies.gather_without_regions, 3, timeout=120, base=20_000)
    assert all(seen == ["gather/cma"] * 2 for seen in out), out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_rooted_calls_return_first_where_they_need_nothing(n):
    """One-sided rounds (arena.py): a broadcast's or scatter's root and a reduce's other
    ranks return before the others enter (each rank enters only once the ones before it
    returned: a rank that waited would time out), and the next call of every kind
    settles the round."""
    out = spawn_world(bodies.one_sided_rounds, n, timeout=120, op_timeout=20)
    assert out == [["broadcast/oneshot", "reduce/oneshot", "scatter/oneshot"] * 2] * n, out


def test_a_group_destroyed_with_a_one_sided_round_is_freed():
    out = spawn_world(bodies.one_sided_group_is_freed, 3, timeout=60)
    # (the others' rounds are pending too unless the root came late: then they wait it out)
    assert out[0] == [True, True] and all(freed for _, freed in out), out


@pytest.mark.parametrize("kind", ["mismatch", "dead"])
def test_a_one_sided_rank_learns_at_its_next_call(kind):
    """A broadcast's root returned before the others checked the call: a disagreement
    or a rank that died is raised by the root's next call (on the general path here),
    naming the broadcast; a mismatch is word for word what the others raised."""
    if kind == "mismatch":
        out = spawn_world(bodies.one_sided_rank_learns_late, 3, timeout=120, op_timeout=20,
                          kind=kind)
        assert len(set(out)) == 1 and out[0].startswith("MismatchError"), out
        assert "broadcast(" in out[0] and "reduce(" in out[0], out
        return
    out = spawn_world(bodies.one_sided_rank_learns_late, 3, timeout=120, op_timeout=20,
                      expect_failure=True, kind=kind)
    assert out[1][0] == "error", out
    for status, text in (out[0], out[2]):  # (or the abort of the rank that found it first)
        assert status == "ok" and "rank 1" in text and "exited" in text, out
        assert text.split(": ")[1] in ("PeerGoneError", "GroupAbortedError"), text
    assert out[0][1].startswith("next: ") and "broadcast #1" in out[0][1], out


@pytest.mark.parametrize("n, compiled", [(2, "1"), (5, "1"), (3, "0")])
def test_random_mix_of_lanes_general_paths_async_and_p2p(n, compiled):
    """With the compiled rounds, combines and reads (transport/_tiny.c) and with Python's."""
    calls = 1500 if n == 2 else 600
    assert spawn_world(bodies.random_mix, n, timeout=180, calls=calls, seed=n,
                       env={"MESHCAST_COMPILED": compiled}) == [calls] * n


@pytest.mark.parametrize("n", [2, 3])
def test_all_gather_into_a_list_meets_the_other_forms(n):
    out = spawn_world(bodies.all_gather_list_beside_the_rest, n, timeout=120)
    assert all(seen == ["all_gather/oneshot"] * 2 for seen in out), out


@pytest.mark.parametrize("n, compiled", [(2, "1"), (3, "1"), (2, "0")])
def test_all_gather_into_a_list_past_one_shot_takes_the_lane(n, compiled, single_copy):
    # 140 000 float64 a piece: the lane runs all_gather's cma program into the list's
    # pieces, sync and (compiled) async, beside all_gather_into_tensor, late ranks and in place,
    # with the group's all_gather refusing; a strided piece goes to the group's path
    # beside the lane's lists; a size that differs raises everywhere
    out = spawn_world(bodies.all_gather_list_past_one_shot, n, timeout=120, base=140_000,
                      env={"MESHCAST_COMPILED": compiled})
    want = ["all_gather/cma"] * (3 + n + (4 if compiled == "1" else 0) + 1) + ["mismatch: True"]
    assert all(seen == want for seen in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_reduce_scatter_of_a_list_past_one_shot_reads_the_pieces_where_they_lie(
        n, single_copy):
    # 140 000 float64 a piece: the cma program with the list as its input (its pieces
    # exposed as a table), no concatenation; late ranks, AVG, slices of one array; a
    # rank on the general path beside the lists; a size mismatch raises everywhere
    out = spawn_world(bodies.reduce_scatter_list_single, n, timeout=120, base=140_000)
    want = ["reduce_scatter/cma"] * (3 + n)
    assert all(seen[:-2] == want and seen[-1] == "mismatch: True" for seen in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_all_to_all_of_lists_reads_and_writes_the_pieces_where_they_lie(n, single_copy):
    # 5 float64 a piece (one-shot) and 140 000 (single-copy): the programs with both
    # sides the lists, late ranks, a tensor beside lists; in place, an uneven rank and
    # a size mismatch beside them
    out = spawn_world(bodies.all_to_all_lists_where_they_lie, n, timeout=120,
                      counts=[5, 140_000])
    want = ["all_to_all/oneshot"] * (n + 2) + ["all_to_all/cma"] * (n + 2)
    assert all(seen[:-1] == want and seen[-1] == "mismatch: True" for seen in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_strided_arrays_take_the_lane_through_contiguous_copies(n, single_copy):
    # 3 float64 (one-shot) and 300 000 (single-copy): columns, strided views, a strided
    # output and an all_to_all in place, with the group's forms made to fail
    out = spawn_world(bodies.strided_arrays_on_the_lane, n, timeout=120, counts=[3, 300_000])
    want = [f"{kind}/{path}" for path in ("oneshot", "cma")
            for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")]
    assert all(seen == want for seen in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_list_forms_past_one_shot_run_on_staged_concatenations(n, single_copy):
    # 140 000 and 280 000 float64 a piece, in turn: the lane's uneven all_to_all of lists
    # runs on its pieces' concatenation in staging arrays it keeps (reused by smaller
    # calls); the all_to_all of equal lists and reduce_scatter of a list beside it; the
    # group's forms refuse
    out = spawn_world(bodies.list_forms_staged, n, timeout=120, base=140_000)
    assert all(seen == ["reduce_scatter/cma", "all_to_all/cma"] * 4 for seen in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_bfloat16_tensors_take_the_lane(n, single_copy):
    # 64 (one-shot) and 1 100 000 elements (2.2 MB: single-copy): every call on the lane,
    # its results torch's float32 arithmetic rounded once; beside the general path
    pytest.importorskip("torch")
    out = spawn_world(bodies.torch_bfloat16_on_the_lane, n, timeout=120,
                      counts=[64, 1_100_000])
    assert all(seen == ["all_reduce/oneshot", "all_reduce/cma"] for seen in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_list_forms_run_their_collectives_programs(n):
    # all_gather into a list and reduce_scatter of a list: 3 calls each, every one a
    # program of the interpreter (the listed side's pieces its buffers), no combine
    out = spawn_world(bodies.list_forms_run_programs, n, timeout=120)
    assert all(tuple(counts) == (6, 0) for counts in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_single_copy_calls_run_their_programs(n, single_copy):
    # broadcast (every root), all_gather_into_tensor (apart, in place) and
    # all_to_all_single (equal splits) of 140 000 float64 a rank (past one-shot at 2 and
    # 3 ranks), sync and async: the lane's calls (contiguous arrays: each collective,
    # and all_gather in place also beside the strided ones) run their cma schedule's
    # program, the synchronous ones from the exposure on, the async ones (past
    # ASYNC_INLINE_MAX_BYTES exposed) after their compiled entry; the general path's
    # (strided arrays) after its own entry
    out = spawn_world(bodies.single_copy_programs, n, timeout=120, count=140_000)
    lane, general = n + 4, 2 * (n + 2)
    assert all(tuple(c) == (lane, lane, general) for c in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_single_copy_folds_run_their_programs(n, single_copy):
    # all_reduce (3 ops) and reduce_scatter_tensor (2) past the one-shot sizes, sync and
    # async, in the lane (contiguous) and on the general path (strided), and reduce to
    # every root on the general path: every call runs its cma schedule's program, whose
    # folds read the peers' exposed buffers in the interpreter. The lane's sync calls
    # run it from the exposure on, its async ones (past ASYNC_INLINE_MAX_BYTES exposed)
    # after their compiled entry; the general path's after its own entry.
    out = spawn_world(bodies.single_copy_folds, n, timeout=120, count=300_000)
    assert all(tuple(c) == (5, 5, 2 * (5 + n)) for c in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_without_the_interpreter_single_copy_calls_run_their_programs_in_python(
        n, single_copy):
    # MESHCAST_COMPILED=0: broadcast, all_reduce, all_gather_into_tensor,
    # reduce_scatter_tensor and all_to_all_single in the lane and on the general path,
    # sync and async, and reduce: every call runs its cma schedule's program in Python's
    # executor after the entry (the same records the interpreter runs elsewhere), results
    # checked
    out = spawn_world(bodies.python_copy_programs, n, timeout=120, count=600_000,
                      env={"MESHCAST_COMPILED": "0"})
    kinds = ["broadcast", "all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
    want = [(k, True) for k in kinds * 2] + [(k, True) for k in kinds + ["reduce"]] * 2
    assert all(seen == want for seen in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_async_calls_through_the_lane(n):
    out = spawn_world(bodies.async_calls_in_order, n, timeout=120)
    assert all(o != ["no MismatchError"] for o in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_async_calls_past_one_shot_take_the_lane(n, single_copy):
    out = spawn_world(bodies.async_past_one_shot, n, timeout=120, base=bodies.LARGE)
    rounds = 3 + n  # in at once (inline, then on the worker), each rank late, rank 0 first
    assert all(seen == ["all_reduce/cma"] * (rounds - 1) + ["all_reduce/cma", "mismatch: True"]
               for seen in out), out


@pytest.mark.parametrize("n", [2, 3])
def test_list_and_split_forms_meet_the_tensor_forms(n):
    out = spawn_world(bodies.list_and_split_forms, n, timeout=120)
    assert all(set(seen) == {"reduce_scatter/oneshot", "all_to_all/oneshot"} for seen in out), out


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_single_copy_broadcast_past_one_shot_at_odd_sizes(single_copy, compiled):
    """With the compiled copies (transport/_tiny.c's reads, which also write) and with
    Python's."""
    out = spawn_world(bodies.single_copy_broadcasts, 2, timeout=120,
                      env={"MESHCAST_COMPILED": compiled})
    for seen in out:
        assert seen[:-1] == ["broadcast/cma"] * (len(seen) - 1), seen
        assert seen[-1] == "mismatch: True", seen


@pytest.mark.parametrize("compiled", ["1", "0"])
@pytest.mark.parametrize("n", [2, 3])
def test_arrays_just_past_a_page_boundary(n, compiled):
    # _copy.h: the compiled copies take a vector loop where the destination lies 1-15
    # bytes past the source modulo 4 KiB (the string move slows down tenfold there on
    # some CPUs). The same calls in Python (MESHCAST_COMPILED=0) check the body itself.
    out = spawn_world(bodies.short_distance_copies, n, timeout=120,
                      env={"MESHCAST_COMPILED": compiled})
    assert _paths(out[0]) == {"oneshot"}, out[0]


@pytest.mark.parametrize("compiled", ["1", "0"])
@pytest.mark.parametrize("n", [2, 3])
def test_kernel_copies_just_past_a_page_boundary(n, compiled, single_copy):
    # _copy.h: where the destination lies 1-15 bytes past the source modulo 4 KiB, the
    # compiled helpers' process_vm_readv/writev copy through a bounce buffer at the
    # peer's own distance (the kernel's string move slows down there too). 600 KiB and
    # 1.2 MiB pieces (several bounce buffers, and a tail) run single-copy (the 600 KiB
    # broadcast one-shot where 3 ranks share 2 cores).
    out = spawn_world(bodies.short_distance_copies, n, timeout=120,
                      env={"MESHCAST_COMPILED": compiled}, counts=(150_001, 300_007))
    went_cma = {name.split("/")[0] for name in out[0] if name.endswith("/cma")}
    assert went_cma == {"broadcast", "all_gather", "gather", "scatter", "all_to_all"}, out[0]


@pytest.mark.parametrize("n", [2, 3])
def test_pipelined_one_shot_copies(n):
    """Broadcast and scatter readers copy the root's region, and a gather root the
    others', as it is staged."""
    out = spawn_world(bodies.pipelined_copies, n, timeout=120, rounds=2)
    for seen in out:
        assert set(seen[:-1]) == {"broadcast/oneshot", "scatter/oneshot", "gather/oneshot"}, seen
    verdicts = {seen[-1] for seen in out}
    assert len(verdicts) == 1 and "ranks disagree" in verdicts.pop(), out


@pytest.mark.parametrize("n", [2, 3])
def test_gather_and_scatter_of_uneven_pieces_stay_on_the_lane(n):
    out = spawn_world(bodies.uneven_rooted_on_the_lane, n, timeout=120)
    calls = 2 * (2 * 2 * n + 2)  # (gather and scatter of every check)
    want = ["gather/oneshot", "scatter/oneshot"] * (calls // 2) + ["mismatch: True"]
    assert all(seen == want for seen in out), out


def test_a_working_set_of_many_shapes_stays_planned():
    # 150 shapes (more than a cache of 64 held, which then rebuilt every plan, 45 us a
    # call, on every pass of a loop over a model's parameters)
    out = spawn_world(bodies.many_shapes_stay_planned, 2, timeout=120, shapes=150)
    assert out == [[150, 0, 0]] * 2, out
