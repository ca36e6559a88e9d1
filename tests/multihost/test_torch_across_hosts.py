"""``init_process_group("meshcast")`` under ``torchrun --nnodes 2`` on two emulated hosts.

Issue 12, item 5: DDP trained on meshcast across the hosts ends with Gloo's parameters
(within float tolerance) and identical on every rank; the collectives torch calls give
NumPy's result across the hosts through the torch API; the tutorial snippets of
``examples/torch_distributed`` (the README's torch section) run there; meshcast groups
under a Gloo default group span the hosts too.

Two torchrun jobs at 2 hosts x 2 ranks, shared by the tests of this module (each torch
job across hosts costs 10-20 s of start-up on the 2-core machine, most of it importing
torch and, for DDP, torch._dynamo): ``scripts/torch_ddp.py gloo`` and
``scripts/torch_meshcast.py``, which runs the same DDP training on meshcast, then the
collective checks (``scripts/torch_collectives.py``), then the tutorial snippets.
torchrun's ``--tee 3`` keeps each rank's lines whole (two ranks writing to one pipe
otherwise run lines together).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from meshcast.testing.tutorial import check_tutorial_output

from .hosts import JobResult, run_job, traffic

pytest.importorskip("torch", reason="the torch backend tests need torch installed")

pytestmark = pytest.mark.timeout(200)

SCRIPTS = Path(__file__).parent / "scripts"
N = 4  # 2 hosts x 2 ranks
ENV = {"GLOO_SOCKET_IFNAME": "eth0", "MESHCAST_IFNAME": "eth0", "OMP_NUM_THREADS": "1",
       "PYTHONWARNINGS": "ignore"}
CHECKS = ["all_reduce", "broadcast", "all_gather_into_tensor", "all_gather",
          "reduce_scatter_tensor", "reduce/gather/scatter", "all_to_all_single", "all_to_all",
          "barrier", "send/recv", "subgroups", "objects"]
CONFIGS = ["plain", "small_buckets", "bucket_view", "allreduce_hook"]


class Jobs:
    """The two jobs' results, where they saved their parameters, and h1's link traffic."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.results: dict[str, JobResult] = {}
        self.crossed: dict[str, int] = {}  # bytes h1 received on eth0 during each job

    def ok(self, backend: str) -> JobResult:
        r = self.results[backend]
        assert r.returncode == 0, r.describe()
        return r

    def params(self, backend: str) -> list[dict[str, np.ndarray]]:
        """Every rank's trained parameters (saved before the Gloo job's meshcast-group
        checks, so a failure there does not hide this comparison)."""
        loaded = []
        for rank in range(N):
            path = self.out / f"{backend}-{rank}.npz"
            assert path.exists(), f"{path} missing\n{self.results[backend].describe()}"
            with np.load(path) as f:
                loaded.append({c: f[c] for c in f.files})
        return loaded

    def lines(self, backend: str) -> str:
        # --tee prefixes every line with "[default<local rank>]:".
        return re.sub(r"(?m)^\[default\d+\]:", "", self.ok(backend).stdout)


@pytest.fixture(scope="module")
def jobs(two_hosts, tmp_path_factory) -> Jobs:
    jobs = Jobs(tmp_path_factory.mktemp("torch-across-hosts"))  # hosts share the file system
    argv = {"gloo": [str(SCRIPTS / "torch_ddp.py"), "gloo", str(jobs.out)],
            "meshcast": [str(SCRIPTS / "torch_meshcast.py"), str(jobs.out)]}
    for backend, args in argv.items():
        before = traffic(two_hosts, two_hosts.hosts[1])
        jobs.results[backend] = run_job(two_hosts, "torchrun", 2, args, env=ENV, timeout=90,
                                        launcher_args=["--tee", "3"])
        jobs.crossed[backend] = traffic(two_hosts, two_hosts.hosts[1])[0] - before[0]
    return jobs


def test_meshcast_group_spans_both_hosts(jobs, two_hosts):
    groups = {r["rank"]: r for r in jobs.ok("meshcast").records() if "group" in r}
    assert sorted(groups) == list(range(N)), groups
    for rank, r in groups.items():
        assert r["size"] == N and r["host"] == two_hosts.hosts[rank // 2], r
        assert r["group"].startswith("<HostSpanningGroup") and "on 2 hosts (2+2)" in r["group"], r
    # Not shared memory between the "hosts": the data crossed h1's emulated link.
    assert jobs.crossed["meshcast"] > 4 << 20, jobs.crossed


def test_collectives_match_numpy_across_hosts(jobs):
    done = {r["rank"]: r["collectives"] for r in jobs.ok("meshcast").records()
            if "collectives" in r}
    assert done == {rank: CHECKS for rank in range(N)}, jobs.results["meshcast"].describe()


def test_ddp_matches_gloo(jobs):
    gloo, mesh = jobs.params("gloo"), jobs.params("meshcast")
    for config in CONFIGS:
        for rank in range(1, N):
            # Every rank holds the same all-reduced gradients, so the replicas agree bitwise.
            assert np.array_equal(mesh[rank][config], mesh[0][config]), (config, rank)
            assert np.array_equal(gloo[rank][config], gloo[0][config]), (config, rank)
        # Gloo and meshcast add the four ranks' gradients in another order: float
        # rounding only (measured 1.5e-8 for parameters of magnitude 0.2).
        diff = float(np.abs(mesh[0][config] - gloo[0][config]).max())
        assert diff <= 1e-6, f"{config}: meshcast differs from gloo by {diff}"
        assert mesh[0][config].size == 76810, mesh[0][config].size


def test_meshcast_groups_under_a_gloo_default_group(jobs):
    # The Gloo job then makes new_group(backend="meshcast") over all ranks and over 1, 2.
    groups = {r["rank"]: r["groups"] for r in jobs.ok("gloo").records()
              if r.get("meshcast_under") == "gloo"}
    assert sorted(groups) == list(range(N)), jobs.results["gloo"].describe()
    for rank, described in groups.items():
        assert len(described) == (2 if rank in (1, 2) else 1), described
        assert all(d.startswith("<HostSpanningGroup") for d in described), described
        if rank in (1, 2):
            assert "on 2 hosts (1+1)" in described[1], described


def test_tutorial_snippets(jobs):
    out = jobs.lines("meshcast")
    assert any(r.get("tutorial") == "done" for r in jobs.ok("meshcast").records()), out[-3000:]
    check_tutorial_output(out, N)
