"""``meshcast algorithms [COLLECTIVE]``: what can run a collective, from the registry and the code.

Three kinds of rows:

* the registered schedules (:mod:`._registry`): family, what ``supports``
  requires, and from each generator's docstring its first line and the first
  sentence of its ``Steps`` and ``Bytes`` paragraphs;
* the described schedules (:data:`._registry.DESCRIBED`): the one-host fast
  paths (one-shot, single-copy "cma", symmetric) written as schedules, listed
  the same way; the runtime runs the one-shot ones decided before the call as
  programs (compiled or in Python) and paths/*.py for the others (issue 13 item 3)
  and the decision rules of ``_select.fast_path`` pick them, so they cannot
  be forced;
* the families across hosts (:data:`.hierarchical.ALGORITHMS`, then
  :data:`.eager.ALGORITHMS`: a small call's data riding in its agreement):
  one function each, listed the same way from its docstring, with what the
  group needs for it (:func:`.hierarchical.requires`, :func:`.eager.requires`);
* the fast paths that are not schedules: names ``last_algorithm`` can report
  that are none of the above. None is left (``tests/unit/test_algorithms_cli.py``
  holds it so); they are found by reading the code that reports them
  (:func:`fast_paths`), so a new path that reports itself unregistered shows up.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

from . import _registry, eager
from . import hierarchical as hier
from ._registry import AlgorithmEntry

HELP = "list the algorithms of every collective (or one): schedules and fast paths"

#: Modules whose ``last_algorithm = ...`` assignments report the fast paths.
ONE_HOST_MODULES = ("meshcast.group", "meshcast.lanes", "meshcast.paths.oneshot",
                    "meshcast.paths.symmetric")
ACROSS_HOSTS_MODULES = ("meshcast.spanning",)
# Where a module's call protocol is called from, besides the module itself: calls.py
# calls ProcessGroup._submit through the group's Machinery, as ``m.submit(kind, ...)``.
CALLERS = {"meshcast.group": ("meshcast.calls",)}

SOURCES = {
    "one host": "group.py, lanes.py, paths/",
    "across hosts": "spanning.py",
}
FAST_PATHS_TITLE = "fast paths (not yet schedules, see issue 13)"
ACROSS_TITLE = ("across hosts (algorithms/hierarchical.py, picked by its choose(); force one "
                "with algorithm='NAME' or MESHCAST_ALGO='{coll}:NAME'; algorithms/eager.py "
                "whenever the data fit the agreement, never forced)")
AGREEMENT_TITLE = "across hosts (algorithms/eager.py; nothing to force)"
DESCRIBED_TITLE = ("described schedules, the one-host fast paths (one-shot ones run as programs, "
                   "gather's, scatter's and all_to_all's in the tiny-call lane; broadcast's "
                   "and all_gather's cma too; the others by paths/*.py; _select.fast_path "
                   "picks them, never forced)")
WIDTH = 110  # a Steps/Bytes sentence longer than this is cut (the docstring has it all)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``meshcast algorithms``."""
    p.description = (
        "List every registered algorithm (schedule) per collective with its family, its "
        "requirements and the first lines of its docstring, then the one-host fast paths "
        "as described schedules, the families a group spanning hosts runs, and the fast "
        "paths that group.last_algorithm can report but that are not schedules yet."
    )
    p.add_argument("collective", nargs="?", default=None,
                   help=f"only this collective (one of: {', '.join(_registry.COLLECTIVES)})")
    p.add_argument("--size", default=None, metavar="SIZE",
                   help="instead of the listing, say what runs COLLECTIVE with SIZE bytes per "
                        "rank (K/M/G suffixes), where its code is and where it is tested")
    p.add_argument("-n", "--nproc", type=int, default=2, help="ranks, with --size (default 2)")
    p.add_argument("--hosts", type=int, default=1,
                   help="hosts the ranks are spread over, with --size (default 1)")
    p.add_argument("--no-cma", action="store_true",
                   help="with --size: as on a kernel that forbids process_vm_readv")


def handle(ns: argparse.Namespace) -> int:
    """Print the listing; returns 0, or 2 for an unknown collective."""
    coll = ns.collective
    if coll is not None and coll not in _registry.COLLECTIVES:
        print(f"meshcast algorithms: unknown collective {coll!r}; the collectives are: "
              f"{', '.join(_registry.COLLECTIVES)}", file=sys.stderr)
        return 2
    if ns.size is not None:
        from ..config import parse_size
        from ._explain import explain

        if coll is None:
            print("meshcast algorithms: --size needs a COLLECTIVE", file=sys.stderr)
            return 2
        try:
            print(explain(coll, parse_size(ns.size), ns.nproc, ns.hosts, not ns.no_cma))
        except ValueError as exc:
            print(f"meshcast algorithms: {exc}", file=sys.stderr)
            return 2
        return 0
    print(render(coll))
    return 0


# ----------------------------------------------------------------- listing


def render(coll: str | None = None) -> str:
    """The listing of one collective (or all, in :data:`_registry.COLLECTIVES` order)."""
    fast = fast_paths()
    colls = [coll] if coll is not None else list(_registry.COLLECTIVES)
    blocks = [_render_collective(c, fast) for c in colls]
    return "\n\n".join(blocks)


def _render_collective(coll: str, fast: dict[str, dict[str, list[str]]]) -> str:
    every = _registry.entries(coll, described=True)
    entries = [e for e in every if e.executed]
    described = [e for e in every if not e.executed]
    lines = [f"{coll}: {len(entries)} schedules (algorithms/{coll}.py; force one with "
             f"algorithm='NAME' or MESHCAST_ALGO='{coll}:NAME')"]
    across = (*hier.families(coll), *eager.names(coll))
    width = max([len(e.name) for e in every] + [len(f) for f in across])
    for title, group in ((None, entries), (DESCRIBED_TITLE, described)):
        if title and group:
            lines.append(f"  {title}:")
        for e in group:
            lines.append(f"  {e.name.ljust(width)}  {e.family:9}  requires: {e.conditions or '-'}")
            lines.extend(f"  {' ' * width}        {text}" for text in summary(e))
    if across:
        title = ACROSS_TITLE if hier.families(coll) else AGREEMENT_TITLE
        lines.append(f"  {title.format(coll=coll)}:")
    for family in across:
        fn, needs = ((eager.ALGORITHMS[coll][1], eager.requires(coll))
                     if family in eager.names(coll)
                     else (hier.ALGORITHMS[coll][family], hier.requires(coll, family)))
        lines.append(f"  {family.ljust(width)}  {'hosts':9}  requires: {needs or '-'}")
        lines.extend(f"  {' ' * width}        {text}" for text in _doc_summary(fn, family))
    left = {where: table[coll] for where, table in fast.items() if table.get(coll)}
    if left:
        lines.append(f"  {FAST_PATHS_TITLE}:")
    for where, names in left.items():
        lines.append(f"    {where + ':':14}{', '.join(names):34}(reported by {SOURCES[where]})")
    return "\n".join(lines)


def summary(entry: AlgorithmEntry) -> list[str]:
    """The docstring's first line, then the first sentence of Steps and of Bytes if any."""
    return _doc_summary(entry.fn, entry.description)


def _doc_summary(fn: object, fallback: str) -> list[str]:
    """:func:`summary` of any function (``fallback``: the line when it has no docstring)."""
    doc = inspect.getdoc(fn) or ""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", doc) if p.strip()]
    out = [_plain(paragraphs[0]) if paragraphs else fallback]
    for i, para in enumerate(paragraphs):
        if para.startswith(("Steps", "Bytes")):
            if para.endswith(":") and i + 1 < len(paragraphs):  # "Steps:" then a list
                para = f"{para} {paragraphs[i + 1].lstrip('* ')}"
            out.append(_clip(_first_sentence(_plain(para))))
    return out


def _plain(text: str) -> str:
    return text.replace("``", "")


def _first_sentence(text: str) -> str:
    m = re.search(r"\.(\s|$)", text)
    return text if m is None else text[:m.start() + 1]


def _clip(text: str) -> str:
    return textwrap.shorten(text, WIDTH, placeholder=" ...")


# -------------------------------------------------------------- fast paths


def fast_paths() -> dict[str, dict[str, list[str]]]:
    """``{"one host" | "across hosts": {collective: [name, ...]}}``: what
    ``last_algorithm`` can report beyond the registered schedules (and, across hosts,
    beyond the families of :data:`.hierarchical.ALGORITHMS`).

    Read from the source of :data:`ONE_HOST_MODULES` and
    :data:`ACROSS_HOSTS_MODULES` (every ``last_algorithm = ...``), so a new
    fast path shows up here when it starts reporting itself. A module whose
    source is not installed contributes nothing.
    """
    return {
        "one host": _finish(_reported(m) for m in ONE_HOST_MODULES),
        "across hosts": _finish((_reported(m) for m in ACROSS_HOSTS_MODULES), families=True),
    }


def _finish(found: Iterable[list[tuple[str, str]]], families: bool = False
            ) -> dict[str, list[str]]:
    """Drop the registered schedules (and with ``families`` the families across hosts,
    eager ones included); order names by where the code first reports them."""
    pairs = [pair for part in found for pair in part]
    order = list(dict.fromkeys(name for _, name in pairs))
    table: dict[str, list[str]] = {}
    for coll, name in pairs:
        listed = (*_registry.names(coll, described=True),
                  *((*hier.families(coll), *eager.names(coll)) if families else ()))
        if coll in _registry.COLLECTIVES and name not in listed:
            table.setdefault(coll, [])
            if name not in table[coll]:
                table[coll].append(name)
    return {c: sorted(table[c], key=order.index) for c in _registry.COLLECTIVES if c in table}


def _reported(module: str) -> list[tuple[str, str]]:
    """Every ``(collective, name)`` a ``*.last_algorithm = ...`` in ``module`` can set."""
    tree = _tree(module)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    out: list[tuple[int, tuple[str, str]]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "last_algorithm" for t in node.targets)):
            continue
        out.extend((node.lineno, pair) for pair in _values(node.value, node, parents, tree, module))
    return [pair for _, pair in sorted(out, key=lambda item: item[0])]


def _values(value: ast.expr, at: ast.AST, parents: dict[ast.AST, ast.AST], tree: ast.Module,
            module: str) -> list[tuple[str, str]]:
    """The ``(collective, name)`` pairs one assigned expression stands for."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return [_split(value.value)]
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
        # a module-level table of labels (lanes._ONESHOT): its values
        table = getattr(importlib.import_module(module), value.value.id, {})
        return [_split(v) for v in table.values() if isinstance(v, str) and "/" in v]
    if not isinstance(value, ast.JoinedStr) or len(value.values) != 2:
        return []
    first, second = value.values
    if isinstance(first, ast.Constant) and isinstance(second, ast.FormattedValue):
        # f"broadcast/{family}": a family of algorithms/hierarchical.py
        coll = str(first.value).rstrip("/")
        return [(coll, fam) for fam in hier.families(coll)]
    if isinstance(first, ast.FormattedValue) and isinstance(second, ast.Constant):
        # f"{kind}/oneshot" in a method taking kind: the kinds its callers pass along
        # with the argument that guards the assignment (ProcessGroup._submit's
        # staged= for oneshot, single= for cma)
        name = str(second.value).lstrip("/")
        trees = [tree, *(_tree(m) for m in CALLERS.get(module, ()))]
        return [(kind, name) for kind in _guarded_kinds(at, parents, trees)]
    return []


def _split(label: str) -> tuple[str, str]:
    coll, _, name = label.partition("/")
    return coll, name


def _tree(module: str) -> ast.Module:
    """The parsed source of ``module`` (empty if its source is not installed)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return ast.Module(body=[], type_ignores=[])
    return ast.parse(Path(spec.origin).read_text(), spec.origin)


def _guarded_kinds(at: ast.AST, parents: dict[ast.AST, ast.AST], trees: list[ast.Module]
                   ) -> list[str]:
    """The first arguments of the calls (in ``trees``) of the method around ``at`` that
    pass a keyword the ``if`` around ``at`` tests (the method may define the closure
    ``at`` is in); a call may name the method without its underscore (a bound alias)."""
    node, guard = at, None
    while guard is None and node in parents:
        parent = parents[node]
        if isinstance(parent, ast.If) and node in parent.body:
            guard = parent
        node = parent
    if guard is None:
        return []
    names = {n.id for n in ast.walk(guard.test) if isinstance(n, ast.Name)}
    func, tested = node, set()
    while func in parents and not tested:
        func = parents[func]
        if isinstance(func, ast.FunctionDef):
            tested = names & {a.arg for a in func.args.kwonlyargs}
    if not tested or not isinstance(func, ast.FunctionDef):
        return []
    kinds = []
    names = {func.name, func.name.lstrip("_")}
    for call in (c for tree in trees for c in ast.walk(tree)):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in names and call.args
                and isinstance(call.args[0], ast.Constant)):
            continue
        passed = {k.arg for k in call.keywords
                  if not (isinstance(k.value, ast.Constant) and k.value.value is None)}
        if tested & passed:
            kinds.append(str(call.args[0].value))
    return kinds


__all__ = ["HELP", "add_arguments", "fast_paths", "handle", "render", "summary"]
