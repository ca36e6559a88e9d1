"""Under ``MESHCAST_ALGO`` naming a cross-host family (README: ``all_reduce:flat``): an
all_reduce, a reduce_scatter, a reduce, a gather and a scatter past the eager size,
checked against their closed form; then float MAX and MIN all_reduce and reduce with
NaNs and signed zeros, checked bitwise against NumPy's fold in rank order.

Prints ``RESULT {json}`` per rank: the algorithms that ran, and whether the sums are right.
"""

import json

import numpy as np

import meshcast as mc

mc.init_process_group()
rank, size = mc.get_rank(), mc.get_world_size()
count = 64 << 10  # 256 KiB of float32: past every eager size
x = np.full(count, rank + 1, np.float32)
mc.all_reduce(x)
ran = [mc.group.WORLD.last_algorithm]
out = np.empty(count // size, np.float32)
mc.reduce_scatter_tensor(out, np.full(count, rank + 1, np.float32))
ran.append(mc.group.WORLD.last_algorithm)
total = size * (size + 1) / 2
ok = bool((x == total).all() and (out == total).all())
# the rooted calls, uneven pieces past the eager size (MESHCAST_ALGO forces them flat:
# MPI's Ireduce, Igatherv and Iscatterv)
root = size - 1
y = np.full(count, rank + 1, np.float64)
mc.reduce(y, root)
ran.append(mc.group.WORLD.last_algorithm)
ok = ok and (rank != root or bool((y == total).all())) and (
    rank == root or bool((y == rank + 1).all()))
counts = [count // 4 + 7 * q for q in range(size)]
pieces = [np.arange(c, dtype=np.int32) + 1000 * q for q, c in enumerate(counts)]
got = [np.empty(c, np.int32) for c in counts] if rank == 1 else None
mc.gather(pieces[rank], got, 1)
ran.append(mc.group.WORLD.last_algorithm)
ok = ok and (rank != 1 or all(bool((a == b).all()) for a, b in zip(got, pieces)))
mine = np.empty(counts[rank], np.int32)
mc.scatter(mine, pieces if rank == 0 else None, 0)
ran.append(mc.group.WORLD.last_algorithm)
ok = ok and bool((mine == pieces[rank]).all())
# float MIN/MAX with NaNs and signed zeros, every order across the ranks: NumPy's
# result in rank order, bit for bit (MPICH's and Gloo's own ops drop a NaN)
edge = np.array([np.nan, 1.0, -0.0, 0.0, -np.inf, 2.0], np.float32)
where = np.arange(count)


def edges(q: int) -> np.ndarray:
    return edge[(where // 6 ** q) % 6]


picks = []
for op, fold in ((mc.ReduceOp.MAX, np.maximum), (mc.ReduceOp.MIN, np.minimum)):
    want = edges(0)
    for q in range(1, size):
        want = fold(want, edges(q))
    z = edges(rank)
    mc.all_reduce(z, op=op)
    picks.append(mc.group.WORLD.last_algorithm)
    ok = ok and z.tobytes() == want.tobytes()
    z = edges(rank)
    mc.reduce(z, root, op=op)
    picks.append(mc.group.WORLD.last_algorithm)
    ok = ok and (rank != root or z.tobytes() == want.tobytes())
print("RESULT " + json.dumps({"rank": rank, "ran": ran, "picks": picks, "ok": ok}),
      flush=True)
mc.destroy_process_group()
