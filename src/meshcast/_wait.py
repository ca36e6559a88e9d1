"""The one waiting primitive, plus the low-level pieces it needs (futex, fence, liveness).

Theory of operation
-------------------
Every blocking wait in meshcast goes through :func:`wait_until`. It knows the
deadline, checks that the peers being waited on are alive, checks the
group's abort flag, and records what it is stuck on so a timeout can say so.
It waits in three stages, because this library must behave on machines with
more ranks than cores (tests run 8 ranks on 2 cores):

1. spin on the condition for ``MESHCAST_SPIN_US`` (the fast path when the
   peer is running on another core);
2. ``os.sched_yield()`` for a while (hands the core to a peer that shares it;
   releases the GIL on 3.11.1+);
3. block in the kernel: ``futex(FUTEX_WAIT)`` on a 32-bit shared word that the
   signalling side bumps (or a ``threading.Event`` for in-process
   completions), with a timeout no longer than the liveness interval so a
   dead peer is noticed within ``MESHCAST_LIVENESS_S`` seconds.

Memory ordering (the only place this assumption is written down): meshcast
targets x86-64 and other TSO machines, where a store of the data followed by
a store of the flag becomes visible to other cores in that order, and loads
are not reordered with other loads. So a writer publishes by storing the data
and then the flag, and a reader that sees the flag sees the data. The one
pattern TSO does *not* order is a store followed by a load of another address
(Dekker): "I set my sleeping flag, then re-check the condition" against "I
bump the word, then check the sleeping flags". Both sides call :func:`fence`
between the store and the load. :func:`fence` is a locked instruction (an
uncontended lock acquire/release), which is a full barrier on x86.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from . import config
from .errors import CommTimeout, PeerGoneError

_FUTEX_WAIT = 0
_FUTEX_WAKE = 1
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine())

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def futex_wait(address: int, expected: int, timeout: float) -> None:
    """Sleep while the 32-bit word at ``address`` equals ``expected``, at most ``timeout`` s.

    Returns on a wake, a value change, a signal or the timeout; callers
    always re-check their condition (futexes wake spuriously).
    """
    if _SYS_FUTEX is None:  # no futex on this platform: a short sleep keeps waits correct
        time.sleep(min(timeout, 0.0005))
        return
    timeout = max(timeout, 0.0)
    ts = _Timespec(int(timeout), int((timeout % 1.0) * 1e9))
    # Not FUTEX_PRIVATE_FLAG: the word lives in memory shared between processes.
    _syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAIT,
             ctypes.c_uint32(expected & 0xFFFFFFFF), ctypes.byref(ts), None, 0)


def futex_wake(address: int, count: int = 1 << 30) -> None:
    """Wake up to ``count`` waiters sleeping on the 32-bit word at ``address``."""
    if _SYS_FUTEX is None:
        return
    _syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, count, None, None, 0)


_fence_lock = threading.Lock()


def fence() -> None:
    """Full memory barrier (see the module docstring for why and where it is needed)."""
    _fence_lock.acquire()
    _fence_lock.release()


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # The state letter follows the parenthesised command name, which may hold spaces.
    state = stat[stat.rfind(b")") + 2: stat.rfind(b")") + 3]
    return state not in (b"Z", b"X", b"x")


class PeerCheck(Protocol):
    """What :func:`wait_until` calls every liveness interval: raise if a waited-on rank is gone.

    :class:`Liveness` is the plain one; the shm transport passes its own so that
    what a dead rank sent before it died is delivered before its waits fail.
    """

    def check(self, ranks: Iterable[int], what: str) -> None: ...


class Liveness:
    """Knows the pid of every global rank on this host and says which are gone."""

    def __init__(self, pids: dict[int, int]) -> None:
        self.pids = dict(pids)  # global rank -> pid (only ranks on this host)

    def dead(self, ranks: Iterable[int]) -> list[int]:
        """The ranks of ``ranks`` whose process is gone (ranks on other hosts never are)."""
        return [r for r in ranks if (pid := self.pids.get(r)) is not None and not pid_alive(pid)]

    def check(self, ranks: Iterable[int], what: str) -> None:
        """Raise PeerGoneError naming the first rank in ``ranks`` whose process is gone."""
        for rank in ranks:
            pid = self.pids.get(rank)
            if pid is not None and not pid_alive(pid):
                raise PeerGoneError(
                    f"{what}: rank {rank} (pid {pid}) exited while this rank was waiting on it",
                    peer=rank,
                )


class WaitSpec:
    """Settings shared by every wait of a process (read once from the environment)."""

    def __init__(self) -> None:
        self.spin_s = config.get("MESHCAST_SPIN_US") * 1e-6
        self.yield_s = 0.002
        self.liveness_s = config.get("MESHCAST_LIVENESS_S")
        self.oversubscribed = False  # more ranks on this machine than cores (share_cores)

    def share_cores(self, local_ranks: int, cores: int | None = None) -> None:
        """Stop spinning when this host runs more ranks than ``cores`` (default: the cores
        this process may use; the job passes the fewest any rank of the machine may use,
        so that the verdict is the same on every rank).

        A spinning waiter then holds the very core the rank it waits for needs:
        at 4 ranks on 2 cores an 8-byte all_reduce took 73 us with the default
        50 us spin and 25 us without. An explicit MESHCAST_SPIN_US still wins.
        """
        if cores is None:
            cores = usable_cores()
        configured = config.get("MESHCAST_SPIN_US") * 1e-6
        explicit = bool(os.environ.get("MESHCAST_SPIN_US"))
        self.oversubscribed = local_ranks > cores
        self.spin_s = 0.0 if self.oversubscribed and not explicit else configured


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_spec: WaitSpec | None = None


def spec() -> WaitSpec:
    global _spec
    if _spec is None:
        _spec = WaitSpec()
    return _spec


def wait_until(
    ready: Callable[[], bool],
    *,
    deadline: float,
    describe: Callable[[], str],
    pending: Callable[[], Iterable[int]] = tuple,
    liveness: PeerCheck | None = None,
    block: Callable[[float], None] | None = None,
    check_abort: Callable[[], None] | None = None,
    yield_s: float | None = None,
) -> None:
    """Return once ``ready()`` is true; raise instead of hanging.

    Args:
        ready: the condition; called often, must be cheap.
        deadline: absolute ``time.monotonic()`` by which ``ready`` must hold.
        describe: builds the "what are we waiting for" text for errors.
        pending: global ranks not yet heard from (for liveness and the timeout message).
        liveness: checks that those ranks' processes still exist (a :class:`Liveness`
            or another :class:`PeerCheck`).
        block: ``block(timeout)`` sleeps until something may have changed, at
            most ``timeout`` seconds (a futex wait or an Event wait). Without
            it, the third stage sleeps briefly instead.
        check_abort: raises if the group was aborted by another rank.
        yield_s: how long stage 2 yields before stage 3 (default: the process's
            setting). Engines that only progress while polled (MPI's non-blocking
            collectives advance a step per ``MPI_Test``) keep yielding longer: a
            sleeping waiter would stall its own transfer.

    Raises:
        CommTimeout: the deadline passed (names the ranks not heard from).
        PeerGoneError: a rank being waited on exited.
        GroupAbortedError / MismatchError: from ``check_abort``.
    """
    if ready():
        return
    s = spec()
    start = time.monotonic()
    # Stage 1: spin. Python's own overhead makes each check ~100 ns.
    spin_until = start + s.spin_s
    while time.monotonic() < spin_until:
        if ready():
            return
    # Stage 2: yield the core to whoever shares it.
    yield_until = start + s.spin_s + (s.yield_s if yield_s is None else yield_s)
    next_check = start + s.liveness_s
    while True:
        now = time.monotonic()
        if now >= yield_until:
            break
        os.sched_yield()
        if ready():
            return
    # Stage 3: block, waking at least every liveness interval.
    while True:
        if ready():
            return
        now = time.monotonic()
        if check_abort is not None:
            check_abort()
        if now >= next_check:
            if liveness is not None:
                liveness.check(pending(), describe())
            next_check = now + s.liveness_s
        if now >= deadline:
            waiting_on = sorted(pending())
            who = f"; not heard from rank(s) {waiting_on}" if waiting_on else ""
            raise CommTimeout(f"{describe()}: timed out{who}", waiting_on=waiting_on)
        timeout = min(deadline, next_check) - now
        if block is not None:
            block(min(timeout, 0.05))
        else:
            time.sleep(min(timeout, 0.0002))
