"""Turning records into text: nccl-tests' table, the side-by-side comparison, the JSON lines.

The table is nccl-tests' (``size count type redop root`` then ``time algbw
busbw #wrong`` for out-of-place and for in-place) with two additions:
``%mem``, busbw as a percentage of this machine's memory copy bandwidth,
and ``algorithm``, the one meshcast's group recorded for the call. N/A
marks a placement the library has no form of (torch's API has one buffer
for all_reduce, broadcast and reduce, for instance).

The comparison puts, for each size, meshcast's time and busbw beside each
peer's and ``ratio = meshcast busbw / peer busbw`` (equal to peer time /
meshcast time, which is what is computed so that a size of 0 bytes still
compares): above 1, meshcast is faster. When both MPI and Gloo ran, a last
peer ``best`` is added: per size the faster of the two (:func:`with_best`),
so the ratio against it says whether meshcast beats what a user would
otherwise pick.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import IO, Any

from .collectives import COLLECTIVES
from .sweep import PLACEMENTS, SweepSpec

Record = dict[str, Any]

_AVERAGE_TEXT = {"rank0": "rank 0's mean", "avg": "the mean over ranks of each rank's mean",
                 "min": "the min over ranks of each rank's mean",
                 "max": "the max over ranks of each rank's mean"}
_AVERAGE_FLAG = {"rank0": 0, "avg": 1, "min": 2, "max": 3}


def human_bytes(n: int) -> str:
    """``8 B``, ``64 KiB``, ``16 MiB``: binary units, as the sizes are given."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    if n >= 1 << 10:
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if n >= 1 << shift:
                return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def fmt_time(us: float | None) -> str:
    """nccl-tests' time format: 7.0f from 10 ms, 7.1f from 100 us, else 7.2f."""
    if us is None:
        return "N/A"
    if us >= 10000.0:
        return f"{us:.0f}"
    if us >= 100.0:
        return f"{us:.1f}"
    return f"{us:.2f}"


def _bw(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.2f}"


def _pct(busbw: float | None, mem_gbps: float | None) -> str:
    if busbw is None or not mem_gbps:
        return "N/A"
    return f"{100.0 * busbw / mem_gbps:.1f}"


def header(spec: SweepSpec, n: int, mem: dict[str, Any] | None, libraries: Sequence[str],
           rounds: int = 1, where: str = "on this machine", paired: bool = False) -> list[str]:
    """The lines that say what was measured and how (printed once, before the tables).

    ``where`` says where the ranks ran ("on this machine", "on 2 hosts x 2 ranks ...");
    ``paired``: the libraries ran in one job, their timed blocks alternating.
    """
    if paired:
        how = (f"; paired: one job, the libraries' timed blocks alternating at each call, "
               f"best of {rounds} blocks each")
    else:
        how = f"; best of {rounds} rounds, libraries taking turns" if rounds > 1 else ""
    sizes = (f"{human_bytes(spec.sizes[0])} .. {human_bytes(spec.sizes[-1])} "
             f"({len(spec.sizes)} sizes)" if spec.sizes else "none")
    lines = [
        f"# meshcast bench: {n} ranks {where}; {', '.join(libraries)}",
        f"# ops {','.join(spec.ops)} | sizes {sizes} | type {spec.dtype} | redop {spec.redop}"
        f" | root {spec.root} | warm-up {spec.warmup} | iters {spec.iters}"
        f" | check {'on' if spec.check else 'off'} | rotate {'on' if spec.rotate else 'off'}",
        f"# time: {_AVERAGE_TEXT[spec.average]} of {spec.iters} back-to-back calls, in us "
        f"(nccl-tests -a {_AVERAGE_FLAG[spec.average]})"
        + how,
        "# algbw = S / time, busbw = algbw x factor, GB/s = 1e9 B/s (nccl-tests' definitions);"
        " S and factor per collective below",
    ]
    if mem:
        lines.append(
            f"# memory copy bandwidth (np.copyto, best of 5): {mem['large_gbps']:.2f} GB/s for "
            f"{human_bytes(mem['large_bytes'])}, {mem['cached_gbps']:.2f} GB/s for "
            f"{human_bytes(mem['cached_bytes'])} (in cache); %mem = busbw / "
            f"{mem['large_gbps']:.2f} GB/s (over 100 when a call's data stay in the caches)")
    if spec.algorithms:
        forced = ", ".join(f"{k}:{v}" for k, v in spec.algorithms.items())
        lines.append(f"# meshcast algorithms forced: {forced}")
    return lines


def op_header(op: str, n: int, library: str = "") -> str:
    """The formula line(s) above an op's table."""
    coll = COLLECTIVES[op]
    who = f"[{library}] " if library else ""
    text = (f"# {who}{op}: S = {coll.s_text}; algbw = S / time; busbw = algbw x "
            f"{coll.factor_text} = {coll.factor(n):.3f} for n={n}")
    return text + (f"\n#   ({coll.note})" if coll.note else "")


_COLS = ("{:>12}  {:>12}  {:>8}  {:>6}  {:>5}", "  {:>8}  {:>7}  {:>7}  {:>5}  {:>6}")


def table(op: str, records: Sequence[Record], n: int, mem_gbps: float | None,
          library: str) -> list[str]:
    """nccl-tests' table for one op and one library (+ %mem and algorithm)."""
    lead, block = _COLS
    rows = _by_size(records, library, op)
    lines = [
        op_header(op, n, library),
        f"#{' ' * 50}{'out-of-place':^43}{'in-place':^43}",
        "#" + lead.format("size", "count", "type", "redop", "root")[1:]
        + block.format("time", "algbw", "busbw", "%mem", "#wrong") * 2 + "  algorithm",
        "#" + lead.format("(B)", "(elements)", "", "", "")[1:]
        + block.format("(us)", "(GB/s)", "(GB/s)", "", "") * 2,
    ]
    for _, by_place in rows:
        first = next(r for r in by_place.values() if r is not None)
        line = lead.format(first["size"], first["count"], first["type"], first["redop"],
                           first["root"])
        algos = []
        for place in PLACEMENTS:
            r = by_place.get(place)
            if r is None or r["time_us"] is None:
                line += block.format("N/A", "N/A", "N/A", "N/A", "N/A")
                continue
            line += block.format(fmt_time(r["time_us"]), _bw(r["algbw"]), _bw(r["busbw"]),
                                 _pct(r["busbw"], mem_gbps),
                                 "N/A" if r["wrong"] is None else str(r["wrong"]))
            if r["algorithm"] and r["algorithm"] not in algos:
                algos.append(r["algorithm"])
        lines.append(line + "  " + (" | ".join(algos) or "-"))
    notes = sorted({r["note"] for _, bp in rows for r in bp.values() if r and r["note"]})
    lines += [f"#   N/A: {note}" for note in notes]
    return lines


def _by_size(records: Iterable[Record], library: str, op: str
             ) -> list[tuple[int, dict[str, Record | None]]]:
    """[(requested size, {placement: record})] in sweep order."""
    out: dict[int, dict[str, Record | None]] = {}
    for r in records:
        if r["library"] == library and r["op"] == op:
            out.setdefault(r["requested_size"], {})[r["placement"]] = r
    return list(out.items())


def compare_placement(records: Sequence[Record], op: str, primary: str = "meshcast") -> str:
    """The placement the comparison of ``op`` uses: the first (out-of-place, in-place)
    for which ``primary`` has figures (torch-API all_reduce only has in-place)."""
    for place in PLACEMENTS:
        if any(r["op"] == op and r["library"] == primary and r["placement"] == place
               and r["time_us"] is not None for r in records):
            return place
    for place in PLACEMENTS:
        if any(r["op"] == op and r["placement"] == place and r["time_us"] is not None
               for r in records):
            return place
    return PLACEMENTS[0]


def ratio(mine: Record | None, peer: Record | None) -> float | None:
    """meshcast busbw / peer busbw, computed as peer time / meshcast time."""
    if not mine or not peer or not mine["time_us"] or not peer["time_us"]:
        return None
    return peer["time_us"] / mine["time_us"]


def comparison(op: str, records: Sequence[Record], libraries: Sequence[str],
               mem_gbps: float | None) -> list[str]:
    """Side-by-side time, busbw (and ratio for peers) per size for one op."""
    primary, peers = libraries[0], list(libraries[1:])
    place = compare_placement(records, op, primary)
    index = {(r["library"], r["requested_size"]): r for r in records
             if r["op"] == op and r["placement"] == place}
    sizes = list(dict.fromkeys(r["requested_size"] for r in records if r["op"] == op))
    lines = [f"# {op} ({place}): time (us), busbw (GB/s); ratio = {primary} busbw / peer busbw"
             f" (>1: {primary} faster)"
             + (f"; {BEST} = the faster of {' and '.join(BEST_OF)} at that size"
                if BEST in peers else "")]
    head = f"#{'size':>11}  {'count':>10}  {primary + ' time':>14} {'busbw':>7} {'%mem':>5}"
    for p in peers:
        head += f"  {p + ' time':>12} {'busbw':>7} {'ratio':>6}"
    lines.append(head)
    for size in sizes:
        mine = index.get((primary, size))
        any_rec = mine or next((index[(p, size)] for p in peers if (p, size) in index), None)
        if any_rec is None:
            continue
        line = (f"{any_rec['size']:>12}  {any_rec['count']:>10}  "
                f"{fmt_time(mine['time_us'] if mine else None):>14} "
                f"{_bw(mine['busbw'] if mine else None):>7} "
                f"{_pct(mine['busbw'] if mine else None, mem_gbps):>5}")
        for p in peers:
            rec = index.get((p, size))
            rat = ratio(mine, rec)
            line += (f"  {fmt_time(rec['time_us'] if rec else None):>12} "
                     f"{_bw(rec['busbw'] if rec else None):>7} "
                     f"{'N/A' if rat is None else f'{rat:.2f}':>6}")
        lines.append(line)
    return lines


#: The pseudo-peer of :func:`with_best`: per size, the faster of MPI and Gloo.
BEST = "best"
#: The peers it picks from.
BEST_OF = ("mpi", "gloo")


def with_best(records: Sequence[Record], libraries: Sequence[str]
              ) -> tuple[list[Record], list[str]]:
    """``records`` and ``libraries`` plus :data:`BEST` when both MPI and Gloo are among
    ``libraries[1:]`` (otherwise both unchanged).

    A ``best`` record is a copy of the faster of the ``mpi`` and ``gloo`` records of the
    same (op, size, placement) with ``library`` "best" and ``note`` naming which it was.
    It is for the comparison and summary only: ``--json`` and the plots never hold it.
    """
    recs, libs = list(records), list(libraries)
    if not all(p in libs[1:] for p in BEST_OF):
        return recs, libs
    best: dict[tuple[Any, ...], Record] = {}
    for r in records:
        if r["library"] not in BEST_OF or r["time_us"] is None:
            continue
        key = (r["op"], r["requested_size"], r["placement"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    recs += [{**r, "library": BEST, "note": f"best = {r['library']}"} for r in best.values()]
    return recs, libs + [BEST]


def geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def ratio_pairs(records: Sequence[Record], op: str, primary: str, peer: str, place: str
                ) -> list[tuple[float, int]]:
    """[(ratio, size)] of ``op`` in ``place`` for every size both ran that moves data.

    Calls of 0 bytes (nccl-tests' first all_gather sizes round down to 0
    elements) are left out: they compare call overheads, not bandwidth.
    """
    theirs = {q["requested_size"]: q for q in records
              if q["op"] == op and q["library"] == peer and q["placement"] == place}
    pairs = []
    for r in records:
        if r["op"] == op and r["library"] == primary and r["placement"] == place and r["size"]:
            rat = ratio(r, theirs.get(r["requested_size"]))
            if rat is not None:
                pairs.append((rat, r["size"]))
    return pairs


def summary(records: Sequence[Record], ops: Sequence[str], libraries: Sequence[str]
            ) -> list[str]:
    """Per op and peer: geometric-mean ratio, and the size where meshcast does worst."""
    primary, peers = libraries[0], list(libraries[1:])
    if not peers:
        return []
    lines = [f"# summary: {primary} busbw / peer busbw per op (geometric mean over sizes > 0;"
             f" worst = lowest ratio, at that size; largest = at the largest size)"]
    head = f"#{'op':>15}  {'placement':>12}"
    for p in peers:
        head += f"  {'vs ' + p:>9} {'worst':>6} {'at':>9} {'largest':>7}"
    lines.append(head)
    for op in ops:
        place = compare_placement(records, op, primary)
        line = f"{op:>16}  {place:>12}"
        for p in peers:
            pairs = ratio_pairs(records, op, primary, p, place)
            g = geomean(x for x, _ in pairs)
            if g is None:
                line += f"  {'N/A':>9} {'':>6} {'':>9} {'':>7}"
                continue
            worst = min(pairs)
            largest = max(pairs, key=lambda p: p[1])[0]
            line += (f"  {g:>9.2f} {worst[0]:>6.2f} {human_bytes(worst[1]):>9}"
                     f" {largest:>7.2f}")
        lines.append(line)
    return lines


def avg_busbw(records: Sequence[Record], library: str) -> float | None:
    """nccl-tests' closing "Avg bus bandwidth": the mean busbw over every measured call."""
    vals = [r["busbw"] for r in records if r["library"] == library and r["busbw"] is not None]
    return sum(vals) / len(vals) if vals else None


def write_jsonl(stream: IO[str], meta: Record, records: Sequence[Record],
                mem_gbps: float | None) -> None:
    """One ``meta`` line, then one line per result (with ``mem_pct`` added)."""
    stream.write(json.dumps(meta) + "\n")
    for r in records:
        row = dict(r)
        row["mem_pct"] = (100.0 * r["busbw"] / mem_gbps) if (mem_gbps and r["busbw"]
                                                             is not None) else None
        stream.write(json.dumps(row) + "\n")


def read_jsonl(path: str) -> tuple[Record, list[Record]]:
    """(meta, results) from a file written by :func:`write_jsonl`."""
    meta: Record = {}
    results: list[Record] = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("kind") == "meta":
                meta = rec
            elif rec.get("kind") == "result":
                results.append(rec)
    return meta, results
