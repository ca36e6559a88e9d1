"""The rows of the across-hosts agreement (:mod:`meshcast.spanning`): their format, in one place.

Every call of a group that spans hosts starts with an exchange of one row per
rank: the packed fingerprint, the rank's piece size, an aux word, the length
of the payload the row carries (-1: none), then that payload. A row is as long
as its payload makes it, so readers walk the rows by their own lengths.
:class:`~meshcast.spanning.HostSpanningGroup` writes and reads them on its
general path, :class:`~meshcast.spanning_lane.AcrossHostsLane` on its cached one.
"""

from __future__ import annotations

import struct
from typing import Any

from ._fingerprint import SIZE as FP_SIZE

#: One rank's row in the agreement exchange: the packed fingerprint, this rank's piece
#: size, an aux word (a crc32), the size of the payload it carries (-1: none), then the
#: payload. A row is as long as its payload makes it (CELL bytes without one).
_WORDS = struct.Struct("<qIi")
CELL = FP_SIZE + _WORDS.size  # 48
_CARRIED = struct.Struct("<i")  # the words' last field, read alone to walk the rows
CARRIED_AT = FP_SIZE + _WORDS.size - _CARRIED.size
#: How a row says its length to a transport that forwards rows it cannot parse
#: (``MpiComm.exchange_rows``): CELL bytes, plus the int32 at CARRIED_AT when positive.
ROW_LENGTH = (CELL, CARRIED_AT)
#: A call whose every rank's data fits in its row (up to the route's
#: ``algorithms.hierarchical.EAGER_BYTES``: an 8 B all_reduce, a small broadcast...) is
#: *eager*: its data rides in the agreement exchange, so it crosses hosts once instead of
#: twice. A group's rows are then at most ``CELL`` plus the route's largest cap
#: (``EAGER_BROADCAST_BYTES``: a broadcast's root alone carries data) bytes long.


def _row_length(buf: Any, at: int) -> int:
    """Bytes of the agreement row at ``buf[at:]``: its cell, plus the payload it carries."""
    return CELL + max(_CARRIED.unpack_from(buf, at + CARRIED_AT)[0], 0)


__all__ = ["CELL", "ROW_LENGTH"]
