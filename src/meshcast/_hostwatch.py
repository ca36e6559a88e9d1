"""Liveness across hosts: per-host heartbeats and the job's failure notice, through the store.

Theory of operation
-------------------
Inside a host, a dead peer is found by its pid (:class:`meshcast._wait.Liveness`)
and a failure reaches the host's other ranks through the group's abort word in
shared memory. Neither crosses hosts, and the engines between hosts do not make
up for it: Gloo and MPI notice a lost peer only when its TCP connections are
reset (a killed process's kernel resets them; a pulled cable resets nothing,
so a wait on a host whose link is down lasts the whole timeout), and under
Hydra a dead rank makes the launcher kill the job. So every rank of a job that
spans hosts runs a :class:`HostWatch`: a daemon thread that, every
``MESHCAST_LIVENESS_S`` seconds (the *interval*),

1. adds 1 to its host's heartbeat counter in the job's store. Every rank of
   the host bumps the same counter, so a host counts as alive while any of
   its ranks is (a rank that died on an alive host is its host's business:
   the pid checks there find it, and the notice below carries it across);
2. reads the job's *failure notice*: the first rank, or ``meshcast run``
   launcher, that sees a failure which other hosts cannot see (a rank of its
   host died; the engine between hosts failed) writes it there with
   ``compare_set``, so the first notice wins, and every waiting rank of every
   host raises it at its next check;
3. while the job waits between hosts (a wait started, or :meth:`HostWatch.check`
   was called, in the last :data:`ASKED_S` seconds), reads the other hosts'
   counters, one request per host. A counter that has
   not moved for :func:`lost_after` seconds (10 intervals, at least 1 s) means
   that host is lost: its ranks were killed or hang, or its link is down.

The thread has a connection of its own to the store
(:meth:`meshcast.rendezvous.Store.reconnect`) whose every request gives up
after ``lost_after`` seconds, so a store that stops answering is noticed in the
same time: its host (that of rank 0, which is where every launch style puts
the store) is then lost as seen from here, or this host is cut off.

Waits do not talk to the store: :meth:`HostWatch.check` only reads what the
thread found, and raises :class:`~meshcast.errors.PeerGoneError` naming the
host and its ranks. It is called every liveness interval by the waits between
hosts (:meth:`meshcast.transport.interhost.HostComm.wait`) and, through
:class:`HostLiveness`, by the shared-memory waits of a cross-host group's
host-local phases, so the ranks that wait on their host's leader learn of a
lost host as soon as the leader does.

A rank that leaves through ``destroy_process_group`` counts itself out of its
host (``left`` counter): a host all of whose ranks left is finished, not lost.

Cost: every rank holds a second connection to the store and, per interval,
sends it two requests (heartbeat, notice), plus one per other host while the
job waits between hosts. The store is one server (node 0's launcher, rank 0
or torchrun's agent): at the default 0.25 s that is a few thousand requests a
second for a job of 64 ranks on 8 hosts. Larger jobs want a longer
``MESHCAST_LIVENESS_S``; a store verb that reads many counters at once would
make the reads one request.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from . import _wait, config
from .errors import MeshcastError, PeerGoneError

#: Every key of this module lives under this prefix of the job's store.
PREFIX = "meshcast/hostwatch"
#: The job's failure notice (JSON: text, rank, host, by).
NOTICE_KEY = f"{PREFIX}/notice"
#: How long after the last wait between hosts (or :meth:`HostWatch.check`) the thread
#: keeps reading the other hosts' counters: a job in the middle of its collectives
#: keeps asking, an idle one costs the store one heartbeat per rank and interval.
ASKED_S = 30.0


def interval() -> float:
    """Seconds between heartbeats: ``MESHCAST_LIVENESS_S``, at least 50 ms (every rank
    sends one to two requests to the one store per heartbeat)."""
    return max(float(config.get("MESHCAST_LIVENESS_S")), 0.05)


def lost_after() -> float:
    """Seconds without a heartbeat (or an answer from the store) after which a host is lost.

    Ten intervals, so that a rank's thread starved of its core for a while is not
    taken for dead, and never under a second.
    """
    return max(10 * interval(), 1.0)


def hostname(host_id: str) -> str:
    """The host name part of a ``_world.host_id()``."""
    return host_id.rsplit("/", 1)[0]


def _ranks_text(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def publish_notice(store: Any, text: str, *, rank: int | None, host: str, by: str) -> bool:
    """Write the job's failure notice, unless one is there already (the first one wins).

    Args:
        store: the job's store (a connection that may fail: errors are swallowed,
            since a notice is published on the way out of a failure).
        text: what happened, a sentence that names the rank(s) and host.
        rank: the global rank that is gone or failed, if one is.
        host: the host it was on.
        by: who publishes (``"rank 2"``, ``"the launcher on mcf-h1"``), for the reader.

    Returns:
        True if this call's notice is the job's notice.
    """
    data = json.dumps({"text": text, "rank": rank, "host": host, "by": by}).encode()
    try:
        return store.compare_set(NOTICE_KEY, b"", data) == data
    except (MeshcastError, OSError, ValueError):
        return False


class HostWatch:
    """The heartbeat thread of one rank of a job whose ranks run on several hosts.

    Args:
        store: the job's store; the thread uses ``store.reconnect(lost_after())``,
            or ``store`` itself when it has no connection to duplicate.
        rank: this process's global rank.
        host_of: the host id of every global rank (``_world.host_id()``).

    Call :meth:`start` once the job's ranks are known, :meth:`close` on the way
    out (``left=True`` when leaving on purpose).
    """

    def __init__(self, store: Any, rank: int, host_of: Sequence[str]) -> None:
        hosts = list(dict.fromkeys(host_of))
        self.rank = rank
        self.names = [hostname(h) for h in hosts]
        self.host_of = [hosts.index(h) for h in host_of]  # global rank -> host index
        self.ranks_of = [[r for r, h in enumerate(self.host_of) if h == i]
                         for i in range(len(hosts))]
        self.me = self.host_of[rank]
        self.interval = interval()
        self.lost_after = lost_after()
        self._store = store
        self._conn: Any = None
        self._conn_lock = threading.Lock()  # publish() from a failing thread shares it
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self.asked = 0.0  # when a wait last asked (waits between hosts set it as they start)
        self._contact = time.monotonic()  # last answer from the store
        self._seen: dict[int, tuple[int, float]] = {}  # host -> (counter, when it moved)
        self._lost: dict[int, str] = {}  # host -> why it is lost
        self._cut_off: str | None = None  # the store stopped answering
        self._notice: dict | None = None
        self._published = False
        self._hit = False  # a wait of this rank ended on what the watch found
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"meshcast-hostwatch rank {rank}")

    # -- what waits call ----------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def check(self, ranks: Iterable[int] | None, what: str) -> None:
        """Raise if the job's failure notice is out, or a host of ``ranks`` is lost.

        Args:
            ranks: the global ranks being waited on (their hosts matter); None: any.
            what: the wait, for the message.

        Raises:
            PeerGoneError: names the lost host and its ranks, or repeats the notice.
        """
        self.asked = time.monotonic()
        reason = self.reason(ranks)
        if reason is not None:
            self._hit = True
            text, peer = reason
            raise PeerGoneError(f"{what}: {text}", peer=peer)

    def reason(self, ranks: Iterable[int] | None) -> tuple[str, int | None] | None:
        """Why a wait on ``ranks`` cannot finish, as far as known now: ``(text, rank)``."""
        notice = self._notice
        if notice is not None and not self._published:
            return (f"{notice['text']} (reported by {notice['by']})", notice.get("rank"))
        if self._cut_off is None and not self._stop.is_set():
            # The thread may be stuck in a request rather than failing it: some store
            # clients (torch's TCPStore under torchrun) never time out an ``add`` on a
            # link that is down. Judged from here, silence is silence.
            silent = time.monotonic() - self._contact
            if silent > self.lost_after + self.interval:
                self._declare_cut_off(silent, "no answer to the heartbeats")
        if self._cut_off is not None:
            return self._cut_off, self.ranks_of[self.host_of[0]][0]
        if self._lost:
            hosts = (set(self._lost) if ranks is None
                     else {self.host_of[r] for r in ranks if 0 <= r < len(self.host_of)})
            for h in sorted(hosts & set(self._lost)):
                return self._lost[h], self.ranks_of[h][0]
        return None

    def explain(self, ranks: Iterable[int] | None, within: float) -> tuple[str, int | None] | None:
        """Wait up to ``within`` seconds for a :meth:`reason` (an engine just failed and
        the watch may be about to say why); ``None`` if none came."""
        ranks = None if ranks is None else list(ranks)
        deadline = time.monotonic() + within
        with self._changed:
            while True:
                self.asked = time.monotonic()
                found = self.reason(ranks)
                left = deadline - time.monotonic()
                if found is not None:
                    self._hit = True
                    return found
                if left <= 0:
                    return None
                self._changed.wait(min(left, self.interval))

    def publish(self, text: str, rank: int | None) -> None:
        """Tell every host about a failure they cannot see (see :func:`publish_notice`).

        Takes at most about ``lost_after`` seconds, whatever the store does.
        """
        if self._published or self._notice is not None or self._cut_off is not None:
            return  # one notice per job; a cut-off host cannot reach the store anyway
        if not self._conn_lock.acquire(timeout=self.lost_after):
            return  # the thread is stuck in a request: the store is not answering
        try:
            conn = self._connection()
            self._published = publish_notice(conn, text, rank=rank,
                                             host=self.names[self.me], by=f"rank {self.rank}")
        except (MeshcastError, OSError):
            pass
        finally:
            self._conn_lock.release()

    @property
    def failing(self) -> bool:
        """The job is failing as seen from here: a wait of this rank ended on a lost host,
        this host is cut off, or a failure notice is out (published by this rank or
        another). A host lost while nothing here waited on it does not count: its ranks
        may just have finished (exited without destroy_process_group) while this rank
        worked with the others."""
        return bool(self._hit or self._cut_off or self._notice or self._published)

    @property
    def cut_off(self) -> bool:
        """The store has stopped answering this host (talking to it would only block)."""
        return self._cut_off is not None

    def close(self, left: bool = False) -> None:
        """Stop the thread; ``left``: this rank leaves the job on purpose (counted out).

        Bounded by ``lost_after`` seconds even when the store does not answer.
        """
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.lost_after)  # a round ends within that
        if not self._conn_lock.acquire(timeout=self.lost_after):
            return  # the thread is stuck in a request: it dies with the process
        try:
            conn, self._conn = self._conn, None
            # Only a rank leaving on purpose counts out: a failing one is not finished.
            if left and not self.failing and conn is not None:
                try:
                    conn.add(f"{PREFIX}/left/{self.me}", 1)
                except (MeshcastError, OSError):
                    pass  # the store is gone already: nobody is left to wait on us
            if conn is not None and conn is not self._store:
                try:
                    conn.close()
                except (MeshcastError, OSError):
                    pass
        finally:
            self._conn_lock.release()

    # -- the thread ------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._round()
                self._contact = time.monotonic()
            except (MeshcastError, OSError, ValueError) as exc:
                self._store_trouble(exc)
            with self._changed:
                self._changed.notify_all()
            self._stop.wait(max(self.interval - (time.monotonic() - started), 0.0))

    def _connection(self) -> Any:
        if self._conn is None:
            reconnect = getattr(self._store, "reconnect", None)
            conn = reconnect(self.lost_after) if reconnect is not None else None
            self._conn = conn if conn is not None else self._store
        return self._conn

    def _round(self) -> None:
        with self._conn_lock:
            conn = self._connection()
            conn.add(f"{PREFIX}/beat/{self.me}", 1)
            if self._notice is None and conn.check([NOTICE_KEY]):
                self._notice = _parse_notice(conn.get(NOTICE_KEY))
            if time.monotonic() - self.asked > ASKED_S:
                return
            now = time.monotonic()
            for h in range(len(self.names)):
                if h == self.me or h in self._lost:
                    continue
                count = conn.add(f"{PREFIX}/beat/{h}", 0)
                seen = self._seen.get(h)
                if seen is None or seen[0] != count:
                    self._seen[h] = (count, now)
                elif now - seen[1] > self.lost_after:
                    left = conn.add(f"{PREFIX}/left/{h}", 0)
                    if left >= len(self.ranks_of[h]):
                        self._seen[h] = (count, float("inf"))  # finished: never lost
                    else:
                        self._lost[h] = (
                            f"host {self.names[h]} ({_ranks_text(self.ranks_of[h])}) is lost: "
                            f"no heartbeat from it for {now - seen[1]:.1f} s (its ranks were "
                            f"killed or hang, or its network link is down)")

    def _store_trouble(self, exc: BaseException) -> None:
        # The connection may be broken for good (a request that timed out leaves the
        # stream out of step): drop it and make a new one next round.
        with self._conn_lock:
            conn, self._conn = self._conn, None
        if conn is not None and conn is not self._store:
            try:
                conn.close()
            except (MeshcastError, OSError):
                pass
        silent = time.monotonic() - self._contact
        if silent > self.lost_after and self._cut_off is None:
            self._declare_cut_off(silent, str(exc))

    def _declare_cut_off(self, silent: float, detail: str) -> None:
        h = self.host_of[0]
        self._cut_off = (
            f"the job's store{_store_address(self._store)} (with rank 0, on host "
            f"{self.names[h]}: {_ranks_text(self.ranks_of[h])}) has not answered this host "
            f"({self.names[self.me]}) for {silent:.1f} s: host {self.names[h]} is lost or "
            f"this host is cut off from it ({detail})")


def _parse_notice(raw: bytes) -> dict:
    try:
        notice = json.loads(raw)
        if isinstance(notice, dict) and isinstance(notice.get("text"), str):
            return notice
    except ValueError:
        pass
    return {"text": raw.decode("utf-8", "replace")[:2000], "rank": None, "by": "an unknown writer"}


def _store_address(store: Any) -> str:
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    store = getattr(store, "torch_store", store)  # a TorchStore: torch's TCPStore has both
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    if isinstance(host, str) and isinstance(port, int):
        return f" at {host}:{port}"
    return ""


class HostLiveness(_wait.Liveness):
    """The pid checks of this host's ranks plus the hosts of a group spanning several.

    The shared-memory waits of a cross-host group's host-local phases use it: a
    rank waiting there on its host's leader (who waits between hosts) learns of
    a lost host at the same time as the leader, and a rank of this host that
    died is announced to the other hosts.

    Args:
        base: the world's pid table.
        watch: the job's :class:`HostWatch`.
        ranks: the global ranks of the group (their hosts are watched).
    """

    def __init__(self, base: _wait.Liveness, watch: HostWatch, ranks: Sequence[int]) -> None:
        super().__init__(base.pids)
        self.watch = watch
        self.ranks = tuple(ranks)

    def check(self, ranks: Iterable[int], what: str) -> None:
        w = self.watch
        w.check(self.ranks, what)  # a lost host or a notice first: the root cause
        try:
            super().check(ranks, what)
        except PeerGoneError as exc:
            # A rank of this host may have died of the very cause this rank's watch is
            # about to see (the ranks of a cut-off host raise and exit one by one): give
            # the watch a few intervals to say so before blaming that rank.
            found = w.explain(self.ranks, 3 * w.interval)
            if found is not None:
                raise PeerGoneError(f"{what}: {found[0]}", peer=found[1]) from exc
            if exc.peer is not None:
                w.publish(f"rank {exc.peer} on host {w.names[w.me]} exited (pid "
                          f"{self.pids.get(exc.peer)}; seen by rank {w.rank} in {what})",
                          exc.peer)
            raise


__all__ = ["HostLiveness", "HostWatch", "lost_after", "publish_notice"]
