"""Under ``MESHCAST_ALGO`` naming a cross-host family (README: ``all_reduce:flat``): an
all_reduce, a reduce_scatter, a reduce, a gather and a scatter past the eager size,
checked against their closed form.

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
print("RESULT " + json.dumps({"rank": rank, "ran": ran, "ok": ok}), flush=True)
mc.destroy_process_group()
