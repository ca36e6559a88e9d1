"""``meshcast bench``: nccl-tests for CPUs, with Gloo and MPI side by side.

Flags follow nccl-tests where they exist (``-b -e -f -i -d -o -r -w -c -a``)
except ``-n``, which is the number of ranks as in ``meshcast run`` (the
timed iterations are ``--iters``). The command launches its own ranks,
measures the memory copy bandwidth first (the ``%mem`` column), runs the
sweep on meshcast and then on every ``--compare`` peer, and prints
nccl-tests' table for meshcast, one comparison table per collective and a
summary.

Across hosts: ``--hosts 2x2`` makes emulated hosts on this machine (network
namespaces; needs root) and starts every library there the way its users
start it across hosts (:mod:`.hosts`); ``--launched`` runs the sweep in ranks
that the user's own launcher (``mpiexec``, ``srun``, ``torchrun``,
``meshcast run``) has already started on real hosts (:func:`run_launched`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from ..config import parse_size
from .collectives import ALL_OPS, REDOPS
from .peers import LibraryRun
from .sweep import AVERAGES, PLACEMENTS, SweepSpec

HELP = "nccl-tests for CPUs: time collectives over a size sweep, with Gloo and MPI side by side"

DESCRIPTION = """\
Launch -n ranks on this machine, sweep message sizes from -b to -e for each
--op, check every result, and print nccl-tests' columns (size count type
redop root time algbw busbw #wrong, out-of-place and in-place) plus %mem
(busbw against this machine's memory copy bandwidth) and the algorithm
meshcast picked. --compare runs the same sweep on torch.distributed's Gloo
and on MPI (mpi4py + mpiexec) and prints the ratios.

  meshcast bench                                   all_reduce, 8 B .. 64 MiB, 2 ranks
  meshcast bench -n 4 --op all -b 8 -e 16M -f 4 --compare gloo,mpi
  meshcast bench --op all_reduce --algo ring --json out.jsonl --plot out.html
  meshcast bench --op all --compare gloo,mpi --report benchmarks/

Across hosts (see "across hosts" below):

  sudo meshcast bench --hosts 2x2 --rate 2gbit --op all_reduce,all_gather -b 8 -e 32M -f 4 --compare gloo,mpi
  mpiexec -n 8 -ppn 4 -hosts node0,node1 meshcast bench --launched --op all_reduce -e 32M
"""

EPILOG = """\
busbw = algbw x factor (nccl-tests): all_reduce 2(n-1)/n; all_gather,
reduce_scatter, gather, scatter, all_to_all (n-1)/n; broadcast, reduce,
sendrecv 1. The header of each table states S and the factor.

Exit status: 0; 1 if any library returned a wrong result (#wrong > 0) or
meshcast itself failed; 2 for bad arguments, and with --hosts for a
missing prerequisite (root, iproute2, mpi4py/mpiexec or torch for a library
asked for), said before any host is made. A peer that is missing is skipped
with its reason; one that fails is reported and the rest goes on.
"""

_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32",
                  "char": "int8", "fp32": "float32", "fp16": "float16", "fp64": "float64"}
_DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
           "float64")
_AVERAGE_NAMES = {"0": "rank0", "1": "avg", "2": "min", "3": "max"}


class UsageError(ValueError):
    """A flag's value is wrong; the message says which and why."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``meshcast bench``'s flags to ``p``."""
    p.description = DESCRIPTION
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    g = p.add_argument_group("ranks and sizes")
    g.add_argument("-n", "--nproc", type=int, default=None, metavar="N",
                   help="ranks to launch (default 2; with --hosts, the hosts' ranks)")
    g.add_argument("-b", "--minbytes", default="8", metavar="SIZE",
                   help="smallest size, bytes with optional K/M/G (default 8)")
    g.add_argument("-e", "--maxbytes", default="64M", metavar="SIZE",
                   help="largest size (default 64M)")
    step = g.add_mutually_exclusive_group()
    step.add_argument("-f", "--stepfactor", type=int, default=None, metavar="F",
                      help="multiply the size by F each step (default 2)")
    step.add_argument("-i", "--stepbytes", default=None, metavar="SIZE",
                      help="add SIZE each step instead")
    step.add_argument("--sizes", default="", metavar="LIST",
                      help="exactly these sizes instead of -b/-e/-f (e.g. 8,128K,2M,32M: a few "
                           "points of interest, as across hosts where every size is slow)")
    g = p.add_argument_group("what to run")
    g.add_argument("--op", default="all_reduce", metavar="OPS",
                   help=f"comma-separated collectives or 'all' ({','.join(ALL_OPS)}); "
                        f"default all_reduce")
    g.add_argument("-d", "--dtype", default="float32",
                   help=f"element type: {', '.join(_DTYPES)} (nccl-tests' float, half, "
                        f"double also work); default float32")
    g.add_argument("-o", "--redop", default="sum", choices=REDOPS,
                   help="reduce op of all_reduce, reduce, reduce_scatter (default sum)")
    g.add_argument("-r", "--root", type=int, default=0, help="root rank (default 0)")
    g.add_argument("-w", "--warmup", type=int, default=5,
                   help="untimed calls per size and placement (default 5)")
    g.add_argument("--iters", type=int, default=20,
                   help="timed calls per size and placement (default 20)")
    g.add_argument("-c", "--check", type=int, default=1, choices=(0, 1),
                   help="check every size's result after the timed loop (default 1)")
    g.add_argument("-a", "--average", default="3",
                   help="combine per-rank mean times: 0 rank 0, 1 avg, 2 min, 3 max "
                        "(default 3; nccl-tests' default is 1)")
    g.add_argument("--algo", default="", metavar="SPEC",
                   help="force meshcast algorithms: a name ('ring', for every selected op "
                        "that has it) or 'all_reduce:ring,broadcast:tree'")
    g.add_argument("--symmetric", action="store_true",
                   help="allocate meshcast's buffers with meshcast.empty (symmetric memory: "
                        "all_reduce and broadcast run in place); reported as "
                        "meshcast-symmetric, and --compare may then add plain meshcast")
    g.add_argument("--placement", default="both", choices=("both",) + PLACEMENTS,
                   help="out-of-place, in-place or both (default both)")
    g.add_argument("--no-rotate", action="store_true",
                   help="reuse the same buffer window every iteration (by default the window "
                        "moves through the largest buffer, as nccl-tests does)")
    g = p.add_argument_group("peers and output")
    g.add_argument("--compare", default="", metavar="LIBS",
                   help="also run the sweep on these: gloo (torch.distributed), mpi (mpi4py + "
                        "mpiexec); comma-separated")
    g.add_argument("--json", default="", metavar="FILE",
                   help="write every result as JSON lines (first line: the run's metadata)")
    g.add_argument("--plot", default="", metavar="FILE",
                   help="busbw and time against size: .html (a self-contained page) or .svg; "
                        ".png needs matplotlib (pip install 'meshcast[plot]')")
    g.add_argument("--report", default="", metavar="DIR",
                   help="write a results page DIR/README.md with tables, plots and machine "
                        "description (data in DIR/results/)")
    g.add_argument("--rounds", type=int, default=None, metavar="K",
                   help="run every library's sweep K times, libraries taking turns, and keep "
                        "each call's best time (steadier ratios on a busy machine; default 1); "
                        "with --paired: K timed blocks per library at each call (default 3)")
    g.add_argument("--paired", action="store_true",
                   help="run meshcast and the --compare libraries in one job, on the same "
                        "buffers: at each call their timed blocks alternate (A B, B A, ...) "
                        "and each keeps its best, so both see the machine in the same state "
                        "(separate launches may not: large copies here run 1.5-2x apart from "
                        "one launch to the next); not with --symmetric or --hosts")
    g.add_argument("--timeout", type=float, default=300.0,
                   help="stop a library's ranks after this many seconds without a result "
                        "(with --hosts: for its whole sweep, read when the job ends; default 300)")
    g.add_argument("--list-algorithms", action="store_true",
                   help="list meshcast's algorithms per collective and exit")
    g = p.add_argument_group(
        "across hosts",
        "--hosts makes emulated hosts on this machine (network namespaces with their own "
        "hostname, /dev/shm and a rate-limited link; needs root and iproute2) and takes them "
        "down afterwards. meshcast runs as meshcast+mpi (under one mpiexec, MPI between hosts) "
        "or meshcast+gloo (meshcast run --nnodes per host, Gloo between hosts); --compare takes "
        "mpi (MPICH under one mpiexec, ofi/tcp), gloo (torchrun --nnodes) and the other "
        "meshcast+ENGINE. On real machines, start `meshcast bench --launched ...` as every rank "
        "with your own launcher instead.")
    g.add_argument("--hosts", default="", metavar="SHAPE",
                   help="HxL: H emulated hosts with L ranks each (2x2, 3x1), or ranks per host "
                        "(3+1)")
    g.add_argument("--rate", default="", metavar="RATE",
                   help="with --hosts: each host's link rate, tc syntax (2gbit, 500mbit); "
                        "default unlimited")
    g.add_argument("--internode", default="auto", choices=("auto", "mpi", "gloo"),
                   help="with --hosts: meshcast's engine between hosts (default auto: MPI when "
                        "mpi4py and mpiexec are there, else Gloo)")
    g.add_argument("--prefix", default="", metavar="NAME",
                   help="with --hosts: name prefix of the emulated hosts' namespaces (default "
                        "mcb; lower-case letters and digits, at most 8)")
    g.add_argument("--launched", action="store_true",
                   help="this process is one rank of a job your launcher started (mpiexec, srun, "
                        "torchrun, meshcast run): run the sweep for --library in it; rank 0 "
                        "prints the table and writes --json/--report")
    g.add_argument("--library", default="meshcast", choices=("meshcast", "mpi", "gloo"),
                   help="with --launched: which library these ranks measure (default meshcast)")
    g.add_argument("--from", dest="inputs", default="", metavar="FILES",
                   help="run nothing: read --json files (comma-separated; e.g. one --launched "
                        "run per library) and print their tables and comparison; --json, "
                        "--plot and --report write the merged results")


# ----------------------------------------------------------------------------- parsing


def _size(text: str, flag: str) -> int:
    try:
        value = parse_size(text)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a size (e.g. 8, 64K, 16M, 1G)") from None
    if value < 0:
        raise UsageError(f"{flag}: size must be >= 0, got {text!r}")
    return value


def sizes(minbytes: int, maxbytes: int, factor: int | None, stepbytes: int | None
          ) -> tuple[int, ...]:
    """nccl-tests' loop: from min while <= max, times ``factor`` (> 1) or plus ``stepbytes``."""
    if maxbytes < minbytes:
        raise UsageError(f"-e ({maxbytes}) is smaller than -b ({minbytes})")
    if stepbytes is not None:
        if stepbytes <= 0:
            raise UsageError("-i must be > 0")
        out, size = [], minbytes
        while size <= maxbytes:
            out.append(size)
            size += stepbytes
        return tuple(out)
    factor = 2 if factor is None else factor
    if factor < 2:
        raise UsageError(f"-f must be >= 2 (got {factor}); use -i for a linear step")
    out, size = [], minbytes
    while size <= maxbytes:
        out.append(size)
        if size == 0:
            break
        size *= factor
    return tuple(out)


def _ops(text: str) -> tuple[str, ...]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["all"]:
        return ALL_OPS
    bad = [x for x in names if x not in ALL_OPS]
    if bad or not names:
        raise UsageError(f"--op: unknown {', '.join(bad) or '(empty)'}; choose from "
                         f"{', '.join(ALL_OPS)} or all")
    return tuple(dict.fromkeys(names))


def _dtype(text: str) -> str:
    name = _DTYPE_ALIASES.get(text.lower(), text.lower())
    if name == "bfloat16":
        raise UsageError("-d bfloat16: NumPy has no bfloat16, so the bench cannot check it; "
                         "use float16 or float32")
    if name not in _DTYPES:
        raise UsageError(f"-d: unknown type {text!r}; choose from {', '.join(_DTYPES)}")
    return name


def _algorithms(text: str, ops: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """(op -> algorithm, notes) from ``--algo``; validated against meshcast's registry."""
    if not text:
        return {}, []
    from ..algorithms import _registry

    def known(op: str) -> list[str]:
        return list(_registry.names(op)) if op in _registry.COLLECTIVES else []

    out: dict[str, str] = {}
    notes: list[str] = []
    if ":" not in text:
        name = text.strip()
        for op in ops:
            if name in known(op):
                out[op] = name
            else:
                notes.append(f"--algo {name}: {op} has no such algorithm ({', '.join(known(op)) or 'none'}); "
                             f"it keeps meshcast's choice")
        if not out:
            raise UsageError(f"--algo {name}: none of {', '.join(ops)} has it")
        return out, notes
    for item in text.split(","):
        op, _, name = item.partition(":")
        op, name = op.strip(), name.strip()
        if op not in ops:
            raise UsageError(f"--algo {item}: {op!r} is not among --op ({', '.join(ops)})")
        if name not in known(op):
            raise UsageError(f"--algo {item}: {op} has {', '.join(known(op)) or 'no algorithms'}")
        out[op] = name
    return out, notes


def _resolve_ranks(ns: argparse.Namespace) -> None:
    """Check the across-hosts flags against each other; set ``ns.shape`` and ``ns.nproc``."""
    from .hosts import ShapeError, parse_hosts

    ns.shape = None
    hosts_only = [flag for flag, on in (("--rate", ns.rate), ("--prefix", ns.prefix),
                                        ("--internode", ns.internode != "auto")) if on]
    if not ns.hosts:
        if hosts_only:
            raise UsageError(f"{', '.join(hosts_only)} only with --hosts (emulated hosts)")
        ns.expected = ns.nproc  # --launched: the launcher decides; -n, if given, must agree
        if ns.nproc is None:
            # with --launched the world size is known once connected; -r is checked then
            ns.nproc = max(2, ns.root + 1) if ns.launched else 2
        return
    if ns.launched:
        raise UsageError("--hosts makes emulated hosts and starts the ranks itself; "
                         "--launched is for ranks your launcher started: use one of them")
    try:
        ns.shape = parse_hosts(ns.hosts)
    except ShapeError as exc:
        raise UsageError(str(exc)) from None
    if ns.nproc is not None and ns.nproc != ns.shape.nranks:
        raise UsageError(f"-n {ns.nproc} disagrees with --hosts {ns.hosts} "
                         f"({ns.shape.nranks} ranks); leave -n out")
    if ns.symmetric:
        raise UsageError("--symmetric is measured on one host only; leave it out with --hosts")
    if ns.prefix and not re.match(r"^[a-z][a-z0-9]{0,7}$", ns.prefix):
        raise UsageError(f"--prefix {ns.prefix!r}: lower-case letters and digits, starting "
                         f"with a letter, at most 8 (network interface names are short)")
    ns.nproc = ns.shape.nranks


def spec_from_args(ns: argparse.Namespace) -> tuple[SweepSpec, list[str]]:
    """The sweep the flags describe, and notes to print; raises UsageError."""
    if ns.nproc is None:
        ns.nproc = 2
    if ns.nproc < 1:
        raise UsageError(f"-n must be >= 1, got {ns.nproc}")
    ops = _ops(ns.op)
    lo, hi = _size(ns.minbytes, "-b"), _size(ns.maxbytes, "-e")
    step = _size(ns.stepbytes, "-i") if ns.stepbytes is not None else None
    if not 0 <= ns.root < ns.nproc:
        raise UsageError(f"-r {ns.root}: the root must be a rank in [0, {ns.nproc})")
    paired = getattr(ns, "paired", False)
    if ns.rounds is None:
        ns.rounds = 3 if paired else 1
    if ns.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {ns.rounds}")
    if paired:
        if not ns.compare:
            raise UsageError("--paired pairs meshcast with the --compare libraries: name one "
                             "(--compare mpi, gloo or both)")
        if ns.symmetric or getattr(ns, "hosts", None) or getattr(ns, "launched", False):
            raise UsageError("--paired runs every library on the same plain buffers, on this "
                             "machine: not with --symmetric, --hosts or --launched")
    if ns.warmup < 0 or ns.iters < 1:
        raise UsageError("-w must be >= 0 and --iters >= 1")
    if getattr(ns, "plot", ""):
        # before the sweep: a missing matplotlib must not cost the user a whole run
        from . import plot

        why = plot.problem(ns.plot)
        if why:
            raise UsageError(why)
    average = _AVERAGE_NAMES.get(ns.average, ns.average)
    if average not in AVERAGES:
        raise UsageError(f"-a {ns.average}: choose 0-3 or {', '.join(AVERAGES)}")
    algorithms, notes = _algorithms(ns.algo, ops)
    placements = PLACEMENTS if ns.placement == "both" else (ns.placement,)
    if ns.sizes:
        listed = tuple(dict.fromkeys(_size(x.strip(), "--sizes") for x in ns.sizes.split(",")
                                     if x.strip()))
        if not listed:
            raise UsageError("--sizes: give at least one size")
        swept = tuple(sorted(listed))
    else:
        swept = sizes(lo, hi, ns.stepfactor, step)
    spec = SweepSpec(ops=ops, sizes=swept, dtype=_dtype(ns.dtype),
                     redop=ns.redop, root=ns.root, warmup=ns.warmup, iters=ns.iters,
                     check=bool(ns.check), average=average, algorithms=algorithms,
                     rotate=not ns.no_rotate, placements=placements)
    return spec, notes


def _libraries(text: str, symmetric: bool = False) -> list[str]:
    from .peers import LIBRARIES

    names = ["meshcast-symmetric" if symmetric else "meshcast"]
    for name in (t.strip() for t in text.split(",")):
        if not name or name in names:
            continue
        if name not in LIBRARIES:
            raise UsageError(f"--compare: unknown peer {name!r}; choose from "
                             f"{', '.join(LIBRARIES)}")
        names.append(name)
    return names


def command_line(ns: argparse.Namespace, spec: SweepSpec) -> str:
    """The ``meshcast bench`` command that reproduces this run (for the results page)."""
    shape = getattr(ns, "shape", None)
    where = ([f"--hosts {ns.hosts}"] + ([f"--rate {ns.rate}"] if ns.rate else [])
             + ([f"--internode {ns.internode}"] if ns.internode != "auto" else [])
             if shape else [f"--launched --library {ns.library}"] if ns.launched
             else [f"-n {ns.nproc}"])
    parts = ["meshcast bench", *where, f"--op {ns.op}"]
    if ns.sizes:
        parts.append(f"--sizes {ns.sizes}")
    else:
        parts += [f"-b {ns.minbytes}", f"-e {ns.maxbytes}"]
        parts.append(f"-i {ns.stepbytes}" if ns.stepbytes is not None
                     else f"-f {ns.stepfactor or 2}")
    parts += [f"-d {spec.dtype}", f"-o {spec.redop}", f"-r {spec.root}", f"-w {spec.warmup}",
              f"--iters {spec.iters}", f"-a {ns.average}"]
    if ns.algo:
        parts.append(f"--algo {ns.algo}")
    if ns.placement != "both":
        parts.append(f"--placement {ns.placement}")
    if ns.no_rotate:
        parts.append("--no-rotate")
    if ns.symmetric:
        parts.append("--symmetric")
    if ns.compare:
        parts.append(f"--compare {ns.compare}")
    if getattr(ns, "paired", False):
        parts.append("--paired")
    if ns.rounds > 1:
        parts.append(f"--rounds {ns.rounds}")
    return " ".join(parts)


# ----------------------------------------------------------------------------- running


def _list_algorithms() -> int:
    from ..algorithms import _registry

    for coll in _registry.COLLECTIVES:
        print(f"{coll:15} {', '.join(_registry.names(coll))}")
    return 0


def handle(ns: argparse.Namespace) -> int:
    """Run ``meshcast bench`` from parsed flags; returns the exit status."""
    if ns.list_algorithms:
        return _list_algorithms()
    try:
        if ns.inputs:
            return run_from(ns)
        _resolve_ranks(ns)
        spec, notes = spec_from_args(ns)
        if ns.launched:
            if ns.compare:
                raise UsageError("--compare starts other libraries' ranks, which --launched "
                                 "cannot: run once per library (--library mpi|gloo) under "
                                 "its launcher, each with --json, and compare the files")
            return run_launched(ns, spec, notes)
        if ns.shape is not None:
            from . import hosts

            try:
                libraries = hosts.libraries(ns.compare, ns.internode)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            missing = hosts.problems(libraries)
            if missing:
                print("meshcast bench: error: cannot run across emulated hosts here:\n  "
                      + "\n  ".join(missing)
                      + "\n(install what is named, or leave that library out of --compare)",
                      file=sys.stderr)
                return 2
        else:
            libraries = _libraries(ns.compare, ns.symmetric)
    except UsageError as exc:
        print(f"meshcast bench: error: {exc}", file=sys.stderr)
        return 2
    return run(ns, spec, libraries, notes)


def run(ns: argparse.Namespace, spec: SweepSpec, libraries: list[str], notes: list[str]) -> int:
    """Measure, sweep every library (on this machine, or on emulated hosts with
    ``--hosts``), print, write the requested files; returns the exit status."""
    from . import machine, report
    from .progress import Progress

    n = ns.nproc
    shape = getattr(ns, "shape", None)
    host = machine.describe()
    mem = machine.copy_bandwidth().to_dict()
    mem_gbps = mem["large_gbps"]
    out = sys.stdout
    paired = getattr(ns, "paired", False)
    head = report.header(spec, n, mem, libraries, ns.rounds, where=_where(ns), paired=paired)
    if shape is not None:
        from .hosts import LAUNCH_TEXT, LIBRARIES, passed_knobs

        head += [f"# {lib}: {LAUNCH_TEXT[LIBRARIES[lib][0]]}" for lib in libraries]
        knobs = passed_knobs()
        if knobs:
            head.append("# meshcast's ranks get " + " ".join(f"{k}={v}" for k, v in knobs.items()))
    head += [f"# note: {x}" for x in notes]
    print("\n".join(head), file=out, flush=True)

    progress = Progress(spec.units() * len(libraries) * (1 if paired else ns.rounds))
    if paired:
        by_lib = _run_paired(ns, spec, libraries, progress)
        hosts_meta = None
    elif shape is None:
        by_lib = _run_here(ns, spec, libraries, progress)
        hosts_meta = None
    else:
        try:
            by_lib, hosts_meta = _run_on_hosts(ns, spec, libraries, progress)
        except Exception as exc:  # noqa: BLE001 - hosts could not be made: say why, exit 1
            progress.close()
            print(f"meshcast bench: error: emulated hosts: {exc}", file=sys.stderr)
            return 1
    progress.close()
    runs = [by_lib[lib] for lib in libraries if lib in by_lib]

    records = [r for run_ in runs for r in run_.records]
    ran = [r.library for r in runs if r.records]
    print("\n".join(_tables(spec, records, runs, ran, n, mem_gbps, every=shape is not None)),
          file=out, flush=True)
    total_wrong = sum(r["wrong"] or 0 for r in records)

    meta = {"kind": "meta", "command": command_line(ns, spec), "nranks": n, "rounds": ns.rounds,
            "paired": paired,
            "spec": json.loads(spec.to_json()), "machine": host, "memory_copy": mem,
            "libraries": {r.library: {"versions": r.meta.get("versions", {}),
                                      "skipped": r.skipped, "error": r.error,
                                      "seconds": round(r.seconds, 2)} for r in runs}}
    if hosts_meta is not None:
        meta["hosts"] = hosts_meta
    _write_files(ns, meta, records, spec, ran or libraries, head, n, mem_gbps)
    meshcast_failed = any(r.library.startswith("meshcast") and (r.error or not r.records) for r in runs)
    return 1 if total_wrong or meshcast_failed else 0


def run_launched(ns: argparse.Namespace, spec: SweepSpec, notes: list[str]) -> int:
    """One rank of a sweep whose ranks the user's own launcher started (``--launched``).

    This is how the bench runs on real hosts: every rank runs the same command line,
    e.g. ``mpiexec -n 8 -ppn 4 -hosts node0,node1 meshcast bench --launched --op
    all_reduce -e 32M`` (or ``srun``, ``torchrun --nnodes``, ``meshcast run --nnodes``
    with ``--library gloo`` / ``meshcast``). The library's worker connects through the
    launcher's environment exactly as a user's program would, the sweep is the one every
    other mode runs, and rank 0 prints nccl-tests' table and writes ``--json`` /
    ``--plot`` / ``--report``. Comparing libraries takes one run per library (each under
    the launcher its users use), each with ``--json``; ``meshcast bench --from
    a.jsonl,b.jsonl`` then prints the comparison.

    Returns:
        The exit status: on rank 0, 1 if a result was wrong; 0 on the other ranks.
    """
    import importlib
    import socket

    from . import machine, report
    from .sweep import run_sweep

    worker = importlib.import_module(f".{ns.library}_worker", __package__)
    comm_class = {"meshcast": "MeshcastComm", "mpi": "MpiComm", "gloo": "GlooComm"}[ns.library]
    args = argparse.Namespace(init="", rank=-1, world_size=-1, symmetric=ns.symmetric)
    comm = getattr(worker, comm_class)(args)  # init_process_group() / COMM_WORLD, as users do
    n, rank = comm.size, comm.rank
    if ns.library == "meshcast":
        from .. import _world

        engine = _world.current.internode if _world.current is not None else None
        if engine is not None:  # across hosts: say which engine, as --hosts does
            comm.library = f"meshcast+{engine.name}"
    if ns.expected is not None and ns.expected != n:
        if rank == 0:
            print(f"meshcast bench: error: -n {ns.expected}, but the launcher started {n} "
                  f"ranks; leave -n out with --launched", file=sys.stderr)
        return 2
    if not 0 <= spec.root < n:
        if rank == 0:
            print(f"meshcast bench: error: -r {spec.root}: the root must be a rank in [0, {n})",
                  file=sys.stderr)
        return 2
    ns.nproc = n
    mem = machine.copy_bandwidth().to_dict() if rank == 0 else None
    records = list(rec for rec in run_sweep(comm, spec))  # every rank takes every step
    versions = worker.versions()
    if hasattr(comm, "dist"):
        comm.dist.destroy_process_group()
    if rank != 0:
        return 0
    assert mem is not None
    where = f"started by the launcher (rank 0 on {socket.gethostname()})"
    head = report.header(spec, n, mem, [comm.library], where=where)
    head += [f"# note: {x}" for x in notes]
    run_ = LibraryRun(comm.library, records, {"versions": versions})
    lines = _tables(spec, records, [run_], [comm.library], n, mem["large_gbps"], every=True)
    print("\n".join(head + lines), flush=True)
    meta = {"kind": "meta", "command": command_line(ns, spec), "nranks": n, "rounds": 1,
            "spec": json.loads(spec.to_json()), "machine": machine.describe(),
            "memory_copy": mem, "hosts": {"emulated": False, "launched": True},
            "libraries": {comm.library: {"versions": versions, "skipped": "", "error": "",
                                         "seconds": 0.0}}}
    _write_files(ns, meta, records, spec, [comm.library], head, n, mem["large_gbps"])
    return 1 if any(r["wrong"] for r in records) else 0


def run_from(ns: argparse.Namespace) -> int:
    """``--from a.jsonl,b.jsonl``: the tables and comparison of results already measured.

    Meant for the results of ``--launched`` runs (one per library, each under its own
    launcher), but any ``--json`` files of the same sweep merge. A library found in two
    files is an error (which one to show would be a guess).

    Raises:
        UsageError: other run flags given, a file unreadable or without results.
    """
    from . import report
    from .page import _where as where_of

    clash = [flag for flag, on in (("--hosts", ns.hosts), ("--launched", ns.launched),
                                   ("--compare", ns.compare)) if on]
    if clash:
        raise UsageError(f"--from runs nothing; leave out {', '.join(clash)}")
    if ns.plot:
        from . import plot

        why = plot.problem(ns.plot)
        if why:
            raise UsageError(why)
    metas, records, libraries = [], [], []
    for path in (x.strip() for x in ns.inputs.split(",") if x.strip()):
        try:
            meta, results = report.read_jsonl(path)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--from {path}: {exc}") from None
        if not meta or not results:
            raise UsageError(f"--from {path}: no meshcast bench results in it (written by --json?)")
        libs = list(dict.fromkeys(r["library"] for r in results))
        again = [lib for lib in libs if lib in libraries]
        if again:
            raise UsageError(f"--from {path}: {', '.join(again)} is in an earlier file too")
        metas.append(meta)
        records += results
        libraries += libs
    libraries.sort(key=lambda lib: not lib.startswith("meshcast"))  # meshcast first, stable
    first = metas[0]
    spec = SweepSpec.from_json(json.dumps(first["spec"]))
    ops = list(dict.fromkeys(op for m in metas for op in m["spec"]["ops"]))
    spec = dataclasses.replace(spec, ops=tuple(ops))
    n = first["nranks"]
    mem = first["memory_copy"]
    head = report.header(spec, n, mem, libraries, where=where_of(first))
    head += [f"# from {m['command']}" for m in metas]
    if len({m["nranks"] for m in metas}) > 1:
        head.append("# note: the files ran on different numbers of ranks: "
                    + ", ".join(f"{m['nranks']}" for m in metas))
    infos: dict[str, Any] = {}
    for m in metas:
        infos.update(m.get("libraries", {}))
    runs = [LibraryRun(lib, [r for r in records if r["library"] == lib],
                       error=infos.get(lib, {}).get("error", "")) for lib in libraries]
    print("\n".join(head + _tables(spec, records, runs, libraries, n, mem["large_gbps"],
                                   every=True)), flush=True)
    meta = {**first, "command": f"meshcast bench --from {ns.inputs}", "libraries": infos}
    _write_files(ns, meta, records, spec, libraries, head, n, mem["large_gbps"])
    return 1 if any(r["wrong"] for r in records) else 0


def _where(ns: argparse.Namespace) -> str:
    """Where the ranks ran, for the header line."""
    shape = getattr(ns, "shape", None)
    if shape is None:
        return "on this machine"
    return (f"on {shape.describe()} (emulated: network namespaces on this machine; links "
            f"{ns.rate or 'unlimited'} per host)")


def _run_here(ns: argparse.Namespace, spec: SweepSpec, libraries: list[str],
              progress: Any) -> dict[str, LibraryRun]:
    """Every library's sweep on this machine, ``--rounds`` times, libraries taking turns."""
    from .peers import run_library

    n, rounds = ns.nproc, ns.rounds
    by_lib: dict[str, LibraryRun] = {}
    for k in range(rounds):
        for lib in libraries:
            prev = by_lib.get(lib)
            if prev is not None and (prev.skipped or prev.error):
                progress.skip(spec.units())
                continue
            which = f" (round {k + 1}/{rounds})" if rounds > 1 else ""
            progress.begin(f"[{lib}] starting {n} ranks{which}")
            before = progress.done
            result = run_library(lib, spec, n, timeout=ns.timeout,
                                 on_record=lambda rec, lib=lib: progress.advance(rec, lib))
            progress.skip(spec.units() - (progress.done - before))
            by_lib[lib] = result if prev is None else _best_of(prev, result)
    return by_lib


def _run_paired(ns: argparse.Namespace, spec: SweepSpec, libraries: list[str],
                progress: Any) -> dict[str, LibraryRun]:
    """Every library's sweep in one job, their timed blocks alternating at each call."""
    from .peers import run_paired

    progress.begin(f"[{'+'.join(libraries)}] starting {ns.nproc} ranks (paired)")
    runs = run_paired(libraries, spec, ns.nproc, blocks=ns.rounds, timeout=ns.timeout,
                      on_record=lambda rec: progress.advance(rec, rec["library"]))
    progress.skip(spec.units() * len(libraries) - progress.done)
    return {r.library: r for r in runs}


def _run_on_hosts(ns: argparse.Namespace, spec: SweepSpec, libraries: list[str],
                  progress: Any) -> tuple[dict[str, LibraryRun], dict[str, Any]]:
    """Every library's sweep on emulated hosts (made and taken down here)."""
    from .hosts import DEFAULT_PREFIX, run_all

    shape, rounds = ns.shape, ns.rounds

    def on_run(lib: str, k: int, result: LibraryRun | None) -> None:
        if result is None:
            which = f" (round {k + 1}/{rounds})" if rounds > 1 else ""
            progress.begin(f"[{lib}] starting {shape.describe()}{which}")
            return
        for rec in result.records:  # the job's output is read when it ends
            progress.advance(rec, lib)
        progress.skip(spec.units() - len(result.records))

    per_round, hosts_meta = run_all(shape, libraries, spec, rate=ns.rate or None,
                                    prefix=ns.prefix or DEFAULT_PREFIX, rounds=rounds,
                                    timeout=ns.timeout, on_run=on_run)
    by_lib: dict[str, LibraryRun] = {}
    for results in per_round:
        for result in results:
            prev = by_lib.get(result.library)
            by_lib[result.library] = result if prev is None else _best_of(prev, result)
    return by_lib, hosts_meta


def _tables(spec: SweepSpec, records: list[dict[str, Any]], runs: Sequence[LibraryRun],
            ran: list[str], n: int, mem_gbps: float | None, every: bool) -> list[str]:
    """The text after the header: nccl-tests' table (for meshcast, or ``every`` library),
    the comparisons and summary (one per meshcast library that ran), the closing lines."""
    from . import report

    lines: list[str] = []
    for r in runs:
        if r.skipped:
            lines.append(f"# {r.library}: skipped: {r.skipped}")
        elif r.error:
            lines.append(f"# {r.library}: FAILED after {len(r.records)} results: {r.error}")
    # One host: meshcast (the first library) against every other, as always. Across hosts
    # each meshcast+ENGINE is compared with the peers (mpi, gloo and the better of them).
    ours = ([lib for lib in ran if lib.startswith("meshcast")] or ran[:1]) if every else ran[:1]
    peers = [lib for lib in ran if lib not in ours]
    shown = ran if every else ran[:1]
    for op in spec.ops if ran else ():
        for lib in shown:
            lines.append("#")
            lines += report.table(op, records, n, mem_gbps, lib)
        if len(ran) > 1:
            for lib in ours:
                others = peers
                if not others:
                    continue
                recs, libs = report.with_best(records, [lib, *others])
                lines.append("#")
                lines += report.comparison(op, recs, libs, mem_gbps)
    if len(ran) > 1:
        for lib in ours:
            others = peers
            if not others:
                continue
            recs, libs = report.with_best(records, [lib, *others])
            lines.append("#")
            lines += report.summary(recs, spec.ops, libs)
    lines.append("#")
    for lib in ran:
        wrong = sum(r["wrong"] or 0 for r in records if r["library"] == lib)
        avg = report.avg_busbw(records, lib)
        lines.append(f"# {lib}: out of bounds values: {wrong} {'OK' if wrong == 0 else 'FAILED'}"
                     f"; avg bus bandwidth: {'N/A' if avg is None else f'{avg:.3f}'} GB/s")
    return lines


def _write_files(ns: argparse.Namespace, meta: dict[str, Any], records: list[dict[str, Any]],
                 spec: SweepSpec, libraries: list[str], head: list[str], n: int,
                 mem_gbps: float | None) -> None:
    """``--json``, ``--plot`` and ``--report``, as asked."""
    from . import report

    out = sys.stdout
    if ns.json:
        with open(ns.json, "w") as f:
            report.write_jsonl(f, meta, records, mem_gbps)
        print(f"# wrote {ns.json}", file=out)
    if ns.plot:
        from . import plot

        written = plot.write(ns.plot, records, spec.ops, libraries, n, head)
        print(f"# wrote {written}", file=out)
    if ns.report:
        from . import page

        for path in page.write_report(ns.report, meta, records, spec, libraries):
            print(f"# wrote {path}", file=out)


def _best_of(a: LibraryRun, b: LibraryRun) -> LibraryRun:
    """Merge two rounds of one library: per call the faster time, the larger #wrong."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in a.records + b.records:
        key = (rec["op"], rec["requested_size"], rec["placement"])
        old = merged.get(key)
        if old is None:
            merged[key] = rec
            continue
        faster = old if rec["time_us"] is None or (old["time_us"] is not None and
                                                    old["time_us"] <= rec["time_us"]) else rec
        wrongs = [w for w in (old["wrong"], rec["wrong"]) if w is not None]
        merged[key] = {**faster, "wrong": max(wrongs) if wrongs else None}
    return LibraryRun(a.library, list(merged.values()), a.meta or b.meta, b.error, b.skipped,
                      a.seconds + b.seconds)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m meshcast.bench`` (same as ``meshcast bench``)."""
    p = argparse.ArgumentParser(prog="meshcast bench", allow_abbrev=False)
    add_arguments(p)
    return handle(p.parse_args(argv))
