"""Sending a test's call down the group's general path.

The tiny-call lane (meshcast.lanes) takes exact ``numpy.ndarray`` objects and
plain torch CPU tensors only, and arrays that are not C-contiguous through a
contiguous copy of theirs; anything else goes to the group's general path. A
test that mixes ranks on the lane with ranks on the general path (to check
that the two meet, hand calls over and raise alike) passes the latter an array
viewed as :class:`GeneralPathArray`: the same memory, which the lane declines.
"""

from __future__ import annotations

import numpy as np


class GeneralPathArray(np.ndarray):
    """An ndarray view the tiny-call lane declines (it is not an exact ndarray)."""


def general_path(a: np.ndarray) -> GeneralPathArray:
    """``a`` (the same memory, shape and strides) as an array the lane declines, so that
    a call given it runs on the group's general path."""
    return a.view(GeneralPathArray)


__all__ = ["GeneralPathArray", "general_path"]
