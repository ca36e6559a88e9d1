"""Fixtures for tests that run jobs on emulated hosts (see hosts.py).

Every test in this folder needs root and iproute2. Where they are missing the tests are
skipped, unless ``MESHCAST_REQUIRE_MULTIHOST=1`` (CI sets it): then they fail, saying what
is missing. ``MESHCAST_EMUHOSTS_PREFIX`` changes the names' prefix (default "mct"), e.g.
to run two test sessions on one machine at once.

    def test_something(two_hosts):                  # module-scoped, 2 hosts
        r = run_job(two_hosts, "torchrun", 2, [script])
        assert r.ok, r.describe()

    def test_other(emulated_hosts):                 # factory, module-scoped
        hosts = emulated_hosts(3, rate="1gbit")
"""

from __future__ import annotations

import os

import pytest

from meshcast.testing.emuhosts import TermAsInterrupt

from .hosts import EmulatedHosts, requirements_problem

REQUIRE_ENV = "MESHCAST_REQUIRE_MULTIHOST"
PREFIX = os.environ.get("MESHCAST_EMUHOSTS_PREFIX", "mct")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "multihost: runs jobs on emulated hosts (network namespaces; needs root)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(pytest.mark.multihost)


def _check_requirements() -> None:
    problem = requirements_problem()
    if problem is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {problem}", pytrace=False)
    pytest.skip(f"{problem} (set {REQUIRE_ENV}=1 to make this a failure)")


@pytest.fixture(autouse=True)
def _multihost_requirements() -> None:
    """Skip (or, under MESHCAST_REQUIRE_MULTIHOST=1, fail) where hosts cannot be made."""
    _check_requirements()


@pytest.fixture(scope="module")
def emulated_hosts():
    """Factory ``emulated_hosts(n, rate=None, **kw) -> EmulatedHosts`` (already up).

    Each call makes a new set with a prefix of its own ("mct", "mct1", ...); all are
    torn down when the module's tests are done, whatever happened in them.
    """
    _check_requirements()
    made: list[EmulatedHosts] = []

    def make(n: int = 2, rate: str | None = None, **kw: object) -> EmulatedHosts:
        prefix = PREFIX if not made else f"{PREFIX}{len(made)}"
        hosts = EmulatedHosts(n, rate=rate, prefix=prefix, **kw)  # type: ignore[arg-type]
        hosts.up()  # removes what it made if it fails; never touches a live owner's hosts
        made.append(hosts)
        return hosts

    with TermAsInterrupt():
        try:
            yield make
        finally:
            errors = []
            for hosts in reversed(made):
                try:
                    hosts.down()
                except Exception as e:  # noqa: BLE001 - tear down the others too
                    errors.append(e)
            if errors:
                raise errors[0]


@pytest.fixture(scope="module")
def two_hosts(emulated_hosts) -> EmulatedHosts:
    """Two emulated hosts, shared by the module's tests."""
    return emulated_hosts(2)
