"""``meshcast run --nnodes N``: the launchers meet through the store before any worker
starts (meshcast/run/nodes.py), all on loopback. Uneven --nproc-per-node, a node with
another secret, nodes that disagree on --nnodes or share a --node-rank, and a failed
worker announced to the other nodes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = pytest.mark.timeout(60)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(secret: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MESHCAST_SECRET", "MESHCAST_RUN_ID", "OMP_NUM_THREADS")}
    if secret is not None:
        env["MESHCAST_SECRET"] = secret
    env.update(extra)
    return env


def _node(port: int, nnodes: int, node_rank: int, nproc: int, argv: list[str],
          env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "meshcast.run", "--nnodes", str(nnodes), "--node-rank",
         str(node_rank), "-n", str(nproc), "--master-addr", "127.0.0.1", "--master-port",
         str(port), *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env=env)


def _finish(*nodes: subprocess.Popen, timeout: float = 45) -> list[tuple[int, str, str]]:
    out = []
    for node in nodes:
        stdout, stderr = node.communicate(timeout=timeout)
        out.append((node.returncode, stdout, stderr))
    return out


def _dumps(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(tmp_path.glob("env-*.json"))]


def test_nodes_with_different_worker_counts_agree_on_ranks(tmp_path):
    port, secret = _port(), os.urandom(32).hex()
    argv = [str(SCRIPTS / "envdump.py"), str(tmp_path)]
    # node 1 first: it waits for node 0's store, as it may on a real cluster
    n1 = _node(port, 2, 1, 1, argv, _env(secret))
    n0 = _node(port, 2, 0, 3, argv, _env(secret))
    for code, _, err in _finish(n0, n1):
        assert code == 0, err
    envs = {int(d["env"]["RANK"]): d["env"] for d in _dumps(tmp_path)}
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, env in envs.items():
        assert env["WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "4"
        node = 0 if rank < 3 else 1
        assert env["GROUP_RANK"] == str(node) and env["GROUP_WORLD_SIZE"] == "2"
        assert env["LOCAL_WORLD_SIZE"] == ("3" if node == 0 else "1")
        assert env["LOCAL_RANK"] == str(rank if node == 0 else 0)


def test_a_node_with_another_secret_is_refused_and_nothing_starts(tmp_path):
    port = _port()
    argv = [str(SCRIPTS / "envdump.py"), str(tmp_path)]
    t0 = time.monotonic()
    n0 = _node(port, 2, 0, 2, argv, _env(os.urandom(32).hex()))
    n1 = _node(port, 2, 1, 2, argv, _env(os.urandom(32).hex()))
    (c0, _, e0), (c1, _, e1) = _finish(n0, n1)
    assert c1 == 1 and "refused this node's MESHCAST_SECRET" in e1, e1
    assert c0 == 1 and "node(s) [1] did not join" in e0 and "127.0.0.1" in e0, e0
    assert "no worker was started" in e0 and "no worker was started" in e1
    assert time.monotonic() - t0 < 20  # not the rendezvous timeout (300 s)
    assert not list(tmp_path.iterdir())


def test_nodes_that_disagree_on_nnodes_all_fail_before_starting(tmp_path):
    port, secret = _port(), os.urandom(32).hex()
    argv = [str(SCRIPTS / "envdump.py"), str(tmp_path)]
    n0 = _node(port, 2, 0, 1, argv, _env(secret))
    n1 = _node(port, 3, 1, 1, argv, _env(secret))
    for code, _, err in _finish(n0, n1):
        assert code == 1 and "the nodes disagree on --nnodes" in err, err
    assert not list(tmp_path.iterdir())


def test_two_launchers_with_one_node_rank_are_caught(tmp_path):
    port, secret = _port(), os.urandom(32).hex()
    argv = [str(SCRIPTS / "envdump.py"), str(tmp_path)]
    first = _node(port, 3, 0, 1, argv, _env(secret, MESHCAST_TIMEOUT="5"))
    a = _node(port, 3, 1, 1, argv, _env(secret, MESHCAST_TIMEOUT="5"))
    time.sleep(1.0)
    b = _node(port, 3, 1, 1, argv, _env(secret, MESHCAST_TIMEOUT="5"))
    results = _finish(first, a, b)
    assert all(code == 1 for code, _, _ in results), results
    assert "two launchers claim --node-rank 1" in results[2][2], results[2][2]
    assert not list(tmp_path.iterdir())


def test_a_failed_worker_is_announced_to_the_other_nodes(tmp_path):
    """Node 1's worker exits 3; node 0's worker finds the notice its launcher wrote."""
    port, secret = _port(), os.urandom(32).hex()
    reader = tmp_path / "reader.py"
    reader.write_text(
        "import json, os, sys\n"
        "from meshcast.rendezvous import TCPStore\n"
        "from meshcast._hostwatch import NOTICE_KEY\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise SystemExit(3)\n"
        "store = TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']), timeout=30)\n"
        "notice = json.loads(store.get(NOTICE_KEY))\n"
        "print('NOTICE', json.dumps(notice), flush=True)\n")
    n0 = _node(port, 2, 0, 1, [str(reader)], _env(secret))
    n1 = _node(port, 2, 1, 1, [str(reader)], _env(secret))
    (c0, out0, e0), (c1, _, e1) = _finish(n0, n1)
    assert c1 == 3, e1
    assert c0 == 0, e0
    notice = json.loads(out0.split("NOTICE ", 1)[1])
    host = socket.gethostname()
    assert notice["text"] == f"rank 1 (local_rank 0) on host {host} failed with exit code 3"
    assert notice["rank"] == 1 and notice["by"] == f"the launcher on {host}"
