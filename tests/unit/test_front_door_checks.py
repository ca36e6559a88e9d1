"""The front door's checks that share one rule with the layer below (_api vs _select, small_calls).

In-process: these checks run before anything is sent, so they need no world.
"""

from __future__ import annotations

import pytest

from meshcast import _api, small_calls
from meshcast.errors import InvalidUsage


def test_front_door_and_p2p_lane_share_one_tag_range():
    assert _api.TAGS is small_calls.TAGS
    lo, hi = small_calls.TAGS
    assert _api._tag(lo, "send") == lo and _api._tag(hi - 1, "send") == hi - 1
    for bad in (lo - 1, hi):
        with pytest.raises(InvalidUsage, match=r"'tag' must be an int in \["):
            _api._tag(bad, "send")
