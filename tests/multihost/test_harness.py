"""The emulated-hosts harness itself: hosts, the three launch styles, traffic, teardown.

Everything runs one job at a time (2 cores). Two hosts are shared by the module's tests
(``two_hosts``); the teardown tests make hosts of their own with another prefix.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from . import fake_ssh
from .hosts import (
    STATE_ROOT,
    STYLES,
    EmulatedHosts,
    job_commands,
    run_job,
    traffic,
)

SCRIPTS = Path(__file__).parent / "scripts"
PREFIX = os.environ.get("MESHCAST_EMUHOSTS_PREFIX", "mct")
MiB = 1 << 20


def _netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _rank(record: dict) -> int:
    return int(record["RANK"] if record.get("RANK") is not None else record["PMI_RANK"])


# -- the hosts ---------------------------------------------------------------------------


def test_hosts_have_their_own_names_addresses_and_shm(two_hosts):
    h0, h1 = two_hosts.hosts
    assert two_hosts.hosts == [f"{PREFIX}-h0", f"{PREFIX}-h1"]
    assert (two_hosts.addr(h0), two_hosts.addr(h1)) == ("10.232.0.1", "10.232.0.2")
    assert two_hosts.resolve("10.232.0.2") == h1
    for h in (h0, h1):
        assert two_hosts.run(h, ["hostname"]).stdout.strip() == h
        addrs = two_hosts.run(h, ["ip", "-o", "-4", "addr", "show", "dev", "eth0"]).stdout
        assert f"{two_hosts.addr(h)}/24" in addrs
        hosts_file = two_hosts.run(h, ["cat", "/etc/hosts"]).stdout
        assert f"10.232.0.1 {h0}" in hosts_file and f"10.232.0.2 {h1}" in hosts_file
    # /dev/shm is per host: a file made on h0 is not seen on h1 nor on the machine
    two_hosts.run(h0, ["touch", "/dev/shm/meshcast-harness-probe"])
    assert "meshcast-harness-probe" not in two_hosts.run(h1, ["ls", "/dev/shm"]).stdout
    assert not Path("/dev/shm/meshcast-harness-probe").exists()


@pytest.mark.timeout(60)
def test_hosts_talk_by_name_over_eth0_and_link_down_cuts_them_off(two_hosts):
    h0, h1 = two_hosts.hosts
    server = two_hosts.popen(h1, [sys.executable, "-c", textwrap.dedent("""
        import socket
        s = socket.create_server(("0.0.0.0", 40123))
        print("listening", flush=True)
        c, addr = s.accept()
        c.sendall(socket.gethostname().encode() + b" " + addr[0].encode())
        c.close()
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        client = [sys.executable, "-c",
                  f"import socket; c = socket.create_connection(({h1!r}, 40123), timeout=1); "
                  "print(c.recv(100).decode())"]
        # with eth0 down on h1 the connection cannot be made
        two_hosts.link(h1, up=False)
        try:
            failed = two_hosts.run(h0, client, check=False, timeout=20)
            assert failed.returncode != 0, failed
        finally:
            two_hosts.link(h1, up=True)
        got = two_hosts.run(h0, client, timeout=20).stdout.split()
        assert got == [h1, two_hosts.addr(h0)]  # served on h1, seen coming from h0's eth0
    finally:
        server.kill()
        server.wait()


_SINK = """
import socket, time
s = socket.create_server(("0.0.0.0", 40124))
print("listening", flush=True)
c, _ = s.accept()
t0, n = time.monotonic(), 0
while chunk := c.recv(1 << 20):
    n += len(chunk)
print(n, time.monotonic() - t0, flush=True)
"""


def _send_seconds(hosts: EmulatedHosts, nbytes: int) -> float:
    """Seconds h1 takes to receive ``nbytes`` sent by h0 over TCP."""
    h0, h1 = hosts.hosts
    sink = hosts.popen(h1, [sys.executable, "-c", _SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "listening"
        hosts.run(h0, [sys.executable, "-c", f"import socket; c = socket.create_connection("
                       f"({h1!r}, 40124)); c.sendall(bytes({nbytes})); c.close()"])
        got, seconds = sink.stdout.readline().split()
        assert int(got) == nbytes
        return float(seconds)
    finally:
        sink.kill()
        sink.wait()


@pytest.mark.timeout(60)
def test_rate_limit_slows_the_link_and_is_removed(two_hosts):
    h0 = two_hosts.hosts[0]
    try:
        two_hosts.set_rate("100mbit")
        assert "tbf" in two_hosts.run(h0, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
        # 4 MiB at 100 Mbit/s: >= 0.3 s (less the 256 kB burst), whatever the machine
        assert _send_seconds(two_hosts, 4 * MiB) >= 0.2
    finally:
        two_hosts.set_rate(None)
    assert "tbf" not in two_hosts.run(h0, ["tc", "qdisc", "show", "dev", "eth0"]).stdout


def test_fake_ssh_strips_ssh_options():
    assert fake_ssh.parse(["-x", "h1", "echo", "hi"]) == (None, "h1", ["echo", "hi"])
    assert fake_ssh.parse(["-o", "StrictHostKeyChecking=no", "-p", "22", "-xT", "root@h1",
                           "a"]) == (None, "h1", ["a"])
    assert fake_ssh.parse(["--state", "/s", "-oBatchMode=yes", "-p22", "h1"]) == ("/s", "h1", [])


@pytest.mark.timeout(30)
def test_fake_ssh_runs_on_the_host_by_name_or_address(two_hosts):
    h0, h1 = two_hosts.hosts
    for target in (h1, two_hosts.addr(h1)):
        r = two_hosts.run(h0, [str(two_hosts.ssh), "-x", "-o", "BatchMode=yes", target,
                               "hostname;", "echo", "${MESHCAST_PROBE:-unset}"],
                          env={**os.environ, "MESHCAST_PROBE": "leaked"})
        # like ssh: joined and run by a shell there, in a login environment (no leaks)
        assert r.stdout.split() == [h1, "unset"]
    bad = two_hosts.run(h0, [str(two_hosts.ssh), "no-such-host", "true"], check=False)
    assert bad.returncode == 255 and "no-such-host" in bad.stderr


# -- the three launch styles ---------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("style", STYLES)
def test_each_style_starts_the_ranks_on_the_right_hosts(two_hosts, style):
    if style == "torchrun":
        pytest.importorskip("torch")
    r = run_job(two_hosts, style, 2, [str(SCRIPTS / "env_report.py")],
                env={"HARNESS_PROBE": "passed"}, timeout=90)
    assert r.ok, r.describe()
    recs = sorted(r.records(), key=_rank)
    assert [_rank(x) for x in recs] == [0, 1, 2, 3], r.describe()
    h0, h1 = two_hosts.hosts
    assert [x["host"] for x in recs] == [h0, h0, h1, h1], r.describe()
    for k, x in enumerate(recs):
        assert x["HARNESS_PROBE"] == "passed", r.describe()  # env reaches every rank
        if style == "mpiexec":
            assert (x["PMI_RANK"], x["PMI_SIZE"], x["MPI_LOCALRANKID"]) == (str(k), "4", str(k % 2))
        else:
            assert (x["RANK"], x["WORLD_SIZE"], x["LOCAL_RANK"], x["LOCAL_WORLD_SIZE"]) == (
                str(k), "4", str(k % 2), "2"), r.describe()
            assert x["MASTER_ADDR"] == two_hosts.addr(h0), r.describe()
    assert not two_hosts.processes()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("style", ["torchrun", "mpiexec"])
def test_uneven_hosts_three_and_one(two_hosts, style):
    if style == "torchrun":
        pytest.importorskip("torch")
    r = run_job(two_hosts, style, [3, 1], [str(SCRIPTS / "env_report.py")], timeout=90)
    assert r.ok, r.describe()
    recs = sorted(r.records(), key=_rank)
    h0, h1 = two_hosts.hosts
    assert [(_rank(x), x["host"]) for x in recs] == [(0, h0), (1, h0), (2, h0), (3, h1)], \
        r.describe()
    size = "PMI_SIZE" if style == "mpiexec" else "WORLD_SIZE"
    assert {x[size] for x in recs} == {"4"}, r.describe()


def test_uneven_hosts_give_each_launcher_its_own_count(two_hosts):
    """meshcast run agrees world size and rank offsets between its nodes, so each node's
    launcher gets its own --nproc-per-node (tests/multihost/scripts/uneven_job.py runs it)."""
    cmds = job_commands(two_hosts, "meshcast", [3, 1], ["x.py"], port=29500)
    counts = [argv[argv.index("--nproc-per-node") + 1] for _, argv in cmds]
    assert counts == ["3", "1"], cmds


@pytest.mark.timeout(120)
def test_mpi_allreduce_crosses_the_emulated_link(two_hosts):
    """8 MiB Allreduce at 2 hosts x 2 ranks: correct, and at least 8 MiB went each way over
    h1's eth0 (MPICH's ofi/tcp netmod does not cut through shared memory between hosts)."""
    pytest.importorskip("mpi4py")
    h1 = two_hosts.hosts[1]
    rx0, tx0 = traffic(two_hosts, h1)
    r = run_job(two_hosts, "mpiexec", 2, [str(SCRIPTS / "mpi_allreduce.py"), str(8 * MiB)],
                timeout=90)
    rx1, tx1 = traffic(two_hosts, h1)
    assert r.ok, r.describe()
    recs = sorted(r.records(), key=lambda x: x["rank"])
    assert [(x["rank"], x["size"], x["small"], x["big_ok"]) for x in recs] == [
        (k, 4, 10, True) for k in range(4)], r.describe()
    assert rx1 - rx0 >= 8 * MiB and tx1 - tx0 >= 8 * MiB, (rx1 - rx0, tx1 - tx0)


@pytest.mark.timeout(120)
def test_gloo_all_reduce_under_torchrun(two_hosts):
    pytest.importorskip("torch")
    h1 = two_hosts.hosts[1]
    rx0, tx0 = traffic(two_hosts, h1)
    r = run_job(two_hosts, "torchrun", 2, [str(SCRIPTS / "gloo_allreduce.py"), str(MiB)],
                env={"GLOO_SOCKET_IFNAME": "eth0"}, timeout=90)
    rx1, tx1 = traffic(two_hosts, h1)
    assert r.ok, r.describe()
    recs = sorted(r.records(), key=lambda x: x["rank"])
    assert [(x["rank"], x["size"], x["ok"]) for x in recs] == [(k, 4, True) for k in range(4)]
    assert [x["host"] for x in recs] == [two_hosts.hosts[0]] * 2 + [h1] * 2
    assert rx1 - rx0 >= 4 * MiB and tx1 - tx0 >= 4 * MiB, (rx1 - rx0, tx1 - tx0)


@pytest.mark.timeout(60)
def test_timeout_kills_every_process_and_keeps_the_output(two_hosts):
    code = ("import os, sys, time; print('started', flush=True); "
            "os.fork() == 0 and os.setsid(); time.sleep(300)")  # a grandchild in its own session
    t0 = time.monotonic()
    r = run_job(two_hosts, "mpiexec", 1, ["-c", code], timeout=3)
    assert time.monotonic() - t0 < 20
    assert r.timed_out and r.returncode == 124, r.describe()
    assert r.stdout.count("started") == 2, r.describe()
    assert "TIMED OUT" in r.describe()
    assert not two_hosts.processes()


@pytest.mark.timeout(60)
def test_a_failed_launcher_is_reported(two_hosts):
    code = "import os, sys; sys.exit(3 if os.environ['PMI_RANK'] == '1' else 0)"
    r = run_job(two_hosts, "mpiexec", 1, ["-c", code], timeout=30)
    assert r.returncode == 3 and not r.ok, r.describe()


# -- teardown ------------------------------------------------------------------------------


def _assert_nothing_left(prefix: str) -> None:
    assert not [n for n in _netns() if n.startswith(prefix + "-")], _netns()
    assert not (STATE_ROOT / prefix).exists()
    assert not list(Path("/etc/netns").glob(f"{prefix}-h*"))  # (no such dir: empty list)
    mounts = Path("/proc/self/mountinfo").read_text()
    assert f"{STATE_ROOT}/{prefix}" not in mounts


@pytest.mark.timeout(60)
def test_down_removes_everything_and_kills_what_runs_there():
    prefix = PREFIX + "t"
    with EmulatedHosts(2, prefix=prefix, rate="1gbit") as hosts:
        sleeper = hosts.popen(hosts.hosts[1], ["sleep", "300"])
        daemon = hosts.popen(hosts.hosts[0], ["sh", "-c", "setsid sleep 301 & wait"])
        time.sleep(0.3)
        assert len(hosts.processes()) >= 2
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
    daemon.wait(timeout=10)
    _assert_nothing_left(prefix)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 301" not in ps


@pytest.mark.timeout(60)
def test_up_refuses_a_live_owner_and_cleans_up_after_a_crashed_one():
    prefix = PREFIX + "c"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            import hosts
            h = hosts.EmulatedHosts(2, prefix={prefix!r}).up()
            h.popen(h.hosts[1], ["sleep", "302"])
            print("up", flush=True)
            sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        with pytest.raises(RuntimeError, match="in use"):
            EmulatedHosts(2, prefix=prefix).up()
        with pytest.raises(RuntimeError, match="in use"), EmulatedHosts(2, prefix=prefix):
            pass
        with pytest.raises(RuntimeError, match="belong to live process"):
            EmulatedHosts(2, prefix=prefix).down()
        assert any(n.startswith(prefix + "-") for n in _netns())  # the holder's hosts live on
        holder.kill()  # crashes with its hosts up and a process still running on them
        holder.wait()
        assert any(n.startswith(prefix + "-") for n in _netns())
        with EmulatedHosts(2, prefix=prefix) as hosts:
            assert not hosts.processes()  # the crashed run's sleep was killed
            assert hosts.run(hosts.hosts[0], ["hostname"]).stdout.strip() == hosts.hosts[0]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    _assert_nothing_left(prefix)


@pytest.mark.timeout(60)
def test_a_failure_half_way_through_up_leaves_nothing(monkeypatch):
    from meshcast.testing import emuhosts as hosts_module  # where _run lives

    prefix = PREFIX + "f"
    real_run = hosts_module._run

    def failing_run(argv, *a, **kw):
        if "hostname" in argv and f"{prefix}-h1" in argv:  # h1's UTS namespace
            raise RuntimeError("injected failure")
        return real_run(argv, *a, **kw)

    monkeypatch.setattr(hosts_module, "_run", failing_run)
    with pytest.raises(RuntimeError, match="injected"), EmulatedHosts(3, prefix=prefix):
        pass
    _assert_nothing_left(prefix)
