"""The engines that move bytes: shared memory inside a host (arena, rings, cma), MPI and
Gloo between hosts."""

from __future__ import annotations

import importlib
from typing import Any

from .. import config


def compiled_helper(name: str) -> Any:
    """The compiled helper ``transport/<name>.c`` as a module (``"_tiny"``, ``"_rings"``,
    ``"_mpi_rows"``), or None: not built (no C compiler at install), or turned off with
    MESHCAST_COMPILED=0."""
    if not config.get("MESHCAST_COMPILED"):
        return None
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError:
        return None
