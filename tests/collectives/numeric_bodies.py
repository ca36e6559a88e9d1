"""Rank bodies for the numerics of reductions: bfloat16 and float16 accumulate in float32
and round once; integer AVG truncates toward zero.

Every expected value is computed here from the whole world's inputs with plain
NumPy/torch (never with meshcast.ops or meshcast.testing.reference, which share
the code under test), and each body also proves its data can tell the documented
semantics from the tempting alternative (accumulating in the small dtype, flooring),
so the checks can fail.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import meshcast as dist
from meshcast import ReduceOp
from meshcast.testing.paths import general_path

SMALL = 64  # elements: the one-shot path
LARGE = 600_000  # elements: float32 work of 2.4 MB, past the one-shot range (schedules)


def _fresh(row: Any) -> Any:
    """A writable copy of a NumPy array or torch tensor."""
    return row.clone() if hasattr(row, "clone") else row.copy()


def _check(got: Any, want: Any, label: str) -> None:
    """``got`` equals ``want`` bit for bit, in the same dtype (NumPy or torch)."""
    assert got.dtype == want.dtype, (label, got.dtype, want.dtype)
    if hasattr(got, "clone"):  # torch: NumPy has no bfloat16
        import torch

        same = torch.equal(got, want)
        bad = [] if same else (got != want).nonzero().flatten()[:5].tolist()
    else:
        same = np.array_equal(got, want)
        bad = [] if same else np.flatnonzero(got != want)[:5].tolist()
    if not same:
        raise AssertionError(f"{label} rank {dist.get_rank()}: elements {bad}: got "
                             f"{[got[i].item() for i in bad]} want {[want[i].item() for i in bad]}")


def _reductions(data: Any, full: Any, op: ReduceOp, label: str) -> None:
    """all_reduce, reduce (root n - 1) and reduce_scatter_tensor of row ``r`` of ``data``
    (every rank's input, ``(n, count)``) on rank r, each checked against ``full``, the
    expected reduction of all rows."""
    r, n = dist.get_rank(), dist.get_world_size()
    piece = data.shape[1] // n
    x = _fresh(data[r])
    dist.all_reduce(x, op=op)
    _check(x, full, f"{label} all_reduce {op}")
    x = _fresh(data[r])
    dist.reduce(x, dst=n - 1, op=op)
    _check(x, full if r == n - 1 else data[r], f"{label} reduce {op}")  # non-roots unchanged
    out = _fresh(data[r][:piece])
    out[...] = 0
    dist.reduce_scatter_tensor(out, _fresh(data[r]), op=op)
    _check(out, full[r * piece:(r + 1) * piece], f"{label} reduce_scatter_tensor {op}")
    out[...] = 0
    dist.reduce_scatter(out, [_fresh(data[r][q * piece:(q + 1) * piece]) for q in range(n)],
                        op=op)
    _check(out, full[r * piece:(r + 1) * piece], f"{label} reduce_scatter {op}")


# ----------------------------------------------------------------- bfloat16

def torch_bfloat16_reductions() -> None:
    """bfloat16 tensors: SUM, AVG, PRODUCT, MIN, MAX through all_reduce, reduce,
    reduce_scatter_tensor and reduce_scatter, on the one-shot path and (but for MIN and
    MAX) on the schedules, against the float32 reference: every rank's input converted
    to float32 (exactly), reduced in float32, rounded to bfloat16 once. Up to 3 ranks."""
    import torch

    n = dist.get_world_size()
    assert n <= 3, "products of more than 3 inputs are not exact in float32"
    for count in (SMALL * n, LARGE // n * n):
        gen = torch.Generator().manual_seed(count)
        # k/64 with |k| < 256: 8 significant bits, exact in bfloat16; sums and products
        # of up to 3 such values are exact in float32, so the reference is exact too.
        data = (torch.randint(-255, 256, (n, count), generator=gen) / 64).to(torch.bfloat16)
        data[:, 0] = torch.tensor([256.0] + [1.0] * (n - 1))  # 256 + 1 + 1 is 256 in bf16
        wide = data.float()
        references = {
            ReduceOp.SUM: wide.sum(0),
            ReduceOp.AVG: wide.sum(0) / n,
            ReduceOp.PRODUCT: wide.prod(0),
            ReduceOp.MIN: wide.min(0).values,
            ReduceOp.MAX: wide.max(0).values,
        }
        for op, ref in references.items():
            if op in (ReduceOp.MIN, ReduceOp.MAX) and count > SMALL * n:
                continue  # exact in any dtype: the one-shot check says all there is
            full = ref.to(torch.bfloat16)  # the one rounding
            if op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT):
                # accumulating in bfloat16 (rounding every step) would not pass
                step = data[0].clone()
                for q in range(1, n):
                    step = step * data[q] if op is ReduceOp.PRODUCT else step + data[q]
                if op is ReduceOp.AVG:
                    step = step / n
                assert not torch.equal(step, full), f"data cannot tell for {op}"

            _reductions(data, full, op, f"bf16 count={count}")


# ------------------------------------------------------------------ float16

def _fp16_data(n: int, count: int) -> np.ndarray:
    """(n, count) float16: per element one rank holds 2048 (where the fp16 spacing is 2)
    and every other rank a small value that fp16 loses when added to it."""
    rng = np.random.default_rng(count)
    data = rng.choice(np.array([0.25, 0.5, 0.75, 1.0, 1.5]), size=(n, count))
    big = np.arange(count) % n  # which rank holds 2048, so every order meets it first
    data[big, np.arange(count)] = 2048.0
    return data.astype(np.float16)


def float16_sums() -> None:
    """float16 SUM accumulates in float32 and rounds once: all_reduce, reduce,
    reduce_scatter_tensor and reduce_scatter, on the one-shot path and on the schedules,
    and with every all_reduce and reduce_scatter algorithm forced."""
    from meshcast.algorithms import _registry

    r, n = dist.get_rank(), dist.get_world_size()
    for count in (SMALL * n, LARGE // n * n):
        data = _fp16_data(n, count)
        # The values are multiples of 1/4 below 2^13: their sum is exact in float32.
        full = data.astype(np.float64).sum(0).astype(np.float16)
        step = data[0].copy()
        for q in range(1, n):
            step += data[q]  # what accumulating in float16, in rank order, would give
        assert (step != full).sum() > count // 4, "data cannot tell fp16 from fp32 sums"

        label = f"fp16 count={count}"
        _reductions(data, full, ReduceOp.SUM, label)
        if count == SMALL * n:  # every schedule, not only the default ones
            for algorithm in _registry.names("all_reduce"):
                x = data[r].copy()
                dist.all_reduce(x, algorithm=algorithm)
                _check(x, full, f"{label} all_reduce/{algorithm}")
            piece = count // n
            for algorithm in _registry.names("reduce_scatter"):
                out = np.zeros(piece, np.float16)
                dist.reduce_scatter_tensor(out, data[r].copy(), algorithm=algorithm)
                _check(out, full[r * piece:(r + 1) * piece],
                       f"{label} reduce_scatter_tensor/{algorithm}")


def halves_without_working_copies(counts: list[int], dtype: str = "float16") -> list[int]:
    """float16 (NumPy) or bfloat16 (torch) SUM and PRODUCT through all_reduce, reduce,
    reduce_scatter_tensor and reduce_scatter at each of ``counts`` elements (one-shot and
    single-copy sizes), where the calls fold the half data itself (the lane's programs,
    calls._native): the same bits as a float32 accumulator rounded once, which the data
    tells from half arithmetic; and an all_reduce with rank 0 on the general path (a
    strided array) beside the others (float16 on the lane). Returns, per count, how
    many float32 working copies the calls made."""
    from meshcast import calls

    made = [0]
    real = calls.working_copy

    def counted(*args: Any) -> Any:
        made[0] += 1
        return real(*args)

    if dtype == "bfloat16":
        import torch

        def halves(a: np.ndarray) -> Any:
            return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    else:
        def halves(a: np.ndarray) -> Any:
            return a.astype(np.float16)

    calls.working_copy = counted
    r, n = dist.get_rank(), dist.get_world_size()
    seen = []
    try:
        for count in counts:
            made[0] = 0
            # multiples of 1/4 below 2^13 (exact in bfloat16 too: 2048 and 0.25-1.5 need
            # 3 significant bits); their sums are exact in float32
            wide = _fp16_data(n, count).astype(np.float32)
            if dtype == "bfloat16":  # (bfloat16's spacing at 2048 is 16: larger steps)
                wide = np.where(wide == 2048, wide, wide * 8)
            data = halves(wide)
            full = halves(wide.sum(0, dtype=np.float64).astype(np.float32))
            step = data[0].clone() if dtype == "bfloat16" else data[0].copy()
            for q in range(1, n):
                step += data[q]
            differ = (step != full).sum()
            assert int(differ) > count // 5, f"data cannot tell {dtype} from float32 sums"
            _reductions(data, full, ReduceOp.SUM, f"{dtype} native count={count}")
            # rank 0 on the general path (a strided array) beside the others
            x = _fresh(data[r]) if r else halves(np.repeat(wide[r], 2))[::2]
            if type(x) is np.ndarray:  # (a torch view takes the lane through a copy)
                x = general_path(x)
            dist.all_reduce(x)
            _check(x.contiguous() if dtype == "bfloat16" else np.ascontiguousarray(x), full,
                   f"{dtype} native count={count} mixed paths")
            factors = wide / 1024  # (2, and multiples of 1/4096)
            product = halves(factors.prod(0, dtype=np.float32))
            x = halves(factors[r])
            dist.all_reduce(x, op=ReduceOp.PRODUCT)
            _check(x, product, f"{dtype} native count={count} PRODUCT")
            seen.append(made[0])
    finally:
        calls.working_copy = real
    return seen


# ------------------------------------------------------------- integer AVG

def _truncated_average(data: np.ndarray) -> np.ndarray:
    """AVG of the rows of ``data`` as documented: the sum in the data's dtype (wrapping
    around on overflow, as any integer sum), divided by the row count toward zero."""
    n = data.shape[0]
    with np.errstate(over="ignore"):
        total = np.add.reduce(data, axis=0, dtype=data.dtype).astype(np.int64)
    quotient = np.abs(total) // n  # exact integer division of the magnitude
    return (np.sign(total) * quotient).astype(data.dtype)


def integer_average() -> None:
    """ReduceOp.AVG on integers through all_reduce, reduce, reduce_scatter (list) and
    reduce_scatter_tensor, on the one-shot path and the schedules: the result truncates
    toward zero (not floor), after a sum that wraps like the dtype's own arithmetic."""
    n = dist.get_world_size()
    cases = [(dt, SMALL * n) for dt in (np.int8, np.uint8, np.int32, np.int64)]
    cases.append((np.int32, LARGE // n * n))
    for dt, count in cases:
        info = np.iinfo(dt)
        rng = np.random.default_rng([count, info.bits, int(info.min < 0)])
        lo, hi = (info.min, info.max) if info.bits == 8 else (-1000, 1000)
        data = rng.integers(lo, hi, size=(n, count), endpoint=True).astype(dt)
        want = _truncated_average(data)
        if info.min < 0:
            # floor division would differ: the data has negative sums not divisible by n
            with np.errstate(over="ignore"):
                total = np.add.reduce(data, axis=0, dtype=dt).astype(np.int64)
            assert ((total < 0) & (total % n != 0)).any(), "data cannot tell trunc from floor"

        _reductions(data, want, ReduceOp.AVG, f"{np.dtype(dt).name} count={count}")
