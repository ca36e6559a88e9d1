"""nccl-tests' definitions, one row per collective: buffer counts, in-place layout, bus bandwidth.

Everything here is copied from nccl-tests so that meshcast's figures read
like theirs (``src/<coll>.cu``: ``*GetCollByteCount`` and ``*GetBw``;
``doc/PERFORMANCE.md``). For a sweep size ``size`` in bytes and
``count = size // typesize``:

=============== ================================ ==================== ============
collective      per-rank buffers (elements)      algbw = S / t, S =   busbw factor
=============== ================================ ==================== ============
all_reduce      send = recv = count              count x typesize     2(n-1)/n
all_gather      send = base, recv = base x n     base x n x typesize  (n-1)/n
reduce_scatter  send = base x n, recv = base     base x n x typesize  (n-1)/n
broadcast       send = recv = count              count x typesize     1
reduce          send = recv = count              count x typesize     1
gather          send = count/n, recv = that x n  (count/n) x n x ts   (n-1)/n
scatter         recv = c, send = c x n           c x n x typesize     (n-1)/n
all_to_all      send = recv = (count/n) x n      (count/n) x n x ts   (n-1)/n
sendrecv        send = recv = count              count x typesize     1
=============== ================================ ==================== ============

with ``base = (count // (4 n)) x 4`` and, for scatter,
``c = (count // n) & -(16 // typesize)``. The printed ``size`` is the larger
of the send and receive buffers in bytes, ``count`` is the count passed to
the collective (nccl-tests' ``paramcount``), ``root`` is -1 for collectives
without one. In-place means nccl-tests' layout: the send buffer is the
receive buffer shifted by ``send_inplace_offset x rank`` elements and the
result lands at ``recv_inplace_offset x rank``; nccl-tests does not check
in-place all_to_all and sendrecv, so neither does meshcast (``inplace=False``).

This module also owns the data every rank writes before the check and the
result it expects, element by element, in closed form from (rank, index),
so any rank can check any size without seeing the others' buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ALIGN = 4  # nccl-tests' ALIGN for all_gather / reduce_scatter counts

#: Data values stay below this so sums of a few dozen ranks are exact even in float16.
_MODULUS = 61


@dataclass(frozen=True)
class Counts:
    """Element counts of one call, as nccl-tests' ``*GetCollByteCount`` computes them.

    Attributes:
        send: elements of each rank's send buffer.
        recv: elements of each rank's receive buffer.
        param: the count passed to the collective (printed as ``count``).
        send_inplace_offset: in place, the send buffer starts at recv + this x rank.
        recv_inplace_offset: in place, the result starts at recv + this x rank.
    """

    send: int
    recv: int
    param: int
    send_inplace_offset: int = 0
    recv_inplace_offset: int = 0

    @property
    def window(self) -> int:
        """Elements one call touches in either buffer (the rotation step)."""
        return max(self.send, self.recv)


@dataclass(frozen=True)
class Collective:
    """One collective as the benchmark sees it.

    Attributes:
        name: meshcast's (torch's) name, also the ``--op`` value.
        counts: ``counts(count, typesize, n) -> Counts``.
        s_elements: elements in S (algbw = S x typesize / t) from ``(param, n)``.
        factor: busbw / algbw for ``n`` ranks.
        s_text, factor_text: the formulas, printed in the output header.
        note: what else a reader of the figures must know (printed with them).
        reduces: takes a reduce op (the ``redop`` column).
        rooted: has a root (the ``root`` column).
        inplace: nccl-tests checks its in-place form.
    """

    name: str
    counts: Callable[[int, int, int], Counts]
    s_elements: Callable[[int, int], int]
    factor: Callable[[int], float]
    s_text: str
    factor_text: str
    reduces: bool = False
    rooted: bool = False
    inplace: bool = True
    note: str = ""

    def bandwidth(self, param: int, typesize: int, seconds: float, n: int) -> tuple[float, float]:
        """``(algbw, busbw)`` in GB/s (1e9 bytes, as nccl-tests) for one call of ``seconds``."""
        if seconds <= 0:
            return 0.0, 0.0
        algbw = self.s_elements(param, n) * typesize / 1e9 / seconds
        return algbw, algbw * self.factor(n)


def _same(count: int, typesize: int, n: int) -> Counts:
    return Counts(count, count, count)


def _all_gather(count: int, typesize: int, n: int) -> Counts:
    base = (count // (ALIGN * n)) * ALIGN
    return Counts(base, base * n, base, send_inplace_offset=base)


def _reduce_scatter(count: int, typesize: int, n: int) -> Counts:
    base = (count // (ALIGN * n)) * ALIGN
    return Counts(base * n, base, base, recv_inplace_offset=base)


def _gather(count: int, typesize: int, n: int) -> Counts:
    per = count // n
    return Counts(per, per * n, per, send_inplace_offset=per)


def _scatter(count: int, typesize: int, n: int) -> Counts:
    recv = (count // n) & -(16 // typesize) if typesize <= 16 else count // n
    return Counts(recv * n, recv, recv, recv_inplace_offset=recv)


def _all_to_all(count: int, typesize: int, n: int) -> Counts:
    per = count // n
    return Counts(per * n, per * n, per)


def _ring(n: int) -> float:
    return 2 * (n - 1) / n


def _minus_one(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("all_reduce", _same, lambda p, n: p, _ring,
               "count x typesize", "2(n-1)/n", reduces=True),
    Collective("all_gather", _all_gather, lambda p, n: p * n, _minus_one,
               "count x n x typesize (the gathered array)", "(n-1)/n"),
    Collective("reduce_scatter", _reduce_scatter, lambda p, n: p * n, _minus_one,
               "count x n x typesize (the input array)", "(n-1)/n", reduces=True),
    Collective("broadcast", _same, lambda p, n: p, _one,
               "count x typesize", "1", rooted=True),
    Collective("reduce", _same, lambda p, n: p, _one,
               "count x typesize", "1", reduces=True, rooted=True),
    Collective("gather", _gather, lambda p, n: p * n, _minus_one,
               "count x n x typesize (nccl-tests gather.cu)", "(n-1)/n", rooted=True),
    Collective("scatter", _scatter, lambda p, n: p * n, _minus_one,
               "count x n x typesize (nccl-tests scatter.cu)", "(n-1)/n", rooted=True),
    Collective("all_to_all", _all_to_all, lambda p, n: p * n, _minus_one,
               "count x n x typesize", "(n-1)/n", inplace=False),
    Collective("sendrecv", _same, lambda p, n: p, _one, "count x typesize", "1", inplace=False,
               note="rank r sends to r+1 and receives from r-1; algbw is the meaningful figure"),
)}

#: ``--op all`` in nccl-tests' order of importance.
ALL_OPS: tuple[str, ...] = tuple(COLLECTIVES)

#: Reduce ops the benchmark knows, by nccl-tests' names.
REDOPS = ("sum", "prod", "min", "max", "avg")


# ------------------------------------------------------------------ data and expected results


def values(rank: np.ndarray | int, index: np.ndarray, redop: str) -> np.ndarray:
    """The value rank ``rank`` puts at element ``index`` of the array it contributes.

    Small non-negative integers, exact in every dtype the bench runs: with
    ``prod`` they are 1 or 2 (a product over n ranks is at most 2^n), otherwise
    ``(index + 13 rank) mod 61`` so each rank's data differs and a misplaced
    block shows up in the check.
    """
    if redop == "prod":
        return 1 + ((index + rank) & 1)
    return (index + 13 * np.asarray(rank, dtype=np.int64)) % _MODULUS


def _reduce_over_ranks(index: np.ndarray, n: int, redop: str, dtype: np.dtype) -> np.ndarray:
    """Element-wise ``redop`` of every rank's values at ``index``, in ``dtype`` arithmetic.

    Integer dtypes wrap exactly as the libraries' reductions do; floats stay
    exact because every partial result is a small integer (avg divides once).
    """
    acc = values(0, index, redop).astype(dtype)
    with np.errstate(over="ignore"):
        for r in range(1, n):
            v = values(r, index, redop).astype(dtype)
            if redop in ("sum", "avg"):
                np.add(acc, v, out=acc)
            elif redop == "prod":
                np.multiply(acc, v, out=acc)
            elif redop == "min":
                np.minimum(acc, v, out=acc)
            else:
                np.maximum(acc, v, out=acc)
    if redop == "avg":
        if dtype.kind == "f":
            return acc.astype(np.float64) / n
        return (acc.astype(np.int64) // n).astype(dtype)  # values >= 0: floor == trunc
    return acc


def fill_inputs(op: str, rank: int, n: int, root: int, counts: Counts, redop: str,
                send: np.ndarray, recv: np.ndarray, inplace: bool) -> None:
    """Zero the receive buffer, then write this rank's input as the check expects it.

    ``send`` and ``recv`` are the views of this call (in place, ``send`` is a
    view into ``recv``, so the zeroing comes first).
    """
    recv[...] = 0
    if op == "broadcast" and rank != root:
        if not inplace:
            send[...] = 0
        return
    if op == "scatter" and rank != root:
        return
    send[...] = values(rank, np.arange(send.size, dtype=np.int64), redop)


def expected(op: str, rank: int, n: int, root: int, counts: Counts, redop: str,
             dtype: np.dtype, lo: int, hi: int) -> np.ndarray | None:
    """The result elements ``[lo, hi)`` this rank must hold, or None if it holds no result."""
    j = np.arange(lo, hi, dtype=np.int64)
    c = counts.param
    if op == "all_reduce" or (op == "reduce" and rank == root):
        return _reduce_over_ranks(j, n, redop, dtype)
    if op == "reduce_scatter":
        return _reduce_over_ranks(rank * c + j, n, redop, dtype)
    if op == "broadcast":
        return values(root, j, redop)
    if op == "all_gather" or (op == "gather" and rank == root):
        return values(j // c, j % c, redop) if c else j
    if op == "scatter":
        return values(root, rank * c + j, redop)
    if op == "all_to_all":
        return values(j // c, rank * c + j % c, redop) if c else j
    if op == "sendrecv":
        return values((rank - 1) % n, j, redop)
    return None


def count_wrong(op: str, rank: int, n: int, root: int, counts: Counts, redop: str,
                result: np.ndarray, chunk: int = 1 << 20) -> int:
    """Elements of ``result`` that differ from :func:`expected` (nccl-tests' ``#wrong``).

    Checked in chunks so the expected values of a 64 MiB call never need a
    second 64 MiB array. Every value and partial result is a small integer,
    so results must match exactly, except a floating-point average, which
    may be rounded once per rank (a relative error up to n ulps).
    """
    dtype = result.dtype
    tol = n * float(np.finfo(dtype).eps) if dtype.kind == "f" and redop == "avg" else 0.0
    wrong = 0
    for lo in range(0, result.size, chunk):
        hi = min(result.size, lo + chunk)
        want = expected(op, rank, n, root, counts, redop, dtype, lo, hi)
        if want is None:
            return 0
        got = result[lo:hi]
        if tol:
            ok = np.isclose(got, want, rtol=tol, atol=0.0)
        else:
            ok = got == want.astype(dtype)
        wrong += int(ok.size - np.count_nonzero(ok))
    return wrong
