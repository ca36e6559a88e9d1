"""Whole-world NumPy semantics of every collective: the one test oracle.

Each function takes what every rank passes in (``inputs[r]`` is rank
``r``'s data) and returns what every rank must hold afterwards (``None``
where a rank gets nothing, e.g. non-roots of reduce and gather). The same
oracle checks the simulator, threaded worlds and spawned processes.

:func:`rank_input` makes deterministic per-rank data on which every
reduction is exact in every dtype and order (small integers, powers of two
for products), so results can be compared bit for bit whatever algorithm
produced them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..algorithms._plan import split_even
from ..ops import ReduceOp, finish_average, reduce_many, working_dtype

Arrays = Sequence[np.ndarray]


def rank_input(rank: int, count: int, dtype: Any, seed: int = 0) -> np.ndarray:
    """Deterministic data for ``rank``: ``count`` elements of ``dtype``.

    Values are small so sums over up to a few thousand ranks stay exact in
    float16..float64 and products stay exact powers of two:

    * bool: random True/False;
    * unsigned integers: 1, 2, 3 (products wrap around exactly);
    * signed integers and floats: -2, -1, 1, 2;
    * complex: ``u * m`` with ``u`` in {1, -1, 1j, -1j} and ``m`` in {1, 2}.

    ``rank_input(r, n)`` is a prefix of ``rank_input(r, n + k)`` for the same seed.
    """
    dtype = np.dtype(dtype)
    rng = np.random.default_rng([seed, rank])
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    if dtype.kind == "u":
        return rng.integers(1, 4, count).astype(dtype)
    if dtype.kind in "if":
        return np.array([-2, -1, 1, 2])[rng.integers(0, 4, count)].astype(dtype)
    if dtype.kind == "c":
        units = np.array([1, -1, 1j, -1j])[rng.integers(0, 4, count)]
        return (units * rng.integers(1, 3, count)).astype(dtype)
    raise TypeError(f"rank_input: no test data for dtype={dtype}")


def reduced(inputs: Arrays, op: Any) -> np.ndarray:
    """``op`` over all inputs element-wise, the way the group computes it.

    Accumulates in :func:`meshcast.ops.working_dtype` in rank order, divides
    once for AVG (:func:`meshcast.ops.finish_average`) and casts back.
    """
    op = ReduceOp.coerce(op)
    dtype = inputs[0].dtype
    work = working_dtype(dtype, op)
    acc = np.empty(len(inputs[0]), dtype=work)
    reduce_many(op, acc, [np.asarray(x, dtype=work) for x in inputs])
    if op is ReduceOp.AVG:
        finish_average(acc, len(inputs))
    return acc.astype(dtype)


def _pieces(flat: np.ndarray, counts: Sequence[int]) -> list[np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    return [flat[offsets[i] : offsets[i + 1]].copy() for i in range(len(counts))]


def _even_counts(n: int, parts: int) -> list[int]:
    return [length for _, length in split_even(n, parts)]


def broadcast(inputs: Sequence[np.ndarray | None], root: int) -> list[np.ndarray]:
    """Every rank gets a copy of ``inputs[root]``."""
    src = np.asarray(inputs[root])
    return [src.copy() for _ in inputs]


def reduce(inputs: Arrays, op: Any, root: int) -> list[np.ndarray | None]:
    """The root gets ``op`` over all inputs; the others get None."""
    res = reduced(inputs, op)
    return [res.copy() if r == root else None for r in range(len(inputs))]


def all_reduce(inputs: Arrays, op: Any) -> list[np.ndarray]:
    """Every rank gets ``op`` over all inputs."""
    res = reduced(inputs, op)
    return [res.copy() for _ in inputs]


def gather(inputs: Arrays, root: int) -> list[np.ndarray | None]:
    """The root gets all inputs concatenated in rank order; the others None."""
    cat = np.concatenate([np.asarray(x) for x in inputs])
    return [cat.copy() if r == root else None for r in range(len(inputs))]


def all_gather(inputs: Arrays) -> list[np.ndarray]:
    """Every rank gets all inputs concatenated in rank order (pieces may differ in length)."""
    cat = np.concatenate([np.asarray(x) for x in inputs])
    return [cat.copy() for _ in inputs]


def scatter(
    inputs: Sequence[np.ndarray | None], root: int, counts: Sequence[int] | None = None
) -> list[np.ndarray]:
    """Rank ``q`` gets piece ``q`` of the root's flat input (equal pieces unless ``counts``)."""
    flat = np.asarray(inputs[root])
    size = len(inputs)
    return _pieces(flat, counts if counts is not None else _even_counts(len(flat), size))


def reduce_scatter(
    inputs: Arrays, op: Any, counts: Sequence[int] | None = None
) -> list[np.ndarray]:
    """Rank ``q`` gets piece ``q`` of ``op`` over all (flat, equally long) inputs."""
    res = reduced(inputs, op)
    size = len(inputs)
    return _pieces(res, counts if counts is not None else _even_counts(len(res), size))


def all_to_all(
    inputs: Arrays, send_counts: Sequence[Sequence[int]] | None = None
) -> list[np.ndarray]:
    """Rank ``q`` gets, in rank order, piece ``q`` of every rank's flat input.

    ``send_counts[r][q]`` is how many elements rank ``r`` sends to ``q``
    (default: equal splits of each input).
    """
    size = len(inputs)
    if send_counts is None:
        send_counts = [_even_counts(len(x), size) for x in inputs]
    pieces = [_pieces(np.asarray(x), send_counts[r]) for r, x in enumerate(inputs)]
    dtype = np.asarray(inputs[0]).dtype
    return [
        np.concatenate([pieces[r][q] for r in range(size)]).astype(dtype, copy=False)
        for q in range(size)
    ]


__all__ = [
    "all_gather",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "gather",
    "rank_input",
    "reduce",
    "reduce_scatter",
    "reduced",
    "scatter",
]
