"""meshcast's visualizer: an animated guide to every primitive, drawn from the real schedules,
and the replay of a recorded run.

:mod:`.schedules` runs the registered algorithms in the simulator and keeps
what the animation needs; :mod:`.primitives` holds the cards' calls and
example numbers; :mod:`.page` writes the self-contained HTML; :mod:`.cli`
is ``meshcast viz``. For ``viz trace``: :mod:`.trace_data` reads a trace
directory into one timeline (matched collectives, messages, skew, busbw),
:mod:`.hang` finds where the ranks stopped agreeing, :mod:`.perfetto` writes
the merged Chrome trace and :mod:`.trace_page` the replay page.
"""

from __future__ import annotations

from .page import build_guide

__all__ = ["build_guide"]
