"""gather and scatter choose their family from the agreed counts (the gathered array), not
from a rank's own piece: with pieces of 17 + 1 + 1 + 1 MiB, rank 0's piece alone passes
the table's steps (8 MiB gather, 16 MiB scatter) and the others' do not, yet every rank
runs ``leader``; with 1 MiB each (4 MiB gathered) every rank runs ``flat``.

Prints ``RESULT {json}`` per rank: the algorithms that ran, and whether the pieces are right.
"""

import json

import numpy as np

import meshcast as mc

mc.init_process_group()
rank, size = mc.get_rank(), mc.get_world_size()
ran, ok = [], True
for first_mib in (17, 1):
    counts = [(first_mib if q == 0 else 1) << 18 for q in range(size)]  # int32: 1 MiB each
    pieces = [np.arange(c, dtype=np.int32) + 7 * q for q, c in enumerate(counts)]
    got = [np.empty(c, np.int32) for c in counts] if rank == size - 1 else None
    mc.gather(pieces[rank], got, size - 1)
    ran.append(mc.group.WORLD.last_algorithm)
    ok = ok and (got is None or all(bool((a == b).all()) for a, b in zip(got, pieces)))
    mine = np.empty(counts[rank], np.int32)
    mc.scatter(mine, pieces if rank == 1 else None, 1)
    ran.append(mc.group.WORLD.last_algorithm)
    ok = ok and bool((mine == pieces[rank]).all())
print("RESULT " + json.dumps({"rank": rank, "ran": ran, "ok": ok}), flush=True)
mc.destroy_process_group()
