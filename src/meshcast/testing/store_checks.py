"""Conformance suite every :class:`~meshcast.rendezvous.Store` must pass (trio's ``check_*`` style).

Each check is a function taking ``make_store``: a zero-argument callable that
returns a *client of one shared store* (a new connection each call for
TCPStore, a new handle on the same file for FileStore, the same object for
HashStore). Checks use fresh, unique keys, count keys relative to what was
there before, close what they open, and restore the store's timeout, so they
may run one after another on a single shared store.

Usage in a test module::

    @pytest.mark.parametrize("check", store_checks.CHECKS)
    def test_conformance(check, make_store):
        check(make_store)

:func:`check_get_blocks_until_set_by_process` additionally needs
``make_store`` to be picklable (e.g. ``functools.partial(FileStore, path)``),
since the writer runs in a spawned process; it is in :data:`PROCESS_CHECKS`,
not :data:`CHECKS`.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import CommTimeout, InvalidUsage
from ..rendezvous.store import PrefixStore, Store

StoreFactory = Callable[[], Store]

#: Seconds a check lets a blocked ``get`` wait before the writer writes.
WRITER_DELAY = 0.1
#: Short timeout the timeout checks put on the store.
SHORT_TIMEOUT = 0.2


def _unique(name: str) -> str:
    return f"check-{name}-{uuid.uuid4().hex[:8]}"


@contextmanager
def _opened(make_store: StoreFactory) -> Iterator[Store]:
    store = make_store()
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _short_timeout(store: Store, timeout: float = SHORT_TIMEOUT) -> Iterator[None]:
    saved = store.timeout
    store.set_timeout(timeout)
    try:
        yield
    finally:
        store.set_timeout(saved)


def _raises(exc_type: type[BaseException], fn: Callable[[], object], what: str) -> BaseException:
    try:
        fn()
    except exc_type as exc:
        return exc
    raise AssertionError(f"{what}: expected {exc_type.__name__}, nothing was raised")


def check_set_get(make_store: StoreFactory) -> None:
    """A value set by one client is read back, byte for byte, by another."""
    key = _unique("set-get")
    payload = bytes(range(256)) * 4
    with _opened(make_store) as a, _opened(make_store) as b:
        a.set(key, payload)
        assert b.get(key) == payload
        a.set(key, b"")
        assert b.get(key) == b"", "an empty value is a value"
        b.set(key, b"replaced")
        assert a.get(key) == b"replaced"


def check_bytes_and_str(make_store: StoreFactory) -> None:
    """str values are stored UTF-8 encoded and come back as bytes; keys may be unicode."""
    key = _unique("bytes-str") + "/ключ"
    with _opened(make_store) as store:
        store.set(key, "héllo")
        value = store.get(key)
        assert isinstance(value, bytes) and value == "héllo".encode(), value
        store.set(key, bytearray(b"\x00\xff"))
        assert store.get(key) == b"\x00\xff"


def check_get_blocks_until_set_by_thread(make_store: StoreFactory) -> None:
    """``get`` of a missing key waits, and returns as soon as another thread sets it."""
    key = _unique("blocks-thread")

    def writer() -> None:
        time.sleep(WRITER_DELAY)
        with _opened(make_store) as other:
            other.set(key, b"late")

    with _opened(make_store) as store:
        thread = threading.Thread(target=writer, daemon=True)
        start = time.monotonic()
        thread.start()
        assert store.get(key) == b"late"
        elapsed = time.monotonic() - start
        thread.join(10)
        assert elapsed >= WRITER_DELAY * 0.8, f"get returned after {elapsed:.3f} s, before the set"


def _set_later(make_store: StoreFactory, key: str, value: bytes, delay: float) -> None:
    time.sleep(delay)
    store = make_store()
    try:
        store.set(key, value)
    finally:
        store.close()


def check_get_blocks_until_set_by_process(make_store: StoreFactory) -> None:
    """``get`` waits for a value another *process* sets (``make_store`` must pickle)."""
    key = _unique("blocks-process")
    ctx = multiprocessing.get_context("spawn")
    with _opened(make_store) as store:
        proc = ctx.Process(target=_set_later, args=(make_store, key, b"from-child", WRITER_DELAY))
        proc.start()
        try:
            assert store.get(key) == b"from-child"
        finally:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
        assert proc.exitcode == 0, f"writer process exited with {proc.exitcode}"


def check_get_timeout(make_store: StoreFactory) -> None:
    """``get`` of a key nobody sets raises CommTimeout naming the key, after the timeout."""
    key = _unique("get-timeout")
    with _opened(make_store) as store, _short_timeout(store):
        start = time.monotonic()
        exc = _raises(CommTimeout, lambda: store.get(key), "get of a missing key")
        elapsed = time.monotonic() - start
        assert isinstance(exc, TimeoutError)
        assert key in str(exc), f"message does not name the key: {exc}"
        assert SHORT_TIMEOUT * 0.8 <= elapsed < SHORT_TIMEOUT + 5, elapsed


def check_add(make_store: StoreFactory) -> None:
    """``add`` creates a counter at 0, returns the new value, and ``get`` reads it as text."""
    key = _unique("add")
    with _opened(make_store) as store:
        assert store.add(key, 5) == 5
        assert store.add(key, -2) == 3
        assert store.add(key, 0) == 3
        assert store.get(key) == b"3"
        store.set(key, b"40")
        assert store.add(key, 2) == 42
        store.set(key, b"not a number")
        _raises(InvalidUsage, lambda: store.add(key, 1), "add on a non-integer value")


def check_add_from_several_clients(make_store: StoreFactory) -> None:
    """Concurrent ``add`` from several clients loses no increment."""
    key = _unique("add-many")
    clients, per_client = 4, 25
    errors: list[BaseException] = []
    results: list[int] = []

    def worker() -> None:
        try:
            with _opened(make_store) as store:
                for _ in range(per_client):
                    results.append(store.add(key, 1))
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    total = clients * per_client
    assert sorted(results) == list(range(1, total + 1)), "add returned duplicate values"
    with _opened(make_store) as store:
        assert store.get(key) == str(total).encode()


def check_compare_set(make_store: StoreFactory) -> None:
    """torch semantics: b"" = set if absent; swap only on a match; always return the value."""
    key = _unique("cas")
    with _opened(make_store) as store:
        # Absent key, non-empty expectation: nothing stored, expected returned.
        assert store.compare_set(key, b"guess", b"x") == b"guess"
        assert not store.check([key])
        # Absent key, empty expectation: set.
        assert store.compare_set(key, b"", b"first") == b"first"
        assert store.get(key) == b"first"
        # Present key, wrong expectation (including "absent"): unchanged, current returned.
        assert store.compare_set(key, b"wrong", b"y") == b"first"
        assert store.compare_set(key, b"", b"y") == b"first"
        # Present key, right expectation: swapped.
        assert store.compare_set(key, "first", "second") == b"second"
        assert store.get(key) == b"second"


def check_compare_set_is_atomic(make_store: StoreFactory) -> None:
    """Of several clients racing to claim a key with compare_set, exactly one wins."""
    key = _unique("cas-race")
    winners: list[bytes] = []
    barrier = threading.Barrier(4)

    def contender(i: int) -> None:
        with _opened(make_store) as store:
            barrier.wait(10)
            me = f"rank{i}".encode()
            if store.compare_set(key, b"", me) == me:
                winners.append(me)

    threads = [threading.Thread(target=contender, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(winners) == 1, f"winners: {winners}"
    with _opened(make_store) as store:
        assert store.get(key) == winners[0]


def check_wait_and_check(make_store: StoreFactory) -> None:
    """``check`` never blocks; ``wait`` returns once every key exists."""
    a, b = _unique("wait-a"), _unique("wait-b")
    with _opened(make_store) as store:
        assert store.check([]) is True
        assert store.check([a]) is False
        store.set(a, b"1")
        assert store.check([a]) is True
        assert store.check([a, b]) is False

        def writer() -> None:
            time.sleep(WRITER_DELAY)
            with _opened(make_store) as other:
                other.set(b, b"2")

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        store.wait([a, b], timeout=30)
        thread.join(10)
        assert store.check([a, b]) is True
        store.wait([])


def check_wait_timeout(make_store: StoreFactory) -> None:
    """``wait`` past its timeout raises CommTimeout naming the missing keys only."""
    present, missing = _unique("present"), _unique("missing")
    with _opened(make_store) as store:
        store.set(present, b"here")
        exc = _raises(CommTimeout, lambda: store.wait([present, missing], timeout=SHORT_TIMEOUT),
                      "wait for a missing key")
        assert missing in str(exc), exc
        assert present not in str(exc), f"names a key that exists: {exc}"
        # The store's own timeout applies when wait() is given none.
        with _short_timeout(store):
            _raises(CommTimeout, lambda: store.wait([missing]), "wait with the store timeout")


def check_delete_key(make_store: StoreFactory) -> None:
    """``delete_key`` reports whether the key existed; a deleted key is gone."""
    key = _unique("delete")
    with _opened(make_store) as store:
        assert store.delete_key(key) is False
        store.set(key, b"v")
        assert store.delete_key(key) is True
        assert store.check([key]) is False
        assert store.delete_key(key) is False
        store.set(key, b"again")
        assert store.get(key) == b"again"


def check_num_keys(make_store: StoreFactory) -> None:
    """``num_keys`` counts keys set, not overwritten, and drops deleted ones."""
    keys = [_unique(f"count{i}") for i in range(3)]
    with _opened(make_store) as store:
        before = store.num_keys()
        for key in keys:
            store.set(key, b"x")
        store.set(keys[0], b"overwritten")
        assert store.num_keys() == before + 3
        store.delete_key(keys[1])
        assert store.num_keys() == before + 2
        store.add(_unique("count-add"), 1)
        assert store.num_keys() == before + 3


def check_prefix_isolation(make_store: StoreFactory) -> None:
    """Two PrefixStores over one store do not see each other's keys."""
    prefix = _unique("prefix")
    with _opened(make_store) as base:
        one, two = PrefixStore(f"{prefix}/1", base), PrefixStore(f"{prefix}/2", base)
        one.set("k", b"one")
        two.set("k", b"two")
        assert one.get("k") == b"one" and two.get("k") == b"two"
        assert base.get(f"{prefix}/1/k") == b"one", "PrefixStore keys are f'{prefix}/{key}'"
        assert one.add("n", 2) == 2 and two.add("n", 5) == 5
        assert one.compare_set("c", b"", b"1") == b"1" and not two.check(["c"])
        assert one.delete_key("k") is True and two.get("k") == b"two"
        with _short_timeout(base):
            _raises(CommTimeout, lambda: two.wait(["c"]), "wait through the other prefix")
        nested = PrefixStore("inner", one)
        nested.set("x", b"deep")
        assert base.get(f"{prefix}/1/inner/x") == b"deep"


def check_bad_arguments(make_store: StoreFactory) -> None:
    """Wrong argument types raise InvalidUsage (a ValueError) before anything is sent."""
    with _opened(make_store) as store:
        _raises(InvalidUsage, lambda: store.set(42, b"v"), "non-str key")  # type: ignore[arg-type]
        _raises(InvalidUsage, lambda: store.set("k", 42), "int value")  # type: ignore[arg-type]
        _raises(InvalidUsage, lambda: store.wait("single-key"), "wait on a bare str")
        _raises(InvalidUsage, lambda: store.add("k", 1.5), "float amount")  # type: ignore[arg-type]
        _raises(InvalidUsage, lambda: store.set_timeout(-1), "negative timeout")
        assert isinstance(InvalidUsage("x"), ValueError)


def check_timeout_property(make_store: StoreFactory) -> None:
    """``timeout`` reads back what ``set_timeout`` stored, in float seconds."""
    with _opened(make_store) as store:
        saved = store.timeout
        assert isinstance(saved, float) and saved > 0
        store.set_timeout(12.5)
        assert store.timeout == 12.5
        store.set_timeout(saved)


#: Checks that need only threads; run them on every store.
CHECKS: tuple[Callable[[StoreFactory], None], ...] = (
    check_set_get,
    check_bytes_and_str,
    check_get_blocks_until_set_by_thread,
    check_get_timeout,
    check_add,
    check_add_from_several_clients,
    check_compare_set,
    check_compare_set_is_atomic,
    check_wait_and_check,
    check_wait_timeout,
    check_delete_key,
    check_num_keys,
    check_prefix_isolation,
    check_bad_arguments,
    check_timeout_property,
)

#: Checks that spawn a process; ``make_store`` must be picklable.
PROCESS_CHECKS: tuple[Callable[[StoreFactory], None], ...] = (
    check_get_blocks_until_set_by_process,
)


def run_all(make_store: StoreFactory, *, processes: bool = False) -> None:
    """Run every check in order; ``processes=True`` adds :data:`PROCESS_CHECKS`.

    Raises:
        AssertionError: the first check that fails, with its name.
    """
    for check in CHECKS + (PROCESS_CHECKS if processes else ()):
        try:
            check(make_store)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__}: {exc}") from exc


__all__ = ["CHECKS", "PROCESS_CHECKS", "StoreFactory", "run_all"] + [
    c.__name__ for c in CHECKS + PROCESS_CHECKS
]
