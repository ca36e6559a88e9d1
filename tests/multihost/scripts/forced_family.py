"""Under ``MESHCAST_ALGO`` naming a cross-host family (README: ``all_reduce:flat``): an
all_reduce and a reduce_scatter past the eager size, checked against their closed form.

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
print("RESULT " + json.dumps({"rank": rank, "ran": ran, "ok": ok}), flush=True)
mc.destroy_process_group()
