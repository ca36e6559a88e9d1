"""A real browser for the guide's tests: Debian's chromium driven by Playwright.

No browser is ever downloaded (no ``playwright install``): Playwright drives
the system's chromium through ``executable_path``. Without one the browser
tests skip, except when ``MESHCAST_REQUIRE_BROWSER=1`` (CI sets it), where a
missing browser or Playwright fails them, so a green run cannot hide a
missing install step.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               "--hide-scrollbars"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: needs a real browser (chromium + playwright)")


def _unavailable(why: str) -> None:
    if os.environ.get("MESHCAST_REQUIRE_BROWSER") == "1":
        pytest.fail(f"MESHCAST_REQUIRE_BROWSER=1 but {why}", pytrace=False)
    pytest.skip(why)


def chromium_path() -> str | None:
    """The system chromium (``MESHCAST_CHROMIUM`` overrides), or None."""
    override = os.environ.get("MESHCAST_CHROMIUM")
    if override:
        return override if os.path.exists(override) else None
    for c in CANDIDATES:
        path = c if os.path.isabs(c) else shutil.which(c)
        if path and os.path.exists(path):
            return path
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install playwright; no browser download)")
    exe = chromium_path()
    if exe is None:
        _unavailable("no chromium found (apt-get install --no-install-recommends chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def guide_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from meshcast.viz import build_guide

    path = tmp_path_factory.mktemp("viz") / "guide.html"
    path.write_text(build_guide(), encoding="utf-8")
    return path


# ---------------------------------------------------------------- recorded runs, by hand
# Until a recorder writes them, the replay's tests read trace directories written
# here in the format of meshcast.trace.records (its docstring is the spec).

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


@pytest.fixture
def hang_trace(tmp_path: Path) -> Path:
    """A 4-rank trace where rank 2 never enters all_reduce #17 on WORLD (and EVEN #1 mismatches)."""
    return write_trace(tmp_path / "hang")
