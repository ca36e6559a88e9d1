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
@pytest.mark.parametrize("named", [False, True], ids=["memfd", "named"])
def test_no_segment_left_behind(mode, named, tmp_path):
    shm_dir = str(tmp_path) if named else "/dev/shm"
    before = _meshcast_entries("/dev/shm")
    env = {"MESHCAST_SHM_DIR": shm_dir} if named else {}
    out = spawn_world(bodies.hold_segments_then, 3, timeout=60, env=env,
                      expect_failure=True, mode=mode)
    if mode == "normal":
        assert all(s == "ok" for s, _ in out), out
    else:
        assert out[1][0] == "error"
    assert _meshcast_entries(shm_dir) == ([] if named else before)
    assert _meshcast_entries("/dev/shm") == before


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
