"""Sending a test's call down the group's general path.

The tiny-call lane (meshcast.lanes) takes exact ``numpy.ndarray`` objects and
plain torch CPU tensors only, and arrays that are not C-contiguous through a
contiguous copy of theirs; anything else goes to the group's general path. A
test that mixes ranks on the lane with ranks on the general path (to check
that the two meet, hand calls over and raise alike) passes the latter an array
viewed as :class:`GeneralPathArray`: the same memory, which the lane declines.
:func:`plans_built` tells which call shapes the lane planned meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np


class GeneralPathArray(np.ndarray):
    """An ndarray view the tiny-call lane declines (it is not an exact ndarray)."""


def general_path(a: np.ndarray) -> GeneralPathArray:
    """``a`` (the same memory, shape and strides) as an array the lane declines, so that
    a call given it runs on the group's general path."""
    return a.view(GeneralPathArray)


@contextlib.contextmanager
def plans_built(lane: Any = None) -> Iterator[list[tuple]]:
    """Within the block, the keys of the plans ``lane`` (default: the world's tiny-call
    lane) builds, in order: a key it already holds is not built again."""
    if lane is None:
        from .. import _world

        lane = _world.default_lane
    built: list[tuple] = []
    plan = lane._plan

    def counting(key: tuple, *args: Any) -> Any:
        if key not in lane.plans:
            built.append(key)
        return plan(key, *args)

    lane._plan = counting  # (an instance attribute: the lane's own calls find it)
    try:
        yield built
    finally:
        del lane._plan


__all__ = ["GeneralPathArray", "general_path", "plans_built"]
