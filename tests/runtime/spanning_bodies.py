"""Rank bodies for worlds that span (simulated) hosts: every primitive against the oracle."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import meshcast as dist
from meshcast import ops
from meshcast.algorithms import hierarchical as hier
from meshcast.testing import reference as ref

DTYPES = ["float32", "int64", "float16", "bool", "uint8", "complex64"]
COUNTS = [0, 1, 7, 300, 3000, 40000]  # 3000: eager on the direct route (at most 32 KiB);
# the last passes the rails threshold in float32


def quick_polls_from_env() -> None:
    """QUICK_POLLS=0 in the environment: every exchange over MPI ends in the general wait
    (so the compiled calls' pending states are run through); call before init."""
    if "QUICK_POLLS" in os.environ:
        from meshcast.transport.mpi import MpiComm

        MpiComm.QUICK_POLLS = int(os.environ["QUICK_POLLS"])


def _valid(op, dtype) -> bool:
    try:
        ops.validate(op, np.dtype(dtype), caller="t", rank=0)
    except dist.InvalidUsage:
        return False
    return True


def _eq(got, want, case):
    got, want = np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)
    if got.dtype.kind == "f" and got.dtype.itemsize == 2:
        ok = np.allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2)
    else:
        ok = np.array_equal(got, want)
    if not ok:
        raise AssertionError(f"{case}: got {got[:8]} want {want[:8]}")


def every_primitive(families=(None,)):
    """Every collective, dtype, op, root and size of this file's lists; returns the
    algorithms that ran, per collective."""
    r, n = dist.get_rank(), dist.get_world_size()
    ran: dict[str, set[str]] = {}
    g = dist.group.WORLD

    def note(kind):
        ran.setdefault(kind, set()).add(g.last_algorithm)

    def forced(kind):  # a family forced on the collectives that have it (as '*:NAME' does)
        return fam if fam in hier.families(kind) else None

    for fam in families:
        for dtype in DTYPES:
            counts = COUNTS if dtype in ("float32", "int64") else [5]
            for count in counts:
                inputs = [ref.rank_input(q, count, dtype) for q in range(n)]
                case = f"{dtype} x{count} algorithm={fam}"
                for op in ops.ReduceOp:
                    if not _valid(op, dtype):
                        continue
                    x = inputs[r].copy()
                    dist.all_reduce(x, op, algorithm=fam)
                    _eq(x, ref.reduced(inputs, op), f"all_reduce {op.name} {case}")
                    note("all_reduce")
                    for root in range(n):
                        if fam == "rails":
                            break
                        x = inputs[r].copy()
                        dist.reduce(x, root, op, algorithm=forced("reduce"))
                        if r == root:
                            _eq(x, ref.reduced(inputs, op), f"reduce {op.name} root {root} {case}")
                        else:
                            _eq(x, inputs[r], f"reduce leaves non-roots alone {case}")
                        note("reduce")
                    if count % n == 0 or True:
                        full = [ref.rank_input(q, count * n, dtype, 5) for q in range(n)]
                        out = np.empty(count, inputs[r].dtype)
                        dist.reduce_scatter_tensor(out, full[r].copy(), op, algorithm=fam)
                        _eq(out, ref.reduce_scatter(full, op)[r], f"reduce_scatter {op.name} {case}")
                        note("reduce_scatter")
                        whole = full[r].copy()  # in place: the output is my piece of the input
                        mine = whole[r * count:(r + 1) * count]
                        dist.reduce_scatter_tensor(mine, whole, op, algorithm=fam)
                        _eq(mine, ref.reduce_scatter(full, op)[r],
                            f"reduce_scatter in place {op.name} {case}")
                for root in range(n):
                    x = inputs[r].copy()
                    dist.broadcast(x, root, algorithm=fam)
                    _eq(x, inputs[root], f"broadcast root {root} {case}")
                    note("broadcast")
                outs = [np.empty(count, inputs[r].dtype) for _ in range(n)]
                dist.all_gather(outs, inputs[r], algorithm=fam)
                _eq(np.concatenate(outs), np.concatenate(inputs), f"all_gather {case}")
                note("all_gather")
                # in place: my input is my piece of the output (torch's own idiom)
                whole = np.empty(count * n, inputs[r].dtype)
                whole[r * count:(r + 1) * count] = inputs[r]
                dist.all_gather_into_tensor(whole, whole[r * count:(r + 1) * count],
                                            algorithm=fam)
                _eq(whole, np.concatenate(inputs), f"all_gather in place {case}")
                if fam == "rails":
                    continue
                for root in range(n):
                    gl = [np.empty(count, inputs[r].dtype) for _ in range(n)] if r == root else None
                    dist.gather(inputs[r], gl, root, algorithm=forced("gather"))
                    if r == root:
                        _eq(np.concatenate(gl), np.concatenate(inputs), f"gather {root} {case}")
                    note("gather")
                    out = np.empty(count, inputs[r].dtype)
                    dist.scatter(out, list(inputs) if r == root else None, root,
                                 algorithm=forced("scatter"))
                    _eq(out, inputs[r], f"scatter {root} {case}")
                    note("scatter")
                a2a = ref.rank_input(r, count * n, dtype, 7)
                out = np.empty_like(a2a)
                dist.all_to_all_single(out, a2a)
                _eq(out, ref.all_to_all([ref.rank_input(q, count * n, dtype, 7)
                                         for q in range(n)])[r], f"all_to_all {case}")
                note("all_to_all")
    return {k: sorted(v) for k, v in ran.items()}


def reductions_the_engine_lacks():
    """all_reduce and reduce_scatter in the dtypes Gloo cannot reduce (int16, uint16,
    uint32, uint64: "Invalid scalar type"): every family forced, and the table's own
    choice at a size that runs ``flat`` (Gloo's allreduce) by default; the inter-host
    step must combine in meshcast instead. Against the oracle."""
    r, n = dist.get_rank(), dist.get_world_size()
    for dtype in ("int16", "uint16", "uint32", "uint64"):
        for fam, count in (("leader", 1000), ("flat", 1000), ("rails", 1000),
                           (None, (3 << 20) // np.dtype(dtype).itemsize)):
            if fam == "rails" and n % 2:
                continue
            inputs = [ref.rank_input(q, count, dtype) for q in range(n)]
            for op in (ops.ReduceOp.SUM, ops.ReduceOp.MAX):
                x = inputs[r].copy()
                dist.all_reduce(x, op, algorithm=fam)
                _eq(x, ref.reduced(inputs, op), f"all_reduce {op.name} {dtype} x{count} {fam}")
            full = [ref.rank_input(q, count * n, dtype, 5) for q in range(n)]
            out = np.empty(count, dtype)
            dist.reduce_scatter_tensor(out, full[r].copy(), ops.ReduceOp.SUM, algorithm=fam)
            _eq(out, ref.reduce_scatter(full, ops.ReduceOp.SUM)[r],
                f"reduce_scatter {dtype} x{count} {fam}")


def uneven_and_shapes():
    """Uneven pieces, multi-dimensional and non-contiguous arrays, uneven all_to_all."""
    r, n = dist.get_rank(), dist.get_world_size()
    counts = [2 + q for q in range(n)]
    ins = [np.arange(c, dtype=np.int32) + 100 * q for q, c in enumerate(counts)]
    outs = [np.empty(c, np.int32) for c in counts]
    dist.all_gather(outs, ins[r])
    _eq(np.concatenate(outs), np.concatenate(ins), "uneven all_gather")
    gl = [np.empty(c, np.int32) for c in counts] if r == 0 else None
    dist.gather(ins[r], gl, dst=0)
    if r == 0:
        _eq(np.concatenate(gl), np.concatenate(ins), "uneven gather")
    out = np.empty(counts[r], np.int32)
    dist.scatter(out, ins if r == n - 1 else None, src=n - 1)
    _eq(out, ins[r], "uneven scatter")
    # 2-D, and a non-contiguous view
    m = np.arange(24, dtype=np.float64).reshape(4, 6) * (r + 1)
    view = m[:, ::2]
    dist.all_reduce(view)
    want = np.arange(24, dtype=np.float64).reshape(4, 6)[:, ::2] * sum(range(1, n + 1))
    _eq(view, want, "non-contiguous all_reduce")
    _eq(m[:, 1::2], (np.arange(24.0).reshape(4, 6) * (r + 1))[:, 1::2], "untouched columns")
    splits = [(r + q) % 3 for q in range(n)]
    inp = np.full(sum(splits), r, np.int16)
    recv = [(q + r) % 3 for q in range(n)]
    out = np.empty(sum(recv), np.int16)
    dist.all_to_all_single(out, inp, recv, splits)
    _eq(out, np.concatenate([np.full(c, q, np.int16) for q, c in enumerate(recv)]),
        "uneven all_to_all_single")
    # in place, past the eager size: the engine's all-to-all must not read what it wrote
    x = np.arange(4096 * n, dtype=np.int32) + 100_000 * r
    dist.all_to_all_single(x, x)
    _eq(x, np.concatenate([np.arange(4096 * r, 4096 * (r + 1), dtype=np.int32) + 100_000 * q
                           for q in range(n)]), "all_to_all in place")
    assert dist.group.WORLD.last_algorithm != "all_to_all/eager"
    return True


def p2p_objects_groups_async():
    r, n = dist.get_rank(), dist.get_world_size()
    # ring of sends and receives across hosts, explicit source and any source
    right, left = (r + 1) % n, (r - 1) % n
    buf = np.empty(1000, np.float64)
    reqs = [dist.isend(np.full(1000, r, np.float64), right, tag=7),
            dist.irecv(buf, left, tag=7)]
    for q in reqs:
        q.wait()
    _eq(buf, np.full(1000, left), "isend/irecv ring")
    if r == 0:
        got = set()
        for _ in range(n - 1):
            b = np.empty(3, np.int64)
            src = dist.recv(b, tag=11)
            _eq(b, np.full(3, src), f"recv from any ({src})")
            got.add(src)
        assert got == set(range(1, n)), got
    else:
        dist.send(np.full(3, r, np.int64), 0, tag=11)
    ops_ = [dist.P2POp(dist.isend, np.full(4, r, np.int32), right, tag=12),
            dist.P2POp(dist.irecv, b2 := np.empty(4, np.int32), left, tag=12)]
    for w in dist.batch_isend_irecv(ops_):
        w.wait()
    _eq(b2, np.full(4, left), "batch_isend_irecv")
    # objects
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r, "name": f"r{r}"})
    assert objs == [{"rank": q, "name": f"r{q}"} for q in range(n)], objs
    lst = [f"hello from {r}"] if r == 1 else [None]
    dist.broadcast_object_list(lst, src=1)
    assert lst == ["hello from 1"], lst
    # a subgroup of every other rank (spans hosts or not), and async work
    sub = dist.new_group([q for q in range(n) if q % 2 == 0])
    if r % 2 == 0:
        x = np.full(5, r, np.int64)
        dist.all_reduce(x, group=sub)
        _eq(x, np.full(5, sum(q for q in range(n) if q % 2 == 0)), "subgroup all_reduce")
    works = [dist.all_reduce(np.full(10, r + i, np.float32), async_op=True) for i in range(4)]
    for w in works:
        w.wait()
    dist.barrier()
    return True


def even_beside_uneven_all_to_all():
    """Legal all_to_alls where some ranks' pieces are even and others' are not: the even
    ranks (0, 2, ...) send and receive ``k`` elements with everyone, the odd ones more with
    each other (``k`` = 1, then 0: every piece between even ranks empty). One rank's own
    counts cannot tell which all-to-all the engine runs: when an even rank ran MPI's
    Ialltoall beside an odd rank's Ialltoallv, this call or the next one hung. Lists and
    single form, each twice, then an all_reduce, all against the oracle."""
    r, n = dist.get_rank(), dist.get_world_size()
    g = dist.new_group(list(range(n)), timeout=30)  # a hang fails in seconds, not minutes

    def size(i: int, j: int, k: int) -> int:  # what rank i sends rank j
        return k if i % 2 == 0 or j % 2 == 0 else 1 + i + j

    for k in (1, 0, 1):
        send = [size(r, q, k) for q in range(n)]
        recv = [size(q, r, k) for q in range(n)]
        for _ in range(2):
            ins = [np.full(send[q], 100 * r + q, np.int32) for q in range(n)]
            outs = [np.full(recv[q], -1, np.int32) for q in range(n)]
            dist.all_to_all(outs, ins, group=g)
            for q in range(n):
                _eq(outs[q], np.full(recv[q], 100 * q + r, np.int32), f"all_to_all k={k} from {q}")
            out = np.full(sum(recv), -1, np.int64)
            dist.all_to_all_single(out, np.concatenate(ins).astype(np.int64), recv, send,
                                   group=g)
            _eq(out, np.concatenate([np.full(recv[q], 100 * q + r) for q in range(n)]),
                f"all_to_all_single k={k}")
        total = np.array([r], np.int64)
        dist.all_reduce(total, group=g)
        _eq(total, np.array([n * (n - 1) // 2]), f"all_reduce after k={k}")
    dist.destroy_process_group(g)


def all_to_all_split_checks(case: str) -> Any:
    """all_to_all across hosts checks every pair of split sizes, with a round of its own
    only when some rank's pieces are uneven or its input another size: even pieces of
    one size agree by their agreement rows. ``case`` "rounds": how many split tables
    went round for an even call and for an uneven one; "other size" (the last rank's
    input larger, its pieces even) and "one rank's splits" (the last rank sends rank 0
    one more): the MismatchError's text, the same on every rank (a mismatch leaves the
    group unusable, so one case a world)."""
    from meshcast.spanning import HostSpanningGroup

    r, n = dist.get_rank(), dist.get_world_size()
    if case != "rounds":
        size = 4 * n if case == "other size" and r == n - 1 else 3 * n
        split = ([4] + [3] * (n - 1)) if case == "one rank's splits" and r == n - 1 else None
        inp = np.zeros(sum(split) if split else size, np.int32)
        try:
            dist.all_to_all_single(np.empty(size, np.int32), inp, None, split)
        except dist.MismatchError as exc:
            return str(exc)
        raise AssertionError(f"{case}: no MismatchError")
    tables = [0]
    real = HostSpanningGroup._check_splits

    def counted(self: Any, *args: Any) -> None:
        tables[0] += 1
        real(self, *args)

    HostSpanningGroup._check_splits = counted
    try:
        inp = np.arange(3 * n, dtype=np.int32) + 100 * r
        got = np.empty_like(inp)
        dist.all_to_all_single(got, inp)
        _eq(got, np.concatenate([np.arange(3 * r, 3 * r + 3, dtype=np.int32) + 100 * q
                                 for q in range(n)]), "even all_to_all")
        even = tables[0]
        splits = [1 + (r + q) % 2 for q in range(n)]  # uneven, consistent
        recv = [1 + (q + r) % 2 for q in range(n)]
        got = np.empty(sum(recv), np.int32)
        dist.all_to_all_single(got, np.full(sum(splits), r, np.int32), recv, splits)
        _eq(got, np.concatenate([np.full(c, q, np.int32) for q, c in enumerate(recv)]),
            "uneven all_to_all")
    finally:
        HostSpanningGroup._check_splits = real
    return {"even": even, "uneven": tables[0] - even}


def mismatch_is_the_same_error_everywhere(different_kinds: bool, odd_count: int = 5):
    """The last rank (on another host) calls something else; returns each rank's error.

    ``odd_count``: its count when the kinds agree (5000: its data is too large to ride in
    the agreement while the others' rides: the exchange must still line up)."""
    r, n = dist.get_rank(), dist.get_world_size()
    try:
        if different_kinds and r == n - 1:
            dist.broadcast(np.zeros(4, np.float32), src=0)
        else:
            dist.all_reduce(np.zeros(4 if r != n - 1 else odd_count, np.float32))
    except dist.MismatchError as exc:
        return str(exc)
    raise AssertionError("no MismatchError")


def lane_beside_general_path():
    """Tiny calls across hosts: in the same call some ranks take the cached lane
    (contiguous arrays) and one the general path (a strided view of its array); every
    rank gets the oracle's result. Also: 2-D and zero-size arrays, a lane call queued
    behind async work, and the lane's barrier. Returns what the last call ran."""
    r, n = dist.get_rank(), dist.get_world_size()
    g = dist.group.WORLD

    def placed(values, strided):
        if not strided:
            return values.copy()
        x = np.empty(values.size * 2, values.dtype)[::2]
        x[...] = values
        return x

    for general in range(n):
        for dtype in ("float32", "int64", "complex64", "uint8"):
            inputs = [ref.rank_input(q, 6, dtype) for q in range(n)]
            for op in ops.ReduceOp:
                if not _valid(op, dtype):
                    continue
                x = placed(inputs[r], r == general)
                dist.all_reduce(x, op)
                _eq(x, ref.reduced(inputs, op), f"all_reduce {op.name} {dtype}, rank "
                                                f"{general} on the general path")
                assert g.last_algorithm == "all_reduce/eager", g.last_algorithm
            for root in range(n):
                x = placed(inputs[r], r == general)
                dist.broadcast(x, root)
                _eq(x, inputs[root], f"broadcast root {root} {dtype}, rank {general} general")
                assert g.last_algorithm == "broadcast/eager", g.last_algorithm
                for op in (ops.ReduceOp.SUM, ops.ReduceOp.MAX, ops.ReduceOp.AVG):
                    if not _valid(op, dtype):
                        continue
                    x = placed(inputs[r], r == general)
                    dist.reduce(x, root, op)
                    _eq(x, ref.reduced(inputs, op) if r == root else inputs[r],
                        f"reduce {op.name} root {root} {dtype}, rank {general} general")
                    assert g.last_algorithm == "reduce/eager", g.last_algorithm
            whole = np.empty(6 * n * (2 if r == general else 1), inputs[r].dtype)
            out = whole[::2] if r == general else whole
            dist.all_gather_into_tensor(out, inputs[r])
            _eq(out, np.concatenate(inputs), f"all_gather {dtype}, rank {general} general")
            assert g.last_algorithm == "all_gather/eager", g.last_algorithm
            out[r * 6:(r + 1) * 6] = inputs[r]  # in place: my input is my piece of the output
            dist.all_gather_into_tensor(out, out[r * 6:(r + 1) * 6])
            _eq(out, np.concatenate(inputs), f"all_gather in place {dtype}, rank {general}")
            full = [ref.rank_input(q, 3 * n, dtype, 5) for q in range(n)]
            for op in (ops.ReduceOp.SUM, ops.ReduceOp.MIN, ops.ReduceOp.AVG):
                if not _valid(op, dtype):
                    continue
                got = placed(np.empty(3, inputs[r].dtype), r == general)
                dist.reduce_scatter_tensor(got, full[r], op)
                _eq(got, ref.reduce_scatter(full, op)[r], f"reduce_scatter {op.name} {dtype}, "
                                                         f"rank {general} general")
                assert g.last_algorithm == "reduce_scatter/eager", g.last_algorithm
                mine = full[r].copy()  # in place: the output is my piece of the input
                dist.reduce_scatter_tensor(mine[r * 3:(r + 1) * 3], mine, op)
                _eq(mine[r * 3:(r + 1) * 3], ref.reduce_scatter(full, op)[r],
                    f"reduce_scatter in place {op.name} {dtype}")
            for root in range(n):
                x = placed(inputs[r], r == general)
                outs = [np.empty(6, inputs[r].dtype) for _ in range(n)] if r == root else None
                dist.gather(x, outs, dst=root)
                if r == root:
                    _eq(np.concatenate(outs), np.concatenate(inputs),
                        f"gather root {root} {dtype}, rank {general} general")
                assert g.last_algorithm == "gather/eager", g.last_algorithm
                got = placed(np.empty(6, inputs[r].dtype), r == general)
                dist.scatter(got, [q.copy() for q in inputs] if r == root else None, src=root)
                _eq(got, inputs[r], f"scatter root {root} {dtype}, rank {general} general")
                assert g.last_algorithm == "scatter/eager", g.last_algorithm
            got = placed(np.empty(3 * n, inputs[r].dtype), r == general)
            dist.all_to_all_single(got, full[r])
            _eq(got, np.concatenate([f[r * 3:(r + 1) * 3] for f in full]),
                f"all_to_all {dtype}, rank {general} general")
            assert g.last_algorithm == "all_to_all/eager", g.last_algorithm
            mine = full[r].copy()  # in place
            dist.all_to_all_single(mine, mine)
            _eq(mine, np.concatenate([f[r * 3:(r + 1) * 3] for f in full]),
                f"all_to_all in place {dtype}")
    # A legal uneven gather and scatter: the last rank's piece is longer, so the root's
    # list is uneven (the general path) while the others expect even pieces (the lane):
    # they finish the call the general way, with no error.
    sizes = [2] * (n - 1) + [5]
    for root in range(n):
        mine = np.full(sizes[r], r, np.int32)
        outs = [np.empty(k, np.int32) for k in sizes] if r == root else None
        dist.gather(mine, outs, dst=root)
        if r == root:
            _eq(np.concatenate(outs), np.repeat(np.arange(n), sizes), f"uneven gather {root}")
        got = np.empty(sizes[r], np.int32)
        dist.scatter(got, [np.full(k, q, np.int32) for q, k in enumerate(sizes)]
                     if r == root else None, src=root)
        _eq(got, np.full(sizes[r], r), f"uneven scatter root {root}")
    assert any(g.lane.plans.values()), "the lane took no call"
    x = np.full((2, 3), r + 1, np.int32)
    dist.all_reduce(x)
    _eq(x, np.full((2, 3), n * (n + 1) // 2), "2-D all_reduce")
    out = np.empty((n, 2, 3), np.int32)
    dist.all_gather_into_tensor(out, np.full((2, 3), r, np.int32))
    _eq(out, np.repeat(np.arange(n), 6), "2-D all_gather")
    got = np.empty((1, 2), np.float64)
    dist.reduce_scatter_tensor(got, np.ones((n, 2), np.float64))
    _eq(got, np.full(2, float(n)), "2-D reduce_scatter")
    got = np.empty((n, 2), np.int16)
    dist.all_to_all_single(got, np.full((n, 2), r, np.int16))
    _eq(got, np.repeat(np.arange(n), 2), "2-D all_to_all")
    x = np.zeros((0, 4), np.float32)
    dist.all_reduce(x)
    dist.broadcast(x, n - 1)
    dist.all_to_all_single(x, x)
    big = np.full(200_000, r, np.float32)  # past the eager size: the general path, async
    work = dist.all_reduce(big, async_op=True)
    small = np.full(2, r, np.float64)
    dist.all_reduce(small)  # the group is busy: the lane's call queues behind the work
    work.wait()
    _eq(big, np.full(200_000, n * (n - 1) // 2), "async all_reduce before a lane call")
    _eq(small, np.full(2, n * (n - 1) // 2), "lane call behind async work")
    dist.barrier()
    return g.last_algorithm


def large_reduce_scatters(count: int = (4 << 20) // 4 + 5) -> list[str]:
    """Rails reduce_scatters whose pieces hold 4 engine chunks or more (which then go
    on the link in chunks: the early ones at the edges of each host's span, the rest in
    pieces), with uneven pieces (the chunks' edges differ per piece) and with even
    ones; each against the oracle, the input unchanged. Returns what ran."""
    r, n = dist.get_rank(), dist.get_world_size()
    g = dist.group.WORLD
    seen = []
    for counts in ([count + 7 * (q % 3) for q in range(n)], [count] * n):
        full = [ref.rank_input(q, sum(counts), "float32", 9) for q in range(n)]
        want = ref.reduce_scatter(full, ops.ReduceOp.SUM, counts)[r]
        mine = full[r].copy()
        pieces = np.split(mine, np.cumsum(counts)[:-1])
        out = np.empty(counts[r], np.float32)
        dist.reduce_scatter(out, list(pieces), algorithm="rails")
        _eq(out, want, f"reduce_scatter of {counts} algorithm=rails")
        _eq(mine, full[r], "reduce_scatter's input after the call")
        seen.append(g.last_algorithm)
    return seen


def large_broadcasts(count: int = 600_000, default_count: int = (3 << 20) // 4) -> list[str]:
    """Broadcasts larger than the engine's broadcast chunk from every root: forced
    'leader' (which then moves them in chunks, the hosts' own broadcasts overlapping the
    link, where the engine pipelines) and, at ``default_count``, what the table picks;
    each against the root's data. Returns what ran."""
    r, n = dist.get_rank(), dist.get_world_size()
    g = dist.group.WORLD
    seen = []
    for fam, c in (("leader", count), (None, default_count)):
        for root in range(n):
            want = ref.rank_input(root, c, "float32")
            x = want.copy() if r == root else np.zeros(c, np.float32)
            dist.broadcast(x, root, algorithm=fam)
            _eq(x, want, f"broadcast x{c} root {root} algorithm={fam}")
            seen.append(g.last_algorithm)
    return seen
