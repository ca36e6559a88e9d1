"""Single-copy transfers between processes of one host (Linux cross-memory attach).

``process_vm_readv`` copies straight from another process's memory into ours:
one copy instead of the two a shared ring needs (sender into the ring,
receiver out of it), and no ring-sized hand-offs. MPICH uses it for large
messages on one node. It needs ptrace-level permission over the peer (same
user, and Yama's ptrace_scope allowing it), so the world probes it once at
bring-up and every rank falls back to the rings if any rank cannot use it.
"""

from __future__ import annotations

import ctypes
import errno
import os

import numpy as np


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
    if _readv is None:
        raise OSError(errno.ENOSYS, "process_vm_readv is not available")
    total = dest.nbytes
    base = dest.ctypes.data
    done = 0
    while done < total:
        # The kernel may copy less than asked (e.g. across many pages): continue.
        local = _IOVec(base + done, total - done)
        remote = _IOVec(address + done, total - done)
        n = _readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n <= 0:
            err = ctypes.get_errno() if n < 0 else errno.EIO
            raise OSError(err, f"process_vm_readv from pid {pid}: {os.strerror(err)}")
        done += n


def write(pid: int, address: int, src: np.ndarray) -> None:
    """Copy ``src.nbytes`` bytes of ``src`` to ``address`` in process ``pid``.

    The same permission as :func:`read` (the world probes reading only; a kernel
    that allows one allows the other for the same pair of processes).

    Raises:
        OSError: the kernel refused (permission, the process is gone, a bad address).
    """
    if _writev is None:
        raise OSError(errno.ENOSYS, "process_vm_writev is not available")
    total = src.nbytes
    base = src.ctypes.data
    done = 0
    while done < total:
        local = _IOVec(base + done, total - done)
        remote = _IOVec(address + done, total - done)
        n = _writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n <= 0:
            err = ctypes.get_errno() if n < 0 else errno.EIO
            raise OSError(err, f"process_vm_writev to pid {pid}: {os.strerror(err)}")
        done += n


def probe(pid: int, address: int, expected: bytes) -> bool:
    """True if this process can read ``expected`` at ``address`` in process ``pid``."""
    buf = np.zeros(len(expected), np.uint8)
    try:
        read(pid, address, buf)
    except OSError:
        return False
    return buf.tobytes() == expected
