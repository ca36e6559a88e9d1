"""all_reduce and reduce_scatter with the agreement riding in their data (algorithm
'fused') across hosts, and broadcasts whose data ride in their agreement: every dtype,
op and size against the oracle, then a mismatch (SCENARIO) that must be the same
MismatchError on every rank, never a hang."""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.runtime import spanning_bodies as bodies  # noqa: E402

import meshcast as dist  # noqa: E402
from meshcast import ops  # noqa: E402
from meshcast.algorithms import hierarchical as hier  # noqa: E402
from meshcast.testing import reference as ref  # noqa: E402

bodies.quick_polls_from_env()
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
g = dist.group.WORLD
for dtype in bodies.DTYPES:
    for count in ([0, 1, 7, 3000, 40000, 100001] if dtype == "float32" else [5, 40000]):
        inputs = [ref.rank_input(q, count, dtype) for q in range(n)]
        for op in ops.ReduceOp:
            if not bodies._valid(op, dtype):
                continue
            for _ in range(2):  # the second call runs on the kept plan
                x = inputs[r].copy()
                dist.all_reduce(x, op, algorithm="fused")
                bodies._eq(x, ref.reduced(inputs, op), f"fused {op.name} {dtype} x{count}")
                assert g.last_algorithm == "all_reduce/fused", g.last_algorithm
x = np.arange(6000, dtype=np.float32).reshape(60, 100)[:, ::2] + r  # 2-D, strided
dist.all_reduce(x, algorithm="fused")
assert np.array_equal(x, (np.arange(6000, dtype=np.float32).reshape(60, 100)[:, ::2]) * n
                      + sum(range(n))), "strided"
works = [dist.all_reduce(np.full(20000, float(r + i), np.float32), algorithm="fused",
                         async_op=True) for i in range(3)]
for w in works:
    w.wait()
for dtype in bodies.DTYPES:
    for count in ([0, 1, 7, 3000, 25001] if dtype == "float32" else [5, 10000]):
        counts = [count + (q % 3) for q in range(n)]  # uneven pieces
        full = [ref.rank_input(q, sum(counts), dtype) for q in range(n)]
        for op in ops.ReduceOp:
            if not bodies._valid(op, dtype):
                continue
            want = ref.reduce_scatter(full, op, counts)[r]
            for _ in range(2):  # the second call runs on the kept plan
                out = np.full(counts[r], 1, dtype)
                pieces = np.split(full[r].copy(), np.cumsum(counts)[:-1])
                dist.reduce_scatter(out, pieces, op, algorithm="fused")
                bodies._eq(out, want, f"fused reduce_scatter {op.name} {dtype} x{count}")
                assert g.last_algorithm == "reduce_scatter/fused", g.last_algorithm
whole = ref.rank_input(r, 9000 * n, "float32") + 0  # in place: my output inside my input
everyone = [ref.rank_input(q, 9000 * n, "float32") for q in range(n)]
dist.reduce_scatter_tensor(whole[r * 9000:(r + 1) * 9000], whole, algorithm="fused")
bodies._eq(whole[r * 9000:(r + 1) * 9000], ref.reduce_scatter(everyone, ops.ReduceOp.SUM)[r],
           "fused reduce_scatter in place")
outs = [np.empty(10000, np.float32) for _ in range(3)]
works = [dist.reduce_scatter_tensor(o, np.full(10000 * n, float(r + i), np.float32),
                                    algorithm="fused", async_op=True) for i, o in enumerate(outs)]
for i, (w, o) in enumerate(zip(works, outs)):
    w.wait()
    assert (o == sum(range(n)) + n * i).all(), f"async reduce_scatter {i}: {o[:4]}"
# The same calls without algorithm=: synchronous NumPy calls take the lane, which runs
# them fused as the general path would (spanning_lane.AcrossHostsLane._fused).
for dtype in ("float32", "int64"):
    for op in ops.ReduceOp:
        if not bodies._valid(op, dtype):
            continue
        full = [ref.rank_input(q, 12000 * n, dtype) for q in range(n)]
        for _ in range(2):
            x = full[r].copy()
            dist.all_reduce(x, op)
            bodies._eq(x, ref.reduced(full, op), f"lane all_reduce {op.name} {dtype}")
            assert g.last_algorithm == "all_reduce/fused", g.last_algorithm
            out = np.zeros(12000, dtype)
            dist.reduce_scatter_tensor(out, full[r].copy(), op)
            bodies._eq(out, ref.reduce_scatter(full, op)[r], f"lane reduce_scatter {op.name}")
            assert g.last_algorithm == "reduce_scatter/fused", g.last_algorithm
assert {k[0] for k in g.lane.plans if k[-1] == "fused" and g.lane.plans[k]} == {
    "all_reduce", "reduce_scatter"}, "the lane ran no fused call"
# Both sides of the eager cap that an all_reduce's and a reduce_scatter's ranks share by
# host (hierarchical.SHARED_BY_HOST): at the cap the data ride in the agreement, one
# element past it the call runs fused; through the lane and (strided) the general path.
cap = hier.EAGER_BYTES["flat"] // len(g.layout.hosts[0])
assert g.eager_cap("all_reduce") == g.eager_cap("reduce_scatter") == cap, cap
for count, family in ((cap // 4, "eager"), (cap // 4 + 1, "fused")):
    full = [ref.rank_input(q, count, "float32") for q in range(n)]
    x = full[r].copy()
    dist.all_reduce(x)
    bodies._eq(x, ref.reduced(full, ops.ReduceOp.SUM), f"all_reduce x{count}")
    assert g.last_algorithm == f"all_reduce/{family}", (count, g.last_algorithm)
    y = np.zeros(2 * count, np.float32)[::2]
    y[...] = full[r]
    dist.all_reduce(y)
    bodies._eq(y, ref.reduced(full, ops.ReduceOp.SUM), f"strided all_reduce x{count}")
    assert g.last_algorithm == f"all_reduce/{family}", (count, g.last_algorithm)
    piece = count // n + (family == "fused")
    whole = [ref.rank_input(q, piece * n, "float32") for q in range(n)]
    out = np.zeros(piece, np.float32)
    dist.reduce_scatter_tensor(out, whole[r].copy())
    bodies._eq(out, ref.reduce_scatter(whole, ops.ReduceOp.SUM)[r], f"reduce_scatter x{piece}")
    assert g.last_algorithm == f"reduce_scatter/{family}", (piece, g.last_algorithm)
# A broadcast up to hierarchical.EAGER_BROADCAST_BYTES rides in its agreement (only the
# root's row carries data), through the lane or, for a strided array, the general path.
for count in (9000, 100001, 262144):
    for root in range(n):
        want = ref.rank_input(root, count, "float32")
        x = want.copy() if r == root else np.zeros(count, np.float32)
        dist.broadcast(x, src=root)
        bodies._eq(x, want, f"eager broadcast x{count} root {root}")
        assert g.last_algorithm == "broadcast/eager", g.last_algorithm
        y = np.zeros(2 * count, np.float32)[::2]
        y[...] = want if r == root else 0
        dist.broadcast(y, src=root)
        bodies._eq(y, want, f"eager broadcast x{count} root {root}, strided")
x = np.zeros((1 << 20) // 4 + 1, np.float32)  # one element past the cap: not eager
dist.broadcast(x, src=0)
assert g.last_algorithm == "broadcast/leader", g.last_algorithm  # the table's from 1 MiB
# So does an all_gather of up to hierarchical.EAGER_ALL_GATHER_BYTES a rank (every row).
for count in (9000, 100001, (512 << 10) // 4):
    pieces = [ref.rank_input(q, count, "float32") for q in range(n)]
    out = np.zeros(count * n, np.float32)
    dist.all_gather_into_tensor(out, pieces[r])
    bodies._eq(out, np.concatenate(pieces), f"eager all_gather x{count}")
    assert g.last_algorithm == "all_gather/eager", g.last_algorithm
    outs = [np.zeros(count, np.float32) for _ in range(n)]
    dist.all_gather(outs, pieces[r])
    bodies._eq(np.concatenate(outs), np.concatenate(pieces), f"eager all_gather list x{count}")
out = np.zeros(((512 << 10) // 4 + 1) * n, np.float32)  # past the cap
dist.all_gather_into_tensor(out, np.full(out.size // n, r, np.float32))
assert g.last_algorithm != "all_gather/eager", g.last_algorithm
assert (out.reshape(n, -1) == np.arange(n)[:, None]).all(), "all_gather past the cap"
# all_to_all in even pieces past the eager cap: fused (cells and pieces in one exchange),
# also by default between the eager cap and hierarchical.DEFAULTS' next step.
for dtype in ("float32", "int64", "uint8", "complex64"):
    for count in (9000 * n, 40000 * n):
        inputs = [ref.rank_input(q, count, dtype) for q in range(n)]
        for _ in range(2):  # the second call runs on the kept plan
            out = np.zeros(count, dtype)
            dist.all_to_all_single(out, inputs[r], algorithm="fused")
            bodies._eq(out, ref.all_to_all(inputs)[r], f"fused all_to_all {dtype} x{count}")
            assert g.last_algorithm == "all_to_all/fused", g.last_algorithm
        x = inputs[r].copy()  # in place, and by the table: fused below 1 MiB, then flat
        dist.all_to_all_single(x, x)
        bodies._eq(x, ref.all_to_all(inputs)[r], f"all_to_all in place {dtype} x{count}")
        assert g.last_algorithm == ("all_to_all/fused" if x.nbytes < 1 << 20
                                    else "all_to_all/flat"), (g.last_algorithm, x.nbytes)
# Both sides of an all_to_all's eager cap, shared by host too: even pieces of the most
# elements within it ride in the agreement, the next even size runs fused; through the
# lane and (strided) the general path.
cap = hier.EAGER_ALL_TO_ALL_BYTES["flat"] // len(g.layout.hosts[0])
assert g.eager_cap("all_to_all") == cap, (g.eager_cap("all_to_all"), cap)
for count, family in (((cap // 4) // n * n, "eager"), ((cap // 4) // n * n + n, "fused")):
    inputs = [ref.rank_input(q, count, "float32") for q in range(n)]
    out = np.zeros(count, np.float32)
    dist.all_to_all_single(out, inputs[r])
    bodies._eq(out, ref.all_to_all(inputs)[r], f"all_to_all x{count}")
    assert g.last_algorithm == f"all_to_all/{family}", (count, g.last_algorithm)
    y = np.zeros(2 * count, np.float32)[::2]
    y[...] = inputs[r]
    out = np.zeros(count, np.float32)
    dist.all_to_all_single(out, y)
    bodies._eq(out, ref.all_to_all(inputs)[r], f"strided all_to_all x{count}")
    assert g.last_algorithm == f"all_to_all/{family}", (count, g.last_algorithm)
m = np.arange(20000 * n, dtype=np.float32).reshape(n * 100, 200) + 1e6 * r  # 2-D
got = np.empty_like(m)
dist.all_to_all_single(got, m)
bodies._eq(got, ref.all_to_all([np.arange(20000 * n, dtype=np.float32) + 1e6 * q
                                for q in range(n)])[r], "2-D all_to_all")
outs = [np.empty(12000 * n, np.float32) for _ in range(3)]
works = [dist.all_to_all_single(o, np.full(12000 * n, float(r + 10 * i), np.float32),
                                algorithm="fused", async_op=True) for i, o in enumerate(outs)]
for i, (w, o) in enumerate(zip(works, outs)):
    w.wait()
    assert (o.reshape(n, -1) == np.arange(n)[:, None] + 10 * i).all(), f"async a2a {i}"
# Arrays of Python objects are refused before anything is sent, past the eager size too
# (the lane must not move their pointers).
try:
    dist.all_to_all_single(np.empty(9000 * n, object), np.full(9000 * n, r, object))
    raise AssertionError("an all_to_all of object arrays ran")
except dist.InvalidUsage:
    pass
# A legal call beside the fused ranks: the last rank cuts its input unevenly (its piece for
# itself is longer), so it runs the agreement; the fused ranks see its row, refuse
# together, and every rank finishes the call from the rows, the general way.
P = 9000
sends = [[P] * n for _ in range(n)]
sends[n - 1][n - 1] = P + 5
inputs = [ref.rank_input(q, sum(sends[q]), "float32") for q in range(n)]
recv = [sends[q][r] for q in range(n)]
out = np.zeros(sum(recv), np.float32)
dist.all_to_all_single(out, inputs[r], recv if r == n - 1 else None,
                       sends[r] if r == n - 1 else None)
bodies._eq(out, ref.all_to_all(inputs, sends)[r], "uneven rank beside fused ranks")
dist.barrier()
if r == 0:
    print("fused calls: ok", flush=True)

# Last, as a mismatch leaves the group unusable.
scenario = os.environ["SCENARIO"]
try:
    if scenario == "cells":  # same bytes, another dtype on one rank: the cells differ
        dist.all_reduce(np.ones(40000, np.int32 if r == n - 1 else np.float32),
                        algorithm="fused")
    elif scenario == "eager":  # the last rank's call is tiny: it rides in the rows
        dist.all_reduce(np.ones(4 if r == n - 1 else 40000, np.float32),
                        algorithm=None if r == n - 1 else "fused")
    elif scenario == "count":  # a longer message than its receive, on some ranks
        dist.all_reduce(np.ones(50000 if r == 1 else 40000, np.float32), algorithm="fused")
    elif scenario == "kind":  # another collective, through the agreement's rows
        if r == 0:
            dist.broadcast(np.ones(40000, np.float32), src=0)
        else:
            dist.all_reduce(np.ones(40000, np.float32), algorithm="fused")
    elif scenario == "rs-kind":  # a reduce_scatter of the same bytes against all_reduces
        if r == 0:
            dist.reduce_scatter_tensor(np.ones(40000 // n, np.float32),
                                       np.ones(40000, np.float32), algorithm="fused")
        else:
            dist.all_reduce(np.ones(40000, np.float32), algorithm="fused")
    elif scenario == "rs-counts":  # the last rank cuts the input into other pieces
        counts = [12000 + (q if r == n - 1 else 0) for q in range(n)]
        counts[r] = 12000
        dist.reduce_scatter(np.ones(12000, np.float32),
                            [np.ones(c, np.float32) for c in counts], algorithm="fused")
    elif scenario == "lane-cells":  # as 'cells', every rank through the lane
        dist.all_reduce(np.ones(40000, np.int32 if r == n - 1 else np.float32))
    elif scenario == "lane-kind":  # as 'rs-kind', through the lane
        if r == 0:
            dist.reduce_scatter_tensor(np.ones(40000 // n, np.float32),
                                       np.ones(40000, np.float32))
        else:
            dist.all_reduce(np.ones(40000, np.float32))
    elif scenario == "a2a-count":  # even pieces of another size on one rank
        size = 41000 * n if r == n - 1 else 40000 * n
        dist.all_to_all_single(np.ones(size, np.float32), np.ones(size, np.float32))
    elif scenario == "a2a-kind":  # a fused all_reduce of the same bytes on one rank
        if r == 0:
            dist.all_reduce(np.ones(40000 * n, np.float32), algorithm="fused")
        else:
            dist.all_to_all_single(np.ones(40000 * n, np.float32),
                                   np.ones(40000 * n, np.float32), algorithm="fused")
    elif scenario == "a2a-lane-kind":  # as 'a2a-kind', the all_to_alls through the lane
        if r == 0:
            dist.all_reduce(np.ones(40000 * n, np.float32), algorithm="fused")
        else:
            dist.all_to_all_single(np.ones(40000 * n, np.float32),
                                   np.ones(40000 * n, np.float32))
    elif scenario == "bcast-count":  # eager broadcasts of other sizes on one rank
        dist.broadcast(np.ones(100000 if r == n - 1 else 90000, np.float32), src=0)
    raise AssertionError(f"rank {r}: no MismatchError")
except dist.MismatchError as exc:
    print(f"rank {r} mismatch: {exc}", flush=True)
dist.destroy_process_group()
