"""Flags a Python source adds to an argparse parser, read with `ast`, never imported.

Two uses: the `add_arguments(parser)` of the functions a launch names (miles'
`add_user_provided_function_arguments`, miles/utils/arguments.py: it loads the functions of
`--rollout-function-path` and `--custom-generate-function-path` and calls their
`add_arguments` on the parser), and the own flags of a framework checkout (a fork of miles or
slime beside the script). Only literal spellings count: `parser.add_argument("--x", ...)`
and miles' `reset_arg(parser, "--x", ...)`; an argument added under a computed name is not
seen (the reader then knows less, never more).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .pysource import parse

VALUELESS = {"store_true", "store_false", "store_const", "append_const", "count", "help",
             "version"}

Read = Callable[[str], "str | None"]  # a module's dotted name -> its source, or None


@dataclass(frozen=True)
class Added:
    """One flag added: its spellings and whether it takes a value word."""

    names: tuple[str, ...]
    takes_value: bool


# The most characters of one source parsed: ast holds ~150 bytes a character (1 MiB of
# crafted add_argument calls: ~160 MiB); miles' own arguments.py is 173 KB. A larger
# source is not read (the reader knows less, never more).
SOURCE_MAX = 1 << 20


def _parse(text: str | None) -> ast.Module | None:
    if text is None or len(text) > SOURCE_MAX:
        return None
    try:
        return parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # `1+1+...+1`: too deep
        return None


def adds(node: ast.AST) -> Iterator[Added]:
    """Every literal `*.add_argument(...)` / `reset_arg(parser, ...)` under `node`."""
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        f = call.func
        head = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) \
            else None
        args = call.args[1:] if head == "reset_arg" else call.args
        if head not in ("add_argument", "reset_arg"):
            continue
        names = tuple(a.value for a in args if isinstance(a, ast.Constant)
                      and isinstance(a.value, str) and a.value.startswith("-"))
        if not names:
            continue
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        action = kw.get("action")
        valueless = (isinstance(action, ast.Constant) and action.value in VALUELESS) or (
            isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction")
        nargs = kw.get("nargs")
        if isinstance(nargs, ast.Constant) and nargs.value == 0:
            valueless = True
        out = names
        if isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction":
            out = names + tuple("--no-" + n[2:] for n in names if n.startswith("--"))
        yield Added(out, not valueless)


def field_flags(tree: ast.Module) -> Iterator[Added]:
    """The flags a loop over a dataclass's fields adds, one a field: `for f in
    dataclasses.fields(FSDPArgs): parser.add_argument(f"--{f.name.replace('_', '-')}", ...)`
    (miles 31f1ca9 backends/fsdp_utils/arguments.py parse_fsdp_cli, and slime's FSDP backend
    before it dropped FSDP). A bool field is a switch (store_true; with
    BooleanOptionalAction its --no- form too)."""
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    for loop in ast.walk(tree):
        cls = _fields_loop(loop, classes)
        if cls is None:
            continue
        calls = [c for c in ast.walk(loop) if isinstance(c, ast.Call) and c.args
                 and getattr(c.func, "attr", None) == "add_argument"
                 and _per_field(c.args[0], loop.target.id)]
        if not calls:
            continue
        dashed = any(getattr(n, "attr", None) == "replace" for c in calls
                     for n in ast.walk(c.args[0]))
        negated = any(getattr(n, "attr", None) == "BooleanOptionalAction" for c in calls
                      for n in ast.walk(c))
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name = "--" + (node.target.id.replace("_", "-") if dashed else node.target.id)
                switch = isinstance(node.annotation, ast.Name) and node.annotation.id == "bool"
                yield Added((name, "--no-" + name[2:]) if switch and negated else (name,),
                            not switch)


def _fields_loop(loop: ast.AST, classes: dict[str, ast.ClassDef]) -> ast.ClassDef | None:
    """The class of `for f in dataclasses.fields(C)` (C defined in the module), else None."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
            and isinstance(loop.iter, ast.Call) and loop.iter.args
            and isinstance(loop.iter.args[0], ast.Name)):
        return None
    f = loop.iter.func
    called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    return classes.get(loop.iter.args[0].id) if called == "fields" else None


def _per_field(arg: ast.AST, var: str) -> bool:
    """An f-string "--{VAR.name...}": the flag named after each field."""
    if not isinstance(arg, ast.JoinedStr) or not arg.values:
        return False
    head = arg.values[0]
    return isinstance(head, ast.Constant) and head.value == "--" and any(
        isinstance(n, ast.Attribute) and n.attr == "name" and isinstance(n.value, ast.Name)
        and n.value.id == var for n in ast.walk(arg))


@dataclass
class _Module:
    name: str
    tree: ast.Module

    def imported(self, local: str) -> tuple[str, str | None] | None:
        """(module, attribute) a local name is imported as, or None."""
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if (a.asname or a.name) == local:
                        return node.module, a.name
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                base = self.name.split(".")[:-node.level]
                mod = ".".join(base + ([node.module] if node.module else []))
                for a in node.names:
                    if (a.asname or a.name) == local:
                        return mod, a.name
            if isinstance(node, ast.Import):
                for a in node.names:
                    if (a.asname or a.name.split(".")[0]) == local:
                        return (a.name if a.asname else a.name.split(".")[0]), None
        return None

    def top(self, name: str) -> ast.AST | None:
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and node.name == name:
                return node
        return None


class Resolver:
    """Reads `add_arguments` of a function named by its dotted path, following imports."""

    def __init__(self, read: Read):
        self.read = read
        self._mods: dict[str, _Module | None] = {}

    def module(self, name: str) -> _Module | None:
        if name not in self._mods:
            tree = _parse(self.read(name))
            self._mods[name] = _Module(name, tree) if tree is not None else None
        return self._mods[name]

    def function_arguments(self, path: str) -> list[Added] | None:
        """The flags `load_function(path).add_arguments(parser)` adds ([] when the function
        has no `add_arguments`), or None when the path cannot be resolved here."""
        mod_name, _, attr = path.rpartition(".")
        if not mod_name:
            return None
        mod = self.module(mod_name)
        if mod is None:
            return None
        return self._of(mod, attr, depth=0)

    def _of(self, mod: _Module, attr: str, depth: int) -> list[Added] | None:
        if depth > 8:
            return None
        # `attr.add_arguments = FUNC` at module level (miles' generate_hub functions)
        for node in mod.tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == "add_arguments"
                    and isinstance(t.value, ast.Name) and t.value.id == attr
                    for t in node.targets):
                return self._body(mod, node.value, depth)
        node = mod.top(attr)
        if isinstance(node, ast.ClassDef):  # a class with an add_arguments method
            meth = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                         and n.name == "add_arguments"), None)
            return [] if meth is None else self._scan(mod, meth, depth)
        if node is not None:
            return []  # a plain function: it adds nothing
        got = mod.imported(attr)
        if got is None:
            return None
        other = self.module(got[0] if got[1] is None else got[0])
        if other is None:
            return None
        return self._of(other, got[1] or attr, depth + 1)

    def _body(self, mod: _Module, value: ast.AST, depth: int) -> list[Added] | None:
        """The flags the function an `add_arguments` attribute is set to adds."""
        if isinstance(value, ast.Name):
            node = mod.top(value.id)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return self._scan(mod, node, depth)
            got = mod.imported(value.id)
            other = self.module(got[0]) if got else None
            if other is not None and isinstance(other.top(got[1] or ""), ast.FunctionDef):
                return self._scan(other, other.top(got[1]), depth + 1)
            return None
        if isinstance(value, ast.Lambda):
            return self._scan(mod, value, depth)
        return None

    def _scan(self, mod: _Module, fn: ast.AST, depth: int) -> list[Added] | None:
        out = list(adds(fn))
        for call in ast.walk(fn):  # `OTHER.add_arguments(parser)`: what OTHER adds too
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                    and call.func.attr == "add_arguments" \
                    and isinstance(call.func.value, ast.Name):
                more = self._of(mod, call.func.value.id, depth + 1)
                if more is None:
                    return None
                out += more
        return out


def own_flags(read: Read, package: str, limit: int = 64) -> list[Added]:
    """The literal flags a framework package (miles, slime or a fork's) adds in its arguments
    modules (utils/arguments.py and each backend's arguments.py) and in the modules of the
    package they import (a fork's ``from slime_vllm.backends.vllm_utils.arguments import
    add_vllm_arguments``), at most `limit` modules."""
    out: list[Added] = []
    todo = [f"{package}.utils.arguments", f"{package}.backends.sglang_utils.arguments",
            f"{package}.backends.megatron_utils.arguments",
            f"{package}.backends.fsdp_utils.arguments"]
    seen: set[str] = set()
    while todo and len(seen) < limit:
        mod = todo.pop(0)
        if mod in seen:
            continue
        seen.add(mod)
        tree = _parse(read(mod))
        if tree is None:
            continue
        found = [*adds(tree), *field_flags(tree)]
        out += found
        if found:  # follow what a module that adds flags imports from its package
            todo += [m for m in _imports(tree, mod) if m.split(".")[0] == package]
    return out


def _imports(tree: ast.Module, name: str) -> list[str]:
    """The modules a module imports (``from a.b import c``: a.b and a.b.c; relative ones
    resolved against `name`)."""
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(name.split(".")[:-node.level] + ([base] if base else []))
            out += [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return [m for m in out if m]
