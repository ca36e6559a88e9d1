"""meshcast across emulated hosts, beside MPICH (flat) and Gloo: regenerates this folder's pages.

A thin wrapper over ``meshcast bench --hosts`` (``src/meshcast/bench/hosts.py``), which
makes the emulated hosts, runs the bench's sweep for meshcast+mpi (under one
``mpiexec``), meshcast+gloo (``meshcast run --nnodes``), MPICH flat (``mpiexec``, ofi/tcp)
and Gloo (``torchrun --nnodes``), prints nccl-tests' tables with the ratios against each
peer and the better of the two, and takes the hosts down. This script only keeps the
sizes and flags of the published pages in one place::

    sudo python benchmarks/multihost/run.py --rate 2gbit --report benchmarks/multihost
    sudo python benchmarks/multihost/run.py --rate '' --report benchmarks/multihost/unlimited
    sudo python benchmarks/multihost/run.py --rate 2gbit --sizes 8,64,512,4K,8K,16K,32K \\
        --iters 1000 --warmup 100 --report benchmarks/multihost/small

the first of which runs::

    meshcast bench --hosts 2x2 --rate 2gbit \\
        --op all_reduce,all_gather,reduce_scatter,broadcast,all_to_all --sizes 8,128K,2M,32M \\
        -w 5 --iters 50 --internode mpi --compare gloo,mpi,meshcast+gloo --rounds 3 \\
        --report benchmarks/multihost

(50 timed calls a size: with 10, two runs of a 128 KiB all_reduce differed twofold.
Three rounds, libraries taking turns, each call's best kept: in one round on the Intel
VM, a phase of the machine put an 8 B broadcast at 1018 us, where a rerun of that row
alone took 65.)

Needs root, iproute2, mpi4py + mpich and torch (the bench says what is missing before
it starts anything). Other flags go to ``meshcast bench`` unchanged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from meshcast.bench import cli


def main(argv: list[str] | None = None) -> int:
    """Translate this script's flags into ``meshcast bench --hosts`` and run it."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--per-host", type=int, default=2)
    p.add_argument("--rate", default="2gbit", help="per-host link rate (tc tbf); '' for none")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,broadcast,all_to_all")
    p.add_argument("--sizes", default="8,128K,2M,32M", help="bytes, comma separated")
    p.add_argument("--compare", default="gloo,mpi,meshcast+gloo")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3,
                   help="sweeps per library, libraries taking turns; each call's best is kept")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--report", default="", metavar="DIR",
                   help="write the results page DIR/README.md (and DIR/results/)")
    p.add_argument("-o", "--output", default="", metavar="FILE",
                   help="the old form of --report: DIR/README.md writes the page in DIR, "
                        "DIR/NAME.md in DIR/NAME/")
    args, rest = p.parse_known_args(argv)
    if args.output and not args.report:
        out = Path(args.output)
        args.report = str(out.parent if out.name == "README.md" else out.with_suffix(""))
    bench = ["--hosts", f"{args.hosts}x{args.per_host}", "--op", args.ops,
             "--sizes", args.sizes, "-w", str(args.warmup), "--iters", str(args.iters),
             "--internode", "mpi", "--compare", args.compare, "--timeout", str(args.timeout),
             "--rounds", str(args.rounds)]
    if args.rate:
        bench += ["--rate", args.rate]
    if args.report:
        bench += ["--report", args.report]
    return cli.main(bench + rest)


if __name__ == "__main__":
    sys.exit(main())
