"""The shell reader's shape (issue 25): short functions, no import circle inside shell/, and
frozen syntax nodes built by keyword."""

import ast
import dataclasses
from pathlib import Path

import pytest
from support import ROOT

SHELL = ROOT / "miles_topology" / "shell"
LIMIT = 60  # lines of one function, decorators and docstring included


def lengths(root: Path = SHELL) -> dict[str, int]:
    """`module.function` (methods as `module.Class.function`) -> its number of lines."""
    out = {}
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())

        def walk(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                    out[f"{prefix}.{child.name}"] = child.end_lineno - start + 1
                    walk(child, f"{prefix}.{child.name}")
                elif isinstance(child, ast.ClassDef):
                    walk(child, f"{prefix}.{child.name}")
        walk(tree, path.stem)
    return out


def test_no_function_over_the_limit():
    over = {name: n for name, n in lengths().items() if n > LIMIT}
    assert not over, f"functions over {LIMIT} lines in shell/: {over}"


def test_the_measure_catches_a_long_function(tmp_path):
    body = "\n".join(f"        x{k} = {k}" for k in range(LIMIT))
    (tmp_path / "long.py").write_text(f"class C:\n    def f(self):\n{body}\n")
    (tmp_path / "short.py").write_text("def g():\n    return 1\n")
    got = lengths(tmp_path)
    assert got["long.C.f"] == LIMIT + 1 and got["short.g"] == 2


def _imports(path: Path) -> set[str]:
    """The shell modules a module imports, type-checking imports included."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
    return out & {p.stem for p in SHELL.glob("*.py")}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph`, or None."""
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return path[path.index(t):] + [t] if t in path else [m, t]
            if t not in state:
                got = visit(t, path + [t])
                if got:
                    return got
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            got = visit(m, [m])
            if got:
                return got
    return None


def test_no_import_circle_in_shell():
    graph = {p.stem: _imports(p) for p in SHELL.glob("*.py")}
    assert cycle(graph) is None, cycle(graph)


def test_the_circle_check_catches_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("name", ["Lit", "Param", "Sub", "Arith", "Word", "Assign", "Simple",
                                  "Heredoc", "AndOr", "Pipe", "If", "Case", "Loop", "ArithCmd",
                                  "Func", "Group"])
def test_syntax_nodes_are_frozen_and_keyword_built(name):
    from miles_topology.shell import syntax

    cls = getattr(syntax, name)
    params = dataclasses.fields(cls)
    assert all(f.kw_only for f in params) and hasattr(cls, "__slots__")
    node = cls(**{f.name: None for f in params})
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(node, params[0].name, 1)
    with pytest.raises(TypeError):
        cls(*[None] * len(params))


@pytest.mark.parametrize("name", ["Lit", "Word", "Simple", "Param", "Loop"])
def test_the_parsers_fast_build_is_the_same_frozen_node(name):
    from miles_topology.shell import syntax

    cls = getattr(syntax, name)
    given = {f.name: f"v{k}" for k, f in enumerate(dataclasses.fields(cls))}
    fast, slow = cls.make(**given), cls(**given)
    assert type(fast) is cls and fast == slow and hash(fast) == hash(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.line = 1
    with pytest.raises(TypeError):
        cls.make(*given.values())
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    with pytest.raises(TypeError):
        cls.make(**{k: v for k, v in given.items() if k != required[0]})
    defaults = {f.name: f.default for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING}
    only = {k: given[k] for k in required}
    assert all(getattr(cls.make(**only), k) == v for k, v in defaults.items())


# -- issue 34: the shell along Oils' seams (cmd_eval, word_eval, sh_expr_eval, builtins)

CLASS_LIMIT = 400  # lines of one class
COMPLEXITY_LIMIT = 30  # McCabe, counted as radon counts it


def class_lengths(root: Path = SHELL) -> dict[str, int]:
    out = {}
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                out[f"{path.stem}.{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def complexity(fn: ast.AST) -> int:
    """McCabe complexity of one function, its nested functions apart (radon's rules: one
    per if/elif/loop/except/ternary/assert/comprehension clause, one per extra operand of
    `and`/`or`)."""
    n = 1
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(node, ast.If | ast.IfExp | ast.For | ast.AsyncFor | ast.While |
                      ast.ExceptHandler | ast.Assert):
            n += 1
        elif isinstance(node, ast.comprehension):
            n += 1 + len(node.ifs)
        elif isinstance(node, ast.BoolOp):
            n += len(node.values) - 1
        if isinstance(node, ast.For | ast.While) and node.orelse:
            n += 1
        todo.extend(ast.iter_child_nodes(node))
    return n


def complexities(root: Path = SHELL) -> dict[str, int]:
    out = {}
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out[f"{path.stem}.{node.name}:{node.lineno}"] = complexity(node)
    return out


def test_no_class_over_the_limit():
    over = {name: n for name, n in class_lengths().items() if n > CLASS_LIMIT}
    assert not over, f"classes over {CLASS_LIMIT} lines in shell/: {over}"


def test_no_function_over_the_complexity_limit():
    over = {name: n for name, n in complexities().items() if n > COMPLEXITY_LIMIT}
    assert not over, f"functions over McCabe {COMPLEXITY_LIMIT} in shell/: {over}"


def test_the_measures_catch_a_big_class_and_a_branchy_function(tmp_path):
    ifs = "\n".join(f"        if x == {k}:\n            return {k}" for k in range(CLASS_LIMIT))
    (tmp_path / "big.py").write_text(f"class C:\n    def f(self, x):\n{ifs}\n")
    (tmp_path / "small.py").write_text("def g(a, b):\n    return [x for x in a if x] or b\n")
    assert class_lengths(tmp_path)["big.C"] > CLASS_LIMIT
    got = complexities(tmp_path)
    assert got["big.f:2"] == CLASS_LIMIT + 1 and got["small.g:1"] == 4


def test_no_mixin_classes_in_shell():
    """Concerns are collaborators an object holds, not bases it inherits."""
    trees = [ast.parse(path.read_text()) for path in sorted(SHELL.glob("*.py"))]
    classes = [n for t in trees for n in ast.walk(t) if isinstance(n, ast.ClassDef)]
    ours = {c.name for c in classes}
    for c in classes:
        bases = {ast.unparse(b) for b in c.bases}
        assert len(bases) <= 1 and not bases & ours, (c.name, bases)


def _names_imported(stem: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse((SHELL / f"{stem}.py").read_text())):
        if isinstance(node, ast.ImportFrom):
            out.add(("." * node.level) + (node.module or ""))
            out.update(f"{'.' * node.level}{node.module or ''}.{a.name}" for a in node.names)
    return out


def test_each_concern_lives_in_its_module():
    """Command substitution (the sandbox, `miles-topology flags`, text filters) only in
    substitute.py; the interpreter steps no loop and decides no test itself."""
    for stem in ("expand", "interpret", "params", "conditions", "loops", "assign"):
        got = _names_imported(stem)
        assert not {m for m in got if "pylaunch" in m or "yamlflags" in m or
                    "run_pipeline" in m}, (stem, got)
    assert {"..reading.yamlflags", "..reading.textfilters.run_pipeline"} <= \
        _names_imported("substitute")
    text = (SHELL / "interpret.py").read_text()
    assert "_Unsteppable" not in text and "def _test" not in text and "def keyed" not in text


def test_the_reader_holds_its_collaborators(tmp_path):
    from miles_topology.shell.assign import Assignments
    from miles_topology.shell.conditions import Conditions
    from miles_topology.shell.interpret import Reader
    from miles_topology.shell.loops import Loops
    from miles_topology.shell.params import Params
    from miles_topology.shell.substitute import Substitutions

    r = Reader(tmp_path / "s.sh", {})
    assert type(r.tests) is Conditions and type(r.loops) is Loops
    assert type(r.assigns) is Assignments and type(r.w.subs) is Substitutions
    assert type(r.w.params) is Params and r.w.subs.w is r.w and r.loops.r is r
