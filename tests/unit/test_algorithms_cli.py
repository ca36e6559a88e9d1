"""``meshcast algorithms [COLLECTIVE]``: the registry and the fast paths, as printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import meshcast
from meshcast import cli
from meshcast.algorithms import _cli, _registry, eager
from meshcast.algorithms import hierarchical as hier

SRC = Path(meshcast.__file__).parent


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    return subprocess.run([sys.executable, "-m", "meshcast", "algorithms", *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_one_collective_lists_its_schedules_with_family_requires_and_docstring():
    done = _run("all_reduce")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("all_reduce: 5 schedules")
    for entry in _registry.entries("all_reduce"):
        row = re.search(rf"^  {entry.name} +{entry.family} +requires: (.*)$", out, re.M)
        assert row and row.group(1) == (entry.requires or "-"), entry.name
    assert "Ring all-reduce: reduce-scatter then all-gather around the ring." in out
    assert "Steps: 2(P-1) rounds." in out and "Bytes sent per rank: 2 S (P-1)/P." in out
    for other in set(_registry.COLLECTIVES) - {"all_reduce"}:
        assert not re.search(rf"^{other}:", out, re.M), other


def test_fast_paths_are_marked_and_listed_per_place():
    out = _run("all_reduce").stdout
    described = out[out.index(_cli.DESCRIBED_TITLE):out.index(
        _cli.ACROSS_TITLE.format(coll="all_reduce"))]
    for name, family in (("oneshot", "oneshot"), ("cma", "cma"), ("symmetric", "symmetric")):
        entry = _registry.get("all_reduce", name)
        row = re.search(rf"^  {name} +{family} +requires: (.*)$", described, re.M)
        assert row and row.group(1) == entry.conditions, name
    assert "Steps: 1 round: Put my data into my one-shot region" in described
    assert _cli.FAST_PATHS_TITLE not in out  # every path of all_reduce is a schedule now


@pytest.mark.parametrize("coll", sorted(eager.ALGORITHMS))
def test_the_families_across_hosts_are_listed_with_requirements_steps_and_bytes(coll):
    out = _cli.render(coll)
    title = _cli.ACROSS_TITLE if hier.families(coll) else _cli.AGREEMENT_TITLE
    block = out[out.index(title.format(coll=coll)):]
    rows = re.findall(r"^  (\w+) +hosts +requires: (.*)$", block, re.M)
    families = [*hier.families(coll), *eager.names(coll)]
    assert rows == [(f, hier.requires(coll, f) or "-") for f in hier.families(coll)] + [
        (eager.names(coll)[0], eager.requires(coll) or "-")]
    for family, next_family in zip(families, [*families[1:], None]):
        text = block[block.index(f"  {family} "):
                     block.index(f"  {next_family} ") if next_family else None]
        lines = [line.strip() for line in text.splitlines()[1:] if line.strip()]
        assert len(lines) == 3, (family, lines)  # the docstring's first line, Steps, Bytes
        assert lines[1].startswith("Steps: ") and lines[2].startswith("Bytes across hosts: ")


def test_without_a_collective_every_registered_algorithm_is_listed(capsys):
    assert cli.main(["algorithms"]) == 0
    out = capsys.readouterr().out
    for coll in _registry.COLLECTIVES:
        assert re.search(rf"^{coll}: {len(_registry.names(coll))} schedules", out, re.M), coll
    assert _cli.FAST_PATHS_TITLE not in out
    assert out.count(_cli.DESCRIBED_TITLE) == len(_registry.COLLECTIVES)
    for entry in _registry.entries(described=True):
        assert re.search(rf"^  {entry.name} +{entry.family} ", out, re.M), entry.qualname


def test_an_unknown_collective_is_an_error_listing_the_collectives():
    done = _run("allreduce")
    assert done.returncode == 2 and done.stdout == ""
    assert "unknown collective 'allreduce'" in done.stderr
    assert ", ".join(_registry.COLLECTIVES) in done.stderr


def _labels_in_source(*modules: str) -> set[tuple[str, str]]:
    """Every literal "coll/name" assigned to last_algorithm (a grep, independent of _cli)."""
    found = set()
    for module in modules:
        text = (SRC / (module.removeprefix("meshcast.").replace(".", "/") + ".py")).read_text()
        found |= set(re.findall(r'last_algorithm = "(\w+)/(\w+)"', text))
    return found


@pytest.mark.parametrize("where, modules", [("one host", _cli.ONE_HOST_MODULES),
                                            ("across hosts", _cli.ACROSS_HOSTS_MODULES)])
def test_fast_paths_are_what_the_code_reports_and_never_a_schedule(where, modules):
    table = _cli.fast_paths()[where]
    families = ((lambda coll: (*hier.families(coll), *eager.names(coll)))
                if where == "across hosts" else (lambda coll: ()))
    for coll, name in _labels_in_source(*modules):
        assert (name in _registry.names(coll, described=True) or name in families(coll)
                or name in table.get(coll, [])), (coll, name)
    for coll, names in table.items():
        assert not set(names) & {*_registry.names(coll, described=True), *families(coll)}, coll


def test_every_one_host_fast_path_is_a_described_schedule():
    """What group.py, lanes.py and paths/ can report on one host (their every
    ``last_algorithm = ...``, generic sites included) is a registered generator."""
    assert _cli.fast_paths()["one host"] == {}
    reported = {pair for m in _cli.ONE_HOST_MODULES for pair in _cli._reported(m)}
    assert ("reduce", "cma") in reported and ("all_to_all", "oneshot") in reported
    for coll, name in reported:
        entry = _registry.get(coll, name)
        assert not entry.executed and entry.family == name, entry.qualname


def test_every_path_across_hosts_is_a_family():
    """What spanning.py can report (its every ``last_algorithm = ...``, the generic
    f"{coll}/{family}" sites included) is a family of hierarchical.py or eager.py."""
    assert _cli.fast_paths()["across hosts"] == {}
    reported = set(_cli._reported("meshcast.spanning"))
    assert ("all_to_all", "eager") in reported and ("barrier", "agreement") in reported
    assert ("all_reduce", "rails") in reported  # (from f"all_reduce/{family}")
    for coll, name in reported:
        assert name in (*hier.families(coll), *eager.names(coll)), (coll, name)


def test_summary_takes_the_list_after_a_bare_steps_heading():
    arena = _registry.get("all_to_all", "arena")
    steps = next(line for line in _cli.summary(arena) if line.startswith("Steps"))
    assert steps.startswith("Steps: first round: Put the header")


def test_size_says_what_runs_and_where():
    from meshcast.algorithms._explain import explain

    text = explain("all_reduce", 1 << 20, 2)
    assert "runs      all_reduce/oneshot" in text and "transport/arena.py" in text
    assert "all_reduce/arena" in explain("all_reduce", 3 << 19, 2)  # between the fast paths
    assert "all_reduce/cma" in explain("all_reduce", 2 << 20, 2)
    # every single-copy call runs its cma schedule as a program
    for coll in ("broadcast", "all_gather", "all_reduce", "reduce", "reduce_scatter",
                 "all_to_all", "gather", "scatter"):
        said = explain(coll, 8 << 20, 2)
        assert f"{coll}/cma" in said and f"{coll}.py::cma, run as a program" in said, said
        assert "tests/unit/test_copy_programs.py" in said, said
    assert "all_reduce/cma" not in explain("all_reduce", 2 << 20, 2, cma=False)
    assert "all_reduce/eager" in explain("all_reduce", 8, 4, hosts=2)
    assert "algorithms/eager.py::all_reduce" in explain("all_reduce", 8, 4, hosts=2)
    assert "tests/unit/test_eager.py" in explain("all_reduce", 8, 4, hosts=2)
    assert "all_gather/rails" in explain("all_gather", 1 << 20, 4, hosts=2)
    assert "all_gather/leader" in explain("all_gather", 1 << 20, 3, hosts=2)  # 2 + 1: no rails
    # the table's steps are by the gathered array (all_gather) and the input
    # (reduce_scatter), as the group decides, not by --size (a rank's piece)
    step = next(at for at, fam in hier.DEFAULTS["mpi"]["all_gather"] if fam == "rails")
    assert "all_gather/rails" in explain("all_gather", step // 4, 4, hosts=2)
    assert "all_gather/flat" in explain("all_gather", step // 4 - 4, 4, hosts=2)
    cap = hier.eager_cap("reduce_scatter", hier.agreement_route("mpi", 4),
                         hier.Layout(((0, 1), (2, 3)), 0))
    assert cap == hier.EAGER_BYTES["flat"] // 2
    assert "reduce_scatter/eager" in explain("reduce_scatter", cap // 4, 4, hosts=2)
    assert "reduce_scatter/fused" in explain("reduce_scatter", cap // 4 + 4, 4, hosts=2)
    # one rank a host: its own table
    alone = explain("all_reduce", 512 << 10, 2, hosts=2)
    assert "all_reduce/flat over MPI" in alone and "ONE_RANK_A_HOST" in alone
    assert "ONE_RANK_A_HOST" not in explain("all_reduce", 512 << 10, 4, hosts=2)
    with pytest.raises(ValueError, match="hosts"):
        explain("all_reduce", 8, 2, hosts=3)


def test_size_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "meshcast", "algorithms", "broadcast",
                           "--size", "64K", "-n", "3"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "broadcast of 64 KiB per rank on 3 ranks, one host" in proc.stdout
    assert "broadcast/oneshot" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "meshcast", "algorithms", "--size", "8"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "needs a COLLECTIVE" in bad.stderr
