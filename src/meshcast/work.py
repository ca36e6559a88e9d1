"""``Work`` (and ``P2PWork``): the handle of a submitted operation, as in torch.distributed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from .errors import CommTimeout

if TYPE_CHECKING:
    from .transport.shm import Handle


class Work:
    """Handle of an operation submitted with ``async_op=True`` (or a point-to-point op).

    ``wait()`` blocks until the operation finished and re-raises its failure;
    ``is_completed()`` polls; ``exception()`` returns the failure (or None).
    """

    def __init__(self, describe: str, *, on_wait: Callable[[float | None], None] | None = None
                 ) -> None:
        self._describe = describe
        # A threading.Event costs a Condition and two locks (~3 us); most Work objects
        # are done before anyone waits on them, so the Event is made only by a waiter.
        self._finished = False
        self._event: threading.Event | None = None
        self._error: BaseException | None = None
        self._result: Any = None
        self._on_wait = on_wait
        self._callbacks: list[Callable[[Work], None]] = []
        self._lock = threading.Lock()
        self.source_rank: int | None = None

    @staticmethod
    def finished(describe: object, source_rank: int | None = None) -> Work:
        """A Work of an operation that completed as it was posted, without error
        (``describe``: any object naming it, formatted only when shown; ``source_rank``:
        a receive's sender)."""
        return _Finished(describe, source_rank)

    # -------------------------------------------------------------- completion

    def _complete(self, result: Any = None, error: BaseException | None = None) -> None:
        with self._lock:
            self._result = result
            self._error = error
            self._finished = True
            event = self._event
            callbacks, self._callbacks = self._callbacks, []
        if event is not None:
            event.set()
        for cb in callbacks:
            cb(self)

    def _wait_finished(self, timeout: float | None) -> bool:
        if self._finished:
            return True
        with self._lock:
            if self._finished:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    # ---------------------------------------------------------------- public

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the operation finished; re-raise its failure.

        Args:
            timeout (float or datetime.timedelta, optional): seconds to wait at
                most. The operation keeps its own deadline (the group's timeout)
                regardless; this only bounds how long the caller waits here.

        Returns:
            True, as torch's ``Work.wait`` does.

        Raises:
            CommTimeout: ``timeout`` passed before the operation finished.
            The operation's own error (MismatchError, PeerGoneError, CommTimeout...).
        """
        if timeout is not None and hasattr(timeout, "total_seconds"):
            timeout = timeout.total_seconds()
        if self._on_wait is not None and not self._finished:
            self._on_wait(timeout)
        if not self._wait_finished(timeout):
            raise CommTimeout(f"{self._describe}: not completed within {timeout:.3f}s of wait()")
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        """True once the operation finished, successfully or not."""
        return self._finished

    def is_success(self) -> bool:
        """True once the operation finished without error."""
        return self._finished and self._error is None

    def exception(self) -> BaseException | None:
        """The operation's failure, or None (also None while still running)."""
        return self._error

    def result(self) -> Any:
        """Wait, then return the operation's outputs (torch returns the tensors)."""
        self.wait()
        return self._result

    def _source_rank(self) -> int | None:
        return self.source_rank

    def get_future(self) -> Future:
        """A ``concurrent.futures.Future`` completed with the result or the failure."""
        fut: Future = Future()

        def done(w: Work) -> None:
            if w._error is not None:
                fut.set_exception(w._error)
            else:
                fut.set_result(w._result)

        with self._lock:
            if not self._finished:
                self._callbacks.append(done)
                return fut
        done(self)
        return fut

    def __repr__(self) -> str:
        state = "done" if self.is_completed() else "pending"
        return f"<Work {self._describe} {state}>"


class _Finished(Work):
    """:meth:`Work.finished`: done and successful from birth, so it needs no lock of its
    own, no event and no callbacks (a message moved as it was posted makes one or two
    of these per call: their making was a tenth of an 8-byte sendrecv)."""

    _finished = True
    _event = None
    _error = None
    _result = None
    _on_wait = None
    _lock = threading.Lock()  # (only get_future takes it, and finds the work finished)

    def __init__(self, describe: object, source_rank: int | None) -> None:
        self._describe = describe  # type: ignore[assignment]
        self.source_rank = source_rank

    def wait(self, timeout: float | None = None) -> bool:
        return True


class P2PWork(Work):
    """Work of a point-to-point operation: completes when the transport handle does."""

    def __init__(self, describe: str, handle: Handle, deadline: float,
                 finish: Callable[[], None] | None = None) -> None:
        super().__init__(describe)
        self._handle = handle
        self._deadline = deadline
        self._finish = finish

    def _settle(self) -> None:
        if self._finished or not self._handle.test():
            return
        err = self._handle.error
        if err is None and self._finish is not None:
            self._finish()
        self.source_rank = self._handle.source
        self._complete(error=err)

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None and hasattr(timeout, "total_seconds"):
            timeout = timeout.total_seconds()
        deadline = self._deadline if timeout is None else min(self._deadline,
                                                              time.monotonic() + timeout)
        if not self._finished:
            try:
                self._handle.wait(deadline)
            except BaseException as exc:
                if self._handle.test() or time.monotonic() >= self._deadline:
                    self._complete(error=exc)
                raise
            self._settle()
        return super().wait(0)

    def is_completed(self) -> bool:
        self._settle()
        return self._finished

    def is_success(self) -> bool:
        self._settle()
        return super().is_success()

    def exception(self) -> BaseException | None:
        self._settle()
        return super().exception()
