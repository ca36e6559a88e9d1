"""What each card of the guide teaches: the primitive, its ``dist.*`` call, its example numbers.

The example numbers are chosen so that a learner can check the result in
their head (all_reduce of ``[1]``, ``[2]``, ``[3]`` is ``6`` everywhere) and
so that every element is distinct where it matters (``10 * i`` apart), which
lets the animation show *which* chunk moves. :func:`inputs` builds them and
:func:`reference` computes the result with plain NumPy, independently of any
schedule, so the tests can hold the animation against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DTYPE = np.dtype(np.float32)
ROOT = 0
RANK_COUNTS = tuple(range(2, 9))
# elements per rank tensor (whole-buffer collectives) or per rank piece (the others)
SIZES_WHOLE = (1, 4, 8)
SIZES_PIECE = (1, 2, 4)


@dataclass(frozen=True)
class Primitive:
    """One card.

    Attributes:
        key: the collective's name in the registry (``"send_recv"`` for the p2p card).
        title: heading of the card.
        summary: one or two sentences: what every rank holds afterwards.
        call: the ``torch.distributed`` code (meshcast takes the same call).
        topology: which communication pattern it is (see the topology section).
        whole: the size is the whole tensor (True) or each rank's piece (False).
        rooted: the call has a ``src``/``dst`` root.
        reduces: the call combines values with an op (SUM here).
    """

    key: str
    title: str
    summary: str
    call: str
    topology: str
    whole: bool
    rooted: bool = False
    reduces: bool = False

    @property
    def sizes(self) -> tuple[int, ...]:
        return SIZES_WHOLE if self.whole else SIZES_PIECE


PRIMITIVES: tuple[Primitive, ...] = (
    Primitive(
        "send_recv", "send / recv",
        "Point to point: rank 0 sends its tensor, rank 1 receives it into its own. "
        "The other ranks take no part.",
        "if rank == 0:\n    dist.send(t, dst=1)\nelif rank == 1:\n    dist.recv(t, src=0)",
        "1-to-1", whole=True),
    Primitive(
        "broadcast", "broadcast",
        "The root's tensor is copied into the tensor of every rank.",
        "dist.broadcast(t, src=0)", "1-to-many", whole=True, rooted=True),
    Primitive(
        "reduce", "reduce",
        "The element-wise sum of every rank's tensor lands on the root only.",
        "dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)", "many-to-1", whole=True, rooted=True,
        reduces=True),
    Primitive(
        "all_reduce", "all_reduce",
        "Every rank ends with the element-wise sum of every rank's tensor.",
        "dist.all_reduce(t, op=dist.ReduceOp.SUM)", "all-to-all", whole=True, reduces=True),
    Primitive(
        "gather", "gather",
        "The root collects every rank's piece, in rank order.",
        "dist.gather(t, gather_list if rank == 0 else None, dst=0)", "many-to-1", whole=False,
        rooted=True),
    Primitive(
        "all_gather", "all_gather",
        "Every rank collects every rank's piece, in rank order.",
        "dist.all_gather_into_tensor(out, t)", "all-to-all", whole=False),
    Primitive(
        "scatter", "scatter",
        "The root's tensor is cut in pieces; rank i receives piece i.",
        "dist.scatter(t, scatter_list if rank == 0 else None, src=0)", "1-to-many",
        whole=False, rooted=True),
    Primitive(
        "reduce_scatter", "reduce_scatter",
        "Piece i of the element-wise sum of all ranks' tensors lands on rank i.",
        "dist.reduce_scatter_tensor(out, t, op=dist.ReduceOp.SUM)", "all-to-all", whole=False,
        reduces=True),
    Primitive(
        "all_to_all", "all_to_all",
        "Rank i sends its piece j to rank j: a transpose of the pieces across ranks.",
        "dist.all_to_all_single(out, t)", "all-to-all", whole=False),
    Primitive(
        "barrier", "barrier",
        "No data: no rank leaves until every rank has arrived. The messages carry 0 bytes.",
        "dist.barrier()", "all-to-all", whole=True),
)

BY_KEY = {p.key: p for p in PRIMITIVES}


def inputs(key: str, size: int, n: int) -> list[np.ndarray | None]:
    """Each rank's input as the user would pass it (``n``: elements per tensor or piece)."""
    p = size
    if key == "barrier":
        return [None] * p
    if key in ("send_recv", "broadcast", "reduce", "all_reduce", "gather", "all_gather"):
        return [np.array([(r + 1) + 10 * i for i in range(n)], dtype=DTYPE) for r in range(p)]
    if key == "scatter":
        return [np.arange(1, n * p + 1, dtype=DTYPE) if r == ROOT else None for r in range(p)]
    if key == "reduce_scatter":
        return [np.array([(r + 1) + 10 * j for j in range(n * p)], dtype=DTYPE) for r in range(p)]
    if key == "all_to_all":
        scale = 10 if n * p <= 10 else 100
        return [np.array([scale * (r + 1) + j for j in range(n * p)], dtype=DTYPE)
                for r in range(p)]
    raise KeyError(key)


def reference(key: str, size: int, n: int) -> list[np.ndarray | None]:
    """What each rank holds afterwards, computed with NumPy alone (None: the rank gets nothing)."""
    p, xs = size, inputs(key, size, n)
    if key == "barrier":
        return [None] * p
    if key == "send_recv":
        return [None, xs[0].copy()] + [None] * (p - 2)
    if key == "broadcast":
        return [xs[ROOT].copy() for _ in range(p)]
    if key == "reduce":
        return [np.sum(xs, axis=0, dtype=DTYPE) if r == ROOT else None for r in range(p)]
    if key == "all_reduce":
        return [np.sum(xs, axis=0, dtype=DTYPE) for _ in range(p)]
    if key == "gather":
        return [np.concatenate(xs) if r == ROOT else None for r in range(p)]
    if key == "all_gather":
        return [np.concatenate(xs) for _ in range(p)]
    if key == "scatter":
        return [xs[ROOT][r * n:(r + 1) * n].copy() for r in range(p)]
    if key == "reduce_scatter":
        total = np.sum(xs, axis=0, dtype=DTYPE)
        return [total[r * n:(r + 1) * n].copy() for r in range(p)]
    if key == "all_to_all":
        return [np.concatenate([xs[q][r * n:(r + 1) * n] for q in range(p)]) for r in range(p)]
    raise KeyError(key)


__all__ = ["BY_KEY", "DTYPE", "PRIMITIVES", "RANK_COUNTS", "ROOT", "Primitive", "inputs",
           "reference"]
