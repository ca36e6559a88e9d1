"""Init URLs (env://, tcp://, file://) with real spawned ranks, and their error messages."""

from __future__ import annotations

import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import threading
import time

import pytest

from meshcast.errors import AuthenticationError, CommTimeout, InvalidUsage, RendezvousError
from meshcast.rendezvous import (
    FileStore,
    TCPStore,
    TCPStoreServer,
    TorchStore,
    rendezvous,
)
from meshcast.rendezvous.tcp_store import private_dir, write_private_file

pytestmark = pytest.mark.timeout(30)

LAUNCHER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "PALS_", "SLURM_", "I_MPI_", "MPI_LOCAL",
                     "TORCHELASTIC_", "MESHCAST_")
SPAWNER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
WORLD = 3


def _clear_launcher_env(environ) -> None:
    for name in list(environ):
        if name.startswith(LAUNCHER_PREFIXES) or name in SPAWNER_VARS:
            del environ[name]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(LAUNCHER_PREFIXES) or name in SPAWNER_VARS:
            monkeypatch.delenv(name)
    return monkeypatch


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return sock.getsockname()[1]


# -- spawned worlds ------------------------------------------------------------------


def _rank_main(url: str, env: dict, rank: int, world_size: int, results, release) -> None:
    """One rank: rendezvous, publish a greeting, read everyone's, report to the parent."""
    _clear_launcher_env(os.environ)
    os.environ.update(env)
    try:
        store, rank, world_size = rendezvous(url, rank, world_size, timeout=20)
        store.set(f"hello/{rank}", f"rank {rank} of {world_size}")
        store.wait([f"hello/{r}" for r in range(world_size)])
        seen = [store.get(f"hello/{r}").decode() for r in range(world_size)]
        arrivals = store.add("arrivals", 1)
        results.put((rank, world_size, seen, arrivals, type(store).__name__))
        # Rank 0 may host the store: nobody closes until the parent has every report.
        release.wait(20)
        store.close()
    except BaseException as exc:
        results.put(("error", f"{type(exc).__name__}: {exc}"))
        raise


def run_world(urls: list[str], envs: list[dict], ranks: list[int] | None = None) -> list[tuple]:
    """Spawn one process per (url, env, rank); return their reports sorted by rank."""
    ctx = multiprocessing.get_context("spawn")
    results, release = ctx.Queue(), ctx.Event()
    ranks = ranks or [-1] * len(urls)
    procs = [ctx.Process(target=_rank_main, args=(url, env, rank, -1, results, release))
             for url, env, rank in zip(urls, envs, ranks)]
    for proc in procs:
        proc.start()
    try:
        reports = [results.get(timeout=25) for _ in procs]
        errors = [r for r in reports if r[0] == "error"]
        assert not errors, errors
        release.set()
        for proc in procs:
            proc.join(15)
        assert [p.exitcode for p in procs] == [0] * len(procs)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    return sorted(reports)


def assert_agreed(reports: list[tuple], store_type: str, world: int = WORLD) -> None:
    expected = [f"rank {r} of {world}" for r in range(world)]
    assert [r[0] for r in reports] == list(range(world))
    for rank, world_size, seen, _, kind in reports:
        assert world_size == world and seen == expected and kind == store_type, (rank, kind)
    assert sorted(r[3] for r in reports) == list(range(1, world + 1)), "lost an add"


def test_env_url_with_master_addr_three_ranks():
    port = free_port()
    envs = [{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
             "WORLD_SIZE": str(WORLD)} for r in range(WORLD)]
    assert_agreed(run_world(["env://"] * WORLD, envs), "TCPStore")


def test_tcp_url_three_ranks():
    url = f"tcp://127.0.0.1:{free_port()}?world_size={WORLD}"
    assert_agreed(run_world([url] * WORLD, [{}] * WORLD, ranks=list(range(WORLD))), "TCPStore")


def test_file_url_three_ranks_and_file_removed(tmp_path):
    path = tmp_path / "job.store"
    urls = [f"file://{path}?rank={r}&world_size={WORLD}" for r in range(WORLD)]
    assert_agreed(run_world(urls, [{}] * WORLD), "FileStore")
    assert not path.exists(), "the last rank to close should delete the store file"


def test_env_url_bulletin_file_with_emulated_open_mpi():
    envs = [{"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(WORLD),
             "OMPI_COMM_WORLD_LOCAL_RANK": str(r), "OMPI_COMM_WORLD_LOCAL_SIZE": str(WORLD)}
            for r in range(WORLD)]
    assert_agreed(run_world(["env://"] * WORLD, envs), "TCPStore")
    leftovers = list(private_dir().glob(f"bulletin-openmpi-{os.getpid()}*"))
    assert not leftovers, f"rank 0 should delete the bulletin file: {leftovers}"


# -- env:// modes in-process ---------------------------------------------------------


def test_env_url_store_hosted_by_launcher(clean_env):
    secret = secrets.token_bytes(32)
    with TCPStoreServer("127.0.0.1", 0, secret) as server:
        for name, value in {"MESHCAST_STORE_HOSTED": "1", "MESHCAST_SECRET": secret.hex(),
                            "MESHCAST_RUN_ID": "job", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": str(server.port), "RANK": "0",
                            "WORLD_SIZE": "2"}.items():
            clean_env.setenv(name, value)
        store, rank, world_size = rendezvous("env://", timeout=5)
        # Even rank 0 is only a client: the launcher's store outlives every rank.
        assert (rank, world_size) == (0, 2) and store.server is None
        store.set("k", b"v")
        with TCPStore("127.0.0.1", server.port, secret=secret, timeout=5) as other:
            assert other.get("k") == b"v"
        store.close()


def test_env_url_torchrun_agent_store(clean_env):
    dist = pytest.importorskip("torch.distributed")
    from datetime import timedelta

    agent = dist.TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=10), wait_for_workers=False)
    for name, value in {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "r1",
                        "TORCHELASTIC_RESTART_COUNT": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(agent.port), "RANK": "1", "WORLD_SIZE": "2",
                        "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        clean_env.setenv(name, value)
    store, rank, world_size = rendezvous("env://", timeout=10)
    assert isinstance(store, TorchStore) and (rank, world_size) == (1, 2)
    store.set("from-meshcast", b"hi")
    assert agent.get("from-meshcast") == b"hi"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _bulletin_env(clean_env, world: int = 2) -> None:
    for name, value in {"OMPI_COMM_WORLD_SIZE": str(world), "OMPI_COMM_WORLD_RANK": "0",
                        "OMPI_COMM_WORLD_LOCAL_SIZE": str(world),
                        "OMPI_COMM_WORLD_LOCAL_RANK": "0"}.items():
        clean_env.setenv(name, value)


def test_bulletin_ignores_a_stale_file_from_a_dead_rank0(clean_env):
    _bulletin_env(clean_env)
    stale = private_dir() / f"bulletin-openmpi-{os.getppid()}.json"
    write_private_file(stale, (f'{{"host": "127.0.0.1", "port": {free_port()}, "secret": '
                               f'"{"ab" * 32}", "pid": {_dead_pid()}, "world_size": 2}}').encode())
    outcome: dict[int, object] = {}

    def rank(r: int) -> None:
        try:
            outcome[r] = rendezvous("env://", rank=r, timeout=10)[0]
        except BaseException as exc:
            outcome[r] = exc

    # Rank 1 arrives first and finds only the stale file; rank 0 comes later.
    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in (1, 0)]
    threads[0].start()
    time.sleep(0.3)
    threads[1].start()
    for thread in threads:
        thread.join(20)
    assert all(isinstance(outcome[r], TCPStore) for r in (0, 1)), outcome
    outcome[1].set("k", b"v")
    assert outcome[0].get("k") == b"v"
    assert not stale.exists()
    outcome[1].close()
    outcome[0].close()


def test_bulletin_without_rank0_explains_the_parent_process_rule(clean_env):
    _bulletin_env(clean_env)
    with pytest.raises(RendezvousError, match="parent process"):
        rendezvous("env://", rank=1, timeout=0.3)


def test_bulletin_rank0_times_out_when_others_never_join(clean_env):
    _bulletin_env(clean_env)
    with pytest.raises(CommTimeout, match="1 of 2 ranks joined"):
        rendezvous("env://", rank=0, timeout=0.3)
    assert not list(private_dir().glob(f"bulletin-openmpi-{os.getppid()}*"))


# -- missing variables and bad URLs ---------------------------------------------------


@pytest.mark.parametrize("variables,match", [
    ({}, "env://: environment variable RANK is not set"),
    ({"RANK": "0"}, "env://: environment variable WORLD_SIZE is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "env://: environment variable MASTER_ADDR is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"},
     "env://: environment variable MASTER_PORT is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MESHCAST_STORE_HOSTED": "1"},
     "env://: environment variable MASTER_ADDR is not set"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8",
      "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
     "MASTER_ADDR is not set and this openmpi job has 8 ranks, 4 of them on this node"),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "2 ranks, an unknown number of them on this node"),
])
def test_env_url_errors_name_the_missing_variable(clean_env, variables, match):
    for name, value in variables.items():
        clean_env.setenv(name, value)
    with pytest.raises(RendezvousError, match=match):
        rendezvous("env://", timeout=1)


def test_env_url_query_and_arguments_override_environment(clean_env):
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "5")
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", "0")  # rank 0 may pick a free port in-process
    with pytest.raises(RendezvousError, match="MASTER_PORT=0 is not a port"):
        rendezvous("env://", rank=0, world_size=1, timeout=1)
    clean_env.setenv("MASTER_PORT", str(free_port()))
    store, rank, world_size = rendezvous("env://?world_size=1", rank=0, timeout=5)
    assert (rank, world_size) == (0, 1) and store.server is not None
    store.close()


@pytest.mark.parametrize("url,match", [
    ("tcp://127.0.0.1:1234?world_size=2", "tcp://: rank is missing"),
    ("tcp://127.0.0.1:1234?rank=0", "tcp://: world_size is missing"),
    ("tcp://127.0.0.1?rank=0&world_size=2", "tcp://: port is missing"),
    ("tcp://:1234?rank=0&world_size=2", "tcp://: host is missing"),
    ("tcp://127.0.0.1:1234?rank=x&world_size=2", "tcp://: query parameter rank='x'"),
    ("tcp://127.0.0.1:1234?rank=2&world_size=2", "tcp://: rank 2 is not below world_size 2"),
    ("file:///tmp/x?rank=0", "file://: world_size is missing"),
    ("file://somehost/tmp/x?rank=0&world_size=1", "file://: .* names host 'somehost'"),
    ("file://?rank=0&world_size=1", "file://: the path is missing"),
    ("nccl://x", r"no handler for nccl:// \(known: env://, file://, tcp://\)"),
    ("no-scheme", "must look like scheme://"),
])
def test_url_errors(url, match):
    with pytest.raises(RendezvousError, match=match):
        rendezvous(url, timeout=1)


def test_rank_argument_is_validated():
    with pytest.raises(InvalidUsage, match="'rank'"):
        rendezvous("tcp://127.0.0.1:1?world_size=1", rank=-5)


def test_store_errors_keep_their_class_and_gain_the_scheme_prefix(clean_env):
    with TCPStoreServer("127.0.0.1", 0, secrets.token_bytes(32)) as server:
        clean_env.setenv("MESHCAST_SECRET", secrets.token_hex(32))
        with pytest.raises(AuthenticationError, match=r"^tcp://: TCPStore: the store at"):
            rendezvous(f"tcp://127.0.0.1:{server.port}?rank=1&world_size=2", timeout=5)
    port = free_port()
    with pytest.raises(RendezvousError, match=f"^tcp://: .*could not reach the store at "
                                              f"127.0.0.1:{port}"):
        rendezvous(f"tcp://127.0.0.1:{port}?rank=1&world_size=2", timeout=0.3)


def test_file_url_in_process(tmp_path):
    store, rank, world_size = rendezvous(f"file://{tmp_path}/s?world_size=1", rank=0)
    assert isinstance(store, FileStore) and (rank, world_size) == (0, 1)
    store.close()
