"""Every primitive against the oracle on a world across hosts (started by a launcher)."""

import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.runtime import spanning_bodies as bodies  # noqa: E402

import meshcast as dist  # noqa: E402

bodies.quick_polls_from_env()
if os.environ.get("MIXED_RUNNERS") and os.environ.get("PMI_RANK") in ("1", "2"):
    # ranks 1 and 2 run the rows' programs through mpi4py, 0 and 3 in C: every pair,
    # rail and mates, mixes the two runners, which must send the same messages
    from meshcast.transport import mpi_rows

    mpi_rows._found = ()
dist.init_process_group()
ran = bodies.every_primitive()
bodies.uneven_and_shapes()
bodies.p2p_objects_groups_async()
bodies.even_beside_uneven_all_to_all()  # MPI's two all-to-alls never mixed
bodies.lane_beside_general_path()  # tiny calls: the cached lane beside the general path
hostnames = [None] * dist.get_world_size()
dist.all_gather_object(hostnames, socket.gethostname())
large = bodies.large_broadcasts()  # leader's broadcast in chunks; the table's from 1 MiB
alone = len(set(hostnames)) == len(hostnames)  # one rank a host: no local phase, flat
n = len(large) // 2
assert large == ["broadcast/leader"] * n + [f"broadcast/{'flat' if alone else 'leader'}"] * n, (
    large)
if len({hostnames.count(h) for h in hostnames}) == 1:  # rails: as many ranks on every host
    large = bodies.large_reduce_scatters()
    assert set(large) == {"reduce_scatter/rails"}, large
if dist.get_rank() == 0:
    print("every primitive: ok", sorted(a for v in ran.values() for a in v), flush=True)
# Last, as a mismatch leaves the group unusable: the last rank's data (5 float32) is too
# large to ride in an MPI agreement slot while the others' (4) rides; the exchange must
# still line up and every rank raise the same error.
error = bodies.mismatch_is_the_same_error_everywhere(False, 5)
print(f"rank {dist.get_rank()} mismatch: {error}", flush=True)
dist.destroy_process_group()
