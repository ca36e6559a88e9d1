"""Writes what really ran (``MESHCAST_TRACE=DIR``): one record per call, per rank.

Theory of operation
-------------------
Tracing must cost nothing when it is off, and the tiny calls take about a
microsecond, so nothing on the call path asks "is tracing on?". Instead, when
the knob is set, :class:`Tracer` *attaches* to each group as the world makes
it: it replaces the group's collective and point-to-point methods, and those
of its tiny-call lane, by recording wrappers on that instance (the class, and
every group of an untraced process, stay as they are). The only other hooks
are the executor's rounds, fetched through ``group.tracer`` on the schedule
path (never on the tiny path).

What a record says comes from where the call really went:

* ``seq`` from the group's own counters (tapped: each wrapper reads the number
  the call drew, so records match across ranks exactly as calls do);
* ``algorithm`` from ``group.last_algorithm``, which every path sets;
* ``lane``/``compiled`` from which object the call went through (the lane
  returns False when a call does not qualify and the group's method then
  runs: only the one that ran is recorded);
* ``rounds`` from the executor, for schedules.

A call made while another call of the same group is running on the same
thread (the lane handing an entered call to the group's method) belongs to
the outer call and is not recorded twice.

Records stay in memory (the flight recorder) and are written in batches; on
a failed call, at exit, on ``destroy_process_group`` and on SIGTERM (which is
how ``meshcast run`` stops the survivors of a failed job) everything is
written, calls still running included with ``end: null``: that is what lets
the hang view say which rank was stuck where. A failed call's exception gets a
note naming this rank's trace file and its last calls.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ops
from .records import VERSION, file_name

BATCH = 512  # finished records kept before a write: one write per batch, not per call
LAST = 8  # calls named in a failed call's note

# Argument positions of what a record shows, per method: (data, root/peer, op, dtype).
# dtype None: the data's own. The group's methods take group ranks, the lane's global.
_GROUP_ARGS: dict[str, tuple[int | None, int | None, int | None, int | None]] = {
    "barrier": (None, None, None, None),
    "broadcast": (0, 1, None, None),
    "all_reduce": (0, None, 1, None),
    "reduce": (0, 2, 1, None),
    "all_gather": (1, None, None, 3),
    "gather": (1, 2, None, 3),
    "scatter": (0, 2, None, 3),
    "reduce_scatter": (1, None, 3, 0),
    "all_to_all": (1, None, None, 4),
    "isend": (0, 1, None, None),
    "irecv": (0, 1, None, None),
}
_LANE_ARGS: dict[str, tuple[int | None, int | None, int | None, int | None]] = {
    "barrier": (None, None, None, None),
    "broadcast": (0, 1, None, None),
    "all_reduce": (0, None, 1, None),
    "all_reduce_async": (0, None, 1, None),
    "broadcast_async": (0, 1, None, None),
    "reduce_async": (0, 2, 1, None),
    "barrier_async": (None, None, None, None),
    "all_gather_async": (1, None, None, None),
    "reduce_scatter_async": (1, None, 2, None),
    "reduce_scatter_list": (1, None, 2, None),
    "all_to_all_split": (1, None, None, None),
    "all_to_all_list": (1, None, None, None),
    "all_to_all_list_async": (1, None, None, None),
    "all_to_all_async": (1, None, None, None),
    "all_to_all_split_async": (1, None, None, None),
    "reduce": (0, 2, 1, None),
    "all_gather": (1, None, None, None),
    "all_gather_list": (1, None, None, None),
    "gather": (0, 2, None, None),
    "scatter": (0, 2, None, None),
    "gather_async": (0, 2, None, None),
    "all_gather_list_async": (1, None, None, None),
    "reduce_scatter_list_async": (1, None, 2, None),
    "scatter_async": (0, 2, None, None),
    "reduce_scatter": (1, None, 2, None),
    "all_to_all": (1, None, None, None),
    "send": (0, 1, None, None),
    "recv": (0, 1, None, None),
    "isend": (0, 1, None, None),
    "irecv": (0, 1, None, None),
    "post_send": (0, 1, None, None),
    "post_recv": (0, 1, None, None),
}
_P2P_KIND = {"send": "send", "isend": "send", "post_send": "send",
             "recv": "recv", "irecv": "recv", "post_recv": "recv"}
# lane methods named apart from their call; those of them that return a Work
_LANE_ASYNC = {"all_reduce_async", "broadcast_async", "all_gather_async",
               "reduce_scatter_async", "reduce_async", "barrier_async", "all_to_all_async",
               "all_to_all_split_async", "gather_async", "scatter_async",
               "all_gather_list_async", "reduce_scatter_list_async", "all_to_all_list_async"}
_LANE_KIND = {"all_gather_list": "all_gather", "reduce_scatter_list": "reduce_scatter",
              "all_to_all_split": "all_to_all", "all_to_all_list": "all_to_all",
              **{name: name.removesuffix("_async").removesuffix("_split").removesuffix("_list")
                 for name in _LANE_ASYNC}}
# last_algorithm's name -> family (anything else is a registered schedule)
_FAMILIES = {"oneshot": "oneshot", "cma": "single_copy", "symmetric": "symmetric",
             "eager": "eager", "agreement": "agreement", "leader": "hierarchical",
             "rails": "hierarchical", "flat": "internode"}


class _Tap:
    """A group's call counter that remembers the number it handed out last."""

    __slots__ = ("_count", "rec")

    def __init__(self, count: Any) -> None:
        self._count = count
        self.rec: dict[str, Any] | None = None  # the record of the call being made

    def __iter__(self) -> _Tap:
        return self

    def __next__(self) -> int:
        n = next(self._count)
        rec = self.rec
        if rec is not None and rec["seq"] is None:  # a call's first number is its seq
            rec["seq"] = n
        return n


def _dtype(x: Any) -> str | None:
    if isinstance(x, str):
        return x
    name = getattr(x, "dtype_name", None)  # a meshcast Buffer
    if name is not None:
        return name
    dtype = getattr(x, "dtype", None)
    return None if dtype is None else str(getattr(dtype, "name", dtype)).replace("torch.", "")


def _size(x: Any) -> tuple[int, int]:
    """(count, bytes) of an array, a Buffer, a tensor or a list of them."""
    if x is None:
        return 0, 0
    if isinstance(x, (list, tuple)):
        sizes = [_size(p) for p in x]
        return sum(s[0] for s in sizes), sum(s[1] for s in sizes)
    if isinstance(x, np.ndarray):
        return x.size, x.nbytes
    nbytes = getattr(x, "nbytes", None)
    count = getattr(x, "count", None)
    if nbytes is not None and isinstance(count, int):
        return count, nbytes
    numel = getattr(x, "numel", None)  # a torch tensor
    if numel is not None:
        n = numel()
        return n, n * x.element_size()
    return 0, 0


def _serial(rec: dict[str, Any]) -> dict[str, Any]:
    """A record as written: rounds' peers as global ranks (the executor notes group ranks)."""
    ranks = rec.get("_ranks")
    if ranks is None:
        return rec
    out = {k: v for k, v in rec.items() if k != "_ranks"}
    out["rounds"] = [dict(r, send=[[ranks[p], b] for p, b in r["send"]],
                          recv=[[ranks[p], b] for p, b in r["recv"]])
                     for r in list(rec["rounds"])]
    return out


def _op_name(op: Any) -> str | None:
    return None if op is None else str(getattr(op, "name", op))


def _folds_compiled(op: str | None, dtype: str | None) -> bool:
    """Whether a call reducing with ``op`` (a name; None: no reduction) on ``dtype`` folds
    in the compiled helper's kernels (ops.compiled_kernel, which both lanes use)."""
    if op is None:
        return True
    try:
        rop = ops.ReduceOp[op]
        dt = ops.BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    except (KeyError, TypeError):
        return False
    combine = ops.ReduceOp.SUM if rop is ops.ReduceOp.AVG else rop
    return ops.compiled_kernel(combine, dt) is not None


class Tracer:
    """One process's recorder: attach it to groups, it writes ``DIR/rank-NNNNN.jsonl``.

    Args:
        directory: where to write (made if missing).
        rank, world_size: this process's global rank and the world's size.
        host: this process's host, for the header.
    """

    def __init__(self, directory: str, rank: int, world_size: int, host: str) -> None:
        from .. import __version__

        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, file_name(rank))
        self.rank = rank
        self._lock = threading.Lock()
        self._local = threading.local()  # per thread: ids of groups inside a recorded call
        self._pending: list[dict[str, Any]] = []  # in call order; unfinished ones included
        self._ranks: dict[int, list[int]] = {}  # group id() -> its global ranks
        self._closed = False
        self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - lives with the process
        self._write([{"type": "header", "version": VERSION, "rank": rank,
                      "world_size": world_size, "host": host, "pid": os.getpid(),
                      "start": time.time_ns(), "meshcast": __version__}])
        atexit.register(self.close)
        self._chain_sigterm()

    # ------------------------------------------------------------- attaching

    def attach(self, group: Any) -> None:
        """Record every call ``group`` (and its tiny-call lane, if any) runs from now on."""
        engine = getattr(group, "internode", None)
        self._ranks[id(group)] = list(group.global_ranks)
        self._append({"type": "group", "group": group.group_name, "id": group.group_id,
                      "ranks": list(group.global_ranks),
                      "engine": "shm" if engine is None else f"shm+{str(engine).split()[0]}"})
        group._seq = _Tap(group._seq)
        group._p2p_seq = _Tap(group._p2p_seq)
        group.tracer = self
        for name, where in _GROUP_ARGS.items():
            method = getattr(group, name, None)
            if method is not None:
                setattr(group, name, self._wrap(group, name, method, where, lane=False))
        lane = getattr(group, "lane", None)
        if lane is not None:
            for name, where in _LANE_ARGS.items():
                method = getattr(lane, name, None)
                if method is not None:
                    setattr(lane, name, self._wrap(group, name, method, where, lane=True))
            # a batch_isend_irecv then takes the lane's post_send and post_recv, recorded
            # (its compiled twin would count the messages past the tap)
            lane.batch = None

    def rounds_of(self, group: Any, seq: int) -> list[dict[str, Any]]:
        """The list the executor fills with call ``seq``'s rounds (peers as group
        ranks, written as global ranks), attached to the call's record at once so
        that a call stopped mid-way shows its rounds so far."""
        rounds: list[dict[str, Any]] = []
        name = group.group_name
        with self._lock:
            for rec in reversed(self._pending):
                if (rec.get("type") == "call" and rec["seq"] == seq and rec["group"] == name
                        and rec["kind"] not in ("send", "recv")):
                    rec["rounds"] = rounds
                    rec["_ranks"] = self._ranks[id(group)]
                    break
        return rounds

    def _wrap(self, group: Any, name: str, method: Callable[..., Any],
              where: tuple[int | None, int | None, int | None, int | None], *, lane: bool
              ) -> Callable[..., Any]:
        p2p = _P2P_KIND.get(name)
        kind = p2p or _LANE_KIND.get(name, name)
        async_lane = lane and name in _LANE_ASYNC
        data_at, root_at, op_at, dtype_at = where
        tap_name = "_p2p_seq" if p2p else "_seq"
        gid = id(group)
        # the lane's calls run the compiled helper when the arena has one (one host), or
        # when the group's exchange of rows has the compiled runner (across hosts)
        compiled = lane and (
            getattr(getattr(group, "arena", None), "compiled_oneshot", None) is not None
            or name in getattr(getattr(group, "lane", None), "compiled", ()))

        def recorded(*args: Any, **kwargs: Any) -> Any:
            busy = self._busy()
            if gid in busy:
                return method(*args, **kwargs)  # part of the call being recorded
            tap = getattr(group, tap_name)
            rec = self._record(group, kind, args, data_at, root_at, op_at, dtype_at, lane)
            # (a reduction the compiled kernels lack, e.g. complex, folds in NumPy)
            rec["compiled"] = compiled and _folds_compiled(rec["op"], rec["dtype"])
            # In the list from the start: a rank stopped inside the call still shows it.
            with self._lock:
                self._pending.append(rec)
            busy.add(gid)
            tap.rec = rec  # the number the call draws is its seq
            chosen = group.last_algorithm
            if not lane and hasattr(group, "last_compiled"):
                group.last_compiled = False  # a one-shot program that runs compiled says so
            try:
                result = method(*args, **kwargs)
            except BaseException as exc:
                # Failed before choosing (in the entry round): what the group says is the
                # call before's; write null rather than a wrong name.
                self._finish(rec, group, exc,
                             chose=group.last_algorithm != chosen or bool(rec["rounds"]))
                self._failed(exc)
                raise
            finally:
                tap.rec = None
                busy.discard(gid)
            if lane and (result is False or result is None):
                self._drop(rec)  # did not qualify: the group's own method runs it next
                return result
            future = getattr(result, "get_future", None)
            if future is not None and (p2p or async_lane or kwargs.get("async_op")):
                rec["async"] = True
                future().add_done_callback(lambda f: self._finish(rec, group, f.exception()))
            else:
                self._finish(rec, group, None)
            return result

        recorded.__wrapped__ = method  # type: ignore[attr-defined]
        recorded.__doc__ = method.__doc__
        return recorded

    # -------------------------------------------------------------- records

    def _busy(self) -> set[int]:
        busy = getattr(self._local, "busy", None)
        if busy is None:
            busy = self._local.busy = set()
        return busy

    def _record(self, group: Any, kind: str, args: tuple, data_at: int | None,
                root_at: int | None, op_at: int | None, dtype_at: int | None, lane: bool
                ) -> dict[str, Any]:
        data = args[data_at] if data_at is not None and data_at < len(args) else None
        count, nbytes = _size(data)
        dtype = None
        if dtype_at is not None and dtype_at < len(args):
            dtype = _dtype(args[dtype_at])
        elif data is not None:
            dtype = _dtype(data[0] if isinstance(data, (list, tuple)) and data else data)
        root = args[root_at] if root_at is not None and root_at < len(args) else None
        if isinstance(root, (int, np.integer)) and not lane:
            root = group.global_ranks[int(root)]  # the group's methods take group ranks
        rec: dict[str, Any] = {
            "type": "call", "group": group.group_name, "seq": None, "kind": kind,
            "dtype": dtype, "count": int(count), "bytes": int(nbytes),
            "root": None, "peer": None, "tag": None,
            "op": _op_name(args[op_at]) if op_at is not None and op_at < len(args) else None,
            "algorithm": None, "family": None, "lane": lane, "compiled": False,
            "async": False, "begin": time.time_ns(), "end": None, "error": None, "rounds": [],
        }
        if kind in ("send", "recv"):
            rec["peer"] = None if root is None else int(root)
            rec["tag"] = args[2] if len(args) > 2 else None
            rec["family"] = "p2p"
        elif root is not None:
            rec["root"] = int(root)
        return rec

    def _drop(self, rec: dict[str, Any]) -> None:
        with self._lock:
            for i in range(len(self._pending) - 1, -1, -1):
                if self._pending[i] is rec:
                    del self._pending[i]
                    break

    def _finish(self, rec: dict[str, Any], group: Any, exc: BaseException | None,
                chose: bool = True) -> None:
        rec["end"] = time.time_ns()
        if chose and rec["kind"] not in ("send", "recv"):
            algorithm = group.last_algorithm
            rec["algorithm"] = algorithm
            if not rec["lane"]:
                rec["compiled"] = bool(getattr(group, "last_compiled", False))
            if algorithm:
                name = algorithm.partition("/")[2]
                rec["family"] = _FAMILIES.get(name, "schedule")
        if exc is not None:
            rec["error"] = f"{type(exc).__name__}: {exc}"
        if len(self._pending) >= BATCH:
            with self._lock:
                self._flush_done()

    def _append(self, rec: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append(rec)

    # -------------------------------------------------------------- writing

    def _write(self, records: list[dict[str, Any]]) -> None:
        if records and not self._file.closed:
            self._file.write("".join(json.dumps(_serial(r), separators=(",", ":")) + "\n"
                                     for r in records))
            self._file.flush()

    def _flush_done(self) -> None:
        """Write the finished records that precede the first unfinished one (lock held)."""
        pending = self._pending
        cut = 0
        while cut < len(pending) and (pending[cut].get("type") != "call"
                                      or pending[cut]["end"] is not None):
            cut += 1
        self._write(pending[:cut])
        del pending[:cut]

    def flush(self) -> None:
        """Write everything recorded so far, unfinished calls included (``end: null``);
        an unfinished call is written again once it finishes (readers keep the last)."""
        with self._lock:
            self._write(self._pending)
            self._pending = [r for r in self._pending
                             if r.get("type") == "call" and r["end"] is None]

    def last_calls(self) -> list[dict[str, Any]]:
        """This rank's most recent calls still in memory (the flight recorder)."""
        with self._lock:
            return [r for r in self._pending if r.get("type") == "call"][-LAST:]

    def _failed(self, exc: BaseException) -> None:
        calls = self.last_calls()
        self.flush()
        if hasattr(exc, "add_note") and not getattr(exc, "_meshcast_traced", False):
            shown = ", ".join(
                f"{c['kind']} #{c['seq']} on {c['group']}"
                + (" (running)" if c["end"] is None else " (failed)" if c["error"] else "")
                for c in calls)
            exc.add_note(f"meshcast trace of rank {self.rank}: {self.path}"
                         + (f"; its last calls: {shown}" if shown else ""))
            try:
                exc._meshcast_traced = True  # type: ignore[attr-defined]
            except AttributeError:
                pass

    def close(self) -> None:
        """Write everything and close the file (at exit and on destroy)."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        self._file.close()

    def _chain_sigterm(self) -> None:
        """On SIGTERM, write the trace before dying the way the signal would have."""
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: Any) -> None:
            self.flush()
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        try:
            signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main interpreter
            pass


_PROCESS_TRACER: Tracer | None = None


def process_tracer(directory: str, rank: int, world_size: int, host: str) -> Tracer:
    """This process's tracer, made on first use: a process that initialises, destroys
    and initialises again keeps appending to one file (opened once, truncated once)."""
    global _PROCESS_TRACER
    t = _PROCESS_TRACER
    if t is None or t._closed or t.rank != rank or os.path.dirname(t.path) != os.path.abspath(
            directory):
        if t is not None:
            t.close()
        t = _PROCESS_TRACER = Tracer(os.path.abspath(directory), rank, world_size, host)
    return t
