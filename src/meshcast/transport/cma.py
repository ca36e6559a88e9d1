"""Single-copy transfers between processes of one host (Linux cross-memory attach).

``process_vm_readv`` copies straight from another process's memory into ours:
one copy instead of the two a shared ring needs (sender into the ring,
receiver out of it), and no ring-sized hand-offs. MPICH uses it for large
messages on one node. It needs ptrace-level permission over the peer (same
user, and Yama's ptrace_scope allowing it), so the world probes it once at
bring-up and every rank falls back to the rings if any rank cannot use it.

Yama's default on Ubuntu and its derivatives (ptrace_scope 1) lets a process
read only its descendants, never a sibling rank: each rank first declares that
any process of its user may (:func:`allow_peers`, as UCX's CMA transport does),
which is what ptrace_scope 0 allows everywhere. ``MESHCAST_CMA_BYTES=0`` leaves
the declaration out with the rest of single-copy.
"""

from __future__ import annotations

import ctypes
import errno
import os
from functools import lru_cache
from typing import Any

import numpy as np

from . import compiled_helper


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_ARGS = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.POINTER(_IOVec),
         ctypes.c_ulong, ctypes.c_ulong]
_readv = getattr(_libc, "process_vm_readv", None)
_writev = getattr(_libc, "process_vm_writev", None)
for _fn in (_readv, _writev):
    if _fn is not None:
        _fn.argtypes = _ARGS
        _fn.restype = ctypes.c_ssize_t


def read(pid: int, address: int, dest: np.ndarray) -> None:
    """Copy ``dest.nbytes`` bytes at ``address`` in process ``pid`` into ``dest``.

    Raises:
        OSError: the kernel refused (permission, the process is gone, a bad address).
    """
    _transfer(_readv, "process_vm_readv from", pid, dest, address)


def write(pid: int, address: int, src: np.ndarray) -> None:
    """Copy ``src.nbytes`` bytes of ``src`` to ``address`` in process ``pid``.

    The same permission as :func:`read` (the world probes reading only; a kernel
    that allows one allows the other for the same pair of processes).

    Raises:
        OSError: the kernel refused (permission, the process is gone, a bad address).
    """
    _transfer(_writev, "process_vm_writev to", pid, src, address)


def _compiled_copy() -> Any:
    """The compiled helper's copy (transport/_rings.c, through _copy.h), or None (see
    :func:`compiled_helper`). It goes through a bounce buffer where the destination lies
    1-15 bytes past the source modulo 4 KiB, where the kernel's own copy slows down
    tenfold on some CPUs (see _copy.h)."""
    return _copy_under(os.environ.get("MESHCAST_COMPILED"))


@lru_cache(maxsize=4)
def _copy_under(setting: str | None) -> Any:
    """:func:`_compiled_copy` under this MESHCAST_COMPILED, looked up once (1.3 us a
    lookup, on every large p2p receive)."""
    rings = compiled_helper("_rings")
    return None if rings is None else rings.copy_across


def _transfer(fn: Any, what: str, pid: int, local: np.ndarray, address: int) -> None:
    """Move ``local.nbytes`` bytes between ``local`` and ``address`` in ``pid`` with ``fn``."""
    if fn is None:
        raise OSError(errno.ENOSYS, f"{what.split()[0]} is not available")
    compiled = _compiled_copy() if local.nbytes and local.flags.c_contiguous else None
    if compiled is not None:
        err = compiled(pid, address, local, fn is _writev)
        if err:
            raise OSError(err, f"{what} pid {pid}: {os.strerror(err)}")
        return
    total = local.nbytes
    base = local.ctypes.data
    done = 0
    while done < total:
        # The kernel may copy less than asked (e.g. across many pages): continue.
        mine = _IOVec(base + done, total - done)
        theirs = _IOVec(address + done, total - done)
        n = fn(pid, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
        if n <= 0:
            err = ctypes.get_errno() if n < 0 else errno.EIO
            raise OSError(err, f"{what} pid {pid}: {os.strerror(err)}")
        done += n


_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1)
YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def allow_peers(scope_file: str = YAMA_SCOPE) -> str:
    """Let this user's other processes read this one's memory where Yama's relational
    mode (``ptrace_scope`` 1) would forbid it to everyone but our ancestors: the job's
    ranks are siblings. Returns what happened, for the log: "not needed" (no Yama,
    or another mode: 0 allows it already, 2 and 3 need privileges no declaration
    gives), "allowed", or "refused: <reason>"."""
    try:
        with open(scope_file) as f:
            scope = f.read().strip()
    except OSError:
        return "not needed"
    if scope != "1":
        return "not needed"
    prctl = getattr(_libc, "prctl", None)
    if prctl is None:
        return "refused: no prctl"
    if prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0) != 0:
        return f"refused: {os.strerror(ctypes.get_errno())}"
    return "allowed"


def probe(pid: int, address: int, expected: bytes) -> bool:
    """True if this process can read ``expected`` at ``address`` in process ``pid``."""
    buf = np.zeros(len(expected), np.uint8)
    try:
        read(pid, address, buf)
    except OSError:
        return False
    return buf.tobytes() == expected
