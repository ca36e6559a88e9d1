"""Random programs of calls, every result checked against a NumPy oracle (a fuzzer).

Every rank draws the same program from one seed: which group (the world or a
subgroup, members or not), which call (every collective and its list forms,
point-to-point, batches, objects), dtype, shape (0-d, empty, 1-3 dimensions,
sometimes hundreds of thousands of elements, so every path from the tiny-call lane
to the schedules runs), op, root, strided or transposed buffers, torch tensors or
NumPy arrays, synchronous or async (waited a few calls later). Each rank computes
every other rank's input from the seed, so the expected results need nothing from
meshcast. The data are small integers, so sums and products are exact in every
dtype and the comparison can be exact.

It found two hangs across hosts (ranks posting MPI's Ialltoall beside Ialltoallv;
Gloo refusing uint64 reductions). ``test_random_programs.py`` runs a few seeds; a
longer campaign runs the body directly, e.g. under ``meshcast run -n 8``::

    python -c "import tests.collectives.random_programs as p, meshcast as d; \\
               d.init_process_group(); print(p.random_program(seed=7, calls=5000))"
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

import meshcast as dist

DTYPES = ("float32", "float64", "int32", "int64", "int8", "uint8", "float16", "bool", "int16",
          "uint64", "complex64")
OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG")
KINDS = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather",
         "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
         "all_to_all_single", "barrier", "p2p", "batch", "objects")
_BINARY = {"SUM": np.add, "PRODUCT": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
           "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}


def _valid(op: str, dtype: str) -> bool:
    kind = np.dtype(dtype).kind
    return not ((op in ("BAND", "BOR", "BXOR") and kind not in "biu")
                or (op in ("MIN", "MAX") and kind == "c") or (op == "AVG" and kind == "b"))


def _data(seed: int, call: int, rank: int, piece: int, shape: tuple, dtype: str) -> np.ndarray:
    """What ``rank`` passes as ``piece`` in call ``call``: small integers, exact in any dtype."""
    g = np.random.default_rng([seed, call, rank, piece])
    kind = np.dtype(dtype).kind
    if kind == "b":
        return np.asarray(g.integers(0, 2, shape).astype(bool))
    if kind == "u":
        return np.asarray(g.integers(0, 4, shape).astype(dtype))
    if kind == "c":
        return np.asarray((g.integers(-3, 4, shape) + 1j * g.integers(-3, 4, shape)).astype(dtype))
    return np.asarray(g.integers(-3, 4, shape).astype(dtype))


def _reduced(arrays: list[np.ndarray], op: str, dtype: str) -> np.ndarray:
    """The oracle of a reduction, written from the documented semantics (ops.py)."""
    kind, n = np.dtype(dtype).kind, len(arrays)
    if op == "AVG":
        total = np.sum(np.stack(arrays), axis=0, dtype=np.float32 if dtype == "float16" else dtype)
        if kind in "fc":
            return (total / n).astype(dtype)
        if kind == "u":
            return (total // n).astype(dtype)
        return (np.sign(total) * (np.abs(total) // n)).astype(dtype)  # toward zero
    fn = _BINARY[op]
    if kind == "b":
        fn = {"SUM": np.logical_or, "PRODUCT": np.logical_and}.get(op, fn)
    acc = arrays[0].astype(np.float32) if dtype == "float16" else arrays[0].copy()
    for a in arrays[1:]:
        acc = fn(acc, a).astype(acc.dtype)
    return acc.astype(dtype)


def _buffer(values: np.ndarray, style: int) -> np.ndarray:
    """``values`` in a buffer of ``style``: 0 contiguous, 1 every other element of a wider
    array, 2 transposed (the last two axes)."""
    if style == 1 and values.ndim >= 1:
        base = np.zeros(values.shape[:-1] + (values.shape[-1] * 2,), values.dtype)
        view = base[..., ::2]
        view[...] = values
        return view
    if style == 2 and values.ndim >= 2:
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(values, -1, -2)), -1, -2)
    return values.copy()


def _check(label: str, got: Any, want: np.ndarray, call: int) -> None:
    got = np.asarray(got)
    same = got.shape == want.shape and (
        np.allclose(got, want, rtol=1e-3) if want.dtype.kind in "fc" else np.array_equal(got, want))
    if not same:
        raise AssertionError(f"call {call}, rank {dist.get_rank()}: {label}: got {got.dtype}"
                             f"{got.shape} {got.reshape(-1)[:8]}, want {want.dtype}{want.shape} "
                             f"{want.reshape(-1)[:8]}")


def _check_each(label: str, got: Sequence[Any], want: Sequence[np.ndarray], call: int) -> None:
    for g, w in zip(got, want):
        _check(label, g, w, call)


def _nothing() -> None:
    pass


def random_program(seed: int, calls: int, largest: int = 65536, torch_tensors: bool = False
                   ) -> dict[str, int]:
    """Run ``calls`` random calls drawn from ``seed`` (the same on every rank) and check each.

    Args:
        largest: a long 1-D call has up to 8 times this many elements.
        torch_tensors: pass half the buffers as torch tensors sharing the arrays' memory.

    Returns:
        how many calls of each kind this rank made.

    Raises:
        AssertionError: a result differs from the oracle (names the call and rank).
    """
    r, n = dist.get_rank(), dist.get_world_size()
    program = np.random.default_rng(seed)
    local = np.random.default_rng([seed, 99, r])  # per-rank choices that need no agreement
    torch = None
    if torch_tensors:
        import torch
    groups: list[tuple[Any, list[int]]] = [(dist.group.WORLD, list(range(n)))]
    if n >= 2:
        for ranks in ([q for q in range(n) if q % 2 == 0], list(range(1, n)), [0, n - 1]):
            g = dist.new_group(sorted(set(ranks)))
            groups.append((None if g is dist.GroupMember.NON_GROUP_MEMBER else g,
                           sorted(set(ranks))))

    def wrap(a: np.ndarray) -> Any:
        if torch is None or a.dtype.name == "uint64" or (a.strides and min(a.strides) < 0):
            return a
        return torch.from_numpy(a) if local.random() < 0.5 else a

    pending: list[tuple[Any, Callable[[], Any]]] = []

    def settle() -> None:
        for work, check in pending:
            work.wait()
            check()
        pending.clear()

    made: dict[str, int] = {}
    for call in range(calls):
        # every draw happens on every rank, member or not, so the program stays in step
        g, members = groups[int(program.integers(0, len(groups)))]
        kind = KINDS[int(program.integers(0, len(KINDS)))]
        dtype = DTYPES[int(program.integers(0, len(DTYPES)))]
        if program.random() < 0.15:
            shape: tuple = (int(program.integers(1, largest * 8)),)
        else:
            shape = tuple(int(program.integers(0, 6)) for _ in range(int(program.integers(0, 4))))
        op = OPS[int(program.integers(0, len(OPS)))]
        while not _valid(op, dtype):
            op = OPS[int(program.integers(0, len(OPS)))]
        style = int(program.integers(0, 3))
        root = int(program.integers(0, len(members)))
        async_op = bool(program.random() < 0.3)
        splits = program.integers(0, 4, (len(members), len(members)))
        tag = int(program.integers(0, 50))
        if program.random() < 0.5:
            settle()
        if g is None:
            continue
        me, size = members.index(r), len(members)
        made[kind] = made.get(kind, 0) + 1
        inputs = [_data(seed, call, members[q], 0, shape, dtype) for q in range(size)]
        rop = getattr(dist.ReduceOp, op)
        check: Callable[[], Any] = _nothing
        work = None
        if kind == "all_reduce":
            x = _buffer(inputs[me], style)
            want = _reduced(inputs, op, dtype)
            work = dist.all_reduce(wrap(x), op=rop, group=g, async_op=async_op)
            check = partial(_check, f"all_reduce {op}", x, want, call)
        elif kind == "broadcast":
            x = _buffer(inputs[me], style)
            work = dist.broadcast(wrap(x), src=members[root], group=g, async_op=async_op)
            check = partial(_check, "broadcast", x, inputs[root], call)
        elif kind == "reduce":
            x = _buffer(inputs[me], style)
            want = _reduced(inputs, op, dtype)
            work = dist.reduce(wrap(x), dst=members[root], op=rop, group=g, async_op=async_op)
            if me == root:
                check = partial(_check, f"reduce {op}", x, want, call)
        elif kind == "all_gather":
            outs = [_buffer(np.zeros(shape, dtype), style) for _ in range(size)]
            work = dist.all_gather([wrap(o) for o in outs], wrap(_buffer(inputs[me], style)),
                                   group=g, async_op=async_op)
            check = partial(_check_each, "all_gather", outs, inputs, call)
        elif kind == "all_gather_into_tensor":
            out = np.zeros(size * int(np.prod(shape)), dtype)
            work = dist.all_gather_into_tensor(wrap(out), wrap(_buffer(inputs[me], style)),
                                               group=g, async_op=async_op)
            want = np.concatenate([a.reshape(-1) for a in inputs])
            check = partial(_check, "all_gather_into_tensor", out, want, call)
        elif kind == "gather":
            outs = [np.zeros(shape, dtype) for _ in range(size)] if me == root else None
            work = dist.gather(wrap(_buffer(inputs[me], style)),
                               [wrap(o) for o in outs] if outs else None, dst=members[root],
                               group=g, async_op=async_op)
            if outs:
                check = partial(_check_each, "gather", outs, inputs, call)
        elif kind == "scatter":
            pieces = [_data(seed, call, members[root], 1 + q, shape, dtype) for q in range(size)]
            out = _buffer(np.zeros(shape, dtype), style)
            work = dist.scatter(wrap(out), [wrap(p) for p in pieces] if me == root else None,
                                src=members[root], group=g, async_op=async_op)
            check = partial(_check, "scatter", out, pieces[me], call)
        elif kind == "reduce_scatter":
            mine = [_data(seed, call, members[me], 1 + q, shape, dtype) for q in range(size)]
            theirs = [_data(seed, call, members[q], 1 + me, shape, dtype) for q in range(size)]
            out = _buffer(np.zeros(shape, dtype), style)
            work = dist.reduce_scatter(wrap(out), [wrap(_buffer(p, style)) for p in mine], op=rop,
                                       group=g, async_op=async_op)
            want = _reduced(theirs, op, dtype)
            check = partial(_check, f"reduce_scatter {op}", out, want, call)
        elif kind == "reduce_scatter_tensor":
            count = int(np.prod(shape))
            full = [np.concatenate([_data(seed, call, members[q], 1 + j, shape, dtype).reshape(-1)
                                    for j in range(size)]) for q in range(size)]
            out = np.zeros(count, dtype)
            work = dist.reduce_scatter_tensor(wrap(out), wrap(full[me].copy()), op=rop, group=g,
                                              async_op=async_op)
            want = _reduced([f[me * count:(me + 1) * count] for f in full], op, dtype)
            check = partial(_check, f"reduce_scatter_tensor {op}", out, want, call)
        elif kind == "all_to_all":
            tail = shape[1:]
            ins = [_data(seed, call, members[me], 1 + q, (int(splits[me, q]),) + tail, dtype)
                   for q in range(size)]
            outs = [np.zeros((int(splits[q, me]),) + tail, dtype) for q in range(size)]
            work = dist.all_to_all([wrap(o) for o in outs], [wrap(i) for i in ins], group=g,
                                   async_op=async_op)
            wants = [_data(seed, call, members[q], 1 + me, (int(splits[q, me]),) + tail, dtype)
                     for q in range(size)]
            check = partial(_check_each, "all_to_all", outs, wants, call)
        elif kind == "all_to_all_single":
            tail = shape[1:]
            even = splits[0, 0] % 2 == 0
            counts = np.full((size, size), int(splits[0, -1])) if even else splits
            inp = np.concatenate([_data(seed, call, members[me], 1 + q, (int(counts[me, q]),) + tail,
                                        dtype) for q in range(size)])
            out = np.zeros((int(counts[:, me].sum()),) + tail, dtype)
            work = dist.all_to_all_single(
                wrap(out), wrap(inp), None if even else [int(v) for v in counts[:, me]],
                None if even else [int(v) for v in counts[me]], group=g, async_op=async_op)
            want = np.concatenate([_data(seed, call, members[q], 1 + me,
                                         (int(counts[q, me]),) + tail, dtype) for q in range(size)])
            check = partial(_check, "all_to_all_single", out, want, call)
        elif kind == "barrier":
            work = dist.barrier(group=g, async_op=async_op)
        elif kind in ("p2p", "batch"):
            settle()
            if size == 1:
                continue
            right, left = members[(me + 1) % size], members[(me - 1) % size]
            x, y = _buffer(inputs[me], style), _buffer(np.zeros(shape, dtype), style)
            if kind == "batch":
                for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, wrap(x), right, g, tag),
                                                 dist.P2POp(dist.irecv, wrap(y), left, g, tag)]):
                    w.wait()
            elif me % 2 == 0:
                dist.send(wrap(x), right, group=g, tag=tag)
                dist.recv(wrap(y), left, group=g, tag=tag)
            else:
                got = dist.irecv(wrap(y), left, group=g, tag=tag)
                dist.isend(wrap(x), right, group=g, tag=tag).wait()
                got.wait()
            _check(kind, y, inputs[(me - 1) % size], call)
            continue
        else:  # objects
            settle()
            obj = {"call": call, "rank": r, "list": list(range(call % 7))}
            form = call % 4
            if form == 0:
                got_list: list[Any] = [obj if me == root else None]
                dist.broadcast_object_list(got_list, src=members[root], group=g)
                assert got_list[0] == {**obj, "rank": members[root]}, got_list
            elif form == 1:
                got_list = [None] * size
                dist.all_gather_object(got_list, obj, group=g)
                assert [o["rank"] for o in got_list] == members, got_list
            elif form == 2:
                got_list = [None] * size if me == root else None  # type: ignore[assignment]
                dist.gather_object(obj, got_list, dst=members[root], group=g)
                if me == root:
                    assert [o["rank"] for o in got_list] == members, got_list
            else:
                got_list = [None]
                dist.scatter_object_list(got_list, [{"to": q} for q in members]
                                         if me == root else None, src=members[root], group=g)
                assert got_list[0] == {"to": r}, got_list
            continue
        if async_op:
            pending.append((work, check))
        else:
            assert work is None, (kind, work)
            check()
    settle()
    dist.barrier()
    return made
