"""Store conformance (meshcast.testing.store_checks) over every Store, plus store-specific behaviour."""

from __future__ import annotations

import functools
import os
import secrets
import threading
import time

import pytest

from meshcast.errors import CommTimeout, InvalidUsage, RendezvousError
from meshcast.rendezvous import (
    FileStore,
    HashStore,
    PrefixStore,
    Store,
    TCPStore,
    TCPStoreServer,
    TorchStore,
    tcp_store,
)
from meshcast.testing import store_checks

pytestmark = pytest.mark.timeout(30)

SECRET = secrets.token_bytes(32)


class OwningPrefixStore(PrefixStore):
    """A PrefixStore that closes its underlying store (so the checks leak no connections)."""

    def close(self) -> None:
        self.underlying_store.close()


def _prefixed(make_store, prefix: str = "outer") -> Store:
    return OwningPrefixStore(prefix, make_store())


@pytest.fixture(scope="module")
def tcp_server():
    with TCPStoreServer("127.0.0.1", 0, SECRET) as server:
        yield server


def _torch_dist():
    return pytest.importorskip("torch.distributed")


def _factory(kind: str, tmp_path, tcp_server):
    """A zero-argument factory of clients of one store of the given kind."""
    if kind == "hash":
        store = HashStore()
        return lambda: store
    if kind == "file":
        return functools.partial(FileStore, str(tmp_path / "store"))
    if kind == "tcp":
        return functools.partial(TCPStore, "127.0.0.1", tcp_server.port, timeout=30.0,
                                 secret=SECRET)
    if kind == "torch-hash":
        dist = _torch_dist()
        store = TorchStore(dist.HashStore(), timeout=30.0)
        return lambda: store
    if kind == "torch-tcp":
        dist = _torch_dist()
        from datetime import timedelta

        master = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30),
                               wait_for_workers=False)
        # Keep the hosting store alive as long as the factory.
        return functools.partial(_torch_tcp_client, master.port, _keepalive=master)
    raise AssertionError(kind)


def _torch_tcp_client(port: int, _keepalive=None) -> Store:
    from datetime import timedelta

    import torch.distributed as dist

    return TorchStore(dist.TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=30),
                                    wait_for_workers=False))


KINDS = ["hash", "file", "tcp", "torch-hash", "torch-tcp"]


@pytest.mark.parametrize("check", store_checks.CHECKS, ids=lambda c: c.__name__[6:])
@pytest.mark.parametrize("kind", KINDS)
def test_store_conformance(kind, check, tmp_path, tcp_server):
    check(_factory(kind, tmp_path, tcp_server))


@pytest.mark.parametrize("check", store_checks.CHECKS, ids=lambda c: c.__name__[6:])
@pytest.mark.parametrize("kind", ["hash", "file", "tcp"])
def test_prefix_store_conformance(kind, check, tmp_path, tcp_server):
    check(functools.partial(_prefixed, _factory(kind, tmp_path, tcp_server)))


@pytest.mark.parametrize("kind", ["file", "tcp"])
def test_store_get_blocks_until_set_by_process(kind, tmp_path, tcp_server):
    store_checks.check_get_blocks_until_set_by_process(_factory(kind, tmp_path, tcp_server))


# -- TCPStore ------------------------------------------------------------------


def test_tcp_store_master_hosts_server_and_port_zero_picks_one():
    with TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=10, secret=SECRET) as master:
        assert master.port > 0 and master.server is not None
        with TCPStore("127.0.0.1", master.port, 2, timeout=10, secret=SECRET) as client:
            client.set("k", b"v")
            assert master.get("k") == b"v"


def _free_port() -> int:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as sock:
        return sock.getsockname()[1]


def test_tcp_store_wait_for_workers_blocks_master_until_all_joined():
    port = _free_port()
    outcome: list[object] = []

    def master() -> None:
        try:
            outcome.append(TCPStore("127.0.0.1", port, 3, is_master=True, timeout=10,
                                    secret=SECRET, wait_for_workers=True))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=master, daemon=True)
    thread.start()
    # Workers may start before the master listens: they retry until it does.
    workers = [TCPStore("127.0.0.1", port, 3, timeout=10, secret=SECRET, wait_for_workers=True)]
    time.sleep(0.3)
    assert thread.is_alive(), "the master returned with 2 of 3 workers joined"
    workers.append(TCPStore("127.0.0.1", port, 3, timeout=10, secret=SECRET,
                            wait_for_workers=True))
    thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], TCPStore), outcome
    workers[0].set("k", b"v")
    assert outcome[0].get("k") == b"v"
    for store in [*workers, outcome[0]]:
        store.close()


def test_tcp_store_wait_for_workers_times_out_naming_counts():
    with pytest.raises(CommTimeout, match="1 of 2 workers joined"):
        TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=0.5, secret=SECRET,
                 wait_for_workers=True)


def test_tcp_store_blocked_get_fails_fast_when_server_closes():
    server = TCPStoreServer("127.0.0.1", 0, SECRET)
    client = TCPStore("127.0.0.1", server.port, timeout=60, secret=SECRET)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            client.get("never")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked, daemon=True)
    thread.start()
    time.sleep(0.2)
    start = time.monotonic()
    server.close()
    thread.join(10)
    assert time.monotonic() - start < 5
    assert len(errors) == 1 and isinstance(errors[0], RendezvousError), errors
    assert f"127.0.0.1:{server.port}" in str(errors[0])
    with pytest.raises(RendezvousError):
        client.set("k", b"v")
    client.close()


def test_tcp_store_blocked_get_fails_fast_when_hosting_process_dies(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    proc = ctx.Process(target=_host_store_forever, args=(ready, SECRET))
    proc.start()
    try:
        port = ready.get(timeout=20)
        client = TCPStore("127.0.0.1", port, timeout=60, secret=SECRET)
        errors: list[BaseException] = []
        thread = threading.Thread(target=lambda: _capture(errors, client.get, "never"),
                                  daemon=True)
        thread.start()
        time.sleep(0.2)
        proc.kill()
        thread.join(10)
        assert errors and isinstance(errors[0], RendezvousError), errors
        assert "did the process hosting it exit" in str(errors[0])
        client.close()
    finally:
        proc.kill()
        proc.join(10)


def _host_store_forever(ready, secret: bytes) -> None:
    server = TCPStoreServer("127.0.0.1", 0, secret)
    ready.put(server.port)
    time.sleep(60)


def _capture(errors: list, fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as exc:
        errors.append(exc)


def test_tcp_store_client_close_wakes_its_own_blocked_get(tcp_server):
    client = TCPStore("127.0.0.1", tcp_server.port, timeout=60, secret=SECRET)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _capture(errors, client.get, "never"), daemon=True)
    thread.start()
    time.sleep(0.2)
    client.close()
    thread.join(10)
    assert errors and isinstance(errors[0], RendezvousError)


def test_tcp_store_client_timeout_is_enforced_without_server_answer(monkeypatch):
    # A "server" that completes nothing: connect works, the handshake never comes.
    import socket

    monkeypatch.setattr(tcp_store, "HANDSHAKE_TIMEOUT", 0.5)
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        port = listener.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(RendezvousError, match="no handshake"):
            TCPStore("127.0.0.1", port, timeout=10, secret=SECRET)
        assert time.monotonic() - start < 3
    finally:
        listener.close()


def test_tcp_store_rejects_port_zero_for_clients():
    with pytest.raises(InvalidUsage, match="port"):
        TCPStore("127.0.0.1", 0)


# -- FileStore -------------------------------------------------------------------


def test_file_store_last_rank_to_close_deletes_the_file(tmp_path):
    path = tmp_path / "job.store"
    stores = [FileStore(path, world_size=3) for _ in range(3)]
    stores[0].set("k", b"v")
    stores[0].close()
    stores[1].close()
    assert path.exists()
    stores[2].close()
    assert not path.exists()
    stores[2].close()  # idempotent


def test_file_store_refuses_a_leftover_file(tmp_path):
    path = tmp_path / "job.store"
    first = [FileStore(path, world_size=2) for _ in range(2)]
    first[0].close()  # rank 1 "crashes": never closes, the file stays
    with pytest.raises(RendezvousError, match="left over from an earlier run"):
        FileStore(path, world_size=2)
    os.close(first[1]._fd)  # release without leaving


def test_file_store_refuses_a_file_already_full(tmp_path):
    path = tmp_path / "job.store"
    stores = [FileStore(path, world_size=2) for _ in range(2)]
    with pytest.raises(RendezvousError, match=str(path)):
        FileStore(path, world_size=2)
    for store in stores:
        store.close()


def test_file_store_refuses_a_foreign_file(tmp_path):
    path = tmp_path / "not-a-store"
    path.write_bytes(b"torch filestore or anything else")
    with pytest.raises(RendezvousError, match="not a meshcast store file"):
        FileStore(path)


def test_file_store_ignores_a_truncated_last_record(tmp_path):
    path = tmp_path / "job.store"
    store = FileStore(path)
    store.set("good", b"1")
    with open(path, "ab") as f:
        f.write(b"\x01\x00\x00")  # a writer died three bytes into a record header
    other = FileStore(path)
    assert other.get("good") == b"1"
    assert other.check(["good"])
    other.close()
    store.close()


def test_file_store_file_is_private(tmp_path):
    path = tmp_path / "job.store"
    store = FileStore(path)
    assert os.stat(path).st_mode & 0o077 == 0
    store.close()


# -- PrefixStore ------------------------------------------------------------------


def test_prefix_store_rejects_empty_prefix_and_non_store():
    with pytest.raises(InvalidUsage):
        PrefixStore("", HashStore())
    with pytest.raises(InvalidUsage):
        PrefixStore("p", object())  # type: ignore[arg-type]


def test_prefix_store_shares_timeout_with_underlying():
    base = HashStore(timeout=7)
    prefixed = PrefixStore("p", base)
    assert prefixed.timeout == 7
    prefixed.set_timeout(3)
    assert base.timeout == 3


# -- TorchStore -------------------------------------------------------------------


def test_torch_store_rejects_non_torch_store():
    _torch_dist()
    with pytest.raises(InvalidUsage, match="torch.distributed.Store"):
        TorchStore(HashStore())


def test_torch_store_over_a_meshcast_store_under_torch_prefix_times_out_as_a_timeout():
    # torch's init_process_group wraps the store it is given in its PrefixStore; when
    # that store is meshcast's (for_torch), a wait that runs out raises meshcast's own
    # CommTimeout through torch, which must stay a timeout ("key ... not set"), not a
    # failed store: meshcast's short waits loop on it (a RendezvousError under load
    # once broke init_process_group("meshcast") under meshcast run).
    dist = _torch_dist()
    from meshcast.rendezvous.torch_store import for_torch

    beneath = for_torch(HashStore(timeout=5))  # (torch holds no Python reference to it)
    store = TorchStore(dist.PrefixStore("pg/0/", beneath), 5)
    with pytest.raises(CommTimeout, match="'x' not set within"):
        store.wait(["x"], 0.05)
    store.set("x", b"1")
    store.wait(["x"], 0.05)
