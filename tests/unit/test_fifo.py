"""The group FIFO (meshcast._fifo): its inline claim, in Python and compiled, keeps
call order against the worker thread, poisons on failure and refuses once closed."""

import collections
import sys
import threading

import pytest

from meshcast import _fifo
from meshcast.errors import GroupAbortedError, InvalidUsage
from meshcast.work import Work

KINDS = ["python"] + (["compiled"] if _fifo._COMPILED_FIFO is not None else [])


def make(kind: str) -> _fifo.CallFifo:
    return _fifo.CallFifo("g") if kind == "python" else _fifo._COMPILED_FIFO("g")


@pytest.fixture(params=KINDS)
def fifo(request):
    f = make(request.param)
    yield f
    f.close()


def test_the_compiled_claim_is_built_where_ci_builds():
    # CI builds the helpers (setup.py build_ext): a missing one would silently leave
    # every tiny call 0.15-0.3 us slower
    assert _fifo._COMPILED_FIFO is not None
    assert type(_fifo.call_fifo("g")) is _fifo._COMPILED_FIFO


def test_a_claim_is_exclusive_until_left(fifo):
    assert fifo.enter_inline() is True
    assert fifo.enter_inline() is False
    fifo.leave_inline(None)
    assert fifo.enter_inline() is True
    fifo.leave_inline(None)


def test_a_failure_poisons_and_bad_usage_does_not(fifo):
    assert fifo.enter_inline()
    fifo.leave_inline(InvalidUsage("bad argument"))
    assert fifo.failure is None and fifo.enter_inline()
    boom = RuntimeError("boom")
    fifo.leave_inline(boom)
    assert fifo.failure is boom and not fifo.enter_inline()
    work = fifo.submit(lambda: 1, Work("later"), inline=True)
    with pytest.raises(GroupAbortedError, match="boom"):
        work.wait()


def test_no_claim_while_async_work_is_queued_or_running(fifo):
    gate, started = threading.Event(), threading.Event()

    def job():
        started.set()
        gate.wait(10)
        return "done"

    work = fifo.submit(job, Work("slow"), inline=False)
    assert started.wait(10)
    assert fifo.enter_inline() is False  # the worker runs it
    queued = fifo.submit(lambda: "next", Work("next"), inline=False)
    gate.set()
    assert work.wait() and work._result == "done"
    queued.wait()
    fifo.drain(10)
    assert fifo.enter_inline() is True
    fifo.leave_inline(None)


def test_a_closed_fifo_refuses(fifo):
    fifo.close()
    assert fifo.enter_inline() is False
    with pytest.raises(GroupAbortedError, match="destroyed"):
        fifo.submit(lambda: 1, Work("x"), inline=True).wait()


def test_the_worker_never_leaves_a_moment_to_claim(fifo):
    # The compiled claim checks "running" and "queued" without the FIFO's lock. The
    # worker pops a job, then runs it: were it to mark itself running only after the
    # pop, a claim at that moment would run a later call ahead of the popped one.
    # Probe that moment from inside the pop, as another thread would see it.
    claims: list[bool] = []

    class ProbingDeque(collections.deque):
        def popleft(self):
            item = super().popleft()
            claims.append(fifo.enter_inline())
            if claims[-1]:
                fifo.leave_inline(None)
            return item

    fifo._queue = ProbingDeque()
    works = [fifo.submit(lambda: None, Work(f"async {i}"), inline=False) for i in range(5)]
    for w in works:
        w.wait()
    assert claims == [False] * 5


@pytest.mark.timeout(60)
def test_sync_and_async_calls_run_in_call_order(fifo):
    log: list[int] = []
    works = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches as often as CPython allows
    try:
        for i in range(3000):
            if i % 3 == 2:
                fifo.call(lambda i=i: log.append(i), f"sync {i}")
            else:
                works.append(fifo.submit(lambda i=i: log.append(i), Work(f"async {i}"),
                                         inline=False))
        for w in works:
            w.wait()
    finally:
        sys.setswitchinterval(old)
    assert log == sorted(log) and len(log) == 3000
