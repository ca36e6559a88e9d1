"""Runs a group's collectives one at a time, in call order, inline or on a worker thread.

Theory of operation
-------------------
Collectives of one group must execute in the order the program called them
(every rank matches them by sequence number). A synchronous call that finds
the group idle runs inline in the caller's thread: no thread hop, lowest
latency. Anything else (``async_op=True``, or a synchronous call issued while
async work is still queued) goes into the group's FIFO, which a worker thread
drains. NumPy releases the GIL in its copy and reduce loops and the waits
block in the kernel, so async collectives really overlap with the caller's
computation.

A failed collective *poisons* the group: later submissions fail at once with
GroupAbortedError naming the first failure (as Gloo and NCCL do: a
communicator that saw a broken link or a mismatch cannot be trusted).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from . import config
from .errors import GroupAbortedError, InvalidUsage
from .work import Work

Job = Callable[[], Any]


class CallFifo:
    """The FIFO of one group."""

    def __init__(self, name: str) -> None:
        self.name = name
        # call() takes the plain lock directly: a Condition's own ``with`` goes through
        # a Python-level __enter__ and costs ~0.3 us, a lot for a 5 us collective.
        # Reentrant: a Work completed under the lock may run callbacks that submit.
        self._mutex = threading.RLock()
        self._cv = threading.Condition(self._mutex)
        self._queue: collections.deque[tuple[Job, Work]] = collections.deque()
        self._running = False
        self._thread: threading.Thread | None = None
        self._closed = False
        self.failure: BaseException | None = None

    def submit(self, job: Job, work: Work, *, inline: bool) -> Work:
        """Queue ``job``; run it in this thread if ``inline`` and the group is idle."""
        with self._cv:
            if self.failure is not None:
                work._complete(error=GroupAbortedError(
                    f"{self.name} is unusable after an earlier failure: {self.failure}"))
                return work
            if self._closed:
                work._complete(error=GroupAbortedError(f"{self.name} was destroyed"))
                return work
            # (the claim itself: compiled, it does not take this lock, see _loop)
            if inline and self.enter_inline():
                run_here = True
            else:
                self._queue.append((job, work))
                self._ensure_worker()
                self._cv.notify_all()
                run_here = False
        if run_here:
            try:
                self._run(job, work)
            finally:
                with self._cv:
                    self._running = False
                    self._cv.notify_all()
        return work

    def call(self, job: Job, describe: str) -> Any:
        """Run ``job`` synchronously, in call order, and return its result or raise.

        The common case (the group is idle) runs inline without creating a Work;
        otherwise the job queues behind the async work and this thread waits.
        """
        if not self.enter_inline():
            work = self.submit(job, Work(describe), inline=False)
            work.wait()
            return work._result
        try:
            result = job()
        except BaseException as exc:
            self.leave_inline(exc)
            raise
        self.leave_inline(None)
        return result

    def enter_inline(self) -> bool:
        """Claim the idle group for a synchronous call in this thread; False if it is busy,
        failed or closed (then go through :meth:`call`). Pair with :meth:`leave_inline`.

        The tiny-call lane uses the pair directly: building a job closure for
        :meth:`call` costs a noticeable part of a 5 us collective. (Explicit
        acquire/release, not ``with``: half the cost, which shows at 2 us a call.)
        """
        mutex = self._mutex
        mutex.acquire()
        ok = not (self._running or self._queue or self.failure is not None or self._closed)
        if ok:
            self._running = True
        mutex.release()
        return ok

    def hand_over(self, job: Job, work: Work) -> Work:
        """End a claim of :meth:`enter_inline` by giving the rest of the call (``job``) to
        the worker thread, ahead of anything queued during the claim (those calls came
        after it); ``work`` completes when ``job`` has run."""
        with self._cv:
            self._queue.appendleft((job, work))
            self._running = False
            self._ensure_worker()
            self._cv.notify_all()
        return work

    def leave_inline(self, error: BaseException | None) -> None:
        """End a call claimed by :meth:`enter_inline`; ``error`` poisons the group (unless
        it is bad usage, which every rank refuses alike before any data moves)."""
        if error is not None:
            self._poison(error)
        # No lock for the common case: only the claimant clears the flag, and a job
        # queued meanwhile was queued with a notify of its own (submit), so the
        # worker either saw it then or is woken here.
        self._running = False
        if self._queue:
            self._wake()

    def _poison(self, error: BaseException) -> None:
        if not isinstance(error, InvalidUsage):
            with self._mutex:
                if self.failure is None:
                    self.failure = error

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def _run(self, job: Job, work: Work) -> None:
        try:
            result = job()
        except BaseException as exc:  # noqa: BLE001 - every failure goes to the Work
            # Bad usage is refused by every rank alike before any data moves: the
            # group stays healthy. Anything else leaves it in an unknown state.
            if not isinstance(exc, InvalidUsage):
                with self._cv:
                    if self.failure is None:
                        self.failure = exc
            work._complete(error=exc)
            if not isinstance(exc, Exception):
                raise
        else:
            work._complete(result)

    def _ensure_worker(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=f"meshcast-{self.name}",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while (self._running or not self._queue) and not self._closed:
                    self._cv.wait()
                if self._closed and not self._queue:
                    return
                # Running before the queue may run empty: the compiled claim
                # (meshcast._claim) checks both without this lock, so at no moment
                # between a submit and the end of its job may both say idle.
                self._running = True
                job, work = self._queue.popleft()
                if self.failure is not None:
                    self._running = False
                    work._complete(error=GroupAbortedError(
                        f"{self.name} is unusable after an earlier failure: {self.failure}"))
                    continue
            try:
                self._run(job, work)
            finally:
                with self._cv:
                    self._running = False
                    self._cv.notify_all()

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every queued job finished."""
        with self._cv:
            self._cv.wait_for(lambda: not self._queue and not self._running, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Refuse new work; queued work fails with GroupAbortedError; the worker thread
        finishes the job it runs, if any, and ends before this returns (up to ``timeout``).

        Joining matters at exit: a daemon thread still alive when the interpreter
        finalizes is killed wherever it is, and inside torch's C++ code that aborts
        the process ("terminate called without an active exception").
        """
        with self._cv:
            self._closed = True
            pending, self._queue = list(self._queue), collections.deque()
            self._cv.notify_all()
        for _, work in pending:
            work._complete(error=GroupAbortedError(f"{self.name} was destroyed"))
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


def _compiled_fifo_type() -> type[CallFifo] | None:
    """CallFifo with the compiled claim (meshcast._claim), or None where it was not
    built (or is not loaded: a free-threaded build)."""
    try:
        from . import _claim
    except ImportError:
        return None

    class CompiledCallFifo(_claim.Claim, CallFifo):
        """CallFifo whose enter_inline/leave_inline and their state are compiled."""

    return CompiledCallFifo


_COMPILED_FIFO = _compiled_fifo_type()


def call_fifo(name: str) -> CallFifo:
    """A new group's FIFO: with the compiled claim unless MESHCAST_COMPILED=0 or it
    was not built (both behave alike; the compiled one costs a tenth)."""
    if _COMPILED_FIFO is not None and config.get("MESHCAST_COMPILED"):
        return _COMPILED_FIFO(name)
    return CallFifo(name)
