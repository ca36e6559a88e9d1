"""End-to-end tests of ``meshcast run``: env contract, pass-through, failures, signals, output.

Worker scripts live in ``tests/run/scripts``; they only read the environment,
write JSON files into ``tmp_path``, print, sleep, raise or kill themselves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meshcast.cli import main as meshcast_main
from meshcast.errors import InvalidUsage
from meshcast.run.cli import build_parser, config_from_args
from meshcast.run.config import LaunchConfig

SCRIPTS = Path(__file__).parent / "scripts"


# -- helpers ----------------------------------------------------------------------


def launcher_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "MESHCAST_SECRET", "MESHCAST_RUN_ID", "PYTHONUNBUFFERED"):
        env.pop(key, None)
    env.update(extra)
    return env


def meshcast_run(*argv: str | Path, timeout: float = 40, env: dict | None = None,
                 cwd: Path | None = None, stdin: int | None = subprocess.DEVNULL,
                 entry: tuple[str, ...] = ("-m", "meshcast.run")) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *entry, *map(str, argv)] if entry else list(map(str, argv))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=stdin,
                          env=env or launcher_env(), cwd=cwd)


def _default_interrupts() -> None:
    # A test suite started in the background (`cmd &` without job control) inherits
    # SIGINT/SIGQUIT ignored, and the launcher rightly leaves ignored signals alone
    # (nohup). These tests mean a launcher started from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def start_launcher(*argv: str | Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "meshcast.run", *map(str, argv)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env=env or launcher_env(), preexec_fn=_default_interrupts,
    )


def read_json(path: Path) -> object:
    return json.loads(path.read_text())


def wait_for(paths: list[Path], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"timed out waiting for {paths}"
        time.sleep(0.02)


def process_state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (``"Z"`` for a zombie), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def assert_gone(pid: int, allow_zombie: bool = False, timeout: float = 5) -> None:
    # allow_zombie: orphans are reaped by pid 1, which in a container may never do it.
    deadline = time.monotonic() + timeout
    while True:
        state = process_state(pid)
        if state is None or (allow_zombie and state == "Z"):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} outlived the launcher (state {state})")
        time.sleep(0.02)


def worker_pids(out: Path, world: int) -> list[int]:
    return [read_json(out / f"pid-{r}.json") for r in range(world)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the environment contract ---------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_run_sets_worker_env_and_passes_args_through(tmp_path: Path, nproc: int) -> None:
    script_args = ["--nproc-per-node", "7", "-m", "--", "-x", "last"]
    res = meshcast_run("-n", nproc, SCRIPTS / "envdump.py", tmp_path, *script_args,
                       stdin=subprocess.PIPE)
    assert res.returncode == 0, res.stderr
    dumps = [read_json(tmp_path / f"env-{r}.json") for r in range(nproc)]
    first = dumps[0]["env"]
    assert re.fullmatch(r"[0-9a-f]{64}", first["MESHCAST_SECRET"])
    assert re.fullmatch(r"[0-9a-f]{32}", first["MESHCAST_RUN_ID"])
    assert first["MASTER_ADDR"] == "127.0.0.1" and int(first["MASTER_PORT"]) > 0
    error_files = set()
    for rank, dump in enumerate(dumps):
        env = dump["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == env["ROLE_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == str(nproc)
        assert env["GROUP_RANK"] == env["NODE_RANK"] == "0"
        assert env["GROUP_WORLD_SIZE"] == "1" and env["ROLE_NAME"] == "default"
        assert env["MESHCAST_STORE_HOSTED"] == "1" and env["PYTHONUNBUFFERED"] == "1"
        # One job: every rank sees the same secret, run id and store.
        for key in ("MESHCAST_SECRET", "MESHCAST_RUN_ID", "MASTER_ADDR", "MASTER_PORT"):
            assert env[key] == first[key]
        assert env["OMP_NUM_THREADS"] == ("1" if nproc > 1 else None)
        error_files.add(env["MESHCAST_ERROR_FILE"])
        # The script sees what `python envdump.py ...` would have shown it.
        assert dump["argv"][1:] == [str(tmp_path), *script_args]
        assert dump["argv"][0] == str(SCRIPTS / "envdump.py") == dump["file"]
        assert dump["name"] == "__main__" and dump["path0"] == str(SCRIPTS)
        # stdin goes to rank 0 only.
        assert (dump["stdin"] == "/dev/null") == (rank != 0)
    assert len(error_files) == nproc
    # The per-job directory holding the error files is gone after the job.
    assert not any(Path(f).parent.exists() for f in error_files)


@pytest.mark.timeout(60)
def test_run_module_mode(tmp_path: Path) -> None:
    res = meshcast_run("-n", 2, "-m", "envdump", tmp_path, "a", "--b", cwd=SCRIPTS)
    assert res.returncode == 0, res.stderr
    for rank in range(2):
        dump = read_json(tmp_path / f"env-{rank}.json")
        assert dump["argv"] == [str(SCRIPTS / "envdump.py"), str(tmp_path), "a", "--b"]
        assert dump["name"] == "__main__" and dump["path0"] == str(SCRIPTS)


@pytest.mark.timeout(60)
def test_run_no_python_execs_program() -> None:
    res = meshcast_run("-n", 2, "--no-python", "sh", "-c", 'echo "rank=$RANK of $WORLD_SIZE"')
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["[rank 0]: rank=0 of 2", "[rank 1]: rank=1 of 2"]


@pytest.mark.timeout(60)
def test_run_two_nodes_on_loopback_share_one_store(tmp_path: Path) -> None:
    port = free_port()
    env = launcher_env(MESHCAST_SECRET=os.urandom(32).hex())
    common = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port), "-n", "2"]
    nodes = [start_launcher(*common, "--node-rank", str(k), SCRIPTS / "store_client.py", tmp_path,
                            env=env) for k in (0, 1)]
    for node in nodes:
        _, err = node.communicate(timeout=45)
        assert node.returncode == 0, err
    dumps = [read_json(tmp_path / f"store-{r}.json") for r in range(4)]
    for rank, dump in enumerate(dumps):
        env_seen = dump["env"]
        assert env_seen["RANK"] == str(rank) and env_seen["LOCAL_RANK"] == str(rank % 2)
        assert env_seen["GROUP_RANK"] == env_seen["NODE_RANK"] == str(rank // 2)
        assert env_seen["WORLD_SIZE"] == "4" and env_seen["LOCAL_WORLD_SIZE"] == "2"
        assert env_seen["GROUP_WORLD_SIZE"] == "2" and env_seen["MASTER_PORT"] == str(port)
        assert env_seen["MESHCAST_SECRET"] == env["MESHCAST_SECRET"]
        # Both launchers derive the same run id without talking to each other.
        assert env_seen["MESHCAST_RUN_ID"] == dumps[0]["env"]["MESHCAST_RUN_ID"]
        if "values" in dump:
            assert dump["values"] == [f"from {r}" for r in range(4)]


def test_run_several_nodes_need_the_secret(tmp_path: Path) -> None:
    res = meshcast_run("--nnodes", 2, "--node-rank", 1, SCRIPTS / "envdump.py", tmp_path)
    assert res.returncode == 2
    assert "MESHCAST_SECRET" in res.stderr and "token_hex" in res.stderr
    assert not list(tmp_path.iterdir())  # no worker was started


# -- the store ---------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_run_hosts_store_reachable_by_workers(tmp_path: Path) -> None:
    res = meshcast_run("-n", 2, SCRIPTS / "store_client.py", tmp_path)
    assert res.returncode == 0, res.stderr
    for rank in range(2):
        dump = read_json(tmp_path / f"store-{rank}.json")
        assert dump["connected"]
        if "values" in dump:  # the TCPStore client exists: a real set/get round trip
            assert dump["values"] == ["from 0", "from 1"]


def test_run_store_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = meshcast_run("--master-port", port, SCRIPTS / "envdump.py", tmp_path)
    assert res.returncode == 1
    assert f"cannot host the store at 127.0.0.1:{port}" in res.stderr
    assert "--master-port" in res.stderr


# -- failures ----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_run_failing_rank_stops_job_and_reports_root_cause(tmp_path: Path) -> None:
    started = time.monotonic()
    res = meshcast_run("-n", 3, "--grace-period", 20, SCRIPTS / "failer.py", tmp_path, 1, "raise")
    elapsed = time.monotonic() - started
    assert res.returncode == 1
    pids = worker_pids(tmp_path, 3)
    err = res.stderr
    summary = err[err.index("meshcast run: "):]
    root = summary[summary.index("Root Cause"):summary.index("Other failures")]
    assert "rank      : 1 (local_rank: 1)" in root
    assert f"exitcode  : 1 (pid: {pids[1]})" in root
    assert "ValueError: rank 1 exploded on purpose" in root
    assert "in explode" in root and "failer.py" in root  # the traceback, from the error file
    assert "runpy" not in root and "worker.py" not in root  # without the bootstrap's frames
    # The ranks the launcher stopped are listed as such, not as failures of their own.
    other = summary[summary.index("Other failures"):]
    assert "<none>" in other
    assert "Stopped by the launcher after rank 1 failed" in other
    for rank in (0, 2):
        assert f"rank {rank} (local_rank: {rank}, pid: {pids[rank]}): Signal 15 (SIGTERM)" in other
    # The traceback was also printed live, with its rank prefix.
    assert "[rank 1]: ValueError: rank 1 exploded on purpose" in err
    # SIGTERM was enough: no waiting out the grace period. Nothing survives.
    assert elapsed < 15
    for pid in pids:
        assert_gone(pid)
    assert_gone(read_json(tmp_path / "grandchild.json"), allow_zombie=True)


@pytest.mark.timeout(60)
def test_run_rank_killed_by_signal_is_reported(tmp_path: Path) -> None:
    res = meshcast_run("-n", 2, SCRIPTS / "failer.py", tmp_path, 0, "sigkill")
    assert res.returncode == 128 + 9
    pids = worker_pids(tmp_path, 2)
    root = res.stderr[res.stderr.index("Root Cause"):res.stderr.index("Other failures")]
    assert "rank      : 0 (local_rank: 0)" in root
    assert f"Signal 9 (SIGKILL) (pid: {pids[0]})" in root
    assert f"<none: Signal 9 (SIGKILL) received by PID {pids[0]}>" in root
    for pid in pids:
        assert_gone(pid)


@pytest.mark.timeout(60)
def test_run_exit_code_of_first_failure_is_propagated(tmp_path: Path) -> None:
    res = meshcast_run("-n", 2, SCRIPTS / "failer.py", tmp_path, 1, "exit3")
    assert res.returncode == 3
    assert "exitcode  : 3" in res.stderr
    assert "without an uncaught Python exception" in res.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_run_signal_to_launcher_stops_every_worker(tmp_path: Path, sig: signal.Signals) -> None:
    # Rank 1 ignores SIGTERM, so it is only gone after the grace period's SIGKILL.
    launcher = start_launcher("-n", 2, "--grace-period", 1, SCRIPTS / "failer.py", tmp_path,
                              -1, "none", "--ignore-sigterm", 1)
    wait_for([tmp_path / "pid-0.json", tmp_path / "pid-1.json", tmp_path / "grandchild.json"])
    started = time.monotonic()
    os.kill(launcher.pid, sig)
    _, err = launcher.communicate(timeout=30)
    elapsed = time.monotonic() - started
    assert launcher.returncode == 128 + sig
    assert f"received {sig.name}, stopping 2 worker(s)" in err
    assert 0.9 < elapsed < 10
    for pid in worker_pids(tmp_path, 2):
        assert_gone(pid)
    assert_gone(read_json(tmp_path / "grandchild.json"), allow_zombie=True)


@pytest.mark.timeout(60)
def test_run_workers_die_with_a_killed_launcher(tmp_path: Path) -> None:
    launcher = start_launcher("-n", 2, SCRIPTS / "failer.py", tmp_path, -1, "none")
    wait_for([tmp_path / "pid-0.json", tmp_path / "pid-1.json"])
    wait_for([tmp_path / "error_dir.json"])
    launcher.kill()
    launcher.communicate(timeout=30)
    for pid in worker_pids(tmp_path, 2):  # PR_SET_PDEATHSIG: nobody outlives the launcher
        assert_gone(pid, allow_zombie=True)
    # A SIGKILLed launcher cannot remove its per-job directory; don't litter /tmp.
    shutil.rmtree(read_json(tmp_path / "error_dir.json"), ignore_errors=True)


# -- output and cleanup ------------------------------------------------------------


@pytest.mark.timeout(60)
def test_run_prefixes_each_rank_output_in_order() -> None:
    res = meshcast_run("-n", 2, SCRIPTS / "printer.py", 40)
    assert res.returncode == 0, res.stderr
    for stream, word in ((res.stdout, "out"), (res.stderr, "err")):
        lines = stream.splitlines()
        for rank in range(2):
            mine = [line for line in lines if line.startswith(f"[rank {rank}]: ")]
            expected = [f"[rank {rank}]: {word} {rank} line {i}" for i in range(40)]
            if word == "out":
                expected.append(f"[rank {rank}]: no newline at the end from {rank}")
            assert mine == expected
        assert all(line.startswith("[rank ") for line in lines)


@pytest.mark.timeout(60)
def test_run_no_prefix_leaves_output_alone() -> None:
    res = meshcast_run("--no-prefix", SCRIPTS / "printer.py", 2)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "out 0 line 0\nout 0 line 1\nno newline at the end from 0"


@pytest.mark.timeout(60)
def test_run_removes_leftover_segments_of_the_job(tmp_path: Path) -> None:
    res = meshcast_run("-n", 2, SCRIPTS / "shm_leftover.py", tmp_path)
    assert res.returncode == 0, res.stderr
    for rank in range(2):
        assert not Path(read_json(tmp_path / f"shm-{rank}.json")).exists()
    assert "removed 2 leftover shared-memory segment(s)" in res.stderr


def test_run_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    res = meshcast_run("-n", 2, tmp_path / "nope.py")
    assert res.returncode == 2
    assert "can't open file" in res.stderr and "nope.py" in res.stderr


# -- entry points ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_python_m_meshcast_run(tmp_path: Path) -> None:
    res = meshcast_run("run", "-n", 2, SCRIPTS / "envdump.py", tmp_path, entry=("-m", "meshcast"))
    assert res.returncode == 0, res.stderr
    assert {p.name for p in tmp_path.iterdir()} == {"env-0.json", "env-1.json"}


@pytest.mark.timeout(60)
def test_meshcast_console_script(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "meshcast"
    if not exe.exists():
        found = shutil.which("meshcast")
        if found is None:
            pytest.skip("the meshcast console script is not installed")
        exe = Path(found)
    res = meshcast_run(exe, "run", "-n", 2, SCRIPTS / "envdump.py", tmp_path, entry=())
    assert res.returncode == 0, res.stderr
    assert {p.name for p in tmp_path.iterdir()} == {"env-0.json", "env-1.json"}


def test_meshcast_without_subcommand_prints_help(capsys: pytest.CaptureFixture) -> None:
    assert meshcast_main([]) == 0
    assert "run" in capsys.readouterr().out


def test_run_help_env_lists_knobs(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        meshcast_main(["run", "--help-env"])
    assert exc.value.code == 0
    assert "MESHCAST_TIMEOUT" in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_worker_bootstrap_is_not_imported_before_it_runs() -> None:
    # If importing the meshcast package ever imports meshcast.run.worker, running it
    # with -m warns in every worker ("found in sys.modules ... prior to execution").
    res = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "meshcast.run.worker",
         SCRIPTS / "printer.py", "1"],
        capture_output=True, text=True, timeout=30, env=launcher_env(RANK="0"),
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == "err 0 line 0\n"


# -- flags -> LaunchConfig (no processes) ------------------------------------------------


def parse(*argv: str) -> LaunchConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def test_flags_accept_torchrun_spellings() -> None:
    for argv in (("--nproc-per-node", "3"), ("--nproc_per_node", "3"), ("-n", "3"), ("-n3",)):
        assert parse(*argv, "x.py").nproc_per_node == 3
    cfg = parse("-n", "2", "--nnodes", "2:2", "--node_rank", "1", "--master_addr", "10.0.0.1",
                "--master_port", "1234", "--grace_period", "0.5", "x.py")
    assert (cfg.nnodes, cfg.node_rank, cfg.master_addr, cfg.master_port) == (2, 1, "10.0.0.1", 1234)
    assert cfg.grace_period == 0.5 and cfg.world_size == 4 and cfg.global_rank(1) == 3
    assert cfg.store_endpoint() == ("10.0.0.1", 1234)
    assert parse("-n", "auto", "x.py").nproc_per_node == len(os.sched_getaffinity(0))


def test_flags_after_the_script_belong_to_it() -> None:
    cfg = parse("-n", "2", "x.py", "-n", "5", "--standalone", "--", "-m")
    assert cfg.entrypoint == "x.py" and cfg.nproc_per_node == 2 and not cfg.standalone
    assert cfg.args == ("-n", "5", "--standalone", "--", "-m")
    cfg = parse("-m", "pkg.mod", "--prefix")
    assert cfg.module and cfg.entrypoint == "pkg.mod" and cfg.args == ("--prefix",)
    cfg = parse("--no-prefix", "--", "-weird-name.py", "a")
    assert not cfg.prefix_output and cfg.entrypoint == "-weird-name.py" and cfg.args == ("a",)


def test_store_endpoint_defaults() -> None:
    assert parse("x.py").store_endpoint() == ("127.0.0.1", 0)
    assert parse("--nnodes", "2", "x.py").store_endpoint() == ("127.0.0.1", 29500)
    assert parse("--standalone", "--master-port", "7", "x.py").store_endpoint() == ("127.0.0.1", 0)


@pytest.mark.parametrize("argv", [
    ("--nnodes", "1:4", "x.py"),  # elastic ranges
    ("--nproc", "4", "x.py"),  # no abbreviations
    ("-n", "many", "x.py"),
])
def test_bad_flags_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2


@pytest.mark.parametrize("argv, needle", [
    ((), "missing the script"),
    (("-n", "0", "x.py"), "--nproc-per-node must be >= 1"),
    (("--nnodes", "2", "--node-rank", "2", "x.py"), "--node-rank must be in [0, 2)"),
    (("-m", "--no-python", "x"), "exclude each other"),
    (("--standalone", "--nnodes", "2", "x.py"), "--standalone means one node"),
    (("--nnodes", "2", "--master-port", "0", "x.py"), "needs a single node"),
    (("--grace-period", "-1", "x.py"), "--grace-period must be >= 0"),
])
def test_contradicting_flags_raise_invalid_usage(argv: tuple[str, ...], needle: str) -> None:
    with pytest.raises(InvalidUsage, match=re.escape(needle)):
        parse(*argv)
