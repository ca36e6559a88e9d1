"""The front door: torch.distributed's functions, validated, then handed to the group.

Each function here does only this: resolve the group, check every argument
(raising ``InvalidUsage`` that names the function, the argument and the
rank, before anything is sent), translate global ranks to group ranks, turn
arrays and tensors into flat buffers, call the ProcessGroup, and either
return the ``Work`` (``async_op=True``) or wait for it. Ranks in arguments
(``src``, ``dst``) are global ranks, as in torch; ``group_src``/``group_dst``
take group ranks.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _world, barrier_monitor, config, ops
from .buffers import Buffer, as_buffer, span
from .errors import InvalidUsage, usage
from .group import ProcessGroup
from .lanes import TAGS, TinyCallLane
from .ops import BFLOAT16, ReduceOp
from .spanning import HostSpanningGroup
from .spanning_lane import AcrossHostsLane
from .work import Work


class _NonGroupMember:
    """The value ``new_group`` returns on ranks that are not in the new group."""

    def __repr__(self) -> str:
        return "GroupMember.NON_GROUP_MEMBER"


class GroupMember:
    """torch-compatible sentinels: ``WORLD`` is the default group, ``NON_GROUP_MEMBER`` what
    ``new_group`` returns to ranks outside the group."""

    WORLD: ProcessGroup | None = None
    NON_GROUP_MEMBER = _NonGroupMember()


class group:  # noqa: N801 - torch spells it dist.group.WORLD
    """``meshcast.group.WORLD`` is the default group once initialized."""

    WORLD: ProcessGroup | None = None


GroupLike = Any  # ProcessGroup | HostSpanningGroup | None | _NonGroupMember
_GROUP_TYPES = (ProcessGroup, HostSpanningGroup)

_MEMBERS = {"meshcast", "shm", "gloo", "cpu", "auto"}


# ----------------------------------------------------------------- helpers


def _world_or_raise(caller: str) -> _world.World:
    w = _world.current
    if w is None:
        raise InvalidUsage(f"{caller}: the default process group is not initialized; call "
                           f"meshcast.init_process_group() first")
    return w


def _resolve(group_: GroupLike, caller: str) -> ProcessGroup | None:
    """The group to use, or None when this rank is not a member (the call is then a no-op)."""
    w = _world_or_raise(caller)
    if group_ is None or group_ is GroupMember.WORLD:
        return w.default_group
    if group_ is GroupMember.NON_GROUP_MEMBER:
        return None
    if not isinstance(group_, _GROUP_TYPES):
        raise usage(caller, f"'group' must be a ProcessGroup from new_group() or None, got "
                            f"{type(group_).__name__}", w.rank)
    if group_ not in w.groups:
        raise usage(caller, f"'group' {group_.group_name} was destroyed or belongs to another "
                            f"initialization", w.rank)
    return group_


def _rank() -> int | None:
    w = _world.current
    return None if w is None else w.rank


def _check_async(async_op: Any, caller: str) -> bool:
    if not isinstance(async_op, bool):
        raise usage(caller, f"'async_op' must be a bool, got {type(async_op).__name__}", _rank())
    return async_op


def _check_algorithm(algorithm: str | None, coll: str, caller: str, pg: Any) -> str | None:
    """The bare algorithm name of an ``algorithm=`` value (None: the group decides).

    The rule is :func:`meshcast.algorithms._select.algorithm_name`, the one
    ``select`` applies, so both accept ``"ring"`` and ``"all_reduce/ring"``.
    """
    if algorithm is None:
        return None
    from .algorithms import _select

    if not isinstance(algorithm, str):
        raise usage(caller, f"'algorithm' must be a str, got {type(algorithm).__name__}", _rank())
    # Across hosts the choice is between the hierarchical families (see spanning.py).
    valid = pg.algorithm_names(coll) if isinstance(pg, HostSpanningGroup) else None
    return _select.algorithm_name(coll, algorithm, valid, caller=caller, rank=_rank())


_VALID_OPS: dict[tuple[Any, str], ReduceOp] = {}


def _op(op: Any, dtype_name: str, caller: str) -> ReduceOp:
    try:
        return _VALID_OPS[(op, dtype_name)]  # hot path: a pair already validated
    except (KeyError, TypeError):
        pass
    try:
        coerced = ReduceOp.coerce(op)
    except (ValueError, TypeError, KeyError):
        raise usage(caller, f"'op' must be a meshcast.ReduceOp, got {op!r}", _rank()) from None
    dtype: Any = "bfloat16" if dtype_name == "bfloat16" else np.dtype(dtype_name)
    member = ops.validate(coerced, dtype, caller=caller, rank=_rank())
    if isinstance(op, ReduceOp):
        _VALID_OPS[(op, dtype_name)] = member
    return member


def _root(pg: ProcessGroup, global_root: int | None, group_root: int | None, *, name: str,
          caller: str) -> int:
    """Group rank of the root given either as a global rank or as a group rank."""
    me = _rank()
    if global_root is not None and group_root is not None:
        raise usage(caller, f"pass either '{name}' or 'group_{name}', not both", me)
    if group_root is not None:
        if (not isinstance(group_root, (int, np.integer)) or isinstance(group_root, bool)
                or not 0 <= group_root < pg.size()):
            raise usage(caller, f"'group_{name}'={group_root!r} is not a rank of a group of "
                                f"size {pg.size()}", me)
        return int(group_root)
    if global_root is None:
        global_root = pg.global_rank(0) if name in ("src", "dst") and pg.size() else 0
    if not isinstance(global_root, (int, np.integer)) or isinstance(global_root, bool):
        raise usage(caller, f"'{name}' must be an int rank, got {type(global_root).__name__}", me)
    try:
        return pg.group_rank(int(global_root))
    except ValueError:
        raise usage(caller, f"'{name}'={global_root} is not a rank of {pg.group_name} "
                            f"(its ranks: {pg.global_ranks})", me) from None


def _torch_view(t: Any) -> np.ndarray | None:
    """A torch CPU tensor's memory seen as an ndarray, for the tiny-call lane (which
    works on ndarrays in place; a bfloat16 tensor's as ops.BFLOAT16), or None: not a
    plain tensor, or one NumPy cannot view (on another device, requiring grad, with a
    conjugate/negative bit); the general path takes those. Only asked once the ndarray
    check failed."""
    torch = sys.modules.get("torch")
    if torch is None or type(t) is not torch.Tensor:
        return None
    if t.dtype is torch.bfloat16:  # (NumPy has none: its bits as ops.BFLOAT16)
        if t.requires_grad or t.device.type != "cpu" or t.is_neg():
            return None  # (as t.numpy() refuses a tensor that requires grad)
        try:
            return t.view(torch.int16).numpy().view(BFLOAT16)
        except (TypeError, RuntimeError):
            return None
    try:
        return t.numpy()
    except (TypeError, RuntimeError):
        return None


def _lane(group: GroupLike) -> TinyCallLane | AcrossHostsLane | None:
    """The tiny-call lane of ``group`` (None: the default group) when it is a live
    meshcast group of this process; the lane itself decides whether a call qualifies.
    (For group None the front door reads ``_world.default_lane``, the same answer
    without a call.)"""
    w = _world.current
    if w is None:
        return None
    pg = w.default_group if group is None else group
    kind = type(pg)  # (two identity tests: cheaper than a tuple's membership test)
    return (pg.lane if (kind is ProcessGroup or kind is HostSpanningGroup) and pg in w.groups
            else None)


def _no_lane(*_: Any) -> None:
    """A lane that has no such method (or no lane): the general path."""


def _finish(work: Work | None, async_op: bool) -> Work | None:
    """The group already waited for synchronous calls (and returned None for them)."""
    if async_op or work is None:
        return work
    work.wait()
    return None


def _same_dtype(bufs: Sequence[Buffer], ref: str, what: str, caller: str, *,
                against: str = "the input") -> None:
    """Every buffer of list ``what`` has dtype ``ref``, the dtype of argument ``against``.

    (integrations/torch_backend.py calls it too, without ``against``.)
    """
    for i, b in enumerate(bufs):
        if b.dtype_name != ref:
            raise usage(caller, f"{what}[{i}] has dtype {b.dtype_name} but {against} has "
                                f"{ref}; all must match", _rank())


def _same_dtype_one(buf: Buffer, ref: str, what: str, caller: str, *, against: str) -> None:
    """Argument ``what`` (one array, not a list) has dtype ``ref``, that of ``against``."""
    if buf.dtype_name != ref:
        raise usage(caller, f"'{what}' has dtype {buf.dtype_name} but {against} has {ref}; "
                            f"they must match", _rank())


def _none_or_empty(value: Any, name: str, root_name: str, caller: str) -> None:
    """Non-root ranks pass no list (None or an empty list, as torch allows)."""
    # An array here must not reach a truth test (NumPy refuses one for arrays).
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return
    raise usage(caller, f"'{name}' must be None or empty on ranks other than {root_name}, "
                        f"got {type(value).__name__}", _rank())


def _list(value: Any, name: str, caller: str, length: int) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise usage(caller, f"'{name}' must be a list of {length} arrays/tensors, got "
                            f"{type(value).__name__}", _rank())
    if len(value) != length:
        raise usage(caller, f"'{name}' must hold {length} arrays/tensors (one per rank of the "
                            f"group), got {len(value)}", _rank())
    return list(value)


def _scatter_back(flat: np.ndarray, bufs: Sequence[Buffer]) -> None:
    """Copy consecutive pieces of ``flat`` into ``bufs`` (then write them back); pieces
    that already are that memory (see :func:`_gather_target`) are not copied."""
    off = 0
    for b in bufs:
        n = b.count
        piece = flat[off:off + n]
        if n and b.flat.ctypes.data != piece.ctypes.data:
            b.flat[...] = piece
        b.finish()
        off += n


def _concat(bufs: Sequence[Buffer], dtype: np.dtype) -> np.ndarray:
    """The inputs as one flat array: a view when they lie back to back, else a copy."""
    if not bufs:
        return np.empty(0, dtype)
    if len(bufs) == 1:
        return bufs[0].flat
    whole = span([b.flat for b in bufs])
    return whole if whole is not None else np.concatenate([b.flat for b in bufs])


def _gather_target(bufs: Sequence[Buffer], dtype: np.dtype) -> np.ndarray:
    """Where a list collective writes its output: the outputs themselves when they lie
    back to back (a chunked tensor), else a staging array (see :func:`_scatter_back`)."""
    whole = span([b.flat for b in bufs]) if len(bufs) > 1 else None
    if whole is not None and whole.flags.writeable:
        return whole
    return np.empty(sum(b.count for b in bufs), dtype)


# ---------------------------------------------------------- initialization


def _timeout_seconds(timeout: Any, caller: str = "init_process_group") -> float:
    if timeout is None:
        return float(config.get("MESHCAST_TIMEOUT"))
    if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
        return float(timeout)
    raise usage(caller, f"'timeout' must be a positive number of seconds or a "
                        f"datetime.timedelta, got {timeout!r}", _rank())


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: float | datetime.timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    store: Any = None,
    group_name: str = "",
    pg_options: Any = None,
    device_id: Any = None,
    *,
    internode: str | None = None,
) -> None:
    """Initialize the default process group: meet every rank and set up the engine.

    Args:
        backend (str, optional): ``"meshcast"`` (default; also ``"shm"``,
            ``"cpu"``, ``"auto"``). ``"gloo"`` is accepted so that ported CPU
            programs run unchanged: it means meshcast's engine. ``"nccl"``
            (GPU only) and ``"mpi"`` are refused with an explanation.
        init_method (str, optional): ``"env://"`` (default), ``"tcp://host:port"``
            or ``"file:///path"``. Under ``meshcast run``, torchrun, mpiexec
            (Open MPI, MPICH, Intel MPI), Cray PALS or srun nothing is needed.
        timeout (float or timedelta, optional): deadline for bring-up and for
            every later operation (default ``MESHCAST_TIMEOUT``, 300 s).
        world_size (int): number of ranks (-1: from the environment).
        rank (int): this process's rank (-1: from the environment).
        store (Store, optional): a ready key-value store (then ``rank`` and
            ``world_size`` are required); exclusive with ``init_method``.
        group_name, pg_options, device_id: accepted for torch compatibility; unused.
        internode (str, optional): meshcast extension: the engine that carries bytes
            between hosts when the ranks run on several (``"mpi"`` or ``"gloo"``;
            default ``MESHCAST_INTERNODE``, else MPI under an MPI launcher when
            mpi4py is installed, else Gloo when torch is). Inside a host the
            shared-memory engine always carries them.

    Raises:
        InvalidUsage: bad arguments, or the default group is already initialized.
        RendezvousError: the ranks could not meet (names the missing ones).
        ShmError: shared memory could not be set up.
        TransportError: the ranks run on several hosts and the inter-host engine
            is missing or failed to start (the message says what to install).
    """
    caller = "init_process_group"
    if _world.current is not None:
        raise InvalidUsage(f"{caller}: the default process group is already initialized; "
                           f"call destroy_process_group() first")
    name = (backend or "meshcast").lower()
    if name == "nccl":
        raise usage(caller, "backend 'nccl' needs GPUs; meshcast moves CPU data. Use "
                            "backend='meshcast' (or 'gloo', which meshcast treats as its own)")
    if name not in _MEMBERS:
        raise usage(caller, f"unknown backend {backend!r}; meshcast runs as 'meshcast' "
                            f"(aliases: {', '.join(sorted(_MEMBERS - {'meshcast'}))})")
    seconds = _timeout_seconds(timeout)
    if store is not None:
        if init_method is not None:
            raise usage(caller, "pass either 'store' or 'init_method', not both")
        if rank < 0 or world_size <= 0:
            raise usage(caller, "with 'store', both 'rank' and 'world_size' must be given")
    else:
        from .rendezvous import rendezvous

        store, rank, world_size = rendezvous(init_method or "env://", rank=rank,
                                             world_size=world_size, timeout=seconds)
    if not 0 <= rank < world_size:
        raise usage(caller, f"'rank'={rank} must be in [0, world_size={world_size})")
    world = _world.bring_up(store, rank, world_size, seconds, "meshcast", internode=internode)
    _world.set_current(world)
    GroupMember.WORLD = world.default_group
    group.WORLD = world.default_group


def destroy_process_group(group: GroupLike = None) -> None:
    """Tear down a group, or everything when ``group`` is None.

    After the default group is destroyed, ``init_process_group`` may be called again.
    """
    w = _world.current
    if w is None:
        return
    if group is None or group is w.default_group:
        for g in w.groups:
            g.fifo.drain(timeout=w.timeout)
        w.exit_barrier()
        w.close()
        _world.set_current(None)
        GroupMember.WORLD = None
        globals()["group"].WORLD = None
        return
    if isinstance(group, _GROUP_TYPES) and group in w.groups:
        group.fifo.drain(timeout=w.timeout)
        group.shutdown()
        w.groups.remove(group)


def is_initialized() -> bool:
    """True once ``init_process_group`` succeeded (and until the group is destroyed)."""
    return _world.current is not None


def is_available() -> bool:
    """meshcast is always available."""
    return True


def get_backend(group: GroupLike = None) -> str:
    """The backend name of ``group`` (always ``"meshcast"``)."""
    _resolve(group, "get_backend")
    return "meshcast"


def get_rank(group: GroupLike = None) -> int:
    """This process's rank in ``group`` (default: world); -1 if it is not a member."""
    pg = _resolve(group, "get_rank")
    return -1 if pg is None else pg.rank()


def get_world_size(group: GroupLike = None) -> int:
    """Number of ranks in ``group`` (default: world); -1 if this rank is not a member."""
    pg = _resolve(group, "get_world_size")
    return -1 if pg is None else pg.size()


def _member_group(group: GroupLike, caller: str) -> ProcessGroup:
    """``group`` resolved; a rank outside it has no view of its ranks, so it may not ask."""
    pg = _resolve(group, caller)
    if pg is None:
        raise usage(caller, "'group' is GroupMember.NON_GROUP_MEMBER: this rank is not a "
                            "member, so it cannot map the group's ranks", _rank())
    return pg


def _int_rank(value: Any, name: str, caller: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise usage(caller, f"'{name}' must be an int rank, got {type(value).__name__}", _rank())
    return int(value)


def get_global_rank(group: ProcessGroup, group_rank: int) -> int:
    """Global rank of ``group_rank`` in ``group``.

    Raises:
        InvalidUsage: ``group_rank`` is not in ``[0, group size)``, or this rank
            is not a member of ``group``.
    """
    caller = "get_global_rank"
    pg = _member_group(group, caller)
    group_rank = _int_rank(group_rank, "group_rank", caller)
    if not 0 <= group_rank < pg.size():
        raise usage(caller, f"'group_rank'={group_rank} is not a rank of {pg.group_name} "
                            f"(size {pg.size()})", _rank())
    return pg.global_rank(group_rank)


def get_group_rank(group: ProcessGroup, global_rank: int) -> int:
    """Rank of ``global_rank`` within ``group``.

    Raises:
        InvalidUsage: ``global_rank`` is not a member of ``group``, or this rank
            is not a member of ``group``.
    """
    caller = "get_group_rank"
    pg = _member_group(group, caller)
    global_rank = _int_rank(global_rank, "global_rank", caller)
    try:
        return pg.group_rank(global_rank)
    except ValueError:
        raise usage(caller, f"'global_rank'={global_rank} is not a member of {pg.group_name} "
                            f"(its ranks: {pg.global_ranks})", _rank()) from None


def get_process_group_ranks(group: ProcessGroup) -> list[int]:
    """Global ranks of the members of ``group``, in group-rank order."""
    pg = _resolve(group, "get_process_group_ranks")
    return [] if pg is None else list(pg.global_ranks)


def new_group(ranks: Sequence[int] | None = None, timeout: Any = None, backend: str | None = None,
              pg_options: Any = None, use_local_synchronization: bool = False,
              group_desc: str | None = None) -> ProcessGroup | _NonGroupMember:
    """Create a group of a subset of the ranks. Every rank must call it, in the same order.

    Args:
        ranks (list[int], optional): global ranks of the members (default: all).
            The order given is the group-rank order.
        timeout (float or datetime.timedelta, optional): how long the group's calls
            (and its creation) may wait before they raise ``CommTimeout``; default:
            the world's timeout (``init_process_group``'s).

    Returns:
        the new ``ProcessGroup`` on members; ``GroupMember.NON_GROUP_MEMBER`` on
        other ranks (collectives called with it are no-ops, get_rank gives -1).

    Raises:
        InvalidUsage: duplicate or out-of-range ranks, or a timeout that is not a
            positive number of seconds or a ``timedelta``.
    """
    caller = "new_group"
    w = _world_or_raise(caller)
    seconds = None if timeout is None else _timeout_seconds(timeout, caller)
    ranks = _group_ranks(list(range(w.size)) if ranks is None else ranks, w, caller)
    gid = w.next_group_id
    w.next_group_id += 1
    if w.rank not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    name = group_desc or f"group{gid}{ranks}"
    return w.make_group(gid, [int(r) for r in ranks], name, timeout=seconds)


def _group_ranks(ranks: Sequence[int], w: _world.World, caller: str,
                 what: str = "'ranks'") -> list[int]:
    """``ranks`` as a list, checked as a group's members (``what`` names them)."""
    ranks = list(ranks)
    for r in ranks:
        if not isinstance(r, (int, np.integer)) or not 0 <= r < w.size:
            raise usage(caller, f"{what} holds {r!r}, not a rank of a world of {w.size}", w.rank)
    if len(set(ranks)) != len(ranks):
        raise usage(caller, f"{what} holds duplicates: {ranks}", w.rank)
    return ranks


def new_subgroups(group_size: int | None = None, group: GroupLike = None, timeout: Any = None,
                  backend: str | None = None, pg_options: Any = None,
                  group_desc: str | None = None) -> tuple[Any, list[Any]]:
    """Split ``group``'s ranks into subgroups of ``group_size`` consecutive ranks, as
    torch.distributed's ``new_subgroups`` does. Every rank of the world must call it,
    with the same arguments (it calls :func:`new_group` once per subgroup).

    Args:
        group_size (int, optional): ranks per subgroup; it must divide the group's
            size. Default: the number of the group's ranks on each host, which must be
            the same on every host (torch's default, the GPUs per node, has no meaning
            on CPUs; a host's ranks are what share memory here).
        group (ProcessGroup, optional): the ranks to split, in their group order
            (default: the world).
        timeout, backend, pg_options, group_desc: as for :func:`new_group`.

    Returns:
        (the subgroup that holds this rank, every subgroup made, in order); on this
        rank, the subgroups it is not in are ``GroupMember.NON_GROUP_MEMBER``.

    Raises:
        InvalidUsage: ``group_size`` not a positive integer, larger than the group or
            not dividing its size; no ``group_size`` while the hosts hold different
            numbers of the group's ranks; ``group`` a group this rank is not in. Raised
            before any subgroup is made.
    """
    caller = "new_subgroups"
    w = _world_or_raise(caller)
    pg = _resolve(group, caller)
    if pg is None:
        raise usage(caller, "'group' is a group this rank is not in: every rank calls "
                            "new_subgroups with a group it belongs to", w.rank)
    ranks = list(pg.global_ranks)
    if group_size is None:
        per_host: dict[str, int] = {}
        for r in ranks:
            per_host[w.host_of[r]] = per_host.get(w.host_of[r], 0) + 1
        if len(set(per_host.values())) != 1:
            raise usage(caller, f"the hosts hold {sorted(per_host.values())} of the group's "
                                f"ranks, not equally many: pass 'group_size'", w.rank)
        group_size = next(iter(per_host.values()))
    if (not isinstance(group_size, (int, np.integer)) or isinstance(group_size, bool)
            or group_size <= 0):
        raise usage(caller, f"'group_size' must be a positive integer, got {group_size!r}",
                    w.rank)
    if group_size > len(ranks) or len(ranks) % group_size:
        raise usage(caller, f"'group_size'={group_size} must divide the group's size "
                            f"({len(ranks)})", w.rank)
    return new_subgroups_by_enumeration(
        [ranks[i:i + group_size] for i in range(0, len(ranks), group_size)],
        timeout=timeout, backend=backend, pg_options=pg_options, group_desc=group_desc)


def new_subgroups_by_enumeration(ranks_per_subgroup_list: Sequence[Sequence[int]],
                                 timeout: Any = None, backend: str | None = None,
                                 pg_options: Any = None, group_desc: str | None = None
                                 ) -> tuple[Any, list[Any]]:
    """One subgroup per list of global ranks, as torch.distributed's
    ``new_subgroups_by_enumeration`` does. Every rank of the world must call it, with
    the same lists (it calls :func:`new_group` once per list, in order).

    Args:
        ranks_per_subgroup_list (list[list[int]]): the subgroups' global ranks; no rank
            in two of them. Ranks in none get ``None`` as their subgroup.
        timeout, backend, pg_options, group_desc: as for :func:`new_group`.

    Returns:
        (the subgroup that holds this rank, or None; every subgroup made, in order).

    Raises:
        InvalidUsage: no lists, a rank in two of them, or what :func:`new_group` raises
            for a list; raised before any subgroup is made.
    """
    caller = "new_subgroups_by_enumeration"
    w = _world_or_raise(caller)
    if not ranks_per_subgroup_list:
        raise usage(caller, "'ranks_per_subgroup_list' is empty", w.rank)
    # (new_group's checks of every list, then the overlaps, before any group is made)
    lists = [_group_ranks(ranks, w, caller, str(list(ranks)))
             for ranks in ranks_per_subgroup_list]
    owner: dict[int, list[int]] = {}
    for ranks in lists:
        for r in ranks:
            if r in owner:
                raise usage(caller, f"rank {r} is in two subgroups, {owner[r]} and {ranks}",
                            w.rank)
            owner[r] = ranks
    subgroups = [new_group(ranks, timeout=timeout, backend=backend, pg_options=pg_options,
                           group_desc=group_desc) for ranks in lists]
    mine = next((g for g, ranks in zip(subgroups, lists) if w.rank in ranks), None)
    return mine, subgroups


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    """This process's rank among the processes on its node, from its launcher's
    environment, as torch.distributed's ``get_node_local_rank`` reads ``LOCAL_RANK``;
    here also under ``mpiexec`` (MPICH's, Open MPI's, Intel MPI's variables) and
    ``srun`` (``SLURM_LOCALID``), as :func:`launch_env` finds it. Needs no process group.

    Args:
        fallback_rank (int, optional): what to return when the environment does not say.

    Raises:
        RuntimeError: the environment does not say and no ``fallback_rank`` was given.
    """
    if "LOCAL_RANK" in os.environ:  # (as torch reads it, whatever else is set)
        return int(os.environ["LOCAL_RANK"])
    found = launch_env()
    if found.launcher != "none" and found.local_rank is not None:  # ("none": no launcher)
        return int(found.local_rank)
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("get_node_local_rank: no launcher variable gives this process's "
                       "local rank (LOCAL_RANK, MPI_LOCALRANKID, OMPI_COMM_WORLD_LOCAL_RANK, "
                       "SLURM_LOCALID); pass fallback_rank to run without one")


# ------------------------------------------------------------- collectives


def barrier(group: GroupLike = None, async_op: bool = False, device_ids: Any = None,
            *, algorithm: str | None = None) -> Work | None:
    """Block until every rank of ``group`` entered the barrier.

    Raises:
        CommTimeout / PeerGoneError: a rank never arrived or exited.
    """
    if async_op is False and algorithm is None and device_ids is None:
        lane = _world.default_lane if group is None else _lane(group)  # tiny calls: see all_reduce
        if lane is not None and lane.barrier():
            return None
    elif async_op is True and algorithm is None and device_ids is None:
        lane = _world.default_lane if group is None else _lane(group)
        if lane is not None:
            work = getattr(lane, "barrier_async", _no_lane)()
            if work is not None:
                return work
    caller = "barrier"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    algorithm = _check_algorithm(algorithm, "barrier", caller, pg)
    return _finish(pg.barrier(algorithm=algorithm, async_op=async_op), async_op)


def monitored_barrier(group: GroupLike = None, timeout: Any = None,
                      wait_all_ranks: bool = False) -> None:
    """A barrier that names the ranks that did not reach it, as torch.distributed's
    ``monitored_barrier`` (there, Gloo's only): every rank but the group's first
    reports to that rank, which waits for each of them up to ``timeout`` and raises
    naming those that did not come; the other ranks then raise the same message. The
    ranks meet through the job's rendezvous store, not the data path, so a rank stuck
    in an earlier collective, or a lost host, is named instead of hanging this call.
    A debugging aid: each call costs a few store round trips.

    Args:
        group (ProcessGroup, optional): the default group if None.
        timeout (float or datetime.timedelta, optional): how long the group's first
            rank waits for the others; default: the group's timeout.
        wait_all_ranks (bool): name every rank that did not arrive in time; by default
            the first one (in group order), as soon as its wait ran out (fail fast).

    Raises:
        CommTimeout: a rank did not arrive in time (``waiting_on`` lists the ranks the
            message names), or the group's first rank gave no verdict.
        InvalidUsage: a bad ``timeout`` or ``wait_all_ranks``.
    """
    caller = "monitored_barrier"
    w = _world_or_raise(caller)
    pg = _resolve(group, caller)
    if pg is None:
        return None
    seconds = pg.timeout if timeout is None else _timeout_seconds(timeout, caller)
    if not isinstance(wait_all_ranks, bool):
        raise usage(caller, f"'wait_all_ranks' must be a bool, got {wait_all_ranks!r}", w.rank)
    call = getattr(pg, "monitored_calls", 0) + 1  # (every member numbers them alike)
    pg.monitored_calls = call
    barrier_monitor.run(pg, w.store, call, seconds, wait_all_ranks)
    return None


def broadcast(tensor: Any, src: int | None = None, group: GroupLike = None,
              async_op: bool = False, group_src: int | None = None, *,
              algorithm: str | None = None) -> Work | None:
    """Copy ``tensor`` from rank ``src`` to every rank of ``group``, in place.

    Args:
        tensor (numpy.ndarray or torch.Tensor): data to send on ``src``, to
            receive into elsewhere. Same shape and dtype on every rank.
        src (int): global rank that sends (default: the group's first rank).
        group (ProcessGroup, optional): the default group if None.
        async_op (bool): return a ``Work`` instead of waiting.
        group_src (int, optional): ``src`` as a group rank instead.
        algorithm (str, optional): meshcast extension, e.g. ``"tree"``.

    Returns:
        ``Work`` if ``async_op`` else None.

    Raises:
        InvalidUsage: bad argument (before anything is sent).
        MismatchError: ranks disagree on the call (count, dtype, root...).
        CommTimeout / PeerGoneError: a rank did not take part in time / exited.

    A small synchronous call may return on ``src`` before the others have
    received; such an error, which only they could see, is then raised by the
    root's next call on ``group``.
    """
    if type(src) is int and algorithm is None and group_src is None and (
            async_op is False or async_op is True):
        arr = tensor if type(tensor) is np.ndarray else _torch_view(tensor)
        lane = None if arr is None else (_world.default_lane if group is None else _lane(group))
        if lane is not None:
            if async_op is False:
                if lane.broadcast(arr, src):
                    return None
            else:
                work = getattr(lane, "broadcast_async", _no_lane)(arr, src)
                if work is not None:
                    return work
    caller = "broadcast"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    root = _root(pg, src, group_src, name="src", caller=caller)
    buf = as_buffer(tensor, name="tensor", caller=caller, rank=_rank())
    algorithm = _check_algorithm(algorithm, "broadcast", caller, pg)
    return _finish(pg.broadcast(buf, root, algorithm=algorithm, async_op=async_op), async_op)


def all_reduce(tensor: Any, op: Any = ReduceOp.SUM, group: GroupLike = None,
               async_op: bool = False, *, algorithm: str | None = None) -> Work | None:
    """Reduce ``tensor`` over all ranks of ``group``; every rank gets the result in place.

    Args:
        tensor (numpy.ndarray or torch.Tensor): input and output.
        op (ReduceOp): SUM (default), AVG, PRODUCT, MIN, MAX, BAND, BOR or BXOR.
            float16/bfloat16 accumulate in float32. AVG on integers truncates
            toward zero; bitwise ops take integers and bool only.
        group (ProcessGroup, optional): the default group if None.
        async_op (bool): return a ``Work`` instead of waiting.
        algorithm (str, optional): meshcast extension, e.g. ``"ring"``.

    Returns:
        ``Work`` if ``async_op`` else None.

    Raises:
        InvalidUsage: bad argument or unsupported (dtype, op) pair (before anything is sent).
        MismatchError: ranks disagree on the call.
        CommTimeout / PeerGoneError: a rank did not take part in time / exited.
    """
    if type(tensor) is np.ndarray and async_op is False and algorithm is None:
        # Tiny calls on NumPy arrays skip the general checks when the group has seen
        # this (dtype, shape, op) before: meshcast.lanes decides.
        lane = _world.default_lane if group is None else _lane(group)
        if lane is not None and lane.all_reduce(tensor, op):
            return None
    elif async_op is False and algorithm is None:
        arr = _torch_view(tensor)  # a torch CPU tensor takes the same lane through a view
        if arr is not None:
            lane = _world.default_lane if group is None else _lane(group)
            if lane is not None and lane.all_reduce(arr, op):
                return None
    elif async_op is True and algorithm is None:
        arr = tensor if type(tensor) is np.ndarray else _torch_view(tensor)
        lane = None if arr is None else (_world.default_lane if group is None else _lane(group))
        work = getattr(lane, "all_reduce_async", _no_lane)(arr, op)
        if work is not None:
            return work
    caller = "all_reduce"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    buf = as_buffer(tensor, name="tensor", caller=caller, rank=_rank())
    rop = _op(op, buf.dtype_name, caller)
    algorithm = _check_algorithm(algorithm, "all_reduce", caller, pg)
    return _finish(pg.all_reduce(buf, rop, algorithm=algorithm, async_op=async_op), async_op)


def reduce(tensor: Any, dst: int | None = None, op: Any = ReduceOp.SUM, group: GroupLike = None,
           async_op: bool = False, group_dst: int | None = None, *,
           algorithm: str | None = None) -> Work | None:
    """Reduce ``tensor`` over all ranks into rank ``dst`` (in place there; others unchanged).

    Args and raises as :func:`all_reduce`, plus ``dst`` (global rank of the
    root) or ``group_dst`` (its group rank). ``ReduceOp.AVG`` on integers
    truncates toward zero (the integer sum divided by the group size, e.g.
    -7 over 2 ranks gives -3), as in :func:`all_reduce`.

    A small synchronous call may return on ranks other than ``dst`` before
    ``dst`` has received; a MismatchError or PeerGoneError that only the
    other ranks could see is then raised by this rank's next call on ``group``.
    """
    if (async_op is False or async_op is True) and algorithm is None and group_dst is None \
            and type(dst) is int:
        arr = tensor if type(tensor) is np.ndarray else _torch_view(tensor)
        if arr is not None:
            # tiny calls: see all_reduce
            lane = _world.default_lane if group is None else _lane(group)
            if lane is not None:
                if async_op is False:
                    if lane.reduce(arr, op, dst):
                        return None
                else:
                    work = getattr(lane, "reduce_async", _no_lane)(arr, op, dst)
                    if work is not None:
                        return work
    caller = "reduce"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    root = _root(pg, dst, group_dst, name="dst", caller=caller)
    buf = as_buffer(tensor, name="tensor", caller=caller, rank=_rank())
    rop = _op(op, buf.dtype_name, caller)
    algorithm = _check_algorithm(algorithm, "reduce", caller, pg)
    return _finish(pg.reduce(buf, rop, root, algorithm=algorithm, async_op=async_op), async_op)


def all_gather(tensor_list: list[Any], tensor: Any, group: GroupLike = None,
               async_op: bool = False, *, algorithm: str | None = None) -> Work | None:
    """Gather ``tensor`` from every rank into ``tensor_list`` on every rank.

    Unlike Gloo, pieces may differ in size between ranks: ``tensor_list[r]``
    must have rank r's number of elements (same list on every rank).

    Raises:
        InvalidUsage: wrong list length, dtype or size (before anything is sent).
        MismatchError: ranks disagree on the call.
    """
    if type(tensor) is np.ndarray and algorithm is None:
        lane = _world.default_lane if group is None else _lane(group)  # tiny calls: see all_reduce
        if lane is not None:
            if async_op is False:
                if getattr(lane, "all_gather_list", _no_lane)(tensor_list, tensor):
                    return None
            elif async_op is True:
                work = getattr(lane, "all_gather_list_async", _no_lane)(tensor_list, tensor)
                if work is not None:
                    return work
    caller = "all_gather"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    inp = as_buffer(tensor, name="tensor", caller=caller, rank=_rank(), writable=False)
    outs = [as_buffer(t, name=f"tensor_list[{i}]", caller=caller, rank=_rank())
            for i, t in enumerate(_list(tensor_list, "tensor_list", caller, pg.size()))]
    _same_dtype(outs, inp.dtype_name, "tensor_list", caller, against="'tensor'")
    if outs[pg.rank()].count != inp.count:
        raise usage(caller, f"tensor_list[{pg.rank()}] holds {outs[pg.rank()].count} elements "
                            f"but 'tensor' holds {inp.count}", _rank())
    counts = [b.count for b in outs]
    flat = _gather_target(outs, inp.flat.dtype)
    algorithm = _check_algorithm(algorithm, "all_gather", caller, pg)
    work = pg.all_gather(flat, inp.flat, counts, inp.dtype_name,
                         lambda: _scatter_back(flat, outs), algorithm=algorithm,
                         async_op=async_op)
    return _finish(work, async_op)


def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, group: GroupLike = None,
                           async_op: bool = False, *, algorithm: str | None = None
                           ) -> Work | None:
    """Gather ``input_tensor`` from every rank, concatenated in rank order, into ``output_tensor``.

    ``output_tensor`` holds ``world_size`` times the input's elements (shape
    ``(ws*N, ...)`` or ``(ws, N, ...)``). :func:`all_gather_single` is the same call
    under torch 2.13's name for it.
    """
    if (async_op is False or async_op is True) and algorithm is None:
        out = output_tensor if type(output_tensor) is np.ndarray else _torch_view(output_tensor)
        inp = input_tensor if type(input_tensor) is np.ndarray else _torch_view(input_tensor)
        # see all_reduce
        lane = None if out is None or inp is None else (
            _world.default_lane if group is None else _lane(group))
        if lane is not None:
            if async_op is False:
                if lane.all_gather(out, inp):
                    return None
            else:
                work = getattr(lane, "all_gather_async", _no_lane)(out, inp)
                if work is not None:
                    return work
    caller = "all_gather_into_tensor"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    inp = as_buffer(input_tensor, name="input_tensor", caller=caller, rank=_rank(),
                    writable=False)
    out = as_buffer(output_tensor, name="output_tensor", caller=caller, rank=_rank())
    _same_dtype_one(out, inp.dtype_name, "output_tensor", caller, against="'input_tensor'")
    if out.count != inp.count * pg.size():
        raise usage(caller, f"'output_tensor' holds {out.count} elements; it must hold "
                            f"world_size ({pg.size()}) x {inp.count}", _rank())
    algorithm = _check_algorithm(algorithm, "all_gather", caller, pg)
    work = pg.all_gather(out.flat, inp.flat, [inp.count] * pg.size(), inp.dtype_name,
                         out.finish, algorithm=algorithm, async_op=async_op)
    return _finish(work, async_op)


def gather(tensor: Any, gather_list: list[Any] | None = None, dst: int | None = None,
           group: GroupLike = None, async_op: bool = False, group_dst: int | None = None, *,
           algorithm: str | None = None) -> Work | None:
    """Gather ``tensor`` from every rank into ``gather_list`` on rank ``dst``.

    ``gather_list`` is required on ``dst`` (one array per rank; sizes may
    differ between ranks) and must be None or empty elsewhere.
    """
    if (type(tensor) is np.ndarray and (dst is None or type(dst) is int) and algorithm is None
            and group_dst is None):
        lane = _world.default_lane if group is None else _lane(group)  # tiny calls: see all_reduce
        if lane is not None:
            if async_op is False:
                if lane.gather(tensor, gather_list, dst):
                    return None
            elif async_op is True:
                work = getattr(lane, "gather_async", _no_lane)(tensor, gather_list, dst)
                if work is not None:
                    return work
    caller = "gather"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    root = _root(pg, dst, group_dst, name="dst", caller=caller)
    inp = as_buffer(tensor, name="tensor", caller=caller, rank=_rank(), writable=False)
    outs: list[Buffer] = []
    if pg.rank() == root:
        outs = [as_buffer(t, name=f"gather_list[{i}]", caller=caller, rank=_rank())
                for i, t in enumerate(_list(gather_list, "gather_list", caller, pg.size()))]
        _same_dtype(outs, inp.dtype_name, "gather_list", caller, against="'tensor'")
        if outs[root].count != inp.count:
            raise usage(caller, f"gather_list[{root}] holds {outs[root].count} elements but "
                                f"'tensor' holds {inp.count}", _rank())
    else:
        _none_or_empty(gather_list, "gather_list", "dst", caller)
    expected = [b.count for b in outs] if outs else None
    algorithm = _check_algorithm(algorithm, "gather", caller, pg)

    def finish() -> None:
        for b in outs:
            b.finish()

    work = pg.gather([b.flat for b in outs] or None, inp.flat, root, inp.dtype_name, finish,
                     algorithm=algorithm, async_op=async_op, expected_counts=expected)
    return _finish(work, async_op)


def scatter(tensor: Any, scatter_list: list[Any] | None = None, src: int | None = None,
            group: GroupLike = None, async_op: bool = False, group_src: int | None = None, *,
            algorithm: str | None = None) -> Work | None:
    """Send ``scatter_list[r]`` from rank ``src`` into ``tensor`` on each rank r.

    Args:
        tensor (numpy.ndarray or torch.Tensor): receives this rank's piece.
        scatter_list (list, optional): on ``src``, one piece per rank (pieces
            may differ in size: a meshcast extension); None elsewhere.
        src (int): global rank of the root (default: the group's first rank),
            or ``group_src``, its group rank.
        group, async_op, algorithm: as in :func:`broadcast`.

    Raises as :func:`broadcast`. A small synchronous call may return on
    ``src`` before the others have received; an error only they could see is
    then raised by the root's next call on ``group``.
    """
    if (type(tensor) is np.ndarray and (src is None or type(src) is int) and algorithm is None
            and group_src is None):
        lane = _world.default_lane if group is None else _lane(group)  # tiny calls: see all_reduce
        if lane is not None:
            if async_op is False:
                if lane.scatter(tensor, scatter_list, src):
                    return None
            elif async_op is True:
                work = getattr(lane, "scatter_async", _no_lane)(tensor, scatter_list, src)
                if work is not None:
                    return work
    caller = "scatter"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    root = _root(pg, src, group_src, name="src", caller=caller)
    out = as_buffer(tensor, name="tensor", caller=caller, rank=_rank())
    in_flat, expected = None, None
    if pg.rank() == root:
        ins = [as_buffer(t, name=f"scatter_list[{i}]", caller=caller, rank=_rank(),
                         writable=False)
               for i, t in enumerate(_list(scatter_list, "scatter_list", caller, pg.size()))]
        _same_dtype(ins, out.dtype_name, "scatter_list", caller, against="'tensor'")
        if ins[root].count != out.count:
            raise usage(caller, f"scatter_list[{root}] holds {ins[root].count} elements but "
                                f"'tensor' holds {out.count}", _rank())
        in_flat = _concat(ins, out.flat.dtype)
        expected = [b.count for b in ins]
    else:
        _none_or_empty(scatter_list, "scatter_list", "src", caller)
    algorithm = _check_algorithm(algorithm, "scatter", caller, pg)
    work = pg.scatter(out.flat, in_flat, root, out.dtype_name, out.finish, algorithm=algorithm,
                      async_op=async_op, expected_counts=expected)
    return _finish(work, async_op)


def reduce_scatter(output: Any, input_list: list[Any], op: Any = ReduceOp.SUM,
                   group: GroupLike = None, async_op: bool = False, *,
                   algorithm: str | None = None) -> Work | None:
    """Reduce ``input_list[r]`` over all ranks into ``output`` on rank r.

    Pieces may differ in size (``input_list[r]`` has rank r's output size;
    the same sizes on every rank). ``op`` as in :func:`all_reduce`:
    ``ReduceOp.AVG`` on integers truncates toward zero (the integer sum
    divided by the group size, e.g. -7 over 2 ranks gives -3).
    """
    if type(output) is np.ndarray and algorithm is None:
        lane = _world.default_lane if group is None else _lane(group)  # tiny calls: see all_reduce
        if lane is not None:
            if async_op is False:
                if getattr(lane, "reduce_scatter_list", _no_lane)(output, input_list, op):
                    return None
            elif async_op is True:
                work = getattr(lane, "reduce_scatter_list_async", _no_lane)(output, input_list,
                                                                            op)
                if work is not None:
                    return work
    caller = "reduce_scatter"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    out = as_buffer(output, name="output", caller=caller, rank=_rank())
    ins = [as_buffer(t, name=f"input_list[{i}]", caller=caller, rank=_rank(), writable=False)
           for i, t in enumerate(_list(input_list, "input_list", caller, pg.size()))]
    _same_dtype(ins, out.dtype_name, "input_list", caller, against="'output'")
    if ins[pg.rank()].count != out.count:
        raise usage(caller, f"input_list[{pg.rank()}] holds {ins[pg.rank()].count} elements "
                            f"but 'output' holds {out.count}", _rank())
    rop = _op(op, out.dtype_name, caller)
    algorithm = _check_algorithm(algorithm, "reduce_scatter", caller, pg)
    in_flat = _concat(ins, out.flat.dtype)
    work = pg.reduce_scatter(out, in_flat, [b.count for b in ins], rop, lambda: None,
                             algorithm=algorithm, async_op=async_op)
    return _finish(work, async_op)


def reduce_scatter_tensor(output: Any, input: Any, op: Any = ReduceOp.SUM,  # noqa: A002
                          group: GroupLike = None, async_op: bool = False, *,
                          algorithm: str | None = None) -> Work | None:
    """Reduce ``input`` (``world_size`` equal pieces) over all ranks; rank r gets piece r.

    ``op`` as in :func:`all_reduce`: ``ReduceOp.AVG`` on integers truncates
    toward zero (the integer sum divided by the group size, e.g. -7 over 2
    ranks gives -3). :func:`reduce_scatter_single` is the same call under torch
    2.13's name for it.
    """
    if (async_op is False or async_op is True) and algorithm is None:
        out = output if type(output) is np.ndarray else _torch_view(output)
        inp = input if type(input) is np.ndarray else _torch_view(input)
        # see all_reduce
        lane = None if out is None or inp is None else (
            _world.default_lane if group is None else _lane(group))
        if lane is not None:
            if async_op is False:
                if lane.reduce_scatter(out, inp, op):
                    return None
            else:
                work = getattr(lane, "reduce_scatter_async", _no_lane)(out, inp, op)
                if work is not None:
                    return work
    caller = "reduce_scatter_tensor"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    out = as_buffer(output, name="output", caller=caller, rank=_rank())
    inp = as_buffer(input, name="input", caller=caller, rank=_rank(), writable=False)
    _same_dtype_one(inp, out.dtype_name, "input", caller, against="'output'")
    if inp.count != out.count * pg.size():
        raise usage(caller, f"'input' holds {inp.count} elements; it must hold world_size "
                            f"({pg.size()}) x {out.count}", _rank())
    rop = _op(op, out.dtype_name, caller)
    algorithm = _check_algorithm(algorithm, "reduce_scatter", caller, pg)
    work = pg.reduce_scatter(out, inp.flat, [out.count] * pg.size(), rop, lambda: None,
                             algorithm=algorithm, async_op=async_op)
    return _finish(work, async_op)


# torch 2.13 renamed the two tensor forms (torch.distributed.all_gather_single and
# reduce_scatter_single; the old names warn there). Here both names are the same
# function object: no second frame on a tiny call, no warning either way.
all_gather_single = all_gather_into_tensor
reduce_scatter_single = reduce_scatter_tensor


def all_to_all(output_tensor_list: list[Any], input_tensor_list: list[Any],
               group: GroupLike = None, async_op: bool = False, *,
               algorithm: str | None = None) -> Work | None:
    """Send ``input_tensor_list[r]`` to rank r; receive rank r's piece into ``output_tensor_list[r]``.

    Args:
        output_tensor_list (list): one array or tensor per rank of the group, written.
        input_tensor_list (list): one array or tensor per rank, read; pieces may differ
            in size, but this rank's piece for itself must match its output's.
        group (ProcessGroup, optional): the default group if None.
        async_op (bool): return a ``Work`` instead of waiting; the outputs are written
            by the time it completes.
        algorithm (str, optional): meshcast extension, as for all_to_all_single.

    Returns:
        ``Work`` if ``async_op`` else None.

    Raises:
        InvalidUsage: lists of the wrong length, mixed dtypes, or this rank's own piece
            of another size (before anything is sent).
        MismatchError: ranks disagree on the call.
        CommTimeout / PeerGoneError: a rank did not take part in time / exited.
    """
    if async_op is False and algorithm is None:
        lane = _world.default_lane if group is None else _lane(group)  # tiny calls: see all_reduce
        if lane is not None and getattr(lane, "all_to_all_list", _no_lane)(
                output_tensor_list, input_tensor_list):
            return None
    elif async_op is True and algorithm is None:
        lane = _world.default_lane if group is None else _lane(group)
        work = getattr(lane, "all_to_all_list_async", _no_lane)(output_tensor_list,
                                                                  input_tensor_list)
        if work is not None:
            return work
    caller = "all_to_all"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    n = pg.size()
    ins = [as_buffer(t, name=f"input_tensor_list[{i}]", caller=caller, rank=_rank(),
                     writable=False)
           for i, t in enumerate(_list(input_tensor_list, "input_tensor_list", caller, n))]
    outs = [as_buffer(t, name=f"output_tensor_list[{i}]", caller=caller, rank=_rank())
            for i, t in enumerate(_list(output_tensor_list, "output_tensor_list", caller, n))]
    dtn = ins[0].dtype_name
    _same_dtype(ins, dtn, "input_tensor_list", caller, against="input_tensor_list[0]")
    _same_dtype(outs, dtn, "output_tensor_list", caller, against="input_tensor_list[0]")
    me = pg.rank()
    if ins[me].count != outs[me].count:
        raise usage(caller, f"input_tensor_list[{me}] holds {ins[me].count} elements but "
                            f"output_tensor_list[{me}] holds {outs[me].count} (this rank's "
                            f"piece for itself)", _rank())
    out_flat = _gather_target(outs, ins[0].flat.dtype)
    algorithm = _check_algorithm(algorithm, "all_to_all", caller, pg)
    work = pg.all_to_all(out_flat, _concat(ins, ins[0].flat.dtype), [b.count for b in ins],
                         [b.count for b in outs], dtn, lambda: _scatter_back(out_flat, outs),
                         algorithm=algorithm, async_op=async_op)
    return _finish(work, async_op)


def _splits(sizes: Any, buf: Buffer, n: int, name: str, caller: str) -> list[int]:
    """Element counts per rank for all_to_all_single's split sizes (rows of dim 0)."""
    rows = buf.shape[0] if buf.shape else 1
    row = buf.count // rows if rows else 0
    if sizes is not None:
        try:
            sizes = list(sizes)
        except TypeError:  # an int, say: refused here rather than by len() below
            raise usage(caller, f"split sizes for '{name}' must be a list of {n} ints, got "
                                f"{type(sizes).__name__}", _rank()) from None
    if not sizes:
        if rows % n:
            raise usage(caller, f"'{name}' has {rows} rows along dim 0, not divisible by the "
                                f"group size {n}; pass split sizes", _rank())
        return [rows // n * row] * n
    if len(sizes) != n or any(not isinstance(s, (int, np.integer)) or isinstance(s, bool)
                              or s < 0 for s in sizes):
        raise usage(caller, f"split sizes for '{name}' must be {n} non-negative ints, got "
                            f"{sizes}", _rank())
    if sum(sizes) != rows:
        raise usage(caller, f"split sizes for '{name}' add up to {sum(sizes)} but it has "
                            f"{rows} rows along dim 0", _rank())
    return [int(s) * row for s in sizes]


def all_to_all_single(output: Any, input: Any, output_split_sizes: Sequence[int] | None = None,  # noqa: A002
                      input_split_sizes: Sequence[int] | None = None, group: GroupLike = None,
                      async_op: bool = False, *, algorithm: str | None = None) -> Work | None:
    """Split ``input`` along dim 0, send piece r to rank r, concatenate what arrives into ``output``.

    Args:
        output_split_sizes / input_split_sizes (list[int], optional): rows of
            dim 0 received from / sent to each rank; equal splits if omitted.
    """
    if (async_op is False or async_op is True) and algorithm is None:
        out = output if type(output) is np.ndarray else _torch_view(output)
        inp = input if type(input) is np.ndarray else _torch_view(input)
        # see all_reduce
        lane = None if out is None or inp is None else (
            _world.default_lane if group is None else _lane(group))
        if lane is not None:
            if async_op is False:
                if (lane.all_to_all(out, inp)
                        if output_split_sizes is None and input_split_sizes is None
                        else getattr(lane, "all_to_all_split", _no_lane)(
                            out, inp, output_split_sizes, input_split_sizes)):
                    return None
            else:
                work = (getattr(lane, "all_to_all_async", _no_lane)(out, inp)
                        if output_split_sizes is None and input_split_sizes is None
                        else getattr(lane, "all_to_all_split_async", _no_lane)(
                            out, inp, output_split_sizes, input_split_sizes))
                if work is not None:
                    return work
    caller = "all_to_all_single"
    pg = _resolve(group, caller)
    async_op = _check_async(async_op, caller)
    if pg is None:
        return None
    out = as_buffer(output, name="output", caller=caller, rank=_rank())
    inp = as_buffer(input, name="input", caller=caller, rank=_rank(), writable=False)
    _same_dtype_one(out, inp.dtype_name, "output", caller, against="'input'")
    send = _splits(input_split_sizes, inp, pg.size(), "input", caller)
    recv = _splits(output_split_sizes, out, pg.size(), "output", caller)
    me = pg.rank()
    if send[me] != recv[me]:
        raise usage(caller, f"this rank sends {send[me]} elements to itself "
                            f"(input_split_sizes) but expects {recv[me]} "
                            f"(output_split_sizes)", _rank())
    algorithm = _check_algorithm(algorithm, "all_to_all", caller, pg)
    work = pg.all_to_all(out.flat, inp.flat, send, recv, inp.dtype_name, out.finish,
                         algorithm=algorithm, async_op=async_op)
    return _finish(work, async_op)


# ---------------------------------------------------------- point to point


def _peer(pg: ProcessGroup, peer: int | None, group_peer: int | None, name: str,
          caller: str) -> int:
    if peer is None and group_peer is None:
        raise usage(caller, f"'{name}' is required", _rank())
    r = _root(pg, peer, group_peer, name=name, caller=caller)
    if r == pg.rank():
        raise usage(caller, f"'{name}' is this rank itself ({pg.global_rank(r)}); a rank "
                            f"cannot send to or receive from itself", _rank())
    return r


def _tag(tag: Any, caller: str) -> int:
    if not isinstance(tag, (int, np.integer)) or isinstance(tag, bool) or \
            not TAGS[0] <= tag < TAGS[1]:
        raise usage(caller, f"'tag' must be an int in [{TAGS[0]}, {TAGS[1]}), got {tag!r}",
                    _rank())
    return int(tag)


def isend(tensor: Any, dst: int | None = None, group: GroupLike = None, tag: int = 0,
          group_dst: int | None = None) -> Work | None:
    """Send ``tensor`` to rank ``dst`` without waiting; returns a ``Work``.

    The data must stay unchanged until the Work completes. Messages between
    two ranks with the same tag arrive in the order they were sent.
    """
    if type(tensor) is np.ndarray and type(dst) is int and type(tag) is int and group_dst is None:
        # small messages: see lanes.TinyCallLane.isend
        lane = _world.default_lane if group is None else _lane(group)
        work = None if lane is None else lane.isend(tensor, dst, tag)
        if work is not None:
            return work
    caller = "isend"
    pg = _resolve(group, caller)
    if pg is None:
        return None
    peer = _peer(pg, dst, group_dst, "dst", caller)
    t = _tag(tag, caller)
    buf = as_buffer(tensor, name="tensor", caller=caller, rank=_rank(), writable=False)
    return pg.isend(buf.flat, peer, t)


def irecv(tensor: Any, src: int | None = None, group: GroupLike = None, tag: int = 0,
          group_src: int | None = None) -> Work | None:
    """Receive into ``tensor`` from rank ``src`` (None: any rank) without waiting.

    The returned Work's ``source_rank`` (and ``_source_rank()``) tell the sender.
    """
    if type(tensor) is np.ndarray and type(src) is int and type(tag) is int and group_src is None:
        # small messages: see lanes.TinyCallLane.irecv
        lane = _world.default_lane if group is None else _lane(group)
        work = None if lane is None else lane.irecv(tensor, src, tag)
        if work is not None:
            return work
    caller = "irecv"
    pg = _resolve(group, caller)
    if pg is None:
        return None
    peer = None if src is None and group_src is None else _peer(pg, src, group_src, "src",
                                                                caller)
    t = _tag(tag, caller)
    buf = as_buffer(tensor, name="tensor", caller=caller, rank=_rank())
    return pg.irecv(buf, peer, t)


def send(tensor: Any, dst: int | None = None, group: GroupLike = None, tag: int = 0,
         group_dst: int | None = None) -> None:
    """Send ``tensor`` to rank ``dst``; returns once the data is handed over.

    Raises:
        InvalidUsage: bad argument. PeerGoneError / CommTimeout: the receiver
        exited or did not take the data in time.
    """
    if type(dst) is int and type(tag) is int and group_dst is None:
        arr = tensor if type(tensor) is np.ndarray else _torch_view(tensor)
        if arr is not None:
            # small messages: see lanes.TinyCallLane.send
            lane = _world.default_lane if group is None else _lane(group)
            if lane is not None and lane.send(arr, dst, tag):
                return
    work = isend(tensor, dst, group, tag, group_dst)
    if work is not None:
        work.wait()


def recv(tensor: Any, src: int | None = None, group: GroupLike = None, tag: int = 0,
         group_src: int | None = None) -> int:
    """Receive into ``tensor`` from rank ``src`` (None: any rank); returns the sender's rank.

    Raises:
        InvalidUsage: bad argument. MismatchError: the message's size differs
        from ``tensor``'s. PeerGoneError / CommTimeout: the sender exited or
        did not send in time.
    """
    if type(src) is int and type(tag) is int and group_src is None:
        arr = tensor if type(tensor) is np.ndarray else _torch_view(tensor)
        if arr is not None:
            # small messages: see lanes.TinyCallLane.recv
            lane = _world.default_lane if group is None else _lane(group)
            if lane is not None and lane.recv(arr, src, tag):
                return src
    work = irecv(tensor, src, group, tag, group_src)
    if work is None:
        return -1
    work.wait()
    return work.source_rank if work.source_rank is not None else -1


class P2POp:
    """One send or receive for :func:`batch_isend_irecv`.

    Args:
        op: ``meshcast.isend`` or ``meshcast.irecv`` (torch's ``dist.isend`` works too).
        tensor: the data.
        peer: global rank of the other side (or ``group_peer``).
        group: the group (default: world). tag: message tag.
    """

    # (slots: a sendrecv makes two of these a call, and they were a sixth of its time)
    __slots__ = ("op", "kind", "tensor", "peer", "group", "tag", "group_peer")

    def __init__(self, op: Any, tensor: Any, peer: int | None = None, group: GroupLike = None,
                 tag: int = 0, group_peer: int | None = None) -> None:
        if op is isend:
            name = "isend"
        elif op is irecv:
            name = "irecv"
        else:
            name = getattr(op, "__name__", "")
            if name not in ("isend", "irecv"):
                raise usage("P2POp", f"'op' must be isend or irecv, got {op!r}", _rank())
        self.op = op
        self.kind = name
        self.tensor = tensor
        self.peer = peer
        self.group = group
        self.tag = tag
        self.group_peer = group_peer


def batch_isend_irecv(p2p_op_list: list[P2POp]) -> list[Work]:
    """Post every send and receive in ``p2p_op_list`` at once; returns their Works.

    Sends and receives make progress independently, so a batch in which
    every rank sends to one neighbour and receives from another cannot deadlock.
    All ops are validated before any is posted.
    """
    works = _batch_compiled(p2p_op_list)
    if not works:  # (False: the compiled batch could send nothing now)
        works = _batch_lane(p2p_op_list)
    if works is not None:
        return works
    caller = "batch_isend_irecv"
    if not isinstance(p2p_op_list, (list, tuple)) or not all(
            isinstance(p, P2POp) for p in p2p_op_list):
        raise usage(caller, "'p2p_op_list' must be a list of P2POp", _rank())
    prepared = []
    for p in p2p_op_list:
        pg = _resolve(p.group, caller)
        if pg is None:
            continue
        name = "dst" if p.kind == "isend" else "src"
        peer = _peer(pg, p.peer, p.group_peer, name, caller)
        t = _tag(p.tag, caller)
        buf = as_buffer(p.tensor, name="tensor", caller=caller, rank=_rank(),
                        writable=p.kind == "irecv")
        prepared.append((pg, p.kind, buf, peer, t))
    works = []
    for pg, kind, buf, peer, t in prepared:
        # Small messages that can move at once do (see lanes.TinyCallLane.isend);
        # groups across hosts have no such lane.
        lane = getattr(pg, "lane", None)
        if kind == "isend":
            work = lane.isend(buf.flat, pg.global_rank(peer), t) if lane else None
            works.append(work if work is not None else pg.isend(buf.flat, peer, t))
        else:
            work = lane.irecv(buf.flat, pg.global_rank(peer), t) if lane else None
            if work is not None:
                buf.finish()  # a staged (non-contiguous) receive is written back now
            works.append(work if work is not None else pg.irecv(buf, peer, t))
    return works


def _batch_lane(ops: Any) -> list[Work] | None:
    """:func:`batch_isend_irecv` of a list of P2POp on contiguous NumPy arrays with plain int
    peers and tags: every op checked the cheap way first (the lane's own checks are the
    front door's for such arrays), then each posted through the lane when its message
    can move at once, else through the group. None: some op needs the full validation
    (also a list that is not one, which the front door then refuses)."""
    w = _world.current
    if w is None or (type(ops) is not list and type(ops) is not tuple):
        return None
    default = w.default_group
    groups = []
    for p in ops:
        if type(p) is not P2POp:
            return None
        arr = p.tensor
        if (type(arr) is not np.ndarray or type(p.peer) is not int or type(p.tag) is not int
                or p.group_peer is not None):
            return None
        pg = default if p.group is None else p.group
        if (type(pg) is not ProcessGroup or (pg is not default and pg not in w.groups)
                or not pg.lane.p2p_ok(arr, p.peer, p.tag, p.kind == "irecv")):
            return None
        groups.append(pg)
    # Sends first (a batch has no order between its sends and its receives), so a
    # receive may wait a moment for its message: in a batch the peer is posting the
    # matching send right now (sendrecv, halo exchange), and a message that arrives
    # within the spin time is taken straight from the ring, without the general
    # path's handles and progress thread (8 B sendrecv, 2 ranks: 12.6 -> 9.7 us with
    # the sends listed first, 30 -> 10.5 us with the receives first).
    works: list[Any] = [None] * len(ops)
    held: list[int] = []
    for i, p in enumerate(ops):
        if p.kind == "isend":
            pg = groups[i]
            work = None if held else pg.lane.post_send(p.tensor, p.peer, p.tag, True)
            if work is None:
                if held or pg.transport.streams(p.tensor.nbytes):
                    held.append(i)  # (the sends after it too: sends keep their order)
                    continue
                work = pg.isend(p.tensor.reshape(-1), pg.group_rank(p.peer), p.tag)
            works[i] = work
    # A message streamed in pieces is posted after the receives: posting it also
    # drains what the peers stream to us, and a message that finds its receive
    # posted lands in place where one that does not is set aside in a private copy.
    for i, p in enumerate(ops):
        if p.kind != "isend":
            pg = groups[i]
            work = None if held else pg.lane.post_recv(p.tensor, p.peer, p.tag, True)
            if work is None:
                buf = as_buffer(p.tensor, name="tensor", caller="batch_isend_irecv",
                                rank=_rank())
                work = pg.irecv(buf, pg.group_rank(p.peer), p.tag)
            works[i] = work
    for i in held:
        p, pg = ops[i], groups[i]
        works[i] = pg.isend(p.tensor.reshape(-1), pg.group_rank(p.peer), p.tag)
    return works


def _batch_compiled(ops: Any) -> list[Work] | bool | None:
    """:func:`batch_isend_irecv` of P2POps of one group in one C call from the ops
    (TinyCallLane.make_batch), finished in Python when some op did not finish there
    (TinyCallLane.batch_done). None: not such a list (nothing done); False: no send
    could be written now (nothing done: the general batch's turn)."""
    w = _world.current
    if w is None or type(ops) is not list or not ops or type(ops[0]) is not P2POp:
        return None
    pg = ops[0].group  # (the C call checks that every op names the same)
    default = w.default_group
    if pg is None:
        pg = default
    elif type(pg) is not ProcessGroup or (pg is not default and pg not in w.groups):
        return None  # (a group across hosts, or destroyed: the Python batch explains)
    lane = pg.lane
    batch = lane.batch
    if batch is False:
        batch = lane.make_batch(P2POp, pg is default)
    if batch is None:
        return None
    got = batch(ops)
    if type(got) is tuple:
        return lane.batch_done(ops, got)
    return got


# ------------------------------------------------------------------ misc


def launch_env() -> Any:
    """What launched this process: ``meshcast run``, torchrun, mpiexec, srun... (a LaunchEnv)."""
    from .rendezvous.env import detect_launch_env

    return detect_launch_env()

