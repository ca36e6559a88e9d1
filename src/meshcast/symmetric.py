"""Symmetric buffers: arrays that live in shared memory from the start, at the same place on every rank.

``meshcast.empty(shape, dtype)`` is collective over a group: every member
gets an array of that shape, and every member can also see every other
member's array (the symmetric-memory idea of NVSHMEM, torch's
SymmetricMemory and MPI_Alloc_mem, applied to CPUs). Collectives on such
arrays skip the copy into the arena and back out: an all_reduce reads each
peer's data where it lies, reduces its 1/P share, and writes that share
straight into every rank's array.

Theory of operation
-------------------
Each allocation is one memfd segment holding the P arrays side by side
(page aligned), created by group rank 0 and attached by the others through
the group's store, like an arena (transport/segment.py: nothing is ever left
in /dev/shm). The group keeps every allocation mapped until it is destroyed.

A collective takes the symmetric path only when every rank passes the same
region (same allocation, same offset): the region is part of the call's
fingerprint, so a rank that passes a plain array while another passes a
symmetric one gets a MismatchError instead of a torn result.

Synchronisation, for a call with sequence number ``s`` (arena signal words,
transport/arena.py): entering ``(s, 0)`` publishes "my input is in my part";
during the call rank r writes only the bytes of its share, in every part;
``(s, 1)`` publishes "my share is written everywhere and I read nothing
more". A rank returns once it saw ``(s, 1)`` from everyone, so when its
caller writes the array again nobody still reads or writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .transport.segment import Segment

_PAGE = 4096


@dataclass
class Allocation:
    """One symmetric allocation of a group: P equal parts of one segment."""

    index: int  # allocation number within the group (the same on every rank)
    segment: Segment
    part_bytes: int  # bytes of each rank's part (page aligned)
    size: int  # group size
    rank: int  # my group rank

    def part(self, r: int) -> np.ndarray:
        return self.segment.bytes[r * self.part_bytes:(r + 1) * self.part_bytes]

    @property
    def my_range(self) -> tuple[int, int]:
        start = self.segment.address + self.rank * self.part_bytes
        return start, start + self.part_bytes


@dataclass(frozen=True)
class Region:
    """Where a contiguous buffer lies in a symmetric allocation (the same on every rank)."""

    alloc: Allocation
    offset: int  # bytes from the start of each part

    @property
    def key(self) -> tuple[int, int]:
        return self.alloc.index, self.offset

    def views(self, nbytes: int, dtype: np.dtype) -> list[np.ndarray]:
        """Every rank's copy of the region, in group-rank order."""
        return [self.alloc.part(r)[self.offset:self.offset + nbytes].view(dtype)
                for r in range(self.alloc.size)]


class SymmetricHeap:
    """A group's symmetric allocations, and the lookup collectives use to recognise them."""

    def __init__(self, group_rank: int, size: int) -> None:
        self.rank = group_rank
        self.size = size
        self.allocations: list[Allocation] = []

    def allocate(self, nbytes: int, store: Any, key: str, barrier: Any) -> Allocation:
        """Collective over the group: map a new allocation with a part of ``nbytes`` per rank.

        ``barrier(name)`` must return once every member called it with ``name``.
        """
        part = max(_PAGE, (nbytes + _PAGE - 1) // _PAGE * _PAGE)
        index = len(self.allocations)
        name = f"{key}/sym{index}"
        if self.size == 1:
            segment = Segment.create(f"sym{index}", part)
            segment.seal()
        else:
            if self.rank == 0:
                segment = Segment.create(f"sym{index}", part * self.size, populate=True)
                store.set(f"{name}/segment", segment.locator)
            else:
                segment = Segment.attach(store.get(f"{name}/segment").decode(), populate=True)
            try:
                barrier(f"{name}/attached")
            finally:
                if self.rank == 0:
                    segment.seal()
        alloc = Allocation(index, segment, part, self.size, self.rank if self.size > 1 else 0)
        self.allocations.append(alloc)
        return alloc

    def find(self, flat: np.ndarray) -> Region | None:
        """The region ``flat`` occupies, if it lies entirely in my part of an allocation."""
        if not self.allocations or flat.nbytes == 0 or not flat.flags.c_contiguous:
            return None
        address = flat.__array_interface__["data"][0]  # (ctypes.data costs a microsecond)
        for alloc in self.allocations:
            start, end = alloc.my_range
            if start <= address and address + flat.nbytes <= end:
                return Region(alloc, address - start)
        return None

    def close(self) -> None:
        for alloc in self.allocations:
            alloc.segment.close()
        self.allocations.clear()
