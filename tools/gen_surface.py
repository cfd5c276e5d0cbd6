"""Generate miles_topology/surface.json: every flag miles' train.py accepts, read statically.

miles' `parse_args` (miles/utils/arguments.py) builds one argparse parser: Megatron-LM's
`megatron.training.arguments.parse_args` with miles' `add_miles_arguments` as the
extra-args provider, which adds miles' own flags, the router's (`RouterArgs.add_cli_args`
with the `--router-` prefix) and SGLang's `ServerArgs.add_cli_args` twice, as `--sglang-*`
and `--eval-sglang-*` (miles/backends/sglang_utils/arguments.py `_add_prefixed_server_args`,
which skips `_SKIPPED_SERVER_ARGS`). This script reads those sources with `ast` and never
imports them: a small interpreter walks the functions that add arguments, evaluates literal
arguments, and expands the dataclasses Megatron (`ArgumentGroupFactory`) and SGLang
(`add_cli_args_from_dataclass`) turn into flags, following those helpers' rules.

Sources, pinned (the commits are written into the JSON):
  miles          fetch github:radixark/miles            -> a bare git dir, at HEAD
  Megatron-LM    fetch github:radixark/Megatron-LM      -> branch miles-main, the fork miles'
                 docker/Dockerfile clones (MEGATRON_REPO=radixark/Megatron-LM, -b miles-main)
  SGLang         `pip download --no-deps sglang==0.5.16` (the lmsysorg/sglang:v0.5.16 image
                 miles' Dockerfile starts from; the sgl-project/sglang git history is too
                 large to mirror here, and the wheel holds the same python sources)
  sglang-router  `pip download --no-deps sglang-router==0.3.2` (miles requires >=0.2.3)
  slime          fetch github:THUDM/slime (optional): slime's own flags (its surface, with
                 the same Megatron-LM and SGLang rows) and its docker/patch/latest/megatron.patch
  other versions `pip download --no-deps sglang==0.5.23` and fetch github:NVIDIA/Megatron-LM
                 (optional): flags of a newer SGLang / Megatron-LM (`other_versions`), with
                 the `--sglang-*` flags miles' own code passes (its image's sglang-miles build)

Regenerate:
  .venv/bin/python tools/gen_surface.py \\
      --miles /work/.mirror/radixark+miles/repo \\
      --megatron /work/.mirror/radixark+Megatron-LM/repo --megatron-rev miles-main \\
      --sglang sglang-0.5.16-*.whl --router sglang_router-0.3.2-*.whl \\
      --slime /work/.mirror/THUDM+slime/repo \\
      --newer-sglang sglang-0.5.23-*.whl \\
      --newer-megatron /work/.mirror/NVIDIA+Megatron-LM/repo > miles_topology/surface.json
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

# ---------------------------------------------------------------- sources


class Tree:
    """Python files of one upstream package, from a bare git dir at a rev or a wheel."""

    def __init__(self, root: str, rev: str = "HEAD"):
        self.root, self.rev = root, rev
        if root.endswith(".whl"):
            self.zip = zipfile.ZipFile(root)
            digest = hashlib.sha256(Path(root).read_bytes()).hexdigest()
            self.pin = f"{Path(root).name} sha256:{digest}"
        else:
            self.zip = None
            self.pin = self._git("rev-parse", f"{rev}^{{commit}}").strip()
        self._cache: dict[str, ast.Module | None] = {}

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", f"--git-dir={self.root}", *args], check=True,
                              capture_output=True, text=True).stdout

    def read(self, path: str) -> str | None:
        try:
            if self.zip is not None:
                return self.zip.read(path).decode()
            return self._git("show", f"{self.pin}:{path}")
        except (KeyError, subprocess.CalledProcessError):
            return None

    def module(self, path: str) -> ast.Module | None:
        if path not in self._cache:
            text = self.read(path)
            self._cache[path] = ast.parse(text) if text is not None else None
        return self._cache[path]


TREES: dict[str, Tree] = {}  # top-level package name -> its tree


def module_ast(name: str) -> tuple[ast.Module, str] | None:
    tree = TREES.get(name.split(".")[0])
    if tree is None:
        return None
    base = name.replace(".", "/")
    for path in (base + ".py", base + "/__init__.py"):
        mod = tree.module(path)
        if mod is not None:
            return mod, path
    return None


# ---------------------------------------------------------------- values


class Unknown:
    def __repr__(self) -> str:
        return "?"


UNKNOWN = Unknown()
MISSING = object()
SUPPRESS = "==SUPPRESS=="


class Sym(str):
    """A name the evaluator does not resolve to a value (a type, an action class)."""


@dataclass
class Module:
    tree: ast.Module
    name: str
    defs: dict = field(default_factory=dict)  # name -> FunctionDef / ClassDef
    assigns: dict = field(default_factory=dict)  # name -> value node
    imports: dict = field(default_factory=dict)  # local name -> (module, attr)
    package: str = ""  # what a relative import starts from

    @classmethod
    def load(cls, name: str) -> Module | None:
        got = module_ast(name)
        if got is None:
            return None
        if name in _MODULES:
            return _MODULES[name]
        m = cls(got[0], name)
        m.package = name if got[1].endswith("__init__.py") else name.rpartition(".")[0]
        for node in m.tree.body:
            m.index(node)
        _MODULES[name] = m
        return m

    def index(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            self.defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.assigns[t.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            self.assigns[node.target.id] = node.value
        elif isinstance(node, ast.ImportFrom):
            base = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            mod = node.module if node.level == 0 else \
                ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                self.imports[a.asname or a.name] = (mod, a.name)
        elif isinstance(node, ast.Try):
            for n in node.body:
                self.index(n)

    def resolve(self, name: str):
        """(module, def node) of a function or class visible here by that name."""
        if name in self.defs:
            return self, self.defs[name]
        if name in self.imports:
            mod, attr = self.imports[name]
            other = Module.load(mod)
            if other is not None:
                return other.resolve(attr)
        return None


_MODULES: dict[str, Module] = {}


class Scope:
    def __init__(self, module: Module, local: dict | None = None, parent: Scope | None = None):
        self.module, self.local, self.parent = module, local or {}, parent

    def lookup(self, name: str):
        s: Scope | None = self
        while s is not None:
            if name in s.local:
                return s.local[name]
            s = s.parent
        if name in self.module.assigns:
            return ev(self.module.assigns[name], Scope(self.module))
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        return Sym(name)


def ev(node: ast.AST | None, scope: Scope):
    """The value of an expression when it is made of literals and known names."""
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [ev(e, scope) for e in node.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else items
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            return UNKNOWN
        return {ev(k, scope): ev(v, scope) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name):
        return scope.lookup(node.id)
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "argparse":
            return SUPPRESS if node.attr == "SUPPRESS" else Sym(node.attr)
        if isinstance(node.value, ast.Name):  # Class.field: a dataclass default
            got = scope.module.resolve(node.value.id)
            if got is not None and isinstance(got[1], ast.ClassDef):
                for f in dataclass_fields(got[0], got[1]):
                    if f.name == node.attr:
                        return f.default if f.default is not MISSING else UNKNOWN
        return Sym(ast.unparse(node))
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            x = ev(v.value, scope) if isinstance(v, ast.FormattedValue) else v.value
            if not isinstance(x, str) or isinstance(x, Sym):
                return UNKNOWN
            parts.append(x)
        return "".join(parts)
    if isinstance(node, ast.BinOp):
        a, b = ev(node.left, scope), ev(node.right, scope)
        if UNKNOWN in (a, b) or isinstance(a, Sym) or isinstance(b, Sym):
            return UNKNOWN
        try:
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.Sub):
                return a - b
        except TypeError:
            return UNKNOWN
        return UNKNOWN
    if isinstance(node, ast.UnaryOp):
        v = ev(node.operand, scope)
        if v is UNKNOWN or isinstance(v, Sym):
            return UNKNOWN
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.USub):
            return -v
        return UNKNOWN
    if isinstance(node, ast.IfExp):
        t = ev(node.test, scope)
        if t is UNKNOWN or isinstance(t, Sym):
            return UNKNOWN
        return ev(node.body if t else node.orelse, scope)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in ("list", "tuple") and len(node.args) == 1:
            v = ev(node.args[0], scope)
            return list(v) if isinstance(v, (list, tuple)) else UNKNOWN
        if node.func.id in ("int", "float", "str") and len(node.args) == 1:
            v = ev(node.args[0], scope)
            return UNKNOWN if v is UNKNOWN or isinstance(v, Sym) else v
    return UNKNOWN


def truth(node: ast.AST, scope: Scope):
    """True/False when an `if` test is decidable here, else None (both branches run)."""
    v = ev(node, scope)
    return None if v is UNKNOWN or isinstance(v, Sym) else bool(v)


# ---------------------------------------------------------------- dataclasses


@dataclass
class DField:
    name: str
    annotation: ast.AST
    default: object  # value, UNKNOWN or MISSING
    metadata: dict
    init: bool
    module: Module


def dataclass_fields(module: Module, cls: ast.ClassDef) -> list[DField]:
    """A dataclass's fields, bases first (a redefined field keeps its place), as
    `dataclasses.fields` orders them."""
    out: dict[str, DField] = {}
    if cls.bases and isinstance(cls.bases[0], ast.Name):
        got = module.resolve(cls.bases[0].id)
        if got is not None and isinstance(got[1], ast.ClassDef):
            for f in dataclass_fields(*got):
                out[f.name] = f
    scope = Scope(module)
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        if "ClassVar" in ast.unparse(node.annotation):
            continue
        default, metadata, init = MISSING, {}, True
        v = node.value
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "field":
            kw = {k.arg: k.value for k in v.keywords}
            if "default" in kw:
                default = ev(kw["default"], scope)
            elif "default_factory" in kw:
                fac = kw["default_factory"]
                default = ({"list": [], "dict": {}}.get(fac.id, UNKNOWN)
                           if isinstance(fac, ast.Name) else UNKNOWN)
            if "metadata" in kw:
                m = ev(kw["metadata"], scope)
                metadata = m if isinstance(m, dict) else {"argparse_meta": UNKNOWN} \
                    if "argparse_meta" in ast.unparse(kw["metadata"]) else {}
            if "init" in kw:
                init = ev(kw["init"], scope) is not False
        elif v is not None:
            default = ev(v, scope)
        out[node.target.id] = DField(node.target.id, node.annotation, default, metadata, init,
                                     module)
    return list(out.values())


def _ann(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return ast.parse(node.value, mode="eval").body
    return node


def _head(node: ast.AST) -> str:
    node = node.value if isinstance(node, ast.Subscript) else node
    return ast.unparse(node).split(".")[-1]


def _items(node: ast.Subscript) -> list[ast.AST]:
    s = node.slice
    return list(s.elts) if isinstance(s, ast.Tuple) else [s]


def _optional(node: ast.AST) -> tuple[ast.AST, bool]:
    """Optional[X] / Union[X, None] / X | None -> (X, True); else (node, False)."""
    node = _ann(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [node.left, node.right]
    elif isinstance(node, ast.Subscript) and _head(node) in ("Optional", "Union"):
        parts = _items(node) + ([ast.Constant(None)] if _head(node) == "Optional" else [])
    else:
        return node, False
    rest = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
    if len(rest) == 1 and len(parts) == 2:
        return rest[0], True
    return node, False


class NoType(Exception):
    pass


def megatron_kind(node: ast.AST, scope: Scope) -> dict:
    """What Megatron's ArgumentGroupFactory._extract_type infers (megatron/training/
    argument_utils.py): {"type": ..., "nargs": ..., "choices": ...}; NoType where it raises."""
    node = _ann(node)
    inner, opt = _optional(node)
    if opt:
        return megatron_kind(inner, scope)
    if isinstance(node, ast.BinOp) or (isinstance(node, ast.Subscript)
                                       and _head(node) == "Union"):
        raise NoType("union")
    if isinstance(node, ast.Subscript):
        head = _head(node)
        if head in ("list", "List"):
            items = _items(node)
            if len(items) != 1:
                raise NoType("list")
            return {**megatron_kind(items[0], scope), "nargs": "+"}
        if head == "Literal":
            vals = [ev(e, scope) for e in _items(node)]
            return {"type": "str", "choices": vals}
        raise NoType(head)
    name = ast.unparse(node)
    if name in ("Callable", "typing.Callable", "Any"):
        raise NoType(name)
    return {"type": name}


# ---------------------------------------------------------------- arguments


@dataclass
class Arg:
    names: list[str]
    kwargs: dict
    source: str


VALUELESS = {"store_true", "store_false", "store_const", "append_const", "count", "help",
             "version", "BooleanOptionalAction"}


def action_nargs(action, module: Module):
    """The nargs a custom Action class gives itself (its __init__ default), else None."""
    if not isinstance(action, Sym):
        return None
    got = module.resolve(action.split(".")[-1])
    if got is None or not isinstance(got[1], ast.ClassDef):
        return None
    for node in got[1].body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            a = node.args
            for arg, d in zip(a.args[len(a.args) - len(a.defaults):], a.defaults):
                if arg.arg == "nargs":
                    return ev(d, Scope(got[0]))
    return None


class Parser:
    """The arguments one argparse parser collects, in order (names must stay unique)."""

    def __init__(self):
        self.args: list[Arg] = []
        self.hook = None  # miles' prefixing wrapper while SGLang adds its arguments

    def add(self, names: list[str], kwargs: dict, source: str, module: Module) -> None:
        if "action" in kwargs and kwargs.get("nargs") is None:
            n = action_nargs(kwargs["action"], module)
            if n is not None:
                kwargs["nargs"] = n
        if self.hook is not None:
            got = self.hook(names, kwargs)
            if got is None:
                return
            names, kwargs, source = got
        self.args.append(Arg(names, kwargs, source))

    def find(self, flag: str) -> Arg | None:
        return next((a for a in self.args if flag in a.names), None)

    def set_default(self, dest: str, value) -> None:
        for a in self.args:
            if dest_of(a) == dest:
                a.kwargs["default"] = value


def source_of(module: Module) -> str:
    """Which upstream defines an argument: the package of the code that adds it."""
    return {"sglang_router": "sglang-router"}.get(module.name.split(".")[0],
                                                   module.name.split(".")[0])


def dest_of(a: Arg) -> str:
    """argparse's dest: the `dest` given, else the first long option (else the first)."""
    d = a.kwargs.get("dest")
    if isinstance(d, str) and not isinstance(d, Sym):
        return d
    longs = [n for n in a.names if n.startswith("--")]
    return (longs or a.names)[0].lstrip("-").replace("-", "_")


class Walker:
    """Runs the argument-adding functions just far enough to see every add_argument."""

    def __init__(self, parser: Parser, source: str):
        self.parser, self.source = parser, source

    def call(self, module: Module, fn: ast.FunctionDef, args: list, kwargs: dict,
             parent: Scope | None = None) -> None:
        local: dict = {}
        params = fn.args.posonlyargs + fn.args.args
        defaults = [None] * (len(params) - len(fn.args.defaults)) + list(fn.args.defaults)
        for i, (p, d) in enumerate(zip(params, defaults)):
            if i < len(args):
                local[p.arg] = args[i]
            elif p.arg in kwargs:
                local[p.arg] = kwargs[p.arg]
            elif d is not None:
                local[p.arg] = ev(d, Scope(module))
        for p, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
            local[p.arg] = kwargs.get(p.arg, ev(d, Scope(module)) if d is not None else None)
        self.block(fn.body, Scope(module, local, parent))

    def block(self, body: list[ast.stmt], scope: Scope) -> None:
        for node in body:
            self.stmt(node, scope)

    def stmt(self, node: ast.stmt, scope: Scope) -> None:
        if isinstance(node, ast.FunctionDef):
            scope.local[node.name] = ("def", node, scope)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                got = Module.load(node.module)
                if got is not None and got.resolve(a.name) is not None:
                    scope.local[a.asname or a.name] = ("import", *got.resolve(a.name))
        elif isinstance(node, ast.Assign):
            value = self.expr(node.value, scope)
            for t in node.targets:
                if isinstance(t, ast.Name):
                    scope.local[t.id] = value
        elif isinstance(node, (ast.Expr, ast.Return)) and node.value is not None:
            self.expr(node.value, scope)
        elif isinstance(node, ast.If):
            t = truth(node.test, scope)
            if t is not False:
                self.block(node.body, scope)
            if t is not True:
                self.block(node.orelse, scope)
        elif isinstance(node, ast.Try):
            self.block(node.body, scope)
        elif isinstance(node, ast.With):
            self.block(node.body, scope)

    def expr(self, node: ast.AST, scope: Scope):
        """Side effects of an expression on the parser; its value when known."""
        if not isinstance(node, ast.Call):
            return ev(node, scope)
        f = node.func
        args = [ev(a, scope) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: ev(k.value, scope) for k in node.keywords if k.arg}
        if isinstance(f, ast.Attribute):
            if f.attr == "add_argument":
                self.parser.add([a for a in args if isinstance(a, str)], kwargs,
                                source_of(scope.module), scope.module)
                return UNKNOWN
            if f.attr == "set_defaults":
                for k, v in kwargs.items():
                    self.parser.set_default(k, v)
                return UNKNOWN
            if f.attr == "build_group":  # Megatron's ArgumentGroupFactory
                factory = self.expr(f.value, scope)
                if isinstance(factory, tuple) and factory[0] == "factory":
                    self.factory(*factory[1:])
                return UNKNOWN
            if isinstance(f.value, ast.Name) and f.attr == "add_cli_args" and self.only is None:
                got = self._callee(f.value.id, scope)
                if got is not None and got[0] == "class":
                    mod, cls = got[1], got[2]
                    meth = next((n for n in cls.body if isinstance(n, ast.FunctionDef)
                                 and n.name == "add_cli_args"), None)
                    if meth is not None:
                        self.call(mod, meth, args, kwargs)
                return UNKNOWN
            return UNKNOWN
        if not isinstance(f, ast.Name):
            return UNKNOWN
        if f.id == "ArgumentGroupFactory":
            got = self._callee(node.args[0].id, scope) if node.args else None
            exclude = kwargs.get("exclude") or []
            if got is not None and got[0] == "class":
                return ("factory", got[1], got[2], exclude if isinstance(exclude, list) else [])
            raise SystemExit(f"cannot resolve the dataclass of {ast.unparse(node)}")
        if f.id == "add_cli_args_from_dataclass":  # SGLang's dataclass-to-argparse helper
            got = self._callee(node.args[1].id, scope)
            if got is not None and got[0] == "class":
                self.sglang_dataclass(got[1], got[2])
            return UNKNOWN
        if f.id == "reset_arg":  # miles: change a flag's default, or add it when absent
            name = args[1]
            got = self.parser.find(name)
            if got is not None:
                if "default" in kwargs:
                    got.kwargs["default"] = kwargs["default"]
            else:
                self.parser.add([name], kwargs, source_of(scope.module), scope.module)
            return UNKNOWN
        if f.id == "_add_prefixed_server_args":  # miles' --sglang-/--eval-sglang- wrapper
            self.prefixed(kwargs, scope)
            return UNKNOWN
        got = self._callee(f.id, scope)
        if got is not None and got[0] == "def":
            mod, fn, parent = got[1], got[2], got[3]
            if fn.name == "add_user_provided_function_arguments":
                return UNKNOWN  # adds whatever a user's rollout function defines
            self.call(mod, fn, args, kwargs, parent)
        return UNKNOWN

    only: str | None = None  # read no function outside this module (slime: its own flags)

    def _callee(self, name: str, scope: Scope):
        got = self._find(name, scope)
        if self.only is not None and got is not None and got[1].name != self.only:
            return None
        return got

    def _find(self, name: str, scope: Scope):
        s: Scope | None = scope
        while s is not None:
            v = s.local.get(name)
            if isinstance(v, tuple) and v and v[0] == "def":
                return ("def", scope.module, v[1], v[2])
            if isinstance(v, tuple) and v and v[0] == "import":
                return self._kind(v[1], v[2])
            s = s.parent
        got = scope.module.resolve(name)
        return self._kind(*got) if got is not None else None

    @staticmethod
    def _kind(mod: Module, node: ast.AST):
        if isinstance(node, ast.ClassDef):
            return ("class", mod, node)
        return ("def", mod, node, None)

    # Megatron: megatron/training/argument_utils.py ArgumentGroupFactory.build_group
    def factory(self, module: Module, cls: ast.ClassDef, exclude: list[str]) -> None:
        for f in dataclass_fields(module, cls):
            if f.name in exclude or not f.init:
                continue
            scope = Scope(f.module)
            names = ["--" + f.name.replace("_", "-")]
            kw: dict = {"dest": f.name, "default": None if f.default is MISSING else f.default}
            meta = f.metadata.get("argparse_meta") if isinstance(f.metadata, dict) else None
            try:
                kind = megatron_kind(f.annotation, scope)
                if kind["type"] == "bool":
                    kw["action"] = "store_true" if f.default is False else "store_false"
                    if kw["action"] == "store_false":
                        names = ["--no-" + f.name.replace("_", "-"),
                                 "--disable-" + f.name.replace("_", "-")]
                else:
                    kw.update(kind)
            except NoType:
                if meta is None:
                    raise SystemExit(f"{cls.name}.{f.name}: type not inferable and no "
                                     "argparse_meta (Megatron would raise too)") from None
            if isinstance(meta, dict):
                meta = dict(meta)
                names = meta.pop("arg_names", names)
                kw.update(meta)
            self.parser.add(names, kw, "megatron", f.module)

    # SGLang: sglang/srt/arg_groups/arg_utils.py add_cli_args_from_dataclass
    def sglang_dataclass(self, module: Module, cls: ast.ClassDef) -> None:
        for f in dataclass_fields(module, cls):
            ann = _ann(f.annotation)
            if not (isinstance(ann, ast.Subscript) and _head(ann) in ("A", "Annotated")):
                continue  # fields without Arg metadata are registered by hand
            items = _items(ann)
            scope = Scope(f.module)
            meta: dict | None = None
            for m in items[1:]:
                if isinstance(m, ast.Constant) and isinstance(m.value, str):
                    meta = {}
                    break
                if isinstance(m, ast.Call) and _head(m.func) == "Arg":
                    meta = {k.arg: ev(k.value, scope) for k in m.keywords if k.arg}
                    break
            if meta is None or meta.get("no_cli") is True:
                continue
            cli = meta.get("cli_name") or "--" + f.name.replace("_", "-")
            names = [cli] + list(meta.get("aliases") or [])
            kw: dict = {}
            if f.name != cli.lstrip("-").replace("-", "_"):
                kw["dest"] = f.name
            if f.default is not MISSING:
                kw["default"] = f.default
            if meta.get("action") is not None:
                kw["action"] = meta["action"]
                kw.update(meta.get("action_kwargs") or {})
                self.parser.add(names, kw, "sglang", f.module)
                continue
            inner, _ = _optional(items[0])
            head = _head(inner) if isinstance(inner, ast.Subscript) else ast.unparse(inner)
            if head == "Literal":
                kw["choices"] = meta.get("choices") or [ev(e, scope) for e in _items(inner)]
            elif head in ("list", "List") and meta.get("type_parser") is None:
                kw["nargs"] = meta.get("nargs") or "+"
                if meta.get("choices"):
                    kw["choices"] = meta["choices"]
            elif head == "bool":
                kw["action"] = "store_true"
            else:
                if meta.get("choices"):
                    kw["choices"] = meta["choices"]
                if meta.get("nargs"):
                    kw["nargs"] = meta["nargs"]
            if meta.get("const") is not None:
                kw["const"] = meta["const"]
            self.parser.add(names, kw, "sglang", f.module)

    # miles: miles/backends/sglang_utils/arguments.py _add_prefixed_server_args
    def prefixed(self, kw: dict, scope: Scope) -> None:
        flag_prefix, dest_prefix = kw["flag_prefix"], kw["dest_prefix"]
        skipped, inherit = set(kw["skipped_args"]), kw["inherit"]
        source = "sglang"

        def hook(names: list[str], kwargs: dict):
            if "dest" in kwargs:
                stem = kwargs["dest"]
            else:
                stem = next((n[2:].replace("-", "_") for n in names if n.startswith("--")), None)
            if stem in skipped:
                return None
            new = [f"--{flag_prefix}-{n.lstrip('-')}" if n.startswith("-") else n for n in names]
            kwargs = dict(kwargs)
            if isinstance(kwargs.get("dest"), str):
                if not kwargs["dest"].startswith(dest_prefix):
                    kwargs["dest"] = dest_prefix + kwargs["dest"]
            else:
                for n in names:
                    if n.startswith("--") and n[2:].replace("-", "_") in ("tp_size", "dp_size",
                                                                        "pp_size", "ep_size"):
                        kwargs["dest"] = dest_prefix + n[2:].replace("-", "_")
                        break
            if isinstance(kwargs.get("new_flag"), str) and kwargs["new_flag"].startswith("--"):
                kwargs["new_flag"] = f"--{flag_prefix}-{kwargs['new_flag'][2:]}"
            if inherit:
                kwargs["default"] = SUPPRESS
                if kwargs.get("action") in ("store_true", "store_false"):
                    kwargs["action"] = Sym("BooleanOptionalAction")
                    kwargs.pop("const", None)
                    kwargs.pop("nargs", None)
            return new, kwargs, source

        server = Module.load("sglang.srt.server_args")
        cls = server.defs["ServerArgs"]
        meth = next(n for n in cls.body if isinstance(n, ast.FunctionDef)
                    and n.name == "add_cli_args")
        before, self.parser.hook = self.parser.hook, hook
        try:
            self.call(server, meth, [UNKNOWN], {})
        finally:
            self.parser.hook = before


def fsdp_arguments() -> list[Arg]:
    """The FSDP backend's own flags (miles/backends/fsdp_utils/arguments.py
    build_fsdp_parser): `--config`, then one per FSDPArgs field, a bool as
    BooleanOptionalAction, anything else one value. They replace Megatron's parser under
    `--train-backend fsdp`; miles' own flags are added to both."""
    mod = Module.load("miles.backends.fsdp_utils.arguments")
    out = [Arg(["--config"], {"default": None}, "fsdp")]
    for f in dataclass_fields(mod, mod.defs["FSDPArgs"]):
        if f.name == "config":
            continue
        inner, _ = _optional(f.annotation)
        kw = {"default": None if f.default is MISSING else f.default}
        if ast.unparse(inner) == "bool":
            kw["action"] = Sym("BooleanOptionalAction")
        out.append(Arg(["--" + f.name.replace("_", "-")], kw, "fsdp"))
    return out


# ---------------------------------------------------------------- output


def _json(v):
    if v is UNKNOWN or v is MISSING or isinstance(v, Sym):
        return UNKNOWN
    if isinstance(v, (list, tuple)):
        items = [_json(x) for x in v]
        return UNKNOWN if any(i is UNKNOWN for i in items) else items
    if isinstance(v, dict):
        return UNKNOWN
    return v


def record(a: Arg) -> dict:
    kw = a.kwargs
    action = kw.get("action")
    action = str(action).split(".")[-1] if action is not None else "store"
    nargs = kw.get("nargs")
    takes = action not in VALUELESS and nargs != 0
    out: dict = {"names": a.names, "dest": dest_of(a), "source": a.source, "action": action}
    if takes:
        out["nargs"] = _json(nargs) if nargs is not None else None
    choices = _json(kw.get("choices"))
    if takes and choices is not UNKNOWN and choices is not None:
        out["choices"] = choices
    if "default" in kw:
        d = _json(kw["default"])
        if d is not UNKNOWN:
            out["default"] = d
    elif action in ("store_true", "store_false"):
        out["default"] = action == "store_false"
    if isinstance(kw.get("new_flag"), str):
        out["renamed_to"] = kw["new_flag"]
    elif action == "DeprecatedAction":
        out["removed"] = True
    if kw.get("const") is not None and _json(kw["const"]) is not UNKNOWN:
        out["const"] = _json(kw["const"])
    return out


def slime_arguments(slime: Tree) -> list[dict]:
    """The flags slime (THUDM/slime, the project miles grew from) defines itself
    (slime/utils/arguments.py `get_slime_extra_args_provider`), as records: with the
    Megatron-LM and SGLang rows they make slime's surface (surface.py `names("slime")`)."""
    TREES["slime"] = slime
    mod = Module.load("slime.utils.arguments")
    provider = mod.defs["get_slime_extra_args_provider"]
    inner = next(n for n in provider.body if isinstance(n, ast.FunctionDef))
    parser = Parser()
    w = Walker(parser, "slime")
    w.only = mod.name
    w.call(mod, inner, [UNKNOWN], {"add_custom_arguments": None},
           Scope(mod, {"add_custom_arguments": None}))
    # slime parses its SGLang flags apart (slime/utils/arguments.py parse_args phase 1,
    # sglang_parse_args): add_sglang_arguments adds ServerArgs under --sglang- (the shared
    # SGLang rows) and flags of its own (--sglang-server-concurrency, --sglang-router-ip ...)
    sg = Module.load("slime.backends.sglang_utils.arguments")
    if sg is not None and "add_sglang_arguments" in sg.defs:
        w = Walker(parser, "slime")
        w.only = sg.name  # ServerArgs / RouterArgs are the shared rows, not read again
        w.call(sg, sg.defs["add_sglang_arguments"], [UNKNOWN], {}, Scope(sg, {}))
    return [record(a) for a in parser.args] + pre_parsed(mod)


def pre_parsed(mod: Module) -> list[dict]:
    """The flags slime parses before its main parser and merges back (slime 624b824
    utils/arguments.py:1583 `_pre_parse_mode`: --train-backend, --debug-rollout-only,
    --debug-train-only, --load-debug-rollout-data, removed from add_slime_arguments "to avoid
    registering them twice"): a temporary parser of literal add_argument calls."""
    fn = mod.defs.get("_pre_parse_mode")
    if fn is None:  # slime before 96118d0 (#1600) defines them in add_slime_arguments
        return []
    out = []
    for call in ast.walk(fn):
        if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "add_argument"
                and call.args and isinstance(call.args[0], ast.Constant)):
            continue
        names = [a.value for a in call.args if isinstance(a, ast.Constant)]
        kw = {k.arg: ev(k.value, Scope(mod)) for k in call.keywords if k.arg}
        out.append(record(Arg(names, kw, "slime")))
    return out


def patch_flags(text: str) -> list[str]:
    """Flags a unified diff adds with `add_argument` (slime's docker/patch/*/megatron.patch:
    the Megatron-LM slime's image runs)."""
    added = "\n".join(line[1:] for line in text.splitlines() if line.startswith("+"))
    return sorted(set(re.findall(r"add_argument\(\s*['\"](--[A-Za-z0-9][\w-]*)", added)))


def patch_rows(text: str) -> list[dict]:
    """The `add_argument` calls a unified diff adds, as surface records (their keyword
    arguments read with ast where the call is complete on the added lines)."""
    added = "\n".join(line[1:] for line in text.splitlines() if line.startswith("+"))
    out = []
    for m in re.finditer(r"add_argument\(", added):
        depth, j = 0, m.end() - 1
        for j in range(m.end() - 1, len(added)):
            depth += {"(": 1, ")": -1}.get(added[j], 0)
            if depth == 0:
                break
        try:
            call = ast.parse("f" + added[m.end() - 1:j + 1].strip(), mode="eval").body
        except SyntaxError:
            continue
        names = [a.value for a in call.args if isinstance(a, ast.Constant)]
        if not names or not str(names[0]).startswith("--"):
            continue
        kw = {k.arg: ev(k.value, Scope(Module(ast.Module([], []), "patch"))) for k in
              call.keywords if k.arg}
        a = Arg(names, kw, "megatron")
        out.append(record(a))
    return out


def names_of(rows: list[dict]) -> set[str]:
    return {n for r in rows for n in r["names"]}


def reset() -> None:
    """Forget the trees and modules read (to read another version of a package)."""
    TREES.clear()
    _MODULES.clear()


def other_versions(data: dict, a: argparse.Namespace) -> dict[str, str]:
    """Flags another known version or framework of the stack defines, and which: a script
    written for it is not a typo (check warns and names it). Read from the sources given:
    a newer Megatron-LM (NVIDIA main), a newer SGLang wheel, slime's Megatron-LM patch, and
    `--sglang-*` flags miles' own code passes that the SGLang release lacks (miles' docker
    image installs SGLang from its `sglang-miles` branch, which is not mirrored here)."""
    miles = names_of(data["arguments"]) | names_of(data["fsdp_arguments"])
    slime = names_of(data.get("slime_arguments", []))
    out: dict[str, str] = {}
    if a.newer_sglang:
        reset()
        newer = surface(Tree(a.miles, a.miles_rev), Tree(a.megatron, a.megatron_rev),
                        Tree(a.newer_sglang), Tree(a.router))
        version = Path(a.newer_sglang).name.split("-")[1]
        for n in sorted(names_of(newer["arguments"]) - miles):
            if n.startswith(("--sglang-", "--eval-sglang-")):
                out[n] = f"SGLang {version} has it (newer than the bundled {SGLANG_VERSION})"
    if a.newer_megatron:
        tree = Tree(a.newer_megatron)
        text = tree.read("megatron/training/arguments.py") or ""
        found = set(re.findall(r"add_argument\(\s*['\"](--[A-Za-z0-9][\w-]*)", text))
        for n in sorted(found - miles - slime):
            out.setdefault(n, f"Megatron-LM main (NVIDIA/Megatron-LM {tree.pin[:7]}) has it")
    if a.slime:
        slime_tree = Tree(a.slime)
        patch = slime_tree.read("docker/patch/latest/megatron.patch") or ""
        for n in patch_flags(patch):
            if n not in miles:
                out.setdefault(n, "slime's patched Megatron-LM has it "
                                  "(THUDM/slime docker/patch/latest/megatron.patch)")
        reset()
        TREES["miles"] = Tree(a.miles, a.miles_rev)
    miles_tree = Tree(a.miles, a.miles_rev)
    files = miles_tree._git("ls-tree", "-r", "--name-only", miles_tree.pin, "miles", "scripts",
                            "examples").split()
    for path in files:  # its package, scripts and examples (which its CI runs in that image)
        if not path.endswith((".py", ".sh")) or "/router/" in path:  # the router's own port
            continue
        for n in re.findall(r"(?:^|[\s'\"(])(--sglang-[a-z0-9][a-z0-9-]*[a-z0-9])(?=[\s'\")=\\]|$)",
                            miles_tree.read(path) or "", re.M):
            if n not in miles:
                out.setdefault(n, "SGLang of miles' docker image (its sglang-miles branch) "
                                  f"has it: miles' own {path} passes it")
    return dict(sorted(out.items()))


SGLANG_VERSION = "?"


def function_arguments(miles: Tree) -> dict[str, list]:
    """miles' own functions that carry an `add_arguments` (`generate.add_arguments = f`), by
    dotted path, with the flags it adds (miles_topology/reading/argscan.py, as `check` reads a
    user's function): for a launch that names one where miles is not installed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from miles_topology.reading.argscan import Resolver

    def read(module: str) -> str | None:
        base = module.replace(".", "/")
        return miles.read(base + ".py") or miles.read(base + "/__init__.py")

    resolver = Resolver(read)
    out: dict[str, list] = {}
    files = miles._git("ls-tree", "-r", "--name-only", miles.pin, "miles").split()
    for path in (f for f in files if f.endswith(".py")):
        text = miles.read(path) or ""
        for name in re.findall(r"^([A-Za-z_]\w*)\.add_arguments\s*=", text, re.M):
            dotted = path[:-3].replace("/", ".") + "." + name
            got = resolver.function_arguments(dotted)
            if got:
                out[dotted] = [[list(a.names), a.takes_value] for a in got]
    return dict(sorted(out.items()))


def surface(miles: Tree, megatron: Tree, sglang: Tree, router: Tree) -> dict:
    TREES.update(miles=miles, megatron=megatron, sglang=sglang, sglang_router=router)
    parser = Parser()
    # Megatron's parser: argparse.ArgumentParser(..., allow_abbrev=False) (add_help on)
    parser.args.append(Arg(["-h", "--help"], {"action": "help", "dest": "help"}, "megatron"))
    mg = Module.load("megatron.training.arguments")
    Walker(parser, "megatron").call(mg, mg.defs["add_megatron_arguments"], [UNKNOWN], {})
    ml = Module.load("miles.utils.arguments")
    provider = ml.defs["get_miles_extra_args_provider"]
    inner = next(n for n in provider.body if isinstance(n, ast.FunctionDef))
    w = Walker(parser, "miles")
    w.call(ml, inner, [UNKNOWN], {"add_custom_arguments": None},
           Scope(ml, {"add_custom_arguments": None}))
    seen: dict[str, str] = {}
    for a in parser.args:
        for n in a.names:
            if n in seen:
                raise SystemExit(f"{n} added twice ({seen[n]} and {a.source}): argparse would "
                                 "refuse this parser; the reading is wrong")
            seen[n] = a.source
    return {
        "commits": {"radixark/miles": miles.pin, "radixark/Megatron-LM": megatron.pin,
                    "sgl-project/sglang": sglang.pin, "sgl-project/sglang-router": router.pin},
        "generated_by": "tools/gen_surface.py",
        "arguments": [record(a) for a in parser.args],
        "fsdp_arguments": [record(a) for a in fsdp_arguments()],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--miles", required=True, help="bare git dir of radixark/miles")
    p.add_argument("--miles-rev", default="HEAD")
    p.add_argument("--megatron", required=True, help="bare git dir of radixark/Megatron-LM")
    p.add_argument("--megatron-rev", default="miles-main")
    p.add_argument("--sglang", required=True, help="the sglang wheel")
    p.add_argument("--router", required=True, help="the sglang-router wheel")
    p.add_argument("--slime", help="bare git dir of THUDM/slime: slime's own flags")
    p.add_argument("--newer-sglang", help="a newer sglang wheel: flags of that version")
    p.add_argument("--newer-megatron", help="bare git dir of NVIDIA/Megatron-LM (main)")
    a = p.parse_args()
    global SGLANG_VERSION
    SGLANG_VERSION = Path(a.sglang).name.split("-")[1]
    data = surface(Tree(a.miles, a.miles_rev), Tree(a.megatron, a.megatron_rev),
                   Tree(a.sglang), Tree(a.router))
    data["versions"] = {"SGLang": SGLANG_VERSION,
                        "Megatron-LM": f"radixark/Megatron-LM {a.megatron_rev} "
                                       f"{data['commits']['radixark/Megatron-LM'][:7]}",
                        "miles": f"radixark/miles {data['commits']['radixark/miles'][:7]}"}
    if a.slime:
        slime = Tree(a.slime)
        reset()
        data["slime_arguments"] = slime_arguments(slime)
        # slime's image patches Megatron-LM (docker/patch/latest/megatron.patch): on slime's
        # stack its flags are known
        data["slime_arguments"] += patch_rows(
            slime.read("docker/patch/latest/megatron.patch") or "")
        data["commits"]["THUDM/slime"] = slime.pin
        data["versions"]["slime"] = f"THUDM/slime {slime.pin[:7]}"
    if a.newer_megatron:
        data["commits"]["NVIDIA/Megatron-LM"] = Tree(a.newer_megatron).pin
    if a.newer_sglang:
        data["commits"]["sgl-project/sglang newer"] = Tree(a.newer_sglang).pin
    data["function_arguments"] = function_arguments(Tree(a.miles, a.miles_rev))
    data["other_versions"] = other_versions(data, a)
    lists = ("arguments", "fsdp_arguments", "slime_arguments")
    head = {k: v for k, v in data.items() if k not in lists}
    parts = [json.dumps(head, indent=2, sort_keys=True)[:-2]]
    for key in (k for k in lists if k in data):  # one a line: regenerations diff well
        rows = ",\n".join("    " + json.dumps(r, sort_keys=True) for r in data[key])
        parts.append(f'  "{key}": [\n{rows}\n  ]')
    sys.stdout.write(",\n".join(parts) + "\n}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
