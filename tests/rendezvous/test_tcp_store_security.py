"""TCPStore under hostile or broken peers: authentication, framing caps, binding, secrets."""

from __future__ import annotations

import os
import secrets
import socket
import stat
import struct
import threading
import time
from pathlib import Path

import pytest

from meshcast.errors import AuthenticationError, InvalidUsage, RendezvousError
from meshcast.rendezvous import TCPStore, TCPStoreServer, tcp_store
from meshcast.rendezvous.tcp_store import (
    _ANSWER,
    _HELLO,
    _VERDICT,
    MAGIC,
    MAX_VALUE_BYTES,
    OP_SET,
    PROTOCOL_VERSION,
    REQUEST,
    RESPONSE,
    STATUS_INVALID,
    _mac,
)

pytestmark = pytest.mark.timeout(30)

SECRET = secrets.token_bytes(32)


@pytest.fixture
def server():
    with TCPStoreServer("127.0.0.1", 0, SECRET) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _no_env_secret(monkeypatch):
    monkeypatch.delenv("MESHCAST_SECRET", raising=False)


def assert_serves(server: TCPStoreServer) -> None:
    """A legitimate client still gets service."""
    with TCPStore("127.0.0.1", server.port, timeout=5, secret=SECRET) as client:
        key = f"alive-{secrets.token_hex(4)}"
        client.set(key, b"yes")
        assert client.get(key) == b"yes"


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def closed_by_server(sock: socket.socket, within: float = 5.0) -> bool:
    """Read until the server closes; True if it did within ``within`` seconds."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def raw_connect(server: TCPStoreServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def raw_authenticated(server: TCPStoreServer, secret: bytes = SECRET) -> socket.socket:
    """A hand-made client that completes the handshake, to send hand-made frames."""
    sock = raw_connect(server)
    _, _, server_nonce = _HELLO.unpack(recv_exact(sock, _HELLO.size))
    client_nonce = os.urandom(32)
    sock.sendall(_ANSWER.pack(MAGIC, PROTOCOL_VERSION, client_nonce,
                              _mac(secret, b"client->server", server_nonce, client_nonce)))
    ok, _ = _VERDICT.unpack(recv_exact(sock, _VERDICT.size))
    assert ok == 1
    return sock


def wait_rejected(server: TCPStoreServer, count: int) -> None:
    deadline = time.monotonic() + 5
    while server.rejected_connections < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.rejected_connections >= count


# -- authentication ------------------------------------------------------------------


def test_wrong_secret_is_rejected_and_server_survives(server):
    with pytest.raises(AuthenticationError, match="rejected our secret"):
        TCPStore("127.0.0.1", server.port, timeout=5, secret=secrets.token_bytes(32))
    wait_rejected(server, 1)
    assert_serves(server)


def test_client_refuses_a_server_that_cannot_prove_the_secret():
    # An impostor: valid hello, claims success, but cannot compute the MAC.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def impostor() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(_HELLO.pack(MAGIC, PROTOCOL_VERSION, os.urandom(32)))
            recv_exact(conn, _ANSWER.size)
            conn.sendall(_VERDICT.pack(1, os.urandom(32)))
            time.sleep(0.5)

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    try:
        with pytest.raises(AuthenticationError, match="could not prove"):
            TCPStore("127.0.0.1", port, timeout=5, secret=SECRET)
    finally:
        thread.join(5)
        listener.close()


def test_macs_are_bound_to_direction():
    a, b = os.urandom(32), os.urandom(32)
    assert _mac(SECRET, b"client->server", a, b) != _mac(SECRET, b"server->client", a, b)


def test_short_or_non_bytes_secret_is_refused():
    with pytest.raises(InvalidUsage, match="at least 16 bytes"):
        TCPStoreServer("127.0.0.1", 0, b"short")
    with pytest.raises(InvalidUsage, match="bytes"):
        TCPStoreServer("127.0.0.1", 0, "a-str-secret-of-enough-length")  # type: ignore[arg-type]


def test_meshcast_secret_env_is_the_default_on_both_sides(monkeypatch):
    monkeypatch.setenv("MESHCAST_SECRET", SECRET.hex())
    with TCPStoreServer("127.0.0.1", 0) as srv:
        assert srv.secret_file is None, "no key file when the secret comes from the environment"
        with TCPStore("127.0.0.1", srv.port, timeout=5) as client:
            client.set("k", b"v")
        with pytest.raises(AuthenticationError):
            TCPStore("127.0.0.1", srv.port, timeout=5, secret=secrets.token_bytes(32))


def test_malformed_meshcast_secret_env_is_reported(monkeypatch):
    monkeypatch.setenv("MESHCAST_SECRET", "not-hex")
    with pytest.raises(InvalidUsage, match="MESHCAST_SECRET must be hexadecimal"):
        TCPStoreServer("127.0.0.1", 0)


# -- hostile bytes -------------------------------------------------------------------


def test_garbage_bytes_close_only_that_connection(server):
    sock = raw_connect(server)
    sock.sendall(os.urandom(512))
    assert closed_by_server(sock)
    sock.close()
    assert_serves(server)


def test_http_request_is_dropped_at_once(server):
    sock = raw_connect(server)
    start = time.monotonic()
    sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert closed_by_server(sock)
    assert time.monotonic() - start < 2, "dropped only at the handshake deadline"
    sock.close()
    assert_serves(server)


def test_truncated_handshake_closes_only_that_connection(server):
    sock = raw_connect(server)
    recv_exact(sock, _HELLO.size)
    sock.sendall(MAGIC + bytes([PROTOCOL_VERSION]) + b"\x00" * 10)
    sock.close()
    wait_rejected(server, 1)
    assert_serves(server)


def test_idle_connection_that_never_handshakes(server, monkeypatch):
    monkeypatch.setattr(tcp_store, "HANDSHAKE_TIMEOUT", 0.3)
    idle = raw_connect(server)
    assert_serves(server)  # served while the idle one sits there
    assert closed_by_server(idle, within=5), "idle connection outlived the handshake deadline"
    idle.close()
    assert_serves(server)


def test_huge_length_before_authentication(server):
    sock = raw_connect(server)
    sock.sendall(REQUEST.pack(MAGIC, PROTOCOL_VERSION, OP_SET, 0, 8, 2**63, 0) + b"x" * 64)
    assert closed_by_server(sock)
    sock.close()
    assert_serves(server)


def _expect_invalid_then_close(sock: socket.socket) -> bytes:
    magic, version, status, _, size = RESPONSE.unpack(recv_exact(sock, RESPONSE.size))
    assert (magic, version, status) == (MAGIC, PROTOCOL_VERSION, STATUS_INVALID)
    message = recv_exact(sock, size)
    assert closed_by_server(sock)
    return message


@pytest.mark.parametrize("key_len,body_len", [(8, 2**63), (2**32 - 1, 0), (8, 2**64 - 1)])
def test_huge_lengths_after_authentication_are_refused_without_allocating(server, key_len,
                                                                          body_len):
    sock = raw_authenticated(server)
    sock.sendall(REQUEST.pack(MAGIC, PROTOCOL_VERSION, OP_SET, 0, key_len, body_len, 0))
    message = _expect_invalid_then_close(sock)
    assert b"exceeds the limit" in message
    sock.close()
    assert_serves(server)


def test_unknown_opcode_and_bad_magic_after_authentication(server):
    sock = raw_authenticated(server)
    sock.sendall(REQUEST.pack(MAGIC, PROTOCOL_VERSION, 200, 0, 0, 0, 0))
    assert b"unknown opcode" in _expect_invalid_then_close(sock)
    sock.close()
    sock = raw_authenticated(server)
    sock.sendall(REQUEST.pack(b"HTTP", PROTOCOL_VERSION, OP_SET, 0, 0, 0, 0))
    assert closed_by_server(sock)
    sock.close()
    assert_serves(server)


def test_truncated_frame_after_authentication(server, monkeypatch):
    monkeypatch.setattr(tcp_store, "FRAME_TIMEOUT", 0.3)
    stalled = raw_authenticated(server)
    stalled.sendall(REQUEST.pack(MAGIC, PROTOCOL_VERSION, OP_SET, 0, 3, 100, 0)[:10])
    assert_serves(server)
    assert closed_by_server(stalled), "a half-sent frame held the connection past FRAME_TIMEOUT"
    stalled.close()
    cut = raw_authenticated(server)
    cut.sendall(REQUEST.pack(MAGIC, PROTOCOL_VERSION, OP_SET, 0, 3, 100, 0) + b"key" + b"v" * 10)
    cut.close()
    assert_serves(server)


def test_oversize_value_is_refused_with_a_clear_error(server):
    with TCPStore("127.0.0.1", server.port, timeout=5, secret=SECRET) as client:
        with pytest.raises(InvalidUsage, match="at most 16 MiB"):
            client.set("big", b"\0" * (MAX_VALUE_BYTES + 1))
        with pytest.raises(InvalidUsage, match="limit of 8192"):
            client.get("k" * 9000)
        client.set("fits", b"\0" * MAX_VALUE_BYTES)  # the limit itself is allowed
        assert len(client.get("fits")) == MAX_VALUE_BYTES
    # The server enforces the cap too, for clients that skip the check.
    sock = raw_authenticated(server)
    sock.sendall(REQUEST.pack(MAGIC, PROTOCOL_VERSION, OP_SET, 0, 3, MAX_VALUE_BYTES + 1, 0))
    assert b"exceeds the limit" in _expect_invalid_then_close(sock)
    sock.close()


def test_connection_cap_drops_extra_connections(server, monkeypatch):
    monkeypatch.setattr(tcp_store, "MAX_CONNECTIONS", 2)
    idle = [raw_connect(server)]
    recv_exact(idle[0], _HELLO.size)  # accepted and being served
    with TCPStore("127.0.0.1", server.port, timeout=5, secret=SECRET) as client:
        extra = raw_connect(server)
        assert closed_by_server(extra)
        extra.close()
        client.set("k", b"still served")
    for sock in idle:
        sock.close()


def test_no_pickle_in_the_rendezvous_layer():
    root = Path(tcp_store.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        assert "import pickle" not in text and "pickle.loads" not in text, path


# -- binding and secrets -----------------------------------------------------------


def test_server_binds_loopback_by_default():
    with TCPStoreServer() as srv:
        assert srv._core.listener.getsockname()[0] == "127.0.0.1"
    with TCPStore("127.0.0.1", 0, is_master=True, timeout=5, secret=SECRET) as master:
        assert master.server._core.listener.getsockname()[0] == "127.0.0.1"


def test_server_refuses_empty_host():
    with pytest.raises(InvalidUsage, match="host"):
        TCPStoreServer("", 0, SECRET)


def test_port_in_use_names_the_address(server):
    with pytest.raises(RendezvousError, match=f"127.0.0.1:{server.port}"):
        TCPStoreServer("127.0.0.1", server.port, SECRET)


def test_derived_secret_file_is_private_and_removed_on_close():
    srv = TCPStoreServer("127.0.0.1", 0)
    path = srv.secret_file
    assert path is not None and path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.parent.stat().st_uid == os.getuid()
    assert len(bytes.fromhex(path.read_text())) == 32
    # A same-user client on this machine finds it without being told.
    with TCPStore("127.0.0.1", srv.port, timeout=5) as client:
        client.set("k", b"v")
    srv.close()
    assert not path.exists()


def test_client_without_secret_and_no_key_file_is_told_to_set_meshcast_secret(server):
    # Emulates a client on another machine: the server's secret was given, not derived.
    with pytest.raises(RendezvousError, match="set MESHCAST_SECRET"):
        TCPStore("127.0.0.1", server.port, timeout=5)


def test_unsafe_private_dir_is_refused(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    unsafe = tmp_path / f"meshcast-{os.getuid()}"
    unsafe.mkdir(mode=0o777)
    unsafe.chmod(0o777)
    with pytest.raises(RendezvousError, match="mode 0700"):
        TCPStoreServer("127.0.0.1", 0)


def test_unreachable_store_names_host_and_port():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(RendezvousError, match=f"could not reach the store at 127.0.0.1:{port}"):
        TCPStore("127.0.0.1", port, timeout=0.5, secret=SECRET)
    assert 0.4 < time.monotonic() - start < 3


def test_request_header_layout_is_fixed():
    # The wire format is a contract between versions; changing it needs a version bump.
    assert REQUEST.size == 28 and RESPONSE.size == 16 and PROTOCOL_VERSION == 1
    assert struct.calcsize("!4sB32s") == _HELLO.size
