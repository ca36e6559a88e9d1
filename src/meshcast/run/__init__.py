"""The launcher: ``meshcast run`` / ``python -m meshcast.run`` start, watch and stop a job.

``launch(LaunchConfig(...))`` does the same from Python. The launcher module is
imported on first use so that ``python -m meshcast.run.worker`` (each
worker's bootstrap) never finds itself imported before it runs as ``__main__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import LaunchConfig

if TYPE_CHECKING:
    from .launcher import launch

__all__ = ["LaunchConfig", "launch"]


def __getattr__(name: str) -> Any:
    if name == "launch":
        from .launcher import launch

        return launch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
