"""The launcher behind ``meshcast run``: host the store, start workers, watch them, tear down.

Theory of operation
-------------------
One launcher runs per node. :func:`launch` goes through these steps:

1. *Identity.* A single node makes a fresh secret (32 random bytes, hex) and
   run id (uuid4 hex). Several nodes must agree without talking first, so the
   secret comes from ``MESHCAST_SECRET`` in the launchers' environment and the
   run id is derived from it and the store's port.
2. *Store.* Node 0 hosts the job's TCP store in a background thread of the
   launcher, so the store outlives any worker (rank 0 dying does not take the
   rendezvous down with it). A single node binds 127.0.0.1 on port 0 and
   reads back the port the kernel chose: no pick-then-bind race.
   With several nodes, every launcher then meets the others through the store
   before it starts anything (:mod:`meshcast.run.nodes`): a node holding
   another secret is refused there, and the nodes agree on the world size and
   each node's first rank, so ``--nproc-per-node`` may differ per node.
3. *Workers.* Each worker is ``python -m meshcast.run.worker ...`` in its own
   session (process group), so a signal to the group also reaches whatever
   the worker started. The bootstrap asks for SIGKILL on the launcher's
   death. Workers are started from the calling thread, which must outlive
   them (the kernel's death signal follows the *thread* that forked).
4. *Monitor.* The launcher sleeps in ``poll()`` on one pidfd per worker plus a
   self-pipe written by its signal handlers, so it wakes the moment a worker
   exits or a signal arrives (without pidfds it polls every 50 ms).
5. *Teardown.* On the first worker that exits non-zero or by a signal (or a
   SIGINT/SIGTERM/SIGHUP/SIGQUIT to the launcher) the remaining workers' groups
   get SIGTERM, then SIGKILL after the grace period, or at once on a second
   signal. Workers still running at that point are marked as stopped by the
   launcher, so the summary never blames them for the root cause. With
   several nodes, the failure is first announced to every node (the job's
   failure notice in the store, :mod:`meshcast._hostwatch`: the other nodes'
   ranks raise it within a liveness interval instead of finding the loss
   themselves), and the other workers get a short *drain* (about
   ``lost_after``) to fail on their own, so that each one's own error, which
   names the lost rank and host, is in the summary.
6. *Summary and cleanup.* After output pumps drain, a failure summary goes to
   stderr (root cause with its traceback from the worker's error file, then
   the rest); the per-job temp dir and any ``meshcast-<run_id>-*`` segment
   left in ``/dev/shm`` are removed; the store is closed last.

Exit codes: 0 when every worker exits 0; the root cause's exit code, or
128 + signal number when it died by a signal; 128 + signal number when the
launcher itself was signalled. (``meshcast run`` exits 2 on a usage error
and 1 when the store cannot be hosted or workers cannot be started.)
"""

from __future__ import annotations

import glob
import hashlib
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import IO, Any

from .. import _hostwatch
from .. import config as knobs
from ..errors import RendezvousError, usage
from .config import LaunchConfig
from .nodes import NodeLayout, join_nodes
from .worker import ErrorRecord, read_error_file

# Signals the launcher forwards to its workers (torchrun's default set).
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

# Poll period when pidfds are unavailable (old kernels, non-Linux).
_FALLBACK_POLL_S = 0.05

# How long to wait for output pumps once workers are gone. A grandchild that
# still holds a worker's pipe open must not keep the launcher alive.
_PUMP_DRAIN_S = 2.0

_RULE_WIDTH = 72


def launch(config: LaunchConfig) -> int:
    """Run one node's share of a job and return the launcher's exit code.

    Args:
        config: what to run and how; see :class:`LaunchConfig`.

    Returns:
        0 if every worker exited 0; otherwise the first failed worker's exit
        code (128 + signal number if it died by a signal), or 128 + signal
        number if the launcher was interrupted.

    Raises:
        InvalidUsage: the configuration cannot run (e.g. ``nnodes > 1``
            without ``MESHCAST_SECRET``, or the script does not exist).
        RendezvousError: node 0 could not host the store.
        OSError: a worker process could not be started.

    Must be called from a thread that lives until it returns (normally the
    main thread, which also lets it handle SIGINT/SIGTERM/SIGHUP/SIGQUIT).

    Example::

        >>> from meshcast.run import LaunchConfig, launch
        >>> launch(LaunchConfig("train.py", args=("--epochs", "3"), nproc_per_node=4))
        0
    """
    return _Job(config).run()


@dataclass
class _Worker:
    local_rank: int
    rank: int
    error_file: str
    proc: subprocess.Popen[bytes] | None = None
    pidfd: int | None = None
    returncode: int | None = None
    ended_at: float | None = None  # wall clock, when the launcher saw the exit
    stopped_by_launcher: bool = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def job_identity(config: LaunchConfig) -> tuple[str, str]:
    """Return ``(secret_hex, run_id)`` for this job.

    A single node generates both. With ``nnodes > 1`` every launcher must use
    the same values, so the secret is read from ``MESHCAST_SECRET`` and the run
    id is derived from the secret and the store's port.

    Raises:
        InvalidUsage: ``nnodes > 1`` and ``MESHCAST_SECRET`` is missing or not
            at least 16 bytes of hex.
    """
    if not config.multinode:
        return secrets.token_hex(32), uuid.uuid4().hex
    secret = (knobs.get("MESHCAST_SECRET") or "").strip()
    hint = (
        "export the same secret on every node before starting the launchers, e.g. "
        "export MESHCAST_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')"
    )
    if not secret:
        raise usage(
            "meshcast run",
            f"--nnodes {config.nnodes} needs the job secret in MESHCAST_SECRET; {hint}",
        )
    try:
        raw = bytes.fromhex(secret)
    except ValueError:
        raise usage("meshcast run", f"MESHCAST_SECRET must be hex digits; {hint}") from None
    if len(raw) < 16:
        raise usage(
            "meshcast run",
            f"MESHCAST_SECRET is {len(raw)} bytes; use at least 16 (32 hex digits); {hint}",
        )
    # The port is part of it so that two jobs sharing one secret still differ;
    # the address is not, since nodes may spell it differently (name vs IP).
    _, port = config.store_endpoint()
    digest = hashlib.sha256(b"meshcast-run-id\0" + raw + f"\0{port}".encode())
    return secret, digest.hexdigest()[:32]


def worker_env(
    config: LaunchConfig,
    local_rank: int,
    *,
    master: tuple[str, int],
    secret: str,
    run_id: str,
    error_file: str,
    base: dict[str, str] | None = None,
    layout: NodeLayout | None = None,
) -> dict[str, str]:
    """Build the environment of worker ``local_rank`` (torchrun's contract plus meshcast's).

    ``layout``: what the nodes agreed on (world size, this node's first rank); None
    means every node starts ``config.nproc_per_node``.
    """
    env = dict(os.environ if base is None else base)
    rank = config.global_rank(local_rank) if layout is None else layout.first_rank + local_rank
    world_size = config.world_size if layout is None else layout.world_size
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(config.nproc_per_node),
        GROUP_RANK=str(config.node_rank),
        NODE_RANK=str(config.node_rank),
        GROUP_WORLD_SIZE=str(config.nnodes),
        ROLE_NAME="default",
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(world_size),
        MASTER_ADDR=master[0],
        MASTER_PORT=str(master[1]),
        MESHCAST_SECRET=secret,
        MESHCAST_RUN_ID=run_id,
        MESHCAST_STORE_HOSTED="1",
        MESHCAST_ERROR_FILE=error_file,
    )
    if config.nproc_per_node > 1:
        # As torchrun: N ranks each running a full-width thread pool on the
        # same cores oversubscribe them badly; the user can still override.
        env.setdefault("OMP_NUM_THREADS", "1")
    if config.prefix_output:
        # Output goes through pipes, which Python would block-buffer; lines
        # must reach the launcher as they are printed.
        env["PYTHONUNBUFFERED"] = "1"
    return env


def worker_command(config: LaunchConfig) -> list[str]:
    """The argv that starts one worker (the bootstrap, then the user's target)."""
    if config.module:
        mode = ["-m"]
    elif config.no_python:
        mode = ["--no-python"]
    else:
        mode = []
    return [
        sys.executable, "-m", "meshcast.run.worker", "--parent-pid", str(os.getpid()),
        *mode, "--", config.entrypoint, *config.args,
    ]  # fmt: skip


def host_store(host: str, port: int, secret: str) -> Any:
    """Start the job's store server in this process and return it (``.host``, ``.port``, ``.close()``).

    Raises:
        RendezvousError: the store module is missing or the address cannot be bound.
    """
    try:
        from ..rendezvous.tcp_store import TCPStoreServer
    except ImportError as exc:
        raise RendezvousError(
            f"meshcast run: cannot host the store: meshcast.rendezvous.tcp_store is unavailable ({exc})"
        ) from None
    try:
        return TCPStoreServer(host=host, port=port, secret=bytes.fromhex(secret))
    except (OSError, RendezvousError) as exc:
        hint = (
            "is another job using this port? pass another --master-port, or --standalone for a free one"
            if port
            else "is the address local to this machine?"
        )
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RendezvousError(
            f"meshcast run: cannot host the store at {host}:{port} ({reason}); {hint}"
        ) from None


def remove_leftover_segments(run_id: str) -> list[str]:
    """Unlink ``meshcast-<run_id>-*`` files in /dev/shm (and ``MESHCAST_SHM_DIR``); return them.

    Segments are normally unlinked as soon as every rank attached, so this
    finds something only after a worker died inside that window.
    """
    dirs = ["/dev/shm"]
    shm_dir = knobs.get("MESHCAST_SHM_DIR")
    if shm_dir:
        dirs.append(shm_dir)
    removed = []
    for d in dirs:
        for path in glob.glob(os.path.join(glob.escape(d), f"meshcast-{run_id}-*")):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def describe_exit(returncode: int) -> str:
    """``"exit code 3"`` or ``"Signal 9 (SIGKILL)"`` for a Popen-style return code."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"Signal {-returncode}"
    return f"Signal {-returncode} ({name})"


def exit_status(returncode: int) -> int:
    """A shell-style exit status: the code itself, or 128 + signal number."""
    return returncode if returncode >= 0 else 128 - returncode


def _peek_exit(w: _Worker) -> int | None:
    """The worker's Popen-style return code if it has exited, else ``None``; never reaps."""
    assert w.proc is not None
    if not hasattr(os, "waitid"):
        return w.proc.poll()  # no WNOWAIT here: reaping early is the best we can do
    try:
        info = os.waitid(os.P_PID, w.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return w.proc.poll()
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


class _OutputPump:
    """Copies workers' pipes to the launcher's stdout/stderr, one prefixed line at a time.

    One thread per pipe keeps each rank's lines in order; a shared lock keeps
    lines of different ranks from interleaving mid-line.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []

    def attach(self, pipe: IO[bytes], dest: IO[str], prefix: str) -> None:
        thread = threading.Thread(
            target=self._pump, args=(pipe, dest, prefix.encode()), daemon=True,
            name=f"meshcast-run-pump-{prefix.strip()}",
        )  # fmt: skip
        thread.start()
        self._threads.append(thread)

    def _pump(self, pipe: IO[bytes], dest: IO[str], prefix: bytes) -> None:
        out = getattr(dest, "buffer", None)
        for line in iter(pipe.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            with self._lock:
                if self._closed:
                    continue  # keep draining so the writer never blocks on a full pipe
                try:
                    if out is not None:
                        out.write(prefix + line)
                        out.flush()
                    else:
                        dest.write((prefix + line).decode(errors="replace"))
                        dest.flush()
                except (OSError, ValueError):
                    pass  # our own stdout is gone (closed pipe); keep draining
        pipe.close()

    def close(self, timeout: float = _PUMP_DRAIN_S) -> None:
        """Wait up to ``timeout`` for the pipes to reach EOF, then stop writing."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            # Daemon pumps still blocked on a pipe (held open by a grandchild)
            # must not write while the interpreter shuts down.
            self._closed = True


class _Job:
    """One launcher's run; :meth:`run` is everything :func:`launch` does.

    Rule: a worker is reaped only after its process group got its final
    SIGKILL. Until then the exited worker is a zombie that keeps its pid, and
    with it the group id, from being reused, so signalling the group can never
    hit an unrelated process. Exits are observed with ``waitid(WNOWAIT)``.
    """

    def __init__(self, config: LaunchConfig) -> None:
        self.config = config
        self.run_id = ""
        self.workers: list[_Worker] = []
        self.failures: list[_Worker] = []  # in the order the launcher observed them
        self.signals: list[int] = []
        self.host = socket.gethostname()
        self.layout = NodeLayout.single(config)
        self.nodes: Any = None  # our connection to the store, with several nodes
        self._stopped = False
        self._all_pidfds = True
        self._pump = _OutputPump()
        self._saved_handlers: dict[int, Any] = {}

    # -- the whole run ---------------------------------------------------------

    def run(self) -> int:
        cfg = self.config
        if not (cfg.module or cfg.no_python) and not os.path.exists(cfg.entrypoint):
            raise usage("meshcast run", f"can't open file {cfg.entrypoint!r}: no such file")
        secret, self.run_id = job_identity(cfg)
        host, port = cfg.store_endpoint()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller = select.poll()
        self._poller.register(self._wake_r, select.POLLIN)
        tmpdir = tempfile.mkdtemp(prefix=f"meshcast-run-{self.run_id[:8]}-")
        store = None
        self._install_signal_handlers()
        try:
            if cfg.node_rank == 0:
                store = host_store(host, port, secret)
                port = store.port
            if cfg.multinode:
                self.nodes, self.layout = join_nodes(cfg, (host, port), secret,
                                                     knobs.get("MESHCAST_TIMEOUT"), store)
                # From here on the connection only announces failures: it must not
                # block for long on a store that stopped answering.
                self.nodes.set_timeout(_hostwatch.lost_after())
            self._start_workers((host, port), secret, tmpdir)
            return self._monitor()
        finally:
            self._stop_workers()
            self._pump.close()
            self._restore_signal_handlers()
            shutil.rmtree(tmpdir, ignore_errors=True)
            removed = remove_leftover_segments(self.run_id)
            if removed:
                print(
                    f"meshcast run: removed {len(removed)} leftover shared-memory segment(s) "
                    f"of this job: {', '.join(removed)}",
                    file=sys.stderr,
                )
            if self.nodes is not None:
                self.nodes.close()
            if store is not None:
                store.close()
            for w in self.workers:
                if w.pidfd is not None:
                    os.close(w.pidfd)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _start_workers(self, master: tuple[str, int], secret: str, tmpdir: str) -> None:
        cfg = self.config
        cmd = worker_command(cfg)
        for local_rank in range(cfg.nproc_per_node):
            if self.signals:
                return  # interrupted while starting: the monitor tears down
            rank = self.layout.first_rank + local_rank
            worker = _Worker(local_rank, rank, os.path.join(tmpdir, f"error-rank-{rank}.json"))
            env = worker_env(
                cfg, local_rank, master=master, secret=secret, run_id=self.run_id,
                error_file=worker.error_file, layout=self.layout,
            )  # fmt: skip
            pipe = subprocess.PIPE if cfg.prefix_output else None
            worker.proc = subprocess.Popen(
                cmd,
                env=env,
                # As mpirun: stdin reaches rank 0 only; the others would race for it.
                stdin=None if rank == 0 else subprocess.DEVNULL,
                stdout=pipe,
                stderr=pipe,
                start_new_session=True,
            )
            self.workers.append(worker)
            self._watch(worker)
            if cfg.prefix_output:
                assert worker.proc.stdout is not None and worker.proc.stderr is not None
                self._pump.attach(worker.proc.stdout, sys.stdout, f"[rank {rank}]: ")
                self._pump.attach(worker.proc.stderr, sys.stderr, f"[rank {rank}]: ")

    def _watch(self, worker: _Worker) -> None:
        try:
            worker.pidfd = os.pidfd_open(worker.pid)
        except (AttributeError, OSError):
            self._all_pidfds = False
            return
        self._poller.register(worker.pidfd, select.POLLIN)

    # -- monitoring ------------------------------------------------------------

    def _wait(self, timeout: float | None) -> None:
        """Sleep until a worker exits, a signal arrives, or ``timeout`` seconds pass."""
        if not self._all_pidfds:
            timeout = _FALLBACK_POLL_S if timeout is None else min(timeout, _FALLBACK_POLL_S)
        self._poller.poll(None if timeout is None else max(0, int(timeout * 1000)))
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _collect(self) -> list[_Worker]:
        """Record workers that exited since the last call (without reaping them).

        Returns them first failure first. Several exits seen in one wake-up are
        ordered by their error file's timestamp (the rank that raised first is
        the likeliest root cause), then by rank.
        """
        exited = []
        for w in self.workers:
            if w.returncode is None:
                returncode = _peek_exit(w)
                if returncode is not None:
                    w.returncode = returncode
                    w.ended_at = time.time()
                    if w.pidfd is not None:
                        self._poller.unregister(w.pidfd)
                    exited.append(w)
        exited.sort(key=lambda w: (self._error_time(w), w.rank))
        for w in exited:
            if w.returncode != 0 and not w.stopped_by_launcher:
                self.failures.append(w)
        return exited

    @staticmethod
    def _error_time(w: _Worker) -> float:
        record = read_error_file(w.error_file) if w.returncode else None
        return record.time if record and record.time is not None else float("inf")

    def _monitor(self) -> int:
        while True:
            if self.signals:
                return self._interrupted()
            self._collect()
            if self.failures:
                return self._failed()
            if all(w.returncode is not None for w in self.workers):
                return 0
            self._wait(None)

    def _failed(self) -> int:
        root = self.failures[0]
        if self.nodes is not None:
            self._announce()
            self._drain(_hostwatch.lost_after() + 4 * _hostwatch.interval())
        self._stop_workers()
        self._pump.close()
        print(self._summary(root), file=sys.stderr, flush=True)
        assert root.returncode is not None
        return exit_status(root.returncode)

    def _interrupted(self) -> int:
        signum = self.signals[0]
        alive = sum(w.returncode is None for w in self.workers)
        print(
            f"meshcast run: received {signal.Signals(signum).name}, stopping {alive} worker(s)",
            file=sys.stderr,
            flush=True,
        )
        self._stop_workers()
        return 128 + signum

    def _announce(self) -> None:
        """Publish this node's failed workers as the job's failure notice (other nodes'
        ranks cannot see them: a rank's death is only visible on its own host)."""
        parts = []
        for w in self.failures:
            assert w.returncode is not None
            how = (f"died: {describe_exit(w.returncode)}" if w.returncode < 0
                   else f"failed with exit code {w.returncode}")
            record = read_error_file(w.error_file)
            if record is not None and record.message:
                how += f" ({record.message.splitlines()[0][:500]})"
            parts.append(f"rank {w.rank} (local_rank {w.local_rank}) on host {self.host} {how}")
        _hostwatch.publish_notice(self.nodes, "; ".join(parts), rank=self.failures[0].rank,
                                  host=self.host, by=f"the launcher on {self.host}")

    def _drain(self, seconds: float) -> None:
        """Give the other workers up to ``seconds`` to end by themselves (they are told of
        the failure and raise their own error, which the summary then shows)."""
        deadline = time.monotonic() + seconds
        while any(w.returncode is None for w in self.workers) and not self.signals:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wait(remaining)
            self._collect()

    # -- teardown --------------------------------------------------------------

    def _stop_workers(self) -> None:
        """SIGTERM every worker's group, wait the grace period, SIGKILL the groups, reap.

        Runs once; later calls return at once. A second signal to the launcher
        during the grace period skips the rest of it. Groups of workers that
        already exited are signalled too: that reaches what they left behind.
        """
        if self._stopped:
            return
        self._stopped = True
        self._collect()
        for w in self.workers:
            if w.returncode is None:
                w.stopped_by_launcher = True
        signals_before = len(self.signals)
        self._signal_groups(signal.SIGTERM)
        deadline = time.monotonic() + self.config.grace_period
        while any(w.returncode is None for w in self.workers):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or len(self.signals) > signals_before:
                break
            self._wait(remaining)
            self._collect()
        self._signal_groups(signal.SIGKILL)
        for w in self.workers:
            assert w.proc is not None
            w.proc.wait()
            if w.returncode is None:
                w.returncode = w.proc.returncode
                w.ended_at = time.time()

    def _signal_groups(self, sig: int) -> None:
        for w in self.workers:
            try:
                # Each worker leads its own session, so its pid is its group id;
                # it is not reaped yet (see the class docstring), so still ours.
                os.killpg(w.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    # -- signals ---------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)
        try:
            os.write(self._wake_w, b"\0")
        except OSError:
            pass

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may install handlers; the caller owns signals
        for sig in FORWARDED_SIGNALS:
            if signal.getsignal(sig) == signal.SIG_IGN:
                continue  # e.g. SIGHUP under nohup: the user asked the job to survive it
            self._saved_handlers[sig] = signal.signal(sig, self._on_signal)

    def _restore_signal_handlers(self) -> None:
        for sig, handler in self._saved_handlers.items():
            signal.signal(sig, handler)
        self._saved_handlers.clear()

    # -- the failure summary ---------------------------------------------------

    def _summary(self, root: _Worker) -> str:
        cfg = self.config
        name = f"-m {cfg.entrypoint}" if cfg.module else cfg.entrypoint
        lines = ["=" * _RULE_WIDTH, f"meshcast run: {name} FAILED", "-" * _RULE_WIDTH]
        lines.append("Root Cause (first observed failure):")
        lines += self._entry(root)
        lines.append("-" * _RULE_WIDTH)
        lines.append("Other failures:")
        others = self.failures[1:]
        for n, w in enumerate(others):
            if n:
                lines.append("")
            lines += self._entry(w)
        if not others:
            lines.append("  <none>")
        stopped = [w for w in self.workers if w.stopped_by_launcher and w.returncode != 0]
        if stopped:
            lines.append("-" * _RULE_WIDTH)
            lines.append(f"Stopped by the launcher after rank {root.rank} failed:")
            for w in stopped:
                assert w.returncode is not None
                lines.append(
                    f"  rank {w.rank} (local_rank: {w.local_rank}, pid: {w.pid}): "
                    f"{describe_exit(w.returncode)}"
                )
        lines.append("=" * _RULE_WIDTH)
        return "\n".join(lines)

    def _entry(self, w: _Worker) -> list[str]:
        assert w.returncode is not None and w.ended_at is not None
        record: ErrorRecord | None = read_error_file(w.error_file)
        when = record.time if record and record.time else w.ended_at
        if record is not None:
            tb = record.traceback.rstrip("\n")
        elif w.returncode < 0:
            tb = f"<none: {describe_exit(w.returncode)} received by PID {w.pid}>"
        else:
            tb = "<none: the process exited without an uncaught Python exception>"
        indent = "\n" + " " * 14
        return [
            f"  time      : {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(when))}",
            f"  host      : {self.host}",
            f"  rank      : {w.rank} (local_rank: {w.local_rank})",
            f"  exitcode  : {w.returncode if w.returncode >= 0 else describe_exit(w.returncode)}"
            f" (pid: {w.pid})",
            f"  traceback : {indent.join(tb.splitlines())}",
        ]
