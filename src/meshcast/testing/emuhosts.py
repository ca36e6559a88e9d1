r"""Emulated hosts on one Linux machine, for tests and benchmarks that run jobs across "several hosts".

Used by ``tests/multihost`` (through ``tests/multihost/hosts.py``, which re-exports this
module) and by ``meshcast bench --hosts`` (:mod:`meshcast.bench.hosts`); it lives in the
package so that the bench can use it without importing from tests/.

Each host is a network namespace plus a UTS namespace of its own (so ``hostname``
differs per host, as on a real cluster), attached with a veth pair to one bridge that
lives in a namespace of its own; the machine's own network is never touched:

    host mct-hK:  netns ``mct-hK`` with eth0 = 10.232.0.(K+1)/24 and lo up; UTS namespace
                  kept at /run/meshcast-emuhosts/mct/mct-hK.uts (hostname mct-hK);
                  /etc/netns/mct-hK/hosts lists every host (``ip netns exec`` mounts it
                  over /etc/hosts); its own /dev/shm (a tmpfs at .../mct/mct-hK.shm).
    switch:       netns ``mct-sw`` with bridge br0, holding the other end of every veth.

Use::

    with EmulatedHosts(2) as hosts:                       # or the pytest fixtures
        r = run_job(hosts, "torchrun", 2, ["job.py"], env={"GLOO_SOCKET_IFNAME": "eth0"})
        assert r.ok, r.describe()
        rx, tx = traffic(hosts, "mct-h1")

A command runs on a host as ``ip netns exec mct-hK nsenter --uts=<file> -- CMD``
(:meth:`EmulatedHosts.exec_argv`; with the private /dev/shm, CMD is wrapped in
``sh -c 'mount --bind <shm dir> /dev/shm && exec "$@"'``). ``fake_ssh.py`` (beside this file) is an ssh
stand-in for ``mpiexec -launcher ssh -launcher-exec``. Needs root plus Debian's
``iproute2`` (ip, tc) and ``util-linux``/``mount`` (nsenter, unshare, mount: essential
packages, always installed). Only addresses inside these namespaces are ever used.

What we found (measured on the 2-core dev machine: Debian 12, kernel 6.18, Python 3.11,
torch 2.13 CPU, MPICH 5.0.2 from the ``mpich`` wheel, mpi4py 4.1.2)
-----------------------------------------------------------------------------------

The hosts.
- Up takes 0.06-0.1 s for 2-3 hosts, down 0.04-0.1 s.
- Deleting a netns does not stop the processes in it (the namespace lives on while they
  do), so ``down`` first SIGKILLs every process whose /proc/PID/ns/net or ns/uts is one
  of ours (that is also how jobs are cleaned up after a timeout: torchrun's and meshcast's
  workers run in sessions of their own, so killing the launcher's process group is not
  enough, and a rank can always setsid() away).
- A UTS namespace outlives its processes when its nsfs file is bind-mounted on a file
  (``unshare --uts=FILE hostname H``); FILE lives in a private bind mount of the state
  dir (as ``ip netns`` does for /run/netns). ``ip netns exec`` gives every command a
  fresh mount namespace (a slave copy of ours, /sys remounted for the netns,
  /etc/netns/H/* bind-mounted over /etc/*), in which FILE is still there for nsenter.
- NOT separate between emulated hosts: the PID namespace (so CMA/process_vm_readv
  between "hosts" works, and pids are unique machine-wide), file systems (/tmp, the
  home dir, the repo), /proc/sys/kernel/random/boot_id and /etc/machine-id. A library
  that decides "same machine" from those rather than the hostname takes shortcuts
  through memory. meshcast's host id is hostname/boot_id, so it sees 2 hosts.
- /dev/shm is made per host (``private_shm=True``, the default) because one shared
  /dev/shm is wrong for more than realism: ``meshcast run`` removes
  /dev/shm/meshcast-<run_id>-* when it finishes, and the run id is the same on every
  node (derived from MESHCAST_SECRET and the port), so with a shared /dev/shm the first
  node's launcher to finish would delete segments the other node still uses (read in
  run/launcher.py; not seen yet, as multi-host meshcast jobs do not run so far).
- Rate: ``tc qdisc replace dev eth0 root tbf rate R burst 256kb latency 50ms`` in each
  host (egress per host; verified: 10 MiB at 100mbit takes 0.96 s). netem (delay, loss)
  is not available on this kernel ("Specified qdisc kind is unknown").
- ``ip link set eth0 down`` in a host cuts it off (connects time out) and ``up`` restores it.
- No ping in the image; check reachability with a Python socket.

Style "meshcast": one launcher per host, started on that host:
    MESHCAST_SECRET=<same 64 hex digits everywhere> \
    python -m meshcast run --nnodes H --node-rank K --nproc-per-node L \
        --master-addr 10.232.0.1 --master-port P script.py
- MESHCAST_SECRET (>= 32 hex digits, identical on all nodes) is mandatory with --nnodes > 1;
  run_job makes one. Node 0's launcher hosts the store on master-addr:port; node 1 may
  start first (tested with node 0 started 8 s late). 2x2 start+finish of a trivial
  script: 1.0-1.3 s. Output lines are prefixed "[rank N]: ".
- Uneven hosts work: the launchers meet through the store before starting workers
  (meshcast/run/nodes.py) and agree on WORLD_SIZE and each node's first rank, so [3, 1]
  gives ranks 0-2 on h0 and 3 on h1, WORLD_SIZE 4 everywhere. (Before that, each
  launcher computed WORLD_SIZE = nnodes * its own --nproc-per-node.)
- A failed node's launcher announces the failure to the other nodes' workers through
  the store (meshcast/_hostwatch.py), which raise it; a node lost altogether is found by
  the heartbeats. run_job still kills the rest ``after_failure`` seconds after the
  first failure.
- As of commit a24a86e, init_process_group() at 2 hosts x 2 meets every rank through the
  store, then raises TransportError "the ranks run on 2 hosts; ... The TCP engine is not
  available yet".

Style "torchrun": one per host (``python -m torch.distributed.run`` is the same program):
    python -m torch.distributed.run --nnodes H --node-rank K --nproc-per-node L \
        --master-addr 10.232.0.1 --master-port P script.py
- With --nnodes > 1 and no --rdzv-backend this is the "static" rendezvous: --node-rank
  is required, node 0's agent hosts the TCPStore on master-addr:port, the others retry
  until it is up (node 0 started 8 s late: fine). Uneven --nproc-per-node per host works:
  [3, 1] gives ranks 0-2 on h0 and 3 on h1, WORLD_SIZE 4 everywhere.
- Gloo: set ``GLOO_SOCKET_IFNAME=eth0``. Without it Gloo resolves the hostname, which
  /etc/netns/H/hosts maps to the host's eth0 address, so it works too, but only thanks
  to that file. An all_reduce of 2M float32 (8 MiB) at 2x2 moved 12.6 MB each way
  over h1's eth0.
- Every agent prints "[c10d] The hostname of the client socket cannot be retrieved.
  err=-3": a reverse lookup of an IPv4-mapped IPv6 peer address with no DNS; harmless.
- Slow start: 2x2 trivial script 2.2-4.5 s, 2x2 Gloo all_reduce job 6-7 s (4 torch
  imports on 2 cores).

Style "mpiexec": ONE mpiexec (MPICH 5 Hydra from the ``mpich`` wheel), run ON host h0:
    mpiexec -n H*L -ppn L -hosts mct-h0:L,mct-h1:L -launcher ssh \
        -launcher-exec /run/meshcast-emuhosts/mct/ssh \
        -genv MPIR_CVAR_CH4_NETMOD ofi -genv FI_PROVIDER tcp [-genv K V ...] \
        /path/to/python script.py
  (uneven: ``-n 4 -hosts mct-h0:3,mct-h1:1`` without -ppn.) 2x2 trivial: 0.15-0.2 s.
- The wheel's MPICH is built ``--with-device=ch4:ucx,ofi`` and UCX is the default
  netmod. UCX sees one machine and moves data through shared memory: an 8 MiB
  Allreduce at 2x2 put only 24 kB on the link. With ``MPIR_CVAR_CH4_NETMOD=ofi
  FI_PROVIDER=tcp`` it put 8.4 MB each way on h1's eth0 (shared memory stays inside a
  host, as Hydra says which ranks share a host). No FI_TCP_IFACE was needed.
- mpiexec must run on a host, not in the machine's own namespace: the proxies on the
  other hosts connect back to it. It starts its own host's proxy by fork (it recognises
  its hostname, also when -hosts gives addresses) and the others with
  ``<launcher-exec> -x HOST "/venv/bin/hydra_pmi_proxy" --control-port mct-h0:PORT ...``.
  The proxy path comes quoted, so the stand-in must do what ssh does: join the words
  with spaces and run them with ``sh -c`` on the host. -launcher-exec takes one
  executable path (no arguments): up() writes /run/meshcast-emuhosts/<prefix>/ssh, a
  /bin/sh wrapper that runs fake_ssh.py with sys.executable and --state.
- -iface is not needed: the control port travels as "mct-h0:PORT" and the proxies
  resolve the name through /etc/hosts; with ``-iface eth0`` it travels as
  "10.232.0.1:PORT". Both work.
- Environment: Hydra forwards mpiexec's whole environment to every rank (-genvall is
  the default), also across ssh: fake_ssh.py starts the remote proxy in a login-like
  environment as sshd would (set MESHCAST_FAKE_SSH_KEEP_ENV=1 to keep the caller's),
  and the ranks there still saw every variable. With -genvnone the remote ranks get
  only that ssh environment, the local (forked) ones still inherit everything. run_job
  also passes its ``env`` as -genv, to be explicit. Ranks get PMI_RANK, PMI_SIZE,
  PMI_FD, MPI_LOCALRANKID, MPI_LOCALNRANKS (no RANK/WORLD_SIZE).
- Placement: ``-hosts a,b -n 4`` alone is round robin (ranks 0,2 on a; 1,3 on b);
  ``-ppn L`` or ``a:L,b:L`` gives blocks. run_job always passes counts.
- All ranks' stdout comes out of mpiexec, in chunks that can interleave within a line
  ("RESRES 1 ..."): parse records by pattern (JobResult.records), not line by line.
  mpiexec exits with the failing rank's exit code.

Robustness: ``down`` runs from ``__exit__``, at interpreter exit (atexit), from the
fixtures on test failure, pytest-timeout and Ctrl-C (SIGTERM too, while the fixtures
hold hosts), and at the next ``up`` with the same prefix after a crash (kill -9): that
``up`` removes the leftovers and kills processes still running there. ``up`` refuses
(and ``down`` leaves alone) a prefix whose hosts belong to another live process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

STATE_ROOT = Path("/run/meshcast-emuhosts")
SUBNET = "10.232.0"
_HERE = Path(__file__).resolve().parent
FAKE_SSH = _HERE / "fake_ssh.py"
STYLES = ("meshcast", "torchrun", "mpiexec")
# Styles whose launcher takes a different process count per host (all three: ``meshcast
# run``'s launchers agree on WORLD_SIZE and the ranks' offsets through the store).
UNEVEN_STYLES = {"meshcast", "torchrun", "mpiexec"}
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")
_BURST = "256kb"
_LATENCY = "50ms"


__all__ = [
    "FAKE_SSH", "MPICH_ENV", "STATE_ROOT", "STYLES", "SUBNET", "UNEVEN_STYLES", "EmulatedHosts",
    "HostRun", "HostsUnavailable", "JobResult", "clean_env", "host_exec_argv", "job_commands",
    "kill_namespace_processes", "requirements_problem", "run_job", "traffic",
]


class HostsUnavailable(RuntimeError):
    """This machine cannot make emulated hosts (not root, or a tool is missing)."""


# -- small utilities ------------------------------------------------------------


def _tool(name: str) -> str | None:
    """``name`` next to the interpreter first (a venv's mpiexec/torchrun), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def requirements_problem() -> str | None:
    """Why emulated hosts cannot be made here (None if they can)."""
    if not sys.platform.startswith("linux"):
        return f"emulated hosts need Linux network namespaces (this is {sys.platform})"
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces, mounts); run the tests as root"
    missing = [t for t in ("ip", "tc", "nsenter", "unshare", "mount", "umount") if not _tool(t)]
    if missing:
        return (f"emulated hosts need {', '.join(missing)} on PATH: "
                "apt-get install -y --no-install-recommends iproute2 util-linux mount")
    return None


def _run(argv: Sequence[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()}")
    return proc


def _proc_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: starttime


def _ns_id(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    r = str(root)
    for line in lines:
        target = line.split()[4].encode().decode("unicode_escape")
        if target == r or target.startswith(r + "/"):
            out.append(target)
    return sorted(set(out), key=lambda t: (-t.count("/"), t), reverse=False)


def kill_namespace_processes(ns_files: Iterable[str | Path], kinds: Sequence[str] = ("net", "uts"),
                             deadline: float = 10.0) -> list[int]:
    """SIGKILL every process living in one of the namespaces bound at ``ns_files``.

    Repeats until none is left (a dying launcher may have forked). Returns the pids killed.
    """
    ids = {i for i in (_ns_id(f) for f in ns_files) if i is not None}
    killed: list[int] = []
    if not ids:
        return killed
    me = os.getpid()
    end = time.monotonic() + deadline
    while True:
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            for kind in kinds:
                if _ns_id(f"/proc/{entry.name}/ns/{kind}") in ids:
                    found.append(int(entry.name))
                    break
        alive = []
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                alive.append(pid)
                if pid not in killed:
                    killed.append(pid)
        # (Our own killed children stay zombies until their Popen is waited for; a zombie
        # has no namespaces any more, so it is not found again. Never waitpid(-1) here: it
        # would steal the exit status of the caller's other subprocesses.)
        if not alive:
            return killed
        if time.monotonic() > end:
            raise RuntimeError(f"processes {alive} in emulated hosts survive SIGKILL")
        time.sleep(0.05)


# -- the hosts --------------------------------------------------------------------

_LIVE: set[EmulatedHosts] = set()


@atexit.register
def _down_all() -> None:
    for h in list(_LIVE):
        with contextlib.suppress(Exception):
            h.down()


class EmulatedHosts:
    """``n`` emulated hosts ``{prefix}-h0 ..``; a context manager (``with EmulatedHosts(2) as h``).

    Args:
        n: number of hosts (1..250).
        rate: egress rate of each host's eth0 for tbf, e.g. ``"1gbit"``; None = unlimited.
        prefix: names everything made: namespaces ``{prefix}-hK`` / ``{prefix}-sw``, state
            under /run/meshcast-emuhosts/{prefix}; lower-case letters and digits, <= 8.
        private_shm: give every host its own /dev/shm (default): a tmpfs under the state
            dir, bind-mounted over /dev/shm for each command run on the host. With False
            the hosts share the machine's /dev/shm.
    """

    def __init__(self, n: int, rate: str | None = None, prefix: str = "mct",
                 private_shm: bool = True) -> None:
        if not 1 <= n <= 250:
            raise ValueError(f"n must be 1..250, not {n}")
        if not _PREFIX_RE.match(prefix):
            raise ValueError(f"prefix must match {_PREFIX_RE.pattern} (interface names are "
                             f"limited to 15 characters), not {prefix!r}")
        self.n = n
        self.prefix = prefix
        self.rate = rate
        self.private_shm = private_shm
        self.hosts = [f"{prefix}-h{k}" for k in range(n)]
        self.switch = f"{prefix}-sw"
        self.state = STATE_ROOT / prefix
        self.ssh = self.state / "ssh"  # the ssh stand-in made for these hosts
        self._addrs = {h: f"{SUBNET}.{k + 1}" for k, h in enumerate(self.hosts)}
        self.setup_seconds = 0.0
        self._ip = self._nsenter = self._unshare = ""

    # ---- lifecycle

    def __enter__(self) -> EmulatedHosts:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> EmulatedHosts:
        """Make the hosts (first removing what a crashed run with this prefix left).

        Raises:
            HostsUnavailable: not root, or ip/tc/nsenter/unshare/mount missing.
            RuntimeError: another live process has hosts up with this prefix, or a step
                failed (then everything made so far has been removed again).
        """
        problem = requirements_problem()
        if problem:
            raise HostsUnavailable(problem)
        self._ip, self._nsenter, self._unshare = (_tool("ip"), _tool("nsenter"), _tool("unshare"))
        owner = self._live_owner()
        if owner is not None:
            raise RuntimeError(
                f"emulated hosts with prefix {self.prefix!r} are in use by live process "
                f"{owner}; use another prefix (or stop it; its state is in {self.state})")
        self.down()  # leftovers of a crashed run with this prefix
        _LIVE.add(self)
        try:
            self._make()
        except BaseException:
            with contextlib.suppress(Exception):
                self.down()
            raise
        return self

    def _make(self) -> None:
        t0 = time.monotonic()
        st = self.state
        st.mkdir(parents=True, exist_ok=True)
        # A private bind mount of its own for the UTS namespace files (as `ip netns` does
        # for /run/netns): binds under it neither propagate out nor get shadowed.
        _run(["mount", "--bind", str(st), str(st)])
        _run(["mount", "--make-private", str(st)])
        (st / "owner").write_text(f"{os.getpid()} {_proc_start_time(os.getpid())}\n")
        ip = self._ip
        sw = self.switch
        _run([ip, "netns", "add", sw])
        _run([ip, "-n", sw, "link", "add", "br0", "type", "bridge"])
        _run([ip, "-n", sw, "link", "set", "br0", "up"])
        for k, h in enumerate(self.hosts):
            p = f"{self.prefix}p{k}"
            _run([ip, "netns", "add", h])
            # Both ends are born inside their namespaces: nothing ever sits in ours.
            _run([ip, "-n", h, "link", "add", "eth0", "type", "veth", "peer", "name", p,
                  "netns", sw])
            _run([ip, "-n", h, "addr", "add", f"{self._addrs[h]}/24", "dev", "eth0"])
            _run([ip, "-n", h, "link", "set", "eth0", "up"])
            _run([ip, "-n", h, "link", "set", "lo", "up"])
            _run([ip, "-n", sw, "link", "set", p, "master", "br0"])
            _run([ip, "-n", sw, "link", "set", p, "up"])
            uts = self.uts_file(h)
            uts.touch()
            _run([self._unshare, f"--uts={uts}", "hostname", h])
            if self.private_shm:
                # a tmpfs of its own (as /dev/shm is), mounted under the private state dir
                shm = st / f"{h}.shm"
                shm.mkdir(exist_ok=True)
                _run(["mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", f"{h}-shm",
                      str(shm)])
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{self._addrs[h]} {h}" for h in self.hosts]
        for h in self.hosts:
            d = Path("/etc/netns") / h
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text("\n".join(lines) + "\n")
            (d / "hostname").write_text(h + "\n")
        (st / "hosts").write_text("".join(f"{h} {self._addrs[h]}\n" for h in self.hosts))
        (st / "config.json").write_text(json.dumps({
            "prefix": self.prefix, "hosts": self._addrs, "private_shm": self.private_shm,
            "ip": ip, "nsenter": self._nsenter}))
        self.ssh.write_text("#!/bin/sh\n" + shlex.join(
            [sys.executable, str(FAKE_SSH), "--state", str(st)]) + ' "$@"\n')
        self.ssh.chmod(0o755)
        if self.rate:
            self.set_rate(self.rate)
        self.setup_seconds = time.monotonic() - t0

    def _live_owner(self) -> int | None:
        """The pid of another live process that has hosts up with this prefix, if any."""
        try:
            pid_s, start = (self.state / "owner").read_text().split()
            pid = int(pid_s)
        except (OSError, ValueError):
            return None
        if pid != os.getpid() and _proc_start_time(pid) == start:
            return pid
        return None

    def down(self, force: bool = False) -> None:
        """Remove everything made with this prefix: kill what runs on the hosts, delete the
        namespaces, unmount, remove /etc/netns/<host> and the state dir. Safe to call at
        any time and repeatedly; it does not depend on ``up`` having finished. Leaves
        hosts that another live process has up alone unless ``force``."""
        _LIVE.discard(self)
        owner = self._live_owner()
        if owner is not None and not force:
            raise RuntimeError(f"not taking down emulated hosts {self.prefix!r}: they belong to "
                               f"live process {owner} (down(force=True) to do it anyway)")
        ip = self._ip or _tool("ip") or "ip"
        errors: list[str] = []
        names = set(self._netns_with_prefix())
        names.update(self.hosts)
        names.add(self.switch)
        ns_files = [Path("/run/netns") / n for n in names]
        ns_files += list(self.state.glob("*.uts")) if self.state.is_dir() else []
        try:
            kill_namespace_processes([f for f in ns_files if f.exists()])
        except Exception as e:  # noqa: BLE001 - go on removing the rest
            errors.append(str(e))
        for n in sorted(names):
            if (Path("/run/netns") / n).exists():
                r = _run([ip, "netns", "del", n], check=False)
                if r.returncode != 0:
                    errors.append(f"ip netns del {n}: {r.stderr.strip()}")
        # veths that a crash left in the root namespace (none are made there, but be sure)
        pat = re.compile(rf"^{re.escape(self.prefix)}[ep]\d+$")
        for link in _list_links(ip):
            if pat.match(link):
                _run([ip, "link", "del", link], check=False)
        for m in _mounts_under(self.state):
            r = _run(["umount", m], check=False)
            if r.returncode != 0:
                r = _run(["umount", "-l", m], check=False)
                if r.returncode != 0:
                    errors.append(f"umount {m}: {r.stderr.strip()}")
        hostpat = re.compile(rf"^{re.escape(self.prefix)}-h\d+$")
        netns_dir = Path("/etc/netns")
        if netns_dir.is_dir():
            for d in netns_dir.iterdir():
                if hostpat.match(d.name):
                    shutil.rmtree(d, ignore_errors=True)
            with contextlib.suppress(OSError):
                netns_dir.rmdir()  # only if empty: it may hold other tools' hosts
        if self.state.exists():
            shutil.rmtree(self.state, ignore_errors=True)
        with contextlib.suppress(OSError):
            STATE_ROOT.rmdir()
        if errors:
            raise RuntimeError("emulated hosts: incomplete teardown: " + "; ".join(errors))

    def _netns_with_prefix(self) -> list[str]:
        pat = re.compile(rf"^{re.escape(self.prefix)}-(h\d+|sw)$")
        d = Path("/run/netns")
        if not d.is_dir():
            return []
        return [e.name for e in d.iterdir() if pat.match(e.name)]

    # ---- using the hosts

    def addr(self, host: str) -> str:
        """The eth0 address of ``host`` (a name, or an address of ours)."""
        return self._addrs[self.resolve(host)]

    def resolve(self, host: str) -> str:
        """``host`` as one of our names: accepts a name or an eth0 address."""
        if host in self._addrs:
            return host
        for h, a in self._addrs.items():
            if a == host:
                return h
        raise KeyError(f"no emulated host {host!r} (hosts: {', '.join(self.hosts)})")

    def uts_file(self, host: str) -> Path:
        return self.state / f"{self.resolve(host)}.uts"

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` on ``host``: its network, hostname and /etc/hosts."""
        h = self.resolve(host)
        return host_exec_argv(self._ip or "ip", self._nsenter or "nsenter", h,
                              str(self.uts_file(h)),
                              str(self.state / f"{h}.shm") if self.private_shm else None,
                              argv)

    def popen(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **kw: object) -> subprocess.Popen:
        """Start ``argv`` on ``host`` in a session (process group) of its own."""
        kw.setdefault("start_new_session", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.exec_argv(host, argv),
                                env=dict(env) if env is not None else None, **kw)  # type: ignore[arg-type]

    def run(self, host: str, argv: Sequence[str], timeout: float = 30, check: bool = True,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` to completion, capturing text output."""
        proc = subprocess.run(self.exec_argv(host, argv), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL,
                              env=dict(env) if env is not None else None)
        if check and proc.returncode != 0:
            raise RuntimeError(f"on {host}: {shlex.join(argv)} exited {proc.returncode}: "
                               f"{(proc.stderr or proc.stdout).strip()}")
        return proc

    def set_rate(self, rate: str | None) -> None:
        """Limit every host's egress on eth0 to ``rate`` (tc syntax, "500mbit"); None: no limit."""
        tc = _tool("tc") or "tc"
        for h in self.hosts:
            if rate is None:
                _run([self._ip, "netns", "exec", h, tc, "qdisc", "del", "dev", "eth0", "root"],
                     check=False)
            else:
                _run([self._ip, "netns", "exec", h, tc, "qdisc", "replace", "dev", "eth0",
                      "root", "tbf", "rate", rate, "burst", _BURST, "latency", _LATENCY])
        self.rate = rate

    def link(self, host: str, up: bool, settle_s: float = 10.0) -> None:
        """Bring ``host``'s eth0 up or down (cable pulled / plugged back).

        Up returns once both ends of the cable (eth0 and its bridge port) say so (the
        kernel may apply a carrier change later, from its link watch), with the other
        hosts' ARP entries for ``host`` dropped: one left INCOMPLETE by a packet sent
        while the link was down is retried only on its 1 s timer, so the first connect
        after ``link up`` could wait up to a second (one with a 1 s timeout failed once
        in CI). RuntimeError after ``settle_s``."""
        name = self.resolve(host)
        _run([self._ip, "-n", name, "link", "set", "eth0", "up" if up else "down"])
        if not up:
            return
        for other in self.hosts:
            if other != name:
                _run([self._ip, "-n", other, "neigh", "flush", "to", self._addrs[name]],
                     check=False)
        ends = ((name, "eth0"), (self.switch, f"{self.prefix}p{self.hosts.index(name)}"))
        deadline = time.monotonic() + settle_s
        while not all(" state UP " in _run([self._ip, "-n", ns, "-o", "link", "show", dev]).stdout
                      for ns, dev in ends):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: eth0 not up {settle_s} s after 'link set up'")
            time.sleep(0.02)

    def traffic(self, host: str) -> tuple[int, int]:
        """``(rx_bytes, tx_bytes)`` of ``host``'s eth0 so far."""
        return traffic(self, host)

    def processes(self) -> list[int]:
        """Pids of processes running on any of the hosts (in their netns or UTS ns)."""
        ids = {i for i in (_ns_id(Path("/run/netns") / h) for h in self.hosts) if i}
        ids |= {i for i in (_ns_id(self.uts_file(h)) for h in self.hosts) if i}
        out = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and any(
                    _ns_id(f"/proc/{entry.name}/ns/{k}") in ids for k in ("net", "uts")):
                out.append(int(entry.name))
        return out

    def kill_all(self) -> list[int]:
        """SIGKILL every process running on the hosts; the hosts stay up."""
        files = [Path("/run/netns") / h for h in self.hosts] + [self.uts_file(h) for h in self.hosts]
        return kill_namespace_processes([f for f in files if f.exists()])


def host_exec_argv(ip: str, nsenter: str, host: str, uts_file: str, shm_dir: str | None,
                   argv: Sequence[str]) -> list[str]:
    """``ip netns exec HOST nsenter --uts=FILE -- argv`` (shared with fake_ssh.py)."""
    prefix = [ip, "netns", "exec", host, nsenter, f"--uts={uts_file}", "--"]
    if shm_dir is None:
        return prefix + list(argv)
    # ip netns exec runs the command in a fresh mount namespace: the bind is seen by this
    # command and its children only, and every command on the host binds the same dir.
    script = 'mount --bind "$0" /dev/shm && exec "$@"'
    return prefix + ["sh", "-c", script, shm_dir, *argv]


def _list_links(ip: str) -> list[str]:
    r = _run([ip, "-o", "link", "show"], check=False)
    names = []
    for line in r.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def traffic(hosts: EmulatedHosts, host: str) -> tuple[int, int]:
    """``(rx_bytes, tx_bytes)`` counted on ``host``'s eth0 (the emulated link)."""
    h = hosts.resolve(host)
    r = _run([hosts._ip or "ip", "netns", "exec", h, "cat",
              "/sys/class/net/eth0/statistics/rx_bytes",
              "/sys/class/net/eth0/statistics/tx_bytes"])
    rx, tx = (int(x) for x in r.stdout.split())
    return rx, tx


# -- jobs ---------------------------------------------------------------------------

# Variables through which an outer launcher (or the test runner's own job) could leak in.
_LAUNCHER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "PALS_", "SLURM_", "I_MPI_", "HYDRA_",
                      "TORCHELASTIC_", "MESHCAST_", "MPIR_CVAR_", "FI_", "UCX_")
_LAUNCHER_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID",
                  "MPI_LOCALNRANKS", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE"}
# What every "mpiexec" job gets: MPICH's ofi netmod over TCP (the wheel's default netmod,
# UCX, moves data between emulated hosts through shared memory instead of the link).
MPICH_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}

_port_lock = threading.Lock()
_next_port = [29500 + secrets.randbelow(2000)]


def _pick_port() -> int:
    """A port for a job's store: fresh namespaces hold no listeners, but a previous job's
    sockets may linger in TIME_WAIT, so every job gets a port not used before."""
    with _port_lock:
        p = _next_port[0]
        _next_port[0] = 29500 + (p - 29500 + 7) % 20000
        return p


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment less any launcher's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCHER_VARS and not k.startswith(_LAUNCHER_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass
class HostRun:
    """One launcher process of a job (the only one, on host 0, for "mpiexec")."""

    host: str
    argv: list[str]
    returncode: int | None = None  # None: killed by the harness (timeout, or another failed)
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


@dataclass
class JobResult:
    style: str
    returncode: int  # 0 if every launcher exited 0; else the first failure's code (124: timeout)
    runs: list[HostRun]
    timed_out: bool = False
    seconds: float = 0.0
    timeout: float = 0.0
    note: str = ""  # why the harness stopped the job, if it did
    leftovers: list[int] = field(default_factory=list)  # pids the harness killed afterwards

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def stdout(self) -> str:
        return "".join(r.stdout for r in self.runs)

    @property
    def stderr(self) -> str:
        return "".join(r.stderr for r in self.runs)

    def records(self, tag: str = "RESULT") -> list[dict]:
        """Every ``TAG {json}`` printed by the job, in any launcher's stdout.

        Found by pattern, not line by line: mpiexec forwards output in chunks that may run
        together on one line. The JSON objects must be flat (no nested braces).
        """
        pat = re.compile(re.escape(tag) + r" (\{[^{}]*\})")
        return [json.loads(m) for m in pat.findall(self.stdout)]

    def describe(self, tail: int = 6000) -> str:
        head = (f"{self.style} job: exit {self.returncode} after {self.seconds:.1f} s"
                + (f" -- TIMED OUT (limit {self.timeout:g} s)" if self.timed_out else "")
                + (f" -- {self.note}" if self.note else "")
                + (f" -- killed leftover pids {self.leftovers}" if self.leftovers else ""))
        parts = [head]
        for r in self.runs:
            code = "killed by the harness" if r.returncode is None else f"exit {r.returncode}"
            parts.append(f"--- on {r.host}: {code} after {r.seconds:.1f} s: {shlex.join(r.argv)}")
            for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
                if text:
                    cut = text if len(text) <= tail else "[...]" + text[-tail:]
                    parts.append(f"[{name}]\n{cut.rstrip()}")
        return "\n".join(parts)

    __str__ = describe


def _counts(hosts: EmulatedHosts, nproc_per_host: int | Sequence[int]) -> list[int]:
    if isinstance(nproc_per_host, int):
        counts = [nproc_per_host] * len(hosts.hosts)
    else:
        counts = list(nproc_per_host)
        if len(counts) != len(hosts.hosts):
            raise ValueError(f"nproc_per_host has {len(counts)} entries for "
                             f"{len(hosts.hosts)} hosts")
    if any(c < 1 for c in counts):
        raise ValueError(f"every host needs at least one process, not {counts}")
    return counts


def job_commands(hosts: EmulatedHosts, style: str, nproc_per_host: int | Sequence[int],
                 argv: Sequence[str], port: int, env: Mapping[str, str] | None = None,
                 launcher_args: Sequence[str] = ()) -> list[tuple[str, list[str]]]:
    """``[(host, argv)]``: the launcher command(s) of a job, to run on those hosts.

    ``argv`` is ``[script.py, args...]`` or ``["-m", "module", args...]``.
    ``launcher_args`` go to the launcher before the script (e.g. ``["--no-prefix"]``).
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, not {style!r}")
    counts = _counts(hosts, nproc_per_host)
    if len(set(counts)) > 1 and style not in UNEVEN_STYLES:
        raise ValueError(f"{style}: its launcher cannot start a different number of "
                         f"processes per host ({counts}); see hosts.UNEVEN_STYLES")
    py = sys.executable
    master = hosts.addr(hosts.hosts[0])
    nnodes = len(hosts.hosts)
    argv = list(argv)
    if style in ("meshcast", "torchrun"):
        base = ([py, "-m", "meshcast", "run"] if style == "meshcast"
                else [py, "-m", "torch.distributed.run"])
        return [(h, [*base, "--nnodes", str(nnodes), "--node-rank", str(k),
                     "--nproc-per-node", str(counts[k]), "--master-addr", master,
                     "--master-port", str(port), *launcher_args, *argv])
                for k, h in enumerate(hosts.hosts)]
    mpiexec = _tool("mpiexec")
    if mpiexec is None:
        raise HostsUnavailable("no mpiexec next to the interpreter or on PATH (pip install mpich)")
    genv = {**MPICH_ENV, **(env or {})}
    cmd = [mpiexec, "-n", str(sum(counts))]
    if len(set(counts)) == 1:
        cmd += ["-ppn", str(counts[0])]
    cmd += ["-hosts", ",".join(f"{h}:{c}" for h, c in zip(hosts.hosts, counts)),
            "-launcher", "ssh", "-launcher-exec", str(hosts.ssh)]
    for k, v in genv.items():
        cmd += ["-genv", k, v]
    return [(hosts.hosts[0], [*cmd, *launcher_args, py, *argv])]


def run_job(hosts: EmulatedHosts, style: str, nproc_per_host: int | Sequence[int],
            argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 90.0,
            port: int | None = None, launcher_args: Sequence[str] = (),
            after_failure: float = 15.0, cleanup: bool = True) -> JobResult:
    """Run a job on every host in launch style ``style``; wait for it, at most ``timeout`` s.

    Args:
        style: "meshcast" (one ``meshcast run`` per host), "torchrun" (one
            ``python -m torch.distributed.run`` per host, static rendezvous) or "mpiexec"
            (one MPICH ``mpiexec`` on host 0 that reaches the others through fake_ssh.py).
        nproc_per_host: processes per host, an int or one count per host ([3, 1]).
        argv: ``[script.py, args...]``, ``["-m", "module", args...]`` or
            ``["-c", code, args...]`` (written to a file first), run with ``sys.executable``.
        env: added to the launchers' environment (this process's, less launcher
            variables; PYTHONUNBUFFERED=1). "mpiexec" also passes each as ``-genv``, and
            always ``MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp``. "meshcast" gets a fresh
            ``MESHCAST_SECRET`` unless ``env`` has one.
        port: the master/store port (meshcast, torchrun); default: a fresh one.
        after_failure: once a launcher has failed, how long the others get to finish
            before the harness kills them.
        cleanup: afterwards, SIGKILL anything still running on the hosts (reported as
            ``leftovers``).

    On timeout every launcher's process group, then every process on the hosts, is
    killed; the result has ``timed_out`` set, returncode 124 and the output so far.
    """
    port = port or _pick_port()
    argv = list(argv)
    if argv[:1] == ["-c"]:
        # launchers take a script, not -c: write the code where every host can read it
        code = hosts.state / f"job-{secrets.token_hex(4)}.py"
        code.write_text(argv[1])
        argv = [str(code), *argv[2:]]
    extra = dict(env or {})
    if style == "meshcast":
        extra.setdefault("MESHCAST_SECRET", secrets.token_hex(32))
    full_env = clean_env(extra)
    cmds = job_commands(hosts, style, nproc_per_host, argv, port, env=env,
                        launcher_args=launcher_args)
    runs = [HostRun(h, a) for h, a in cmds]
    files = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in cmds]
    procs: list[subprocess.Popen] = []
    t0 = time.monotonic()
    timed_out = False
    note = ""
    first_fail: int | None = None
    try:
        for (h, a), (out, err) in zip(cmds, files):
            procs.append(hosts.popen(h, a, env=full_env, stdout=out, stderr=err))
        done = [False] * len(procs)
        fail_at: float | None = None
        while not all(done):
            now = time.monotonic()
            for i, p in enumerate(procs):
                if not done[i] and p.poll() is not None:
                    done[i] = True
                    runs[i].returncode = p.returncode
                    runs[i].seconds = now - t0
                    if p.returncode != 0 and first_fail is None:
                        first_fail, fail_at = i, now
            if all(done):
                break
            if now - t0 > timeout:
                timed_out = True
                note = f"stopped after {timeout:g} s"
                break
            if fail_at is not None and now - fail_at > after_failure:
                note = (f"the launcher on {runs[first_fail].host} failed; the rest were killed "
                        f"{after_failure:g} s later")
                break
            time.sleep(0.02)
    finally:
        for i, p in enumerate(procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                runs[i].seconds = time.monotonic() - t0
                runs[i].returncode = None
        leftovers = hosts.kill_all() if cleanup else []
        for (out, err), r in zip(files, runs):
            for f, attr in ((out, "stdout"), (err, "stderr")):
                f.seek(0)
                setattr(r, attr, f.read().decode(errors="replace"))
                f.close()
    if timed_out:
        code = 124
    elif first_fail is not None:
        code = runs[first_fail].returncode
    elif any(r.returncode is None for r in runs):
        code = 137
    else:
        code = 0
    return JobResult(style, code if code is not None else 137, runs, timed_out,
                     time.monotonic() - t0, timeout, note, leftovers)


class TermAsInterrupt:
    """While hosts are up, SIGTERM raises KeyboardInterrupt, so ``with`` tears them down
    (the default action would end the process with the namespaces still there)."""

    def __enter__(self) -> TermAsInterrupt:
        self.old: object = None
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                self.old = signal.signal(signal.SIGTERM, self._raise)
        except ValueError:  # not the main thread: leave signals alone
            pass
        return self

    @staticmethod
    def _raise(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc: object) -> None:
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
