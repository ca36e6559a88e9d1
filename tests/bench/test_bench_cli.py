"""``meshcast bench``: nccl-tests' definitions, the data check, and short smoke runs of the CLI.

No assertion here looks at a time or a bandwidth: the machine is shared and
has 2 cores. The smoke runs use tiny sizes, 2 ranks and few iterations, and
check what must hold anywhere: every result is right (#wrong == 0), the JSON
lines parse and carry nccl-tests' fields, the tables and files are written.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meshcast.bench import cli, collectives, page, plot, report
from meshcast.bench.collectives import COLLECTIVES, count_wrong, fill_inputs
from meshcast.bench.peers import unavailable
from meshcast.bench.progress import Progress
from meshcast.bench.sweep import SweepSpec

# -- nccl-tests' definitions ------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4, 8])
def test_bus_factors_are_nccl_tests(n: int) -> None:
    want = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
            "reduce_scatter": (n - 1) / n, "broadcast": 1.0, "reduce": 1.0,
            "gather": (n - 1) / n, "scatter": (n - 1) / n, "all_to_all": (n - 1) / n,
            "sendrecv": 1.0}
    assert {name: c.factor(n) for name, c in COLLECTIVES.items()} == pytest.approx(want)


def test_algbw_uses_nccl_tests_s() -> None:
    # 1 MiB float32 on 4 ranks, 1 ms per call.
    n, size, t = 4, 1 << 20, 1e-3
    count = size // 4
    for name, s_bytes in [("all_reduce", size), ("broadcast", size),
                          ("all_gather", (count // 16) * 4 * 4 * 4),
                          ("reduce_scatter", (count // 16) * 4 * 4 * 4),
                          ("gather", count // 4 * 4 * 4), ("all_to_all", count // 4 * 4 * 4)]:
        c = COLLECTIVES[name]
        counts = c.counts(count, 4, n)
        algbw, busbw = c.bandwidth(counts.param, 4, t, n)
        assert algbw == pytest.approx(s_bytes / 1e9 / t), name
        assert busbw == pytest.approx(algbw * c.factor(n)), name


def test_counts_follow_nccl_tests() -> None:
    # all_gather: base = (count / (4 n)) * 4; in place, send sits at recv + base * rank
    ag = COLLECTIVES["all_gather"].counts(1000, 4, 3)
    assert (ag.send, ag.recv, ag.param, ag.send_inplace_offset) == (332, 996, 332, 332)
    rs = COLLECTIVES["reduce_scatter"].counts(1000, 4, 3)
    assert (rs.send, rs.recv, rs.param, rs.recv_inplace_offset) == (996, 332, 332, 332)
    # scatter: (count / n) & -(16 / typesize)
    sc = COLLECTIVES["scatter"].counts(1000, 4, 3)
    assert (sc.recv, sc.send) == (332, 996)
    assert COLLECTIVES["scatter"].counts(1000, 1, 3).recv == 320
    a2a = COLLECTIVES["all_to_all"].counts(1000, 4, 3)
    assert (a2a.send, a2a.param) == (999, 333)


def test_size_loop_matches_nccl_tests() -> None:
    assert cli.sizes(8, 64 << 20, 2, None)[:3] == (8, 16, 32)
    assert cli.sizes(8, 64 << 20, 2, None)[-1] == 64 << 20
    assert cli.sizes(8, 16 << 20, 4, None) == tuple(8 * 4 ** i for i in range(11))
    assert cli.sizes(100, 400, None, 100) == (100, 200, 300, 400)


# -- data and check ---------------------------------------------------------------------


@pytest.mark.parametrize("redop", ["sum", "prod", "min", "max", "avg"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int64"])
def test_expected_all_reduce_matches_a_direct_reduction(redop: str, dtype: str) -> None:
    n, count = 5, 1000
    c = COLLECTIVES["all_reduce"].counts(count, np.dtype(dtype).itemsize, n)
    inputs = []
    for r in range(n):
        buf = np.zeros(count, dtype)
        fill_inputs("all_reduce", r, n, 0, c, redop, buf, np.zeros(count, dtype), False)
        inputs.append(buf)
    stack = np.stack(inputs).astype(np.float64)
    direct = {"sum": stack.sum(0), "prod": stack.prod(0), "min": stack.min(0),
              "max": stack.max(0), "avg": stack.sum(0) / n}[redop]
    if np.dtype(dtype).kind == "i":
        with np.errstate(over="ignore"):
            direct = direct.astype(np.int64).astype(dtype)  # wraps like the libraries
        if redop == "avg":
            direct = (np.stack(inputs).sum(0, dtype=dtype).astype(np.int64) // n).astype(dtype)
    result = np.asarray(direct).astype(dtype)
    assert count_wrong("all_reduce", 0, n, 0, c, redop, result) == 0
    result[3] += 1
    assert count_wrong("all_reduce", 0, n, 0, c, redop, result) == 1


def test_check_finds_a_misplaced_block() -> None:
    n, count = 4, 64
    c = COLLECTIVES["all_gather"].counts(count, 4, n)
    result = np.concatenate([collectives.values(r, np.arange(c.param), "sum") for r in range(n)])
    result = result.astype(np.float32)
    assert count_wrong("all_gather", 1, n, 0, c, "sum", result) == 0
    swapped = np.concatenate([result[c.param:2 * c.param], result[:c.param], result[2 * c.param:]])
    assert count_wrong("all_gather", 1, n, 0, c, "sum", swapped) == 2 * c.param


# -- flags ------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--op", "allreduce"], "unknown allreduce"),
    (["-r", "2"], "root must be a rank"),
    (["-b", "1M", "-e", "1K"], "smaller than -b"),
    (["-d", "bfloat16"], "no bfloat16"),
    (["--algo", "nosuch"], "none of all_reduce has it"),
    (["--compare", "nccl"], "unknown peer"),
    (["--paired"], "--paired pairs meshcast with the --compare libraries"),
    (["--paired", "--compare", "mpi", "--symmetric"], "not with --symmetric"),
])
def test_bad_flags_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
                          ) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_algo_applies_where_it_exists() -> None:
    parser = cli.argparse.ArgumentParser()
    cli.add_arguments(parser)
    spec, notes = cli.spec_from_args(parser.parse_args(["--op", "all_reduce,gather",
                                                        "--algo", "ring"]))
    assert spec.algorithms == {"all_reduce": "ring"}
    assert any("gather has no such algorithm" in note for note in notes)


def test_progress_is_silent_off_a_terminal() -> None:
    quiet, loud = io.StringIO(), io.StringIO()
    rec = {"op": "all_reduce", "requested_size": 1024}
    for stream, enabled in ((quiet, None), (loud, True)):
        bar = Progress(1, stream=stream, enabled=enabled)  # the last step always draws
        bar.begin("[meshcast] starting")
        bar.advance(rec, "meshcast")
        bar.close()
    assert quiet.getvalue() == ""
    assert "\r" in loud.getvalue() and "all_reduce 1 KiB" in loud.getvalue()


# -- end to end -------------------------------------------------------------------------


def _peer() -> str:
    """One peer to compare with: MPI (starts fastest), else Gloo, else none."""
    for name in ("mpi", "gloo"):
        if not unavailable(name):
            return name
    return ""


def _bench(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    out = tmp / "bench.jsonl"
    proc = subprocess.run([sys.executable, "-m", "meshcast", "bench", "-n", "2", "-w", "1",
                           "--iters", "2", "--json", str(out), *args],
                          capture_output=True, text=True, timeout=90,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    return proc, lines


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, list[dict], str]:
    """`meshcast bench --op all` over two small sizes, with one peer if one is installed."""
    tmp = tmp_path_factory.mktemp("bench")
    peer = _peer()
    args = ["--op", "all", "-b", "8", "-e", "4K", "-f", "64"]
    proc, lines = _bench(tmp, *args, *(["--compare", peer] if peer else []))
    return proc.stdout, lines[0], lines[1:], peer


def test_smoke_every_op_is_right(smoke: tuple[str, dict, list[dict], str]) -> None:
    stdout, meta, results, peer = smoke
    assert meta["kind"] == "meta" and meta["nranks"] == 2
    libraries = {"meshcast", peer} - {""}
    assert {r["library"] for r in results} == libraries
    for lib in libraries:
        ran = [r for r in results if r["library"] == lib and r["time_us"] is not None]
        assert {r["op"] for r in ran} == set(COLLECTIVES), lib
        assert all(r["wrong"] == 0 for r in ran), [r for r in ran if r["wrong"]]
    for r in results:
        assert {"size", "count", "type", "redop", "root", "time_us", "algbw", "busbw", "wrong",
                "algorithm", "placement", "mem_pct"} <= set(r)
    ours = [r for r in results if r["library"] == "meshcast" and r["time_us"] is not None]
    assert all(r["algorithm"] for r in ours)
    assert any(r["algorithm"].startswith("all_reduce/") for r in ours)


def test_smoke_prints_nccl_tests_table(smoke: tuple[str, dict, list[dict], str]) -> None:
    stdout, _, _, peer = smoke
    assert "busbw = algbw x 2(n-1)/n = 1.000 for n=2" in stdout
    assert "#wrong" in stdout and "algorithm" in stdout and "%mem" in stdout
    assert "memory copy bandwidth" in stdout
    assert "meshcast: out of bounds values: 0 OK" in stdout
    if peer:
        assert f"{peer} time" in stdout and "ratio" in stdout and "summary:" in stdout


def test_plot_and_results_page(smoke: tuple[str, dict, list[dict], str], tmp_path: Path) -> None:
    _, meta, results, peer = smoke
    libraries = ["meshcast"] + ([peer] if peer else [])
    spec = SweepSpec.from_json(json.dumps(meta["spec"]))
    html_path = plot.write(str(tmp_path / "b.html"), results, spec.ops, libraries, 2)
    text = Path(html_path).read_text()
    assert text.count("<svg") == 2 * len(spec.ops)
    assert "<script src" not in text and "http://" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    (tmp_path / "example.py").write_text('"""An example script."""\n')
    written = page.write_report(str(tmp_path), meta, results, spec, libraries)
    readme = (tmp_path / "README.md").read_text()
    assert written[0].endswith("README.md")
    assert meta["command"] in readme and "## Machine" in readme
    assert "results/all_reduce_busbw.svg" in readme and "An example script." in readme
    _, again = report.read_jsonl(str(tmp_path / "results" / "bench.jsonl"))
    assert len(again) == len(results)


def test_symmetric_buffers_run_in_place_and_are_checked(tmp_path: Path) -> None:
    proc, lines = _bench(tmp_path, "--op", "all_reduce,broadcast", "-b", "256K", "-e", "2M",
                         "-f", "8", "--symmetric", "--compare", "meshcast")
    results = [r for r in lines[1:] if r["time_us"] is not None]
    assert {r["library"] for r in results} == {"meshcast-symmetric", "meshcast"}
    assert all(r["wrong"] == 0 for r in results), [r for r in results if r["wrong"]]
    sym = {(r["op"], r["size"]): r["algorithm"] for r in results
           if r["library"] == "meshcast-symmetric"}
    assert sym[("all_reduce", 2 << 20)] == "all_reduce/symmetric"  # one-shot below
    assert sym[("broadcast", 2 << 20)] == "broadcast/symmetric"
    assert "ratio = meshcast-symmetric busbw / peer busbw" in proc.stdout
    assert "--symmetric" in lines[0]["command"]


@pytest.mark.skipif(bool(unavailable("gloo")), reason="torch is not installed")
def test_gloo_peer_runs() -> None:
    if _peer() == "gloo":
        pytest.skip("the smoke run already compared with Gloo")
    from meshcast.bench.peers import run_library

    spec = SweepSpec(ops=("all_reduce", "all_gather"), sizes=(1024,), warmup=1, iters=2)
    result = run_library("gloo", spec, 2, timeout=60)
    assert not result.error, result.error
    ran = [r for r in result.records if r["time_us"] is not None]
    assert {r["op"] for r in ran} == {"all_reduce", "all_gather"}
    assert all(r["wrong"] == 0 for r in ran)
    assert result.meta["versions"]["torch"]


def test_a_failing_world_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from meshcast.bench.peers import run_library

    monkeypatch.setenv("MESHCAST_SLOT_BYTES", "not-a-size")
    result = run_library("meshcast", SweepSpec(ops=("all_reduce",), sizes=(8,), warmup=0,
                                               iters=1), 2, timeout=60)
    assert not result.records
    assert "rank" in result.error and "MESHCAST_SLOT_BYTES" in result.error.splitlines()[0]


def test_rounds_keep_each_calls_best_time_and_worst_check() -> None:
    from meshcast.bench.peers import LibraryRun

    def rec(t: float, wrong: int) -> dict:
        return {"op": "all_reduce", "requested_size": 8, "placement": "in-place",
                "time_us": t, "wrong": wrong}

    merged = cli._best_of(LibraryRun("meshcast", [rec(5.0, 0)]),
                          LibraryRun("meshcast", [rec(3.0, 0)]))
    assert [r["time_us"] for r in merged.records] == [3.0]
    merged = cli._best_of(merged, LibraryRun("meshcast", [rec(9.0, 2)]))
    assert [(r["time_us"], r["wrong"]) for r in merged.records] == [(3.0, 2)]


def test_warm_up_runs_every_window_the_timed_loop_uses() -> None:
    # A timed call must never be the first on its buffers: 5 warm-up calls over 20
    # rotated windows left 15 first uses in the timed loop (meshcast's 8 B rows read
    # 1.5x slow there). One rank, a fake library: record what runs before the barrier.
    from meshcast.bench.sweep import Prepared, SweepSpec, run_sweep

    class Fake:
        library, rank, size = "fake", 0, 1

        def __init__(self) -> None:
            self.log: list = []

        def barrier(self) -> None:
            self.log.append("barrier")

        def allreduce_scalar(self, value: float, how: str) -> float:
            return value

        def prepare(self, call):
            address = call.send.__array_interface__["data"][0]
            return Prepared(lambda: self.log.append(address), call.recv)

        def algorithm(self) -> str:
            return ""

    comm = Fake()
    spec = SweepSpec(ops=("all_reduce",), sizes=(8, 64), warmup=2, iters=6, check=False,
                     placements=("out-of-place",))
    assert len(list(run_sweep(comm, spec))) == 2
    # each size: its warm-up, a barrier, its 6 timed calls
    b0, b1 = [i for i, e in enumerate(comm.log) if e == "barrier"]
    for warm, timed in ((comm.log[:b0], comm.log[b0 + 1:b0 + 7]),
                        (comm.log[b0 + 7:b1], comm.log[b1 + 1:])):
        assert len(timed) == 6 and set(timed) <= set(warm), (warm, timed)


# -- paired runs ------------------------------------------------------------------------


class _Scripted:
    """A one-rank fake library whose timed blocks take the times it is given, in order."""

    rank, size = 0, 1

    def __init__(self, library: str, log: list, times: list[float], has: bool = True) -> None:
        self.library, self.log, self.times, self.has = library, log, list(times), has

    def barrier(self) -> None:
        self.log.append(("barrier", self.library))

    def allreduce_scalar(self, value: float, how: str) -> float:
        if value == 0.0:  # (the sweep's warm-up of this call, before anything is timed)
            self.log.append(("scalar", self.library))
            return 0.0
        return self.times.pop(0)  # the block's time, combined over ranks

    def prepare(self, call):
        from meshcast.bench.sweep import Prepared, Unsupported

        if not self.has:
            raise Unsupported(f"{self.library} has no {call.op}")
        return Prepared(lambda: self.log.append(("call", self.library)), call.recv)

    def algorithm(self) -> str:
        return f"{self.library}/algo"


def test_paired_sweep_alternates_blocks_and_keeps_each_librarys_best() -> None:
    from meshcast.bench.sweep import run_paired_sweep

    log: list = []
    a = _Scripted("a", log, [5.0, 3.0, 4.0])
    b = _Scripted("b", log, [2.0, 6.0, 1.0])
    c = _Scripted("c", log, [], has=False)
    spec = SweepSpec(ops=("all_reduce",), sizes=(64,), warmup=2, iters=3, check=False,
                     placements=("in-place",))
    recs = list(run_paired_sweep([a, c, b], spec, blocks=3))
    assert [(r["library"], r["time_us"]) for r in recs] == [("a", 3e6), ("c", None), ("b", 1e6)]
    assert recs[1]["note"] == "c has no all_reduce" and recs[0]["algorithm"] == "a/algo"
    # every library makes its scalar all-reduce once first (its one-time work is timed
    # nowhere), both warm up before the first block; then blocks a b, b a, a b (3 calls)
    assert log[:3] == [("scalar", "a"), ("scalar", "c"), ("scalar", "b")]
    first = log.index(("barrier", "a"))
    assert {e[1] for e in log[3:first]} == {"a", "b"}
    assert all(e[0] == "call" for e in log[3:first])
    blocks = [e[1] for e in log[first:] if e[0] == "barrier"]
    assert blocks == ["a", "b", "b", "a", "a", "b"]
    assert log[-3:] == [("call", "b")] * 3


@pytest.mark.skipif(not _peer(), reason="neither mpi4py with mpiexec nor torch is installed")
def test_paired_run_measures_both_libraries_in_one_job(tmp_path: Path) -> None:
    peer = _peer()
    proc, lines = _bench(tmp_path, "--op", "all_reduce,all_gather,gather,sendrecv", "-b", "8",
                         "-e", "256K", "-f", "64", "--compare", peer, "--paired", "--rounds", "2")
    meta, results = lines[0], lines[1:]
    assert meta["paired"] and meta["rounds"] == 2 and "--paired" in meta["command"]
    assert not meta["libraries"][peer]["error"], meta["libraries"][peer]
    for lib in ("meshcast", peer):
        ran = [r for r in results if r["library"] == lib and r["time_us"] is not None]
        assert {r["op"] for r in ran} == {"all_reduce", "all_gather", "gather", "sendrecv"}, lib
        assert {r["requested_size"] for r in ran if r["op"] == "gather"} == {8, 512, 32768}, lib
        assert all(r["wrong"] == 0 for r in ran), [r for r in ran if r["wrong"]]
    assert "paired: one job" in proc.stdout and f"{peer} time" in proc.stdout
    spec = SweepSpec.from_json(json.dumps(meta["spec"]))
    page.write_report(str(tmp_path / "page"), meta, results, spec, ["meshcast", peer])
    text = (tmp_path / "page" / "README.md").read_text()
    assert "their timed blocks alternated (2 per library)" in text
    assert "every library in the same processes" in text and "started fresh" not in text


@pytest.mark.skipif(bool(unavailable("gloo")), reason="torch is not installed")
def test_paired_run_with_gloo_meets_through_files() -> None:
    # Without MPI the paired job is N processes: meshcast's and Gloo's file rendezvous.
    from meshcast.bench.peers import run_paired

    spec = SweepSpec(ops=("all_reduce", "broadcast"), sizes=(1024,), warmup=1, iters=2)
    runs = run_paired(["meshcast", "gloo"], spec, 2, blocks=2, timeout=60)
    assert [r.library for r in runs] == ["meshcast", "gloo"]
    for run in runs:
        assert not run.error, run.error
        ran = [r for r in run.records if r["time_us"] is not None]
        assert {r["op"] for r in ran} == {"all_reduce", "broadcast"}
        assert all(r["wrong"] == 0 for r in ran)
    assert runs[1].meta["versions"]["torch"] and runs[0].meta["versions"]["meshcast"]
