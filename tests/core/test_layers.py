"""The core reads bottom-up: the import graph of miles_topology has no cycle, and no module
imports one of a higher layer. Lazy imports inside functions count, and so do imports only
for type checkers (under `if TYPE_CHECKING:`): a circle a type checker must untangle is a
circle a reader must untangle too."""

import ast
from pathlib import Path

import pytest
from support import ROOT

PKG = ROOT / "miles_topology"

# bottom first; a subpackage is one unit (each `__main__` is a command, whatever its folder).
# A unit may import its own layer or lower ones.
LAYERS = (
    ("codes",),  # the problem codes: the vocabulary every layer reports in
    ("model",),  # Topology, its parts, the rules on it (checks/), the GPU table
    # reading inputs into it: the gate, stack, flag grammar, sources; the package face
    # (`Topology.from_*`); then the Python launcher sandbox, then the bash reader (it runs
    # a helper through the sandbox)
    ("reading", "__init__"),
    ("pylaunch", "spare"),  # spare: the sandbox child started before the options are read
    ("shell",),
    ("judging",),  # a launch's verdict, memory fit, cost, plans, code selection
    ("reporting",),  # the sink, the output formats, the maps
    ("migrations",),  # rewriting inputs: migrations and --fix (they print through the sink)
    ("stdin", "cli", "__main__"),  # the commands
)
LAYER = {unit: n for n, units in enumerate(LAYERS) for unit in units}


def _name(path: Path, root: Path = PKG) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:  # a subpackage; the package is __init__
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST, typing: bool = True):
    """Import nodes, those under `if TYPE_CHECKING:` included unless `typing` is False."""
    for node in ast.iter_child_nodes(tree):
        if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for s in node.orelse for n in _imports(ast.Module([s], []), typing))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node, typing)


def _targets(module: str, is_pkg: bool, node, modules) -> set[str]:
    """The miles_topology modules an import statement loads (relative ones resolved; the
    package itself is `__init__`)."""
    if isinstance(node, ast.Import):
        heads, names = [a.name for a in node.names], []
    else:
        if node.level:
            base = [] if module == "__init__" else module.split(".")
            base = base if is_pkg else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            head = ".".join(["miles_topology", *base, *([node.module] if node.module else [])])
        else:
            head = node.module or ""
        heads, names = [head], [a.name for a in node.names]
    out = set()
    for head in heads:
        if head != "miles_topology" and not head.startswith("miles_topology."):
            continue
        rel = head[len("miles_topology."):]
        subs = [f"{rel}.{n}".lstrip(".") for n in names if f"{rel}.{n}".lstrip(".") in modules]
        out |= set(subs)
        if not names or len(subs) < len(names):  # names an attribute of the module itself
            out.add(rel or "__init__")
    return out


MODULES = {_name(p): p for p in PKG.rglob("*.py")
           if "fixtures" not in p.parts}


def graph(modules=MODULES, typing: bool = True) -> dict[str, set[str]]:
    """Module -> the miles_topology modules it imports (for type checkers too, unless
    `typing` is False)."""
    out = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"
        out[name] = {t for node in _imports(tree, typing)
                     for t in _targets(name, is_pkg, node, modules)} - {name}
    return out


def _unit(module: str) -> str:
    return "__main__" if module.endswith("__main__") else module.split(".")[0]


def upward(g: dict[str, set[str]]) -> list[str]:
    return [f"{a} -> {b}" for a, targets in g.items() for b in sorted(targets)
            if LAYER[_unit(b)] > LAYER[_unit(a)]]


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
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

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_unit_has_a_layer():
    assert {_unit(m) for m in MODULES} <= set(LAYER), "add the new module to LAYERS"


def test_no_import_runs_up_a_layer():
    assert not upward(graph())


def test_no_import_cycle():
    """No circle anywhere, imports for type checkers included (the shell's word expansion and
    command execution meet through shell/cursor.py and a Protocol, not through each other)."""
    assert cycles(graph()) == []
    assert not cycles(graph(typing=False))


def test_the_walk_sees_a_lazy_upward_import_and_a_cycle(tmp_path):
    """The checks above fail on the defects they guard against: a function-level import of
    a higher layer (what model.py's from_flags once did), a two-module circle, and a circle
    closed by an import for type checkers only (placement -> model once did)."""
    for pkg in ("model", "reading"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "model" / "topology.py").write_text(
        "def from_flags(argv):\n    from ..reading.sources import read_flags\n"
        "    return read_flags\n")
    (tmp_path / "reading" / "sources.py").write_text("from ..model.topology import Topology\n")
    (tmp_path / "codes.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .model.topology import T\n")
    (tmp_path / "model" / "grid.py").write_text("from ..codes import T\n")
    mods = {_name(p, tmp_path): p for p in tmp_path.rglob("*.py")}
    g = graph(mods)
    assert {"model.topology -> reading.sources", "codes -> model.topology"} <= set(upward(g))
    assert cycles(g) == [["model.topology", "reading.sources"]]
    assert graph(mods, typing=False)["codes"] == set()


@pytest.mark.parametrize("module", ["model.topology", "model.errors", "model.grid",
                                    "model.layers", "model.placement", "codes"])
def test_the_floor_imports_nothing_above_the_model(module):
    assert all(LAYER[_unit(t)] <= LAYER["model"] for t in graph()[module])
