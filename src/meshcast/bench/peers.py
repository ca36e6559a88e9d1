"""Launching each library's ranks and collecting their records: meshcast, Gloo, MPI.

Every library runs the same :mod:`.sweep` in its own worker processes,
started fresh for each library so none inherits another's threads, memory or
warm caches (``--paired`` instead runs them all in one job, :func:`run_paired`):
meshcast and Gloo as ``N`` ``python -m`` processes meeting through a file in a
temporary directory, MPI as one ``mpiexec -n N``. Rank 0
(for MPI: the mpiexec process, which forwards rank 0's stdout) prints
records; this module reads them as they come (for the progress bar), watches
every process, and on the first failure (or ``timeout`` seconds without a
record) stops the whole world and reports the last lines of its stderr.

A library that cannot run here (no torch, no mpi4py or no ``mpiexec``) is
skipped with a one-line reason from :func:`unavailable`.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .sweep import SweepSpec, parse_line

#: "meshcast-symmetric" is meshcast with its buffers from ``meshcast.empty`` (symmetric memory).
LIBRARIES = ("meshcast", "meshcast-symmetric", "gloo", "mpi")

_EXCEPTION = re.compile(r"^[\w.]+(Error|Exception|Usage|Timeout)\b.*:")


class BenchError(RuntimeError):
    """A library's world failed or hung; the message names it and quotes its stderr."""


@dataclass
class LibraryRun:
    """What one library's sweep produced.

    Attributes:
        library: one of :data:`LIBRARIES`.
        records: the result records, in sweep order.
        meta: the worker's ``meta`` record (versions), if it got that far.
        error: why the run stopped early ("" if it completed).
        skipped: why it did not run at all ("" if it ran).
        seconds: wall-clock time of the run including start-up.
    """

    library: str
    records: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    skipped: str = ""
    seconds: float = 0.0


def unavailable(library: str) -> str:
    """Why ``library`` cannot run on this machine, or "" if it can."""
    if library in ("meshcast", "meshcast-symmetric"):
        return ""
    if library == "gloo":
        if importlib.util.find_spec("torch") is None:
            return "torch is not importable (pip install torch)"
        return ""
    if library == "mpi":
        if importlib.util.find_spec("mpi4py") is None:
            return "mpi4py is not importable (pip install mpi4py mpich)"
        if _mpiexec() is None:
            return "no mpiexec on PATH (pip install mpich, or load your site's MPI)"
        return ""
    return f"unknown library {library!r}; choose from {', '.join(LIBRARIES)}"


def _mpiexec() -> str | None:
    return shutil.which("mpiexec") or shutil.which("mpirun")


def _commands(library: str, spec: SweepSpec, n: int, tmp: str) -> list[list[str]]:
    """One argv per process to start."""
    module = f"meshcast.bench.{library.split('-')[0]}_worker"
    if library == "mpi":
        return [[_mpiexec() or "mpiexec", "-n", str(n), sys.executable, "-m", module,
                 "--spec", spec.to_json()]]
    store = os.path.join(tmp, "store")
    extra = ["--symmetric"] if library == "meshcast-symmetric" else []
    return [[sys.executable, "-m", module, "--spec", spec.to_json(), "--rank", str(r),
             "--world-size", str(n), "--init", store, *extra] for r in range(n)]


def _environment(library: str, n: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["MESHCAST_BENCH_PARENT"] = str(os.getpid())
    if library == "mpi":
        env.pop("MESHCAST_BENCH_PARENT")  # mpiexec, not us, is the ranks' parent
    if library == "gloo":
        # torchrun's default with several ranks per node; keeps 2 cores from being oversubscribed.
        env.setdefault("OMP_NUM_THREADS", "1")
        if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
            env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def run_library(library: str, spec: SweepSpec, n: int, *, timeout: float = 300.0,
                on_record: Callable[[dict[str, Any]], None] | None = None) -> LibraryRun:
    """Run ``spec`` on ``n`` ranks of ``library``; never raises for the library's own failures.

    Args:
        library: one of :data:`LIBRARIES`.
        spec: the sweep.
        n: number of ranks.
        timeout: seconds without a new record after which the world is stopped.
        on_record: called with each result record as it arrives (progress bars).

    Returns:
        The records, and ``skipped``/``error`` set when it could not run or stopped early.
    """
    result = LibraryRun(library)
    reason = unavailable(library)
    if reason:
        result.skipped = reason
        return result
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"meshcast-bench-{library}-") as tmp:
        world = _World(_commands(library, spec, n, tmp), _environment(library, n), tmp,
                       launcher="mpiexec" if library == "mpi" else "")
        _collect(world, timeout, {library: result}, on_record)
    result.seconds = time.monotonic() - start
    return result


def run_paired(libraries: Sequence[str], spec: SweepSpec, n: int, *, blocks: int,
               timeout: float = 300.0,
               on_record: Callable[[dict[str, Any]], None] | None = None) -> list[LibraryRun]:
    """Run ``spec`` once for all ``libraries`` in one job (:mod:`.paired_worker`).

    Its ranks hold every library, and the sweep alternates their timed blocks at
    each call (:func:`.sweep.run_paired_sweep`). Under ``mpiexec`` when MPI is one
    of them, else as ``n`` processes meeting through files. Never raises for the
    libraries' own failures: a library that cannot run here is skipped, and a
    failure of the job is every library's ``error``.

    Args:
        libraries: meshcast first, then peers from :data:`LIBRARIES` (not
            meshcast-symmetric: its buffers would not be the peers').
        spec: the sweep.
        n: number of ranks.
        blocks: timed blocks per library at each call (each keeps its fastest).
        timeout: seconds without a new record after which the job is stopped.
        on_record: called with each result record as it arrives.

    Returns:
        One :class:`LibraryRun` per library, in ``libraries``' order.
    """
    runs = {lib: LibraryRun(lib, skipped=unavailable(lib)) for lib in libraries}
    live = [lib for lib in libraries if not runs[lib].skipped]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="meshcast-bench-paired-") as tmp:
        args = ["-m", "meshcast.bench.paired_worker", "--spec", spec.to_json(),
                "--libraries", ",".join(live), "--blocks", str(blocks),
                "--gloo-init", os.path.join(tmp, "gloo-store")]
        if "mpi" in live:
            argvs = [[_mpiexec() or "mpiexec", "-n", str(n), sys.executable, *args]]
        else:
            argvs = [[sys.executable, *args, "--rank", str(r), "--world-size", str(n),
                      "--init", os.path.join(tmp, "store")] for r in range(n)]
        env: dict[str, str] = {}
        for lib in live:
            env.update(_environment(lib, n))
        if "mpi" in live:
            env.pop("MESHCAST_BENCH_PARENT", None)
        world = _World(argvs, env, tmp, launcher="mpiexec" if "mpi" in live else "")
        _collect(world, timeout, {lib: runs[lib] for lib in live}, on_record)
    for lib in live:
        runs[lib].seconds = time.monotonic() - start
    return [runs[lib] for lib in libraries]


def _collect(world: _World, timeout: float, runs: dict[str, LibraryRun],
             on_record: Callable[[dict[str, Any]], None] | None) -> None:
    """Read ``world``'s records into the run of the library each names (its ``meta``
    record too) until the world ends, then stop it; a failure or a stall is every
    run's ``error``."""
    try:
        for rec in world.records(timeout):
            run = runs.get(rec.get("library", ""))
            if run is None:
                continue
            if rec.get("kind") == "meta":
                run.meta = rec
                continue
            run.records.append(rec)
            if on_record is not None:
                on_record(rec)
    except BenchError as exc:
        for run in runs.values():
            run.error = str(exc)
    finally:
        world.stop()


class _World:
    """The processes of one library's run: start, read rank 0's records, watch, stop."""

    def __init__(self, argvs: list[list[str]], env: dict[str, str], tmp: str,
                 launcher: str = "") -> None:
        self.launcher = launcher  # "mpiexec" when one process stands for all ranks
        self.procs: list[subprocess.Popen[str]] = []
        self.errs: list[IO[str]] = []
        self.lines: queue.Queue[str | None] = queue.Queue()
        for i, argv in enumerate(argvs):
            err = open(os.path.join(tmp, f"stderr.{i}"), "w+")  # noqa: SIM115 - closed in stop()
            self.errs.append(err)
            # Own session: stop() can end the whole tree (mpiexec's proxies and ranks too).
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE if i == 0 else subprocess.DEVNULL,
                                    stderr=err, text=True, start_new_session=True)
            self.procs.append(proc)
        reader = threading.Thread(target=self._read, args=(self.procs[0].stdout,), daemon=True)
        reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)

    def records(self, timeout: float) -> Any:
        """Yield records until rank 0's stdout closes; raise BenchError on failure or stall."""
        last = time.monotonic()
        eof = False
        while True:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                line = ""
            if line is None:
                eof = True
            elif line:
                rec = parse_line(line)
                if rec is not None:
                    last = time.monotonic()
                    yield rec
                continue
            failed = [i for i, p in enumerate(self.procs) if p.poll() not in (None, 0)]
            if failed:
                raise BenchError(self._failure(failed[0]))
            if eof and all(p.poll() == 0 for p in self.procs):
                return
            if time.monotonic() - last > timeout:
                raise BenchError(f"no result for {timeout:.0f} s; stopped the ranks"
                                 f"{self._tail_all()}")

    def _failure(self, i: int) -> str:
        code = self.procs[i].returncode
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        who = self.launcher or f"rank {i}"
        tail = self._tail(i)
        errors = [ln.strip() for ln in tail.splitlines() if _EXCEPTION.match(ln.strip())]
        headline = f": {errors[-1]}" if errors else ""
        return f"{who} failed ({how}){headline}{tail}"

    def _tail(self, i: int, lines: int = 12) -> str:
        err = self.errs[i]
        err.flush()
        err.seek(0)
        text = [ln.rstrip() for ln in err.read().splitlines() if ln.strip()]
        return (":\n    " + "\n    ".join(text[-lines:])) if text else ""

    def _tail_all(self) -> str:
        return "".join(self._tail(i, 4) for i in range(len(self.procs)))

    def stop(self) -> None:
        """End every process of this world (SIGTERM, then SIGKILL) and close the files."""
        for p in self.procs:
            if p.poll() is None:
                _signal_session(p, signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_session(p, signal.SIGKILL)
                p.wait()
        for p in self.procs:
            if p.stdout is not None:
                p.stdout.close()
        for err in self.errs:
            err.close()


def _signal_session(proc: subprocess.Popen[str], sig: int) -> None:
    """Signal the session ``proc`` leads (it was started with ``start_new_session``)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
