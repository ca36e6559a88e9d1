"""spawn() with hand-set MASTER_ADDR/MASTER_PORT: rank 0 hosts the store, as in torch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(90)

HERE = os.path.dirname(__file__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("n", [2, 3])
def test_tutorial_style_spawn(tmp_path, n):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MESHCAST_", "RANK",
                                                                     "WORLD_SIZE", "MASTER_"))}
    r = subprocess.run([sys.executable, os.path.join(HERE, "spawn_style.py"), str(_free_port()),
                        str(tmp_path), str(n)], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0, r.stderr
    total = float(sum(range(n)))
    for rank in range(n):
        assert (tmp_path / f"rank{rank}").read_text() == str(total)
