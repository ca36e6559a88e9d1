"""Module-level rank bodies for spawned worlds (spawned functions must be importable)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import numpy as np

import meshcast as dist


def ring_pass(count: int, dtype: str = "float32", tag: int = 0) -> list:
    """Each rank sends to the next and receives from the previous, with batch_isend_irecv."""
    r, n = dist.get_rank(), dist.get_world_size()
    if n == 1:
        return []
    out = np.arange(count, dtype=dtype) + r
    into = np.zeros(count, dtype=dtype)
    ops = [dist.P2POp(dist.isend, out, (r + 1) % n, tag=tag),
           dist.P2POp(dist.irecv, into, (r - 1) % n, tag=tag)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    expected = np.arange(count, dtype=dtype) + (r - 1) % n
    np.testing.assert_array_equal(into, expected)
    return [into.nbytes]


def finished_works_name_their_messages(tags: int) -> int:
    """Small messages move as they are posted and get finished Works the lane keeps per
    (verb, peer, tag): each must still name its own message and a receive its sender,
    across more tags than the lane keeps."""
    from meshcast import _world
    from meshcast.lanes import _MOVED_MAX

    r, n = dist.get_rank(), dist.get_world_size()
    left, right = (r - 1) % n, (r + 1) % n
    into = np.zeros(2, np.float32)
    for t in range(tags):
        send, recv = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, np.full(2, 100.0 * r + t, np.float32), right, tag=t),
             dist.P2POp(dist.irecv, into, left, tag=t)])
        recv.wait()
        send.wait()
        assert (into == 100.0 * left + t).all(), (t, into)
        assert recv.source_rank == left and send.source_rank is None, (t, recv, send)
        # (a receive whose message came late took the general path: its own wording)
        assert f"from rank {left} (tag {t})" in repr(recv), (t, repr(recv))
        assert f"to rank {right} (tag {t})" in repr(send), (t, repr(send))
        assert recv.is_completed() and recv.is_success() and recv.exception() is None
    kept = len(_world.default_lane._moved)
    assert 0 < kept <= _MOVED_MAX, kept
    return kept


def halo_exchange(rounds: int) -> int:
    """batch_isend_irecv with the receives listed first, both neighbours, two tags, a
    rank that is late every few rounds (past any spin time), sizes across the ring
    and single-copy paths: every Work in op order, every message where it belongs."""
    import time

    r, n = dist.get_rank(), dist.get_world_size()
    left, right = (r - 1) % n, (r + 1) % n
    for k in range(rounds):
        count = (3, 5000, 70_000)[k % 3]
        if r == k % n and k % 4 == 0:
            time.sleep(0.002)  # the others' receives fall back to the general path
        from_left, from_right = np.zeros(count), np.zeros(count)
        ops = [dist.P2POp(dist.irecv, from_left, left, tag=1),
               dist.P2POp(dist.irecv, from_right, right, tag=2),
               dist.P2POp(dist.isend, np.full(count, 10.0 * r + k), right, tag=1),
               dist.P2POp(dist.isend, np.full(count, -10.0 * r - k), left, tag=2)]
        works = dist.batch_isend_irecv(ops)
        assert len(works) == 4
        for w in works:
            w.wait()
        assert (from_left == 10.0 * left + k).all(), (k, from_left[:3])
        assert (from_right == -10.0 * right - k).all(), (k, from_right[:3])
    return rounds


def chain(count: int) -> float:
    """Rank 0 sends down a chain of blocking send/recv; each rank adds its rank."""
    r, n = dist.get_rank(), dist.get_world_size()
    x = np.zeros(count, np.float64)
    if r > 0:
        src = dist.recv(x, r - 1)
        assert src == r - 1
    x += r
    if r < n - 1:
        dist.send(x, r + 1)
    return float(x[0]) if count else 0.0


def any_source() -> list[int]:
    """Every rank sends its rank to rank 0, which receives from anyone."""
    r, n = dist.get_rank(), dist.get_world_size()
    senders = []
    if r == 0:
        for _ in range(n - 1):
            x = np.zeros(1, np.int64)
            src = dist.recv(x)
            assert x[0] == src * 10, (x, src)
            senders.append(src)
    else:
        dist.send(np.array([r * 10], np.int64), 0)
    # A sender that exited while rank 0 still waits on a slower one would fail that
    # receive from any rank (an exited rank is a dead one): stay until all arrived.
    dist.barrier()
    return sorted(senders)


def any_source_with_dying_peer() -> list:
    """Rank 2 sends to rank 0 and SIGKILLs itself; rank 1 lives but stays silent.

    Rank 0 receives rank 2's message (sent before it died), then its next
    receive from any rank must fail naming rank 2, although rank 1 could still send.
    """
    r = dist.get_rank()
    if r == 2:
        dist.send(np.array([20], np.int64), 0)
        os.kill(os.getpid(), signal.SIGKILL)
    if r == 1:
        dist.recv(np.zeros(1, np.int64), 0, tag=9)  # released by rank 0 at the end
        return []
    x = np.zeros(1, np.int64)
    time.sleep(0.3)  # rank 2 is dead before the first receive is even posted
    first = dist.recv(x)
    assert (first, int(x[0])) == (2, 20), (first, x)
    t0 = time.monotonic()
    try:
        dist.recv(x)
    except dist.PeerGoneError as exc:
        text = f"{time.monotonic() - t0:.2f}|{exc}"
    else:
        raise AssertionError("a receive from any rank ignored a dead peer")
    dist.send(np.zeros(1, np.int64), 1, tag=9)
    return [first, text]


def tags_out_of_order() -> None:
    """Rank 0 sends tags 1, 2, 3; rank 1 receives them as 3, 1, 2."""
    r = dist.get_rank()
    if r == 0:
        for t in (1, 2, 3):
            dist.send(np.full(4, t, np.int32), 1, tag=t)
    elif r == 1:
        for t in (3, 1, 2):
            x = np.zeros(4, np.int32)
            dist.recv(x, 0, tag=t)
            assert (x == t).all(), (t, x)


def big_exchange(nbytes: int) -> None:
    """Two ranks isend large messages to each other at once, then receive."""
    r = dist.get_rank()
    peer = 1 - r
    out = np.full(nbytes, r + 1, np.uint8)
    into = np.zeros(nbytes, np.uint8)
    s = dist.isend(out, peer)
    time.sleep(0.05)  # both sends are in flight before either receive is posted
    q = dist.irecv(into, peer)
    s.wait()
    q.wait()
    assert (into == peer + 1).all()


def streamed_then_small_in_one_batch(nbytes: int, rounds: int) -> None:
    """Each rank sends the next a message streamed in pieces, then a small one with
    the same tag, in one batch, and receives both from the previous in that order:
    sends keep their order even when the large one waits for the receives."""
    r, n = dist.get_rank(), dist.get_world_size()
    nxt, prv = (r + 1) % n, (r - 1) % n
    for k in range(rounds):
        big = np.full(nbytes // 8, r * 100 + k, np.float64)
        small = np.full(3, -(r * 100 + k), np.float64)
        big_in, small_in = np.zeros_like(big), np.zeros_like(small)
        works = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, big, nxt), dist.P2POp(dist.isend, small, nxt),
            dist.P2POp(dist.irecv, big_in, prv), dist.P2POp(dist.irecv, small_in, prv)])
        for w in works:
            w.wait()
        assert (big_in == prv * 100 + k).all(), (k, big_in[:4])
        assert (small_in == -(prv * 100 + k)).all(), (k, small_in)


def recv_from_dying_peer() -> str:
    """Rank 1 SIGKILLs itself; rank 0 must fail fast naming rank 1."""
    r = dist.get_rank()
    if r == 1:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    x = np.zeros(8)
    t0 = time.monotonic()
    try:
        dist.recv(x, 1)
    except dist.PeerGoneError as exc:
        return f"{time.monotonic() - t0:.2f}|{exc}"
    raise AssertionError("recv from a dead rank returned")


def recv_timeout() -> list[str]:
    """Rank 0's p2p calls #1 and #2 succeed; #3 (from rank 1) and #4 (from anyone) time out."""
    r = dist.get_rank()
    if r == 0:
        dist.send(np.ones(2), 1, tag=1)
        dist.recv(np.zeros(2), 1, tag=2)
        messages = []
        for src in (1, None):
            try:
                dist.recv(np.zeros(2), src, tag=7)
            except dist.CommTimeout as exc:
                messages.append(str(exc))
            else:
                raise AssertionError("no timeout")
        return messages
    if r == 1:
        dist.recv(np.zeros(2), 0, tag=1)
        dist.send(np.ones(2), 0, tag=2)
    time.sleep(3.5)  # alive but silent through both of rank 0's 1 s timeouts
    return []


def work_api() -> None:
    r = dist.get_rank()
    x = np.zeros(3, np.float32)
    if r == 0:
        w = dist.irecv(x, 1, tag=5)
        assert not w.is_completed()
        try:
            w.wait(timeout=0.05)
        except dist.CommTimeout:
            pass
        else:
            raise AssertionError("wait(timeout) should have expired")
        dist.send(np.ones(1, np.int8), 1, tag=9)  # tell rank 1 to go
        w.wait()
        assert w.is_completed() and w.is_success() and w.exception() is None
        assert w.source_rank == 1 and w._source_rank() == 1
        assert (x == 7).all()
    else:
        dist.recv(np.zeros(1, np.int8), 0, tag=9)
        w = dist.isend(np.full(3, 7, np.float32), 0, tag=5)
        w.wait()
        assert w.is_completed()


def noncontiguous_recv() -> None:
    r = dist.get_rank()
    if r == 0:
        dist.send(np.arange(6, dtype=np.int64), 1)
    else:
        base = np.zeros((3, 4), np.int64)
        view = base[:, ::2]  # 3x2, not contiguous
        dist.recv(view, 0)
        np.testing.assert_array_equal(view, np.arange(6).reshape(3, 2))
        assert (base[:, 1::2] == 0).all()


def torch_p2p() -> None:
    import torch

    r = dist.get_rank()
    if r == 0:
        dist.send(torch.arange(5, dtype=torch.bfloat16), 1)
        dist.send(torch.arange(4, dtype=torch.float32).reshape(2, 2).t(), 1)
    else:
        a = torch.zeros(5, dtype=torch.bfloat16)
        dist.recv(a, 0)
        assert torch.equal(a, torch.arange(5, dtype=torch.bfloat16))
        b = torch.zeros(2, 2).t()
        dist.recv(b, 0)
        assert torch.equal(b, torch.arange(4, dtype=torch.float32).reshape(2, 2).t())


def bad_arguments() -> list[str]:
    r = dist.get_rank()
    msgs = []
    cases = [
        lambda: dist.send(np.zeros(2), r),
        lambda: dist.send(np.zeros(2), 99),
        lambda: dist.send([1, 2], (r + 1) % 2),
        lambda: dist.send(np.zeros(2), (r + 1) % 2, tag="x"),
        lambda: dist.recv(np.zeros(2, dtype=object), (r + 1) % 2),
        lambda: dist.broadcast(np.zeros(2), src=5),
        lambda: dist.recv(np.zeros(2), (r + 1) % 2, group="world"),
    ]
    for case in cases:
        try:
            case()
        except dist.InvalidUsage as exc:
            msgs.append(str(exc))
        else:
            raise AssertionError("no error")
    dist.barrier()
    return msgs


def group_timeout(seconds: float) -> float | None:
    """new_group(timeout=...): the group's calls wait that long, not the world's timeout.
    Rank 0 all_reduces on the group, which no other rank enters: it must raise
    CommTimeout after about ``seconds``. A timeout that is not a positive number of
    seconds or a timedelta is refused, naming the argument. Returns rank 0's wait."""
    import datetime

    r, n = dist.get_rank(), dist.get_world_size()
    for bad in (0, -1.0, "5", True, datetime.timedelta(0)):
        try:
            dist.new_group(timeout=bad)
        except dist.InvalidUsage as exc:
            assert "'timeout'" in str(exc) and "new_group" in str(exc), exc
        else:
            raise AssertionError(f"new_group(timeout={bad!r}) was accepted")
    g = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=seconds))
    waited = None
    if r == 0:
        t = time.monotonic()
        try:
            dist.all_reduce(np.ones(4), group=g)
        except dist.CommTimeout:
            waited = time.monotonic() - t
        else:
            raise AssertionError("all_reduce on a group nobody else entered returned")
    dist.barrier()  # the world's own timeout is untouched
    return waited


def monitored_barriers() -> dict:
    """monitored_barrier: three that pass, on the world and on a subgroup of the ranks
    but rank 0 (its first rank the monitor), their keys gone after; then rank 1 (and,
    with wait_all_ranks, rank 2) arriving 1.5 s after a 0.4 s timeout, fail fast and
    then naming every late rank; then the monitor itself late; bad arguments; last an
    all_reduce, which the failures left working. Returns what each step saw."""
    from meshcast import _world

    r, n = dist.get_rank(), dist.get_world_size()
    seen: dict = {}
    for _ in range(3):
        dist.monitored_barrier()
    sub = dist.new_group(list(range(1, n))) if n > 1 else None
    if sub is not None and r > 0:
        dist.monitored_barrier(sub, timeout=30)
    dist.barrier()
    store = _world.current.store
    world_id = _world.current.default_group.group_id
    keys = [f"arrived/{q}" for q in range(1, n)] + ["verdict", "read"]
    seen["keys left"] = [k for k in keys if store.check([f"meshcast/monitored_barrier/"
                                                         f"{world_id}/3/{k}"])]

    def late(ranks: set[int], wait_all: bool, sleep: float = 1.5, timeout: float = 0.4
             ) -> tuple | None:
        dist.barrier()  # (the late ones of the call before came late here too)
        if r in ranks:
            time.sleep(sleep)
        try:
            dist.monitored_barrier(timeout=timeout, wait_all_ranks=wait_all)
        except dist.CommTimeout as exc:
            return str(exc), exc.waiting_on
        return None

    if n > 1:
        seen["fail fast"] = late({1, 2}, False)
        seen["wait all"] = late({1, 2}, True)
        seen["monitor late"] = late({0}, False, sleep=3.0, timeout=0.2)
        dist.barrier()  # (the monitor's own verdict came after the others gave up)
    for bad in ({"timeout": -1}, {"wait_all_ranks": 1}):
        try:
            dist.monitored_barrier(**bad)
            seen[str(bad)] = "accepted"
        except dist.InvalidUsage as exc:
            seen[str(bad)] = "monitored_barrier" in str(exc)
    x = np.full(3, r + 1.0)
    dist.all_reduce(x)
    seen["all_reduce"] = x.tolist()
    return seen


def subgroup_helpers() -> dict:
    """new_subgroups (the default: the ranks of a host, all of them here; pairs),
    new_subgroups_by_enumeration (evens and odds but the last rank, which is in none),
    each subgroup's all_reduce, the InvalidUsage of bad arguments (raised before any
    group is made, so that the next new_group still meets on every rank), and
    get_node_local_rank."""
    r, n = dist.get_rank(), dist.get_world_size()
    out: dict[str, Any] = {}
    mine, made = dist.new_subgroups()
    out["default"] = (len(made), dist.get_process_group_ranks(mine))
    if n % 2 == 0:
        pair, pairs = dist.new_subgroups(2)
        x = np.array([float(r)])
        dist.all_reduce(x, group=pair)
        out["pairs"] = (dist.get_process_group_ranks(pair), float(x[0]), len(pairs),
                        sum(g is dist.GroupMember.NON_GROUP_MEMBER for g in pairs))
    lists = [ranks for ranks in ([q for q in range(n - 1) if q % 2 == 0],
                                 [q for q in range(n - 1) if q % 2]) if ranks]
    if lists:
        sub, subs = dist.new_subgroups_by_enumeration(lists)
        out["enum_made"] = len(subs)
        if sub is not None:
            y = np.array([1.0 + r])
            dist.all_reduce(y, group=sub)
            out["enum"] = (dist.get_process_group_ranks(sub), float(y[0]))
        else:
            out["enum"] = None
    errors = []
    for bad in (lambda: dist.new_subgroups(0), lambda: dist.new_subgroups(n + 1),
                lambda: dist.new_subgroups(True),
                lambda: dist.new_subgroups_by_enumeration([[0], [0]]),
                lambda: dist.new_subgroups_by_enumeration([]),
                lambda: dist.new_subgroups_by_enumeration([[0], [n]])):
        try:
            bad()
            errors.append("no error")
        except dist.InvalidUsage as exc:
            errors.append(str(exc).split(":")[0].strip())
    out["errors"] = errors
    after = dist.new_group(list(range(n)))
    z = np.array([1.0])
    dist.all_reduce(z, group=after)
    out["after"] = float(z[0])
    out["local"] = dist.get_node_local_rank(fallback_rank=-1)
    return out


def subgroups() -> dict:
    r, n = dist.get_rank(), dist.get_world_size()
    evens = dist.new_group([q for q in range(n) if q % 2 == 0])
    odds = dist.new_group([q for q in range(n) if q % 2 == 1])
    mine = evens if r % 2 == 0 else odds
    other = odds if r % 2 == 0 else evens
    assert other is dist.GroupMember.NON_GROUP_MEMBER
    assert dist.get_rank(other) == -1 and dist.get_world_size(other) == -1
    assert dist.broadcast(np.zeros(1), group=other) is None  # non-member: no-op
    x = np.array([float(r)])
    root = dist.get_global_rank(mine, 0)
    dist.broadcast(x, src=root, group=mine)
    assert x[0] == root
    dist.barrier(group=mine)
    # p2p inside a subgroup uses global ranks; group ranks via group_dst
    if dist.get_world_size(mine) > 1:
        gr = dist.get_rank(mine)
        if gr == 0:
            dist.send(np.array([42.0]), group_dst=1, group=mine)
        elif gr == 1:
            y = np.zeros(1)
            assert dist.recv(y, group_src=0, group=mine) == dist.get_global_rank(mine, 0)
            assert y[0] == 42.0
    dist.barrier()
    return {"group_rank": dist.get_rank(mine), "group_size": dist.get_world_size(mine),
            "ranks": dist.get_process_group_ranks(mine)}


def async_overlap() -> float:
    """A large async broadcast must not block the caller."""
    r = dist.get_rank()
    x = np.full(4 << 20, r, np.float32)
    t0 = time.monotonic()
    w = dist.broadcast(x, src=0, async_op=True)
    posted = time.monotonic() - t0
    w.wait()
    assert (x == 0).all()
    return posted


def async_all_reduce_completes_alone(count: int) -> dict:
    """An async all_reduce finishes while the caller sleeps, before anyone waits on it.

    Completion is watched through the Work's future (a done-callback sets an
    Event), which observes the state without driving progress as wait() or a
    p2p handle's test() would: only the background engine can finish the call.
    """
    r, n = dist.get_rank(), dist.get_world_size()
    x = np.ones(count, np.float32)
    dist.all_reduce(x)  # warm-up: arena mapped, pages touched
    durations = []
    for _ in range(3):
        dist.barrier()
        t0 = time.monotonic()
        dist.all_reduce(x)
        durations.append(time.monotonic() - t0)
    x[:] = r + 1
    dist.barrier()  # both ranks post at about the same time
    done = threading.Event()
    t0 = time.monotonic()
    w = dist.all_reduce(x, async_op=True)
    w.get_future().add_done_callback(lambda _: done.set())
    # The caller sleeps; generous so that a loaded 2-core machine still finishes,
    # yet the call is never waited on. A lazy engine (work done in wait()) never sets it.
    budget = max(50 * min(durations), 5.0)
    while not done.is_set() and time.monotonic() - t0 < budget:
        time.sleep(0.005)
    finished_alone = done.is_set()
    completed_after = time.monotonic() - t0
    t1 = time.monotonic()
    w.wait()
    waited = time.monotonic() - t1
    assert (x == n * (n + 1) / 2).all(), x[:4]
    return {"finished_alone": finished_alone, "after": completed_after, "waited": waited,
            "sync": min(durations)}


def memfd_holders(inodes: set[int], pids: list[str] | None = None) -> list[str]:
    """Which of ``pids`` (default: every process we can see) map or hold open a meshcast
    memfd whose inode is in ``inodes``."""
    found = []
    for pid in pids if pids is not None else [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    fields = line.split()
                    if "memfd:meshcast-" in line and int(fields[4]) in inodes:
                        found.append(f"pid {pid} maps {fields[5]}")
            for fd in os.listdir(f"/proc/{pid}/fd"):
                path = f"/proc/{pid}/fd/{fd}"
                if (os.readlink(path).startswith("/memfd:meshcast-")
                        and os.stat(path).st_ino in inodes):
                    found.append(f"pid {pid} holds fd {fd}")
        except OSError:  # exited meanwhile, or not ours to look at
            continue
    return found


def memfd_segments_then(mode: str) -> dict:
    """hold_segments_then, reporting first the inodes of the memfd segments this rank maps."""
    dist.broadcast(np.ones(1 << 16), src=0)
    with open("/proc/self/maps") as f:
        inodes = {int(line.split()[4]) for line in f if "memfd:meshcast-" in line}
    # Positive control for the test's scan after the job: it does see a live holder.
    seen = memfd_holders(inodes, [str(os.getpid())])
    hold_segments_then(mode)
    return {"inodes": sorted(inodes), "seen": seen}


def ordering_async_then_sync() -> None:
    """Async ops followed by a sync op on one group complete in call order."""
    r = dist.get_rank()
    a = np.full(1000, r, np.int64)
    b = np.full(10, r + 100, np.int64)
    w = dist.broadcast(a, src=0, async_op=True)
    dist.broadcast(b, src=1)
    assert w.is_completed()
    assert (a == 0).all() and (b == 101).all()


def hold_segments_then(mode: str) -> None:
    """Set up the engine, then end normally, by exception, or by SIGKILL (rank 1)."""
    r = dist.get_rank()
    x = np.ones(1 << 16)
    dist.broadcast(x, src=0)
    if mode == "raise" and r == 1:
        raise RuntimeError("deliberate failure")
    if mode == "kill" and r == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "kill":
        time.sleep(0.5)


def collective_with_dying_peer(algorithm: str | None) -> str:
    """Rank 2 SIGKILLs itself; the others are in an all_reduce waiting on it."""
    r = dist.get_rank()
    x = np.ones(1 << 12)
    dist.all_reduce(x, algorithm=algorithm)  # everyone is up and running
    if r == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        dist.all_reduce(x, algorithm=algorithm)
    except (dist.PeerGoneError, dist.GroupAbortedError) as exc:
        return f"{time.monotonic() - t0:.2f}|{type(exc).__name__}: {exc}"
    raise AssertionError("all_reduce with a dead rank returned")


def collective_timeout() -> str:
    """Rank 1 is late to the all_reduce (alive but busy): rank 0 times out naming it."""
    r = dist.get_rank()
    x = np.ones(4)
    if r == 1:
        time.sleep(3.0)
        return ""
    try:
        dist.all_reduce(x)
    except dist.CommTimeout as exc:
        return str(exc)
    raise AssertionError("no timeout")


def size_mismatch() -> str:
    """Rank 0 sends 8 KiB; rank 1 posts a 4 KiB receive: an error on rank 1, no hang on 0."""
    r = dist.get_rank()
    if r == 0:
        dist.send(np.zeros(8192, np.uint8), 1)
        dist.send(np.ones(4, np.uint8), 1, tag=1)  # the link still works afterwards
        return ""
    try:
        dist.recv(np.zeros(4096, np.uint8), 0)
    except dist.MismatchError as exc:
        text = str(exc)
    else:
        raise AssertionError("no error")
    y = np.zeros(4, np.uint8)
    dist.recv(y, 0, tag=1)
    assert (y == 1).all()
    return text


def new_group_with_dead_member(victim: int) -> str:
    """Rank ``victim`` SIGKILLs itself; the others call new_group over all three ranks."""
    r = dist.get_rank()
    dist.barrier()  # everyone is up: the only thing missing later is the victim
    if r == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.1)  # the victim is gone before anyone starts waiting on it
    t0 = time.monotonic()
    try:
        dist.new_group([0, 1, 2])
    except dist.PeerGoneError as exc:
        return f"{time.monotonic() - t0:.2f}|{exc}"
    raise AssertionError("new_group with a dead member returned")


def blocking_fast_path(count: int) -> dict:
    """Blocking send/recv of small arrays take the transport's fast path (straight into
    and out of the ring, see ShmTransport.send_now/recv_now), mixed with isend/irecv on
    the general path, without breaking MPI's matching rules: messages of one tag keep
    their order, a receive posted earlier matches first, other tags wait in line.
    ``count`` messages go round in both directions (wrapping small rings). Returns how
    often each fast path succeeded on this rank (by_port: in one C call, the lane's
    compiled port)."""
    from meshcast import _world

    r = dist.get_rank()
    peer = 1 - r
    t = dist.group.WORLD.transport
    used = {"send": 0, "recv": 0, "by_port": 0}
    send_now, recv_now = t.send_now, t.recv_now

    def counting(name, fn):
        def call(*args):
            ok = fn(*args)
            used[name] += ok
            return ok
        return call

    t.send_now, t.recv_now = counting("send", send_now), counting("recv", recv_now)

    class CountingPort:  # the lane's compiled ports (transport/_rings.c) count too
        def __init__(self, port):
            self.port = port

        def send(self, arr, tag):
            state = self.port.send(arr, tag)
            used["send"] += state > 0
            used["by_port"] += state > 0
            return state

        def recv(self, out, tag, spin_ns):
            state = self.port.recv(out, tag, spin_ns)
            used["recv"] += state > 0
            used["by_port"] += state > 0
            return state

    lane = dist.group.WORLD.lane
    ports = lane._ports
    lane._ports = {g: CountingPort(port) for g, port in ports.items()}
    for k in range(count):  # ping-pong with changing sizes: the rings wrap
        x = np.full(1 + k % 300, k, np.float32)
        if r == 0:
            dist.send(x, peer, tag=k % 3)
            y = np.zeros_like(x)
            assert dist.recv(y, peer, tag=k % 3) == peer
        else:
            y = np.zeros_like(x)
            dist.recv(y, peer, tag=k % 3)
            dist.send(y + 1, peer, tag=k % 3)
        if r == 0:
            assert (y == k + 1).all(), (k, y[:3])
    # Order within a tag across both paths; an earlier posted receive matches first.
    if r == 0:
        w = dist.isend(np.full(4, 1.0), peer, tag=7)
        dist.send(np.full(4, 2.0), peer, tag=7)
        w.wait()
        dist.send(np.full(4, 3.0), peer, tag=7)
        dist.send(np.full(4, 9.0), peer, tag=8)  # another tag, received first
        dist.send(np.full(4, 4.0), peer, tag=7)
    else:
        first, second, third, fourth, other = (np.zeros(4) for _ in range(5))
        time.sleep(0.05)  # the messages wait in the ring
        w = dist.irecv(first, peer, tag=7)
        dist.recv(second, peer, tag=7)
        w.wait()
        dist.recv(other, peer, tag=8)
        dist.recv(third, peer, tag=7)
        dist.recv(fourth, peer, tag=7)
        assert [a[0] for a in (first, second, third, fourth, other)] == [1, 2, 3, 4, 9]
    # isend/irecv and batches: a message already in the ring completes as it is posted,
    # into a non-contiguous receive buffer too (written back at once).
    dist.barrier()
    if r == 0:
        w = dist.isend(np.arange(6.0), peer, tag=11)
        assert w.is_completed() and w.wait() and w.exception() is None
        dist.batch_isend_irecv([dist.P2POp(dist.isend, np.full(3, 5.0), peer, tag=12)])[0].wait()
        _world.current.store.set("test/both-sent", b"1")
    else:
        # both messages are in the ring before the receives are posted (a sleep of 50 ms
        # was not always enough on a loaded machine)
        _world.current.store.wait(["test/both-sent"], 30.0)
        got = np.zeros(6)
        w = dist.irecv(got, peer, tag=11)
        assert w.is_completed() and w.source_rank == peer, w
        np.testing.assert_array_equal(got, np.arange(6.0))
        strided = np.zeros(6)[::2]
        (w,) = dist.batch_isend_irecv([dist.P2POp(dist.irecv, strided, peer, tag=12)])
        w.wait()
        np.testing.assert_array_equal(strided, [5.0] * 3)
    t.send_now, t.recv_now = send_now, recv_now
    lane._ports = ports
    return used


def posted_receive_taken_in_wait(count: int) -> dict[str, int]:
    """``irecv(...).wait()`` takes its message straight out of the ring when no other
    posted receive could match it (ShmTransport.take_posted), keeping MPI's matching
    rules: an earlier posted receive of the same tag, or one from any rank, matches
    first; a message of another size is refused by the ring and reported by the
    general path; the withdrawn receive goes back first in line. Returns how often
    the wait took the message itself on this rank."""
    r = dist.get_rank()
    peer = 1 - r
    t = dist.group.WORLD.transport
    used = {"taken": 0}
    take_posted = t.take_posted

    def counting(recv):
        took = take_posted(recv)
        used["taken"] += took
        return took

    t.take_posted = counting
    for k in range(count):  # ping-pong, both sides receiving with irecv().wait()
        x = np.full(1 + k % 50, k, np.float32)
        y = np.zeros_like(x)
        if r == 0:
            dist.barrier()  # rank 1 has posted its receive
            dist.send(x, peer, tag=k % 3)
            dist.barrier()  # ... and the message is in the ring when rank 1 waits
            w = dist.irecv(y, peer, tag=k % 3)
            w.wait()
            assert w.source_rank == peer and (y == k + 1).all(), (k, y[:3])
        else:
            # posted before the message comes, waited for once it is there: the wait
            # (not the post) finds it, whatever the scheduler does on shared cores
            w = dist.irecv(y, peer, tag=k % 3)
            dist.barrier()
            dist.barrier()
            w.wait()
            dist.send(y + 1, peer, tag=k % 3)
    dist.barrier()
    # Two receives of one tag, the later one waited for first: the earlier matches first.
    # Then a receive from any rank, posted before one from the peer: it matches first.
    if r == 0:
        time.sleep(0.05)  # the receives are posted before the messages come
        for value, tag in ((1.0, 5), (2.0, 5), (3.0, 6), (4.0, 6)):
            dist.send(np.full(4, value), peer, tag=tag)
    else:
        a, b, c, d = (np.zeros(4) for _ in range(4))
        first, second = dist.irecv(a, peer, tag=5), dist.irecv(b, peer, tag=5)
        second.wait()
        first.wait()
        anyone, mine = dist.irecv(c, None, tag=6), dist.irecv(d, peer, tag=6)
        mine.wait()
        anyone.wait()
        assert [v[0] for v in (a, b, c, d)] == [1.0, 2.0, 3.0, 4.0], (a, b, c, d)
    dist.barrier()
    # A message shorter than the receive: the ring refuses it, the withdrawn receive
    # goes back, and the general path reports the sizes; the next message still arrives.
    if r == 0:
        dist.send(np.ones(3), peer, tag=9)
        dist.send(np.full(4, 7.0), peer, tag=9)
    else:
        short = np.zeros(4)
        try:
            dist.irecv(short, peer, tag=9).wait()
            raise AssertionError("a 3-element message filled a 4-element receive")
        except dist.MismatchError as exc:
            assert "sent 24 bytes but the receive buffer holds 32" in str(exc), exc
        after = np.zeros(4)
        dist.irecv(after, peer, tag=9).wait()
        assert after[0] == 7.0, after
    dist.barrier()
    # A progress pass while the receive is withdrawn moves its message to the
    # unexpected list (as the progress thread may): the receive, posted again, claims it.
    if r == 0:
        time.sleep(0.05)
        dist.send(np.full(4, 8.0), peer, tag=10)
    else:
        recv_now = t.recv_now

        passes = []

        def after_a_pass(*args):
            while not t._unexpected:
                t.poll()
            passes.append(1)
            return recv_now(*args)

        t.recv_now = after_a_pass
        late = np.zeros(4)
        w = dist.irecv(late, peer, tag=10)
        w.wait(timeout=10)
        t.recv_now = recv_now
        assert passes and late[0] == 8.0 and w.source_rank == peer, (passes, late)
    t.take_posted = take_posted
    return used


def stream_while_receiver_computes(nbytes: int, compute_s: float) -> float:
    """Rank 0 sends a message many times the ring's size while rank 1 computes (makes
    no meshcast call) for ``compute_s`` seconds before receiving it: rank 1's progress
    thread drains the stalled ring meanwhile (Rule 5 of transport/shm.py), so the
    blocking send returns long before rank 1 receives. Returns the send's duration
    on rank 0 (and checks the data on rank 1)."""
    r = dist.get_rank()
    data = np.arange(nbytes, dtype=np.uint8)
    dist.barrier()
    if r == 0:
        t = time.monotonic()
        dist.send(data, 1)
        return time.monotonic() - t
    time.sleep(compute_s)
    into = np.zeros(nbytes, np.uint8)
    dist.recv(into, 0)
    np.testing.assert_array_equal(into, data)
    return 0.0


def isend_of_a_temporary() -> None:
    """Rank 0 isends a temporary array (nothing else references it) past the single-copy
    size, then allocates and fills memory of the same size while rank 1 is slow to
    receive: the receiver must still read the message, not whatever reused its memory."""
    r = dist.get_rank()
    count = 1 << 20  # 8 MiB of float64
    if r == 0:
        work = dist.isend(np.full(count, 7.0), 1)
        junk = [np.full(count, -1.0) for _ in range(4)]  # reuses freed memory, if any
        time.sleep(0.2)
        work.wait()
        del junk
    else:
        time.sleep(0.1)
        got = np.zeros(count)
        dist.recv(got, 0)
        assert (got == 7.0).all(), np.unique(got)[:5]


def tiny_calls_across_reinit(store_path: str) -> list[float]:
    """Tiny all_reduce and scatter on the default group, then destroy_process_group:
    the front door's cached lane (``_world.default_lane``) goes with it, so the next call
    is refused as uninitialized; then init_process_group again (a new store) and the
    same calls run on the new group's lane. Returns the sums seen before and after."""
    from meshcast import _world

    r, n = dist.get_rank(), dist.get_world_size()
    x = np.full(2, r + 1.0)
    dist.all_reduce(x)
    before = float(x[0])
    assert _world.default_lane is dist.group.WORLD.lane
    dist.destroy_process_group()
    assert _world.default_lane is None and _world.current is None
    try:
        dist.all_reduce(x)
    except dist.InvalidUsage as exc:
        assert "not initialized" in str(exc) or "init_process_group" in str(exc), exc
    else:
        raise AssertionError("all_reduce ran after destroy_process_group")
    dist.init_process_group(init_method=f"file://{store_path}", rank=r, world_size=n)
    assert _world.default_lane is dist.group.WORLD.lane
    y = np.full(2, 2.0 * (r + 1))
    dist.all_reduce(y)
    got = np.zeros(2)
    dist.scatter(got, [np.full(2, 10.0 + q) for q in range(n)] if r == 0 else None, src=0)
    assert (got == 10.0 + r).all(), got
    if n > 1:  # (one rank: no lane, nothing to move)
        assert dist.group.WORLD.last_algorithm == "scatter/oneshot", \
            dist.group.WORLD.last_algorithm
    return [before, float(y[0])]


def single_copy_through_the_port(sizes: list[int]) -> list[Any]:
    """Messages past the compiled port's single-copy size (ShmTransport.port_copy_bytes),
    around a ring of ranks: blocking send/recv, isend/irecv, batch_isend_irecv, float32
    and int64, checked against what each sender sent, while counting the messages the
    interpreter's single-copy read and the general isend moved (the compiled path
    moves the rest: the address in the ring, the receiver's copy in C, the FIN taken
    by the wait; a peer late past the spin time sends one to the interpreter's). Then:
    a receive posted before its message arrives, and a receive of the wrong size (the
    same MismatchError as the general path's, the link still working after it).
    Returns [the mismatch message (rank 1), messages received, interpreter reads,
    general sends, whether the ports exist, whether waits spin]."""
    from meshcast.transport import cma, shm

    r, n = dist.get_rank(), dist.get_world_size()
    nxt, prv = (r + 1) % n, (r - 1) % n
    transport = dist.group.WORLD.transport
    assert transport.port_copy_bytes > 0
    counted = {"read": 0, "isend": 0}
    kept = cma.read, shm.ShmTransport.isend

    def counting(name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return fn(*args, **kwargs)
        return call

    def payload(src: int, k: int, count: int, dtype: type) -> np.ndarray:
        return (np.arange(count) * (src + 2) + k).astype(dtype)

    cma.read, shm.ShmTransport.isend = counting("read", cma.read), counting("isend", kept[1])
    received = 0
    try:
        for k, nbytes in enumerate(sizes):
            for dtype in (np.float32, np.int64):
                count = nbytes // np.dtype(dtype).itemsize
                mine, got = payload(r, k, count, dtype), np.zeros(count, dtype)
                if r % 2 == 0:  # blocking, in an order that cannot deadlock
                    dist.send(mine, nxt)
                    dist.recv(got, prv)
                else:
                    dist.recv(got, prv)
                    dist.send(mine, nxt)
                np.testing.assert_array_equal(got, payload(prv, k, count, dtype))
                got[:] = 0
                works = [dist.isend(mine, nxt), dist.irecv(got, prv)]
                for work in works:
                    work.wait()
                np.testing.assert_array_equal(got, payload(prv, k, count, dtype))
                got[:] = 0
                for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, nxt),
                                                    dist.P2POp(dist.irecv, got, prv)]):
                    work.wait()
                np.testing.assert_array_equal(got, payload(prv, k, count, dtype))
                received += 3
    finally:
        cma.read, shm.ShmTransport.isend = kept
    count = sizes[-1] // 4
    got = np.zeros(count, np.float32)
    work = dist.irecv(got, prv, tag=5)  # posted first: the general path receives it
    dist.barrier()
    dist.send(payload(r, 9, count, np.float32), nxt, tag=5)
    work.wait()
    np.testing.assert_array_equal(got, payload(prv, 9, count, np.float32))
    text = ""
    if r == 0:
        dist.send(np.zeros(sizes[0], np.uint8), 1, tag=6)
        dist.send(np.ones(4, np.uint8), 1, tag=7)
    elif r == 1:
        try:
            dist.recv(np.zeros(sizes[0] // 2, np.uint8), 0, tag=6)
        except dist.MismatchError as exc:
            text = str(exc)
        else:
            raise AssertionError("no error")
        y = np.zeros(4, np.uint8)
        dist.recv(y, 0, tag=7)
        assert (y == 1).all()
    dist.barrier()
    from meshcast import _wait

    return [text, received, counted["read"], counted["isend"],
            bool(dist.group.WORLD.lane._ports), _wait.spec().spin_s > 0]


def sendrecv_pairs(rounds: int) -> list[int]:
    """batch_isend_irecv of one send and one receive (TinyCallLane.batch: whole from the
    ops in one C call) around a ring of ranks: sizes through the ring and single-copy, the send or the receive listed
    first, float64 and int32, new tags, a rank late every few rounds (the others'
    receives go to the general path), a strided receive (the general batch), and a
    pair on a subgroup. Every message where it belongs, every Work in op order naming
    its own message. Returns [pairs the compiled calls carried, pairs posted,
    single-copy sends they left to a FIN still to come, whether the compiled ports
    exist, whether waits spin, single-copy sends, pairs past the single-copy size,
    pairs nothing of which could be sent]."""
    from meshcast.transport import shm

    r, n = dist.get_rank(), dist.get_world_size()
    nxt, prv = (r + 1) % n, (r - 1) % n
    counted = {"carried": 0, "adopted": 0, "single-copy": 0, "unsent": 0}
    kept = shm.ShmTransport.adopt_address_send

    def adopted(self: Any, *args: Any) -> Any:
        counted["adopted"] += 1
        return kept(self, *args)

    class Ids:  # the transport's single-copy send ids, counted as drawn
        def __init__(self, ids: Any) -> None:
            self.ids = ids

        def __iter__(self) -> Any:
            return self

        def __next__(self) -> int:
            counted["single-copy"] += 1
            return next(self.ids)

    transport, lane = dist.group.WORLD.transport, dist.group.WORLD.lane
    transport._cma_ids = Ids(transport._cma_ids)
    compiled = lane.make_batch(dist.P2POp, True)

    def batch(ops: Any) -> Any:
        got = compiled(ops)
        counted["carried"] += type(got) is list or type(got) is tuple
        counted["unsent"] += got is False
        return got

    if compiled is not None:
        lane.batch = batch
    shm.ShmTransport.adopt_address_send = adopted
    # both sides of the single-copy size (_select.BATCH_SINGLE_MIN_BYTES), and past
    # the size from which a lone send goes single-copy
    pair = dist.group.WORLD.lane._batch_copy_bytes
    pair = pair if pair < 1 << 40 else 4096
    copy = dist.group.WORLD.transport.port_copy_bytes or 4096
    posted = wanted = 0
    try:
        for k in range(rounds):
            dtype = (np.float64, np.int32)[k % 2]
            nbytes = (8, pair - 8, pair, 3 * copy)[k % 4]
            wanted += nbytes >= pair
            count = nbytes // np.dtype(dtype).itemsize
            tag = k % 5
            if r == k % n and k % 6 == 5:
                time.sleep(0.003)  # past the spin time
            mine = (np.arange(count) * (r + 3) + k).astype(dtype)
            got = np.zeros(count, dtype)
            ops = [dist.P2POp(dist.isend, mine, nxt, tag=tag),
                   dist.P2POp(dist.irecv, got, prv, tag=tag)]
            if k % 3 == 1:
                ops.reverse()
            works = dist.batch_isend_irecv(ops)
            posted += 1
            for op, work in zip(ops, works):
                work.wait()
                if op.kind == "irecv":
                    assert work.source_rank == prv and f"from rank {prv} (tag {tag})" in repr(
                        work), (k, repr(work))
                else:
                    assert f"to rank {nxt} (tag {tag})" in repr(work), (k, repr(work))
            np.testing.assert_array_equal(got, (np.arange(count) * (prv + 3) + k).astype(dtype),
                                          f"round {k}: {nbytes} bytes")
        wide = np.zeros((4, 2))
        works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, wide[:, 0], prv),
                                        dist.P2POp(dist.isend, np.full(4, float(r)), nxt)])
        for work in works:
            work.wait()
        assert (wide[:, 0] == prv).all() and (wide[:, 1] == 0).all(), wide
        sub = dist.new_group(list(range(n)))
        got = np.zeros(3)
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, np.full(3, r + 0.5), nxt,
                                                       group=sub),
                                            dist.P2POp(dist.irecv, got, prv, group=sub)]):
            work.wait()
        assert (got == prv + 0.5).all(), got
        posted += 1
    finally:
        shm.ShmTransport.adopt_address_send = kept
    from meshcast import _wait

    return [counted["carried"], posted, counted["adopted"], bool(lane._ports),
            _wait.spec().spin_s > 0, counted["single-copy"], wanted, counted["unsent"]]


def shuffled_halo_batches(rounds: int) -> int:
    """Halo exchanges through batch_isend_irecv with the four ops in a random order (the
    same on every rank), sizes across the ring and single-copy, three dtypes, the world
    or a subgroup, new tags, now and then a late rank: every message where it
    belongs. Returns the rounds done."""
    import random

    r, n = dist.get_rank(), dist.get_world_size()
    left, right = (r - 1) % n, (r + 1) % n
    rng = random.Random(1234)
    sub = dist.new_group(list(range(n)))
    for k in range(rounds):
        count = rng.choice([0, 1, 3, 1000, 5000, 9000, 40000, 70000, 300000])
        dtype = rng.choice([np.float32, np.int64, np.uint8])
        group = rng.choice([None, sub])
        if r == (rng.randrange(n) if rng.random() < 0.1 else -1):
            time.sleep(0.002)
        from_left, from_right = np.zeros(count, dtype), np.zeros(count, dtype)
        ops = [dist.P2POp(dist.irecv, from_left, left, group, tag=k % 3),
               dist.P2POp(dist.irecv, from_right, right, group, tag=10 + k % 3),
               dist.P2POp(dist.isend, (np.arange(count) * (r + 1) + k).astype(dtype), right,
                          group, tag=k % 3),
               dist.P2POp(dist.isend, (np.arange(count) * (r + 7) - k).astype(dtype), left,
                          group, tag=10 + k % 3)]
        rng.shuffle(ops)
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        np.testing.assert_array_equal(
            from_left, (np.arange(count) * (left + 1) + k).astype(dtype), f"round {k}")
        np.testing.assert_array_equal(
            from_right, (np.arange(count) * (right + 7) - k).astype(dtype), f"round {k}")
    return rounds


def send_to_dying_peer(nbytes: int, pair: bool = False) -> str:
    """Rank 1 SIGKILLs itself without receiving; rank 0's single-copy send (its data
    waits in its own memory for a reader that never comes) must fail fast naming it.
    ``pair``: the send is half of a batch_isend_irecv sendrecv with rank 1 (its compiled
    call returns before the FIN that never comes), whose receive must fail too."""
    r = dist.get_rank()
    if r == 1:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        if pair:
            works = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, np.ones(nbytes, np.uint8), 1),
                dist.P2POp(dist.irecv, np.zeros(nbytes, np.uint8), 1)])
            for i, work in enumerate(works):
                try:
                    work.wait()
                except dist.PeerGoneError:
                    if i == 1:
                        raise
                else:
                    raise AssertionError(f"op {i} of a sendrecv with a dead rank completed")
        else:
            dist.send(np.ones(nbytes, np.uint8), 1)
    except dist.PeerGoneError as exc:
        return f"{time.monotonic() - t0:.2f}|{exc}"
    raise AssertionError("a send to a dead rank returned")
