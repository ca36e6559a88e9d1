"""Shared memory never outlives the job: after normal exit, an exception, or SIGKILL."""

from __future__ import annotations

import os
import subprocess

import pytest

from meshcast.testing.world import spawn_world

from . import bodies

pytestmark = pytest.mark.timeout(90)


def _meshcast_entries(d: str) -> list[str]:
    return sorted(f for f in os.listdir(d) if f.startswith("meshcast-"))


@pytest.mark.parametrize("mode", ["normal", "raise", "kill"])
def test_no_named_segment_left_behind(mode, tmp_path):
    before = _meshcast_entries("/dev/shm")
    out = spawn_world(bodies.hold_segments_then, 3, timeout=60,
                      env={"MESHCAST_SHM_DIR": str(tmp_path)}, expect_failure=True, mode=mode)
    if mode == "normal":
        assert all(s == "ok" for s, _ in out), out
    else:
        assert out[1][0] == "error"
    assert _meshcast_entries(str(tmp_path)) == []
    assert _meshcast_entries("/dev/shm") == before


@pytest.mark.parametrize("mode", ["normal", "raise", "kill"])
def test_no_memfd_segment_left_behind(mode):
    # A memfd has no name in /dev/shm, so comparing /dev/shm proves nothing; what
    # could outlive the job is a process still mapping it or holding its descriptor.
    # The ranks report the inodes of the segments they map (and that a scan of their
    # own /proc entries finds them); after the job no process may hold any of them.
    if not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create on this platform: segments are named files there")
    out = spawn_world(bodies.memfd_segments_then, 3, timeout=60, expect_failure=True,
                      mode=mode)
    reports = [value for status, value in out if status == "ok"]
    if mode == "normal":
        assert len(reports) == 3, out
    else:
        assert out[1][0] == "error" and len(reports) == 2, out
    inodes = {i for report in reports for i in report["inodes"]}
    assert inodes, "the ranks mapped no memfd segment"
    assert all(report["seen"] for report in reports), reports
    assert bodies.memfd_holders(inodes) == []


def test_small_shm_gives_clear_error_not_sigbus(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {r.stderr.strip()}")
    try:
        out = spawn_world(bodies.hold_segments_then, 2, timeout=60, expect_failure=True,
                          env={"MESHCAST_SHM_DIR": str(mnt)}, mode="normal")
        status, text = out[0]
        assert status == "error"
        assert "ShmError" in text and "MiB" in text and str(mnt) in text
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
