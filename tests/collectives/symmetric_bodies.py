"""Rank bodies for symmetric-buffer tests (module level: spawned processes import them)."""

from __future__ import annotations

import numpy as np

import meshcast as dist
from meshcast import ReduceOp
from meshcast.algorithms import _select as _fast
from meshcast.errors import InvalidUsage
from meshcast.testing import reference

DTYPES = ("bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64",
          "complex64", "complex128")


def _valid(op: ReduceOp, dtype: np.dtype) -> bool:
    try:
        dist.ops.validate(op, dtype, caller="test")
    except InvalidUsage:
        return False
    return True


def all_reduce_and_broadcast(counts: list[int]) -> list[str]:
    """Every dtype x valid op x count through the symmetric path; every root for broadcast.

    Returns the algorithm names seen (to prove the symmetric path ran)."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    # small counts too: share boundaries, count < world size
    _fast.SYMMETRIC_ALL_REDUCE_MIN_BYTES = _fast.SYMMETRIC_BROADCAST_MIN_BYTES = 0
    seen = set()
    for name in DTYPES:
        dtype = np.dtype(name)
        for count in counts:
            buf = dist.empty(count, dtype)
            assert dist.is_symmetric(buf) == (count > 0)
            for op in ReduceOp:
                if not _valid(op, dtype):
                    continue
                inputs = [reference.rank_input(q, count, dtype, seed=count) for q in range(n)]
                buf[:] = inputs[r]
                dist.all_reduce(buf, op=op)
                expected = reference.all_reduce(inputs, op)[r]
                assert buf.tobytes() == expected.tobytes(), (name, count, op, buf, expected)
                seen.add(pg.last_algorithm)
            for root in range(n):
                buf[:] = reference.rank_input(root, count, dtype, seed=7) if r == root else 0
                dist.broadcast(buf, src=root)
                assert buf.tobytes() == reference.rank_input(root, count, dtype, 7).tobytes()
                seen.add(pg.last_algorithm)
    return sorted(a for a in seen if a)


def shapes_slices_and_async() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    total = n * (n - 1) // 2
    m = dist.zeros((3, 40, 5), np.float64)
    assert m.shape == (3, 40, 5) and (m == 0).all()  # new allocations start zeroed
    m[...] = r
    dist.all_reduce(m[1])  # a contiguous slice: the same region on every rank
    assert (m[1] == total).all() and (m[0] == r).all() and (m[2] == r).all()
    works = [dist.all_reduce(m[k], async_op=True) for k in (0, 2)]
    for w in works:
        w.wait()
    assert (m == total).all()
    col = m[:, :, 0]  # not contiguous: staged, the ordinary path, still correct
    col[...] = r
    dist.all_reduce(col)
    assert (m[:, :, 0] == total).all()
    avg = dist.empty(1000, np.float32)
    avg[:] = r + 1
    dist.all_reduce(avg, op=ReduceOp.AVG)
    assert np.allclose(avg, (n + 1) / 2)
    # bitwise identical on every rank for an order-dependent float sum
    f = dist.empty(100_000, np.float32)
    f[:] = np.random.default_rng(r).standard_normal(f.size)
    dist.all_reduce(f)
    g = [np.zeros_like(f) for _ in range(n)]
    dist.all_gather(g, f)
    assert all(x.tobytes() == f.tobytes() for x in g)
    # async on the lane: inline up to ASYNC_INLINE_MAX_BYTES, else the entry in the
    # caller and the program's records on the worker; AVG divides after either
    pg = dist.group.WORLD
    for count in (1 << 16, 1 << 19):  # 256 KiB, 2 MiB of float32
        a = dist.empty(count, np.float32)
        a[:] = np.arange(count, dtype=np.float32) % 7 + r
        w = dist.all_reduce(a, op=ReduceOp.AVG, async_op=True)
        w.wait()
        want = np.arange(count, dtype=np.float32) % 7 + (n - 1) / 2
        assert np.allclose(a, want), (count, a[:4], want[:4])
        assert pg.last_algorithm == "all_reduce/symmetric", pg.last_algorithm
    # the other symmetric collectives async, inline (1 MiB) and on the worker (4 MiB)
    for count in (1 << 18, 1 << 20):
        a = dist.empty(count, np.float32)
        a[:] = r
        dist.broadcast(a, src=n - 1, async_op=True).wait()
        assert (a == n - 1).all()
        assert pg.last_algorithm == "broadcast/symmetric", pg.last_algorithm
        piece = np.full(count // n, r, np.float32)
        dist.all_gather_into_tensor(a[:count // n * n], piece, async_op=True).wait()
        got = a[:count // n * n].reshape(n, -1)
        assert (got == np.arange(n, dtype=np.float32)[:, None]).all()
        assert pg.last_algorithm == "all_gather/symmetric", pg.last_algorithm
        a[:] = r + 1
        out = np.zeros(count // n, np.float32)
        dist.reduce_scatter_tensor(out, a[:count // n * n], op=ReduceOp.AVG,
                                   async_op=True).wait()
        assert np.allclose(out, (n + 1) / 2), out[:4]
        assert pg.last_algorithm == "reduce_scatter/symmetric", pg.last_algorithm
    # other collectives accept symmetric arrays (they just take their ordinary path)
    out = dist.empty(n * 4, np.int32)
    dist.all_gather_into_tensor(out, np.full(4, r, np.int32))
    assert (out.reshape(n, 4) == np.arange(n)[:, None]).all()


def subgroup(ranks: list[int]) -> bool:
    """Symmetric memory on a subgroup; non-members get an InvalidUsage."""
    sub = dist.new_group(ranks)
    r = dist.get_rank()
    if r not in ranks:
        try:
            dist.empty(4, group=sub)
        except InvalidUsage as exc:
            assert "not a member" in str(exc)
            return False
        raise AssertionError("a non-member allocated")
    x = dist.empty(300_000, np.int64, group=sub)
    x[:] = r
    dist.all_reduce(x, group=sub)
    assert (x == sum(ranks)).all()
    assert sub.last_algorithm == "all_reduce/symmetric"
    return True


def mixed_buffers(kind: str) -> str | None:
    """Ranks disagree about the buffer: plain vs symmetric, or different offsets."""
    r = dist.get_rank()
    sym = dist.empty(800_000, np.float32)  # calls past the one-shot sizes
    if kind == "plain":
        x = np.zeros(400_000, np.float32) if r == 0 else sym[:400_000]
    else:
        x = sym[r * 1024:r * 1024 + 400_000]
    try:
        dist.all_reduce(x)
    except dist.MismatchError as exc:
        return str(exc)
    return None


def size_mismatch() -> str | None:
    r = dist.get_rank()
    try:
        dist.empty(10 + r, np.float32)
    except dist.MismatchError as exc:
        return str(exc)
    return None


def bad_arguments() -> list[str]:
    out = []
    for shape, dtype in (((-1,), np.float32), ("abc", np.float32), ((2,), object),
                         ((2,), "no-such-dtype")):
        try:
            dist.empty(shape, dtype)
        except InvalidUsage as exc:
            out.append(str(exc))
    return out


def torch_tensors() -> None:
    import torch

    r, n = dist.get_rank(), dist.get_world_size()
    t = dist.empty((4, 100_000), torch.float32)  # past the one-shot sizes
    assert isinstance(t, torch.Tensor) and t.shape == (4, 100_000)
    assert dist.is_symmetric(t)
    t.fill_(r + 1)
    dist.all_reduce(t)
    assert dist.group.WORLD.last_algorithm == "all_reduce/symmetric"
    assert bool((t == n * (n + 1) / 2).all())
    b = dist.empty(10, torch.bfloat16)
    b.fill_(r + 1)
    dist.all_reduce(b)  # bfloat16 accumulates in float32: the ordinary path
    assert bool((b == n * (n + 1) / 2).all())


def hammer(rounds: int) -> None:
    """Back-to-back calls where each rank rewrites its array right after returning:
    a rank still reading or writing a peer's part would corrupt the next call."""
    r, n = dist.get_rank(), dist.get_world_size()
    x = dist.empty(300_000, np.int64)  # past the one-shot sizes
    for k in range(rounds):
        x[:] = r + k
        dist.all_reduce(x)
        assert (x == n * k + n * (n - 1) // 2).all(), (k, x[:4])
        x[:] = k if r == k % n else -1
        dist.broadcast(x, src=k % n)
        assert (x == k).all()


def late_ranks(sleep: float) -> None:
    """Each symmetric collective with one rank late (in turn): the others' compiled entry
    stops in its spin, Python waits for the late one, and the program goes on."""
    import time

    r, n = dist.get_rank(), dist.get_world_size()
    _fast.SYMMETRIC_MIN_BYTES = 0
    count = 1 << 19  # (2 MiB a piece: a broadcast of one is past the one-shot sizes)
    x = dist.empty(count * n, np.float32)
    pg = dist.group.WORLD
    for late in range(n):
        x[:] = r + 1
        if r == late:
            time.sleep(sleep)
        dist.all_reduce(x)
        assert (x == n * (n + 1) // 2).all(), (late, x[:4])
        assert pg.last_algorithm == "all_reduce/symmetric"
        piece = x[late * count:(late + 1) * count]
        piece[:] = late if r == late else -1
        if r == late:
            time.sleep(sleep)
        dist.broadcast(piece, src=late)
        assert (piece == late).all(), (late, piece[:4])
        assert pg.last_algorithm == "broadcast/symmetric"
        if r == (late + 1) % n:
            time.sleep(sleep)
        dist.all_gather_into_tensor(x, np.full(count, r, np.float32))
        assert (x.reshape(n, -1) == np.arange(n, dtype=np.float32)[:, None]).all()
        assert pg.last_algorithm == "all_gather/symmetric"
        out = np.zeros(count, np.float32)
        if r == late:
            time.sleep(sleep)
        dist.reduce_scatter_tensor(out, x)
        assert (out == n * r).all(), (late, out[:4])
        assert pg.last_algorithm == "reduce_scatter/symmetric"


def gather_and_scatter_reduce(counts: list[int]) -> list[str]:
    """all_gather_into_tensor into a symmetric output and reduce_scatter_tensor from a
    symmetric input, out of place and in place, against NumPy."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    _fast.SYMMETRIC_MIN_BYTES = 0
    seen = set()
    for name in ("int32", "float32", "float64", "complex64", "bool"):
        dtype = np.dtype(name)
        for c in counts:
            inputs = [reference.rank_input(q, c, dtype, seed=c) for q in range(n)]
            out = dist.empty(n * c, dtype)
            dist.all_gather_into_tensor(out, inputs[r])
            assert out.tobytes() == np.concatenate(inputs).tobytes(), (name, c)
            seen.add(pg.last_algorithm)
            out[:] = 0
            out[r * c:(r + 1) * c] = inputs[r]
            dist.all_gather_into_tensor(out, out[r * c:(r + 1) * c])  # in place
            assert out.tobytes() == np.concatenate(inputs).tobytes(), (name, c)
            full = [reference.rank_input(q, n * c, dtype, seed=c + 1) for q in range(n)]
            src = dist.empty(n * c, dtype)
            for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.AVG, ReduceOp.BXOR):
                if not _valid(op, dtype):
                    continue
                expected = reference.all_reduce(full, op)[r][r * c:(r + 1) * c]
                src[:] = full[r]
                got = np.zeros(c, dtype)
                dist.reduce_scatter_tensor(got, src, op=op)
                assert got.tobytes() == expected.tobytes(), (name, c, op)
                seen.add(pg.last_algorithm)
                src[:] = full[r]
                dist.reduce_scatter_tensor(src[r * c:(r + 1) * c], src, op=op)  # in place
                assert src[r * c:(r + 1) * c].tobytes() == expected.tobytes(), (name, c, op)
    return sorted(a for a in seen if a)


def default_path_choice() -> list[str]:
    """With the group's default thresholds: a symmetric all_reduce of 1 MiB (inside the
    one-shot range at 2 ranks) takes the symmetric path, an ordinary array the one-shot
    one, a small symmetric array the one-shot one; all three give the right sum."""
    r, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    seen = []
    total = n * (n - 1) / 2
    for count, symmetric in ((1 << 18, True), (1 << 18, False), (64, True)):
        buf = dist.empty(count, np.float32) if symmetric else np.empty(count, np.float32)
        buf[:] = r
        dist.all_reduce(buf)
        assert (buf == total).all(), (count, symmetric)
        seen.append(pg.last_algorithm)
    return seen
