"""One rank of ``meshcast bench --paired``: every compared library in the same processes.

Run by the parent as ``mpiexec -n N python -m meshcast.bench.paired_worker
--libraries meshcast,mpi[,gloo] ...`` when MPI is compared (meshcast then finds
its ranks through the MPI launcher's environment), else as N processes with
``--rank/--world-size/--init`` (meshcast's file rendezvous). Gloo meets through
its own file (``--gloo-init``) with the rank meshcast got. Each library is the
same adapter its own worker uses (:mod:`.meshcast_worker`, :mod:`.mpi_worker`,
:mod:`.gloo_worker`); :func:`.sweep.run_paired_sweep` alternates their timed
blocks on shared buffers. Rank 0 prints one ``meta`` record per library, then
the records of all of them.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from . import gloo_worker, meshcast_worker, mpi_worker
from ._worker import parse_args
from .sweep import Comm, SweepSpec, emit, run_paired_sweep

_VERSIONS = {"meshcast": meshcast_worker.versions, "mpi": mpi_worker.versions,
             "gloo": gloo_worker.versions}


def _arguments(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str], int, str]:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--libraries", required=True)
    extra.add_argument("--blocks", type=int, default=3)
    extra.add_argument("--gloo-init", default="")
    known, rest = extra.parse_known_args(argv)
    return (parse_args(rest, "paired"), known.libraries.split(","), known.blocks,
            known.gloo_init)


def connect(args: argparse.Namespace, libraries: Sequence[str], gloo_init: str) -> list[Comm]:
    """The libraries' adapters, in ``libraries``' order (meshcast first, as the parent asks).

    MPI initializes first where it is compared: meshcast's rendezvous under an MPI
    launcher goes through it, and Gloo takes the rank meshcast was given.
    """
    made: dict[str, Any] = {}
    if "mpi" in libraries:
        made["mpi"] = mpi_worker.MpiComm(args)
    made["meshcast"] = meshcast_worker.MeshcastComm(args)
    if "gloo" in libraries:
        ours = made["meshcast"]
        made["gloo"] = gloo_worker.GlooComm(argparse.Namespace(
            init=gloo_init, rank=ours.rank, world_size=ours.size))
    return [made[lib] for lib in libraries]


def main(argv: Sequence[str] | None = None) -> int:
    args, libraries, blocks, gloo_init = _arguments(argv)
    parent = os.environ.get("MESHCAST_BENCH_PARENT")
    if parent:
        from ..run.worker import set_parent_death_signal

        set_parent_death_signal(int(parent))
    try:
        spec = SweepSpec.from_json(args.spec)
        comms = connect(args, libraries, gloo_init)
        first = comms[0]
        if first.rank == 0:
            for comm, lib in zip(comms, libraries):
                emit({"kind": "meta", "library": comm.library, "nranks": first.size,
                      "versions": _VERSIONS[lib]()})
        for rec in run_paired_sweep(comms, spec, blocks):
            if first.rank == 0:
                emit(rec)
        for comm in comms:  # meshcast's and Gloo's groups (MPI finalizes at exit)
            dist = getattr(comm, "dist", None)
            if dist is not None:
                dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the parent shows this text as the reason
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
