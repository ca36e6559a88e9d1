"""Object collectives: picklable Python objects over the array collectives.

Each object is pickled into bytes, the sizes travel first (one int64 per
object), then the bytes. Objects of different sizes make uneven pieces, which
only the general path takes (a few tens of microseconds in Python); so where
every rank knows every size (all_gather_object, gather_object) or the root
says how long a piece is (scatter_object_list), the pieces are padded to the
longest when that costs little (:func:`_pad_length`), and the calls stay on the
tiny-call lane: gather_object of small objects 72 -> 5 us at 2 ranks. Lengths
are padded to their size class (:func:`_size_class`), so that calls whose
pickles' sizes change a little from call to call reuse the array calls' plans
(all_gather_object of a growing list: 50 -> 10 us at 2 ranks). The root
goes to the array calls as a global rank (the lane takes those only).
Unpickling runs only on data that came from ranks of this job, which proved
the job secret at rendezvous; still, as with torch.distributed, never feed
these functions untrusted objects.
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


# Padding the pieces to the longest may add at most this many bytes beyond twice the
# exact ones; past that (one object much larger than the others) the uneven form runs.
PAD_SLACK_BYTES = 64 << 10


# Past this many bytes a size class is the size rounded to 64 bytes: a plan costs less
# than the padding would.
CLASSES_UP_TO = 1 << 20


def _size_class(length: int) -> int:
    """``length`` rounded up to its size class: a multiple of 64 bytes, and from 512
    bytes to :data:`CLASSES_UP_TO` of an eighth of the power of two below it (at most
    1/8 more).

    The array calls plan once per size (a new size costs tens of microseconds, a known
    one about one), and pickles' sizes change from call to call (a counter, a list that
    grows); padded to their class, calls of nearby sizes share one plan."""
    step = 64 if length > CLASSES_UP_TO else max(64, 1 << max(0, length.bit_length() - 4))
    return -(-length // step) * step


def _pad_length(sizes: list[int]) -> int | None:
    """The length pieces of ``sizes`` bytes travel padded to (the longest's size class),
    or None where that would cost too much (they travel uneven)."""
    length = _size_class(max(sizes))
    return length if length * len(sizes) <= 2 * sum(sizes) + PAD_SLACK_BYTES else None


def _padded(blob: np.ndarray, length: int) -> np.ndarray:
    """``blob`` followed by zeros, ``length`` bytes (``blob`` itself when it is that long)."""
    if blob.size == length:
        return blob
    out = np.zeros(length, np.uint8)
    out[:blob.size] = blob
    return out


def _all_sizes(blob: np.ndarray, n: int, group: Any) -> list[int]:
    """Every rank's blob size, on every rank (one tiny all_gather)."""
    sizes = np.zeros(n, np.int64)
    _api.all_gather_into_tensor(sizes, np.array([blob.size], np.int64), group=group)
    return sizes.tolist()


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
    src = pg.global_rank(root)
    blobs = ([_dump(o, f"object_list[{i}]", caller) for i, o in enumerate(object_list)]
             if me else [])
    sizes = np.array([b.size for b in blobs] if me else [0] * len(object_list), np.int64)
    _api.broadcast(sizes, src, group=group)
    # (the bytes padded to their size class: nearby sizes share the broadcast's plan)
    length = _size_class(int(sizes.sum()))
    data = (_padded(np.concatenate(blobs), length) if me and blobs
            else np.empty(length, np.uint8))
    _api.broadcast(data, src, group=group)
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
    sizes = _all_sizes(blob, n, group)
    top = _pad_length(sizes)
    if top is not None:
        pieces = [np.empty(top, np.uint8) for _ in sizes]
        _api.all_gather(pieces, _padded(blob, top), group=group)
        pieces = [p[:size] for p, size in zip(pieces, sizes)]
    else:
        pieces = [np.empty(size, np.uint8) for size in sizes]
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
    sizes = _all_sizes(blob, n, group)
    dst = pg.global_rank(root)
    top = _pad_length(sizes)
    if top is not None:
        pieces = [np.empty(top, np.uint8) for _ in range(n)] if me else None
        _api.gather(_padded(blob, top), pieces, dst, group=group)
    else:
        pieces = [np.empty(size, np.uint8) for size in sizes] if me else None
        _api.gather(blob, pieces, dst, group=group)
    if me:
        for i, (p, size) in enumerate(zip(pieces, sizes)):
            object_gather_list[i] = _load(p[:size])


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
    src = pg.global_rank(root)
    # the root says how long every piece is (-1: uneven pieces, their sizes scattered)
    sizes = [b.size for b in blobs] if me else []
    padded = _pad_length(sizes) if me else None
    length = np.array([-1 if padded is None else padded], np.int64)
    _api.broadcast(length, src, group=group)
    top = int(length[0])
    if top >= 0:  # each piece its size (8 bytes), then its bytes padded to their class
        piece = np.empty(8 + top, np.uint8)
        rows = None
        if me:  # (the pieces: the rows of one array)
            rows = np.zeros((n, 8 + top), np.uint8)
            rows[:, :8] = np.array(sizes, np.int64)[:, None].view(np.uint8)
            for row, b in zip(rows, blobs):
                row[8:8 + b.size] = b
        _api.scatter(piece, None if rows is None else list(rows), src, group=group)
        out[0] = _load(piece[8:8 + int(piece[:8].view(np.int64)[0])])
        return
    size = np.zeros(1, np.int64)
    _api.scatter(size, [np.array([b.size], np.int64) for b in blobs] if me else None, src,
                 group=group)
    data = np.empty(int(size[0]), np.uint8)
    _api.scatter(data, blobs, src, group=group)
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
    dst = pg.global_rank(_api._peer(pg, dst, group_dst, "dst", caller))
    blobs = [_dump(o, f"object_list[{i}]", caller) for i, o in enumerate(object_list)]
    sizes = np.array([b.size for b in blobs], np.int64)
    _api.send(sizes, dst, group=group)
    _api.send(np.concatenate(blobs) if blobs else np.empty(0, np.uint8), dst, group=group)


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
        src = pg.global_rank(_api._peer(pg, src, group_src, "src", caller))
    sizes = np.zeros(len(object_list), np.int64)
    sender = _api.recv(sizes, src, group=group)
    data = np.empty(int(sizes.sum()), np.uint8)
    _api.recv(data, sender, group=group)
    off = 0
    for i, n in enumerate(sizes.tolist()):
        object_list[i] = _load(data[off:off + n])
        off += n
    return sender
