"""The ssh stand-in for emulated hosts: :mod:`meshcast.testing.fake_ssh` (moved into the
package with the harness; this keeps ``from . import fake_ssh`` working for the tests)."""

from meshcast.testing.fake_ssh import main, parse  # noqa: F401
