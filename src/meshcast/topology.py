"""Pure rank math: rings, binomial trees, recursive doubling/halving with fold, dissemination, Bruck.

Every function here is a pure function of small integers, so the algorithms
stay short and this module can be tested exhaustively (tests/unit/test_topology.py
checks every size up to 64).

Conventions
-----------
* ``rank``/``size`` are group-local. Rooted trees are built on *relative*
  ranks ``v = (rank - root) % size`` so the root is always ``v = 0``;
  :func:`relative` and :func:`absolute` convert.
* Binomial trees are the MPICH shape: ``v``'s subtree is the relative range
  ``[v, v + lowbit(v))`` (clipped to ``size``), so a subtree is contiguous in
  relative order, which is what gather/scatter with uneven counts need.
  Rounds run from the largest mask down when data flows from the root
  (broadcast, scatter) and from the smallest up when it flows to it (reduce,
  gather): in "down" round ``k`` the mask is ``2**(L-1-k)`` with
  ``L = ceil_log2(size)``.
* Recursive doubling/halving on ``size`` that is not a power of two *folds*
  first (MPICH's scheme): with ``pof2 = pow2_floor(size)`` and
  ``rem = size - pof2``, the even ranks below ``2*rem`` hand their data to
  the odd neighbour and sit out; the remaining ``pof2`` ranks get
  *new ranks* ``0..pof2-1`` (``rank // 2`` below ``2*rem``, ``rank - rem``
  above). New rank ``i`` stands for the absolute ranks of
  :func:`unfold_range` ``(i, i + 1)``, a contiguous range, so a block of new
  ranks is always a contiguous block of absolute ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

# ------------------------------------------------------------------ integers


def is_pow2(n: int) -> bool:
    """True for 1, 2, 4, 8, ..."""
    return n > 0 and n & (n - 1) == 0


def ceil_log2(n: int) -> int:
    """Smallest ``k`` with ``2**k >= n`` (0 for ``n <= 1``)."""
    return 0 if n <= 1 else (n - 1).bit_length()


def pow2_floor(n: int) -> int:
    """Largest power of two ``<= n`` (``n >= 1``)."""
    if n < 1:
        raise ValueError(f"pow2_floor needs n >= 1, got {n}")
    return 1 << (n.bit_length() - 1)


def lowbit(v: int) -> int:
    """Lowest set bit of ``v`` (``v > 0``): 12 -> 4."""
    return v & -v


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ``a`` and positive ``b``."""
    return -(-a // b)


def chunks(n: int, chunk: int) -> list[tuple[int, int]]:
    """Split ``n`` elements into ``(start, length)`` pieces of at most ``chunk`` (empty for 0)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    return [(start, min(chunk, n - start)) for start in range(0, n, chunk)]


def intersect(a_lo: int, a_hi: int, b_lo: int, b_hi: int) -> tuple[int, int]:
    """Intersection of half-open ranges as ``(lo, hi)`` with ``hi >= lo`` (empty -> ``hi == lo``)."""
    lo = max(a_lo, b_lo)
    return lo, max(lo, min(a_hi, b_hi))


# --------------------------------------------------------------------- ring


def ring_neighbours(rank: int, size: int) -> tuple[int, int]:
    """``(left, right)``: the ranks this one receives from and sends to around the ring."""
    return (rank - 1) % size, (rank + 1) % size


def rotation(rank: int, size: int) -> list[int]:
    """``rank, rank+1, ..., rank-1`` (mod size): readers that start at different ranks
    spread the load over the ranks they read from."""
    return [(rank + i) % size for i in range(size)]


_LINE = 64  # bytes of a cache line


def share(count: int, itemsize: int, rank: int, size: int) -> tuple[int, int]:
    """Element range ``[lo, hi)`` rank ``rank`` reduces: 1/size of ``count``, in whole
    cache lines so that two ranks never write the same line (the single-copy and
    symmetric all_reduce, and their schedules in algorithms/all_reduce.py)."""
    unit = max(1, _LINE // itemsize)
    blocks = -(-count // unit)
    lo = min(count, blocks * rank // size * unit)
    hi = min(count, blocks * (rank + 1) // size * unit)
    return lo, hi


# --------------------------------------------------------------- relativity


def relative(rank: int, root: int, size: int) -> int:
    """Rank as seen from ``root`` (the root is 0)."""
    return (rank - root) % size


def absolute(vrank: int, root: int, size: int) -> int:
    """Inverse of :func:`relative`."""
    return (vrank + root) % size


def wrap_split(lo: int, hi: int, size: int) -> list[tuple[int, int]]:
    """Split the cyclic range ``[lo, hi)`` (``0 <= lo <= hi <= lo + size``, ``lo < size``) at ``size``.

    Returns one or two ``(lo, hi)`` ranges inside ``[0, size)`` in cyclic
    order; used to place a subtree's relative range into absolute rank order.

    Example: ``wrap_split(3, 6, 5) == [(3, 5), (0, 1)]``.
    """
    if hi <= size:
        return [(lo, hi)]
    return [(lo, size), (0, hi - size)]


# ------------------------------------------------------------ binomial tree


def binomial_subtree(v: int, size: int) -> tuple[int, int]:
    """Relative range ``[v, hi)`` of the subtree rooted at relative rank ``v``."""
    span = 1 << ceil_log2(size) if v == 0 else lowbit(v)
    return v, min(v + span, size)


def binomial_parent(v: int) -> int:
    """Relative parent of relative rank ``v > 0`` (clear its lowest set bit)."""
    if v <= 0:
        raise ValueError("the root (relative rank 0) has no parent")
    return v - lowbit(v)


def binomial_children(v: int, size: int) -> list[int]:
    """Relative children of ``v``, farthest first (the order a broadcast serves them)."""
    span = 1 << ceil_log2(size) if v == 0 else lowbit(v)
    out = []
    mask = span >> 1
    while mask:
        if v + mask < size:
            out.append(v + mask)
        mask >>= 1
    return out


def binomial_down_round(v: int, size: int) -> int:
    """Round (0-based, root-to-leaves order) in which relative rank ``v > 0`` receives.

    In down round ``k`` the parents ``v % 2m == 0`` send to ``v + m`` with
    ``m = 2**(L-1-k)``; ``v`` is reached when ``m == lowbit(v)``.
    """
    return ceil_log2(size) - 1 - (lowbit(v).bit_length() - 1)


def binomial_down_edges(k: int, size: int) -> list[tuple[int, int]]:
    """``(parent, child)`` relative pairs active in down round ``k``."""
    m = 1 << (ceil_log2(size) - 1 - k)
    return [(v, v + m) for v in range(0, size, 2 * m) if v + m < size]


# ------------------------------------------------------- recursive doubling


@dataclass(frozen=True)
class Fold:
    """Where a rank stands in the non-power-of-two fold of recursive doubling/halving.

    Attributes:
        pof2: the power of two that takes part in the main phase.
        rem: ``size - pof2``; ranks below ``2*rem`` are paired in the fold.
        newrank: rank among the ``pof2`` participants, or -1 if folded out.
        partner: the other rank of the fold pair, or -1 if not paired.
    """

    pof2: int
    rem: int
    newrank: int
    partner: int

    @property
    def active(self) -> bool:
        """Takes part in the power-of-two phase."""
        return self.newrank >= 0


def fold(rank: int, size: int) -> Fold:
    """Fold ``rank`` of ``size`` onto a power of two.

    Example (size 6: pof2 4, rem 2): ranks 0 and 2 fold into 1 and 3; the
    participants are 1, 3, 4, 5 with new ranks 0, 1, 2, 3.
    """
    pof2 = pow2_floor(size)
    rem = size - pof2
    if rank < 2 * rem:
        if rank % 2 == 0:
            return Fold(pof2, rem, -1, rank + 1)
        return Fold(pof2, rem, rank // 2, rank - 1)
    return Fold(pof2, rem, rank - rem, -1)


def unfold_rank(newrank: int, size: int) -> int:
    """Absolute rank that carries ``newrank`` in the power-of-two phase."""
    rem = size - pow2_floor(size)
    return 2 * newrank + 1 if newrank < rem else newrank + rem


def unfold_range(lo: int, hi: int, size: int) -> tuple[int, int]:
    """Absolute ranks ``[a, b)`` whose data new ranks ``[lo, hi)`` hold (contiguous)."""
    rem = size - pow2_floor(size)

    def first(newrank: int) -> int:
        return 2 * newrank if newrank < rem else newrank + rem

    return first(lo), first(hi) if hi > lo else first(lo)


def doubling_partners(newrank: int, pof2: int) -> list[int]:
    """Partners of ``newrank`` in recursive doubling: ``newrank ^ 1, ^ 2, ^ 4, ...``."""
    return [newrank ^ (1 << k) for k in range(ceil_log2(pof2))]


def doubling_block(newrank: int, k: int) -> tuple[int, int]:
    """New-rank range ``newrank`` holds *before* doubling step ``k`` (mask ``2**k``)."""
    m = 1 << k
    lo = newrank & ~(m - 1)
    return lo, lo + m


@dataclass(frozen=True)
class HalvingStep:
    """One step of recursive halving, in new ranks.

    ``newrank`` exchanges with ``partner``: it sends the half ``[send_lo,
    send_hi)`` of its current range and keeps reducing ``[keep_lo, keep_hi)``.
    """

    partner: int
    keep_lo: int
    keep_hi: int
    send_lo: int
    send_hi: int


def halving_steps(newrank: int, pof2: int) -> list[HalvingStep]:
    """Recursive-halving steps of ``newrank`` among ``pof2`` ranks (largest distance first).

    After the last step ``newrank`` keeps exactly ``[newrank, newrank + 1)``.

    Example (pof2 4, newrank 1): partner 3 keeps [0, 2) sends [2, 4);
    then partner 0 keeps [1, 2) sends [0, 1).
    """
    lo, hi = 0, pof2
    out = []
    m = pof2 >> 1
    while m:
        mid = lo + m
        if newrank < mid:
            out.append(HalvingStep(newrank + m, lo, mid, mid, hi))
            hi = mid
        else:
            out.append(HalvingStep(newrank - m, mid, hi, lo, mid))
            lo = mid
        m >>= 1
    return out


# ------------------------------------------------------------ dissemination


def dissemination_peers(rank: int, size: int) -> list[tuple[int, int]]:
    """``(send_to, recv_from)`` per round of a dissemination barrier (``ceil_log2(size)`` rounds)."""
    return [((rank + (1 << k)) % size, (rank - (1 << k)) % size) for k in range(ceil_log2(size))]


# --------------------------------------------------------------------- Bruck


def bruck_blocks(size: int, k: int) -> list[tuple[int, int]]:
    """Runs ``(first, stop)`` of block indices with bit ``k`` set, below ``size``.

    In Bruck step ``k`` these blocks travel distance ``2**k``.
    Example: ``bruck_blocks(7, 1) == [(2, 4), (6, 7)]``.
    """
    m = 1 << k
    return [(lo, min(lo + m, size)) for lo in range(m, size, 2 * m)]


def bruck_peers(rank: int, size: int, k: int) -> tuple[int, int]:
    """``(send_to, recv_from)`` of Bruck step ``k``."""
    return (rank + (1 << k)) % size, (rank - (1 << k)) % size


__all__ = [
    "Fold",
    "HalvingStep",
    "absolute",
    "binomial_children",
    "binomial_down_edges",
    "binomial_down_round",
    "binomial_parent",
    "binomial_subtree",
    "bruck_blocks",
    "bruck_peers",
    "ceil_div",
    "ceil_log2",
    "chunks",
    "dissemination_peers",
    "doubling_block",
    "doubling_partners",
    "fold",
    "halving_steps",
    "intersect",
    "is_pow2",
    "lowbit",
    "pow2_floor",
    "relative",
    "ring_neighbours",
    "share",
    "unfold_range",
    "unfold_rank",
    "wrap_split",
]
