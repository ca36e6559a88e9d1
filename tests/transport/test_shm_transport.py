"""Conformance of the shared-memory point-to-point engine (``src/meshcast/transport/shm.py``,
single-copy reads in ``transport/cma.py``), driven directly on real processes.

The checks are in ``checks.py`` (``SHM_CHECKS``); this file runs each on its own
world and looks at what the ranks report. The collectives built on this engine are
tested in ``tests/collectives``, the public send/recv API in
``tests/runtime/test_p2p.py``.
"""

from __future__ import annotations

import pytest

from . import checks

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("check", checks.SHM_CHECKS, ids=checks.name)
def test_conformance(check):
    out = checks.run_world(check)
    if isinstance(out[0], str) and out[0].startswith("skip:"):
        pytest.skip(out[0][5:])


def test_size_mismatch_names_both_sizes():
    out = checks.run_world(_by_name("check_size_mismatch_is_an_error"))
    ring, single = out[1].split(" | ")
    assert "100 bytes" in ring and "50 bytes" in ring, ring
    assert "8192 bytes" in single and "4096 bytes" in single, single


def _by_name(fn_name: str) -> checks.Check:
    return next(c for c in checks.SHM_CHECKS if c.fn.__name__ == fn_name)
