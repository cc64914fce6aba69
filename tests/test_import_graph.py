"""The import graph of ``src/frankenstein`` has no cycle, no import runs up a floor, and no module hides an
import inside a function.

``FLOORS`` gives every module its floor (docs/architecture.md, "Floors"), as import-linter's layers
contract would: a module may import modules on its own floor or below, never above.

Built with ``ast`` from the source files (nothing is imported): module-level imports and imports inside
functions both count as edges; imports under ``if TYPE_CHECKING:`` do not (they never run). A function-local
import of a ``frankenstein`` module is allowed only in ``cli/`` (lazy command loading keeps ``frank --help``
fast) and in the places listed in ``ALLOWED_LOCAL`` with their reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "frankenstein"
# Self-contained task folders: programs of their own that agents work on, not part of Frankenstein.
EXCLUDED = (PKG / "agent" / "suite",)

# (importing module, imported module): why it is imported on first use.
ALLOWED_LOCAL: dict[tuple[str, str], str] = {}

# Floors, bottom (0) to top. A module's floor is that of the longest entry naming it or a package above it
# (``design.kinds`` covers ``design.kinds.speed``); ``frankenstein`` itself (``__version__``) is ground.
FLOORS: dict[str, int] = {
    # ground: no frank room above
    "frankenstein": 0, "errors": 0, "shipped": 0, "validation": 0, "chain": 0, "progress": 0, "store": 0,
    "store.rows": 0, "store.migrations": 0, "store.verify": 0, "store.core": 0,
    "config": 0, "measure": 0, "design.phases": 0, "workload.trace": 0, "workload.wire": 0, "scope": 0, "flags": 0, "schema": 0,
    # the served recipe, a campaign folder
    "campaign": 1, "served": 1,
    # engine adapters
    "engines": 2,
    # measurements a start makes; pure design files, rules and statistics
    "workload": 3, "agent": 3, "fidelity": 3, "regioncache": 3,
    "design": 3, "design.model": 3, "design.rules": 3, "design.stats": 3, "design.plan": 3, "design.table": 3,
    "design.blockcsv": 3, "design.timespent": 3, "design.command_guard": 3,
    # one start and what is read back from stored starts
    "design.start": 4, "design.pins": 4, "design.serving": 4, "design.percentiles": 4, "design.walltime": 4,
    # the kinds, and what a start is wrapped in
    "design.kinds": 5, "design.command": 5, "design.failed": 5, "design.prefetch": 5, "design.caches": 5,
    # register, verify, get
    "design.registry": 6,
    # analyze and run a design; use cases that act on a verified campaign
    "design.analysis": 7, "design.runner": 7, "design.quickcheck": 7, "design.dryrun": 7, "design.budget": 7, "design.aapilot": 7, "regioncache.service": 7,
    "design.replayrun": 7,
    "cluster": 8,
    "design.facts": 9,
    "ledger": 10, "gates": 10, "part_status": 10,
    "report": 11,
    "demo": 12, "cli": 12, "__main__": 12,
}  # fmt: skip


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int
    local: bool  # inside a function


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if not any(p.is_relative_to(x) for x in EXCLUDED))


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The frankenstein modules an import statement loads (``from pkg import mod`` loads ``pkg.mod``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for name in names:
        while name and name not in known:  # `import frankenstein.x.y` loads the package chain
            name = name.rpartition(".")[0]
        if name.startswith("frankenstein") and name not in out:
            out.append(name)
    return out


def edges_of(path: Path, known: set[str]) -> list[Edge]:
    module = module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[Edge] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub, local)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for dst in _targets(child, module, path.name == "__init__.py", known):
                    if dst != module:
                        out.append(Edge(module, dst, child.lineno, local))
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return out


def import_graph() -> list[Edge]:
    files = source_files()
    known = {module_name(p) for p in files}
    return [e for p in files for e in edges_of(p, known)]


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def floor_of(module: str) -> int | None:
    """The floor of the longest ``FLOORS`` entry that is the module or a package above it."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[1:n]) or "frankenstein"
        if name in FLOORS and (n > 1 or module == "frankenstein"):
            return FLOORS[name]
    return None


def upward(edges: list[Edge]) -> list[str]:
    """Each import that runs up a floor, named with both floors."""
    out = []
    for e in edges:
        src, dst = floor_of(e.src), floor_of(e.dst)
        if src is not None and dst is not None and dst > src:
            out.append(f"{e.src} (floor {src}, line {e.line}) imports {e.dst} (floor {dst})")
    return out


def test_every_module_has_a_floor() -> None:
    missing = sorted(m for m in map(module_name, source_files()) if floor_of(m) is None)
    assert not missing, "modules without a floor in FLOORS (add them, docs/architecture.md):\n" + "\n".join(missing)


def test_no_import_runs_up_a_floor() -> None:
    found = upward(import_graph())
    assert not found, "imports that run up a floor (docs/architecture.md, Floors):\n" + "\n".join(found)


def test_the_import_graph_has_no_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_function_local_import_of_our_modules_outside_the_cli() -> None:
    offenders = []
    for e in import_graph():
        if not e.local or e.src.startswith("frankenstein.cli") or (e.src, e.dst) in ALLOWED_LOCAL:
            continue
        offenders.append(f"{e.src} (line {e.line}) imports {e.dst} inside a function")
    assert not offenders, "function-local imports of frankenstein modules:\n" + "\n".join(offenders)


def test_the_graph_builder_sees_local_imports_and_skips_type_checking(tmp_path: Path) -> None:
    """The checker itself, on a two-module package written here: a cycle through a local import is found,
    an import under TYPE_CHECKING is not an edge."""
    global SRC, PKG
    saved = SRC, PKG
    pkg = tmp_path / "frankenstein"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from frankenstein import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from frankenstein import a\n"
        "def f():\n    from frankenstein.a import x\n"
    )
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from frankenstein import a\n")
    SRC, PKG = tmp_path, pkg
    try:
        edges = import_graph()
    finally:
        SRC, PKG = saved
    assert {(e.src, e.dst, e.local) for e in edges} == {
        ("frankenstein.a", "frankenstein.b", False),
        ("frankenstein.b", "frankenstein.a", True),
    }
    assert cycles(edges) == [["frankenstein.a", "frankenstein.b"]]


def test_the_floor_check_fails_on_an_upward_import(tmp_path: Path) -> None:
    """The checker itself, on a tiny package written here: ``store`` (ground) importing ``ledger`` (floor 10)
    is found and named, an import downwards or on the same floor is not, and no cycle is needed to fail."""
    global SRC, PKG
    saved = SRC, PKG
    pkg = tmp_path / "frankenstein"
    (pkg / "design" / "kinds").mkdir(parents=True)
    for init in (pkg, pkg / "design", pkg / "design" / "kinds"):
        (init / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "ledger.py").write_text("from frankenstein import errors\nfrom frankenstein.design.kinds import speed\n")
    (pkg / "design" / "kinds" / "speed.py").write_text("from frankenstein.design.kinds import base\n")
    (pkg / "design" / "kinds" / "base.py").write_text("import frankenstein.errors\n")
    (pkg / "store.py").write_text("import json\n\nfrom frankenstein.ledger import adopt\n")
    SRC, PKG = tmp_path, pkg
    try:
        edges = import_graph()
    finally:
        SRC, PKG = saved
    assert cycles(edges) == []
    assert upward(edges) == ["frankenstein.store (floor 0, line 3) imports frankenstein.ledger (floor 10)"]
