"""Run a function on N real processes that form a meshcast world (for tests and examples).

``spawn_world(fn, n, **kwargs)`` starts ``n`` processes (from a forkserver
that has already imported NumPy and meshcast, so a world starts in tens of
milliseconds), initializes the default group in each through a FileStore in
a fresh temporary directory, runs ``fn(**kwargs)`` and returns every rank's
return value. The first rank that fails terminates the others and the raised
:class:`WorldFailure` carries its traceback; a world still running at
``timeout`` is killed and reported with the ranks that had not finished.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

_CTX: Any = None


def _context() -> Any:
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["numpy", "meshcast"])
    return _CTX


class WorldFailure(AssertionError):
    """A rank of a spawned world failed, hung or crashed.

    Attributes:
        rank: the first rank that failed (None for a timeout).
        errors: rank -> error text for every rank that reported one.
    """

    def __init__(self, message: str, rank: int | None = None,
                 errors: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.errors = errors or {}


def _child(rank: int, size: int, path: str, timeout: float, env: dict[str, str],
           fn: Callable[..., Any], kwargs: dict[str, Any], conn: Connection,
           init: bool) -> None:
    os.environ.update(env)
    try:
        import meshcast

        if init:
            meshcast.init_process_group(init_method=f"file://{path}", rank=rank,
                                        world_size=size, timeout=timeout)
        result = fn(**kwargs)
        if init:
            meshcast.destroy_process_group()
        conn.send(("ok", result))
    except BaseException as exc:  # noqa: BLE001 - report everything to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        conn.close()


def _rank_env(env: dict[str, str] | None, hosts: Sequence[int] | None,
              rank: int) -> dict[str, str]:
    out = dict(env or {})
    if hosts is not None:
        out.setdefault("MESHCAST_INTERNODE", "gloo")
        out.setdefault("GLOO_SOCKET_IFNAME", "lo")
        out["MESHCAST_HOST_ID"] = f"simhost{hosts[rank]}/{os.getpid()}"
    return out


def spawn_world(fn: Callable[..., Any], world_size: int, *, timeout: float = 60.0,
                op_timeout: float | None = None, env: dict[str, str] | None = None,
                init: bool = True, expect_failure: bool = False,
                hosts: Sequence[int] | None = None, **kwargs: Any) -> list[Any]:
    """Run ``fn(**kwargs)`` on ``world_size`` processes with meshcast initialized.

    Args:
        fn: a module-level (picklable) function.
        world_size: number of ranks.
        timeout: wall-clock limit for the whole world; on expiry every rank
            is killed and WorldFailure names those still running.
        op_timeout: the process group's timeout (default: ``timeout / 2``).
        env: extra environment variables for the ranks.
        init: call init_process_group / destroy_process_group around ``fn``.
        hosts: the host index of every rank: ranks of different indices count as
            different hosts (``MESHCAST_HOST_ID``), so the world spans "hosts" whose
            ranks share no memory and talk through the inter-host engine (Gloo over
            loopback unless ``env`` says otherwise).
        expect_failure: return per-rank outcomes (``("ok", value)`` or
            ``("error", text)``) instead of raising on the first failure;
            ranks still get killed at ``timeout``.

    Returns:
        each rank's return value, in rank order.

    Raises:
        WorldFailure: a rank raised, crashed or the world timed out.
    """
    ctx = _context()
    tmp = tempfile.mkdtemp(prefix="meshcast-world-")
    path = os.path.join(tmp, "store")
    op_timeout = op_timeout if op_timeout is not None else timeout / 2
    procs, conns = [], []
    try:
        for rank in range(world_size):
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(rank, world_size, path, op_timeout,
                                                 _rank_env(env, hosts, rank), fn, kwargs, child, init),
                            name=f"meshcast-rank{rank}", daemon=True)
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        outcomes: dict[int, tuple[str, Any]] = {}
        deadline = time.monotonic() + timeout
        pending = {c: r for r, c in enumerate(conns)}
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for c in wait(list(pending), timeout=min(left, 0.5)):
                r = pending.pop(c)
                try:
                    outcomes[r] = c.recv()
                except EOFError:
                    procs[r].join(1)
                    code = procs[r].exitcode
                    how = (f"signal {signal.Signals(-code).name}" if code and code < 0
                           else f"exit code {code}")
                    outcomes[r] = ("error", f"rank {r} died without a report ({how})")
                if outcomes[r][0] == "error" and not expect_failure:
                    _kill(procs)
                    raise WorldFailure(f"rank {r} failed:\n{outcomes[r][1]}", rank=r,
                                       errors={k: v[1] for k, v in outcomes.items()
                                               if v[0] == "error"})
        if pending:
            _kill(procs)
            missing = sorted(pending.values())
            errors = {k: v[1] for k, v in outcomes.items() if v[0] == "error"}
            if expect_failure:
                for r in missing:
                    outcomes[r] = ("error", f"rank {r} still running after {timeout}s")
            else:
                raise WorldFailure(f"world of {world_size} timed out after {timeout}s; "
                                   f"rank(s) {missing} still running; errors: {errors}",
                                   errors=errors)
        for p in procs:
            p.join(5)
        if expect_failure:
            return [outcomes[r] for r in range(world_size)]
        return [outcomes[r][1] for r in range(world_size)]
    finally:
        _kill(procs)
        for c in conns:
            c.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _kill(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(5)
