"""What every library's worker does around the sweep: arguments, records on stdout, errors.

A worker is ``python -m meshcast.bench.<library>_worker --spec JSON [--rank R
--world-size N --init URL]``; rank 0 prints a ``meta`` record (library and
versions), then one record per call of the sweep, each on a line starting
with :data:`.sweep.RECORD_PREFIX`. Anything else a library prints is left
alone and ignored by the parent.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from .sweep import Comm, SweepSpec, emit, run_sweep


def parse_args(argv: Sequence[str] | None, library: str) -> argparse.Namespace:
    """The worker's flags (the parent builds them; people do not type them)."""
    p = argparse.ArgumentParser(prog=f"python -m meshcast.bench.{library}_worker",
                                description=f"One rank of `meshcast bench` on {library}.")
    p.add_argument("--spec", required=True, help="the SweepSpec as JSON")
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--world-size", type=int, default=-1)
    p.add_argument("--init", default="",
                   help="rendezvous file; empty: the launcher's environment (env://), as "
                        "under torchrun, mpiexec or meshcast run across hosts")
    p.add_argument("--symmetric", action="store_true",
                   help="meshcast only: buffers from meshcast.empty (symmetric memory)")
    return p.parse_args(argv)


def run(argv: Sequence[str] | None, library: str,
        connect: Callable[[argparse.Namespace], Comm],
        versions: Callable[[], dict[str, str]],
        close: Callable[[], None] = lambda: None) -> int:
    """Connect, sweep, print records on rank 0; returns the exit status."""
    args = parse_args(argv, library)
    parent = os.environ.get("MESHCAST_BENCH_PARENT")
    if parent:
        # A killed `meshcast bench` must not leave ranks spinning in a collective.
        from ..run.worker import set_parent_death_signal

        set_parent_death_signal(int(parent))
    try:
        spec = SweepSpec.from_json(args.spec)
        comm = connect(args)
        if comm.rank == 0:
            emit(_meta(comm.library, comm.size, versions()))
        for rec in run_sweep(comm, spec):
            if comm.rank == 0:
                emit(rec)
        close()
    except Exception:  # noqa: BLE001 - the parent shows this text as the reason
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        return 1
    return 0


def _meta(library: str, n: int, versions: dict[str, str]) -> dict[str, Any]:
    return {"kind": "meta", "library": library, "nranks": n, "versions": versions}
