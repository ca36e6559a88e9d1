"""``meshcast bench --hosts``: the same sweep with the ranks spread over several hosts.

Two ways to get ranks onto hosts:

* **Emulated hosts** (``--hosts 2x2``, this machine, needs root): the bench makes
  ``H`` hosts (network namespaces with their own hostname, /dev/shm and a
  ``--rate``-limited eth0 on one bridge; :mod:`meshcast.testing.emuhosts`),
  runs every library's sweep on them, each started the way its users start it
  across hosts, and takes the hosts down again, also on failure or Ctrl-C:

  ======================  ==========================================================
  ``mpi``                 MPICH's own collectives (mpi4py), one ``mpiexec`` on host 0
                          (ofi/tcp between hosts: ``MPIR_CVAR_CH4_NETMOD=ofi
                          FI_PROVIDER=tcp``; the wheel's default UCX netmod would use
                          shared memory between the namespaces of one machine)
  ``gloo``                torch.distributed's Gloo under ``torchrun --nnodes`` per
                          host (``GLOO_SOCKET_IFNAME=eth0``)
  ``meshcast+mpi``        meshcast under that same ``mpiexec``
                          (``MESHCAST_INTERNODE=mpi``)
  ``meshcast+gloo``       meshcast under ``meshcast run --nnodes`` per host
                          (``MESHCAST_INTERNODE=gloo``)
  ======================  ==========================================================

* **Real machines** (``--launched``): the user's launcher (``mpiexec``, ``srun``,
  ``torchrun``, ``meshcast run``) starts ``meshcast bench --launched`` as every
  rank; see :func:`meshcast.bench.cli.run_launched`.

A missing prerequisite (not root, no ``ip``, no mpi4py / ``mpiexec`` for an MPI
library, no torch for a Gloo one) is reported by :func:`problems` before any
host is made.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .peers import LibraryRun
from .sweep import RECORD_PREFIX, SweepSpec

#: library -> (launch style of :func:`meshcast.testing.emuhosts.run_job`, worker module, env).
LIBRARIES: dict[str, tuple[str, str, dict[str, str]]] = {
    "meshcast+mpi": ("mpiexec", "meshcast.bench.meshcast_worker", {"MESHCAST_INTERNODE": "mpi"}),
    "meshcast+gloo": ("meshcast", "meshcast.bench.meshcast_worker",
                      {"MESHCAST_INTERNODE": "gloo", "GLOO_SOCKET_IFNAME": "eth0",
                       "MESHCAST_IFNAME": "eth0"}),
    "mpi": ("mpiexec", "meshcast.bench.mpi_worker", {}),
    "gloo": ("torchrun", "meshcast.bench.gloo_worker", {"GLOO_SOCKET_IFNAME": "eth0"}),
}

#: meshcast's tuning knobs that reach the ranks on the emulated hosts when set here. The
#: harness scrubs every other MESHCAST_* (and MPI's, libfabric's, UCX's) variable: the
#: secret, run id, host id, shm dir, engine and interface belong to each launch, and a
#: stray FI_PROVIDER or MESHCAST_HOST_ID would make the emulated hosts share memory.
PASSED_KNOBS = ("MESHCAST_ALGO", "MESHCAST_TIMEOUT", "MESHCAST_SLOT_BYTES", "MESHCAST_RING_BYTES",
                "MESHCAST_CMA_BYTES", "MESHCAST_COMPILED", "MESHCAST_SPIN_US",
                "MESHCAST_LIVENESS_S", "MESHCAST_TRACE")

#: How each library is started, for the header and the results page.
LAUNCH_TEXT = {
    "mpiexec": "one `mpiexec` (MPICH, ofi/tcp between hosts)",
    "torchrun": "`torchrun --nnodes` per host",
    "meshcast": "`meshcast run --nnodes` per host",
}

#: The peers whose better time is the "best peer" column.
PEERS = ("mpi", "gloo")

#: Default prefix of the emulated hosts' names (``mcb-h0``, ``mcb-h1``, ``mcb-sw``).
DEFAULT_PREFIX = "mcb"

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")
_UNEVEN = re.compile(r"^\s*\d+(\s*\+\s*\d+)+\s*$")
_MAX_HOSTS = 250  # one /24 for the emulated hosts' addresses


class ShapeError(ValueError):
    """``--hosts`` has a form the bench does not understand; the message shows the right ones."""


@dataclass(frozen=True)
class HostShape:
    """How many ranks run on each host.

    Attributes:
        per_host: ranks on host 0, host 1, ... (all equal for ``HxL``).
        text: the form it was given in (``"2x2"``, ``"3+1"``).
    """

    per_host: tuple[int, ...]
    text: str

    @property
    def nhosts(self) -> int:
        """Number of hosts."""
        return len(self.per_host)

    @property
    def nranks(self) -> int:
        """Number of ranks over all hosts."""
        return sum(self.per_host)

    def describe(self) -> str:
        """``2 hosts x 2 ranks`` or ``2 hosts (3 + 1 ranks)``."""
        if len(set(self.per_host)) == 1:
            return f"{self.nhosts} hosts x {self.per_host[0]} ranks"
        return f"{self.nhosts} hosts ({' + '.join(map(str, self.per_host))} ranks)"


def parse_hosts(text: str) -> HostShape:
    """Parse ``--hosts``: ``HxL`` (H hosts, L ranks each) or ``L0+L1+...`` (ranks per host).

    Args:
        text: e.g. ``"2x2"``, ``"3x1"``, ``"3+1"``.

    Returns:
        The shape.

    Raises:
        ShapeError: any other form, fewer than 2 hosts, a host without ranks or more
            than 250 hosts.
    """
    forms = "HxL (e.g. 2x2: 2 hosts, 2 ranks each) or L0+L1+... (e.g. 3+1: ranks per host)"
    m = _SHAPE.match(text)
    if m:
        per_host = (int(m.group(2)),) * int(m.group(1))
    elif _UNEVEN.match(text):
        per_host = tuple(int(x) for x in text.split("+"))
    else:
        raise ShapeError(f"--hosts {text!r}: expected {forms}")
    if len(per_host) < 2:
        raise ShapeError(f"--hosts {text!r}: that is one host; use -n for ranks on this "
                         f"machine, or give at least 2 hosts ({forms})")
    if len(per_host) > _MAX_HOSTS:
        raise ShapeError(f"--hosts {text!r}: at most {_MAX_HOSTS} emulated hosts")
    if min(per_host) < 1:
        raise ShapeError(f"--hosts {text!r}: every host needs at least one rank")
    return HostShape(per_host, text.strip())


def default_meshcast(internode: str) -> str:
    """The meshcast library of a ``--hosts`` run: ``meshcast+mpi`` or ``meshcast+gloo``.

    ``internode`` "auto" follows meshcast's own default between hosts (MPI when it is
    usable, else Gloo): MPI when mpi4py and ``mpiexec`` are there, else Gloo when torch
    is, else MPI (whose missing pieces :func:`problems` then names).
    """
    if internode in ("mpi", "gloo"):
        return f"meshcast+{internode}"
    if not _mpi_problem():
        return "meshcast+mpi"
    if not _torch_problem():
        return "meshcast+gloo"
    return "meshcast+mpi"


def libraries(compare: str, internode: str = "auto") -> list[str]:
    """The libraries of a ``--hosts`` run: meshcast first, then ``--compare``'s in order.

    Raises:
        ValueError: a name in ``compare`` is not one of :data:`LIBRARIES`.
    """
    names = [default_meshcast(internode)]
    for name in (t.strip() for t in compare.split(",")):
        if name == "meshcast":
            name = names[0]
        if not name or name in names:
            continue
        if name not in LIBRARIES:
            raise ValueError(f"--compare: {name!r} does not run across hosts; choose from "
                             f"{', '.join(LIBRARIES)}")
        names.append(name)
    return names


def passed_knobs() -> dict[str, str]:
    """The :data:`PASSED_KNOBS` set in this process's environment."""
    return {k: os.environ[k] for k in PASSED_KNOBS if k in os.environ}


def _mpi_problem() -> str:
    from ..testing.emuhosts import _tool

    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not importable (pip install mpi4py mpich)"
    if _tool("mpiexec") is None:
        return "no mpiexec next to the interpreter or on PATH (pip install mpich)"
    return ""


def _torch_problem() -> str:
    if importlib.util.find_spec("torch") is None:
        return "torch is not importable (pip install torch)"
    return ""


def problems(names: Sequence[str]) -> list[str]:
    """Everything that keeps ``names`` from running on emulated hosts here (empty: none).

    Checked before any host is made: root and the namespace tools, then each
    library's engine (mpi4py and ``mpiexec`` for MPI, torch for Gloo).
    """
    from ..testing.emuhosts import requirements_problem

    out = []
    base = requirements_problem()
    if base:
        out.append(base.replace("run the tests as root", "run meshcast bench --hosts as root"))
    for name in names:
        style = LIBRARIES[name][0]
        # the Gloo libraries (torchrun, and meshcast run with Gloo between hosts) need torch
        why = _mpi_problem() if style == "mpiexec" else _torch_problem()
        if why:
            out.append(f"{name}: {why}")
    return out


def records_in(stdout: str) -> list[dict[str, Any]]:
    """Every sweep record in a job's output.

    Found by pattern, not line by line: ``mpiexec`` forwards its ranks' output in
    chunks that may run together on one line.
    """
    out, at, dec = [], 0, json.JSONDecoder()
    while (at := stdout.find(RECORD_PREFIX, at)) >= 0:
        at += len(RECORD_PREFIX)
        try:
            obj, end = dec.raw_decode(stdout, at)
        except ValueError:
            continue  # a record cut by another process's output: not a record
        out.append(obj)
        at = end
    return out


def run_library(hosts: Any, name: str, shape: HostShape, spec: SweepSpec,
                timeout: float) -> LibraryRun:
    """Run ``spec`` for library ``name`` on emulated ``hosts``; never raises for its failures.

    Args:
        hosts: an :class:`meshcast.testing.emuhosts.EmulatedHosts` that is up.
        name: one of :data:`LIBRARIES`.
        shape: ranks per host.
        spec: the sweep.
        timeout: seconds the whole job may take before it is stopped.

    Returns:
        The records (their ``library`` set to ``name``), and ``error`` if the job failed.
    """
    from ..testing.emuhosts import run_job

    style, module, env = LIBRARIES[name]
    if name.startswith("meshcast"):
        env = {**passed_knobs(), **env}
    result = LibraryRun(name)
    start = time.monotonic()
    job = run_job(hosts, style, list(shape.per_host), ["-m", module, "--spec", spec.to_json()],
                  env=dict(env), timeout=timeout, after_failure=5.0)
    for rec in records_in(job.stdout):
        rec["library"] = name  # the worker says "meshcast"; the launch makes the difference
        if rec.get("kind") == "meta":
            result.meta = rec
        elif rec.get("kind") == "result":
            result.records.append(rec)
    if not job.ok:
        result.error = _failure(job)
    result.seconds = time.monotonic() - start
    return result


def _failure(job: Any) -> str:
    """A short reason plus the end of the launchers' stderr."""
    head = ("timed out after " + f"{job.timeout:g} s" if job.timed_out
            else f"exit code {job.returncode}" + (f" ({job.note})" if job.note else ""))
    from .peers import _EXCEPTION

    lines = [ln.rstrip() for r in job.runs for ln in r.stderr.splitlines() if ln.strip()]
    errors = [ln.strip() for ln in lines if _EXCEPTION.match(ln.strip())]
    if errors:  # the exception a rank raised says more than the exit code
        head += f": {errors[-1]}"
    tail = "\n    ".join(lines[-12:])
    return head + (":\n    " + tail if tail else "")


def run_all(shape: HostShape, names: Sequence[str], spec: SweepSpec, *, rate: str | None,
            prefix: str, rounds: int, timeout: float,
            on_run: Callable[[str, int, LibraryRun | None], None] | None = None,
            ) -> tuple[list[list[LibraryRun]], dict[str, Any]]:
    """Bring emulated hosts up, run every library ``rounds`` times, take the hosts down.

    Args:
        shape: hosts and ranks per host.
        names: libraries (:data:`LIBRARIES`), in the order they take turns.
        spec: the sweep.
        rate: each host's egress rate (tc syntax, ``"2gbit"``); None: unlimited.
        prefix: names of the hosts' namespaces (``{prefix}-h0`` ...); a prefix whose
            hosts another live process holds is refused, never taken over.
        rounds: how many times the libraries take turns.
        timeout: seconds one library's job may take.
        on_run: called as ``on_run(name, round, None)`` before and
            ``on_run(name, round, result)`` after each job (progress).

    Returns:
        ``(runs, hosts_meta)``: one list of :class:`LibraryRun` per round, and what the
        results page says about the hosts.
    """
    from ..testing.emuhosts import EmulatedHosts, TermAsInterrupt

    runs: list[list[LibraryRun]] = []
    failed: set[str] = set()  # a library that failed once is not started again
    hosts = EmulatedHosts(shape.nhosts, rate=rate, prefix=prefix)
    with TermAsInterrupt(), hosts:
        meta = {"shape": shape.text, "per_host": list(shape.per_host), "emulated": True,
                "rate": rate or "", "names": list(hosts.hosts),
                "setup_seconds": round(hosts.setup_seconds, 3),
                "launch": {n: LAUNCH_TEXT[LIBRARIES[n][0]] for n in names}}
        for k in range(rounds):
            this = []
            for name in names:
                if name in failed:
                    continue
                if on_run:
                    on_run(name, k, None)
                res = run_library(hosts, name, shape, spec, timeout)
                if res.error:
                    failed.add(name)
                this.append(res)
                if on_run:
                    on_run(name, k, res)
            runs.append(this)
    return runs, meta
