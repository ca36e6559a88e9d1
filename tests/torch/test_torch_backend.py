"""``init_process_group("meshcast")``: every torch.distributed feature on CPU, on meshcast's engine.

Each world runs many checks (see torch_bodies.py) so the suite stays within
the 2-core budget; DDP and FSDP2 are compared with the same run on gloo.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch backend tests need torch installed")

import torch_bodies as bodies  # noqa: E402 - after the importorskip
from torch_world import run_world  # noqa: E402

from meshcast.testing.tutorial import check_tutorial_output  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "torch_distributed"
SIZES = [2, 3, 4]


def test_import_torch_registers_the_backend():
    """The torch.backends entry point makes the name known after a plain ``import torch``."""
    code = ("import torch, torch.distributed as dist; "
            "print('MESHCAST' in dist.Backend._plugins, dist.Backend.MESHCAST)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["True", "meshcast"], out.stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", SIZES)
def test_every_collective_and_p2p(n):
    assert run_world(bodies.collectives, n, timeout=80) == [{"ok": True}] * n


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", SIZES)
def test_groups_objects_and_meshcast_api(n):
    assert run_world(bodies.groups_and_objects, n, timeout=80) == [{"ok": True}] * n


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", SIZES)
def test_device_mesh_dtensor_funcol(n):
    assert run_world(bodies.mesh_dtensor, n, timeout=80) == [{"ok": True}] * n


def _max_diff(a, b):
    return max((abs(x - y) for pa, pb in zip(a, b) for x, y in zip(pa, pb)), default=0.0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", SIZES)
def test_ddp_matches_gloo(n):
    gloo = run_world(bodies.ddp_train, n, backend="gloo", timeout=100)
    mesh = run_world(bodies.ddp_train, n, timeout=100)
    for config in gloo[0]:
        for r in range(n):
            assert mesh[r][config] == mesh[0][config], f"{config}: replicas differ"
            # fp16 compression rounds the gradients, so summation order shows more.
            tol = 1e-4 if config == "hook_fp16" else 1e-6
            diff = _max_diff(mesh[r][config], gloo[r][config])
            assert diff <= tol, f"{config} rank {r}: differs from gloo by {diff}"
            if n == 2 and config != "hook_fp16":
                # Two ranks add in the same order on both backends: bitwise equal.
                assert mesh[r][config] == gloo[r][config], config


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", SIZES)
def test_fsdp2_fully_shard_matches_gloo(n):
    gloo = run_world(bodies.fsdp2_train, n, backend="gloo", timeout=80)
    mesh = run_world(bodies.fsdp2_train, n, timeout=80)
    for r in range(n):
        # full_tensor() all-gathers the shards: every rank holds the same model.
        assert mesh[r] == mesh[0], f"rank {r}: replicas differ"
        # 3 and 4 ranks shard 16 rows unevenly and sum in another order than gloo.
        diff = _max_diff(mesh[r], gloo[r])
        assert diff <= 1e-6, f"rank {r}: differs from gloo by {diff}"
        if n == 2:
            assert mesh[r] == gloo[r]  # same summation order: bitwise equal


@pytest.mark.timeout(60)
def test_mismatch_is_a_dist_backend_error_on_every_rank():
    out = run_world(bodies.mismatch, 2, timeout=50)
    assert out[0] == out[1]
    assert "ranks disagree" in out[0] and "count=3" in out[0] and "count=4" in out[0]


@pytest.mark.timeout(60)
def test_async_failure_reaches_wait_exception_and_future():
    out = run_world(bodies.async_error, 2, timeout=50)
    assert all("float32" in o and "float64" in o for o in out), out


@pytest.mark.timeout(60)
def test_dead_peer_is_named_quickly():
    out = run_world(bodies.dead_peer, 3, timeout=50, op_timeout=30, expect_failure=True)
    assert out[1][0] == "error"
    for status, text in (out[0], out[2]):
        assert status == "ok", text
        seconds = float(text.split("s ", 1)[0])
        assert seconds < 10 and "rank 1" in text and "exited" in text, text


@pytest.mark.timeout(60)
def test_timeout_names_the_missing_rank():
    out = run_world(bodies.timeout, 2, timeout=50, op_timeout=2)
    assert "timed out" in out[0] and "[1]" in out[0], out[0]


@pytest.mark.timeout(60)
def test_meshcast_subgroup_under_a_gloo_default_group():
    assert run_world(bodies.subgroup_under_gloo, 3, backend="gloo", timeout=50) == [True] * 3


# ----------------------------------------------------------------- examples

TUTORIAL = ["broadcast", "all_reduce", "scatter", "gather", "async_all_reduce", "send_recv",
            "gradient_averaging", "param_broadcast", "distributed_validation",
            "model_parallel", "ddp_train"]


def _launch(launcher: str, script: Path, *args: str, n: int = 4) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if launcher == "torchrun":
        torchrun = shutil.which("torchrun")
        cmd = ([torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"])
        # --tee: each rank's lines come through whole (plain stdout interleaves them)
        cmd += ["--nproc-per-node", str(n), "--standalone", "--tee", "3"]
    else:
        cmd = [sys.executable, "-m", "meshcast", "run", "-n", str(n)]
    proc = subprocess.run([*cmd, str(script), *args], capture_output=True, text=True,
                          timeout=100, env=env, cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # meshcast run prefixes lines with "[rank r]: ", torchrun --tee with "[default<r>]:".
    return "\n".join(re.sub(r"^\[(rank |default)\d+\]:? ?", "", line)
                     for line in out.splitlines())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["torchrun", "meshcast-run"])
def test_tutorial_examples(launcher):
    # 4 ranks, as the issue and the README launch them.
    out = _launch(launcher, ROOT / "tests" / "torch" / "run_examples.py", *TUTORIAL, n=4)
    check_tutorial_output(out, 4)


@pytest.mark.timeout(120)
def test_example_script_runs_standalone():
    # An odd world size: the tutorial runs above use 4.
    out = _launch("meshcast-run", EXAMPLES / "gather.py", n=3)
    assert "rank 0: gathered [[0.0, 0.0], [1.0, 1.0], [2.0, 4.0]]" in out
    assert "rank 2: sent [2.0, 4.0]" in out


@pytest.mark.timeout(120)
def test_ddp_step_time_prints_both_timings():
    out = _launch("meshcast-run", EXAMPLES / "ddp_step_time.py", "--steps", "5", "--rounds",
                  "1", n=2)
    assert "DDP step, 2 ranks, " in out and "1 x 5 steps each" in out, out
    for backend in ("meshcast", "gloo"):
        m = re.search(rf"^ *{backend} +median +(\S+) ms +p90 +(\S+) ms$", out, re.MULTILINE)
        assert m, f"no {backend} timing in:\n{out}"
        median, p90 = float(m[1]), float(m[2])
        assert 0 < median <= p90, (backend, median, p90)
