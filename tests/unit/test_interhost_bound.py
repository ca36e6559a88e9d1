"""A call's binding of an inter-host communicator (transport.interhost.Bound): the compiled
row-swap runner a fused all_to_all plan keeps from call to call."""

from __future__ import annotations

import numpy as np
import pytest

from meshcast.errors import TransportError
from meshcast.transport.interhost import Bound, HostComm


class _Engine(HostComm):
    """An engine whose compiled runner records each call's probe, or raises ``error``."""

    engine = "fake"

    def __init__(self, error: BaseException | None = None) -> None:
        super().__init__([0, 1], 0, "hosts")
        self.error = error
        self.calls: list[tuple[int, int | None]] = []
        self.made = 0

    def _swap_runner(self, step):
        self.made += 1

        def run(buffers, me, probe):
            if self.error is not None:
                raise self.error
            self.calls.append((me, probe))
            return 0, None

        return run


def test_swap_runner_is_none_where_the_engine_has_no_compiled_swap():
    assert Bound(HostComm([0, 1], 0, "hosts"), 1e9, "all_to_all #1").swap_runner(None) is None


def test_swap_runner_reads_each_calls_probe_so_a_plan_may_keep_it():
    engine = _Engine()
    bound = Bound(engine, 1e9, "all_to_all #1")
    runner = bound.swap_runner(object())
    buffers = [np.zeros(1, np.uint8)] * 5
    bound.probe = 5
    assert runner(buffers, 1) == (0, None)
    bound.probe = 7
    assert runner(buffers, 1) == (0, None)
    assert engine.calls == [(1, 5), (1, 7)] and engine.made == 1


def test_swap_runner_makes_the_engines_error_ours_naming_the_call():
    engine = _Engine(RuntimeError("connection reset by peer"))
    bound = Bound(engine, 1e9, "all_to_all #4")
    runner = bound.swap_runner(object())
    bound.what = "all_to_all #5"  # the binding is the next call's now
    with pytest.raises(TransportError, match=r"all_to_all #5: the fake engine .*connection reset"):
        runner([np.zeros(1, np.uint8)] * 5, 0)
    assert engine.failed


def test_swap_runner_lets_our_own_errors_through_unchanged():
    ours = TransportError("already explained")
    runner = Bound(_Engine(ours), 1e9, "all_to_all #1").swap_runner(object())
    with pytest.raises(TransportError) as info:
        runner([np.zeros(1, np.uint8)] * 5, 0)
    assert info.value is ours
