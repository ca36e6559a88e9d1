"""``meshcast bench --hosts`` / ``--launched``: flags, prerequisites, the best-peer column.

Fast and without hosts: the real run on emulated hosts is
``tests/multihost/test_bench_across_hosts.py``.
"""

from __future__ import annotations

import pytest

from meshcast.bench import cli, hosts, report
from meshcast.bench.hosts import HostShape, ShapeError, parse_hosts


@pytest.mark.parametrize("text, per_host", [
    ("2x2", (2, 2)), ("3x1", (1, 1, 1)), ("2X4", (4, 4)), (" 2x2 ", (2, 2)),
    ("3+1", (3, 1)), ("1+2+1", (1, 2, 1)),
])
def test_hosts_shapes(text: str, per_host: tuple[int, ...]) -> None:
    shape = parse_hosts(text)
    assert shape.per_host == per_host
    assert shape.nranks == sum(per_host) and shape.nhosts == len(per_host)


def test_shape_describes_itself() -> None:
    assert HostShape((2, 2), "2x2").describe() == "2 hosts x 2 ranks"
    assert HostShape((3, 1), "3+1").describe() == "2 hosts (3 + 1 ranks)"


@pytest.mark.parametrize("text, message", [
    ("2", "expected HxL"), ("2x", "expected HxL"), ("x2", "expected HxL"),
    ("2x2x2", "expected HxL"), ("two", "expected HxL"), ("", "expected HxL"),
    ("-2x2", "expected HxL"), ("1x4", "that is one host"), ("4", "expected HxL"),
    ("2x0", "at least one rank"), ("3+0", "at least one rank"),
    ("251x1", "at most 250"),
])
def test_bad_hosts_shapes(text: str, message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        parse_hosts(text)


@pytest.mark.parametrize("argv, message", [
    (["--hosts", "2by2"], "expected HxL"),
    (["--hosts", "1x2"], "that is one host"),
    (["--hosts", "2x2", "-n", "3"], "-n 3 disagrees with --hosts 2x2"),
    (["--rate", "1gbit"], "--rate only with --hosts"),
    (["--prefix", "abc"], "--prefix only with --hosts"),
    (["--internode", "gloo"], "--internode only with --hosts"),
    (["--hosts", "2x2", "--prefix", "Bad-Name"], "--prefix 'Bad-Name'"),
    (["--hosts", "2x2", "--symmetric"], "--symmetric is measured on one host only"),
    (["--hosts", "2x2", "--launched"], "use one of them"),
    (["--hosts", "2x2", "--compare", "nccl"], "does not run across hosts"),
    (["--hosts", "2x2", "-r", "4"], "root must be a rank in [0, 4)"),
    (["--launched", "--compare", "mpi"], "run once per library"),
])
def test_bad_across_hosts_flags_exit_2(argv: list[str], message: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_hosts_sets_the_ranks_and_the_command_line() -> None:
    p = cli.argparse.ArgumentParser()
    cli.add_arguments(p)
    ns = p.parse_args(["--hosts", "3+1", "--rate", "2gbit", "-r", "3"])
    cli._resolve_ranks(ns)
    spec, _ = cli.spec_from_args(ns)
    assert ns.nproc == 4 and ns.shape.per_host == (3, 1)
    assert cli.command_line(ns, spec).startswith("meshcast bench --hosts 3+1 --rate 2gbit --op")


def test_libraries_put_meshcast_first(monkeypatch: pytest.MonkeyPatch) -> None:
    assert hosts.libraries("gloo,mpi", "mpi") == ["meshcast+mpi", "gloo", "mpi"]
    assert hosts.libraries("mpi,meshcast+mpi", "gloo") == ["meshcast+gloo", "mpi",
                                                           "meshcast+mpi"]
    assert hosts.libraries("meshcast,gloo", "gloo") == ["meshcast+gloo", "gloo"]
    monkeypatch.setattr(hosts, "_mpi_problem", lambda: "no mpi4py")
    monkeypatch.setattr(hosts, "_torch_problem", lambda: "")
    assert hosts.libraries("", "auto") == ["meshcast+gloo"]


def test_a_missing_prerequisite_is_said_before_any_host_is_made(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from meshcast.testing import emuhosts

    monkeypatch.setattr(emuhosts, "requirements_problem",
                        lambda: "emulated hosts need root (network namespaces, mounts); "
                                "run the tests as root")
    monkeypatch.setattr(hosts, "_torch_problem", lambda: "torch is not importable (pip install torch)")

    def no_hosts(*a: object, **k: object) -> None:
        raise AssertionError("hosts were made despite a missing prerequisite")

    monkeypatch.setattr(emuhosts.EmulatedHosts, "up", no_hosts)
    assert cli.main(["--hosts", "2x2", "--internode", "mpi", "--compare", "gloo"]) == 2
    err = capsys.readouterr().err
    assert "need root" in err and "run meshcast bench --hosts as root" in err
    assert "gloo: torch is not importable (pip install torch)" in err


def test_records_are_found_in_interleaved_output() -> None:
    a = '@meshcast-bench {"kind": "result", "op": "all_reduce", "n": 1}'
    b = '@meshcast-bench {"kind": "result", "op": "all_reduce", "n": 2}'
    out = f"warning\nRES{a}[rank 3] noise{b}\n@meshcast-bench {{\"cut"
    assert [r["n"] for r in hosts.records_in(out)] == [1, 2]


def _rec(lib: str, size: int, t: float | None) -> dict:
    return {"library": lib, "op": "all_reduce", "requested_size": size, "size": size,
            "count": size // 4, "placement": "in-place", "time_us": t,
            "busbw": None if t is None else size / t / 1e3, "wrong": 0, "algorithm": "",
            "note": ""}


def test_best_peer_is_the_faster_of_mpi_and_gloo_per_size() -> None:
    records = [_rec("meshcast+mpi", 8, 10.0), _rec("meshcast+mpi", 64, 10.0),
               _rec("mpi", 8, 5.0), _rec("mpi", 64, 40.0),
               _rec("gloo", 8, 50.0), _rec("gloo", 64, 20.0)]
    recs, libs = report.with_best(records, ["meshcast+mpi", "mpi", "gloo"])
    assert libs == ["meshcast+mpi", "mpi", "gloo", "best"]
    best = {r["requested_size"]: (r["time_us"], r["note"]) for r in recs if r["library"] == "best"}
    assert best == {8: (5.0, "best = mpi"), 64: (20.0, "best = gloo")}
    text = "\n".join(report.comparison("all_reduce", recs, libs, None))
    assert "best = the faster of mpi and gloo" in text and "best time" in text
    assert report.with_best(records, ["meshcast+mpi", "mpi"])[1] == ["meshcast+mpi", "mpi"]
