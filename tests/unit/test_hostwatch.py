"""meshcast._hostwatch in one process: watches of "ranks on two hosts" sharing a real
TCPStore, with a short liveness interval (lost after 1 s without a heartbeat)."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time

import pytest

from meshcast import _wait
from meshcast._hostwatch import NOTICE_KEY, HostLiveness, HostWatch
from meshcast.errors import PeerGoneError
from meshcast.rendezvous import TCPStore, TCPStoreServer

pytestmark = pytest.mark.timeout(60)

HOSTS = ["alpha/boot", "alpha/boot", "beta/boot"]  # ranks 0, 1 on alpha; rank 2 on beta


@pytest.fixture
def store(monkeypatch):
    monkeypatch.setenv("MESHCAST_LIVENESS_S", "0.05")  # lost_after: max(0.5, 1.0) = 1 s
    secret = secrets.token_bytes(32)
    server = TCPStoreServer("127.0.0.1", 0, secret)
    client = TCPStore("127.0.0.1", server.port, timeout=10, secret=secret)
    yield server, client
    client.close()
    server.close()


def _watch(store, rank: int) -> HostWatch:
    w = HostWatch(store, rank, HOSTS)
    w.start()
    return w


def _raises_within(watch: HostWatch, ranks, seconds: float) -> tuple[PeerGoneError, float]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            watch.check(ranks, "all_reduce #7 on WORLD (rank 0)")
        except PeerGoneError as exc:
            return exc, time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError(f"no error within {seconds} s")


def _quiet_for(watch: HostWatch, ranks, seconds: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        watch.check(ranks, "all_reduce")
        time.sleep(0.02)


def test_a_silent_host_is_lost_and_named_with_its_ranks(store):
    server, client = store
    a, b = _watch(client, 0), _watch(client, 2)
    try:
        _quiet_for(a, [0, 1, 2], 1.5)  # beta beats: never lost, however long
        b.close()  # beta's only rank stops beating without leaving: killed, or cut off
        # Only waits on beta are concerned: alpha's own ranks still wait in peace, and a
        # rank that never waited on the lost host is not failing (beta may have finished).
        _quiet_for(a, [0, 1], 2.0)
        assert not a.failing
        exc, took = _raises_within(a, [0, 1, 2], 4.0)
        assert took < 0.2, took  # lost for a while already
        assert "all_reduce #7 on WORLD (rank 0): host beta (rank 2) is lost" in str(exc)
        assert "no heartbeat from it for" in str(exc) and exc.peer == 2
        assert a.failing
    finally:
        a.close()


def test_a_host_is_lost_ten_intervals_after_its_last_heartbeat(store):
    server, client = store
    a, b = _watch(client, 0), _watch(client, 2)
    try:
        _quiet_for(a, [2], 0.5)
        b.close()
        exc, took = _raises_within(a, [2], 4.0)
        assert 0.8 < took < 2.5, took
        assert "host beta (rank 2) is lost" in str(exc)
    finally:
        a.close()


def test_a_host_whose_ranks_left_is_finished_not_lost(store):
    server, client = store
    a, b = _watch(client, 0), _watch(client, 2)
    try:
        _quiet_for(a, [2], 0.3)
        b.close(left=True)  # destroy_process_group
        _quiet_for(a, [2], 2.0)
        assert not a.failing
    finally:
        a.close()


def test_a_notice_reaches_every_other_rank_but_not_its_author(store):
    server, client = store
    a, b = _watch(client, 0), _watch(client, 2)
    try:
        b.publish("rank 2 on host beta failed: boom", 2)
        exc, took = _raises_within(a, [0, 1], 1.0)  # job-wide, whoever is waited on
        assert took < 0.5, took
        assert str(exc).endswith("rank 2 on host beta failed: boom (reported by rank 2)")
        b.check([0, 1, 2], "the author goes on")  # it raised its own error already
        assert client.check([NOTICE_KEY])
        a.publish("a second notice", None)  # the first one stays the job's
        assert b"boom" in client.get(NOTICE_KEY)
    finally:
        a.close()
        b.close()


def test_a_store_that_stops_answering_cuts_this_host_off(store):
    server, client = store
    a = _watch(client, 2)
    try:
        _quiet_for(a, [0], 0.2)
        server.close()
        exc, took = _raises_within(a, [0], 4.0)
        assert took < 2.5, took
        assert "the job's store at 127.0.0.1" in str(exc)
        assert "(with rank 0, on host alpha: ranks 0, 1) has not answered this host (beta)" in str(exc)
        assert exc.peer == 0 and a.cut_off
        t0 = time.monotonic()
        a.publish("not delivered", None)  # a cut-off host does not try
        assert time.monotonic() - t0 < 0.1
    finally:
        a.close()


def test_explain_waits_for_a_reason_and_gives_up(store):
    server, client = store
    a, b = _watch(client, 0), _watch(client, 2)
    try:
        t0 = time.monotonic()
        assert a.explain([2], 0.3) is None
        assert 0.25 < time.monotonic() - t0 < 1.0
        b.close()
        text, rank = a.explain([2], 4.0)
        assert "host beta (rank 2) is lost" in text and rank == 2
    finally:
        a.close()


def test_host_liveness_announces_a_dead_local_rank(store):
    server, client = store
    a, b = _watch(client, 0), _watch(client, 2)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        live = HostLiveness(_wait.Liveness({0: 1, 1: dead.pid}), a, [0, 1, 2])
        with pytest.raises(PeerGoneError, match=r"rank 1 \(pid \d+\) exited"):
            live.check([1], "broadcast #3 on WORLD on alpha (rank 0)")
        exc, _ = _raises_within(b, [2], 1.0)  # beta learns who died on alpha
        assert f"rank 1 on host alpha exited (pid {dead.pid}" in str(exc)
    finally:
        a.close()
        b.close()
