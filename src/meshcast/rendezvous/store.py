"""The key-value store contract every rendezvous backend implements, and :class:`PrefixStore`.

A store is the small, slow, reliable side channel a job uses to bring itself
up: ranks publish their addresses, count arrivals and wait for each other
through it. The verbs and their semantics are torch.distributed's
(``set``/``get``/``add``/``compare_set``/``wait``/``check``/``delete_key``/
``num_keys``), so code written against ``torch.distributed.Store`` reads the
same here. Differences from torch, all deliberate:

* timeouts are float seconds (``math.inf`` means "no limit"), never
  ``timedelta``;
* a deadline that passes raises :class:`~meshcast.errors.CommTimeout` naming
  the keys still missing; a broken store raises
  :class:`~meshcast.errors.RendezvousError`;
* ``wait`` refuses a bare string (``wait("key")`` would otherwise wait for
  the keys ``"k"``, ``"e"``, ``"y"``).

Values are bytes; a ``str`` value is stored as its UTF-8 encoding and comes
back as bytes, as in torch. Counters written by :meth:`Store.add` are stored
as ASCII decimal text, so ``get`` on a counter returns e.g. ``b"3"``.

Every implementation must pass :mod:`meshcast.testing.store_checks`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Union

from ..errors import CommTimeout, InvalidUsage, usage

#: What a value may be when it is stored; it always comes back as ``bytes``.
Value = Union[bytes, bytearray, memoryview, str]

#: Largest integer :meth:`Store.add` keeps (torch stores add counters as int64).
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


def as_bytes(value: Value, caller: str, name: str = "value") -> bytes:
    """Return ``value`` as bytes (``str`` is UTF-8 encoded); reject anything else.

    Raises:
        InvalidUsage: ``value`` is not bytes-like or str.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise usage(caller, f"{name!r} must be bytes or str (got {type(value).__name__})")


def check_key(key: str, caller: str) -> str:
    """Validate one key: keys are ``str``, as in torch.

    Raises:
        InvalidUsage: ``key`` is not a str.
    """
    if not isinstance(key, str):
        raise usage(caller, f"'key' must be a str (got {type(key).__name__})")
    return key


def check_keys(keys: Sequence[str], caller: str) -> list[str]:
    """Validate a list of keys for ``wait``/``check``.

    Raises:
        InvalidUsage: ``keys`` is a bare string or holds a non-str.
    """
    if isinstance(keys, (str, bytes)):
        raise usage(caller, f"'keys' must be a list of str, not a single {type(keys).__name__} "
                            f"(did you mean [{keys!r}]?)")
    try:
        keys = list(keys)
    except TypeError:
        raise usage(caller, f"'keys' must be a list of str (got {type(keys).__name__})") from None
    for key in keys:
        check_key(key, caller)
    return keys


def check_timeout(timeout: float, caller: str, name: str = "timeout") -> float:
    """Validate a relative timeout in seconds (``math.inf`` = no limit).

    Raises:
        InvalidUsage: ``timeout`` is not a positive number.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise usage(caller, f"{name!r} must be a number of seconds (got {type(timeout).__name__}); "
                            "meshcast timeouts are float seconds, not timedelta")
    timeout = float(timeout)
    if math.isnan(timeout) or timeout <= 0:
        raise usage(caller, f"{name!r} must be > 0 seconds (got {timeout})")
    return timeout


def parse_counter(raw: bytes, key: str, caller: str) -> int:
    """Read the integer an ``add`` counter holds.

    Raises:
        InvalidUsage: the key holds something that is not an ASCII integer.
    """
    try:
        return int(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        shown = raw[:40]
        raise usage(caller, f"key {key!r} holds {shown!r}, not an integer counter") from None


def checked_sum(current: int, amount: int, key: str, caller: str) -> int:
    """``current + amount``, refused if it leaves int64 (torch's counter type).

    Raises:
        InvalidUsage: the sum overflows int64.
    """
    total = current + amount
    if not INT64_MIN <= total <= INT64_MAX:
        raise usage(caller, f"counter {key!r} would overflow int64 ({current} + {amount})")
    return total


def check_amount(amount: int, caller: str) -> int:
    """Validate the ``amount`` argument of ``add``.

    Raises:
        InvalidUsage: ``amount`` is not an int within int64.
    """
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise usage(caller, f"'amount' must be an int (got {type(amount).__name__})")
    if not INT64_MIN <= amount <= INT64_MAX:
        raise usage(caller, f"'amount' must fit in int64 (got {amount})")
    return amount


def missing_keys_timeout(caller: str, missing: Sequence[str], timeout: float) -> CommTimeout:
    """Build the ``CommTimeout`` of a ``get``/``wait`` whose keys never appeared."""
    shown = ", ".join(repr(k) for k in list(missing)[:8])
    more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
    noun = "key" if len(missing) == 1 else "keys"
    return CommTimeout(f"{caller}: {noun} {shown}{more} not set within {timeout:g} s")


class Store(ABC):
    """A key-value store shared by the ranks of a job (torch's ``Store`` verbs).

    Implementations: :class:`~meshcast.rendezvous.HashStore` (threads of one
    process), :class:`~meshcast.rendezvous.FileStore` (processes sharing a
    file system), :class:`~meshcast.rendezvous.TCPStore` (any processes that
    can reach a TCP port and hold the job secret),
    :class:`~meshcast.rendezvous.TorchStore` (adapts a ``torch.distributed``
    store) and :class:`PrefixStore` (a namespace inside another store).

    Contract (checked by :mod:`meshcast.testing.store_checks`):

    * ``get`` and ``wait`` block until the keys exist or the timeout passes,
      then raise :class:`~meshcast.errors.CommTimeout` naming the missing keys;
    * all verbs are safe to call from several threads at once;
    * a store that can no longer reach its backing state raises
      :class:`~meshcast.errors.RendezvousError`;
    * bad arguments raise :class:`~meshcast.errors.InvalidUsage` before
      anything is sent.

    Args:
        timeout: default timeout in seconds of ``get`` and ``wait``.
    """

    def __init__(self, timeout: float = 300.0) -> None:
        self._timeout = check_timeout(timeout, f"{type(self).__name__}()")

    # -- the verbs ---------------------------------------------------------

    @abstractmethod
    def set(self, key: str, value: Value) -> None:
        """Store ``value`` under ``key``, replacing any previous value.

        Args:
            key: the key.
            value: bytes, or a str that is stored UTF-8 encoded.

        Raises:
            InvalidUsage: bad key or value (e.g. larger than the store accepts).
            RendezvousError: the store is unreachable.
        """

    @abstractmethod
    def get(self, key: str) -> bytes:
        """Return the value of ``key``, waiting until some rank sets it.

        Args:
            key: the key.

        Returns:
            The value as bytes.

        Raises:
            CommTimeout: ``key`` was not set within :attr:`timeout` seconds.
            RendezvousError: the store is unreachable.
        """

    @abstractmethod
    def add(self, key: str, amount: int) -> int:
        """Atomically add ``amount`` to the integer counter ``key`` (created at 0).

        Args:
            key: the counter's key.
            amount: the increment (may be negative or zero).

        Returns:
            The counter's new value.

        Raises:
            InvalidUsage: ``key`` holds a value that is not an integer.
            RendezvousError: the store is unreachable.
        """

    @abstractmethod
    def compare_set(self, key: str, expected: Value, desired: Value) -> bytes:
        """Atomically replace ``key``'s value by ``desired`` if it equals ``expected``.

        torch semantics: an empty ``expected`` means "set if absent". If the
        key is absent and ``expected`` is not empty nothing is stored and
        ``expected`` is returned.

        Args:
            key: the key.
            expected: the value the caller believes ``key`` holds (``b""``: absent).
            desired: the value to store if that belief is right.

        Returns:
            The value of ``key`` after the call (``expected`` if the key is absent
            and ``expected`` was not empty).

        Raises:
            RendezvousError: the store is unreachable.
        """

    @abstractmethod
    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        """Block until every key in ``keys`` exists.

        Args:
            keys: a list of keys.
            timeout: seconds to wait; ``None`` uses :attr:`timeout`.

        Raises:
            CommTimeout: some keys were still missing when the timeout passed
                (the message names them).
            RendezvousError: the store is unreachable.
        """

    @abstractmethod
    def check(self, keys: Sequence[str]) -> bool:
        """Return whether every key in ``keys`` exists, without waiting.

        Raises:
            RendezvousError: the store is unreachable.
        """

    @abstractmethod
    def delete_key(self, key: str) -> bool:
        """Delete ``key``.

        Returns:
            ``True`` if the key existed.

        Raises:
            RendezvousError: the store is unreachable.
        """

    @abstractmethod
    def num_keys(self) -> int:
        """Return the number of keys in the whole store (across all prefixes).

        Raises:
            RendezvousError: the store is unreachable.
        """

    # -- timeout and lifetime ---------------------------------------------

    @property
    def timeout(self) -> float:
        """Default timeout in seconds of :meth:`get` and :meth:`wait`."""
        return self._timeout

    def set_timeout(self, timeout: float) -> None:
        """Change the default timeout of :meth:`get` and :meth:`wait`.

        Args:
            timeout: seconds (> 0; ``math.inf`` for no limit).

        Raises:
            InvalidUsage: ``timeout`` is not a positive number.
        """
        self._timeout = check_timeout(timeout, f"{type(self).__name__}.set_timeout")

    def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release the store's resources. Idempotent; the default does nothing."""

    def reconnect(self, timeout: float) -> Store | None:
        """A new handle on the same keys with a connection and ``timeout`` of its own.

        A thread that talks to the store on a schedule (heartbeats) uses one, so
        that it never queues behind another thread's long ``wait`` and its own
        requests give up after ``timeout`` seconds when the store stops answering.
        The default returns ``None``: this store has no connection to duplicate
        (its verbs are safe from several threads as they are).
        """
        return None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _wait_timeout(self, timeout: float | None, caller: str) -> float:
        """The timeout a ``wait`` call uses: its argument, else the store's."""
        if timeout is None:
            return self._timeout
        return check_timeout(timeout, caller)


class PrefixStore(Store):
    """A namespace inside another store: every key becomes ``f"{prefix}/{key}"``.

    Gives each process group (or each restart generation) its own key space in
    one shared store. Like torch's, :meth:`num_keys` counts the keys of the
    whole underlying store, and :meth:`close` leaves the underlying store open
    (it is usually shared).

    Args:
        prefix: the namespace; must not be empty.
        store: the store to write into (may itself be a ``PrefixStore``).

    Raises:
        InvalidUsage: ``prefix`` is empty or ``store`` is not a :class:`Store`.

    Example::

        >>> group_store = PrefixStore("group/1", store)
        >>> group_store.set("rank/0", b"addr")   # stored as "group/1/rank/0"
    """

    def __init__(self, prefix: str, store: Store) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise InvalidUsage("PrefixStore: 'prefix' must be a non-empty str")
        if not isinstance(store, Store):
            raise InvalidUsage(f"PrefixStore: 'store' must be a meshcast Store "
                               f"(got {type(store).__name__})")
        # The underlying store owns the timeout; this object only forwards it.
        self._prefix = prefix
        self._store = store

    @property
    def prefix(self) -> str:
        """The namespace this store writes into."""
        return self._prefix

    @property
    def underlying_store(self) -> Store:
        """The store the prefixed keys live in."""
        return self._store

    def _key(self, key: str, caller: str) -> str:
        return f"{self._prefix}/{check_key(key, caller)}"

    def set(self, key: str, value: Value) -> None:
        self._store.set(self._key(key, "PrefixStore.set"), value)

    def get(self, key: str) -> bytes:
        return self._store.get(self._key(key, "PrefixStore.get"))

    def add(self, key: str, amount: int) -> int:
        return self._store.add(self._key(key, "PrefixStore.add"), amount)

    def compare_set(self, key: str, expected: Value, desired: Value) -> bytes:
        return self._store.compare_set(self._key(key, "PrefixStore.compare_set"), expected, desired)

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        keys = check_keys(keys, "PrefixStore.wait")
        self._store.wait([self._key(k, "PrefixStore.wait") for k in keys], timeout)

    def check(self, keys: Sequence[str]) -> bool:
        keys = check_keys(keys, "PrefixStore.check")
        return self._store.check([self._key(k, "PrefixStore.check") for k in keys])

    def delete_key(self, key: str) -> bool:
        return self._store.delete_key(self._key(key, "PrefixStore.delete_key"))

    def num_keys(self) -> int:
        return self._store.num_keys()

    @property
    def timeout(self) -> float:
        """The underlying store's timeout."""
        return self._store.timeout

    def set_timeout(self, timeout: float) -> None:
        """Set the underlying store's timeout (it is shared by every prefix)."""
        self._store.set_timeout(timeout)

    def reconnect(self, timeout: float) -> Store | None:
        """The same prefix on a new handle of the underlying store (see :meth:`Store.reconnect`)."""
        inner = self._store.reconnect(timeout)
        return None if inner is None else PrefixStore(self._prefix, inner)

    def __repr__(self) -> str:
        return f"PrefixStore({self._prefix!r}, {self._store!r})"


__all__ = ["PrefixStore", "Store", "Value"]
