"""The algorithm registry: every schedule with its name, family, contract and description.

Algorithms register themselves with :func:`register` when their collective
module is imported; ``meshcast.algorithms/__init__.py`` imports them all, and
Python runs that before this module, so lookups always see every algorithm. The selector,
the simulator, the parametrised tests, the bench and the CLI listing find
them here, so adding an algorithm is one decorated generator.

Rules for ``supports(plan)``: it must give the same answer on every rank of a
call (it may look at ``size``, ``root``, ``dtype``, ``op``, the shared
``counts``, ``slot_bytes`` and ``segment_bytes``, never at buffer addresses),
because ranks choose their schedule independently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ._plan import Plan, Round

ScheduleFn = Callable[[Plan], Iterator[Round]]
#: Families the executor runs: the selector picks among these only.
EXECUTED = ("p2p", "arena")
#: The one-host fast paths, registered *described* (see _plan's "The one-host fast
#: paths"): simulated, animated and listed; the fast-path rules pick them, never the
#: selector. The runtime runs the one-shot ones decided before the call as programs
#: of these very generators (``_program``), the others still as paths/*.py (issue 13
#: item 3). Their names are what ``last_algorithm`` reports for them.
DESCRIBED = ("oneshot", "cma", "symmetric")
FAMILIES = EXECUTED + DESCRIBED
# what a described family needs of the plan, in words, when the plan lacks it
_NEEDS = {
    "oneshot": ("region_bytes", "the arena's one-shot regions (all ranks of the group on one host)"),
    "cma": ("single_copy", "a host that lets members read each other's memory (process_vm_readv)"),
    "symmetric": ("symmetric", "the call's buffers in a symmetric allocation (meshcast.empty)"),
}

COLLECTIVES = (
    "broadcast",
    "reduce",
    "all_reduce",
    "gather",
    "all_gather",
    "scatter",
    "reduce_scatter",
    "all_to_all",
    "barrier",
)


def _always(plan: Plan) -> bool:
    return True


@dataclass(frozen=True)
class AlgorithmEntry:
    """One registered schedule.

    Attributes:
        coll: collective (``"all_reduce"``).
        name: short snake name (``"ring"``); ``qualname`` is ``"all_reduce/ring"``.
        fn: the generator function ``fn(plan) -> Iterator[Round]``.
        description: one line for listings.
        requires: human wording of what ``supports`` checks, shown when a forced
            algorithm cannot run ("a commutative op", "equal split counts").
        supports: ``supports(plan) -> bool``; rank-invariant (see module doc).
        family: ``"p2p"`` (tag-matched channels, any transport), ``"arena"``
            (shared slots; only when ``plan.slot_bytes > 0``), or one of the
            described fast paths :data:`DESCRIBED` (never run by the executor).
    """

    coll: str
    name: str
    fn: ScheduleFn
    description: str
    requires: str
    supports: Callable[[Plan], bool]
    family: str

    @property
    def qualname(self) -> str:
        return f"{self.coll}/{self.name}"

    @property
    def executed(self) -> bool:
        """Whether the executor runs it (False: a described fast path, see :data:`DESCRIBED`)."""
        return self.family in EXECUTED

    @property
    def conditions(self) -> str:
        """All it needs, in words: its family's resource (described families) and ``requires``."""
        parts = [_NEEDS[self.family][1]] if self.family in _NEEDS else []
        return "; ".join(parts + ([self.requires] if self.requires else []))

    def why_not(self, plan: Plan) -> str | None:
        """None if this algorithm can run ``plan``, else the reason in words."""
        if self.family == "arena" and plan.slot_bytes <= 0:
            return "it needs a shared-memory arena (all ranks of the group on one host)"
        if self.family in _NEEDS and not getattr(plan, _NEEDS[self.family][0]):
            return f"it needs {_NEEDS[self.family][1]}"
        if not self.supports(plan):
            return (
                f"it requires {self.requires}" if self.requires else "it does not support this call"
            )
        return None

    def __call__(self, plan: Plan) -> Iterator[Round]:
        return self.fn(plan)


_REGISTRY: dict[str, dict[str, AlgorithmEntry]] = {}


def register(
    coll: str,
    name: str,
    *,
    description: str,
    supports: Callable[[Plan], bool] | None = None,
    requires: str = "",
    family: str = "p2p",
) -> Callable[[ScheduleFn], ScheduleFn]:
    """Decorator: register ``fn`` as algorithm ``name`` of collective ``coll``.

    Args:
        coll: one of :data:`COLLECTIVES`.
        name: short snake name, unique within ``coll``.
        description: one line for ``meshcast`` listings.
        supports: ``supports(plan) -> bool`` (rank-invariant); default: always.
        requires: what ``supports`` checks, in words.
        family: one of :data:`FAMILIES`.

    Returns:
        The undecorated function (so modules can call and compose schedules).
    """
    if coll not in COLLECTIVES:
        raise ValueError(f"unknown collective {coll!r}; expected one of {COLLECTIVES}")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")

    def deco(fn: ScheduleFn) -> ScheduleFn:
        table = _REGISTRY.setdefault(coll, {})
        if name in table and table[name].fn is not fn:
            raise ValueError(f"algorithm {coll}/{name} is registered twice")
        table[name] = AlgorithmEntry(
            coll=coll,
            name=name,
            fn=fn,
            description=description,
            requires=requires,
            supports=supports or _always,
            family=family,
        )
        return fn

    return deco


def get(coll: str, name: str) -> AlgorithmEntry:
    """The entry for ``coll``/``name``.

    Raises:
        KeyError: with a message listing the valid names.
    """
    table = _REGISTRY.get(coll)
    if table is None:
        raise KeyError(f"unknown collective {coll!r}; expected one of {', '.join(COLLECTIVES)}")
    if name not in table:
        raise KeyError(f"unknown algorithm {coll}/{name}; valid: {', '.join(sorted(table))}")
    return table[name]


def names(coll: str, family: str | None = None, *, described: bool = False) -> list[str]:
    """Names registered for ``coll`` (optionally only one family), in registration order.

    ``described``: include the described fast paths; the default leaves them out,
    so that what the selector, ``algorithm=`` and ``MESHCAST_ALGO`` accept is
    what the executor runs.
    """
    return [e.name for e in entries(coll, described=described)
            if family is None or e.family == family]


def entries(coll: str | None = None, *, described: bool = False) -> list[AlgorithmEntry]:
    """Every entry (of one collective, or all), collectives in :data:`COLLECTIVES` order;
    the described fast paths only with ``described=True`` (see :func:`names`)."""
    colls = [coll] if coll is not None else list(COLLECTIVES)
    return [e for c in colls for e in _REGISTRY.get(c, {}).values() if described or e.executed]


def listing(coll: str | None = None) -> str:
    """A plain-text table of the registry, one line per schedule (``meshcast algorithms``
    prints the fuller listing of :mod:`._cli`: docstrings and fast paths too)."""
    rows = [("algorithm", "family", "requires", "description")]
    for e in entries(coll):
        rows.append((e.qualname, e.family, e.requires or "-", e.description))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    return "\n".join(lines)


__all__ = [
    "COLLECTIVES",
    "DESCRIBED",
    "EXECUTED",
    "FAMILIES",
    "AlgorithmEntry",
    "entries",
    "get",
    "listing",
    "names",
    "register",
]
