"""The ``eager`` family across hosts (algorithms/eager.py): every collective finished from
the agreement's rows gives the NumPy reference, on every rank, for every rank count.

The rows are laid out as the agreement leaves them: every rank's payload bytes back to
back in one table, at offsets that need not be aligned to the dtype (a row starts after
its cell). The runtime's checks before these functions (fingerprints, counts) are
spanning.py's and are tested with it (tests/runtime/test_host_spanning.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from meshcast.algorithms import eager, hierarchical
from meshcast.ops import ReduceOp
from meshcast.testing import reference as ref
from meshcast.testing.reference import rank_input

SIZES = (1, 2, 3, 8)
COUNTS = (0, 1, 37)
DTYPES = ("float32", "float64", "int8", "uint16", "complex64")


def _rows(payloads: list[np.ndarray | None]) -> list[np.ndarray]:
    """Every rank's payload (None: it carries none) as bytes of one table, each row one
    byte past the previous one's end, so that no row is aligned to its dtype."""
    raw = [np.ascontiguousarray(p).reshape(-1).view(np.uint8) if p is not None
           else np.zeros(0, np.uint8) for p in payloads]
    table = np.zeros(sum(r.nbytes + 1 for r in raw) + 1, np.uint8)
    rows, at = [], 1
    for r in raw:
        table[at:at + r.nbytes] = r
        rows.append(table[at:at + r.nbytes])
        at += r.nbytes + 1
    return rows


def _ops(dtype: str) -> list[ReduceOp]:
    kind = np.dtype(dtype).kind
    ops = [ReduceOp.SUM, ReduceOp.PRODUCT]
    if kind != "c":
        ops += [ReduceOp.MIN, ReduceOp.MAX]
    if kind in "iu":
        ops += [ReduceOp.BXOR, ReduceOp.BAND]
    return ops


def _cases():
    for n in SIZES:
        for dtype in DTYPES:
            for count in COUNTS:
                yield n, dtype, count


CASES = list(_cases())


@pytest.mark.parametrize("n, dtype, count", CASES)
def test_all_reduce_and_reduce_fold_the_rows_in_rank_order(n, dtype, count):
    inputs = [rank_input(r, count, dtype) for r in range(n)]
    rows = _rows(inputs)
    for op in _ops(dtype):
        want = ref.all_reduce(inputs, op)
        for r in range(n):
            w = inputs[r].copy()
            eager.all_reduce(rows, w, op)
            np.testing.assert_array_equal(w, want[r], err_msg=f"{op} rank {r}")
        for root in range(n):
            want = ref.reduce(inputs, op, root)
            for r in range(n):
                w = inputs[r].copy()
                eager.reduce(rows, w, op, r == root)
                np.testing.assert_array_equal(w, want[r] if r == root else inputs[r])


@pytest.mark.parametrize("n, dtype, count", CASES)
def test_broadcast_and_scatter_copy_out_of_the_roots_row(n, dtype, count):
    for root in range(n):
        data = rank_input(root, count * n, dtype, seed=1)
        # only the root's row carries data (the others ride empty, as on the runtime)
        rows = _rows([data if r == root else None for r in range(n)])
        for r in range(n):
            w = data.copy() if r == root else np.zeros_like(data)
            eager.broadcast(rows, w, root, r)
            np.testing.assert_array_equal(w, data)
        want = ref.scatter([data if r == root else None for r in range(n)], root,
                           [count] * n)
        for r in range(n):
            out = np.zeros(count, dtype)
            eager.scatter(rows, out, root, r * count * out.itemsize)
            np.testing.assert_array_equal(out, want[r])


@pytest.mark.parametrize("n, dtype, count", CASES)
def test_all_gather_and_gather_lay_the_rows_end_to_end(n, dtype, count):
    inputs = [rank_input(r, count, dtype) for r in range(n)]
    rows = _rows(inputs)
    want = ref.all_gather(inputs)
    for r in range(n):
        out = np.full(count * n, 7, dtype)
        eager.all_gather(rows, out)
        np.testing.assert_array_equal(out, want[r])
    for root in range(n):
        want = ref.gather(inputs, root)
        for r in range(n):
            outs = [np.full(count, 7, dtype) for _ in range(n)] if r == root else None
            eager.gather(rows, outs)
            if r == root:
                np.testing.assert_array_equal(np.concatenate(outs), want[r])


@pytest.mark.parametrize("n, dtype, count", CASES)
def test_reduce_scatter_and_all_to_all_take_my_piece_of_every_row(n, dtype, count):
    inputs = [rank_input(r, count * n, dtype) for r in range(n)]
    rows = _rows(inputs)
    for op in _ops(dtype):
        want = ref.reduce_scatter(inputs, op, [count] * n)
        for r in range(n):
            out = np.full(count, 7, dtype)
            eager.reduce_scatter(rows, out, op, r * count)
            np.testing.assert_array_equal(out, want[r], err_msg=f"{op} rank {r}")
    want = ref.all_to_all(inputs)
    for r in range(n):
        out = np.full(count * n, 7, dtype)
        eager.all_to_all(rows, out, r)
        np.testing.assert_array_equal(out, want[r])


def test_every_collective_across_hosts_has_one_eager_entry_with_steps_and_bytes():
    assert set(eager.ALGORITHMS) == {*hierarchical.ALGORITHMS, "barrier"}
    for kind, (name, fn) in eager.ALGORITHMS.items():
        assert name == ("agreement" if kind == "barrier" else "eager"), kind
        assert "Steps: the agreement's exchange of rows" in fn.__doc__, kind
        assert "Bytes across hosts:" in fn.__doc__, kind


def test_eager_is_never_forced():
    layout = hierarchical.Layout(((0, 1), (2, 3)), 0)
    why = hierarchical.supports("all_reduce", "eager", layout)
    assert why.startswith("'eager' is not forced: a call runs it whenever its data fit")
    assert "leader, rails, flat, fused" in why
    assert hierarchical.supports("barrier", "agreement", layout).endswith("(eager_cap)")
