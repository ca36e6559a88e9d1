"""Shared test settings: every test has a timeout (pytest-timeout, see pyproject)."""

import os

# Tests run 4-8 ranks on 2 cores: keep the spin phase short so waiters yield quickly.
os.environ.setdefault("MESHCAST_SPIN_US", "20")
