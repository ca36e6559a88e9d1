"""No import cycles in meshcast: the layout shows the layers (issue 13, item 5).

Checked on the source (ast), like test_algorithm_imports.py: the graph has an
edge A -> B for every import in A's module body, top-level ``if``/``try``
blocks included, and ``if TYPE_CHECKING:`` too (a cycle the type checker
needs is still a cycle between the layers, and it becomes a real one the day
someone moves the import out); an import inside a function is deferred to where
it runs, so it is no edge. Any cycle fails, named in full.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import meshcast

SRC = Path(meshcast.__file__).parent
PACKAGE = "meshcast"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a module body, descending into blocks but not into functions
    or classes."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _statements(node.body)
            yield from _statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody,
                          *(h.body for h in node.handlers)):
                yield from _statements(block)
        elif isinstance(node, ast.With):
            yield from _statements(node.body)


def _targets(module: str, node: ast.stmt) -> set[str]:
    """The meshcast modules an import statement of ``module`` loads by name."""
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            is_package = MODULES[module].name == "__init__.py"
            base = module.split(".")
            base = base[:len(base) - node.level + (1 if is_package else 0)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        # `from pkg import name`: the submodule pkg.name if there is one, else pkg
        names = {f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source
                 for a in node.names}
    else:
        return set()
    return {name for name in names if name in MODULES}


def import_graph() -> dict[str, set[str]]:
    """``{module: modules its module body imports}`` over every module of the package."""
    graph = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = set().union(*(_targets(name, node) for node in _statements(tree.body)))
        graph[name].discard(name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert {"meshcast.group", "meshcast.lanes", "meshcast.paths.oneshot"} <= set(graph)
    assert "meshcast.lanes" in graph["meshcast.group"]
    assert "meshcast.paths.single_copy" in graph["meshcast.lanes"]


def test_find_cycle_names_the_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle among module-level imports: " + " -> ".join(cycle)


def test_the_check_sees_a_type_checking_import():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from .group import ProcessGroup\n")
    found = set().union(*(_targets("meshcast.lanes", n) for n in _statements(tree.body)))
    assert found == {"meshcast.group"}


def test_the_lane_and_the_paths_never_import_the_group():
    """The group runs them, not the other way round: not even inside a function (they
    name the group by paths.GroupView)."""
    for name, path in MODULES.items():
        if name == "meshcast.lanes" or name.startswith("meshcast.paths"):
            tree = ast.parse(path.read_text(), str(path))
            imported = set().union(*(_targets(name, node) for node in ast.walk(tree)
                                     if isinstance(node, ast.stmt)))
            assert "meshcast.group" not in imported, f"{name} imports meshcast.group"
