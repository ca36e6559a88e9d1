"""FileStore: a store kept in one file that processes on a shared file system append to.

Theory of operation
-------------------

The file is a header line followed by an append-only log of records
``(op, key length, value length, key, value)``; ``op`` is *set*, *delete*,
*join* or *leave*. Each process keeps a replica of the key space and the
offset up to which it has replayed the log. Every verb takes an
``fcntl.flock`` on the file (shared to read, exclusive to write), replays
whatever other processes appended since, and, to write, appends one record
with a single ``write``. Read-modify-write verbs (``add``, ``compare_set``)
hold the exclusive lock across the replay and the append, which makes them
atomic across processes.

Waiting (``get``/``wait`` for a missing key) polls the file with a short,
growing sleep: a file offers no portable change notification (inotify is
Linux-only and not in the standard library, and does not work on most
network file systems), and torch's FileStore polls the same way. This is the
one place in the rendezvous layer that polls; use :class:`TCPStore` where
waits must be instant.

The stale-file pitfall
----------------------

torch documents that its FileStore file "must be non-existent or empty at
every init": a file left behind by an earlier run (crash, Ctrl-C, a fixed
path reused) still holds that run's keys, so the new run reads old addresses
and counters and deadlocks or silently mixes jobs. Here, when ``world_size``
is known:

* each FileStore appends a *join* record when it opens and a *leave* record
  when it closes; the process whose *leave* completes the count deletes the
  file, so a clean run leaves nothing behind;
* opening a file in which ``world_size`` processes already joined, or in
  which some process already left, is refused with a ``RendezvousError``
  that names the file, instead of joining a dead run.

A run that crashed before every rank joined can still leave a file that looks
usable; use a fresh path per run (e.g. under ``tmp_path`` or with the job id
in its name) when you can.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..errors import InvalidUsage, RendezvousError
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

HEADER = b"meshcast-filestore 1\n"
# op, key length, value length
_RECORD = struct.Struct("!BIQ")
_SET, _DELETE, _JOIN, _LEAVE = 1, 2, 3, 4
#: First and longest sleep of a waiting ``get``/``wait`` (seconds).
POLL_MIN, POLL_MAX = 0.005, 0.05


class FileStore(Store):
    """A store in a file, for processes that share a file system (torch's ``FileStore``).

    Args:
        path: the file; created if missing. Give every run a fresh path, or
            pass ``world_size`` so the last process to close deletes it.
        world_size: number of processes that will open this file; ``-1`` if
            unknown (then the file is never deleted automatically).
        timeout: default timeout in seconds of ``get`` and ``wait``.

    Raises:
        RendezvousError: the file cannot be opened, is not a meshcast store
            file, or is left over from an earlier run.
        InvalidUsage: a bad argument.

    Example::

        >>> store = FileStore("/tmp/job-42.store", world_size=2)
        >>> store.set("addr/0", b"...")
    """

    def __init__(self, path: str | os.PathLike[str], world_size: int = -1,
                 timeout: float = 300.0) -> None:
        super().__init__(timeout)
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size == 0 \
                or world_size < -1:
            raise InvalidUsage(f"FileStore: 'world_size' must be -1 or an int >= 1 "
                               f"(got {world_size!r})")
        self._path = os.fspath(path)
        self._world_size = world_size
        self._data: dict[bytes, bytes] = {}
        self._offset = 0
        self._joined = 0
        self._left = 0
        self._closed = False
        # flock() excludes other open files, not other threads using this one.
        self._thread_lock = threading.Lock()
        try:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise RendezvousError(f"FileStore: cannot open {self._path!r}: {exc}") from None
        try:
            with self._locked(exclusive=True):
                self._join()
        except BaseException:
            os.close(self._fd)
            raise

    @property
    def path(self) -> str:
        """The file backing this store."""
        return self._path

    # -- log replay and locking ------------------------------------------------

    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        with self._thread_lock:
            if self._closed:
                raise RendezvousError(f"FileStore: the store {self._path!r} was closed")
            fcntl.flock(self._fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                self._replay()
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _replay(self) -> None:
        """Apply the records appended since the last replay (caller holds the lock)."""
        size = os.fstat(self._fd).st_size
        if size <= self._offset:
            return
        chunk = os.pread(self._fd, size - self._offset, self._offset)
        pos = 0
        if self._offset == 0:
            if not chunk.startswith(HEADER):
                raise RendezvousError(f"FileStore: {self._path!r} is not a meshcast store file; "
                                      "point the store at a new or empty file")
            pos = len(HEADER)
        while pos + _RECORD.size <= len(chunk):
            op, key_len, value_len = _RECORD.unpack_from(chunk, pos)
            end = pos + _RECORD.size + key_len + value_len
            if end > len(chunk):
                # A record cut short by a writer that died mid-write; the
                # writers' lock guarantees nothing valid follows it.
                break
            key = chunk[pos + _RECORD.size:pos + _RECORD.size + key_len]
            if op == _SET:
                self._data[key] = chunk[end - value_len:end]
            elif op == _DELETE:
                self._data.pop(key, None)
            elif op == _JOIN:
                self._joined += 1
            elif op == _LEAVE:
                self._left += 1
            else:
                raise RendezvousError(f"FileStore: {self._path!r} is corrupt "
                                      f"(record type {op} at offset {self._offset + pos})")
            pos = end
        self._offset += pos

    def _append(self, op: int, key: bytes = b"", value: bytes = b"") -> None:
        """Append one record (caller holds the exclusive lock) and apply it."""
        if self._offset == 0:
            self._write(HEADER)
            self._offset = len(HEADER)
        self._write(_RECORD.pack(op, len(key), len(value)) + key + value)
        self._replay()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def _join(self) -> None:
        if self._world_size > 0 and (self._left or self._joined >= self._world_size):
            raise RendezvousError(
                f"FileStore: {self._path!r} is left over from an earlier run "
                f"({self._joined} processes joined, {self._left} left, world_size is "
                f"{self._world_size}); delete it or use a fresh path for every run")
        self._append(_JOIN)

    # -- the verbs -------------------------------------------------------------

    def set(self, key: str, value: Value) -> None:
        raw = check_key(key, "FileStore.set").encode("utf-8")
        value = as_bytes(value, "FileStore.set")
        with self._locked(exclusive=True):
            self._append(_SET, raw, value)

    def get(self, key: str) -> bytes:
        raw = check_key(key, "FileStore.get").encode("utf-8")
        self._wait_for([raw], self._timeout, "FileStore.get")
        with self._locked(exclusive=False):
            value = self._data.get(raw)
        if value is None:  # deleted right after it appeared
            raise missing_keys_timeout("FileStore.get", [key], self._timeout)
        return value

    def add(self, key: str, amount: int) -> int:
        raw = check_key(key, "FileStore.add").encode("utf-8")
        check_amount(amount, "FileStore.add")
        with self._locked(exclusive=True):
            current = self._data.get(raw)
            value = 0 if current is None else parse_counter(current, key, "FileStore.add")
            value = checked_sum(value, amount, key, "FileStore.add")
            self._append(_SET, raw, str(value).encode("ascii"))
            return value

    def compare_set(self, key: str, expected: Value, desired: Value) -> bytes:
        raw = check_key(key, "FileStore.compare_set").encode("utf-8")
        expected = as_bytes(expected, "FileStore.compare_set", "expected")
        desired = as_bytes(desired, "FileStore.compare_set", "desired")
        with self._locked(exclusive=True):
            current = self._data.get(raw)
            if current is None:
                if expected:
                    return expected
            elif current != expected:
                return current
            self._append(_SET, raw, desired)
            return desired

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        keys = check_keys(keys, "FileStore.wait")
        timeout = self._wait_timeout(timeout, "FileStore.wait")
        self._wait_for([k.encode("utf-8") for k in keys], timeout, "FileStore.wait")

    def check(self, keys: Sequence[str]) -> bool:
        keys = check_keys(keys, "FileStore.check")
        with self._locked(exclusive=False):
            return all(k.encode("utf-8") in self._data for k in keys)

    def delete_key(self, key: str) -> bool:
        raw = check_key(key, "FileStore.delete_key").encode("utf-8")
        with self._locked(exclusive=True):
            if raw not in self._data:
                return False
            self._append(_DELETE, raw)
            return True

    def num_keys(self) -> int:
        with self._locked(exclusive=False):
            return len(self._data)

    def _wait_for(self, keys: list[bytes], timeout: float, caller: str) -> None:
        deadline = time.monotonic() + timeout
        sleep = POLL_MIN
        while True:
            with self._locked(exclusive=False):
                missing = [k for k in keys if k not in self._data]
            if not missing:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise missing_keys_timeout(
                    caller, [k.decode("utf-8", "replace") for k in missing], timeout)
            # Polling: see the module docstring for why a file store must.
            time.sleep(min(sleep, remaining))
            sleep = min(sleep * 2, POLL_MAX)

    def close(self) -> None:
        """Leave the store; the last of ``world_size`` processes to leave deletes the file.

        Idempotent.
        """
        with self._thread_lock:
            if self._closed:
                return
            self._closed = True
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                self._replay()
                self._append(_LEAVE)
                if 0 < self._world_size <= self._left:
                    # Unlinking under the lock: nobody can be mid-append to this file.
                    try:
                        os.unlink(self._path)
                    except FileNotFoundError:
                        pass
            except RendezvousError:
                pass  # a corrupt file: nothing to leave, still release the descriptor
            finally:
                os.close(self._fd)

    def __repr__(self) -> str:
        return f"FileStore({self._path!r}, world_size={self._world_size})"


__all__ = ["FileStore"]
