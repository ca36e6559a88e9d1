"""Shared-memory segments that never outlive the job.

Theory of operation
-------------------
The default is an anonymous ``memfd``: it has no name in ``/dev/shm`` at all,
so nothing can leak, not even after SIGKILL. The creating rank keeps the
descriptor open until every peer has attached; peers open it through
``/proc/<creator pid>/fd/<fd>`` (allowed for processes of the same user) and
map it. Once the group's attach barrier passes, the creator closes the
descriptor and the memory lives exactly as long as some rank maps it.

With ``MESHCAST_SHM_DIR`` set (or where memfd is unavailable), segments are
named files ``meshcast-<run id>-<name>`` in that directory, created with
``O_EXCL`` and mode 0600 and unlinked as soon as every peer attached; the
launcher's janitor removes any left by a crash inside that short window.

Either way the size is committed up front with ``posix_fallocate``: tmpfs
happily maps more than it holds and the first write past the end raises
SIGBUS with no traceback, so we turn "not enough shared memory" into a
:class:`~meshcast.errors.ShmError` that says what to do instead.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

import numpy as np

from .. import config
from ..errors import ShmError


def _fallocate(fd: int, size: int, where: str) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            raise ShmError(
                f"not enough shared memory for a {size / (1 << 20):.1f} MiB segment in {where} "
                f"({os.strerror(exc.errno)}); free some, enlarge it (e.g. docker --shm-size), "
                f"or lower MESHCAST_SLOT_BYTES / MESHCAST_RING_BYTES"
            ) from None
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise ShmError(f"could not size a shared-memory segment in {where}: {exc}") from None


def _map(fd: int, size: int, populate: bool) -> mmap.mmap:
    flags = mmap.MAP_SHARED
    if populate:
        flags |= getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(fd, size, flags=flags)


class Segment:
    """A mapped shared-memory segment.

    Create one with :meth:`create` on one rank, publish :attr:`locator` to the
    peers, :meth:`attach` on each of them, then call :meth:`seal` on the
    creator once all have attached.
    """

    def __init__(self, mm: mmap.mmap, size: int, fd: int | None, path: str | None,
                 locator: str) -> None:
        self.mm = mm
        self.size = size
        self._fd = fd
        self._path = path
        self.locator = locator
        self.bytes = np.frombuffer(mm, dtype=np.uint8, count=size)
        anchor = ctypes.c_char.from_buffer(mm)
        self.address = ctypes.addressof(anchor)
        del anchor  # keep no ctypes export alive: it would pin the mapping

    @classmethod
    def create(cls, name: str, size: int, populate: bool = False) -> Segment:
        """Create and map a zero-filled segment of ``size`` bytes.

        ``populate`` maps every page up front (MAP_POPULATE), so that touching a
        page for the first time inside a timed collective costs no page fault.
        """
        size = max(size, mmap.PAGESIZE)
        shm_dir = config.get("MESHCAST_SHM_DIR")
        if not shm_dir and hasattr(os, "memfd_create"):
            fd = os.memfd_create(f"meshcast-{name}", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
                _fallocate(fd, size, "memory (memfd)")
                mm = _map(fd, size, populate)
            except BaseException:
                os.close(fd)
                raise
            return cls(mm, size, fd, None, f"fd:{os.getpid()}:{fd}:{size}")
        shm_dir = shm_dir or "/dev/shm"
        run_id = config.get("MESHCAST_RUN_ID") or f"p{os.getpid()}"
        path = os.path.join(shm_dir, f"meshcast-{run_id}-{name}")
        try:
            free = os.statvfs(shm_dir)
            if free.f_bavail * free.f_frsize < size:
                raise ShmError(
                    f"{shm_dir} has {free.f_bavail * free.f_frsize / (1 << 20):.1f} MiB free but "
                    f"a {size / (1 << 20):.1f} MiB segment is needed; enlarge it (e.g. docker "
                    f"--shm-size) or lower MESHCAST_SLOT_BYTES / MESHCAST_RING_BYTES"
                )
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except FileExistsError:
            raise ShmError(f"shared-memory segment {path} already exists (another job?)") from None
        except OSError as exc:
            raise ShmError(f"could not create {path}: {exc}") from None
        try:
            os.ftruncate(fd, size)
            _fallocate(fd, size, shm_dir)
            mm = _map(fd, size, populate)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        return cls(mm, size, fd, path, f"path:{path}:{size}")

    @classmethod
    def attach(cls, locator: str, populate: bool = False) -> Segment:
        """Map the segment a peer created and published as ``locator`` (``populate``: as in
        :meth:`create`)."""
        kind, _, rest = locator.partition(":")
        if kind == "fd":
            pid, fd_text, size_text = rest.split(":")
            source = f"/proc/{pid}/fd/{fd_text}"
        elif kind == "path":
            source, _, size_text = rest.rpartition(":")
        else:
            raise ShmError(f"unknown shared-memory locator {locator!r}")
        size = int(size_text)
        try:
            fd = os.open(source, os.O_RDWR)
        except OSError as exc:
            raise ShmError(f"could not attach shared memory {source}: {exc}") from None
        try:
            mm = _map(fd, size, populate)
        finally:
            os.close(fd)
        return cls(mm, size, None, None, locator)

    def seal(self) -> None:
        """Drop the name / descriptor once every peer has attached (creator only)."""
        if self._path is not None:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def view(self, offset: int, nbytes: int, dtype: np.dtype | type = np.uint8) -> np.ndarray:
        """A NumPy view of ``nbytes`` bytes at ``offset`` (no copy)."""
        return self.bytes[offset:offset + nbytes].view(dtype)

    def close(self) -> None:
        """Unmap, unless views are still alive elsewhere (then the GC unmaps later)."""
        self.seal()
        self.bytes = None  # type: ignore[assignment]
        try:
            self.mm.close()
        except BufferError:
            pass
