"""Conformance of a group's arena (``src/meshcast/transport/arena.py``): entry and
fingerprints, mismatch and abort, the one-shot regions, and what a timeout says,
driven directly on real processes. Its compiled round (``transport/_tiny.c``) is
tested in one process in ``test_compiled_round.py``.

The checks are in ``checks.py`` (``ARENA_CHECKS``); this file runs each on its own
world and compares what the ranks report.
"""

from __future__ import annotations

import pytest

from . import checks

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("check", checks.ARENA_CHECKS, ids=checks.name)
def test_conformance(check):
    checks.run_world(check)


def test_a_mismatch_reads_the_same_on_every_rank():
    out = checks.run_world(_by_name("check_a_fingerprint_mismatch_is_the_same_error_on_every_rank"))
    assert len(set(out)) == 1, out
    assert "MAX" in out[0] and "SUM" in out[0], out[0]


def _by_name(fn_name: str) -> checks.Check:
    return next(c for c in checks.ARENA_CHECKS if c.fn.__name__ == fn_name)
