"""Algorithms are schedules, not I/O: they import only rank math, the plan types and reduce ops.

Checked on the source (ast), so the rule holds whatever else happens to be
imported in the test process.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import meshcast.algorithms

PACKAGE = Path(meshcast.algorithms.__file__).parent
# the runners are not algorithms: _execute meets I/O, _simulate and _select drive schedules,
# _cli lists them (and reads the sources that report the fast paths); _explain says which
# one a call would run (it asks the table, and across hosts the spanning group's rules)
RUNNERS = {"__init__", "_execute", "_simulate", "_select", "_cli", "_explain"}
SCHEDULE_MODULES = sorted(p for p in PACKAGE.glob("*.py") if p.stem not in RUNNERS)
# hierarchical.py composes every collective across hosts (its families are picked by
# spanning.py, not by the registry), and eager.py finishes them from the agreement's rows;
# they are held to the same import rule as the rest.
COMPOSITIONS = {"hierarchical", "eager"}
COLLECTIVE_MODULES = sorted(p.stem for p in PACKAGE.glob("*.py")
                            if not p.stem.startswith("_") and p.stem not in COMPOSITIONS)

STDLIB = {"__future__", "collections", "collections.abc", "dataclasses", "typing", "math"}
OURS = {
    "meshcast.topology",
    "meshcast.ops",
    "meshcast.algorithms._plan",
    "meshcast.algorithms._registry",
    "meshcast.algorithms._common",
    "meshcast.algorithms._onehost",
}
OURS |= {f"meshcast.algorithms.{name}" for name in COLLECTIVE_MODULES}


def imported_modules(path: Path, package: str = "meshcast.algorithms") -> set[str]:
    """Absolute names of every module ``path`` (in ``package``) imports.

    ``from . import x`` and ``from .. import x`` count as importing module ``x``.
    """
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module in (
                "meshcast",
                "meshcast.algorithms",
            ):  # from .. import ops / from . import x
                out |= {f"{module}.{alias.name}" for alias in node.names}
            else:
                out.add(module)
    return out


def test_there_are_schedule_modules():
    names = {p.stem for p in SCHEDULE_MODULES}
    assert {"all_reduce", "broadcast", "_plan", "_registry"} <= names


@pytest.mark.parametrize("path", SCHEDULE_MODULES, ids=[p.stem for p in SCHEDULE_MODULES])
def test_schedule_modules_import_only_rank_math_plan_and_ops(path):
    bad = {
        m
        for m in imported_modules(path)
        if m not in STDLIB and m not in OURS and m != "numpy" and not m.startswith("numpy.")
    }
    assert not bad, (
        f"{path.name} imports {sorted(bad)}; algorithms may import only _plan, _registry, topology, ops and numpy"
    )


def test_topology_and_ops_stay_pure():
    src = Path(meshcast.algorithms.__file__).parent.parent
    assert imported_modules(src / "topology.py", "meshcast") <= {"__future__", "dataclasses"}
    ops_imports = imported_modules(src / "ops.py", "meshcast")
    assert ops_imports <= {
        "__future__",
        "enum",
        "collections.abc",
        "typing",
        "numpy",
        "meshcast.errors",
    }


def test_package_imports_every_collective_module():
    imported = imported_modules(PACKAGE / "__init__.py")
    for name in COLLECTIVE_MODULES:
        assert f"meshcast.algorithms.{name}" in imported, (
            f"algorithms/__init__.py does not import {name}"
        )
