"""meshcast as a ``torch.distributed`` backend: ``init_process_group("meshcast")``.

Theory of operation
-------------------
torch 2.13 accepts a third-party backend written in Python only as a
subclass of ``torch.distributed.ProcessGroup`` (the C++ ``Backend`` class
cannot be subclassed from Python). :class:`MeshcastProcessGroup` is that
subclass: a shim that turns each call torch makes (lists of tensors plus an
options struct, ranks already translated to group ranks) into one call of a
meshcast :class:`~meshcast.group.ProcessGroup` method on flat NumPy views of
the tensors (no copy for contiguous CPU tensors, see
:func:`meshcast.buffers.as_buffer`), and wraps the meshcast ``Work`` it gets
back in a :class:`MeshcastWork`, a ``torch.distributed.Work`` subclass.

Rule 1: one engine per torch world. The creator torch calls for the default
group brings up a meshcast :class:`~meshcast._world.World` from torch's
per-group store; every later ``new_group``/``new_subgroups`` group is a
``World.make_group`` on it, with a group id derived from torch's group name
(identical on every member, disjoint from the ids meshcast's own
``new_group`` hands out). A meshcast group under a default group of another
backend (``init_process_group("gloo")`` then ``new_group(backend="meshcast")``)
gets a private World whose ranks are the group's ranks.

Rule 2: coexistence with meshcast's own API. If ``meshcast`` itself is not
initialized when torch's default group comes up, the torch World also becomes
meshcast's current world, so ``meshcast.all_reduce(ndarray)`` works next to
``torch.distributed`` in the same job and on the same engine (do not call
``meshcast.init_process_group`` then; ``torch.distributed.destroy_process_group``
ends both). If meshcast was initialized first, the two worlds stay separate
and each keeps its own groups.

Rule 3: ordering. Collectives of a group run in the order torch issued them
(meshcast numbers each call when it is made and runs it on the group's FIFO);
a synchronous call (``asyncOp=False``) on an idle group runs inline in the
caller's thread. Sends and receives bypass the FIFO and go straight to the
shared-memory transport, whose progress thread completes them, so the
issue-in-list-order ``batch_isend_irecv`` torch uses for Python process
groups cannot deadlock.

Rule 4: errors. Every meshcast failure reaches torch as an exception that is
both a ``torch.distributed.DistBackendError`` and the original meshcast
class (``CommTimeout`` is also a ``TimeoutError``...), carrying meshcast's
message: from the method itself, from ``Work.wait()``, from the future of
``Work.get_future()`` and from ``Work.exception()``.

Under ``meshcast run`` the job's store is meshcast's own authenticated TCP
store, which torch's ``TCPStore`` client cannot speak; :func:`register`
therefore routes torch's ``env://`` rendezvous to it (only when
``MESHCAST_STORE_HOSTED=1`` says the launcher hosts that store), so any
torch script, whatever its backend, starts under ``meshcast run`` as under
torchrun.
"""

from __future__ import annotations

import datetime
import functools
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import numpy as np

from ..buffers import Buffer
from ..rendezvous.torch_store import for_torch, wait_seconds

BACKEND_NAME = "meshcast"

#: Group ids of torch's subgroups start here; meshcast's own ``new_group``
#: counts up from 1 on the same World, so the two never meet.
_TORCH_GROUP_IDS = 1 << 20

_lock = threading.Lock()
_registered = False


# ---------------------------------------------------------------- registration


def register() -> None:
    """Make ``"meshcast"`` a ``torch.distributed`` backend name (idempotent).

    Registers :func:`_create_process_group` for the CPU with
    ``Backend.register_backend(..., extended_api=True, devices=["cpu"])``
    and, under ``meshcast run``, routes torch's ``env://`` rendezvous to the
    store the launcher hosts. ``import torch`` calls this through the
    ``torch.backends`` entry point; ``import meshcast.integrations.torch``
    calls it too.

    Example::

        >>> import torch.distributed as dist
        >>> dist.init_process_group("meshcast")   # under torchrun or meshcast run
    """
    global _registered
    import torch.distributed as dist

    with _lock:
        if _registered:
            return
        if BACKEND_NAME.upper() not in dist.Backend._plugins:
            dist.Backend.register_backend(BACKEND_NAME, _create_process_group,
                                          extended_api=True, devices=["cpu"])
        _route_env_rendezvous()
        _registered = True


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group, run at the end of ``import torch``.

    A failure here would make ``import torch`` itself fail, so it is turned
    into a warning (``init_process_group("meshcast")`` then says the name is
    unknown, and ``import meshcast.integrations.torch`` shows the real error).
    """
    try:
        register()
    except Exception as exc:  # noqa: BLE001 - never break `import torch`
        import warnings

        warnings.warn(f"meshcast: could not register the torch backend: {exc!r}", stacklevel=2)


# ----------------------------------------------------------------- errors


_error_types: dict[type, type] = {}


def _torch_error(exc: BaseException) -> BaseException:
    """``exc`` as an exception torch callers catch: DistBackendError *and* its own class."""
    import torch.distributed as dist

    from ..errors import MeshcastError

    if isinstance(exc, dist.DistError) or not isinstance(exc, Exception):
        return exc
    if not isinstance(exc, MeshcastError):
        err = dist.DistBackendError(f"meshcast: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        return err
    cls = type(exc)
    combined = _error_types.get(cls)
    if combined is None:
        # Named like the meshcast class so tracebacks read "CommTimeout: ...".
        combined = type(cls.__name__, (dist.DistBackendError, cls),
                        {"__module__": cls.__module__, "__doc__": cls.__doc__})
        _error_types[cls] = combined
    err = combined(*exc.args)
    err.__dict__.update(exc.__dict__)
    err.__traceback__ = exc.__traceback__
    return err


def _raise_for_torch(exc: BaseException) -> NoReturn:
    """Raise :func:`_torch_error` of ``exc``.

    A meshcast error arrives with its own message and traceback and nothing
    chained. Anything else is a bug somewhere (a NumPy ``ValueError``...): it
    stays chained as the cause, so its traceback, the only clue to where it
    happened, is printed.
    """
    err = _torch_error(exc)
    raise err from err.__cause__


def _translated(method: Callable[..., Any]) -> Callable[..., Any]:
    """Raise meshcast's failures of a backend method as torch-style errors."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            _raise_for_torch(exc)

    return wrapper


# ------------------------------------------------------------------- work


def _make_work_class() -> type:
    import torch
    import torch.distributed as dist

    class MeshcastWork(dist.Work):
        """The ``torch.distributed.Work`` of one meshcast call (or several, coalesced).

        ``wait()`` re-raises meshcast's failure as a ``DistBackendError``;
        ``get_future()`` is a ``torch.futures.Future`` whose value is the list
        of output tensors; ``_source_rank()`` gives the sender of a receive
        from any rank (a group rank).

        ``p2p``: some of ``works`` are sends or receives. Those complete when
        someone waits on them (or polls them), whatever the group: the
        shared-memory ``P2PWork`` of one host and the inter-host engine's
        request alike, so their future is settled by a waiter thread instead
        of a completion callback.
        """

        def __init__(self, works: Sequence[Any], outputs: list[Any],
                     group_rank_of: Callable[[int], int] | None = None,
                     p2p: bool = False) -> None:
            super().__init__()
            self._works = list(works)
            self._outputs = outputs
            self._group_rank_of = group_rank_of
            self._p2p = p2p
            self._future: Any = None
            self._future_lock = threading.Lock()

        def wait(self, timeout: Any = None) -> bool:
            seconds = wait_seconds(timeout)
            try:
                for w in self._works:
                    w.wait(seconds)
            except Exception as exc:
                _raise_for_torch(exc)
            return True

        def is_completed(self) -> bool:
            return all(w.is_completed() for w in self._works)

        def is_success(self) -> bool:
            return all(w.is_success() for w in self._works)

        def exception(self) -> BaseException | None:
            for w in self._works:
                exc = w.exception()
                if exc is not None:
                    return _torch_error(exc)
            return None

        def result(self) -> list[Any]:
            self.wait()
            return self._outputs

        def _source_rank(self) -> int:
            source = self._works[0].source_rank if self._works else None
            if source is None:
                return -1
            return self._group_rank_of(source) if self._group_rank_of else source

        def source_rank(self) -> int:
            return self._source_rank()

        def synchronize(self) -> None:
            """CPU work has no stream to synchronize with."""

        def get_future(self) -> Any:
            """A ``torch.futures.Future`` completed with the outputs (or the failure)."""
            with self._future_lock:
                if self._future is None:
                    self._future = torch.futures.Future()
                    self._complete_future_later(self._future)
                return self._future

        def _complete_future_later(self, fut: Any) -> None:
            def settle() -> None:
                exc = self.exception()
                if exc is None:
                    fut.set_result(self._outputs)
                else:
                    fut.set_exception(exc)

            if self._p2p:
                # A send/receive completes when someone waits on it: do so off-thread.
                def waiter() -> None:
                    for w in self._works:
                        try:
                            w.wait()
                        except Exception:  # noqa: BLE001, S110 - exception() reports it
                            pass
                    settle()

                threading.Thread(target=waiter, name="meshcast-future", daemon=True).start()
                return
            remaining = [len(self._works)]
            count_lock = threading.Lock()

            def one_done(_: Any) -> None:
                with count_lock:
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    settle()

            if not self._works:
                settle()
            for w in self._works:
                # Runs on the thread that completes the work (torch runs .then
                # callbacks, e.g. DDP comm hooks, on the setting thread too).
                w.get_future().add_done_callback(one_done)

        def __repr__(self) -> str:
            return f"<MeshcastWork {self._works!r}>"

    return MeshcastWork


@functools.cache
def _work_class() -> type:
    return _make_work_class()


# ---------------------------------------------------------------- helpers


def _reduce_op(op: Any, dtype_name: str, caller: str) -> tuple[Any, float | None]:
    """torch's ReduceOp as (meshcast ReduceOp, PREMUL_SUM factor or None)."""
    from .._api import _op

    kind = getattr(op, "op", op)
    if getattr(kind, "name", None) == "PREMUL_SUM":
        factor = op.factor
        factor = float(factor.item() if hasattr(factor, "item") else factor)
        return _op("SUM", dtype_name, caller), factor
    return _op(kind, dtype_name, caller), None


_LANE_OPS: dict[Any, Any] = {}  # torch's RedOpType -> meshcast ReduceOp (PREMUL_SUM: None)


def _lane_op(op: Any) -> Any:
    """The meshcast ReduceOp the tiny-call lane takes for torch's ``op``, or None (PREMUL_SUM,
    whose factor needs the general path). The lane itself checks it against the dtype."""
    kind = getattr(op, "op", op)
    try:
        return _LANE_OPS[kind]
    except KeyError:
        pass
    from ..ops import ReduceOp

    mine = ReduceOp.__members__.get(getattr(kind, "name", ""))
    _LANE_OPS[kind] = mine
    return mine


def _scaled(flat: np.ndarray, dtype_name: str, factor: float) -> np.ndarray:
    """A new array holding ``factor * flat`` in the same storage dtype (PREMUL_SUM's first step)."""
    from ..buffers import bf16_to_f32, f32_to_bf16

    if dtype_name == "bfloat16":
        return f32_to_bf16(bf16_to_f32(flat) * np.float32(factor))
    return (flat * factor).astype(flat.dtype, copy=False)


class _Written(Buffer):
    """A Buffer whose ``finish()`` (run by the group's FIFO when the call succeeded) also runs ``after``."""

    __slots__ = ("_after",)

    def __init__(self, buf: Buffer, flat: np.ndarray, after: Callable[[], None] | None = None
                 ) -> None:
        super().__init__(flat, buf.dtype_name, buf.shape, buf.source,
                         staged=flat is not buf.flat or buf._staged)
        self._after = after

    def finish(self) -> None:
        super().finish()
        if self._after is not None:
            self._after()


def _premultiplied(buf: Buffer, factor: float) -> Buffer:
    """A staged copy of ``buf`` times ``factor`` whose ``finish()`` writes into ``buf``'s object."""
    return _Written(buf, _scaled(buf.flat, buf.dtype_name, factor))


def _group_id(name: str) -> int:
    """The meshcast group id of torch group ``name`` (the same on every member)."""
    if name.isdigit():
        return _TORCH_GROUP_IDS + int(name)
    # Hashed names (use_local_synchronization) or user-chosen ones: a stable
    # hash above every counter-derived id.
    return (1 << 30) | (zlib.crc32(name.encode()) & ((1 << 30) - 1))


# ----------------------------------------------------------- process group


class _WorldState:
    """The World brought up for torch's current default group, if it is meshcast."""

    world: Any = None


_state = _WorldState()


def _make_pg_class() -> type:
    import torch
    import torch.distributed as dist

    # torch.distributed re-exports every options struct but this one (torch 2.13).
    from torch._C._distributed_c10d import AllgatherOptions

    from .._api import (
        _concat,
        _gather_target,
        _list,
        _no_lane,
        _same_dtype,
        _scatter_back,
        _splits,
        _torch_view,
    )
    from ..buffers import as_buffer
    from ..errors import usage
    from ..group import ProcessGroup
    from ..spanning import HostSpanningGroup

    MeshcastWork = _work_class()

    class MeshcastProcessGroup(dist.ProcessGroup):
        """A ``torch.distributed`` process group running on meshcast's engine.

        Built by torch through the registered creator; use
        ``dist.init_process_group("meshcast")`` and ``dist.new_group(...)``.
        The collective methods are torch's backend contract (torch 2.13 names
        and the older aliases): lists of tensors and an options struct in,
        ranks already translated to group ranks, a :class:`MeshcastWork` out.

        Args:
            group: the meshcast group it runs on.
            world: the meshcast World that holds ``group``.
            owns_world: closing this group closes ``world`` (the default
                group, or a group with a private World).
        """

        def __init__(self, group: Any, world: Any, owns_world: bool) -> None:
            # The 3-argument (store, rank, size) constructor fails for Python
            # subclasses in torch 2.13; torch keeps the store, we keep ours.
            super().__init__(group.rank(), group.size())
            self._group = group
            self._world = world
            self._owns_world = owns_world
            self._name = ""
            self._desc = ""
            self._coalesced: list[Any] | None = None
            self._coalesced_p2p = False
            self._closed = False

        # ----------------------------------------------------------- naming

        def getBackendName(self) -> str:  # noqa: N802 - torch's name
            return BACKEND_NAME

        def getGroupName(self) -> str:  # noqa: N802
            return self._name

        def setGroupName(self, name: str) -> None:  # noqa: N802
            self._name = name

        def getGroupDesc(self) -> str:  # noqa: N802
            return self._desc

        def setGroupDesc(self, desc: str) -> None:  # noqa: N802
            self._desc = desc

        @property
        def meshcast_group(self) -> Any:
            """The meshcast ProcessGroup underneath (for meshcast's own functions)."""
            return self._group

        def __repr__(self) -> str:
            return (f"<MeshcastProcessGroup {self._name or '?'} rank {self._group.rank()}/"
                    f"{self._group.size()}>")

        # ---------------------------------------------------------- helpers

        def _buf(self, t: Any, name: str, caller: str, writable: bool = True) -> Any:
            return as_buffer(t, name=name, caller=caller, rank=self._world.rank,
                             writable=writable)

        def _done(self, works: Sequence[Any], outputs: list[Any],
                  group_rank_of: Callable[[int], int] | None = None, p2p: bool = False) -> Any:
            # meshcast returns None for a synchronous call: it already succeeded.
            works = [w for w in works if w is not None]
            if self._coalesced is not None:
                self._coalesced.extend(works)
                self._coalesced_p2p = self._coalesced_p2p or p2p
            return MeshcastWork(works, outputs, group_rank_of, p2p)

        @staticmethod
        def _async(opts: Any) -> bool:
            return bool(getattr(opts, "asyncOp", True))

        def _lane_lists(self, tensor: Any, pieces: Any
                        ) -> tuple[Any, np.ndarray, list[np.ndarray] | None] | None:
            """:meth:`_lane_arrays` for a call on ``tensor`` and the list ``pieces`` (None:
            none given, as off a rooted call's root): ``(lane, array, arrays or None)``."""
            if pieces is None:
                tiny = self._lane_arrays((tensor,))
                return None if tiny is None else (tiny[0], tiny[1][0], None)
            if type(pieces) is not list:
                return None
            tiny = self._lane_arrays((tensor, *pieces))
            return None if tiny is None else (tiny[0], tiny[1][0], tiny[1][1:])

        def _lane_arrays(self, tensors: Sequence[Any]) -> tuple[Any, list[np.ndarray]] | None:
            """(lane, each tensor's memory as an ndarray) when a call may take the group's
            compiled tiny-call lane, as the front door's calls do, synchronous or async
            (the lane then decides whether the call qualifies); else None."""
            group = self._group
            if (self._coalesced is not None
                    or type(group) not in (ProcessGroup, HostSpanningGroup)
                    or group not in self._world.groups):
                return None
            arrays = [_torch_view(t) for t in tensors]
            return None if any(a is None for a in arrays) else (group.lane, arrays)

        # ------------------------------------------------------ collectives

        @_translated
        def broadcast(self, tensors: list[Any], opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.BroadcastOptions()
            tiny = self._lane_arrays(tensors) if len(tensors) == 1 else None
            if tiny is not None:
                src = self._group.global_ranks[opts.rootRank]
                if not self._async(opts):
                    if tiny[0].broadcast(tiny[1][0], src):
                        return MeshcastWork((), tensors)
                else:  # started here, finished by the worker if need be (see allreduce)
                    work = getattr(tiny[0], "broadcast_async", _no_lane)(tiny[1][0], src)
                    if work is not None:
                        return self._done([work], tensors)
            works = [self._group.broadcast(self._buf(t, "tensor", "broadcast"), opts.rootRank,
                                           async_op=self._async(opts)) for t in tensors]
            return self._done(works, tensors)

        @_translated
        def allreduce(self, tensors: list[Any], opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.AllreduceOptions()
            tiny = self._lane_arrays(tensors) if len(tensors) == 1 else None
            op = _lane_op(opts.reduceOp) if tiny is not None else None
            if op is not None:
                if not self._async(opts):
                    if tiny[0].all_reduce(tiny[1][0], op):
                        return MeshcastWork((), tensors)
                else:  # DDP's buckets: started here, finished by the worker if need be
                    work = getattr(tiny[0], "all_reduce_async", _no_lane)(tiny[1][0], op)
                    if work is not None:
                        return self._done([work], tensors)
            works = []
            for t in tensors:
                buf = self._buf(t, "tensor", "all_reduce")
                op, factor = _reduce_op(opts.reduceOp, buf.dtype_name, "all_reduce")
                if factor is not None:
                    buf = _premultiplied(buf, factor)
                works.append(self._group.all_reduce(buf, op, async_op=self._async(opts)))
            return self._done(works, tensors)

        @_translated
        def allreduce_coalesced(self, tensors: list[Any], opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
            if len({t.dtype for t in tensors}) != 1:
                # One all_reduce each: the group's FIFO keeps them in order.
                return self.allreduce(tensors, opts)
            # One collective over the concatenation, as gloo does.
            with torch.no_grad():
                flat = torch.cat([t.detach().reshape(-1) for t in tensors])
            buf = self._buf(flat, "tensors", "all_reduce_coalesced")
            op, factor = _reduce_op(opts.reduceOp, buf.dtype_name, "all_reduce_coalesced")
            if factor is not None:
                buf.flat[...] = _scaled(buf.flat, buf.dtype_name, factor)

            def unflatten() -> None:
                with torch.no_grad():
                    for t, piece in zip(tensors, flat.split([t.numel() for t in tensors])):
                        t.detach().copy_(piece.view_as(t))

            work = self._group.all_reduce(_Written(buf, buf.flat, unflatten), op,
                                          async_op=self._async(opts))
            return self._done([work], tensors)

        @_translated
        def reduce(self, tensors: list[Any], opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.ReduceOptions()
            tiny = self._lane_arrays(tensors) if len(tensors) == 1 else None
            op = _lane_op(opts.reduceOp) if tiny is not None else None
            if op is not None:
                dst = self._group.global_ranks[opts.rootRank]
                if not self._async(opts):
                    if tiny[0].reduce(tiny[1][0], op, dst):
                        return MeshcastWork((), tensors)
                else:  # started here, finished by the worker if need be (see allreduce)
                    work = getattr(tiny[0], "reduce_async", _no_lane)(tiny[1][0], op, dst)
                    if work is not None:
                        return self._done([work], tensors)
            works = []
            for t in tensors:
                buf = self._buf(t, "tensor", "reduce")
                op, factor = _reduce_op(opts.reduceOp, buf.dtype_name, "reduce")
                if factor is not None:
                    buf = _premultiplied(buf, factor)
                works.append(self._group.reduce(buf, op, opts.rootRank,
                                                async_op=self._async(opts)))
            return self._done(works, tensors)

        def _all_gather_list(self, outs: list[Any], inp: Any, caller: str,
                             async_op: bool) -> Any:
            """all_gather of ``inp`` into ``outs`` (one output per rank, rank-major)."""
            _same_dtype(outs, inp.dtype_name, "output_tensor_list", caller)
            counts = [b.count for b in outs]
            flat = _gather_target(outs, inp.flat.dtype)
            return self._group.all_gather(flat, inp.flat, counts, inp.dtype_name,
                                          lambda: _scatter_back(flat, outs), async_op=async_op)

        @_translated
        def allgather(self, output_lists: list[list[Any]], tensors: list[Any],
                      opts: Any = None) -> Any:
            opts = opts if opts is not None else AllgatherOptions()
            tiny = (self._lane_lists(tensors[0], output_lists[0])
                    if len(tensors) == 1 and len(output_lists) == 1 else None)
            if tiny is not None:
                lane, arr, arrs = tiny
                if not self._async(opts):
                    if getattr(lane, "all_gather_list", _no_lane)(arrs, arr):
                        return MeshcastWork((), output_lists)
                else:  # started here, finished by the worker if need be (see allreduce)
                    work = getattr(lane, "all_gather_list_async", _no_lane)(arrs, arr)
                    if work is not None:
                        return self._done([work], output_lists)
            n = self._group.size()
            works = []
            for outputs, t in zip(output_lists, tensors):
                inp = self._buf(t, "tensor", "all_gather", writable=False)
                outs = [self._buf(o, f"tensor_list[{i}]", "all_gather")
                        for i, o in enumerate(_list(outputs, "tensor_list", "all_gather", n))]
                works.append(self._all_gather_list(outs, inp, "all_gather", self._async(opts)))
            return self._done(works, output_lists)

        @_translated
        def allgather_coalesced(self, output_lists: list[list[Any]], tensors: list[Any],
                                opts: Any = None) -> Any:
            opts = opts if opts is not None else AllgatherOptions()
            caller = "all_gather_coalesced"
            ins = [self._buf(t, f"input_tensor_list[{i}]", caller, writable=False)
                   for i, t in enumerate(tensors)]
            n = self._group.size()
            # output_lists[r][j] receives rank r's tensors[j]: rank-major, like the wire.
            outs = [self._buf(o, f"output_tensor_lists[{r}][{j}]", caller)
                    for r, row in enumerate(_list(output_lists, "output_tensor_lists", caller, n))
                    for j, o in enumerate(row)]
            if not ins:
                return self._done([], output_lists)
            _same_dtype(ins, ins[0].dtype_name, "input_tensor_list", caller)
            counts = [sum(b.count for b in outs[r * len(ins):(r + 1) * len(ins)])
                      for r in range(n)]
            _same_dtype(outs, ins[0].dtype_name, "output_tensor_lists", caller)
            flat = np.empty(sum(counts), ins[0].flat.dtype)
            work = self._group.all_gather(flat, _concat(ins, ins[0].flat.dtype), counts,
                                          ins[0].dtype_name, lambda: _scatter_back(flat, outs),
                                          async_op=self._async(opts))
            return self._done([work], output_lists)

        def _gather_single(self, output: Any, input: Any, caller: str,  # noqa: A002
                           async_op: bool) -> Any:
            out = self._buf(output, "output_tensor", caller)
            inp = self._buf(input, "input_tensor", caller, writable=False)
            _same_dtype([out], inp.dtype_name, "output_tensor", caller)
            n = self._group.size()
            if out.count != inp.count * n:
                raise usage(caller, f"'output_tensor' holds {out.count} elements; it must "
                                    f"hold world_size ({n}) x {inp.count}", self._world.rank)
            return self._group.all_gather(out.flat, inp.flat, [inp.count] * n, inp.dtype_name,
                                          out.finish, async_op=async_op)

        @_translated
        def all_gather_single(self, output: Any, input: Any,  # noqa: A002
                              opts: Any = None) -> Any:
            opts = opts if opts is not None else AllgatherOptions()
            tiny = self._lane_arrays((output, input))
            if tiny is not None:
                if not self._async(opts):
                    if tiny[0].all_gather(*tiny[1]):
                        return MeshcastWork((), [output])
                else:  # FSDP's gathers: started here, finished by the worker if need be
                    work = getattr(tiny[0], "all_gather_async", _no_lane)(*tiny[1])
                    if work is not None:
                        return self._done([work], [output])
            work = self._gather_single(output, input, "all_gather_into_tensor",
                                       self._async(opts))
            return self._done([work], [output])

        _allgather_base = all_gather_single

        @_translated
        def all_gather_single_coalesced(self, outputs: list[Any], inputs: list[Any],
                                        opts: Any = None) -> Any:
            opts = opts if opts is not None else AllgatherOptions()
            works = [self._gather_single(o, i, "all_gather_into_tensor_coalesced",
                                         self._async(opts)) for o, i in zip(outputs, inputs)]
            return self._done(works, outputs)

        allgather_into_tensor_coalesced = all_gather_single_coalesced

        @_translated
        def gather(self, output_lists: list[list[Any]], tensors: list[Any],
                   opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.GatherOptions()
            caller, root, g = "gather", opts.rootRank, self._group
            # (torch gives the root [gather_list], the others [])
            tiny = (self._lane_lists(tensors[0], output_lists[0] if output_lists
                                     and g.rank() == root else None)
                    if len(tensors) == 1 else None)
            if tiny is not None:
                lane, arr, arrs = tiny
                if not self._async(opts):
                    if lane.gather(arr, arrs, g.global_ranks[root]):
                        return MeshcastWork((), output_lists)
                else:  # started here, finished by the worker if need be (see allreduce)
                    work = getattr(lane, "gather_async", _no_lane)(arr, arrs,
                                                                   g.global_ranks[root])
                    if work is not None:
                        return self._done([work], output_lists)
            inp = self._buf(tensors[0], "tensor", caller, writable=False)
            outs, expected = [], None
            if g.rank() == root:
                outs = [self._buf(o, f"gather_list[{i}]", caller) for i, o in
                        enumerate(_list(output_lists[0] if output_lists else None,
                                        "gather_list", caller, g.size()))]
                _same_dtype(outs, inp.dtype_name, "gather_list", caller)
                expected = [b.count for b in outs]

            def finish() -> None:
                for b in outs:
                    b.finish()

            work = g.gather([b.flat for b in outs] or None, inp.flat, root, inp.dtype_name,
                            finish, async_op=self._async(opts), expected_counts=expected)
            return self._done([work], output_lists)

        @_translated
        def scatter(self, tensors: list[Any], input_lists: list[list[Any]],
                    opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.ScatterOptions()
            caller, root, g = "scatter", opts.rootRank, self._group
            tiny = (self._lane_lists(tensors[0], input_lists[0] if input_lists
                                     and g.rank() == root else None)
                    if len(tensors) == 1 else None)
            if tiny is not None:
                lane, arr, arrs = tiny
                if not self._async(opts):
                    if lane.scatter(arr, arrs, g.global_ranks[root]):
                        return MeshcastWork((), tensors)
                else:
                    work = getattr(lane, "scatter_async", _no_lane)(arr, arrs,
                                                                    g.global_ranks[root])
                    if work is not None:
                        return self._done([work], tensors)
            out = self._buf(tensors[0], "tensor", caller)
            in_flat, expected = None, None
            if g.rank() == root:
                ins = [self._buf(t, f"scatter_list[{i}]", caller, writable=False) for i, t in
                       enumerate(_list(input_lists[0] if input_lists else None,
                                       "scatter_list", caller, g.size()))]
                _same_dtype(ins, out.dtype_name, "scatter_list", caller)
                in_flat = _concat(ins, out.flat.dtype)
                expected = [b.count for b in ins]
            work = g.scatter(out.flat, in_flat, root, out.dtype_name, out.finish,
                             async_op=self._async(opts), expected_counts=expected)
            return self._done([work], tensors)

        def _reduce_scatter(self, output: Any, ins: list[Any], counts: list[int], opts: Any,
                            caller: str) -> Any:
            """Reduce-scatter the concatenation of ``ins`` (Buffers) into ``output``."""
            out = self._buf(output, "output", caller)
            _same_dtype(ins, out.dtype_name, "input", caller)
            op, factor = _reduce_op(opts.reduceOp, out.dtype_name, caller)
            in_flat = _concat(ins, out.flat.dtype)
            if factor is not None:
                in_flat = _scaled(in_flat, out.dtype_name, factor)
            return self._group.reduce_scatter(out, in_flat, counts, op, lambda: None,
                                              async_op=self._async(opts))

        @_translated
        def reduce_scatter(self, tensors: list[Any], input_lists: list[list[Any]],
                           opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.ReduceScatterOptions()
            tiny = (self._lane_lists(tensors[0], input_lists[0])
                    if len(tensors) == 1 and len(input_lists) == 1 else None)
            op = _lane_op(opts.reduceOp) if tiny is not None else None
            if op is not None:
                lane, arr, arrs = tiny
                if not self._async(opts):
                    if getattr(lane, "reduce_scatter_list", _no_lane)(arr, arrs, op):
                        return MeshcastWork((), tensors)
                else:
                    work = getattr(lane, "reduce_scatter_list_async", _no_lane)(arr, arrs, op)
                    if work is not None:
                        return self._done([work], tensors)
            caller, n = "reduce_scatter", self._group.size()
            works = []
            for t, inputs in zip(tensors, input_lists):
                ins = [self._buf(x, f"input_list[{i}]", caller, writable=False)
                       for i, x in enumerate(_list(inputs, "input_list", caller, n))]
                works.append(self._reduce_scatter(t, ins, [b.count for b in ins], opts, caller))
            return self._done(works, tensors)

        def _reduce_scatter_single(self, output: Any, input: Any, opts: Any,  # noqa: A002
                                   caller: str) -> Any:
            n = self._group.size()
            inp = self._buf(input, "input", caller, writable=False)
            count = inp.count // n if n else 0
            if output.numel() * n != inp.count:
                raise usage(caller, f"'input' holds {inp.count} elements; it must hold "
                                    f"world_size ({n}) x {output.numel()}", self._world.rank)
            return self._reduce_scatter(output, [inp], [count] * n, opts, caller)

        @_translated
        def reduce_scatter_single(self, output: Any, input: Any,  # noqa: A002
                                  opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.ReduceScatterOptions()
            tiny = self._lane_arrays((output, input))
            op = _lane_op(opts.reduceOp) if tiny is not None else None
            if op is not None:
                if not self._async(opts):
                    if tiny[0].reduce_scatter(*tiny[1], op):
                        return MeshcastWork((), [output])
                else:  # FSDP's gradients: started here, finished by the worker if need be
                    work = getattr(tiny[0], "reduce_scatter_async", _no_lane)(*tiny[1], op)
                    if work is not None:
                        return self._done([work], [output])
            work = self._reduce_scatter_single(output, input, opts, "reduce_scatter_tensor")
            return self._done([work], [output])

        _reduce_scatter_base = reduce_scatter_single

        @_translated
        def reduce_scatter_single_coalesced(self, outputs: list[Any], inputs: list[Any],
                                            opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.ReduceScatterOptions()
            works = [self._reduce_scatter_single(o, i, opts, "reduce_scatter_tensor_coalesced")
                     for o, i in zip(outputs, inputs)]
            return self._done(works, outputs)

        reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

        @_translated
        def alltoall(self, outputs: list[Any], inputs: list[Any], opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.AllToAllOptions()
            tiny = (self._lane_arrays((*outputs, *inputs))
                    if type(outputs) is list and type(inputs) is list else None)
            if tiny is not None:
                lane, arrays = tiny
                outs, ins = arrays[:len(outputs)], arrays[len(outputs):]
                if not self._async(opts):
                    if getattr(lane, "all_to_all_list", _no_lane)(outs, ins):
                        return MeshcastWork((), outputs)
                else:  # started here, finished (and copied out) by the worker if need be
                    work = getattr(lane, "all_to_all_list_async", _no_lane)(outs, ins)
                    if work is not None:
                        return self._done([work], outputs)
            caller, n = "all_to_all", self._group.size()
            ins = [self._buf(t, f"input_tensor_list[{i}]", caller, writable=False)
                   for i, t in enumerate(_list(inputs, "input_tensor_list", caller, n))]
            outs = [self._buf(t, f"output_tensor_list[{i}]", caller)
                    for i, t in enumerate(_list(outputs, "output_tensor_list", caller, n))]
            dtn = ins[0].dtype_name
            _same_dtype(ins, dtn, "input_tensor_list", caller)
            _same_dtype(outs, dtn, "output_tensor_list", caller)
            out_flat = _gather_target(outs, ins[0].flat.dtype)
            work = self._group.all_to_all(
                out_flat, _concat(ins, ins[0].flat.dtype), [b.count for b in ins],
                [b.count for b in outs], dtn, lambda: _scatter_back(out_flat, outs),
                async_op=self._async(opts))
            return self._done([work], outputs)

        @_translated
        def all_to_all_single(self, output: Any, input: Any,  # noqa: A002
                              output_split_sizes: list[int], input_split_sizes: list[int],
                              opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.AllToAllOptions()
            tiny = self._lane_arrays((output, input))
            if tiny is not None:  # (torch passes empty split lists for equal splits)
                lane, (o, i) = tiny
                splits = (output_split_sizes or None, input_split_sizes or None)
                if not self._async(opts):
                    if (lane.all_to_all(o, i) if splits == (None, None)
                            else getattr(lane, "all_to_all_split", _no_lane)(o, i, *splits)):
                        return MeshcastWork((), [output])
                else:  # MoE's token exchange: started here, finished by the worker if need be
                    work = (getattr(lane, "all_to_all_async", _no_lane)(o, i)
                            if splits == (None, None) else
                            getattr(lane, "all_to_all_split_async", _no_lane)(o, i, *splits))
                    if work is not None:
                        return self._done([work], [output])
            caller, n = "all_to_all_single", self._group.size()
            out = self._buf(output, "output", caller)
            inp = self._buf(input, "input", caller, writable=False)
            _same_dtype([out], inp.dtype_name, "output", caller)
            send = _splits(input_split_sizes, inp, n, "input", caller)
            recv = _splits(output_split_sizes, out, n, "output", caller)
            work = self._group.all_to_all(out.flat, inp.flat, send, recv, inp.dtype_name,
                                          out.finish, async_op=self._async(opts))
            return self._done([work], [output])

        alltoall_base = all_to_all_single

        @_translated
        def barrier(self, opts: Any = None) -> Any:
            opts = opts if opts is not None else dist.BarrierOptions()
            tiny = self._lane_arrays(())
            if tiny is not None:
                lane = tiny[0]
                if not self._async(opts):
                    if lane.barrier():
                        return MeshcastWork((), [])
                else:
                    work = getattr(lane, "barrier_async", _no_lane)()
                    if work is not None:
                        return self._done([work], [])
            return self._done([self._group.barrier(async_op=self._async(opts))], [])

        # --------------------------------------------------- point to point

        @_translated
        def send(self, tensors: list[Any], dstRank: int, tag: int) -> Any:  # noqa: N803
            work = self._lane_p2p(tensors, dstRank, tag, send=True)
            works = [work] if work is not None else [
                self._group.isend(self._buf(t, "tensor", "send", writable=False).flat,
                                  dstRank, tag) for t in tensors]
            return self._done(works, tensors, p2p=True)

        @_translated
        def recv(self, tensors: list[Any], srcRank: int, tag: int) -> Any:  # noqa: N803
            work = self._lane_p2p(tensors, srcRank, tag, send=False)
            works = [work] if work is not None else [
                self._group.irecv(self._buf(t, "tensor", "recv"), srcRank, tag)
                for t in tensors]
            return self._done(works, tensors, self._group.group_rank, p2p=True)

        def _lane_p2p(self, tensors: list[Any], peer: Any, tag: Any, send: bool) -> Any:
            """The Work of one contiguous tensor's message that the group's lane moves,
            as the front door's isend/irecv do: finished for a send written into the ring
            and a receive whose message is already first in it (a receive does not wait
            here, since torch's irecv and recv are this same call); a large send goes
            single-copy, its Work finished by the receiver's copy. None: the general
            path, which also explains bad arguments."""
            group = self._group
            if (len(tensors) != 1 or type(group) is not ProcessGroup or type(peer) is not int
                    or type(tag) is not int or not 0 <= peer < group.size()
                    or group not in self._world.groups):
                return None
            arr = _torch_view(tensors[0])
            if arr is None:
                return None
            lane, global_peer = group.lane, group.global_ranks[peer]
            return lane.isend(arr, global_peer, tag) if send else lane.irecv(arr, global_peer, tag)

        @_translated
        def recv_anysource(self, tensors: list[Any], tag: int) -> Any:
            works = [self._group.irecv(self._buf(t, "tensor", "recv"), None, tag)
                     for t in tensors]
            return self._done(works, tensors, self._group.group_rank, p2p=True)

        # ------------------------------------------------------- coalescing

        def _start_coalescing(self, device: Any = None) -> None:
            if self._coalesced is not None:
                raise _torch_error(RuntimeError(
                    "meshcast: _start_coalescing called twice without _end_coalescing"))
            self._coalesced, self._coalesced_p2p = [], False

        def _end_coalescing(self, device: Any = None) -> Any:
            works, self._coalesced = self._coalesced or [], None
            return MeshcastWork(works, [], p2p=self._coalesced_p2p)

        # ------------------------------------------------------------ admin

        def set_timeout(self, timeout: datetime.timedelta) -> None:
            """Deadline of every later collective and send/recv of this group."""
            self._group.timeout = timeout.total_seconds()

        def shutdown(self) -> None:
            """Let queued work finish, then release the group (and its World if it owns it)."""
            self._close(drain=True)

        def abort(self) -> None:
            """Release the group now; queued work fails with GroupAbortedError."""
            self._close(drain=False)

        def _close(self, drain: bool) -> None:
            if self._closed:
                return
            self._closed = True
            if drain:
                self._group.fifo.drain(timeout=self._group.timeout)
            if self._owns_world:
                _close_world(self._world)
            else:
                self._group.shutdown()
                if self._group in self._world.groups:
                    self._world.groups.remove(self._group)

    return MeshcastProcessGroup


@functools.cache
def _pg_class() -> type:
    return _make_pg_class()


# ---------------------------------------------------------------- creator


def _create_process_group(options: Any, backend_options: Any = None) -> Any:
    """The creator torch calls once per group per member (``extended_api=True``).

    Args:
        options: torch's ``_DistributedBackendOptions``: ``store`` (prefixed
            per group), ``group_rank``, ``group_size``, ``timeout``,
            ``group_id`` (torch's group name) and ``global_ranks_in_group``
            (``[]`` for the default group).
        backend_options: ``pg_options`` of ``init_process_group`` (unused).
    """
    from .. import _world
    from ..rendezvous.torch_store import TorchStore

    try:
        timeout = options.timeout.total_seconds()
        store = TorchStore(options.store, timeout)
        rank, size = options.group_rank, options.group_size
        ranks = list(options.global_ranks_in_group)
        name = str(options.group_id)
        if not ranks:
            world = _world.bring_up(store, rank, size, timeout, BACKEND_NAME)
            _adopt_world(world)
            group, owns = world.default_group, True
        elif _state.world is None:
            # The default group runs another backend: this group gets its own engine.
            world = _world.bring_up(store, rank, size, timeout, BACKEND_NAME)
            group, owns = world.default_group, True
        else:
            world, owns = _state.world, False
            group = world.make_group(_group_id(name), ranks, f"group {name} {ranks}",
                                     store=store, timeout=timeout)
    except Exception as exc:
        _raise_for_torch(exc)
    return _pg_class()(group, world, owns)


def _adopt_world(world: Any) -> None:
    """Make ``world`` the default group's engine (and meshcast's own, if it has none)."""
    from .. import _api, _world

    _state.world = world
    if _world.current is None:
        _world.set_current(world)
        _api.GroupMember.WORLD = world.default_group
        _api.group.WORLD = world.default_group


def _close_world(world: Any) -> None:
    from .. import _api, _world

    for g in world.groups:
        g.fifo.drain(timeout=world.timeout)
    world.close()
    if _state.world is world:
        _state.world = None
    if _world.current is world:
        _world.set_current(None)
        _api.GroupMember.WORLD = None
        _api.group.WORLD = None


# ------------------------------------------- env:// under `meshcast run`


_live_stores: list[Any] = []


def _route_env_rendezvous() -> None:
    """Under ``meshcast run``, answer torch's ``env://`` with the launcher's store."""
    import importlib

    # torch.distributed re-exports the function `rendezvous` under the module's name.
    rdzv = importlib.import_module("torch.distributed.rendezvous")

    original = rdzv._rendezvous_handlers.get("env")
    if original is None or getattr(original, "_meshcast", False):
        return

    def handler(url: str, timeout: datetime.timedelta = datetime.timedelta(minutes=30),
                **kwargs: Any) -> Iterator[tuple[Any, int, int]]:
        from .. import config

        if not config.get("MESHCAST_STORE_HOSTED"):
            yield from original(url, timeout=timeout, **kwargs)
            return
        from ..rendezvous import rendezvous

        store, rank, world_size = rendezvous(url, timeout=timeout.total_seconds())
        torch_store = for_torch(store)
        # torch keeps only the C++ half; without a Python reference the
        # overrides vanish ("Not implemented") once this generator is gone.
        _live_stores.append(torch_store)
        yield torch_store, rank, world_size
        raise RuntimeError("Unable to perform re-rendezvous using env:// method")

    handler._meshcast = True  # type: ignore[attr-defined]
    rdzv._rendezvous_handlers["env"] = handler


def is_meshcast_group(group: Any) -> bool:
    """True if ``group`` is a torch process group running on meshcast."""
    return isinstance(group, _pg_class())

