"""``Work``: the handle of a submitted operation, as in torch.distributed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from .errors import CommTimeout


class Work:
    """Handle of an operation submitted with ``async_op=True`` (or a point-to-point op).

    ``wait()`` blocks until the operation finished and re-raises its failure;
    ``is_completed()`` polls; ``exception()`` returns the failure (or None).
    """

    def __init__(self, describe: str, *, on_wait: Callable[[float | None], None] | None = None
                 ) -> None:
        self._describe = describe
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._result: Any = None
        self._on_wait = on_wait
        self._callbacks: list[Callable[[Work], None]] = []
        self._lock = threading.Lock()
        self.source_rank: int | None = None

    # -------------------------------------------------------------- completion

    def _complete(self, result: Any = None, error: BaseException | None = None) -> None:
        with self._lock:
            self._result = result
            self._error = error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

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
        if self._on_wait is not None and not self._done.is_set():
            self._on_wait(timeout)
        if not self._done.wait(timeout):
            raise CommTimeout(f"{self._describe}: not completed within {timeout:.3f}s of wait()")
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        """True once the operation finished, successfully or not."""
        return self._done.is_set()

    def is_success(self) -> bool:
        """True once the operation finished without error."""
        return self._done.is_set() and self._error is None

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
            if not self._done.is_set():
                self._callbacks.append(done)
                return fut
        done(self)
        return fut

    def __repr__(self) -> str:
        state = "done" if self.is_completed() else "pending"
        return f"<Work {self._describe} {state}>"


def completed(describe: str, result: Any = None) -> Work:
    """A Work that is already done (e.g. an operation on a 1-rank group)."""
    w = Work(describe)
    w._complete(result)
    return w


def deadline_after(timeout: float) -> float:
    return time.monotonic() + timeout
