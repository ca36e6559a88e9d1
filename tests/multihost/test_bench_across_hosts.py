"""``meshcast bench --hosts``: the bench makes its own emulated hosts, runs meshcast and MPI
there, prints nccl-tests' tables with every result right, and takes the hosts down.

One short run (tiny sizes, 3 timed calls): a few seconds on the 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meshcast.testing.emuhosts import STATE_ROOT

from .conftest import PREFIX

BENCH_PREFIX = f"{PREFIX}b"  # one of our own, apart from the fixtures' hosts


def _netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@pytest.mark.timeout(240)
def test_bench_hosts_runs_meshcast_and_mpi_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "bench.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "meshcast", "bench", "--hosts", "2x2", "--prefix", BENCH_PREFIX,
         "--op", "all_reduce", "-b", "8", "-e", "64K", "-f", "8", "-w", "1", "--iters", "3",
         "--internode", "mpi", "--compare", "mpi", "--json", str(out), "--timeout", "150"],
        capture_output=True, text=True, timeout=220,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        text = proc.stdout
        assert "4 ranks on 2 hosts x 2 ranks (emulated" in text
        assert "# [meshcast+mpi] all_reduce:" in text and "# [mpi] all_reduce:" in text
        assert "meshcast+mpi: out of bounds values: 0 OK" in text
        assert "mpi: out of bounds values: 0 OK" in text
        assert "ratio = meshcast+mpi busbw / peer busbw" in text
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        meta, results = lines[0], lines[1:]
        assert meta["nranks"] == 4 and meta["hosts"]["per_host"] == [2, 2]
        assert meta["command"].startswith("meshcast bench --hosts 2x2")
        ran = [r for r in results if r["time_us"] is not None]
        assert {r["library"] for r in ran} == {"meshcast+mpi", "mpi"}
        assert len({r["requested_size"] for r in ran}) == 5  # 8 B .. 32 KiB
        assert all(r["wrong"] == 0 for r in ran), [r for r in ran if r["wrong"]]
        ours = [r for r in ran if r["library"] == "meshcast+mpi"]
        assert all(r["algorithm"].startswith("all_reduce/") for r in ours)
    finally:
        # the bench took its hosts down, whatever happened
        assert not [n for n in _netns() if n.startswith(BENCH_PREFIX + "-")]
        assert not (STATE_ROOT / BENCH_PREFIX).exists()
        assert not [d for d in (os.listdir("/etc/netns") if os.path.isdir("/etc/netns") else [])
                    if d.startswith(BENCH_PREFIX + "-")]


@pytest.mark.timeout(120)
def test_a_failing_library_is_reported_and_the_hosts_still_go_down() -> None:
    # meshcast's ranks refuse a bad setting at start-up: the bench reports it and exits 1
    proc = subprocess.run(
        [sys.executable, "-m", "meshcast", "bench", "--hosts", "2x1", "--prefix", BENCH_PREFIX,
         "--op", "all_reduce", "-b", "8", "-e", "8", "-w", "0", "--iters", "1",
         "--internode", "mpi", "--timeout", "60"],
        capture_output=True, text=True, timeout=100,
        env={**os.environ, "MESHCAST_SLOT_BYTES": "not-a-size"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "meshcast+mpi: FAILED" in proc.stdout and "MESHCAST_SLOT_BYTES" in proc.stdout
    assert not [n for n in _netns() if n.startswith(BENCH_PREFIX + "-")]
    assert not (STATE_ROOT / BENCH_PREFIX).exists()


@pytest.mark.timeout(120)
def test_sigterm_mid_run_takes_the_hosts_down() -> None:
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "meshcast", "bench", "--hosts", "2x1", "--prefix", BENCH_PREFIX,
         "--op", "all_reduce", "-b", "8", "-e", "8", "-w", "0", "--iters", "100000",
         "--internode", "mpi"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (STATE_ROOT / BENCH_PREFIX / "ssh").exists():  # hosts up, job starting
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not [n for n in _netns() if n.startswith(BENCH_PREFIX + "-")]
    assert not (STATE_ROOT / BENCH_PREFIX).exists()


@pytest.mark.timeout(180)
def test_launched_ranks_under_mpiexec_and_the_merge_of_their_files(two_hosts, tmp_path: Path
                                                                    ) -> None:
    # the real-cluster path: the user's launcher starts `meshcast bench --launched` as every
    # rank, once per library; `--from` compares the files
    from .hosts import run_job

    files = []
    for lib in ("meshcast", "mpi"):
        out = tmp_path / f"{lib}.jsonl"
        job = run_job(two_hosts, "mpiexec", 2,
                      ["-m", "meshcast", "bench", "--launched", "--library", lib, "--op",
                       "all_reduce", "-b", "8", "-e", "4K", "-f", "8", "-w", "1", "--iters", "2",
                       "--json", str(out)], timeout=120)
        assert job.ok, job.describe()
        label = "meshcast+mpi" if lib == "meshcast" else lib
        assert f"# [{label}] all_reduce:" in job.stdout
        assert f"{label}: out of bounds values: 0 OK" in job.stdout
        files.append(str(out))
    proc = subprocess.run([sys.executable, "-m", "meshcast", "bench", "--from", ",".join(files)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ratio = meshcast+mpi busbw / peer busbw" in proc.stdout
    assert "4 ranks started by the launcher" in proc.stdout
