"""Every primitive against the oracle on a world across hosts (started by a launcher)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.runtime import spanning_bodies as bodies  # noqa: E402

import meshcast as dist  # noqa: E402

dist.init_process_group()
ran = bodies.every_primitive()
bodies.uneven_and_shapes()
bodies.p2p_objects_groups_async()
if dist.get_rank() == 0:
    print("every primitive: ok", sorted(a for v in ran.values() for a in v), flush=True)
dist.destroy_process_group()
