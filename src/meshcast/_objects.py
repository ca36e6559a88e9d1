"""Object collectives: picklable Python objects over the array collectives.

Each object is pickled into bytes, the sizes travel first (one int64 per
object), then the bytes (uneven pieces are fine: meshcast's gather,
all_gather and scatter accept them). Unpickling runs only on data that came
from ranks of this job, which proved the job secret at rendezvous; still,
as with torch.distributed, never feed these functions untrusted objects.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from . import _api
from .errors import usage


def _dump(obj: Any, name: str, caller: str) -> np.ndarray:
    """``obj`` pickled, or InvalidUsage naming the argument (before anything is sent)."""
    try:
        raw = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickle raises many types for one cause
        raise usage(caller, f"'{name}' cannot be pickled: {type(exc).__name__}: {exc}",
                    _api._rank()) from exc
    return np.frombuffer(raw, np.uint8).copy()


def _load(raw: np.ndarray) -> Any:
    return pickle.loads(raw.tobytes())  # noqa: S301 - peers are authenticated ranks of the job


def _need_list(value: Any, name: str, caller: str) -> list:
    if not isinstance(value, list):
        raise usage(caller, f"'{name}' must be a list, got {type(value).__name__}",
                    _api._rank())
    return value


def broadcast_object_list(object_list: list[Any], src: int | None = None, group: Any = None,
                          device: Any = None, group_src: int | None = None) -> None:
    """Broadcast the picklable objects in ``object_list`` from ``src``, in place.

    Every rank passes a list of the same length; on the other ranks its
    entries are replaced by the source's objects.
    """
    caller = "broadcast_object_list"
    object_list = _need_list(object_list, "object_list", caller)
    pg = _api._resolve(group, caller)
    if pg is None:
        return
    root = _api._root(pg, src, group_src, name="src", caller=caller)
    me = pg.rank() == root
    blobs = ([_dump(o, f"object_list[{i}]", caller) for i, o in enumerate(object_list)]
             if me else [])
    sizes = np.array([b.size for b in blobs] if me else [0] * len(object_list), np.int64)
    _api.broadcast(sizes, group=group, group_src=root)
    data = np.concatenate(blobs) if me and blobs else np.empty(int(sizes.sum()), np.uint8)
    _api.broadcast(data, group=group, group_src=root)
    if not me:
        off = 0
        for i, n in enumerate(sizes.tolist()):
            object_list[i] = _load(data[off:off + n])
            off += n


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None) -> None:
    """Gather ``obj`` from every rank into ``object_list`` (length = group size) on every rank."""
    caller = "all_gather_object"
    object_list = _need_list(object_list, "object_list", caller)
    pg = _api._resolve(group, caller)
    if pg is None:
        return
    n = pg.size()
    if len(object_list) != n:
        raise usage(caller, f"'object_list' must have {n} entries (one per rank), got "
                            f"{len(object_list)}", _api._rank())
    blob = _dump(obj, "obj", caller)
    sizes = [np.zeros(1, np.int64) for _ in range(n)]
    _api.all_gather(sizes, np.array([blob.size], np.int64), group=group)
    pieces = [np.empty(int(s[0]), np.uint8) for s in sizes]
    _api.all_gather(pieces, blob, group=group)
    for i, p in enumerate(pieces):
        object_list[i] = _load(p)


def gather_object(obj: Any, object_gather_list: list[Any] | None = None, dst: int | None = None,
                  group: Any = None, group_dst: int | None = None) -> None:
    """Gather ``obj`` from every rank into ``object_gather_list`` on rank ``dst``."""
    caller = "gather_object"
    pg = _api._resolve(group, caller)
    if pg is None:
        return
    root = _api._root(pg, dst, group_dst, name="dst", caller=caller)
    n = pg.size()
    me = pg.rank() == root
    if me:
        object_gather_list = _need_list(object_gather_list, "object_gather_list", caller)
        if len(object_gather_list) != n:
            raise usage(caller, f"'object_gather_list' must have {n} entries on dst, got "
                                f"{len(object_gather_list)}", _api._rank())
    blob = _dump(obj, "obj", caller)
    sizes = [np.zeros(1, np.int64) for _ in range(n)] if me else None
    _api.gather(np.array([blob.size], np.int64), sizes, group=group, group_dst=root)
    pieces = [np.empty(int(s[0]), np.uint8) for s in sizes] if me else None
    _api.gather(blob, pieces, group=group, group_dst=root)
    if me:
        for i, p in enumerate(pieces):
            object_gather_list[i] = _load(p)


def scatter_object_list(scatter_object_output_list: list[Any],
                        scatter_object_input_list: list[Any] | None = None,
                        src: int | None = None, group: Any = None,
                        group_src: int | None = None) -> None:
    """Send ``scatter_object_input_list[r]`` from ``src`` to rank r, which finds it in
    ``scatter_object_output_list[0]``."""
    caller = "scatter_object_list"
    out = _need_list(scatter_object_output_list, "scatter_object_output_list", caller)
    if not out:
        raise usage(caller, "'scatter_object_output_list' must have at least one entry",
                    _api._rank())
    pg = _api._resolve(group, caller)
    if pg is None:
        return
    root = _api._root(pg, src, group_src, name="src", caller=caller)
    n = pg.size()
    me = pg.rank() == root
    blobs = None
    if me:
        ins = _need_list(scatter_object_input_list, "scatter_object_input_list", caller)
        if len(ins) != n:
            raise usage(caller, f"'scatter_object_input_list' must have {n} entries on src, "
                                f"got {len(ins)}", _api._rank())
        blobs = [_dump(o, f"scatter_object_input_list[{i}]", caller) for i, o in enumerate(ins)]
    size = np.zeros(1, np.int64)
    _api.scatter(size, [np.array([b.size], np.int64) for b in blobs] if me else None,
                 group=group, group_src=root)
    data = np.empty(int(size[0]), np.uint8)
    _api.scatter(data, blobs, group=group, group_src=root)
    out[0] = _load(data)


def send_object_list(object_list: list[Any], dst: int | None = None, group: Any = None,
                     device: Any = None, group_dst: int | None = None) -> None:
    """Send the picklable objects in ``object_list`` to rank ``dst``."""
    caller = "send_object_list"
    object_list = _need_list(object_list, "object_list", caller)
    pg = _api._resolve(group, caller)
    if pg is None:
        return
    # Checked here so that the error names this function, not the send inside it.
    _api._peer(pg, dst, group_dst, "dst", caller)
    blobs = [_dump(o, f"object_list[{i}]", caller) for i, o in enumerate(object_list)]
    sizes = np.array([b.size for b in blobs], np.int64)
    _api.send(sizes, dst, group=group, group_dst=group_dst)
    _api.send(np.concatenate(blobs) if blobs else np.empty(0, np.uint8), dst, group=group,
              group_dst=group_dst)


def recv_object_list(object_list: list[Any], src: int | None = None, group: Any = None,
                     device: Any = None, group_src: int | None = None) -> int:
    """Receive objects sent with :func:`send_object_list` into ``object_list`` (same length).

    Returns:
        the sender's global rank (``src`` may be None: any rank); -1 on a rank
        outside ``group``.
    """
    caller = "recv_object_list"
    object_list = _need_list(object_list, "object_list", caller)
    pg = _api._resolve(group, caller)
    if pg is None:
        return -1  # as recv: a rank outside the group receives nothing
    if src is not None or group_src is not None:
        _api._peer(pg, src, group_src, "src", caller)
    sizes = np.zeros(len(object_list), np.int64)
    sender = _api.recv(sizes, src, group=group, group_src=group_src)
    data = np.empty(int(sizes.sum()), np.uint8)
    _api.recv(data, sender, group=group)
    off = 0
    for i, n in enumerate(sizes.tolist()):
        object_list[i] = _load(data[off:off + n])
        off += n
    return sender
