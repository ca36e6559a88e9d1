"""HashStore: an in-process store for threads of one process (tests, threaded worlds)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

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


class HashStore(Store):
    """A thread-safe dictionary with torch's store verbs.

    Waiters sleep on one condition variable that every write notifies, so a
    ``get`` wakes as soon as its key is set and costs nothing while it waits.

    Args:
        timeout: default timeout in seconds of ``get`` and ``wait``.

    Example::

        >>> store = HashStore()
        >>> store.set("x", "1")
        >>> store.get("x")
        b'1'
    """

    def __init__(self, timeout: float = 300.0) -> None:
        super().__init__(timeout)
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()

    def set(self, key: str, value: Value) -> None:
        check_key(key, "HashStore.set")
        value = as_bytes(value, "HashStore.set")
        with self._cond:
            self._data[key] = value
            self._cond.notify_all()

    def get(self, key: str) -> bytes:
        check_key(key, "HashStore.get")
        self._wait_for([key], self._timeout, "HashStore.get")
        with self._cond:
            return self._data[key]

    def add(self, key: str, amount: int) -> int:
        check_key(key, "HashStore.add")
        check_amount(amount, "HashStore.add")
        with self._cond:
            current = self._data.get(key)
            value = 0 if current is None else parse_counter(current, key, "HashStore.add")
            value = checked_sum(value, amount, key, "HashStore.add")
            self._data[key] = str(value).encode("ascii")
            self._cond.notify_all()
            return value

    def compare_set(self, key: str, expected: Value, desired: Value) -> bytes:
        check_key(key, "HashStore.compare_set")
        expected = as_bytes(expected, "HashStore.compare_set", "expected")
        desired = as_bytes(desired, "HashStore.compare_set", "desired")
        with self._cond:
            current = self._data.get(key)
            if current is None:
                if expected:
                    return expected
            elif current != expected:
                return current
            self._data[key] = desired
            self._cond.notify_all()
            return desired

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        keys = check_keys(keys, "HashStore.wait")
        self._wait_for(keys, self._wait_timeout(timeout, "HashStore.wait"), "HashStore.wait")

    def check(self, keys: Sequence[str]) -> bool:
        keys = check_keys(keys, "HashStore.check")
        with self._cond:
            return all(k in self._data for k in keys)

    def delete_key(self, key: str) -> bool:
        check_key(key, "HashStore.delete_key")
        with self._cond:
            return self._data.pop(key, None) is not None

    def num_keys(self) -> int:
        with self._cond:
            return len(self._data)

    def _wait_for(self, keys: list[str], timeout: float, caller: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                missing = [k for k in keys if k not in self._data]
                if not missing:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise missing_keys_timeout(caller, missing, timeout)
                # Condition.wait caps at threading.TIMEOUT_MAX; inf means "until set".
                self._cond.wait(min(remaining, threading.TIMEOUT_MAX))

    def __repr__(self) -> str:
        return f"HashStore(timeout={self._timeout:g})"


__all__ = ["HashStore"]
