"""The stack a launch runs on: which framework (miles or slime), the flags its parser accepts,
and how sure that is.

miles' and slime's train.py build one argparse parser (Megatron-LM's, their own flags, SGLang's
as `--sglang-*`) and exit on a flag it does not define. Which flags that is depends on what
the user runs, so a launch is judged against, first to last:

- `--stack PATH` (a checkout or a site-packages): its miles/ or slime/ package;
- the framework beside the script (a fork: `miles/` or `slime/` with `utils/arguments.py` in
  a folder above it), whose own flags are added;
- miles or slime installed where `check` runs (found on sys.path, never imported);
- the bundled snapshot (surface.json), whose versions the report names.

The framework is slime when the entry is under a slime checkout or the checkout holds slime.
The functions the launch names in `--rollout-function-path` / `--custom-generate-function-path`
add what their `add_arguments` adds on miles (argscan.py; slime never calls it); one that
cannot be read here makes the flags the stack does not define unverified, not wrong. What a
checkout or an installed package adds is read once per version (its files' sizes and times)
and kept in the user's cache folder (MILES_TOPOLOGY_CACHE, else
$XDG_CACHE_HOME/miles-topology).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.machinery import PathFinder
from pathlib import Path

from . import surface
from .argscan import Added, Resolver, own_flags
from .pysource import parse

FRAMEWORKS = ("miles", "slime")
# miles/utils/arguments.py add_user_provided_function_arguments: the functions whose
# add_arguments(parser) it calls (the rollout function, then the custom generate function)
FUNCTION_FLAGS = ("--rollout-function-path", "--custom-generate-function-path")


@dataclass(frozen=True)
class Stack:
    """`framework`: miles or slime; `root`: the checkout or site-packages whose framework
    package was read (None: the bundled snapshot); `added`: flag -> (what adds it, how it
    reads); `unresolved`: function paths whose add_arguments could not be read."""

    framework: str = "miles"
    root: str | None = None
    origin: str = "bundled"  # "bundled", "installed", "checkout" or "--stack"
    added: dict[str, tuple[str, Added]] = field(default_factory=dict)
    unresolved: tuple[str, ...] = ()
    # its parser drops flags it does not define instead of refusing them (slime 624b824:
    # megatron_parse_args passes ignore_unknown_args=True; SGLang's flags parse_known_args)
    drops_unknown: bool = False
    # no stack known (the core API without `stack=`): only the layout is judged; a flag
    # none of ours is refused only as a near miss of one of ours
    layout_only: bool = False
    # the package folder whose parser was read, when it is not named as the framework (a
    # fork under another name: slime_vllm/ of a slime fork)
    package: str | None = None

    def flag(self, name: str) -> surface.Flag | None:
        table = surface.slime_table() if self.framework == "slime" else None
        f = table.get(name) if table is not None else surface.flag(name)
        if f is not None:
            return f
        got = self.added.get(name)
        if got is None:
            return None
        a = got[1]
        return surface.Flag(name, name.lstrip("-").replace("-", "_"),
                            None if a.takes_value else 0, a.takes_value, "user")

    def other(self, name: str) -> str | None:
        """Which other known version or framework defines `name` (None: this stack has it,
        or none does)."""
        if self.flag(name) is not None:
            return None
        if name in surface.other_versions():
            return surface.other_versions()[name]
        if self.framework == "miles" and name in surface.slime_only():
            return "slime has it (the project miles grew from); miles does not"
        if self.framework == "slime" and name in surface.names() \
                and name not in surface.slime_names():
            return "miles has it; slime does not"
        return None

    def backends(self) -> Backends | None:
        """The `--train-backend` choices of this stack's parser (None: the bundled snapshot,
        or not read here)."""
        if self.root is None:
            return None
        return train_backends(self.root, self.package or self.framework)

    def describe(self) -> str:
        """What the flags were judged against, for the report."""
        v = surface.versions()
        # slime's image runs NVIDIA Megatron-LM with slime's patch and its own SGLang build;
        # the bundled slime surface takes miles' Megatron-LM and SGLang rows plus that patch
        how = "bundled, as miles' with slime's Megatron-LM patch" \
            if self.framework == "slime" else "bundled"
        base = f"Megatron-LM {v.get('Megatron-LM', '?')}, SGLang {v.get('SGLang', '?')} ({how})"
        own = v.get(self.framework, self.framework)
        if self.root is not None:
            name = self.framework if self.package in (None, self.framework) else \
                f"{self.package} (a {self.framework} fork)"
            own = f"{name} of {self.root} ({self.origin})"
        return f"{own}, {base}"


BUNDLED = Stack()
LAYOUT_ONLY = Stack(layout_only=True)
# slime/backends/megatron_utils/arguments.py megatron_parse_args (slime 624b824, line 195):
# `_megatron_parse_args(extra_args_provider=..., ignore_unknown_args=True)`
LENIENT = ("backends/megatron_utils/arguments.py", "utils/arguments.py")


def drops_unknown(root: Path | None, framework: str, package: str | None = None) -> bool:
    """Whether that framework's parse_args drops unknown flags: the bundled slime does; a
    slime checkout does when its Megatron parse passes ignore_unknown_args=True; miles (its
    parse_args refuses them: "unrecognized arguments") never. A fork under its own name is
    read as it is, whichever parent it was taken for (vime, a vLLM fork of slime that names
    neither: vime/backends/megatron_utils/arguments.py:206 passes ignore_unknown_args=True)."""
    own = package not in (None, *FRAMEWORKS)
    if framework != "slime" and not own:
        return False
    if root is None:
        return True
    for rel in LENIENT:
        try:
            text = (root / (package or framework) / rel).read_text(errors="replace")
        except OSError:
            continue
        if "ignore_unknown_args=True" in text.replace(" ", ""):
            return True
    return False


@dataclass(frozen=True)
class Backends:
    """The `--train-backend` choices a framework's parser offers, read from its source, and
    where (`path`, `line`: the add_argument call); `lenient_fsdp`: its FSDP parse drops the
    flags it does not define (slime between THUDM/slime 96118d0 and e4faf63)."""

    choices: tuple[str, ...]
    path: str
    line: int
    lenient_fsdp: bool = False


# slime between 96118d0 (#1600, two-phase parsing) and e4faf63: utils/arguments.py parse_args
# `args = fsdp_parse_args(extra_args_provider=add_slime_arguments, ignore_unknown_args=True)`
_LENIENT_FSDP = re.compile(r"fsdp_parse_args\([^)]*ignore_unknown_args\s*=\s*True")


@lru_cache(maxsize=64)
def train_backends(root: str, package: str) -> Backends | None:
    """The training backends `root/package`'s parser accepts: the literal `choices` of its
    `--train-backend` add_argument calls in utils/arguments.py (slime 624b824:1592
    `_pre_parse_mode`, megatron only since THUDM/slime e4faf63 removed FSDP; miles 31f1ca9:263
    and slime before e4faf63: megatron and fsdp). None: not read here, or not literal."""
    import ast

    rel = Path(package, "utils", "arguments.py")
    text = _read_under(Path(root), [Path(root) / rel])
    try:
        tree = parse(text) if text is not None else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is None:
        return None
    choices: list[str] = []
    line = 0
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "add_argument"
                and call.args and isinstance(call.args[0], ast.Constant)
                and call.args[0].value == "--train-backend"):
            continue
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        got = kw.get("choices")
        if not isinstance(got, (ast.List, ast.Tuple)) or not all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in got.elts):
            return None  # choices not literal: not known here
        choices += [e.value for e in got.elts if e.value not in choices]
        line = line or call.args[0].lineno
    if not line:
        return None
    return Backends(tuple(choices), str(Path(root) / rel), line,
                    bool(_LENIENT_FSDP.search(text or "")))


CURRENT: ContextVar[Stack | None] = ContextVar("stack", default=None)
# `check --stack PATH`: a checkout or site-packages holding the user's stack (the CLI sets it)
STACK_PATH: ContextVar[str | None] = ContextVar("stack_path", default=None)


def current() -> Stack:
    """The stack the flags being read are judged against (the bundled miles by default)."""
    return CURRENT.get() or BUNDLED


@contextmanager
def using(stack: Stack) -> Iterator[Stack]:
    token = CURRENT.set(stack)
    try:
        yield stack
    finally:
        CURRENT.reset(token)


# ---- where the framework is --------------------------------------------------------------


def framework_in(root: Path) -> str | None:
    """The package of `root` whose parser its launches build: miles or slime when
    `root/<it>/utils/arguments.py` exists (a checkout or a site-packages), miles first; else
    a fork's own package, the one the checkout's train.py builds its parser from
    (`parser_package`)."""
    for name in FRAMEWORKS:
        if (root / name / "utils" / "arguments.py").is_file():
            return name
    for entry in ("train.py", "train_async.py"):
        got = _parser_of(root / entry)
        if got is not None and got[1] not in FRAMEWORKS:
            return got[1]
    return None


def framework_of(root: Path, package: str) -> str:
    """miles or slime: the framework a package is (itself), or a fork of (the one its
    utils/arguments.py names more often: a fork keeps its parent's names in comments,
    messages and imports)."""
    if package in FRAMEWORKS:
        return package
    try:
        text = (root / package / "utils" / "arguments.py").read_text(errors="replace")
    except OSError:
        return "miles"
    return "slime" if text.count("slime") > text.count("miles") else "miles"


def parser_package(text: str, root: Path | None) -> str | None:
    """The package whose parser an entry script builds: miles or slime when it imports
    them; else a fork's package P when it imports P.utils.arguments (``from
    P.utils.arguments import parse_args``) and `root/P/utils/arguments.py` exists. None: the
    entry builds neither (another program's train.py, such as a vendored Megatron-LM
    example), so its flags are not miles' or slime's."""
    import ast

    try:
        tree = parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    mods: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            mods += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            mods += [a.name for a in node.names]
    tops = [m.split(".")[0] for m in mods]
    for name in FRAMEWORKS:
        if name in tops:
            return name
    for m in mods:
        top = m.split(".")[0]
        if m.startswith(f"{top}.utils.arguments") and root is not None \
                and (root / top / "utils" / "arguments.py").is_file():
            return top
    return None


def _parser_of(path: Path) -> tuple[Path, str | None] | None:
    """(the folder holding the package, the package) an entry file builds its parser from
    (None: neither miles' nor slime's nor a fork's), read through the gate; None when the
    file is not there (or not readable here)."""
    from . import gate
    from .argscan import SOURCE_MAX

    real = Path(os.path.realpath(path))
    roots = gate.current() or (real.parent,)
    try:
        text = gate.read_text(real, roots, limit=SOURCE_MAX)
        parse(text)  # a file Python cannot parse here is not read
    except (OSError, gate.Refused, SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # not read here: judged as its name says
    for folder in [real.parent, *list(real.parents)[1:4]]:
        if gate.current() is not None and gate.inside(folder, gate.current()) is None:
            break
        got = parser_package(text, folder)
        if got is not None and got not in FRAMEWORKS:
            return folder, got
    return real.parent, parser_package(text, None)


def entry_parser(script: str | None, entry: str | None) -> tuple[Path, str | None] | None:
    """What a launch's entry script builds its parser from (see `_parser_of`), the entry
    found beside the script or in a folder above it, inside the input's checkout; None when
    it is not found here (a container's /root/miles/train.py, a module: judged as miles' or
    slime's training, as before)."""
    if not entry or not entry.endswith(".py"):
        return None
    if os.path.isabs(entry):
        cands = [Path(entry)]
    else:
        here = Path(os.path.abspath(script)).parent if script else Path.cwd()
        cands = [d / entry for d in [here, *list(here.parents)[:4]]]
    for cand in cands:
        got = _parser_of(cand)
        if got is not None:
            return got
    return None


def checkout_of(path: str | Path, levels: int = 6) -> tuple[Path, str] | None:
    """The folder above `path` (itself included) that holds a miles or slime package (or a
    fork's, see `framework_in`), and which: the script's own checkout, or a fork of the
    framework beside it."""
    p = Path(os.path.abspath(path))
    p = p if p.is_dir() else p.parent
    for _ in range(levels):
        got = framework_in(p)
        if got is not None:
            return p, got
        if p.parent == p:
            break
        p = p.parent
    return None


def installed() -> tuple[Path, str] | None:
    """The site folder of an installed miles or slime (found on sys.path, not imported);
    this project's own `miles/` (no utils/arguments.py) does not count."""
    for name in FRAMEWORKS:
        spec = PathFinder.find_spec(name, sys.path)
        for loc in (spec.submodule_search_locations or ()) if spec is not None else ():
            if (Path(loc) / "utils" / "arguments.py").is_file():
                return Path(loc).parent, name
    return None


# a function path given to the framework's loader: miles 31f1ca9 utils/misc.py load_function
# and slime 624b824 utils/misc.py load_function import its module (`--custom-rm-path
# slime.rollout.x.reward_func`), and neither package holds the other's; a list of them
# (`--*-paths`, nargs="+") is loaded one by one the same way (slime forks' router:
# `for middleware_path in args.slime_router_middleware_paths: load_function(...)`)
_MODULE_PATH = re.compile(r"(miles|slime)\.[A-Za-z_][\w.]*$")


def named_frameworks(argv: Sequence[tuple[str, str | None]]) -> tuple[str, ...]:
    """The framework the launch's function paths (`--*-path` values, each of a `--*-paths`
    list) name by its package, which must then be importable where the job runs; none when
    they name both."""
    got = {m.group(1) for flag, value in argv if value and flag.endswith(("-path", "-paths"))
           for word in value.split() if (m := _MODULE_PATH.match(word))}
    return tuple(got) if len(got) == 1 else ()


def entry_framework(entry: str | None, imports: Sequence[str] = ()) -> str | None:
    """slime when the entry runs under a slime checkout (`.../slime/train.py`, `-m slime.x`)
    or the launcher imports slime; miles likewise; else None."""
    parts = set(Path(entry).parts[:-1]) if entry else set()
    for name in FRAMEWORKS:
        if name in imports or (entry or "").startswith(name + "."):
            return name
    for name in FRAMEWORKS:  # e.g. /root/slime/train.py
        if any(p == name or p.lower().startswith(name + "-") or p.lower().endswith("/" + name)
               for p in parts):
            return name
    return None


# ---- reading sources (never importing them) -----------------------------------------------


def _source(roots: Sequence[Path], module: str) -> str | None:
    """The source of a module under one of `roots`, else found on sys.path; None if absent."""
    rel = module.replace(".", "/")
    for root in roots:
        got = _read_under(root, [root / f"{rel}.py", root / rel / "__init__.py"])
        if got is not None:
            return got
    try:
        spec = PathFinder.find_spec(module.split(".")[0], sys.path)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    base = [Path(p).parent for p in spec.submodule_search_locations or ()] or \
        ([Path(spec.origin).parent] if spec.origin else [])
    for root in base:
        got = _read_under(root, [root / f"{rel}.py", root / rel / "__init__.py"])
        if got is not None:
            return got
    return None


def _read_under(root: Path, cands: Sequence[Path]) -> str | None:
    """The first candidate the gate admits under `root` (resolved inside it, no hidden
    name, a regular file of at most argscan.SOURCE_MAX bytes: it is parsed whole)."""
    from . import gate
    from .argscan import SOURCE_MAX

    allowed = (Path(os.path.realpath(root)),)
    for cand in cands:
        try:
            return gate.read_text(cand, allowed, limit=min(gate.AST_LIMIT, SOURCE_MAX))
        except (OSError, gate.Refused):
            continue
    return None


def cache_dir() -> Path:
    env = os.environ.get("MILES_TOPOLOGY_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "miles-topology"


# what argscan reads: a cached entry of an older reading is read again (2: the flags of a
# loop over a dataclass's fields)
READING = 2


def _cached(tag: str, files: Sequence[Path], compute) -> list[Added]:
    """`compute()`, kept in the cache folder per version of `files` (their sizes and times)
    and of the reading (`READING`)."""
    key = hashlib.sha256(json.dumps(
        [READING, *([str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files)]).encode()
    ).hexdigest()[:24]
    path = cache_dir() / f"flags-{tag}-{key}.json"
    try:
        return [Added(tuple(n), t) for n, t in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        pass
    got = compute()
    body = json.dumps([[list(a.names), a.takes_value] for a in got])
    if len(body) > CACHE_ENTRY_MAX:  # a crafted fork's flags are not kept beyond the run
        return got
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(body)
        os.replace(tmp, path)
        _prune(path.parent)
    except OSError:
        pass  # a read-only home: read again next time
    return got


# The cache holds small entries (miles' flags: 13 KB, slime's: 8 KB), and few of them: what
# a checkout derives from its own sources stays bounded beyond the run that read it.
CACHE_ENTRY_MAX = 256 << 10
CACHE_ENTRIES = 32


def _prune(folder: Path) -> None:
    """Keep the CACHE_ENTRIES newest entries (one per version of each stack read)."""
    entries = sorted(folder.glob("flags-*.json"), key=lambda p: p.stat().st_mtime_ns,
                     reverse=True)
    for old in entries[CACHE_ENTRIES:]:
        old.unlink(missing_ok=True)


def _framework_flags(root: Path, package: str) -> list[Added]:
    """The literal flags of a framework package at `root` (argscan.own_flags), and of every
    module of the package its arguments modules import (a fork's
    ``from slime_vllm.backends.vllm_utils.arguments import add_vllm_arguments``): its own
    argument definitions, wherever its imports lead inside the checkout."""
    files = sorted((root / package).glob("**/*.py"))[:4096]
    return _cached(package, files, lambda: own_flags(lambda m: _source([root], m), package))


def _megatron_flags(roots: Sequence[Path]) -> tuple[str, list[Added]] | None:
    """The literal flags of the Megatron-LM beside the framework or on sys.path
    (megatron/training/arguments.py: miles and slime parse with Megatron's own parser, so
    each flag it adds is accepted), and where it is; None when there is none."""
    from .argscan import adds

    for base in [*roots, *(Path(p) for p in sys.path if p)]:
        f = base / "megatron" / "training" / "arguments.py"
        if f.is_file():
            def read(f=f, base=base) -> list[Added]:
                from .argscan import _parse

                tree = _parse(_read_under(base, [f]))
                return [] if tree is None else list(adds(tree))
            return str(f.parent.parent.parent), _cached("megatron", [f], read)
    return None


# `AsyncEngineArgs.add_cli_args(parser)`: a package's arguments module handing its parser to
# another package's class, whose flags are not read here (vime's vLLM passthrough,
# vime/backends/vllm_utils/arguments.py:276). SGLang's, its router's (miles 31f1ca9
# utils/arguments.py: RouterArgs.add_cli_args) and Megatron-LM's are known (surface.json).
_ADDER = re.compile(r"\b([A-Za-z_]\w*)\.add_cli_args\(")
_KNOWN_ADDERS = ("sglang", "sglang_router", "megatron")


def _foreign_adders(root: Path, package: str) -> list[str]:
    """The other packages' `X.add_cli_args(parser)` the package's arguments modules call:
    the flags they add are not known here, so a flag none of the known ones is may be one
    (`unverified-flag`), not refused."""
    out = []
    for f in sorted((root / package).glob("**/arguments.py"))[:64]:
        text = _read_under(root, [f]) or ""
        for name in dict.fromkeys(_ADDER.findall(text)):
            m = re.search(rf"^\s*from\s+([\w.]+)\s+import\s+[^\n]*\b{name}\b", text, re.M)
            top = m.group(1).split(".")[0] if m else None
            if top and top != package and top not in _KNOWN_ADDERS:
                out.append(f"{m.group(1)}.{name}.add_cli_args")
    return out


def _oversized(files: Sequence[Path]) -> list[str]:
    """The sources among `files` too large to parse (argscan.SOURCE_MAX): their flags are
    not known, so a flag they may add is unverified, not refused."""
    from .argscan import SOURCE_MAX

    out = []
    for f in files:
        try:
            if f.stat().st_size > SOURCE_MAX:
                out.append(f"{f} (larger than {SOURCE_MAX >> 20} MiB, not read)")
        except OSError:
            continue
    return out


@lru_cache(maxsize=64)
def _base(root: str | None, framework: str, origin: str, package: str | None = None) -> Stack:
    added: dict[str, tuple[str, Added]] = {}
    package = package or framework
    unread: list[str] = []
    if root is not None:
        for a in _framework_flags(Path(root), package):
            for n in a.names:
                added[n] = (f"{package} of {root}", a)
        unread = _oversized(sorted((Path(root) / package).glob("**/arguments.py")))
        if package not in FRAMEWORKS:  # miles' and slime's own adders are SGLang's (known)
            unread += _foreign_adders(Path(root), package)
    megatron = _megatron_flags([Path(root)] if root else [])
    if megatron is not None:
        for a in megatron[1]:
            for n in a.names:
                added.setdefault(n, (f"Megatron-LM of {megatron[0]}", a))
        unread += _oversized([Path(megatron[0], "megatron", "training", "arguments.py")])
    return Stack(framework, root, origin, added, tuple(unread),
                 drops_unknown=drops_unknown(Path(root) if root else None, framework, package),
                 package=package)


def for_launch(script: str | None, entry: str | None, argv: Sequence[tuple[str, str | None]],
               stack_path: str | None = None, imports: Sequence[str] = (),
               image: bool = False) -> Stack:
    """The stack a launch (its (flag, value) pairs, value None when unknown) is judged
    against; see the module docstring for the order. `image`: the entry is a file of a
    container's image, not of this machine: no stack here is its stack (only --stack, else
    the bundled one)."""
    where: tuple[Path, str] | None = None  # (the folder holding the package, the package)
    origin = "bundled"
    stack_path = stack_path or STACK_PATH.get()
    if stack_path:
        pkg = framework_in(Path(stack_path))
        where, origin = ((Path(stack_path), pkg), "--stack") if pkg else (None, "bundled")
    from . import gate

    inside = gate.current()  # the input's roots: a fork is read only inside them

    def kept(p: Path) -> bool:
        return inside is None or gate.inside(Path(os.path.realpath(p)), inside) is not None

    if where is None and script:
        # a fork under its own package name: the one the entry builds its parser from
        got = entry_parser(script, entry)
        if got is not None and got[1] not in (None, *FRAMEWORKS) and kept(got[0]):
            where, origin = (got[0], got[1]), "checkout"
    if where is None and script:
        got = checkout_of(script)
        where, origin = (got, "checkout") if got and kept(got[0]) else (None, origin)
    if where is None and not image:
        got = installed()
        where, origin = (got, "installed") if got else (None, origin)
    framework = entry_framework(entry, imports) or entry_framework(None, named_frameworks(argv)) \
        or (framework_of(*where) if where else "miles")
    if where is not None and framework_of(*where) != framework:
        where, origin = None, "bundled"
    base = _base(str(where[0]) if where else None, framework, origin,
                 where[1] if where else None)
    roots = [Path(p) for p in (stack_path, where[0] if where else None) if p]
    if script:  # the script's folder and those above it (its repository's root on PYTHONPATH)
        here = Path(os.path.abspath(script)).parent
        roots += [p for p in [here, *list(here.parents)[:3]] if kept(p)]
    return with_functions(base, argv, roots)


def with_functions(base: Stack, argv: Sequence[tuple[str, str | None]],
                   roots: Sequence[Path] = ()) -> Stack:
    """`base` with what the launch's user functions add (the last value of each flag wins,
    as argparse has it); a path that cannot be read here is `unresolved`. Not on slime: no
    slime commit calls a function's add_arguments (miles 31f1ca9 utils/arguments.py:2591
    add_user_provided_function_arguments; slime 624b824's parser is its own, Megatron's and
    SGLang's, and drops what they lack)."""
    if base.framework == "slime":
        return base
    paths: dict[str, str | None] = {}
    for flag, value in argv:
        if flag in FUNCTION_FLAGS:
            paths[flag] = value
    if not paths:
        return base
    added = dict(base.added)
    unresolved = list(base.unresolved)
    resolver = Resolver(lambda m: _source(roots, m))
    bundled = surface.function_arguments()
    for flag, path in paths.items():
        got = None
        if path:
            got = resolver.function_arguments(path)
            if got is None and path in bundled:
                got = [Added(tuple(n), t) for n, t in bundled[path]]
        if got is None:
            unresolved.append(path or f"the value of {flag}")
            continue
        for a in got:
            for n in a.names:
                added.setdefault(n, (f"{path}'s add_arguments", a))
    return Stack(base.framework, base.root, base.origin, added, tuple(unresolved),
                 base.drops_unknown, package=base.package)
