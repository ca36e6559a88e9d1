"""The emulated-hosts harness, for this folder's tests: :mod:`meshcast.testing.emuhosts`.

The harness moved into the package so that ``meshcast bench --hosts`` can use it
(the package never imports from tests/); this module keeps the old import path
(``from .hosts import EmulatedHosts, run_job``, ``import hosts`` with this folder on
sys.path) working. Patch private helpers on ``meshcast.testing.emuhosts`` itself.
"""

from meshcast.testing.emuhosts import *  # noqa: F403 - the whole public API, as before
from meshcast.testing.emuhosts import __all__  # noqa: F401
