"""The waiting policy: spin only when every rank of the host can have a core."""

from __future__ import annotations

import os

import pytest

from meshcast._wait import WaitSpec


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def test_no_spin_with_more_ranks_than_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MESHCAST_SPIN_US", raising=False)
    spec = WaitSpec()
    assert spec.spin_s == pytest.approx(50e-6)
    spec.share_cores(_cores() + 1)
    assert spec.spin_s == 0.0
    spec.share_cores(1)  # a later, smaller world spins again
    assert spec.spin_s == pytest.approx(50e-6)


def test_an_explicit_spin_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHCAST_SPIN_US", "7")
    spec = WaitSpec()
    spec.share_cores(_cores() + 4)
    assert spec.spin_s == pytest.approx(7e-6)
