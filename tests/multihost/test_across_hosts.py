"""meshcast across emulated hosts (network namespaces, tests/multihost/hosts.py): the tour
in each launch style, every primitive against the oracle over MPI between hosts, and the
bytes really crossing the emulated link."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .hosts import run_job, traffic

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
TOUR = str(ROOT / "examples" / "tour.py")
EVERY = str(Path(__file__).parent / "scripts" / "every_primitive.py")
TRACED = str(Path(__file__).parent / "scripts" / "traced_tiny_calls.py")
TRACED_STEPS = str(Path(__file__).parent / "scripts" / "traced_steps.py")
FUSED = str(Path(__file__).parent / "scripts" / "fused_calls.py")
RANDOM = str(Path(__file__).parent / "scripts" / "random_program.py")
FORCED = str(Path(__file__).parent / "scripts" / "forced_family.py")
ROOTED = str(Path(__file__).parent / "scripts" / "rooted_choice.py")


@pytest.mark.parametrize("style", ["mpiexec", "meshcast", "torchrun"])
def test_tour_in_every_launch_style(two_hosts, style):
    env = {"MESHCAST_IFNAME": "eth0"}
    r = run_job(two_hosts, style, 2, [TOUR], env=env, timeout=180)
    assert r.returncode == 0, r.describe()
    engine = "mpi" if style == "mpiexec" else "gloo"
    assert f"{engine} (" in r.describe() and "on 2 hosts" in r.describe(), r.describe()


# The agreement's rows travel in two phases (rails, then inside the host) on 2x2 and 3x2,
# in one on 3x1 and 3+1; "2x2-python" runs the two phases through mpi4py instead of the
# compiled helper (transport/mpi_rows.py); "-mixed" runs them so on ranks 1 and 2 only;
# "-waits" give every phase no quick polls, so each ends in the general wait and the
# runner goes on from the next phase (or its second batch); at 3x3 (9 ranks, past
# AGREEMENT_FLAT_MAX) the rows go through the hosts' leaders over MPI.
@pytest.mark.parametrize("hosts_n, per_host, env", [
    (2, 2, {}), (3, [1, 1, 1], {}), (2, [3, 1], {}), (3, 2, {}),
    (2, 2, {"MESHCAST_COMPILED": "0"}), (2, 2, {"MIXED_RUNNERS": "1"}),
    (2, 2, {"QUICK_POLLS": "0"}), (2, 2, {"QUICK_POLLS": "0", "MESHCAST_COMPILED": "0"}),
    (3, 3, {})],
    ids=["2x2", "3x1", "3+1", "3x2", "2x2-python", "2x2-mixed", "2x2-waits",
         "2x2-python-waits", "3x3"])
def test_every_primitive_over_mpi(emulated_hosts, hosts_n, per_host, env):
    hosts = emulated_hosts(hosts_n)
    before = traffic(hosts, hosts.hosts[1])
    r = run_job(hosts, "mpiexec", per_host, [EVERY], env=env, timeout=200)
    assert r.returncode == 0, r.describe()
    assert "every primitive: ok" in r.describe(), r.describe()
    ranks = hosts_n * per_host if isinstance(per_host, int) else sum(per_host)
    # hosts' lines may interleave mid-line: count whole verdicts, not lines
    verdict = re.search(r"mismatch: (collective #\d+ on WORLD: ranks disagree .*?count=5, "
                        r"op=SUM\))", r.stdout)
    assert verdict and r.stdout.count(verdict[1]) == ranks, r.describe()
    after = traffic(hosts, hosts.hosts[1])
    assert after[0] - before[0] > 1 << 20, (before, after)  # data crossed the link


def test_meshcast_algo_forces_a_cross_host_family(two_hosts):
    """README's ``MESHCAST_ALGO=all_reduce:flat`` (a family per collective): the host-local
    groups parse the same string and leave those names to the spanning group, which
    runs them."""
    env = {"MESHCAST_ALGO": "all_reduce:flat;reduce_scatter:leader;broadcast:tree;"
                            "reduce:flat;gather:flat;scatter:flat"}
    r = run_job(two_hosts, "mpiexec", 2, [FORCED], env=env, timeout=120)
    assert r.returncode == 0, r.describe()
    results = r.records()
    assert len(results) == 4 and all(x["ok"] for x in results), r.describe()
    assert {tuple(x["ran"]) for x in results} == {
        ("all_reduce/flat", "reduce_scatter/leader", "reduce/flat", "gather/flat",
         "scatter/flat")}, results
    assert {tuple(x["picks"]) for x in results} == {
        ("all_reduce/flat", "reduce/flat") * 2}, results


def test_gather_and_scatter_choose_their_family_from_the_agreed_counts(two_hosts):
    """A rank knows only its own piece; the table's steps are about the gathered array,
    so every rank picks the same family once the ranks agreed (hierarchical.
    CHOSEN_FROM_COUNTS): one piece past the step, the others below it, one family."""
    r = run_job(two_hosts, "mpiexec", 2, [ROOTED], timeout=120)
    assert r.returncode == 0, r.describe()
    results = r.records()
    assert len(results) == 4 and all(x["ok"] for x in results), r.describe()
    assert {tuple(x["ran"]) for x in results} == {
        ("gather/leader", "scatter/leader", "gather/flat", "scatter/flat")}, results


# seed 1 at 2x2 hung (all_to_all #136 of a subgroup) when a rank with even pieces posted
# MPI's Ialltoall beside another's Ialltoallv
@pytest.mark.parametrize("hosts_n, per_host, seed", [(2, 2, 1), (3, [2, 1, 2], 32)],
                         ids=["2x2", "2+1+2"])
def test_random_program_over_mpi(emulated_hosts, hosts_n, per_host, seed):
    hosts = emulated_hosts(hosts_n)
    r = run_job(hosts, "mpiexec", per_host, [RANDOM],
                env={"SEED": str(seed), "CALLS": "600", "TIMEOUT": "20"}, timeout=200)
    assert r.returncode == 0, r.describe()
    assert "random program: ok" in r.stdout, r.describe()


@pytest.mark.parametrize("hosts_n, scenario, env", [
    (2, "cells", {}), (2, "eager", {}), (2, "count", {}), (2, "kind", {}),
    (2, "count", {"MESHCAST_COMPILED": "0"}), (2, "kind", {"MESHCAST_COMPILED": "0"}),
    (3, "cells", {}), (2, "rs-kind", {}), (2, "rs-counts", {}),
    (2, "rs-counts", {"MESHCAST_COMPILED": "0"}), (2, "lane-cells", {}), (2, "lane-kind", {}),
    (2, "bcast-count", {}), (2, "a2a-count", {}), (2, "a2a-kind", {}),
    (2, "a2a-lane-kind", {}), (2, "a2a-count", {"QUICK_POLLS": "0"})],
    ids=["cells", "eager", "count", "kind", "count-python", "kind-python", "3x2-cells",
         "rs-kind", "rs-counts", "rs-counts-python", "lane-cells", "lane-kind", "bcast-count",
         "a2a-count", "a2a-kind", "a2a-lane-kind", "a2a-count-waits"])
def test_fused_calls_and_their_mismatches(emulated_hosts, hosts_n, scenario, env):
    """algorithm='fused', all_reduce and reduce_scatter (the agreement rides in the data's
    messages; the steps in one C call, or through mpi4py without the helper) against the
    oracle; then a rank whose call differs: by its cells, by running the agreement's
    rows (a tiny call, another collective), by sending longer messages, or by being the
    other fused collective; 'lane-' cases call without algorithm=, through the lane.
    Every rank must raise the same MismatchError, and the job end (no hang, no stuck
    MPI requests)."""
    hosts = emulated_hosts(hosts_n)
    r = run_job(hosts, "mpiexec", 2, [FUSED], env={"SCENARIO": scenario, **env}, timeout=150)
    assert r.returncode == 0, r.describe()
    assert "fused calls: ok" in r.stdout, r.describe()
    # hosts' lines may interleave mid-line: a verdict ends where the next one starts
    errors = re.findall(r"rank (\d) mismatch: (.*?)(?=rank \d mismatch|\n|$)", r.stdout)
    assert sorted(int(k) for k, _ in errors) == list(range(2 * hosts_n)), r.describe()
    assert len({e for _, e in errors}) == 1, errors


def test_the_trace_says_which_tiny_calls_ran_compiled(two_hosts, tmp_path):
    """Over MPI the lane runs tiny calls in one C call (transport/_mpi_rows.c), and
    without the compiled helper in Python: every rank's trace says so, call by call."""
    for compiled in (True, False):
        where = tmp_path / str(compiled)
        where.mkdir(mode=0o777)
        where.chmod(0o777)
        env = {"MESHCAST_TRACE": str(where), "MESHCAST_COMPILED": "1" if compiled else "0"}
        r = run_job(two_hosts, "mpiexec", 2, [TRACED], env=env, timeout=120)
        assert r.returncode == 0, r.describe()
        for rank in range(4):
            lines = (where / f"rank-{rank:05d}.jsonl").read_text().splitlines()
            calls = [c for c in map(json.loads, lines) if c["type"] == "call"]
            seen = [(c["kind"], c["lane"], c["compiled"], c["algorithm"]) for c in calls]
            assert seen == [("all_reduce", True, compiled, "all_reduce/eager")] * 3 + [
                ("gather", True, compiled, "gather/eager")], (rank, seen)


def test_the_trace_notes_the_steps_of_a_hierarchical_call(two_hosts, tmp_path):
    """A call past the eager size runs a family of steps (the agreement, then calls on the
    host's group and the inter-host communicators; fused: its three exchanges, timed in
    the compiled call): its record lists them in order, each with the ranks it involves
    and its times inside the call's (meshcast.trace.steps)."""
    tmp_path.chmod(0o777)
    r = run_job(two_hosts, "mpiexec", 2, [TRACED_STEPS],
                env={"MESHCAST_TRACE": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r.describe()
    files = {k: [json.loads(line) for line in
                 (tmp_path / f"rank-{k:05d}.jsonl").read_text().splitlines()] for k in range(4)}
    host_of = {k: lines[0]["host"] for k, lines in files.items()}
    for rank, lines in files.items():
        mates = [k for k in range(4) if host_of[k] == host_of[rank]]
        rail = [k for k in range(4) if host_of[k] != host_of[rank]
                and sorted(k2 for k2 in range(4) if host_of[k2] == host_of[k]).index(k)
                == mates.index(rank)]
        local = [k for k in mates if k != rank]
        everyone = [k for k in range(4) if k != rank]
        calls = [c for c in lines if c["type"] == "call" and c["group"] == "WORLD"]
        assert [c["algorithm"] for c in calls] == [
            "all_reduce/rails", "all_reduce/leader", "all_reduce/fused", "all_reduce/fused",
            "reduce_scatter/fused", "all_to_all/fused"]
        rails, leader, fused, forced, scattered, swapped = (
            [(s["step"], s["peers"]) for s in c["rounds"]] for c in calls)
        assert rails[0] == ("agreement", everyone), (rank, rails)
        assert rails[1] == ("local.reduce_scatter", local), (rank, rails)
        assert rails[-1] == ("local.all_gather", local), (rank, rails)
        assert rails[2:-1] and all(step.startswith("rail.") and peers == rail
                                   for step, peers in rails[2:-1]), (rank, rails)
        assert leader[0] == ("agreement", everyone), (rank, leader)
        assert ("local.reduce", local) in leader and leader[-1] == ("local.broadcast", local)
        # fused: the steps of the compiled call (the lane's), timed in C, or of the Python
        # waits (forced: the general path)
        for steps in (fused, forced):
            assert steps == [("fused.local_reduce_scatter", local),
                             ("fused.rail_all_reduce", rail),
                             ("fused.local_all_gather", local)], (rank, steps)
        assert scattered == [("fused.local_reduce_scatter", local),
                             ("fused.rail_reduce_scatter", rail)], (rank, scattered)
        assert swapped == [("fused.all_to_all", everyone)], (rank, swapped)
        for c in calls:
            assert [s["round"] for s in c["rounds"]] == list(range(len(c["rounds"])))
            for s in c["rounds"]:
                assert c["begin"] <= s["begin"] <= s["end"] <= c["end"], (rank, c)
                assert s["wait_ns"] == s["end"] - s["begin"] and s["bytes"] > 0, (rank, s)
        for c in calls[2:]:  # one step after the other
            ends = [(s["begin"], s["end"]) for s in c["rounds"]]
            assert all(e <= b for (_, e), (b, _) in zip(ends, ends[1:])), (rank, c)
