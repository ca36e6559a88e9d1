"""Tests of meshcast's ``spawn`` (torch.multiprocessing.spawn's contract, plus PDEATHSIG)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meshcast._spawn import ProcessExitedError, ProcessRaisedError, SpawnError, spawn
from meshcast.errors import InvalidUsage, MeshcastError

SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))  # spawned children inherit sys.path and unpickle from here

import spawn_targets  # noqa: E402


def pids(out: Path, n: int) -> list[int]:
    return [json.loads((out / f"pid-{i}.json").read_text()) for i in range(n)]


def assert_gone(pid: int, allow_zombie: bool = False, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if allow_zombie and state == "Z":
            return
        assert time.monotonic() < deadline, f"pid {pid} is still alive (state {state})"
        time.sleep(0.02)


@pytest.mark.timeout(60)
def test_spawn_returns_after_all_succeed(tmp_path: Path) -> None:
    assert spawn(spawn_targets.square, args=(str(tmp_path),), nprocs=3) is None
    assert [json.loads((tmp_path / f"result-{i}.json").read_text()) for i in range(3)] == [0, 1, 4]


@pytest.mark.timeout(60)
def test_spawn_raising_child_raises_with_its_traceback(tmp_path: Path) -> None:
    with pytest.raises(ProcessRaisedError) as info:
        spawn(spawn_targets.fail, args=(str(tmp_path), 3, 1, "raise"), nprocs=3)
    err = info.value
    assert isinstance(err, SpawnError) and isinstance(err, MeshcastError)
    children = pids(tmp_path, 3)
    assert err.error_index == 1 and err.pid == err.error_pid == children[1]
    message = str(err)
    assert f"process 1 (pid {children[1]})" in message
    assert "KeyError: 'child 1 lost its key'" in message
    assert "spawn_targets.py" in message and "in fail" in message
    assert "_child" not in message  # the traceback starts in the user's function
    for pid in children:
        assert_gone(pid)


@pytest.mark.timeout(60)
def test_spawn_exiting_child_raises_with_exit_code(tmp_path: Path) -> None:
    with pytest.raises(ProcessExitedError) as info:
        spawn(spawn_targets.fail, args=(str(tmp_path), 2, 0, "exit3"), nprocs=2)
    assert info.value.error_index == 0 and info.value.exit_code == 3
    assert info.value.signal_name is None
    assert "exited with code 3" in str(info.value)
    for pid in pids(tmp_path, 2):
        assert_gone(pid)


@pytest.mark.timeout(60)
def test_spawn_killed_child_names_the_signal(tmp_path: Path) -> None:
    with pytest.raises(ProcessExitedError) as info:
        spawn(spawn_targets.fail, args=(str(tmp_path), 2, 1, "sigkill"), nprocs=2)
    assert info.value.exit_code == -9 and info.value.signal_name == "SIGKILL"
    assert "killed by signal 9 (SIGKILL)" in str(info.value)


@pytest.mark.timeout(60)
def test_spawn_join_false_returns_context() -> None:
    ctx = spawn(spawn_targets.sleep_briefly, args=(0.5,), nprocs=2, join=False)
    assert ctx is not None
    assert len(ctx.pids()) == 2 and all(pid > 0 for pid in ctx.pids())
    assert ctx.join(timeout=0.01) is False  # still sleeping
    while not ctx.join(timeout=10):
        pass
    assert ctx.join() is True  # joining again is harmless
    assert [p.exitcode for p in ctx.processes] == [0, 0]


@pytest.mark.timeout(60)
def test_spawn_children_die_with_their_parent(tmp_path: Path) -> None:
    # TMPDIR: the parent dies by os._exit, so spawn's own temp dir must land in tmp_path.
    parent = subprocess.run([sys.executable, SCRIPTS / "spawn_targets.py", tmp_path],
                            timeout=40, capture_output=True, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert parent.returncode == 0, parent.stderr
    for pid in pids(tmp_path, 2):
        # Orphans are reparented to pid 1, which may never reap them.
        assert_gone(pid, allow_zombie=True)


@pytest.mark.parametrize("kwargs, needle", [
    ({"nprocs": 0}, "'nprocs' must be a positive int"),
    ({"nprocs": 1, "start_method": "teleport"}, "'start_method' must be one of"),
])
def test_spawn_rejects_bad_arguments(kwargs: dict, needle: str) -> None:
    with pytest.raises(InvalidUsage, match=needle):
        spawn(spawn_targets.square, args=("unused",), **kwargs)
