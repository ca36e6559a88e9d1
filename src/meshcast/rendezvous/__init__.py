"""Rendezvous: find the job's store from an init URL (``env://``, ``tcp://``, ``file://``).

:func:`rendezvous` is what ``init_process_group(init_method=...)`` calls. It
returns ``(store, rank, world_size)`` like torch's handlers; every error is
prefixed by the URL scheme and names the missing variable or parameter.

How ``env://`` finds the store, in order:

1. ``MESHCAST_STORE_HOSTED=1`` (``meshcast run`` hosts the store itself):
   every rank is a :class:`TCPStore` client of ``MASTER_ADDR:MASTER_PORT``.
2. torchrun with ``TORCHELASTIC_USE_AGENT_STORE=True``: every rank is a
   client of the agent's torch ``TCPStore``, wrapped in :class:`TorchStore`.
3. ``MASTER_ADDR`` / ``MASTER_PORT`` set (by hand, ``meshcast.spawn``, a
   tutorial): rank 0 hosts the store on exactly that address, the others
   connect.
4. mpiexec or srun without ``MASTER_ADDR``, all ranks on this node: the
   *bulletin file*. Rank 0 starts a store on 127.0.0.1 with a fresh random
   secret and publishes address, secret and its pid in a 0600 file of the
   0700 per-user directory, named after the launcher and the launcher
   process (all ranks of one mpiexec/srun step on a node share it as their
   parent). The others wait for the file (ignoring one whose writer is
   dead), connect, and rank 0 deletes the file once all ranks have joined.
5. Anything else (several nodes and no ``MASTER_ADDR``): an error that
   says what to set.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from .. import config
from ..errors import CommTimeout, InvalidUsage, MeshcastError, RendezvousError
from .env import MPI_LAUNCHERS, LaunchEnv, detect_launch_env, launch_env, parse_tasks_per_node
from .file_store import FileStore
from .hash_store import HashStore
from .store import PrefixStore, Store
from .tcp_store import (
    TCPStore,
    TCPStoreServer,
    private_dir,
    read_private_file,
    write_private_file,
)
from .torch_store import TorchStore

#: A URL handler: ``(url, rank, world_size, timeout) -> (store, rank, world_size)``;
#: ``rank``/``world_size`` are ``-1`` when the caller did not give them.
Handler = Callable[[str, int, int, float], "tuple[Store, int, int]"]

_HANDLERS: dict[str, Handler] = {}

#: Seconds between looks for the bulletin file (see _bulletin_client).
_BULLETIN_POLL = 0.02


def register_handler(scheme: str, handler: Handler) -> None:
    """Make :func:`rendezvous` accept ``scheme://`` URLs.

    Args:
        scheme: the URL scheme, without ``://``.
        handler: called as ``handler(url, rank, world_size, timeout)``; must
            return ``(store, rank, world_size)``.

    Raises:
        InvalidUsage: ``scheme`` is already registered.
    """
    if scheme in _HANDLERS:
        raise InvalidUsage(f"register_handler: scheme {scheme!r} is already registered")
    _HANDLERS[scheme] = handler


def rendezvous(url: str, rank: int = -1, world_size: int = -1,
               timeout: float | None = None) -> tuple[Store, int, int]:
    """Connect to the job's store as described by an init URL.

    Args:
        url: ``env://``, ``tcp://host:port[?rank=R&world_size=N]`` or
            ``file:///path[?rank=R&world_size=N]``.
        rank: this process's rank; ``-1`` takes it from the URL or environment.
        world_size: number of ranks; ``-1`` takes it from the URL or environment.
        timeout: seconds for bring-up and default store timeout; ``None``
            uses ``MESHCAST_TIMEOUT`` (300 s).

    Returns:
        ``(store, rank, world_size)``.

    Raises:
        RendezvousError: unknown scheme, a missing variable or parameter
            (named in the message, prefixed by the scheme), or the store
            could not be reached.
        AuthenticationError: the store and this process hold different secrets.
        CommTimeout: the other ranks did not show up in time.

    Example::

        >>> # every rank, under `mpiexec -n 4` or with RANK/WORLD_SIZE/MASTER_* set
        >>> store, rank, world_size = rendezvous("env://")
        >>> store.set(f"hello/{rank}", b"hi")
    """
    if not isinstance(url, str) or "://" not in url:
        raise RendezvousError(f"rendezvous: 'url' must look like scheme://... "
                              f"(env://, tcp://host:port, file:///path), got {url!r}")
    scheme = url.split("://", 1)[0].lower()
    handler = _HANDLERS.get(scheme)
    if handler is None:
        known = ", ".join(f"{s}://" for s in sorted(_HANDLERS))
        raise RendezvousError(f"rendezvous: no handler for {scheme}:// (known: {known})")
    for name, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            raise InvalidUsage(f"{scheme}://: {name!r} must be an int >= -1 (got {value!r})")
    if timeout is None:
        timeout = float(config.get("MESHCAST_TIMEOUT"))
    try:
        return handler(url, rank, world_size, timeout)
    except MeshcastError as exc:
        prefix = f"{scheme}://: "
        if str(exc).startswith(prefix):
            raise
        raise _prefixed(exc, prefix).with_traceback(exc.__traceback__) from exc.__cause__


def _prefixed(exc: MeshcastError, prefix: str) -> MeshcastError:
    """The same error (same class and attributes) with ``prefix`` before its message."""
    new = type(exc).__new__(type(exc))
    new.__dict__.update(exc.__dict__)
    new.args = (prefix + str(exc),)
    return new


# -- helpers shared by the handlers ------------------------------------------------


def _query(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}


def _query_int(query: dict[str, str], name: str, scheme: str) -> int | None:
    if name not in query:
        return None
    try:
        return int(query[name])
    except ValueError:
        raise RendezvousError(f"{scheme}: query parameter {name}={query[name]!r} is not an "
                              "integer") from None


def _rank_and_size(scheme: str, query: dict[str, str], rank: int, world_size: int,
                   env_rank: int | None = None, env_size: int | None = None) -> tuple[int, int]:
    """Argument > URL query > environment, for rank and world size; both required."""
    if rank < 0:
        rank = _first(_query_int(query, "rank", scheme), env_rank)
    if world_size < 0:
        world_size = _first(_query_int(query, "world_size", scheme), env_size)
    hint = ("environment variable {env} is not set (and no {arg}= argument was given); "
            "start the script with a launcher, e.g. `meshcast run -n 4 script.py` (torchrun, "
            "mpiexec and srun work too), or pass rank= and world_size="
            if scheme == "env://" else "{arg} is missing: pass {arg}= or add ?{arg}= to the URL")
    if rank is None or rank < 0:
        raise RendezvousError(f"{scheme}: " + hint.format(env="RANK", arg="rank"))
    if world_size is None or world_size < 1:
        if world_size is not None:
            raise RendezvousError(f"{scheme}: world_size must be at least 1 (got {world_size})")
        raise RendezvousError(f"{scheme}: " + hint.format(env="WORLD_SIZE", arg="world_size"))
    if rank >= world_size:
        raise RendezvousError(f"{scheme}: rank {rank} is not below world_size {world_size}")
    return rank, world_size


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


# -- tcp:// and file:// ------------------------------------------------------------


def _tcp_handler(url: str, rank: int, world_size: int, timeout: float) -> tuple[Store, int, int]:
    parsed = urlparse(url)
    try:
        port = parsed.port
    except ValueError:
        raise RendezvousError(f"tcp://: bad port in {url!r}") from None
    if not parsed.hostname:
        raise RendezvousError(f"tcp://: host is missing in {url!r} (expected tcp://host:port)")
    if port is None:
        raise RendezvousError(f"tcp://: port is missing in {url!r} (expected tcp://host:port)")
    rank, world_size = _rank_and_size("tcp://", _query(url), rank, world_size)
    store = TCPStore(parsed.hostname, port, world_size, is_master=rank == 0, timeout=timeout)
    return store, rank, world_size


def _file_handler(url: str, rank: int, world_size: int, timeout: float) -> tuple[Store, int, int]:
    parsed = urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise RendezvousError(f"file://: {url!r} names host {parsed.netloc!r}; use "
                              "file:///absolute/path (three slashes)")
    path = unquote(parsed.path)
    if not path:
        raise RendezvousError(f"file://: the path is missing in {url!r}")
    rank, world_size = _rank_and_size("file://", _query(url), rank, world_size)
    return FileStore(path, world_size, timeout), rank, world_size


# -- env:// ------------------------------------------------------------------------


def _master(launch: LaunchEnv, why: str) -> tuple[str, int]:
    if launch.master_addr is None:
        raise RendezvousError(f"env://: environment variable MASTER_ADDR is not set ({why})")
    if launch.master_port is None:
        raise RendezvousError(f"env://: environment variable MASTER_PORT is not set ({why})")
    return launch.master_addr, launch.master_port


def _env_handler(url: str, rank: int, world_size: int, timeout: float) -> tuple[Store, int, int]:
    launch = detect_launch_env()
    # A lone process (no launcher) is "rank 0 of 1" to detect_launch_env, but
    # env:// must not guess: like torch, it wants RANK and WORLD_SIZE said.
    known = launch.launcher != "none"
    rank, world_size = _rank_and_size("env://", _query(url), rank, world_size,
                                      launch.rank if known else None,
                                      launch.world_size if known else None)
    if config.get("MESHCAST_STORE_HOSTED"):
        host, port = _master(launch, "MESHCAST_STORE_HOSTED=1 says the launcher hosts the store")
        return TCPStore(host, port, world_size, timeout=timeout), rank, world_size
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        host, port = _master(launch, "torchrun's agent store address")
        return _torch_agent_store(host, port, world_size, timeout), rank, world_size
    if launch.master_addr is not None or launch.master_port is not None:
        host, port = _master(launch, "needed with MASTER_ADDR/MASTER_PORT")
        store = TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)
        return store, rank, world_size
    if launch.launcher not in MPI_LAUNCHERS:
        raise RendezvousError(
            "env://: environment variable MASTER_ADDR is not set; set MASTER_ADDR and "
            "MASTER_PORT to the address rank 0 can listen on (e.g. 127.0.0.1 and a free "
            "port), or start the job with `meshcast run`, torchrun, mpiexec or srun")
    if (launch.local_world_size is not None and launch.local_world_size != world_size
            and _mpi_world_is(rank, world_size)):
        return _mpi_bootstrap(rank, world_size, timeout), rank, world_size
    if launch.local_world_size is None or launch.local_world_size != world_size:
        local = ("an unknown number" if launch.local_world_size is None
                 else str(launch.local_world_size))
        raise RendezvousError(
            f"env://: MASTER_ADDR is not set and this {launch.launcher} job has {world_size} "
            f"ranks, {local} of them on this node. A job spanning nodes needs a meeting "
            "point: export MASTER_ADDR=<address of rank 0's node>, MASTER_PORT=<free port> "
            "and MESHCAST_SECRET=<same hex on every rank, e.g. `openssl rand -hex 32`> to "
            "every rank (mpiexec -x / srun --export)")
    return _bulletin(launch, rank, world_size, timeout), rank, world_size


def _mpi_world_is(rank: int, world_size: int) -> bool:
    """mpi4py imports and MPI's COMM_WORLD is this job (not a singleton, say)."""
    import importlib.util

    if importlib.util.find_spec("mpi4py") is None:
        return False
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank() == rank and MPI.COMM_WORLD.Get_size() == world_size


def listen_address() -> str:
    """The address other hosts reach this one at: that of ``MESHCAST_IFNAME`` if set,
    else the address this host's name resolves to."""
    ifname = os.environ.get("MESHCAST_IFNAME")
    if ifname:
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915,  # SIOCGIFADDR
                                     struct.pack("256s", ifname[:15].encode()))
            except OSError as exc:
                raise RendezvousError(f"MESHCAST_IFNAME={ifname!r}: no IPv4 address on that "
                                      f"interface ({exc})") from None
        return socket.inet_ntoa(packed[20:24])
    return socket.gethostbyname(socket.gethostname())


def _mpi_bootstrap(rank: int, world_size: int, timeout: float) -> TCPStore:
    """A multi-host MPI job without MASTER_ADDR: rank 0 hosts the store on its host's
    address and tells every rank where it is, and the job's fresh secret, through MPI
    itself (the launcher's own channel: no file, no extra variable)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() != rank or comm.Get_size() != world_size:
        raise RendezvousError(f"env://: MPI says rank {comm.Get_rank()} of {comm.Get_size()}, "
                              f"the launcher's environment rank {rank} of {world_size}")
    server = None
    notice = None
    if rank == 0:
        try:
            secret = secrets.token_bytes(32)
            host = listen_address()
            server = TCPStoreServer("0.0.0.0", 0, secret)
            notice = {"host": host, "port": server.port, "secret": secret.hex()}
        except Exception as exc:  # noqa: BLE001 - every rank must hear of the failure
            notice = {"error": f"rank 0 could not start the store: {exc}"}
    notice = comm.bcast(notice, root=0)
    if "error" in notice:
        raise RendezvousError(f"env://: {notice['error']}")
    store = TCPStore(notice["host"], notice["port"], world_size, timeout=timeout,
                     secret=bytes.fromhex(notice["secret"]), wait_for_workers=rank == 0)
    if server is not None:
        store._server = server  # the store owns the server: closing it stops it
    return store


def _torch_agent_store(host: str, port: int, world_size: int, timeout: float) -> Store:
    from .torch_store import _torch_distributed

    dist = _torch_distributed()
    try:
        # As torch's own env:// does under torchrun: a client of the agent's store.
        store = dist.TCPStore(host, port, world_size, False, timedelta(seconds=timeout))
    except (RuntimeError, dist.DistError) as exc:
        raise RendezvousError(f"env://: could not reach torchrun's agent store at "
                              f"{host}:{port}: {exc}") from None
    return TorchStore(store, timeout)


# -- the bulletin file (single-node mpiexec / srun without MASTER_ADDR) -------------


def _bulletin_path(launch: LaunchEnv) -> Path:
    name = f"bulletin-{launch.launcher}-{os.getppid()}"
    if launch.run_id:
        name += "-" + re.sub(r"[^A-Za-z0-9_.-]", "_", launch.run_id)[:64]
    return private_dir() / f"{name}.json"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bulletin(launch: LaunchEnv, rank: int, world_size: int, timeout: float) -> TCPStore:
    path = _bulletin_path(launch)
    deadline = time.monotonic() + timeout
    if rank == 0:
        return _bulletin_host(path, world_size, timeout, deadline)
    return _bulletin_client(path, launch, world_size, timeout, deadline)


def _bulletin_host(path: Path, world_size: int, timeout: float, deadline: float) -> TCPStore:
    secret = secrets.token_bytes(32)
    server = TCPStoreServer("127.0.0.1", 0, secret)
    store = None
    try:
        notice = {"host": "127.0.0.1", "port": server.port, "secret": secret.hex(),
                  "pid": os.getpid(), "world_size": world_size}
        write_private_file(path, json.dumps(notice).encode())
        store = TCPStore("127.0.0.1", server.port, world_size, timeout=timeout, secret=secret,
                         wait_for_workers=True)
        # The store owns the server from here on: closing the store stops it.
        store._server = server
        joined = server._core.wait_for_joins(world_size, deadline)
        if joined < world_size:
            raise CommTimeout(
                f"env://: only {joined} of {world_size} ranks joined rank 0's store within "
                f"{timeout:g} s (bulletin file {path}); ranks that never came look for the "
                "file under their parent process id, so every rank must be a direct child "
                "of the same mpiexec/srun process on this node")
        return store
    except BaseException:
        if store is not None:
            store.close()
        server.close()
        raise
    finally:
        # Secrets should not outlive the bring-up, successful or not.
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _read_bulletin(path: Path, world_size: int) -> dict | None:
    data = read_private_file(path)
    if data is None:
        return None
    try:
        notice = json.loads(data)
        fields = (notice["host"], notice["port"], bytes.fromhex(notice["secret"]),
                  notice["pid"], notice["world_size"])
    except (ValueError, KeyError, TypeError):
        return None  # being replaced, or not ours to read; look again
    if not isinstance(fields[3], int) or not _pid_alive(fields[3]):
        return None  # left over by a rank 0 that died; a live one will overwrite it
    if fields[4] != world_size:
        raise RendezvousError(f"env://: bulletin file {path} announces a job of {fields[4]} "
                              f"ranks but this rank is in a job of {world_size}")
    return notice


def _bulletin_client(path: Path, launch: LaunchEnv, world_size: int, timeout: float,
                     deadline: float) -> TCPStore:
    # Polling for a file: it appears exactly once, and the standard library has
    # no portable way to be told (inotify is Linux-only and not in it).
    start = time.monotonic()
    while True:
        notice = _read_bulletin(path, world_size)
        if notice is not None:
            break
        if time.monotonic() >= deadline:
            raise RendezvousError(
                f"env://: rank 0 did not publish its store in {path} within "
                f"{time.monotonic() - start:.0f} s. Without MASTER_ADDR, ranks of a "
                f"{launch.launcher} job on one node meet through a file named after their "
                f"parent process ({os.getppid()}); that needs every rank to be a direct child "
                "of the same launcher process. Otherwise set MASTER_ADDR and MASTER_PORT.")
        time.sleep(_BULLETIN_POLL)
    remaining = max(deadline - time.monotonic(), 1.0)
    store = TCPStore(notice["host"], notice["port"], world_size, timeout=remaining,
                     secret=bytes.fromhex(notice["secret"]), wait_for_workers=True)
    store.set_timeout(timeout)  # the bring-up used what was left; later waits get it all
    return store


register_handler("env", _env_handler)
register_handler("tcp", _tcp_handler)
register_handler("file", _file_handler)

__all__ = [
    "FileStore",
    "HashStore",
    "LaunchEnv",
    "PrefixStore",
    "Store",
    "TCPStore",
    "TCPStoreServer",
    "TorchStore",
    "detect_launch_env",
    "launch_env",
    "parse_tasks_per_node",
    "register_handler",
    "rendezvous",
]
