"""Functions run by meshcast.spawn in tests/run/test_spawn.py (module level: picklable)."""

import json
import os
import signal
import sys
import time


def _record(out_dir: str, i: int) -> None:
    with open(os.path.join(out_dir, f".pid-{i}"), "w") as f:
        json.dump(os.getpid(), f)
    os.replace(os.path.join(out_dir, f".pid-{i}"), os.path.join(out_dir, f"pid-{i}.json"))


def _wait_for_all(out_dir: str, n: int) -> None:
    deadline = time.monotonic() + 30
    while not all(os.path.exists(os.path.join(out_dir, f"pid-{r}.json")) for r in range(n)):
        assert time.monotonic() < deadline
        time.sleep(0.02)


def square(i: int, out_dir: str) -> None:
    with open(os.path.join(out_dir, f"result-{i}.json"), "w") as f:
        json.dump(i * i, f)


def fail(i: int, out_dir: str, n: int, bad: int, how: str) -> None:
    """Record the pid; once all have, process ``bad`` fails as ``how``; the rest sleep."""
    _record(out_dir, i)
    _wait_for_all(out_dir, n)
    if i == bad:
        if how == "raise":
            raise KeyError(f"child {i} lost its key")
        if how == "exit3":
            os._exit(3)
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)


def sleep_briefly(i: int, seconds: float) -> None:
    time.sleep(seconds)


if __name__ == "__main__":
    # A parent that dies without joining: its children must die with it.
    import meshcast._spawn as spawn_mod

    out_dir = sys.argv[1]
    ctx = spawn_mod.spawn(fail, args=(out_dir, 2, -1, "none"), nprocs=2, join=False)
    _wait_for_all(out_dir, 2)
    os._exit(0)
