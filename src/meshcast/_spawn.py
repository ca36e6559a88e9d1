"""``spawn``: run ``fn(i, *args)`` in ``nprocs`` processes, like ``torch.multiprocessing.spawn``.

Meant for tutorial-style programs that set ``MASTER_ADDR``/``MASTER_PORT``
themselves and call ``init_process_group`` inside ``fn``; spawn sets no
rendezvous variables. Differences from torch, all deliberate:

* children get SIGKILL when the parent dies (``PR_SET_PDEATHSIG``), so a
  crashed or killed parent leaves no orphans;
* a child's traceback travels through a file, not a pipe, so a huge traceback
  cannot block the child from exiting;
* errors are :class:`SpawnError` subclasses (``MeshcastError``) carrying the
  same attributes as torch's ``ProcessRaisedException`` /
  ``ProcessExitedException``.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import Any

from .errors import MeshcastError, usage

# Seconds a failed job's other processes get between SIGTERM and SIGKILL.
DEFAULT_GRACE_PERIOD = 5.0


class SpawnError(MeshcastError):
    """A process started by :func:`spawn` failed.

    Attributes:
        error_index: the failed process's index ``i`` (its first argument).
        pid: its process id (also ``error_pid``, torch's name).
    """

    def __init__(self, message: str, error_index: int, pid: int) -> None:
        super().__init__(message)
        self.error_index = error_index
        self.pid = pid

    @property
    def error_pid(self) -> int:
        return self.pid


class ProcessRaisedError(SpawnError):
    """A spawned process raised an exception; the message holds its traceback."""


class ProcessExitedError(SpawnError):
    """A spawned process exited non-zero, or was killed, without raising.

    Attributes:
        exit_code: its exit code; negative ``-N`` when killed by signal ``N``.
        signal_name: e.g. ``"SIGKILL"`` when killed by a signal, else ``None``.
    """

    def __init__(
        self, message: str, error_index: int, pid: int, exit_code: int, signal_name: str | None
    ) -> None:
        super().__init__(message, error_index, pid)
        self.exit_code = exit_code
        self.signal_name = signal_name


def _child(fn: Callable[..., Any], i: int, args: tuple, error_file: str, parent_pid: int) -> None:
    """Body of every spawned process: death signal, ``fn(i, *args)``, error file on failure."""
    from .run.worker import set_parent_death_signal, write_error_file

    set_parent_death_signal(parent_pid)
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass  # a terminal's Ctrl-C reaches every process; the parent reports it
    except Exception as exc:
        # Drop this frame: the traceback starts in the user's fn.
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        write_error_file(error_file, exc, tb)
        sys.exit(1)


class ProcessContext:
    """Handle on the processes started by ``spawn(..., join=False)``.

    Attributes:
        processes: the ``multiprocessing.Process`` objects, index ``i`` at ``[i]``.
    """

    def __init__(self, processes: list[Any], error_files: list[str], tmpdir: str) -> None:
        self.processes = processes
        self.error_files = error_files
        self._sentinels = {p.sentinel: i for i, p in enumerate(processes)}
        self._cleanup = weakref.finalize(self, shutil.rmtree, tmpdir, ignore_errors=True)

    def pids(self) -> list[int]:
        """Process ids, in index order."""
        return [p.pid for p in self.processes]

    def join(self, timeout: float | None = None, grace_period: float = DEFAULT_GRACE_PERIOD) -> bool:
        """Wait for the processes; raise as soon as one fails.

        Args:
            timeout: seconds to wait for a process to exit; ``None`` waits as long
                as it takes.
            grace_period: when one fails, seconds the others get between SIGTERM
                and SIGKILL.

        Returns:
            ``True`` once every process exited 0; ``False`` if some still run
            after ``timeout`` (call ``join`` again).

        Raises:
            ProcessRaisedError: a process raised; its traceback is in the message.
            ProcessExitedError: a process exited non-zero or died by a signal.
        """
        if not self._sentinels:
            return True
        ready = multiprocessing.connection.wait(list(self._sentinels), timeout=timeout)
        failed = []
        for sentinel in ready:
            i = self._sentinels.pop(sentinel)
            self.processes[i].join()
            if self.processes[i].exitcode != 0:
                failed.append(i)
        if not failed:
            if not self._sentinels:
                self._cleanup()
                return True
            return False
        self._terminate(grace_period)
        # Of failures seen together, the one that raised first is the root cause.
        from .run.worker import read_error_file

        records = {i: read_error_file(self.error_files[i]) for i in failed}
        def raised_at(i: int) -> float:
            record = records[i]
            return record.time if record is not None and record.time is not None else float("inf")

        first = min(failed, key=lambda i: (raised_at(i), i))
        self._cleanup()
        raise self._error(first, records[first])

    def _terminate(self, grace_period: float) -> None:
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + grace_period
        for p in self.processes:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.processes:
            if p.is_alive():
                p.kill()
            p.join()
        self._sentinels.clear()

    def _error(self, i: int, record: Any) -> SpawnError:
        p = self.processes[i]
        if record is not None:
            return ProcessRaisedError(
                f"spawn: process {i} (pid {p.pid}) failed with the following error:\n"
                f"{record.traceback.rstrip()}",
                i, p.pid,
            )  # fmt: skip
        code = p.exitcode
        if code < 0:
            try:
                name: str | None = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            how = f"was killed by signal {-code} ({name})"
        else:
            name = None
            how = f"exited with code {code}"
        return ProcessExitedError(f"spawn: process {i} (pid {p.pid}) {how}", i, p.pid, code, name)


def spawn(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """Run ``fn(i, *args)`` for ``i`` in ``0 .. nprocs-1``, each in its own process.

    Args:
        fn: a module-level function (it is pickled for the ``spawn`` start
            method); its first argument is the process index.
        args: further arguments for ``fn``.
        nprocs: number of processes.
        join: wait for all of them (and raise on the first failure); otherwise
            return a :class:`ProcessContext` at once.
        daemon: passed to ``multiprocessing.Process``.
        start_method: ``"spawn"`` (default), ``"fork"`` or ``"forkserver"``.

    Returns:
        ``None`` when ``join`` is true, else the :class:`ProcessContext`.

    Raises:
        InvalidUsage: ``nprocs < 1`` or an unknown ``start_method``.
        ProcessRaisedError: (when joining) a process raised; the others are
            stopped and the message holds the child's traceback.
        ProcessExitedError: (when joining) a process exited non-zero or was
            killed without raising.

    Children are killed when the parent dies, which Linux ties to the parent
    *thread*: call ``spawn`` from a thread that outlives the children.

    Example::

        >>> import os
        >>> import meshcast as dist
        >>> def work(rank, world_size):
        ...     os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        ...     dist.init_process_group(rank=rank, world_size=world_size)
        ...     ...
        >>> if __name__ == "__main__":
        ...     dist.spawn(work, args=(4,), nprocs=4)
    """
    if not isinstance(nprocs, int) or nprocs < 1:
        raise usage("spawn", f"'nprocs' must be a positive int (got {nprocs!r})")
    if start_method not in multiprocessing.get_all_start_methods():
        raise usage(
            "spawn",
            f"'start_method' must be one of {multiprocessing.get_all_start_methods()} "
            f"(got {start_method!r})",
        )
    ctx = multiprocessing.get_context(start_method)
    tmpdir = tempfile.mkdtemp(prefix="meshcast-spawn-")
    error_files = [os.path.join(tmpdir, f"error-{i}.json") for i in range(nprocs)]
    processes = []
    for i in range(nprocs):
        p = ctx.Process(
            target=_child, args=(fn, i, tuple(args), error_files[i], os.getpid()), daemon=daemon
        )
        p.start()
        processes.append(p)
    context = ProcessContext(processes, error_files, tmpdir)
    if not join:
        return context
    while not context.join():
        pass
    return None
