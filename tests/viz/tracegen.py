"""Recorded runs for the replay's tests: traces written by hand, and real ones.

Until a recorder wrote them, the replay was built against trace directories
written here in the format of :mod:`meshcast.trace.records` (its docstring is
the spec); :func:`record_run` records real runs with ``MESHCAST_TRACE``.
Imported by ``conftest.py`` and the test modules (a module of its own, not
``conftest``: the repository has several conftest modules).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

T0 = 1_764_000_000_000_000_000  # a wall-clock start, ns
MS = 1_000_000


def _ring_rounds(rank: int, p: int, nbytes: int, t: int, step: int) -> list[dict[str, Any]]:
    """A ring all_reduce's 2(p-1) rounds on ``rank``: send right, receive from the left."""
    piece = nbytes // p
    return [{"round": i, "send": [[(rank + 1) % p, piece]], "recv": [[(rank - 1) % p, piece]],
             "begin": t + i * step, "wait_ns": step // 3 + 10_000 * rank}
            for i in range(2 * (p - 1))]


def _tree_rounds(rank: int, nbytes: int, t: int, step: int) -> list[dict[str, Any]]:
    """A binomial-tree broadcast from 0 on 4 ranks: 0->2, then 0->1 and 2->3."""
    plan = {0: [[2], [1]], 1: [[], []], 2: [[], [3]], 3: [[], []]}
    frm = {0: [None, None], 1: [None, 0], 2: [0, None], 3: [None, 2]}
    out = []
    for i in range(2):
        out.append({"round": i, "send": [[d, nbytes] for d in plan[rank][i]],
                    "recv": [[frm[rank][i], nbytes]] if frm[rank][i] is not None else [],
                    "begin": t + i * step, "wait_ns": step // 2 if frm[rank][i] is not None else 0})
    return out


def write_trace(directory: Path, *, hang: bool = True, mismatch: bool = True,
                hosts: tuple[str, ...] = ("node-a",) * 4,
                world_name: str = "WORLD") -> Path:
    """Write a realistic 4-rank trace into ``directory``.

    What is in it: a barrier (tiny lane, compiled), a tree broadcast, a 1 MiB
    ring all_reduce (6 rounds), an async recursive-doubling all_gather with p2p
    send/recv overlapping it (0->1 tag 7, 3->2 tag 1), a subgroup EVEN (ranks 0,2)
    with one all_reduce and, with ``mismatch``, call #1 of EVEN where rank 0
    calls all_reduce and rank 2 broadcast (both fail), a dozen one-shot
    all_reduces (WORLD #4..#16, one every 0.8 s) and WORLD #17: with ``hang``
    rank 2 never enters it (it waits in a recv from 1, tag 99, since 12.1 s)
    while ranks 0,1,3 wait in it since 12.3 s (rank 0 times out at 14.3 s,
    ranks 1 and 3 end=null); without, #17 completes everywhere.
    """
    p = 4
    directory.mkdir(parents=True, exist_ok=True)
    calls: dict[int, list[dict[str, Any]]] = {r: [] for r in range(p)}
    p2p_seq = dict.fromkeys(range(p), 0)

    def call(rank: int, group: str, seq: int | None, kind: str, begin: int, end: int | None, *,
             nbytes: int = 0, algorithm: str | None = None, family: str = "schedule",
             rounds: list[dict[str, Any]] | None = None, **kw: Any) -> None:
        if seq is None:
            seq = p2p_seq[rank]
            p2p_seq[rank] += 1
        rec = {"type": "call", "group": group, "seq": seq, "kind": kind,
               "dtype": kw.pop("dtype", "float32"), "count": nbytes // 4, "bytes": nbytes,
               "root": kw.pop("root", None), "peer": kw.pop("peer", None),
               "tag": kw.pop("tag", None), "op": kw.pop("op", None),
               "algorithm": algorithm, "family": family, "lane": kw.pop("lane", False),
               "compiled": kw.pop("compiled", False), "async": kw.pop("async_", False),
               "begin": begin, "end": end, "error": kw.pop("error", None),
               "rounds": rounds or []}
        assert not kw, kw
        calls[rank].append(rec)

    W = world_name
    for r in range(p):
        # WORLD #0 barrier on the compiled tiny lane
        call(r, W, 0, "barrier", T0 + 1 * MS + r * 100_000, T0 + 2 * MS, nbytes=0,
             algorithm="barrier/oneshot", family="oneshot", lane=True, compiled=True,
             dtype=None)
        # WORLD #1 broadcast of 4 KiB from 0 along a binomial tree
        b = T0 + 5 * MS + r * 50_000
        call(r, W, 1, "broadcast", b, T0 + 5 * MS + 600_000 + r * 40_000, nbytes=4096,
             root=0, algorithm="broadcast/tree", rounds=_tree_rounds(r, 4096, T0 + 5 * MS + 200_000, 200_000))
        # WORLD #2 ring all_reduce of 1 MiB
        b = T0 + 10 * MS + r * 300_000  # rank 3 arrives 0.9 ms after rank 0: skew
        call(r, W, 2, "all_reduce", b, T0 + 18 * MS + r * 20_000, nbytes=1 << 20, op="sum",
             algorithm="all_reduce/ring", rounds=_ring_rounds(r, p, 1 << 20, T0 + 11 * MS, MS))
        # WORLD #3 async all_gather (recursive doubling) with p2p inside its window
        rd = [{"round": i, "send": [[r ^ (1 << i), 256 << i]], "recv": [[r ^ (1 << i), 256 << i]],
               "begin": T0 + 21 * MS + i * MS, "wait_ns": 300_000} for i in range(2)]
        call(r, W, 3, "all_gather", T0 + 20 * MS + r * 10_000, T0 + 26 * MS, nbytes=256,
             algorithm="all_gather/recursive_doubling", rounds=rd, async_=True)
    call(0, W, None, "send", T0 + 22 * MS, T0 + 22 * MS + 400_000, nbytes=8192, peer=1, tag=7,
         algorithm="send/p2p", family="p2p")
    call(1, W, None, "recv", T0 + 21_500_000, T0 + 23 * MS, nbytes=8192, peer=0, tag=7,
         algorithm="recv/p2p", family="p2p")
    call(3, W, None, "send", T0 + 23 * MS, T0 + 23_300_000, nbytes=64, peer=2, tag=1,
         algorithm="send/p2p", family="p2p")
    call(2, W, None, "recv", T0 + 22_800_000, T0 + 23_400_000, nbytes=64, peer=None, tag=1,
         algorithm="recv/p2p", family="p2p")
    # subgroup EVEN = ranks 0, 2
    for r in (0, 2):
        call(r, "EVEN", 0, "all_reduce", T0 + 30 * MS, T0 + 31 * MS, nbytes=512, op="sum",
             algorithm="all_reduce/direct",
             rounds=[{"round": 0, "send": [[2 - r, 512]], "recv": [[2 - r, 512]],
                      "begin": T0 + 30 * MS, "wait_ns": 200_000}])
    if mismatch:
        err = ("CollectiveMismatch: call #1 of group EVEN: rank 0 called all_reduce(float32, "
               "count=128, op=sum), rank 2 called broadcast(float32, count=128, src=2)")
        call(0, "EVEN", 1, "all_reduce", T0 + 40 * MS, T0 + 41 * MS, nbytes=512, op="sum",
             algorithm="all_reduce/oneshot", family="oneshot", error=err)
        call(2, "EVEN", 1, "broadcast", T0 + 40_200_000, T0 + 41 * MS, nbytes=512, root=2,
             algorithm="broadcast/oneshot", family="oneshot", error=err)
    # WORLD #4..#16: one small one-shot all_reduce per "step", every 0.8 s
    for s in range(4, 17):
        t = T0 + 2_000 * MS + (s - 4) * 800 * MS
        for r in range(p):
            call(r, W, s, "all_reduce", t + r * 40_000, t + 500_000, nbytes=4096, op="sum",
                 algorithm="all_reduce/oneshot", family="oneshot")
    t17 = T0 + 12_300 * MS
    if hang:
        call(2, W, None, "recv", T0 + 12_100 * MS, None, nbytes=1024, peer=1, tag=99,
             algorithm="recv/p2p", family="p2p")
        call(0, W, 17, "all_reduce", t17, T0 + 14_300 * MS, nbytes=4096, op="sum",
             algorithm="all_reduce/oneshot", family="oneshot",
             error="MeshcastTimeout: all_reduce #17 on WORLD: waited 2.0 s for rank 2")
        for r in (1, 3):
            call(r, W, 17, "all_reduce", t17 + r * 30_000, None, nbytes=4096, op="sum",
                 algorithm="all_reduce/oneshot", family="oneshot")
    else:
        for r in range(p):
            call(r, W, 17, "all_reduce", t17 + r * 30_000, t17 + 600_000, nbytes=4096, op="sum",
                 algorithm="all_reduce/oneshot", family="oneshot")
    for r in range(p):
        lines = [{"type": "header", "version": 1, "rank": r, "world_size": p, "host": hosts[r],
                  "pid": 4000 + r, "start": T0 + r * 20_000, "meshcast": "0.test"},
                 {"type": "group", "group": W, "id": 0, "ranks": list(range(p)), "engine": "shm"}]
        if r in (0, 2):
            lines.append({"type": "group", "group": "EVEN", "id": 1, "ranks": [0, 2],
                          "engine": "shm"})
        lines += sorted(calls[r], key=lambda c: c["begin"])
        with open(directory / f"rank-{r:05d}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
    return directory


REPO = Path(__file__).resolve().parents[2]

# A run that hangs for real: rank 2 waits in a recv nobody sends while the others
# enter all_reduce #4; rank 0 gives up after 3 s and the launcher stops the rest
# (SIGTERM), so rank 2's recv is written with end=null.
HANG_SCRIPT = """\
import datetime, os
import numpy as np
import meshcast as dist

seconds = 3 if os.environ["RANK"] == "0" else 60
dist.init_process_group(timeout=datetime.timedelta(seconds=seconds))
x = np.ones(1024, dtype=np.float32)
for _ in range(3):
    dist.all_reduce(x)
if dist.get_rank() == 2:
    dist.recv(x, src=1, tag=99)
else:
    dist.all_reduce(x)
dist.destroy_process_group()
"""


def record_run(directory: Path, script: str | Path, *, env: dict[str, str] | None = None,
               timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``MESHCAST_TRACE=directory meshcast run -n 4 script`` (this checkout's meshcast)."""
    full = dict(os.environ, MESHCAST_TRACE=str(directory), **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src")] + ([full["PYTHONPATH"]] if full.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-m", "meshcast", "run", "-n", "4", str(script)],
                          env=full, cwd=REPO, capture_output=True, text=True, timeout=timeout)
