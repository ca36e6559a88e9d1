"""``meshcast bench``: nccl-tests for CPUs, with Gloo and MPI side by side.

Flags follow nccl-tests where they exist (``-b -e -f -i -d -o -r -w -c -a``)
except ``-n``, which is the number of ranks as in ``meshcast run`` (the
timed iterations are ``--iters``). The command launches its own ranks,
measures the memory copy bandwidth first (the ``%mem`` column), runs the
sweep on meshcast and then on every ``--compare`` peer, and prints
nccl-tests' table for meshcast, one comparison table per collective and a
summary.
"""

from __future__ import annotations

import argparse
import json
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
"""

EPILOG = """\
busbw = algbw x factor (nccl-tests): all_reduce 2(n-1)/n; all_gather,
reduce_scatter, gather, scatter, all_to_all (n-1)/n; broadcast, reduce,
sendrecv 1. The header of each table states S and the factor.

Exit status: 0; 1 if any library returned a wrong result (#wrong > 0) or
meshcast itself failed; 2 for bad arguments. A peer that is missing is
skipped with its reason; one that fails is reported and the rest goes on.
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
    g.add_argument("-n", "--nproc", type=int, default=2, metavar="N",
                   help="ranks to launch (default 2)")
    g.add_argument("-b", "--minbytes", default="8", metavar="SIZE",
                   help="smallest size, bytes with optional K/M/G (default 8)")
    g.add_argument("-e", "--maxbytes", default="64M", metavar="SIZE",
                   help="largest size (default 64M)")
    step = g.add_mutually_exclusive_group()
    step.add_argument("-f", "--stepfactor", type=int, default=None, metavar="F",
                      help="multiply the size by F each step (default 2)")
    step.add_argument("-i", "--stepbytes", default=None, metavar="SIZE",
                      help="add SIZE each step instead")
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
    g.add_argument("--rounds", type=int, default=1, metavar="K",
                   help="run every library's sweep K times, libraries taking turns, and keep "
                        "each call's best time (steadier ratios on a busy machine; default 1)")
    g.add_argument("--timeout", type=float, default=300.0,
                   help="stop a library's ranks after this many seconds without a result "
                        "(default 300)")
    g.add_argument("--list-algorithms", action="store_true",
                   help="list meshcast's algorithms per collective and exit")


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


def spec_from_args(ns: argparse.Namespace) -> tuple[SweepSpec, list[str]]:
    """The sweep the flags describe, and notes to print; raises UsageError."""
    if ns.nproc < 1:
        raise UsageError(f"-n must be >= 1, got {ns.nproc}")
    ops = _ops(ns.op)
    lo, hi = _size(ns.minbytes, "-b"), _size(ns.maxbytes, "-e")
    step = _size(ns.stepbytes, "-i") if ns.stepbytes is not None else None
    if not 0 <= ns.root < ns.nproc:
        raise UsageError(f"-r {ns.root}: the root must be a rank in [0, {ns.nproc})")
    if ns.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {ns.rounds}")
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
    spec = SweepSpec(ops=ops, sizes=sizes(lo, hi, ns.stepfactor, step), dtype=_dtype(ns.dtype),
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
    parts = ["meshcast bench", f"-n {ns.nproc}", f"--op {ns.op}", f"-b {ns.minbytes}",
             f"-e {ns.maxbytes}"]
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
        spec, notes = spec_from_args(ns)
        libraries = _libraries(ns.compare, ns.symmetric)
    except UsageError as exc:
        print(f"meshcast bench: error: {exc}", file=sys.stderr)
        return 2
    return run(ns, spec, libraries, notes)


def run(ns: argparse.Namespace, spec: SweepSpec, libraries: list[str], notes: list[str]) -> int:
    """Measure, sweep every library, print, write the requested files."""
    from . import machine, report
    from .peers import run_library
    from .progress import Progress

    n = ns.nproc
    host = machine.describe()
    mem = machine.copy_bandwidth().to_dict()
    mem_gbps = mem["large_gbps"]
    out = sys.stdout
    head = report.header(spec, n, mem, libraries, ns.rounds) + [f"# note: {x}" for x in notes]
    print("\n".join(head), file=out, flush=True)

    rounds = ns.rounds
    progress = Progress(spec.units() * len(libraries) * rounds)
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
    progress.close()
    runs = [by_lib[lib] for lib in libraries]

    records = [r for run_ in runs for r in run_.records]
    ran = [r.library for r in runs if r.records]
    lines: list[str] = []
    for r in runs:
        if r.skipped:
            lines.append(f"# {r.library}: skipped: {r.skipped}")
        elif r.error:
            lines.append(f"# {r.library}: FAILED after {len(r.records)} results: {r.error}")
    primary = ran[0] if ran else "meshcast"
    for op in spec.ops if ran else ():
        lines.append("#")
        lines += report.table(op, records, n, mem_gbps, primary)
        if len(ran) > 1:
            lines.append("#")
            lines += report.comparison(op, records, ran, mem_gbps)
    if len(ran) > 1:
        lines.append("#")
        lines += report.summary(records, spec.ops, ran)
    lines.append("#")
    total_wrong = 0
    for lib in ran:
        wrong = sum(r["wrong"] or 0 for r in records if r["library"] == lib)
        total_wrong += wrong
        avg = report.avg_busbw(records, lib)
        lines.append(f"# {lib}: out of bounds values: {wrong} {'OK' if wrong == 0 else 'FAILED'}"
                     f"; avg bus bandwidth: {'N/A' if avg is None else f'{avg:.3f}'} GB/s")
    print("\n".join(lines), file=out, flush=True)

    meta = {"kind": "meta", "command": command_line(ns, spec), "nranks": n, "rounds": ns.rounds,
            "spec": json.loads(spec.to_json()), "machine": host, "memory_copy": mem,
            "libraries": {r.library: {"versions": r.meta.get("versions", {}),
                                      "skipped": r.skipped, "error": r.error,
                                      "seconds": round(r.seconds, 2)} for r in runs}}
    if ns.json:
        with open(ns.json, "w") as f:
            report.write_jsonl(f, meta, records, mem_gbps)
        print(f"# wrote {ns.json}", file=out)
    if ns.plot:
        from . import plot

        written = plot.write(ns.plot, records, spec.ops, ran or libraries, n, head)
        print(f"# wrote {written}", file=out)
    if ns.report:
        from . import page

        for path in page.write_report(ns.report, meta, records, spec, ran or libraries):
            print(f"# wrote {path}", file=out)
    meshcast_failed = any(r.library.startswith("meshcast") and (r.error or not r.records) for r in runs)
    return 1 if total_wrong or meshcast_failed else 0


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
