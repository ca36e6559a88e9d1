"""MESHCAST_TRACE records what really ran, on every path, on every rank."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from meshcast.testing.world import spawn_world
from meshcast.trace import calls_by_key, read_dir

from . import bodies

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("n", [1, 3, 4])
def test_the_trace_says_what_ran_on_every_rank(n, tmp_path):
    out = spawn_world(bodies.every_path, n, timeout=90, env={"MESHCAST_TRACE": str(tmp_path)})
    traces = read_dir(str(tmp_path))
    assert [t.rank for t in traces] == list(range(n))
    for t, info in zip(traces, out):
        assert t.header["world_size"] == n and t.header["pid"] > 0
        assert t.groups["WORLD"]["ranks"] == list(range(n))
        assert t.groups["WORLD"]["engine"] == "shm"
        colls = [c for c in t.calls if c["kind"] not in ("send", "recv")]
        # in call order, the algorithm each call reported at run time
        assert [(c["kind"], c["algorithm"]) for c in colls] == [tuple(e) for e in info["log"]]
        assert all(c["end"] is not None and c["end"] >= c["begin"] for c in t.calls)
        assert all(c["error"] is None for c in t.calls)
        first = colls[0]
        assert (first["dtype"], first["count"], first["bytes"], first["op"]) == (
            "float32", 4, 16, "SUM")
        assert colls[1]["op"] == "PRODUCT" and colls[1]["lane"] is False
        # the group's one-shot programs: complex PRODUCT has no compiled kernel, int32 SUM has
        assert colls[1]["compiled"] is False
        general = colls[-1]
        assert (general["algorithm"], general["lane"], general["compiled"]) == (
            "all_reduce/oneshot" if n > 1 else general["algorithm"], False, n > 1), general
        if n > 1:  # the lane's calls say whether the compiled helper did it all, fold too
            assert first["lane"] is True and first["compiled"] is True
            folds = [(c["dtype"], c["lane"], c["compiled"]) for c in colls[-3:-1]]
            assert folds == [("float32", True, True), ("complex64", True, False)], folds
            late = colls[-7]  # async_op=True, started by the lane: recorded as async
            assert (late["kind"], late["lane"], late["async"], late["count"]) == (
                "all_reduce", True, True, 5), late
            split = colls[-6]  # all_to_all_single with split sizes, async: by its kind
            assert (split["kind"], split["lane"], split["async"], split["count"]) == (
                "all_to_all", True, True, n), split
            listed = colls[-5]  # all_gather into a list, recorded as the all_gather it is
            assert (listed["kind"], listed["lane"], listed["count"], listed["dtype"]) == (
                "all_gather", True, 3, "float64"), listed
            lists = colls[-4]  # all_to_all of lists, its pieces where they lie
            assert (lists["kind"], lists["lane"], lists["count"], lists["algorithm"]) == (
                "all_to_all", True, 2 * n, "all_to_all/oneshot"), lists
        ring = colls[2]
        assert ring["algorithm"] == "all_reduce/ring" and ring["family"] == "schedule"
        if n > 1:  # a ring all_reduce: reduce-scatter then all-gather, n - 1 rounds each
            assert len(ring["rounds"]) == 2 * (n - 1)
            for rnd in ring["rounds"]:
                assert [p for p, _ in rnd["send"]] == [info["ring_peer"]]
                assert sum(b for _, b in rnd["send"]) > 0 and rnd["wait_ns"] >= 0
                assert rnd["begin"] <= rnd["end"] <= ring["end"]
        bcast = colls[4]
        assert bcast["async"] is True and bcast["root"] == n - 1 and bcast["count"] == 8
        if n > 1:
            sends = [c for c in t.calls if c["kind"] == "send"]
            recvs = [c for c in t.calls if c["kind"] == "recv"]
            assert [(c["peer"], c["bytes"], c["dtype"]) for c in sends] == [
                (info["ring_peer"], 6, "int16"), (info["ring_peer"], 8, "float32")]
            assert [c["peer"] for c in recvs] == [(t.rank - 1) % n] * 2
            # each its own number, the pair's send before its receive
            seqs = [c["seq"] for c in t.calls if c["kind"] in ("send", "recv")]
            assert sorted(seqs) == list(range(1, 5)), seqs
            assert sends[1]["seq"] + 1 == recvs[1]["seq"], (sends, recvs)
        if t.rank % 2 == 0:
            evens = [g for g in t.groups if g != "WORLD"]
            assert len(evens) == 1 and t.groups[evens[0]]["ranks"] == list(range(0, n, 2))
    # every collective is the same (group, seq) call on every member, with one algorithm
    for (group, seq), by_rank in calls_by_key(traces):
        members = traces[0].groups[group]["ranks"] if group in traces[0].groups else None
        if members is not None:
            assert sorted(by_rank) == members, (group, seq)
        assert len({(c["kind"], c["algorithm"]) for c in by_rank.values()}) == 1, (group, seq)


def test_tracing_off_leaves_the_groups_untouched():
    # Off means no wrapper anywhere: the calls run the class's own methods.
    assert spawn_world(_untouched, 2, timeout=60) == [[], []]


def _untouched() -> list:
    import meshcast as dist

    pg = dist.group.WORLD
    return [name for name in ("all_reduce", "broadcast", "isend") if name in vars(pg)] + [
        name for name in ("all_reduce", "send") if name in vars(pg.lane)] + (
        [] if pg.tracer is None else ["tracer"])


def test_across_hosts_the_spanning_group_and_its_host_groups_are_recorded(tmp_path):
    out = spawn_world(bodies.across_hosts, 4, timeout=90, hosts=[0, 0, 1, 1],
                      env={"MESHCAST_TRACE": str(tmp_path)})
    for t, log in zip(read_dir(str(tmp_path)), out):
        assert t.groups["WORLD"]["engine"] == "shm+gloo"
        inner = [g for g in t.groups if g != "WORLD"]
        assert len(inner) == 1 and inner[0].startswith("WORLD on ")
        world = [c for c in t.calls if c["group"] == "WORLD"]
        assert [(c["kind"], c["algorithm"]) for c in world] == [tuple(e) for e in log]
        assert world[0]["family"] == "eager"
        # the large call ran partly on the host's own group, recorded as that group's calls
        assert any(c["group"] == inner[0] for c in t.calls)


@pytest.mark.parametrize("algorithm", [None, "ring"])
def test_a_rank_that_never_arrives_shows_in_the_trace_and_the_error(tmp_path, algorithm):
    out = spawn_world(bodies.rank_never_arrives, 3, timeout=90, op_timeout=2.0,
                      expect_failure=True, env={"MESHCAST_TRACE": str(tmp_path)},
                      late=2, sleep=4.0, algorithm=algorithm)
    for r in (0, 1):
        status, text = out[r]
        assert status == "ok" and text.startswith("failed: "), out[r]
        assert f"meshcast trace of rank {r}: {tmp_path}" in text, text
        assert "all_reduce #2 on WORLD (failed)" in text, text
    if algorithm is None:
        # the error itself says where the late rank is, from shared memory (tracing or not)
        first = out[0][1] if "timed out" in out[0][1] else out[1][1]
        assert "rank 2 has not entered this call; its last one here: all_reduce #1" in first
    traces = read_dir(str(tmp_path))
    for t in traces[:2]:
        last = t.calls[-1]
        assert (last["kind"], last["seq"]) == ("all_reduce", 2)
        assert last["error"].split(":")[0] in ("CommTimeout", "GroupAbortedError"), last
        assert last["end"] is not None
        # it failed in the entry round (rank 2 never came): no algorithm was chosen,
        # and the trace says so rather than naming the call before's
        assert last["algorithm"] is None and last["rounds"] == [], last
    # the late rank's last call is the first all_reduce: it never entered #2 before the others
    # gave up (it may enter it afterwards and fail there; that call begins after their end)
    late = traces[2].calls
    assert late[0]["seq"] == 1
    if len(late) > 1:
        assert late[1]["begin"] > max(t.calls[-1]["end"] for t in traces[:2])


def test_symmetric_calls_are_traced_as_the_programs_they_ran(tmp_path):
    out = spawn_world(bodies.symmetric_calls, 3, timeout=90,
                      env={"MESHCAST_TRACE": str(tmp_path)})
    for t, log in zip(read_dir(str(tmp_path)), out):
        # (meshcast.empty's own agreement is a call of the group too: left out)
        colls = [(c["kind"], c["algorithm"], c["family"], c["compiled"], c["lane"],
                  c["async"]) for c in t.calls if (c["algorithm"] or "").endswith("/symmetric")]
        assert [c[:2] for c in colls] == [tuple(e) for e in log]
        # float32 folds in the interpreter, on the lane; complex64 has no compiled kernel:
        # the general path, Python's executor ran the same program; the all_gather only
        # copies (the lane); the async all_reduce: the lane's
        assert colls == [
            ("all_reduce", "all_reduce/symmetric", "symmetric", True, True, False),
            ("all_reduce", "all_reduce/symmetric", "symmetric", False, False, False),
            ("all_gather", "all_gather/symmetric", "symmetric", True, True, False),
            ("all_reduce", "all_reduce/symmetric", "symmetric", True, True, True),
            ("all_gather", "all_gather/symmetric", "symmetric", True, True, True)], colls


def test_a_rank_stopped_inside_a_call_is_written_with_no_end(tmp_path):
    # Rank 1 waits in a recv nobody sends; rank 0 fails; `meshcast run` stops rank 1
    # with SIGTERM, and its trace must still show the recv it was stuck in.
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import meshcast as dist
        dist.init_process_group()
        x = np.ones(2, np.float32)
        dist.all_reduce(x)
        if dist.get_rank() == 1:
            dist.recv(x, 0)
        raise SystemExit("rank 0 gives up")
    """))
    trace = tmp_path / "trace"
    env = dict(os.environ, MESHCAST_TRACE=str(trace))
    proc = subprocess.run([sys.executable, "-m", "meshcast", "run", "-n", "2", str(script)],
                          env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode != 0
    traces = read_dir(str(trace))
    stuck = traces[1].calls[-1]
    assert (stuck["kind"], stuck["peer"], stuck["end"]) == ("recv", 0, None), traces[1].calls
    assert traces[0].calls[-1]["kind"] == "all_reduce"


def test_half_precision_sums_are_traced_as_compiled_folds():
    # float16 and bfloat16 SUM and PRODUCT fold in the compiled kernels (widened to
    # float32, rounded once); their MIN and MAX do not
    from meshcast.trace.recorder import _folds_compiled

    for dtype in ("float16", "bfloat16"):
        assert _folds_compiled("SUM", dtype) and _folds_compiled("PRODUCT", dtype), dtype
        assert not _folds_compiled("MAX", dtype), dtype
    assert not _folds_compiled("SUM", "complex64") and _folds_compiled("SUM", "float32")
