"""Spawn a torch.distributed world on N processes for the tests of the meshcast backend.

``run_world(fn, n, backend=...)`` starts ``n`` ranks from a forkserver that
has already imported torch (a world starts in well under a second instead of
paying torch's import in every rank), initializes torch's default group with
``backend`` through a FileStore in a fresh directory, calls
``fn(rank, world_size, **kwargs)`` and returns every rank's return value. The
first failing rank's traceback is raised in the parent, every rank is killed
at ``timeout``, and the shared memory of the job must be gone afterwards.
"""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from meshcast.testing.world import WorldFailure, _context, _kill

# torch.distributed.fsdp also brings in DTensor and DeviceMesh: half a second
# per rank that the FSDP2 and DTensor worlds would otherwise each pay.
PRELOAD = ["numpy", "torch", "torch.distributed", "torch.distributed.fsdp", "meshcast",
           "meshcast.integrations.torch_backend", "torch_bodies"]


def _ctx() -> Any:
    ctx = _context()
    # Effective only if the forkserver has not started yet in this pytest run;
    # otherwise the ranks import torch themselves (slower, same result).
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _child(fn: Callable[..., Any], rank: int, n: int, backend: str | None, path: str,
           op_timeout: float, env: dict[str, str], kwargs: dict[str, Any],
           conn: Connection) -> None:
    os.environ.update(env)
    try:
        import torch.distributed as dist

        import meshcast.integrations.torch  # noqa: F401

        if backend is not None:
            dist.init_process_group(backend, init_method=f"file://{path}", rank=rank,
                                    world_size=n,
                                    timeout=datetime.timedelta(seconds=op_timeout))
        result = fn(rank, n, **kwargs)
        if backend is not None and dist.is_initialized():
            dist.destroy_process_group()
        conn.send(("ok", result))
    except BaseException as exc:  # noqa: BLE001 - everything goes to the parent
        conn.send(("error", f"rank {rank}: {type(exc).__name__}: {exc}\n"
                            f"{traceback.format_exc()}"))
    finally:
        conn.close()


def run_world(fn: Callable[..., Any], n: int, *, backend: str | None = "meshcast",
              timeout: float = 60.0, op_timeout: float | None = None,
              env: dict[str, str] | None = None, expect_failure: bool = False,
              **kwargs: Any) -> list[Any]:
    """Run ``fn(rank, n, **kwargs)`` on ``n`` ranks of a torch world; return the results.

    Args:
        fn: a module-level function of ``torch_bodies``.
        backend: torch backend of the default group (None: no init at all).
        timeout: wall-clock limit of the whole world.
        op_timeout: the process group timeout (default ``timeout / 2``).
        env: extra environment variables of the ranks.
        expect_failure: return ``(status, value)`` per rank instead of raising.

    Raises:
        WorldFailure: a rank failed, crashed or the world timed out.
    """
    ctx = _ctx()
    tmp = tempfile.mkdtemp(prefix="meshcast-torch-")
    path = os.path.join(tmp, "store")
    procs, conns = [], []
    try:
        for rank in range(n):
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(fn, rank, n, backend, path,
                                                 op_timeout or timeout / 2, dict(env or {}),
                                                 kwargs, child), daemon=True)
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        outcomes: dict[int, tuple[str, Any]] = {}
        pending = {c: r for r, c in enumerate(conns)}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for c in wait(list(pending), timeout=0.5):
                r = pending.pop(c)
                try:
                    outcomes[r] = c.recv()
                except EOFError:
                    outcomes[r] = ("error", f"rank {r} died without a report")
                if outcomes[r][0] == "error" and not expect_failure:
                    raise WorldFailure(outcomes[r][1], rank=r)
        if pending:
            if not expect_failure:
                raise WorldFailure(f"world of {n} timed out after {timeout}s; ranks "
                                   f"{sorted(pending.values())} still running")
            for r in pending.values():
                outcomes[r] = ("error", "still running at the timeout")
        if expect_failure:
            return [outcomes[r] for r in range(n)]
        return [outcomes[r][1] for r in range(n)]
    finally:
        _kill(procs)
        for c in conns:
            c.close()
        shutil.rmtree(tmp, ignore_errors=True)
