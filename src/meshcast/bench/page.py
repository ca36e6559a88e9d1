"""The results page (``meshcast bench --report DIR``): DIR/README.md plus DIR/results/.

The page is generated, never edited: it names the exact command, describes
the machine and the software versions, states the definitions, and shows a
summary, then per collective a markdown table (meshcast beside each peer,
with ratios) and two SVG charts. The raw results go to
``results/bench.jsonl`` (the ``--json`` format), the charts to
``results/<op>_busbw.svg`` / ``<op>_time.svg``, ``results/bench.html`` (the
``--plot`` page: self-contained, built by the viz pages' machinery), and
``results/bench.png`` when matplotlib is there (the ``plot`` extra; the page
does not need it).
Python scripts already in DIR are listed at the end with their first
docstring line, so hand-written benchmarks stay discoverable.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence
from typing import Any

from . import plot, report
from .collectives import COLLECTIVES
from .sweep import SweepSpec

Record = dict[str, Any]

_RESULTS = "results"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n else "?"


def _machine_rows(meta: Record) -> list[tuple[str, str]]:
    m = meta["machine"]
    libs = meta.get("libraries", {})
    mpi = libs.get("mpi", {}).get("versions", {}).get("mpi", "") or m.get("mpiexec", "")
    cores = (f"{m['logical_cpus']} logical CPUs ({m['physical_cores']} physical cores), "
             f"{m['usable_cpus']} usable by this process")
    mem = meta["memory_copy"]
    return [
        ("CPU", m["cpu"]),
        ("cores", cores),
        ("caches", m.get("caches") or "?"),
        ("memory", _gib(m["memory_bytes"])),
        ("memory copy bandwidth", f"{mem['large_gbps']:.2f} GB/s ({report.human_bytes(mem['large_bytes'])}"
                                  f" np.copyto), {mem['cached_gbps']:.2f} GB/s in cache "
                                  f"({report.human_bytes(mem['cached_bytes'])})"),
        ("OS", m["os"]),
        ("Python / NumPy", f"{m['python']} / {m['numpy']}"),
        ("meshcast", m.get("meshcast") or "?"),
        ("torch (Gloo)", m.get("torch") or "not installed"),
        ("mpi4py / MPI", f"{m.get('mpi4py') or 'not installed'} / {mpi or 'not installed'}"),
        ("load average at start", f"{m['load_1min']} (1 min)"),
    ]


def _busy(meta: Record) -> str:
    m = meta["machine"]
    if m["load_1min"] >= 0.5 * max(1, m["usable_cpus"]):
        return (f"**Taken on a busy machine.** The 1-minute load average was {m['load_1min']} "
                f"on {m['usable_cpus']} CPUs when the run started (other jobs were running), "
                f"so the absolute figures are low and noisy; the ratios, measured in the same "
                f"minutes, are the more telling part.")
    return ""


def _compare_md(op: str, records: Sequence[Record], libraries: Sequence[str],
                mem_gbps: float) -> list[str]:
    records, libraries = report.with_best(records, libraries)
    primary, peers = libraries[0], list(libraries[1:])
    place = report.compare_placement(records, op, primary)
    index = {(r["library"], r["requested_size"]): r for r in records
             if r["op"] == op and r["placement"] == place}
    sizes = list(dict.fromkeys(r["requested_size"] for r in records if r["op"] == op))
    head = ["size", "count", f"{primary} µs", "busbw GB/s", "%mem", "algorithm", "#wrong"]
    for p in peers:
        head += [f"{p} µs", "busbw", "ratio"]
    best = (f"; *{report.BEST}* = the faster of {' and '.join(report.BEST_OF)} at that size"
            if report.BEST in peers else "")
    lines = [f"*{place}*; ratio = {primary} busbw / peer busbw (> 1: {primary} faster){best}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sizes:
        mine = index.get((primary, size))
        some = mine or next((index[(p, size)] for p in peers if (p, size) in index), None)
        if some is None:
            continue
        row = [report.human_bytes(some["size"]), str(some["count"])]
        if mine and mine["time_us"] is not None:
            row += [report.fmt_time(mine["time_us"]), f"{mine['busbw']:.2f}",
                    f"{100 * mine['busbw'] / mem_gbps:.1f}" if mem_gbps else "",
                    mine["algorithm"] or "", "N/A" if mine["wrong"] is None else str(mine["wrong"])]
        else:
            row += ["N/A"] * 5
        for p in peers:
            rec = index.get((p, size))
            rat = report.ratio(mine, rec)
            row += [report.fmt_time(rec["time_us"] if rec else None),
                    "N/A" if not rec or rec["busbw"] is None else f"{rec['busbw']:.2f}",
                    "N/A" if rat is None else f"**{rat:.2f}**" if rat < 1 else f"{rat:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _summary_md(records: Sequence[Record], ops: Sequence[str], libraries: Sequence[str]
                ) -> list[str]:
    records, libraries = report.with_best(records, libraries)
    primary, peers = libraries[0], list(libraries[1:])
    if not peers:
        return []
    head = ["collective", "placement"]
    for p in peers:
        head += [f"vs {p} (geo. mean)", "worst", "at size", "at the largest size"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op in ops:
        place = report.compare_placement(records, op, primary)
        row = [op, place]
        for p in peers:
            pairs = report.ratio_pairs(records, op, primary, p, place)
            g = report.geomean(x for x, _ in pairs)
            if g is None:
                row += ["N/A", "", "", ""]
            else:
                worst = min(pairs)
                largest = max(pairs, key=lambda pair: pair[1])
                row += [f"{g:.2f}", f"{worst[0]:.2f}", report.human_bytes(worst[1]),
                        f"{largest[0]:.2f} ({report.human_bytes(largest[1])})"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _scripts(directory: str) -> list[str]:
    out = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".py"):
            continue
        try:
            with open(os.path.join(directory, name)) as f:
                doc = ast.get_docstring(ast.parse(f.read())) or ""
        except (OSError, SyntaxError):
            doc = ""
        first = doc.strip().splitlines()[0] if doc.strip() else ""
        out.append(f"- [`{name}`]({name}){' — ' + first if first else ''}")
    return out


def _where(meta: Record) -> str:
    """Where the ranks ran, for the header lines (as ``meshcast bench`` printed them)."""
    hosts = meta.get("hosts")
    if not hosts:
        return "on this machine"
    if not hosts.get("emulated"):
        return "started by the launcher"
    per = hosts["per_host"]
    shape = (f"{len(per)} hosts x {per[0]} ranks" if len(set(per)) == 1
             else f"{len(per)} hosts ({' + '.join(map(str, per))} ranks)")
    return (f"on {shape} (emulated: network namespaces on this machine; links "
            f"{hosts.get('rate') or 'unlimited'} per host)")


def _who(meta: Record, n: int) -> str:
    """The Method section's first sentences: where the ranks ran and how each library started."""
    hosts = meta.get("hosts")
    if not hosts:
        how = ("every library in the same processes (under `mpiexec` when MPICH is compared)"
               if meta.get("paired") else "each library started fresh in its own processes")
        return (f"{n} ranks on this one machine, {how}: meshcast through its "
                "torch.distributed-style API on its shared-memory engine; "
                "torch.distributed's Gloo backend over TCP on the loopback interface; "
                "MPICH through mpi4py's buffer methods"
                + ("." if meta.get("paired") else " under `mpiexec`."))
    if not hosts.get("emulated"):
        return (f"{n} ranks started by the user's launcher across the hosts, one library "
                "per run, each connecting through the launcher's environment.")
    launch = "; ".join(f"{lib} under {how}" for lib, how in hosts.get("launch", {}).items())
    return (f"{n} ranks {_where(meta)}: every emulated host has its own network namespace, "
            "hostname and /dev/shm, and one eth0 (rate-limited egress, tc tbf) on a bridge "
            "shared by all, so traffic between hosts crosses the emulated link while the "
            "ranks of one host share memory. Each library started fresh, the way its users "
            f"start it across hosts: {launch}.")


def write_report(directory: str, meta: Record, records: Sequence[Record], spec: SweepSpec,
                 libraries: Sequence[str]) -> list[str]:
    """Write README.md and results/ under ``directory``; returns the paths written."""
    results = os.path.join(directory, _RESULTS)
    os.makedirs(results, exist_ok=True)
    n = meta["nranks"]
    mem_gbps = meta["memory_copy"]["large_gbps"]
    written = []
    jsonl = os.path.join(results, "bench.jsonl")
    with open(jsonl, "w") as f:
        report.write_jsonl(f, meta, records, mem_gbps)
    written.append(jsonl)
    for op in spec.ops:
        bw, tm = plot.op_svgs(records, op, libraries, n)
        for kind, text in (("busbw", bw), ("time", tm)):
            path = os.path.join(results, f"{op}_{kind}.svg")
            with open(path, "w") as f:
                f.write(text)
            written.append(path)
    hosts = meta.get("hosts")
    page_lines = report.header(spec, n, meta["memory_copy"], libraries, where=_where(meta))
    written.append(plot.write(os.path.join(results, "bench.html"), records, spec.ops, libraries,
                              n, page_lines))
    if plot.have_matplotlib():
        written.append(plot.write(os.path.join(results, "bench.png"), records, spec.ops,
                                  libraries, n))

    if hosts:
        md = ["# meshcast benchmarks across hosts", "",
              "Generated by the command below; do not edit by hand, regenerate.", "", "```",
              f"{meta['command']} --report {directory}", "```", ""]
    else:
        md = ["# meshcast benchmarks", "",
              "Generated by `python benchmarks/make_results.py`, which runs the command below; "
              "do not edit by hand, regenerate.", "", "```", f"{meta['command']} --report {directory}", "```", ""]
    busy = _busy(meta)
    if busy:
        md += [busy, ""]
    md += ["## Machine", "", "| | |", "|---|---|"]
    md += [f"| {k} | {v} |" for k, v in _machine_rows(meta)]
    libs = meta.get("libraries", {})
    problems = [f"- **{name}**: {'skipped: ' + info['skipped'] if info['skipped'] else 'failed: ' + info['error'].splitlines()[0]}"
                for name, info in libs.items() if info["skipped"] or info["error"]]
    if problems:
        md += ["", "Not measured:", ""] + problems
    md += ["", "## Method", "", _who(meta, n) + " Every library runs the same sweep "
           "(`meshcast/bench/sweep.py`): per size and placement "
           f"{spec.warmup} warm-up calls, a barrier, {spec.iters} timed calls; the time is "
           "the largest of the ranks' mean times"
           + _rounds_text(meta)
           + ". Buffers move through a buffer of the "
           "largest size every iteration as in nccl-tests, so small sizes are not served "
           "from a cache warmed by the previous call. After the timed loop, every size is "
           "checked against its closed-form result (`#wrong`).", "",
           "Bus bandwidth as nccl-tests defines it: algbw = S / time, busbw = algbw × factor "
           "(GB/s = 10⁹ B/s); `%mem` is busbw as a percentage of the memory copy bandwidth "
           "above, the ceiling for data that must go through memory (it passes 100 when a "
           "call's data stay in the caches, e.g. an 8 MiB window inside a 32 MiB L3).", "",
           "| collective | S | factor |", "|---|---|---|"]
    md += [f"| {c.name} | {c.s_text} | {c.factor_text} |" for c in COLLECTIVES.values()
           if c.name in spec.ops]
    md += ["", "torch's API has a single buffer for all_reduce, broadcast and reduce, so "
           "meshcast and Gloo run those in place only; MPI is compared in the same placement.",
           ""]
    summary = _summary_md(records, spec.ops, libraries)
    if summary:
        md += ["## Summary", "",
               f"{libraries[0]} busbw / peer busbw, geometric mean over the sizes (calls of "
               "0 bytes left out), and the size where the ratio is lowest (> 1: meshcast "
               "faster).", ""] + summary + [""]
    md += ["## Results per collective", "",
           f"Also: [all charts in one page]({_RESULTS}/bench.html), "
           f"[raw results (JSON lines)]({_RESULTS}/bench.jsonl).", ""]
    for op in spec.ops:
        md += [f"### {op}", "",
               f"![{op} busbw]({_RESULTS}/{op}_busbw.svg) ![{op} time]({_RESULTS}/{op}_time.svg)",
               ""]
        md += _compare_md(op, records, libraries, mem_gbps) + [""]
    scripts = _scripts(directory)
    if scripts:
        md += ["## Other scripts in this folder", ""] + scripts + [""]
    readme = os.path.join(directory, "README.md")
    with open(readme, "w") as f:
        f.write("\n".join(md))
    written.insert(0, readme)
    return written


def _rounds_text(meta: dict[str, Any]) -> str:
    """How the libraries took turns (``--rounds``, ``--paired``), for the Method section."""
    rounds = meta.get("rounds", 1)
    if meta.get("paired"):
        return (f"; all libraries ran in one job on the same buffers, and at each size "
                f"their timed blocks alternated ({rounds} per library), each library "
                f"keeping its best")
    if rounds > 1:
        return (f"; the whole sweep ran {rounds} times, the libraries taking turns, and "
                f"each call keeps its best time")
    return ""
