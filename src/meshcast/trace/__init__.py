"""What really ran: per-rank records of every call (``MESHCAST_TRACE=DIR``).

``records`` defines the file format and reads it back; ``recorder`` writes it
(attached to every group when the knob is set, absent otherwise).
"""

from .records import VERSION, RankTrace, calls_by_key, file_name, read_dir, read_rank

__all__ = ["VERSION", "RankTrace", "calls_by_key", "file_name", "read_dir", "read_rank"]
