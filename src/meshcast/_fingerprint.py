"""What a collective call looks like from one rank, packed small enough to compare on every call.

Every collective gets a fingerprint ``(seq, kind, dtype, op, root, count,
extra)``. Ranks publish theirs when they enter the call and compare them
all, so a disagreement (rank 0 broadcasts while rank 1 all-reduces; shapes,
dtypes, ops or roots differ) becomes the same :class:`MismatchError` text on
every rank. ``extra`` is a hash of whatever else must agree (per-rank counts
of an uneven all_gather, for example).
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import MismatchError

KINDS = (
    "barrier", "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
    "reduce_scatter", "all_to_all", "new_group",
)
DTYPES = (
    "none", "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "bytes",
)
OPS = ("none", "SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
REDUCING = ("reduce", "all_reduce", "reduce_scatter")
_ROOT_LAYOUT = ("gather", "scatter")  # kinds whose ``extra`` only the root fills in

_STRUCT = struct.Struct("<QBBBBiQQ")
_KIND_CODE = {k: i for i, k in enumerate(KINDS)}
_DTYPE_CODE = {k: i for i, k in enumerate(DTYPES)}
_OP_CODE = {k: i for i, k in enumerate(OPS)}


SYMMETRIC_PATH = 255  # path byte of a call on a symmetric buffer (its region is in ``extra``)


def symmetric_extra(index: int, offset: int) -> int:
    """``extra`` of a call on symmetric allocation ``index`` at byte ``offset``: exact, so
    two ranks passing different regions always disagree."""
    return ((index + 1) << 40) | offset


@functools.lru_cache(maxsize=256)
def path_digest(algorithm: str | None, oneshot: bool) -> int:
    """One byte that differs when ranks would run a call differently (0: the default path).

    A forced ``algorithm=`` on one rank but not another, or a rank taking the
    one-shot path while another does not, would otherwise exchange data in
    incompatible layouts; with this byte in the fingerprint it is a MismatchError.
    """
    if algorithm is None and not oneshot:
        return 0
    return (zlib.crc32(f"{algorithm}|{oneshot}".encode()) % 254) + 1


SIZE = _STRUCT.size


def counts_hash(counts: Sequence[int] | None) -> int:
    """A stable 32-bit digest of a tuple of counts (0 for None)."""
    if not counts:
        return 0
    return zlib.crc32(struct.pack(f"<{len(counts)}q", *counts)) or 1


@dataclass(frozen=True)
class Fingerprint:
    seq: int
    kind: str
    dtype: str = "none"
    op: str = "none"
    root: int = -1
    count: int = 0
    extra: int = 0
    path: int = 0  # digest of how the call runs (forced algorithm, one-shot or not)

    def pack(self) -> bytes:
        return _STRUCT.pack(self.seq, _KIND_CODE[self.kind], _DTYPE_CODE[self.dtype],
                            _OP_CODE[self.op], self.path, self.root, self.count, self.extra)

    @classmethod
    def unpack(cls, raw: bytes) -> Fingerprint:
        seq, kind, dtype, op, path, root, count, extra = _STRUCT.unpack(raw)
        return cls(seq, KINDS[kind], DTYPES[dtype], OPS[op], root, count, extra, path)

    def describe(self) -> str:
        """``all_reduce(dtype=float32, count=4, op=SUM)`` style text."""
        parts = [f"dtype={self.dtype}"] if self.dtype != "none" else []
        if self.kind not in ("barrier", "new_group"):
            parts.append(f"count={self.count}")
        if self.kind in REDUCING:
            parts.append(f"op={self.op}")
        if self.kind in ROOTED:
            parts.append(f"root={self.root}")
        if self.path == SYMMETRIC_PATH:
            index, offset = (self.extra >> 40) - 1, self.extra & ((1 << 40) - 1)
            parts.append(f"symmetric buffer #{index} at byte {offset}")
            return f"{self.kind}({', '.join(parts)})"
        if self.extra:
            parts.append(f"layout#{self.extra:08x}")
        if self.path == path_digest(None, True):
            parts.append("one-shot path")
        elif self.path:
            parts.append(f"path#{self.path:02x}")
        return f"{self.kind}({', '.join(parts)})"


def compare(fingerprints: Sequence[Fingerprint], group_ranks: Sequence[int], what: str) -> None:
    """Raise MismatchError (same text on every rank) unless all fingerprints agree.

    Args:
        fingerprints: one per group rank, in group-rank order.
        group_ranks: the global rank of each group rank (for the message).
        what: the group's name, for the message.
    """
    # A gather's or scatter's extra is the root's alone (its list's layout, checked on its
    # own): left in, the text would depend on whether the rank writing it called a rooted
    # collective itself, where every rank must write the same.
    fingerprints = [dataclasses.replace(fp, extra=0) if fp.kind in _ROOT_LAYOUT else fp
                    for fp in fingerprints]
    first = fingerprints[0]
    if all(fp == first for fp in fingerprints[1:]):
        return
    seq = max(fp.seq for fp in fingerprints)
    calls: dict[Fingerprint, list[int]] = {}
    for r, fp in enumerate(fingerprints):
        if 0 <= fp.root < len(group_ranks):  # roots by global rank, as the ranks are
            fp = dataclasses.replace(fp, root=group_ranks[fp.root])
        calls.setdefault(fp, []).append(group_ranks[r])
    lines = [f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} called "
             f"{fp.describe()}" for fp, rs in calls.items()]
    raise MismatchError(
        f"collective #{seq} on {what}: ranks disagree about the call: " + "; ".join(lines)
    )
