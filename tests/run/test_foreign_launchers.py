"""meshcast's own ``init_process_group()`` (no arguments) under other tools' launchers.

The unit tests of :mod:`meshcast.rendezvous.env` feed it hand-written
variables; these start a real job with the real tool, so a launcher that
changes what it sets (or how its ranks find each other) shows up here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).parent / "scripts" / "launched_job.py"

# Variables through which an outer launcher (or a previous test) could leak into the job.
_LAUNCHER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "PALS_", "SLURM_", "I_MPI_", "HYDRA_",
                      "TORCHELASTIC_", "MESHCAST_")
_LAUNCHER_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID",
                  "MPI_LOCALNRANKS"}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in _LAUNCHER_VARS and not k.startswith(_LAUNCHER_PREFIXES)}


def _tool(name: str) -> str | None:
    """The venv's own copy first (pip's mpich puts mpiexec there), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def _run(cmd: list[str]) -> list[dict]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_clean_env(),
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    # Not line by line: mpiexec forwards the ranks' output in chunks that may run together.
    reports = [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", proc.stdout)]
    return sorted(reports, key=lambda r: r["rank"])


def _check(reports: list[dict], launcher: str) -> None:
    assert [r["rank"] for r in reports] == [0, 1], reports
    for r in reports:
        assert r["launcher"] == launcher, reports
        assert (r["env_rank"], r["env_size"], r["size"]) == (r["rank"], 2, 2), reports
        assert r["sum"] == 3.0, reports  # 1 + 2: the all_reduce really ran across both


@pytest.mark.timeout(180)
def test_init_with_no_arguments_under_mpiexec():
    mpiexec = _tool("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec next to the interpreter or on PATH (pip install mpich)")
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    if "Open MPI" in version.stdout + version.stderr:
        flags = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
        launcher = "openmpi"
    else:  # MPICH's Hydra (what the mpich wheel ships)
        flags, launcher = [], "mpich"
    _check(_run([mpiexec, *flags, "-n", "2", sys.executable, str(JOB)]), launcher)


@pytest.mark.timeout(180)
def test_init_with_no_arguments_under_torchrun():
    pytest.importorskip("torch", reason="torchrun comes with torch, which is not installed")
    torchrun = _tool("torchrun")
    cmd = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    _check(_run([*cmd, "--nproc-per-node", "2", "--standalone", str(JOB)]), "torchrun")
