"""TCPStore: an authenticated key-value store served over TCP, and its client.

Theory of operation
-------------------

:class:`TCPStoreServer` owns a listening socket bound to exactly the address
it is given (``127.0.0.1`` by default; never every interface unless asked)
and serves from daemon threads of the hosting process: one thread accepts,
one thread per connection reads requests and answers them. The data is one
``dict`` guarded by one condition variable; a ``get`` or ``wait`` for a
missing key blocks *in the server* on that condition (no client polling) and
is answered when the key appears or the client's timeout, sent with the
request, passes.

Rule 1 -- authenticate before parsing. The first bytes on a connection are a
fixed-size mutual HMAC-SHA256 challenge-response over the job secret; no
length field is read from a peer until it has proven the secret:

1. server -> client: ``MAGIC, VERSION, server_nonce[32]``
2. client -> server: ``MAGIC, VERSION, client_nonce[32], mac("client->server")``
3. server -> client: ``1, mac("server->client")`` or ``0, 0*32`` and close

where ``mac(label) = HMAC-SHA256(secret, "meshcast-store/<VERSION>/<label>/"
+ server_nonce + client_nonce)``. Both sides pick a fresh random nonce, so a
recorded exchange cannot be replayed; the direction label stops a server's
answer being reflected back at it as a client's. MACs are compared with
``hmac.compare_digest``. The handshake has a deadline of
:data:`HANDSHAKE_TIMEOUT` seconds; a peer that fails or stalls is
disconnected and the server keeps serving everyone else.

Rule 2 -- frames are ``struct``-packed, never pickled. A request is
``REQUEST`` (magic, version, opcode, key length, body length, one int64
argument) followed by the key and the body; a reply is ``RESPONSE`` (magic,
version, status, body length) and the body. Every length is checked against
its cap (:data:`MAX_KEY_BYTES`, :data:`MAX_VALUE_BYTES`, ...) before a byte
is allocated for it. Anything malformed closes that one connection.

Rule 3 -- the secret. ``secret=`` wins, else ``MESHCAST_SECRET`` (hex, set by
``meshcast run``). With neither, the server makes a random one for
single-machine use and writes it to a 0600 file in the 0700 per-user
directory (``/tmp/meshcast-<uid>/store-<addr>-<port>.key``, removed on
close); a client with no secret reads that file, so only processes of the
same user on the same machine get in. A client on another machine finds no
file and is told to set ``MESHCAST_SECRET``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import math
import os
import secrets
import selectors
import socket
import stat
import struct
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

from .. import config
from ..errors import (
    AuthenticationError,
    CommTimeout,
    InvalidUsage,
    RendezvousError,
)
from .store import (
    Store,
    Value,
    as_bytes,
    check_amount,
    check_key,
    check_keys,
    checked_sum,
    missing_keys_timeout,
    parse_counter,
)

# -- protocol constants -------------------------------------------------------

MAGIC = b"MCST"
PROTOCOL_VERSION = 1
NONCE_BYTES = 32
MAC_BYTES = 32
#: Seconds a new connection has to complete the handshake.
HANDSHAKE_TIMEOUT = 5.0
#: Seconds a frame, once started, has to arrive completely.
FRAME_TIMEOUT = 60.0
#: Extra seconds a client waits beyond a server-side wait before it gives up.
REPLY_GRACE = 5.0

MAX_KEY_BYTES = 8 << 10
MAX_VALUE_BYTES = 16 << 20
#: Cap of the encoded key list of one ``wait``/``check`` request.
MAX_KEY_LIST_BYTES = 4 << 20
#: Caps of the server's state, so that no client can exhaust its memory.
MAX_KEYS = 1 << 17
MAX_TOTAL_BYTES = 1 << 30
# Every rank of a job across hosts holds two connections: its own, and its heartbeat
# thread's (meshcast._hostwatch).
MAX_CONNECTIONS = 2048
#: Shortest secret accepted (128 bits).
MIN_SECRET_BYTES = 16

_HELLO = struct.Struct(f"!4sB{NONCE_BYTES}s")
_ANSWER = struct.Struct(f"!4sB{NONCE_BYTES}s{MAC_BYTES}s")
_VERDICT = struct.Struct(f"!B{MAC_BYTES}s")
# magic, version, opcode, reserved (0), key length, body length, argument
REQUEST = struct.Struct("!4sBBHIQq")
# magic, version, status, reserved (0), body length
RESPONSE = struct.Struct("!4sBBHQ")
_U32 = struct.Struct("!I")
_I64 = struct.Struct("!q")

OP_SET, OP_GET, OP_ADD, OP_COMPARE_SET, OP_WAIT, OP_CHECK, OP_DELETE, OP_NUM_KEYS, OP_JOIN = range(1, 10)
_KEYED_OPS = {OP_SET, OP_GET, OP_ADD, OP_COMPARE_SET, OP_DELETE}
_BODY_CAP = {
    OP_SET: MAX_VALUE_BYTES,
    OP_COMPARE_SET: 2 * MAX_VALUE_BYTES,
    OP_WAIT: MAX_KEY_LIST_BYTES,
    OP_CHECK: MAX_KEY_LIST_BYTES,
}
STATUS_OK, STATUS_TIMEOUT, STATUS_INVALID, STATUS_FAILED = range(4)
_MAX_REPLY_BYTES = MAX_KEY_LIST_BYTES + MAX_VALUE_BYTES


def _mac(secret: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    message = b"meshcast-store/%d/%s/" % (PROTOCOL_VERSION, label) + server_nonce + client_nonce
    return hmac.new(secret, message, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, nbytes: int) -> bytearray:
    """Read exactly ``nbytes`` (already checked against a cap) or raise EOFError."""
    buf = bytearray(nbytes)
    view = memoryview(buf)
    got = 0
    while got < nbytes:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError(f"connection closed after {got} of {nbytes} bytes")
        got += n
    return buf


def _encode_keys(keys: Sequence[bytes]) -> bytes:
    return b"".join(_U32.pack(len(k)) + k for k in keys)


def _decode_keys(body: bytes | bytearray) -> list[bytes]:
    keys, pos = [], 0
    while pos < len(body):
        if pos + 4 > len(body):
            raise ValueError("truncated key list")
        (n,) = _U32.unpack_from(body, pos)
        pos += 4
        if n > MAX_KEY_BYTES or pos + n > len(body):
            raise ValueError("bad key length in key list")
        keys.append(bytes(body[pos:pos + n]))
        pos += n
    return keys


def _timeout_ms(timeout: float) -> int:
    """Wire form of a wait timeout: milliseconds, ``-1`` for "no limit"."""
    if math.isinf(timeout):
        return -1
    return min(math.ceil(timeout * 1000), (1 << 62))


# -- secrets and the per-user directory ----------------------------------------


def private_dir() -> Path:
    """Return the per-user directory for secrets and bulletin files, created 0700.

    ``<tmp>/meshcast-<uid>``. Refused if it is a symlink, owned by another user
    or readable by others: whoever could write there could plant a secret.

    Raises:
        RendezvousError: the directory exists but is not safe to use.
    """
    path = Path(tempfile.gettempdir()) / f"meshcast-{os.getuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RendezvousError(
            f"{path} must be a directory owned by uid {os.getuid()} with mode 0700 "
            f"(found mode {stat.filemode(st.st_mode)}, owner uid {st.st_uid}); "
            "remove it and retry")
    return path


def write_private_file(path: Path, data: bytes) -> None:
    """Atomically write ``data`` to ``path`` with mode 0600 (temp file + rename).

    Readers never see a half-written file, and the file is never readable by
    others, not even for an instant (it is created 0600, not chmod-ed later).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_private_file(path: Path) -> bytes | None:
    """Read a file written by :func:`write_private_file`; ``None`` if it does not exist.

    Raises:
        RendezvousError: the file is owned by someone else or readable by others.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise RendezvousError(f"{path} is not a private file of uid {os.getuid()}; "
                                  "refusing to trust it (remove it)")
        return f.read()


def _key_file(address: str, port: int) -> Path:
    return private_dir() / f"store-{address}-{port}.key"


def _check_secret(secret: object, caller: str) -> bytes:
    if not isinstance(secret, (bytes, bytearray, memoryview)):
        raise InvalidUsage(f"{caller}: 'secret' must be bytes (got {type(secret).__name__})")
    secret = bytes(secret)
    if len(secret) < MIN_SECRET_BYTES:
        raise InvalidUsage(f"{caller}: 'secret' must be at least {MIN_SECRET_BYTES} bytes "
                           f"(got {len(secret)}); use secrets.token_bytes(32)")
    return secret


def env_secret(caller: str) -> bytes | None:
    """The job secret from ``MESHCAST_SECRET`` (hex), or ``None`` if unset.

    Raises:
        InvalidUsage: the variable is not hex or too short.
    """
    text = config.get("MESHCAST_SECRET")
    if not text:
        return None
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        raise InvalidUsage(f"{caller}: MESHCAST_SECRET must be hexadecimal "
                           "(e.g. python -c 'import secrets; print(secrets.token_hex(32))')") from None
    return _check_secret(secret, f"{caller} (MESHCAST_SECRET)")


# -- server --------------------------------------------------------------------


class _ServerCore:
    """The server's state and threads; :class:`TCPStoreServer` is the handle to it.

    Kept apart so that the finalizer of the handle can close the core without
    keeping the handle alive.
    """

    def __init__(self, listener: socket.socket, secret: bytes, label: str,
                 key_file: Path | None) -> None:
        self.listener = listener
        self.secret = secret
        self.label = label
        self.key_file = key_file
        self.owner_pid = os.getpid()
        self.data: dict[bytes, bytes] = {}
        self.total_bytes = 0
        self.joined = 0
        self.cond = threading.Condition()
        self.closing = False
        self.rejected = 0
        # Addresses of peers that spoke the protocol but did not hold the secret: a
        # node of this job started with another MESHCAST_SECRET, most likely (the
        # launcher reports them instead of waiting out its rendezvous timeout).
        self.refused: list[str] = []
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self.thread = threading.Thread(target=self._accept_loop, daemon=True,
                                       name=f"meshcast-store-accept {label}")

    # accept side ------------------------------------------------------------

    def _accept_loop(self) -> None:
        self.listener.setblocking(False)
        with selectors.DefaultSelector() as sel:
            sel.register(self.listener, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while not self.closing:
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r:
                        return
                    self._accept_one()

    def _accept_one(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            # e.g. EMFILE: drop this attempt, keep serving the connections we have.
            time.sleep(0.05)
            return
        with self.conn_lock:
            if self.closing or len(self.connections) >= MAX_CONNECTIONS:
                self.rejected += 1
                conn.close()
                return
            self.connections.add(conn)
        threading.Thread(target=self._serve, args=(conn,), daemon=True,
                         name=f"meshcast-store-conn {self.label}").start()

    # connection side --------------------------------------------------------

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            conn.settimeout(HANDSHAKE_TIMEOUT)
            if not self._handshake(conn):
                self._count_rejected()
                return
            while not self.closing:
                if not self._serve_one(conn):
                    return
        except (OSError, EOFError, ValueError):
            # Garbage, a truncated or oversized frame, a peer that went away:
            # only this connection is affected.
            self._count_rejected()
        finally:
            with self.conn_lock:
                self.connections.discard(conn)
            conn.close()

    def _count_rejected(self) -> None:
        with self.conn_lock:
            self.rejected += 1

    def _handshake(self, conn: socket.socket) -> bool:
        server_nonce = secrets.token_bytes(NONCE_BYTES)
        conn.sendall(_HELLO.pack(MAGIC, PROTOCOL_VERSION, server_nonce))
        # Check magic and version first so that an HTTP request or random bytes
        # are dropped at once instead of after the handshake deadline.
        head = _recv_exact(conn, 5)
        if bytes(head[:4]) != MAGIC or head[4] != PROTOCOL_VERSION:
            return False
        rest = _recv_exact(conn, _ANSWER.size - 5)
        client_nonce, client_mac = bytes(rest[:NONCE_BYTES]), bytes(rest[NONCE_BYTES:])
        expected = _mac(self.secret, b"client->server", server_nonce, client_nonce)
        if not hmac.compare_digest(client_mac, expected):
            with contextlib.suppress(OSError, IndexError):
                peer = conn.getpeername()[0]
                with self.conn_lock:
                    if len(self.refused) < 64:  # bounded: a stranger may keep trying
                        self.refused.append(peer)
            conn.sendall(_VERDICT.pack(0, bytes(MAC_BYTES)))
            return False
        conn.sendall(_VERDICT.pack(1, _mac(self.secret, b"server->client", server_nonce,
                                           client_nonce)))
        return True

    def _serve_one(self, conn: socket.socket) -> bool:
        """Read one request and answer it; ``False`` ends the connection."""
        # An authenticated client may stay idle between requests for as long
        # as it likes; once a frame starts it must arrive within FRAME_TIMEOUT.
        conn.settimeout(None)
        first = conn.recv(1)
        if not first:
            return False
        conn.settimeout(FRAME_TIMEOUT)
        header = first + _recv_exact(conn, REQUEST.size - 1)
        magic, version, op, reserved, key_len, body_len, arg = REQUEST.unpack(header)
        if magic != MAGIC or version != PROTOCOL_VERSION or reserved:
            return False
        error = self._check_lengths(op, key_len, body_len, arg)
        if error:
            self._reply(conn, STATUS_INVALID, error.encode())
            return False
        key = bytes(_recv_exact(conn, key_len))
        body = _recv_exact(conn, body_len)
        status, reply = self._dispatch(op, key, body, arg)
        if status is None:  # server closing while the request waited
            return False
        self._reply(conn, status, reply)
        return True

    @staticmethod
    def _check_lengths(op: int, key_len: int, body_len: int, arg: int) -> str | None:
        if op not in range(OP_SET, OP_JOIN + 1):
            return f"unknown opcode {op}"
        if key_len > MAX_KEY_BYTES:
            return f"key of {key_len} bytes exceeds the limit of {MAX_KEY_BYTES}"
        if op not in _KEYED_OPS and key_len:
            return f"opcode {op} takes no key"
        cap = _BODY_CAP.get(op, 0)
        if body_len > cap:
            return f"body of {body_len} bytes exceeds the limit of {cap} for opcode {op}"
        if op == OP_COMPARE_SET and not (0 <= arg <= body_len and arg <= MAX_VALUE_BYTES
                                         and body_len - arg <= MAX_VALUE_BYTES):
            return "bad compare_set lengths"
        return None

    def _dispatch(self, op: int, key: bytes, body: bytearray,
                  arg: int) -> tuple[int | None, bytes]:
        if op == OP_GET:
            ok = self._wait_keys([key], arg)
            if ok is None:
                return None, b""
            if not ok:
                return STATUS_TIMEOUT, b""
            with self.cond:
                value = self.data.get(key)
            # Deleted between the wake-up and now: report it as a timeout, like torch.
            return (STATUS_OK, value) if value is not None else (STATUS_TIMEOUT, b"")
        if op == OP_WAIT:
            keys = _decode_keys(body)
            ok = self._wait_keys(keys, arg)
            if ok is None:
                return None, b""
            if not ok:
                with self.cond:
                    missing = [k for k in keys if k not in self.data]
                return STATUS_TIMEOUT, _encode_keys(missing)
            return STATUS_OK, b""
        with self.cond:
            return self._apply(op, key, body, arg)

    def _apply(self, op: int, key: bytes, body: bytearray, arg: int) -> tuple[int, bytes]:
        """Run one non-blocking verb; the caller holds ``self.cond``."""
        if op == OP_SET:
            return self._put(key, bytes(body))
        if op == OP_ADD:
            current = self.data.get(key)
            try:
                value = 0 if current is None else parse_counter(current, "", "")
                value = checked_sum(value, arg, "", "")
            except InvalidUsage:
                shown = key.decode("utf-8", "replace")
                return STATUS_INVALID, f"key {shown!r} does not hold an int64 counter".encode()
            status, reply = self._put(key, str(value).encode("ascii"))
            return (status, reply) if status != STATUS_OK else (STATUS_OK, _I64.pack(value))
        if op == OP_COMPARE_SET:
            expected, desired = bytes(body[:arg]), bytes(body[arg:])
            current = self.data.get(key)
            if current is None and expected:
                return STATUS_OK, expected
            if current is not None and current != expected:
                return STATUS_OK, current
            status, reply = self._put(key, desired)
            return (status, reply) if status != STATUS_OK else (STATUS_OK, desired)
        if op == OP_CHECK:
            keys = _decode_keys(body)
            return STATUS_OK, bytes([all(k in self.data for k in keys)])
        if op == OP_DELETE:
            value = self.data.pop(key, None)
            if value is not None:
                self.total_bytes -= len(key) + len(value)
            return STATUS_OK, bytes([value is not None])
        if op == OP_NUM_KEYS:
            return STATUS_OK, _I64.pack(len(self.data))
        if op == OP_JOIN:
            self.joined += 1
            self.cond.notify_all()
            return STATUS_OK, _I64.pack(self.joined)
        raise AssertionError(f"unhandled opcode {op}")

    def _put(self, key: bytes, value: bytes) -> tuple[int, bytes]:
        old = self.data.get(key)
        grow = len(value) - (len(old) if old is not None else -len(key))
        if old is None and len(self.data) >= MAX_KEYS:
            return STATUS_FAILED, f"the store is full ({MAX_KEYS} keys)".encode()
        if self.total_bytes + grow > MAX_TOTAL_BYTES:
            return STATUS_FAILED, f"the store is full ({MAX_TOTAL_BYTES} bytes)".encode()
        self.data[key] = value
        self.total_bytes += grow
        self.cond.notify_all()
        return STATUS_OK, b""

    def _wait_keys(self, keys: list[bytes], timeout_ms: int) -> bool | None:
        """Wait until all ``keys`` exist: True, False on timeout, None if closing."""
        timeout = None if timeout_ms < 0 else min(timeout_ms / 1000, threading.TIMEOUT_MAX)
        with self.cond:
            self.cond.wait_for(lambda: self.closing or all(k in self.data for k in keys), timeout)
            if self.closing:
                return None
            return all(k in self.data for k in keys)

    @staticmethod
    def _reply(conn: socket.socket, status: int, body: bytes) -> None:
        header = RESPONSE.pack(MAGIC, PROTOCOL_VERSION, status, 0, len(body))
        if len(body) < 1 << 16:
            conn.sendall(header + body)
        else:
            conn.sendall(header)
            conn.sendall(body)

    # lifetime ---------------------------------------------------------------

    def wait_for_joins(self, count: int, deadline: float) -> int:
        with self.cond:
            self.cond.wait_for(lambda: self.closing or self.joined >= count,
                               max(0.0, deadline - time.monotonic()))
            return self.joined

    def close(self) -> None:
        with self.cond:
            if self.closing:
                return
            self.closing = True
            self.cond.notify_all()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        with self.conn_lock:
            connections = list(self.connections)
        for conn in connections:
            # shutdown() wakes the thread blocked in recv() on this socket, and
            # the client blocked on us sees EOF at once.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=2.0)
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()
        # A forked child inherits this object; only the creator removes the file.
        if self.key_file is not None and os.getpid() == self.owner_pid:
            with contextlib.suppress(OSError):
                if read_private_file(self.key_file) == self.secret.hex().encode():
                    os.unlink(self.key_file)


def _bind(host: str, port: int, caller: str) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                                   socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise RendezvousError(f"{caller}: cannot resolve host {host!r} to bind: {exc}") from None
    last: OSError | None = None
    for family, type_, proto, _, addr in infos:
        sock = socket.socket(family, type_, proto)
        try:
            # Lets a restarted job rebind a port whose old connections are in
            # TIME_WAIT; on Linux it does not let two live listeners share it.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise RendezvousError(f"{caller}: could not listen on {_hostport(host, port)}: {last}")


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class TCPStoreServer:
    """The TCP key-value store server, running in daemon threads of this process.

    Args:
        host: address to bind, exactly (default loopback). Pass ``"0.0.0.0"``
            only if the store must be reachable on every interface.
        port: port to bind; ``0`` picks a free one (read it back from :attr:`port`).
        secret: the job secret clients must prove (≥ 16 bytes). ``None``:
            ``MESHCAST_SECRET`` (hex) if set, else a random secret for this
            machine only, written to a 0600 file that same-user clients read
            and removed by :meth:`close`.

    Attributes:
        host: the address as given.
        port: the port actually bound.

    Raises:
        RendezvousError: the address cannot be bound (e.g. the port is in use).
        InvalidUsage: a bad argument or ``MESHCAST_SECRET``.

    Example::

        >>> server = TCPStoreServer("127.0.0.1", 0, secret=secrets.token_bytes(32))
        >>> client = TCPStore("127.0.0.1", server.port, secret=...)
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0,
                 secret: bytes | None = None) -> None:
        caller = "TCPStoreServer"
        if not isinstance(host, str) or not host:
            raise InvalidUsage(f"{caller}: 'host' must be a non-empty address to bind "
                               "(e.g. '127.0.0.1')")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise InvalidUsage(f"{caller}: 'port' must be an int in [0, 65535] (got {port!r})")
        derived = False
        if secret is not None:
            secret = _check_secret(secret, caller)
        else:
            secret = env_secret(caller)
            if secret is None:
                secret, derived = secrets.token_bytes(32), True
        listener = _bind(host, port, caller)
        try:
            address, bound_port = listener.getsockname()[:2]
            key_file = None
            if derived:
                # Written before listen(): a client that got in can always find it.
                key_file = _key_file(address, bound_port)
                write_private_file(key_file, secret.hex().encode())
            listener.listen(128)
        except BaseException:
            listener.close()
            raise
        self.host = host
        self.port = bound_port
        self._core = _ServerCore(listener, secret, _hostport(host, bound_port), key_file)
        self._core.thread.start()
        # Closes the socket and removes the key file even if close() is never called.
        self._finalizer = weakref.finalize(self, self._core.close)

    @property
    def secret_file(self) -> Path | None:
        """Where the derived secret was written, or ``None`` if the secret was given."""
        return self._core.key_file

    @property
    def rejected_connections(self) -> int:
        """How many connections were dropped (failed handshake, bad frame, over capacity)."""
        return self._core.rejected

    @property
    def refused_peers(self) -> list[str]:
        """Addresses of peers refused for not holding the secret (at most 64), oldest first.

        Garbage, a wrong protocol or a stalled handshake are not listed: only a
        meshcast client whose proof of the secret was wrong, i.e. a process of a
        job started with another ``MESHCAST_SECRET``.
        """
        with self._core.conn_lock:
            return list(self._core.refused)

    def close(self) -> None:
        """Stop serving: disconnect every client (they fail fast) and remove the key file.

        Idempotent.
        """
        self._finalizer()

    def __enter__(self) -> TCPStoreServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TCPStoreServer({self.host!r}, {self.port})"


# -- client --------------------------------------------------------------------


class TCPStore(Store):
    """Client of a :class:`TCPStoreServer`; with ``is_master=True`` it also hosts one.

    Same constructor as torch's ``TCPStore`` (float seconds for ``timeout``,
    plus ``secret``). The connection is made in the constructor: an
    unreachable server is retried until ``timeout`` passes.

    Args:
        host: the server's address (the address to bind when ``is_master``).
        port: the server's port; ``0`` with ``is_master`` picks a free one
            (read it back from :attr:`port`).
        world_size: number of clients expected; needed with ``wait_for_workers``.
        is_master: start a :class:`TCPStoreServer` in this process first.
        timeout: seconds for connecting and default for ``get``/``wait``.
        secret: the job secret; ``None`` reads ``MESHCAST_SECRET`` (hex), else
            the per-user key file a same-machine server wrote.
        wait_for_workers: every client announces itself; the master's
            constructor returns only when ``world_size`` clients have.

    Raises:
        RendezvousError: the server could not be reached within ``timeout``
            (the message names host:port), could not be bound, or no secret
            is known.
        AuthenticationError: the server rejected our secret, or could not prove it.
        CommTimeout: ``wait_for_workers`` and not all workers joined in time.

    Example::

        >>> # rank 0
        >>> store = TCPStore("127.0.0.1", 29500, 2, is_master=True)
        >>> # rank 1
        >>> store = TCPStore("127.0.0.1", 29500, 2)
        >>> store.get("addr/0")
    """

    def __init__(self, host: str, port: int, world_size: int | None = None,
                 is_master: bool = False, timeout: float = 300.0,
                 secret: bytes | None = None, wait_for_workers: bool = False) -> None:
        super().__init__(timeout)
        caller = "TCPStore"
        if not isinstance(host, str) or not host:
            raise InvalidUsage(f"{caller}: 'host' must be a non-empty str")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise InvalidUsage(f"{caller}: 'port' must be an int in [0, 65535] (got {port!r})")
        if port == 0 and not is_master:
            raise InvalidUsage(f"{caller}: 'port' 0 is only valid with is_master=True")
        if world_size is not None and (isinstance(world_size, bool)
                                       or not isinstance(world_size, int) or world_size < 1):
            raise InvalidUsage(f"{caller}: 'world_size' must be None or an int >= 1 "
                               f"(got {world_size!r})")
        if wait_for_workers and is_master and world_size is None:
            raise InvalidUsage(f"{caller}: wait_for_workers=True on the master needs world_size")
        if secret is not None:
            secret = _check_secret(secret, caller)
        self._host = host
        self._world_size = world_size
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._broken: str | None = None
        self._closed = False
        self._server: TCPStoreServer | None = None
        self._secret: bytes | None = None  # the one the handshake proved (for reconnect)
        deadline = time.monotonic() + self._timeout
        try:
            if is_master:
                self._server = TCPStoreServer(host, port, secret)
                port, secret = self._server.port, self._server._core.secret
            self._port = port
            self._sock = self._connect(secret, deadline)
            if wait_for_workers:
                self._request(OP_JOIN, "TCPStore")
                if self._server is not None:
                    assert world_size is not None
                    joined = self._server._core.wait_for_joins(world_size, deadline)
                    if joined < world_size:
                        raise CommTimeout(
                            f"{caller}: {joined} of {world_size} workers joined the store at "
                            f"{self._where} within {self._timeout:g} s")
        except BaseException:
            self.close()
            raise

    # -- connection -----------------------------------------------------------

    @property
    def host(self) -> str:
        """The server's address as given."""
        return self._host

    @property
    def port(self) -> int:
        """The server's port (the bound one if this store hosts the server)."""
        return self._port

    @property
    def server(self) -> TCPStoreServer | None:
        """The server this store hosts (``is_master=True``), else ``None``."""
        return self._server

    @property
    def _where(self) -> str:
        return _hostport(self._host, self._port)

    def _connect(self, secret: bytes | None, deadline: float) -> socket.socket:
        if secret is None:
            secret = env_secret("TCPStore")
        delay, last_error = 0.01, None
        # Retrying with backoff is the only way to learn that a server came up:
        # the client may legitimately start before the rank that hosts it.
        while True:
            remaining = deadline - time.monotonic()
            try:
                sock = socket.create_connection((self._host, self._port),
                                                timeout=max(0.05, min(remaining, HANDSHAKE_TIMEOUT)))
                break
            except socket.gaierror as exc:
                raise RendezvousError(f"TCPStore: cannot resolve the store host {self._host!r}: "
                                      f"{exc}") from None
            except OSError as exc:
                last_error = exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RendezvousError(
                    f"TCPStore: could not reach the store at {self._where} within "
                    f"{self._timeout:g} s (last error: {last_error}); is the process hosting "
                    "it running, and are host and port right?")
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.5)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if secret is None:
                secret = self._derived_secret(sock)
            self._handshake(sock, secret)
        except BaseException:
            sock.close()
            raise
        self._secret = secret
        return sock

    def reconnect(self, timeout: float) -> TCPStore:
        """A second client of the same server, with a connection and ``timeout`` of its own.

        For a thread that must neither wait behind this connection's requests nor
        hold them up (the cross-host heartbeats of :mod:`meshcast._hostwatch`):
        every request of the new client gives up after ``timeout`` seconds.

        Raises:
            RendezvousError: the server cannot be reached within ``timeout``.
            AuthenticationError: it no longer accepts the secret.
        """
        return TCPStore(self._host, self._port, timeout=timeout, secret=self._secret)

    def _derived_secret(self, sock: socket.socket) -> bytes:
        address = sock.getpeername()[0]
        for candidate in (address, "0.0.0.0", "::"):
            data = read_private_file(_key_file(candidate, self._port))
            if data is not None:
                try:
                    return bytes.fromhex(data.decode("ascii").strip())
                except (UnicodeDecodeError, ValueError):
                    raise RendezvousError(f"TCPStore: the key file of {self._where} is "
                                          "corrupt; remove it") from None
        raise RendezvousError(
            f"TCPStore: no secret for the store at {self._where}: set MESHCAST_SECRET (hex, the "
            "same on every process of the job, e.g. from secrets.token_hex(32)) or pass "
            "secret=. Without it only processes of the same user on the machine hosting the "
            "store can connect.")

    def _handshake(self, sock: socket.socket, secret: bytes) -> None:
        where = self._where
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            magic, version, server_nonce = _HELLO.unpack(_recv_exact(sock, _HELLO.size))
            if magic != MAGIC:
                raise RendezvousError(f"TCPStore: the service at {where} is not a meshcast store")
            if version != PROTOCOL_VERSION:
                raise RendezvousError(f"TCPStore: the store at {where} speaks protocol version "
                                      f"{version}, this meshcast speaks {PROTOCOL_VERSION}")
            client_nonce = secrets.token_bytes(NONCE_BYTES)
            sock.sendall(_ANSWER.pack(MAGIC, PROTOCOL_VERSION, client_nonce,
                                      _mac(secret, b"client->server", server_nonce, client_nonce)))
            ok, server_mac = _VERDICT.unpack(_recv_exact(sock, _VERDICT.size))
        except TimeoutError:
            raise RendezvousError(f"TCPStore: no handshake from {where} within "
                                  f"{HANDSHAKE_TIMEOUT:g} s; is it a meshcast store?") from None
        except (OSError, EOFError) as exc:
            raise RendezvousError(f"TCPStore: the store at {where} closed the connection during "
                                  f"the handshake ({exc}); it may be at its connection limit or "
                                  "not be a meshcast store") from None
        if not ok:
            raise AuthenticationError(
                f"TCPStore: the store at {where} rejected our secret; every process of the job "
                "needs the same MESHCAST_SECRET (or secret=)")
        expected = _mac(secret, b"server->client", server_nonce, client_nonce)
        if not hmac.compare_digest(server_mac, expected):
            raise AuthenticationError(f"TCPStore: the server at {where} could not prove it holds "
                                      "the job secret; refusing to talk to it")

    def _request(self, op: int, caller: str, key: bytes = b"", body: bytes = b"", arg: int = 0,
                 wait: float | None = None) -> tuple[int, bytes]:
        """Send one request and read its reply; ``wait`` is a server-side wait's timeout."""
        header = REQUEST.pack(MAGIC, PROTOCOL_VERSION, op, 0, len(key), len(body), arg)
        with self._lock:
            sock = self._sock
            if sock is None or self._broken or self._closed:
                reason = "the store was closed" if self._closed else self._broken
                raise RendezvousError(f"{caller}: cannot use the store at {self._where}: {reason}")
            limit = self._timeout if wait is None else wait + REPLY_GRACE
            sock.settimeout(None if math.isinf(limit) else limit)
            try:
                if len(body) < 1 << 16:
                    sock.sendall(header + key + body)
                else:
                    sock.sendall(header + key)
                    sock.sendall(body)
                magic, version, status, _, size = RESPONSE.unpack(_recv_exact(sock, RESPONSE.size))
                if magic != MAGIC or version != PROTOCOL_VERSION or size > _MAX_REPLY_BYTES:
                    raise EOFError("malformed reply")
                reply = bytes(_recv_exact(sock, size))
            except TimeoutError:
                self._break("an earlier request got no reply in time")
                raise CommTimeout(f"{caller}: the store at {self._where} did not answer within "
                                  f"{limit:g} s") from None
            except (OSError, EOFError) as exc:
                self._break("the connection was lost")
                if self._closed:
                    raise RendezvousError(f"{caller}: the store was closed") from None
                raise RendezvousError(
                    f"{caller}: lost the connection to the store at {self._where} ({exc}); "
                    "did the process hosting it exit?") from None
            except BaseException:
                # Interrupted mid-frame (e.g. KeyboardInterrupt): the stream is out of sync.
                self._break("an earlier request was interrupted")
                raise
        if status == STATUS_INVALID:
            raise InvalidUsage(f"{caller}: {reply.decode('utf-8', 'replace')}")
        if status == STATUS_FAILED:
            raise RendezvousError(f"{caller}: the store at {self._where} refused: "
                                  f"{reply.decode('utf-8', 'replace')}")
        return status, reply

    def _break(self, reason: str) -> None:
        """Mark the connection unusable (caller holds ``_lock``)."""
        self._broken = reason
        if self._sock is not None:
            self._sock.close()

    # -- argument encoding -----------------------------------------------------

    @staticmethod
    def _key(key: str, caller: str) -> bytes:
        raw = check_key(key, caller).encode("utf-8")
        if len(raw) > MAX_KEY_BYTES:
            raise InvalidUsage(f"{caller}: key of {len(raw)} bytes exceeds the limit of "
                               f"{MAX_KEY_BYTES} bytes")
        return raw

    @staticmethod
    def _value(value: Value, key: str, caller: str, name: str = "value") -> bytes:
        raw = as_bytes(value, caller, name)
        if len(raw) > MAX_VALUE_BYTES:
            raise InvalidUsage(
                f"{caller}: {name} for key {key!r} is {len(raw)} bytes; a TCPStore value holds "
                f"at most {MAX_VALUE_BYTES >> 20} MiB (exchange bulk data through a process "
                "group, not the store)")
        return raw

    def _keys(self, keys: Sequence[str], caller: str) -> tuple[list[str], bytes]:
        keys = check_keys(keys, caller)
        body = _encode_keys([self._key(k, caller) for k in keys])
        if len(body) > MAX_KEY_LIST_BYTES:
            raise InvalidUsage(f"{caller}: {len(keys)} keys take {len(body)} bytes; the limit "
                               f"is {MAX_KEY_LIST_BYTES}")
        return keys, body

    # -- the verbs -------------------------------------------------------------

    def set(self, key: str, value: Value) -> None:
        raw_key = self._key(key, "TCPStore.set")
        self._request(OP_SET, "TCPStore.set", raw_key, self._value(value, key, "TCPStore.set"))

    def get(self, key: str) -> bytes:
        raw_key = self._key(key, "TCPStore.get")
        timeout = self._timeout
        status, reply = self._request(OP_GET, "TCPStore.get", raw_key, arg=_timeout_ms(timeout),
                                      wait=timeout)
        if status == STATUS_TIMEOUT:
            raise missing_keys_timeout("TCPStore.get", [key], timeout)
        return reply

    def add(self, key: str, amount: int) -> int:
        raw_key = self._key(key, "TCPStore.add")
        check_amount(amount, "TCPStore.add")
        _, reply = self._request(OP_ADD, "TCPStore.add", raw_key, arg=amount)
        return _I64.unpack(reply)[0]

    def compare_set(self, key: str, expected: Value, desired: Value) -> bytes:
        caller = "TCPStore.compare_set"
        raw_key = self._key(key, caller)
        old = self._value(expected, key, caller, "expected")
        new = self._value(desired, key, caller, "desired")
        _, reply = self._request(OP_COMPARE_SET, caller, raw_key, old + new, arg=len(old))
        return reply

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        keys, body = self._keys(keys, "TCPStore.wait")
        timeout = self._wait_timeout(timeout, "TCPStore.wait")
        status, reply = self._request(OP_WAIT, "TCPStore.wait", body=body,
                                      arg=_timeout_ms(timeout), wait=timeout)
        if status == STATUS_TIMEOUT:
            missing = [k.decode("utf-8", "replace") for k in _decode_keys(reply)]
            raise missing_keys_timeout("TCPStore.wait", missing or keys, timeout)

    def check(self, keys: Sequence[str]) -> bool:
        _, body = self._keys(keys, "TCPStore.check")
        _, reply = self._request(OP_CHECK, "TCPStore.check", body=body)
        return reply == b"\x01"

    def delete_key(self, key: str) -> bool:
        raw_key = self._key(key, "TCPStore.delete_key")
        _, reply = self._request(OP_DELETE, "TCPStore.delete_key", raw_key)
        return reply == b"\x01"

    def num_keys(self) -> int:
        _, reply = self._request(OP_NUM_KEYS, "TCPStore.num_keys")
        return _I64.unpack(reply)[0]

    def close(self) -> None:
        """Close the connection; if this store hosts the server, stop it too.

        Other clients of a hosted server then fail fast with ``RendezvousError``.
        A thread blocked in ``get``/``wait`` on this store is woken with one.
        Idempotent.
        """
        self._closed = True
        sock = self._sock
        if sock is not None:
            # shutdown() wakes a thread blocked in recv(); it then closes the socket.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            if self._lock.acquire(timeout=1.0):
                try:
                    sock.close()
                finally:
                    self._lock.release()
        if self._server is not None:
            self._server.close()

    def __repr__(self) -> str:
        role = ", is_master=True" if self._server is not None else ""
        return f"TCPStore({self._host!r}, {self._port}{role})"


__all__ = ["TCPStore", "TCPStoreServer", "private_dir"]
