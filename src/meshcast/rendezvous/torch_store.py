"""TorchStore: a ``torch.distributed.Store`` seen through meshcast's Store contract.

Used under torchrun with ``TORCHELASTIC_USE_AGENT_STORE=True``: the elastic
agent hosts a torch ``TCPStore`` and every worker must be a client of it, so
meshcast talks to that store instead of hosting its own. torch is imported
only when a TorchStore is built, never by ``import meshcast``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ..errors import CommTimeout, InvalidUsage, RendezvousError
from .store import (
    Store,
    Value,
    as_bytes,
    check_amount,
    check_key,
    check_keys,
    missing_keys_timeout,
    parse_counter,
)


def _torch_distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError as exc:
        raise RendezvousError(f"TorchStore: torch.distributed is not importable ({exc}); "
                              "install torch or use a meshcast store") from None
    return dist


def _timedelta(seconds: float) -> timedelta:
    # torch has no "infinite" timeout; a century is the same in practice.
    return timedelta(days=36500) if math.isinf(seconds) else timedelta(seconds=seconds)


class TorchStore(Store):
    """Adapter from a ``torch.distributed.Store`` to a meshcast :class:`Store`.

    The torch store keeps its own timeout; this adapter sets it to the
    adapter's and converts torch's errors: a ``DistStoreError`` whose message
    mentions a timeout becomes :class:`~meshcast.errors.CommTimeout`, any other
    torch error :class:`~meshcast.errors.RendezvousError`.

    Args:
        store: a ``torch.distributed.Store`` (``TCPStore``, ``FileStore``,
            ``HashStore``, ``PrefixStore``...).
        timeout: default timeout in seconds; ``None`` keeps the torch store's.

    Raises:
        InvalidUsage: ``store`` is not a torch store.
        RendezvousError: torch is not importable.

    Example::

        >>> import torch.distributed as dist
        >>> store = TorchStore(dist.TCPStore("127.0.0.1", 29400, is_master=False))
    """

    def __init__(self, store: Any, timeout: float | None = None) -> None:
        dist = _torch_distributed()
        if not isinstance(store, dist.Store):
            raise InvalidUsage(f"TorchStore: 'store' must be a torch.distributed.Store "
                               f"(got {type(store).__name__})")
        self._torch_store = store
        self._dist = dist
        super().__init__(store.timeout.total_seconds() if timeout is None else timeout)
        store.set_timeout(_timedelta(self._timeout))

    @property
    def torch_store(self) -> Any:
        """The wrapped ``torch.distributed.Store``."""
        return self._torch_store

    def set_timeout(self, timeout: float) -> None:
        super().set_timeout(timeout)
        self._torch_store.set_timeout(_timedelta(self._timeout))

    def _call(self, caller: str, keys: Sequence[str], fn: Any, *args: Any,
              timeout: float | None = None) -> Any:
        try:
            return fn(*args)
        except CommTimeout:
            # A meshcast store beneath torch's own wrappers (for_torch under a
            # PrefixStore, as torch's init_process_group builds) timed out: a timeout
            # still, whose message ("not set within") the text test below would miss.
            raise
        except self._dist.DistError as exc:
            if isinstance(exc, self._dist.DistStoreError) and "timeout" in str(exc).lower():
                raise missing_keys_timeout(caller, keys, timeout or self._timeout) from None
            raise RendezvousError(f"{caller}: the torch store failed: {exc}") from None
        except RuntimeError as exc:
            text = str(exc)
            if "timeout" in text.lower() or "timed out" in text.lower():
                raise CommTimeout(f"{caller}: {text}") from None
            raise RendezvousError(f"{caller}: the torch store failed: {text}") from None

    def set(self, key: str, value: Value) -> None:
        check_key(key, "TorchStore.set")
        self._call("TorchStore.set", [key], self._torch_store.set, key,
                   as_bytes(value, "TorchStore.set"))

    def get(self, key: str) -> bytes:
        check_key(key, "TorchStore.get")
        return bytes(self._call("TorchStore.get", [key], self._torch_store.get, key))

    def add(self, key: str, amount: int) -> int:
        check_key(key, "TorchStore.add")
        check_amount(amount, "TorchStore.add")
        # torch's TCPStore drops the connection when asked to add to a key that
        # holds no integer; refuse that here first (racy, but it catches the mistake).
        if self._torch_store.check([key]):
            parse_counter(bytes(self._torch_store.get(key)), key, "TorchStore.add")
        try:
            return int(self._call("TorchStore.add", [key], self._torch_store.add, key, amount))
        except ValueError:  # torch's HashStore: "stoll"
            raise InvalidUsage(f"TorchStore.add: key {key!r} does not hold an integer "
                               "counter") from None

    def compare_set(self, key: str, expected: Value, desired: Value) -> bytes:
        check_key(key, "TorchStore.compare_set")
        expected = as_bytes(expected, "TorchStore.compare_set", "expected")
        desired = as_bytes(desired, "TorchStore.compare_set", "desired")
        return bytes(self._call("TorchStore.compare_set", [key], self._torch_store.compare_set,
                                key, expected, desired))

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        keys = check_keys(keys, "TorchStore.wait")
        timeout = self._wait_timeout(timeout, "TorchStore.wait")
        try:
            self._call("TorchStore.wait", keys, self._torch_store.wait, keys,
                       _timedelta(timeout), timeout=timeout)
        except CommTimeout:
            # Name only the keys that are really missing, as the other stores do.
            missing = [k for k in keys if not self._torch_store.check([k])]
            raise missing_keys_timeout("TorchStore.wait", missing or keys, timeout) from None

    def check(self, keys: Sequence[str]) -> bool:
        keys = check_keys(keys, "TorchStore.check")
        return bool(self._call("TorchStore.check", keys, self._torch_store.check, keys))

    def delete_key(self, key: str) -> bool:
        check_key(key, "TorchStore.delete_key")
        return bool(self._call("TorchStore.delete_key", [key], self._torch_store.delete_key, key))

    def num_keys(self) -> int:
        return int(self._call("TorchStore.num_keys", [], self._torch_store.num_keys))

    def reconnect(self, timeout: float) -> TorchStore | None:
        """A clone of the torch store (torch's ``Store.clone``: a new connection for a
        ``TCPStore``) with ``timeout`` of its own; ``None`` where torch cannot clone it."""
        try:
            clone = self._torch_store.clone()
        except (AttributeError, RuntimeError, self._dist.DistError):
            return None
        return TorchStore(clone, timeout)

    def __repr__(self) -> str:
        return f"TorchStore({type(self._torch_store).__name__})"


def wait_seconds(timeout: Any) -> float | None:
    """torch's wait timeout (timedelta; 0 = none) as meshcast's (seconds or None)."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    return None if seconds <= 0 else float(seconds)


@functools.cache
def _for_torch_class() -> type:
    dist = _torch_distributed()

    class MeshcastStoreForTorch(dist.Store):
        """A meshcast Store seen as a ``torch.distributed.Store`` (the reverse of TorchStore).

        ``prefix`` namespaces every key: torch's own ``PrefixStore`` cannot wrap a
        store written in Python (its ``clone`` is not reachable from C++).
        """

        def __init__(self, store: Any, prefix: str = "") -> None:
            super().__init__()
            self._store = store
            self._prefix = prefix

        def _k(self, key: str) -> str:
            return self._prefix + key

        def set(self, key: str, value: Any) -> None:
            self._store.set(self._k(key), bytes(value))

        def get(self, key: str) -> bytes:
            return self._store.get(self._k(key))

        def add(self, key: str, amount: int) -> int:
            return self._store.add(self._k(key), amount)

        def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
            return self._store.compare_set(self._k(key), bytes(expected), bytes(desired))

        def wait(self, keys: list[str], timeout: Any = None) -> None:
            self._store.wait([self._k(k) for k in keys], wait_seconds(timeout))

        def check(self, keys: list[str]) -> bool:
            return self._store.check([self._k(k) for k in keys])

        def delete_key(self, key: str) -> bool:
            return self._store.delete_key(self._k(key))

        def num_keys(self) -> int:
            return self._store.num_keys()

    return MeshcastStoreForTorch


def for_torch(store: Store, prefix: str = "") -> Any:
    """``store`` (any meshcast Store) as a ``torch.distributed.Store``, keys under ``prefix``."""
    return _for_torch_class()(store, prefix)


__all__ = ["TorchStore", "for_torch", "wait_seconds"]
