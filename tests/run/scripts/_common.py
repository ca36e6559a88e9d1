"""Helpers shared by the launcher's test worker scripts (they only read env, write files, sleep)."""

import json
import os
import time


def write_json(out_dir: str, name: str, obj: object) -> None:
    tmp = os.path.join(out_dir, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, os.path.join(out_dir, name))


def wait_for_files(out_dir: str, names: list, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(out_dir, n)) for n in names):
        if time.monotonic() > deadline:
            raise TimeoutError(f"files {names} did not all appear in {out_dir}")
        time.sleep(0.02)
