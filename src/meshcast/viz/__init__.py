"""meshcast's visualizer: an animated guide to every primitive, drawn from the real schedules.

:mod:`.schedules` runs the registered algorithms in the simulator and keeps
what the animation needs; :mod:`.primitives` holds the cards' calls and
example numbers; :mod:`.page` writes the self-contained HTML; :mod:`.cli`
is ``meshcast viz``.
"""

from __future__ import annotations

from .page import build_guide

__all__ = ["build_guide"]
