"""Collective algorithms as schedules: one module per collective, registered by name.

Importing this package imports every collective module so that their
``@register`` decorators run; :mod:`._registry` then lists them, and
:mod:`._select` picks one per call. See :mod:`._plan` for the schedule
vocabulary and :mod:`._simulate` for running any schedule in memory.
"""

from __future__ import annotations

from . import (  # noqa: F401  (imported for their registrations)
    all_gather,
    all_reduce,
    all_to_all,
    barrier,
    broadcast,
    gather,
    reduce,
    reduce_scatter,
    scatter,
)
from ._registry import AlgorithmEntry, entries, get, listing, names, register

__all__ = ["AlgorithmEntry", "entries", "get", "listing", "names", "register"]
