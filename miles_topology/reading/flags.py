"""The flag grammar: the only place that reads flag spellings into the model's short fields.

Each field's own flag is declared with the field (model.py, `fact`); this module adds the
other spellings (aliases), the renamed flags with what replaces them, and `--topology`.
Other flags of miles' surface (surface.py) pass through; a flag miles' parser does not
define is an `unknown-flag` error. Tokens are strings, or objects with a `.text` (the
script reader's words, which also know where they are written): `Parsed.origin` keeps the
token that set each field so a problem can point at its file and line.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, get_args, get_origin

from ..model.errors import InputError, Location, Problem
from ..model.parts import FIELDS, flag_of  # noqa: F401  (flag_of: re-exported)

TOPOLOGY = "--topology"  # a topology YAML, read under the other topology flags

# Another spelling of a field's flag: flag -> field. Messages quote the field's own flag.
# SGLang ServerArgs flags are forwarded by miles with the --sglang- prefix, every alias of
# them included (miles backends/sglang_utils/arguments.py add_sglang_arguments; validate_args
# then copies sglang_data_parallel_size -> sglang_dp_size, ... and overwrites sglang_tp_size).
ALIASES: dict[str, str] = {
    "--sglang-expert-parallel-size": "engine_ep",
    "--sglang-ep": "engine_ep",
    "--sglang-data-parallel-size": "engine_dp",
    "--sglang-pipeline-parallel-size": "engine_pp",
    "--sglang-tensor-parallel-size": "sglang_tp",
}


@dataclass(frozen=True)
class Rename:
    """A renamed flag: `new` is what to write instead (quoted in the warning); the old
    spelling still sets `field` (None: nothing of ours), as a switch copying the value of
    field `like` when given, and stands for the flags `passes` (not ours: passed through)."""

    new: str
    field: str | None = None
    like: str | None = None
    passes: tuple[str, ...] = ()


RENAMED: dict[str, Rename] = {
    "--rollout-num-gpus-per-node": Rename("--num-gpus-per-node", "node_gpus"),
    "--sglang-enable-ep-moe": Rename("--sglang-ep-size N", "engine_ep", like="engine_size"),
    # `passes` are read next as if written there (--sglang-moe-a2a-backend is ours now)
    "--sglang-enable-deepep-moe": Rename("--sglang-moe-a2a-backend deepep",
                                         passes=("--sglang-moe-a2a-backend", "deepep")),
}


@dataclass(frozen=True)
class Spec:
    field: str
    kind: str  # "int", "switch", "str" (a string the model parses, e.g. --moe-layer-freq),
    # or "list" (one or more values up to the next flag: argparse nargs="+")
    values: tuple | None = None  # a switch: (value off, value on); a str: the allowed values


@lru_cache(maxsize=1)
def table() -> dict[str, Spec]:
    """Every flag of ours (own flags, aliases, renamed spellings) -> how it reads."""
    specs: dict[str, Spec] = {}
    by_field: dict[str, Spec] = {}
    for name, info in FIELDS.items():
        extra = info.json_schema_extra or {}
        if extra.get("switch"):
            spec = Spec(name, "switch", tuple(extra["switch"]))
        elif info.annotation is bool:
            spec = Spec(name, "switch")
        elif info.annotation in (int, int | None):
            spec = Spec(name, "int")
        elif info.annotation == tuple[str, ...] | None:
            spec = Spec(name, "list")
        else:
            spec = Spec(name, "str", _choices(info.annotation))
        by_field[name] = spec
        if extra.get("flag"):
            specs[extra["flag"]] = spec
    for flag, name in ALIASES.items():
        specs[flag] = by_field[name]
    for flag, r in RENAMED.items():
        plain = r.field is not None and r.like is None
        specs[flag] = by_field[r.field] if plain else Spec(r.field or "", "switch")
    return specs


def _choices(annotation: Any) -> tuple | None:
    """The values a Literal (or Literal | None) field accepts, else None."""
    for t in (annotation, *get_args(annotation)):
        if get_origin(t) is Literal:
            return get_args(t)
    return None


def known(flag: str) -> bool:
    """A flag of ours (including `--topology`)."""
    return flag == TOPOLOGY or flag in table()


def field_of(flag: str) -> str | None:
    """The model field a flag spelling sets (renamed and alias spellings included)."""
    spec = table().get(flag)
    return spec.field or None if spec else None


def is_switch(flag: str) -> bool:
    """A flag that takes no value word."""
    spec = table().get(flag)
    return spec is not None and spec.kind == "switch"


@dataclass
class Parsed:
    """Fields read from argv, the flags that set them, and what is not ours."""

    fields: dict = field(default_factory=dict)
    given_by: dict[str, str] = field(default_factory=dict)  # field -> flag spelling used
    origin: dict[str, Any] = field(default_factory=dict)  # field -> the token that set it
    passthrough: list = field(default_factory=list)  # tokens as given
    topology: str | None = None  # the `--topology` file
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


def text_of(token: Any) -> str:
    return token if isinstance(token, str) else token.text


def _is_flag(text: str) -> bool:
    return text.startswith("--") and len(text) > 2


# Short spellings people carry over from other launchers; miles' parser does not know them.
SHORT: dict[str, str] = {
    f"{dash}{short}": flag
    for short, flag in (
        ("tp", "--tensor-model-parallel-size"), ("pp", "--pipeline-model-parallel-size"),
        ("cp", "--context-parallel-size"), ("ep", "--expert-model-parallel-size"),
        ("etp", "--expert-tensor-parallel-size"), ("sp", "--sequence-parallel"),
        ("vpp", "--num-virtual-stages-per-pipeline-rank"),
    )
    for dash in ("-", "--")
}


@lru_cache(maxsize=1)
def _spellings() -> tuple[str, ...]:
    """Every flag a suggestion may name: miles' and slime's whole surfaces and our own
    spellings (a flag of another version is no typo: see `_unknown`)."""
    from . import surface

    return tuple(sorted(surface.names() | surface.slime_names() | set(table()) | {TOPOLOGY}))


def _grams(name: str) -> set[str]:
    body = name.lstrip("-")
    return {body[i:i + 3] for i in range(len(body) - 2)}


@lru_cache(maxsize=1)
def _gram_index() -> dict[str, tuple[str, ...]]:
    """Trigram -> the spellings holding it: the shortlist for a suggestion."""
    index: dict[str, list[str]] = {}
    for flag in _spellings():
        for g in _grams(flag):
            index.setdefault(g, []).append(flag)
    return {g: tuple(names) for g, names in index.items()}


@lru_cache(maxsize=4096)
def suggest(name: str) -> str | None:
    """The flag an unknown spelling most likely means, or None: difflib's closest match
    (ratio >= 0.8) among the 24 spellings of miles' whole surface that share the most
    trigrams with it (a near miss shares most of them; comparing all 2200 spellings costs
    6-40 ms a name). Cached per spelling: scripts and batches repeat them."""
    if name in SHORT:
        return SHORT[name]
    if not name.startswith("--"):
        return None
    index = _gram_index()
    shared: Counter[str] = Counter()
    for g in _grams(name):
        shared.update(index.get(g, ()))
    shortlist = [flag for flag, _ in shared.most_common(24)]
    got = difflib.get_close_matches(name, shortlist, n=1, cutoff=0.8)
    return got[0] if got else None


def where(token: Any) -> Location | None:
    """The file:line a token is written at, when its reader knows it (`.source`)."""
    src = getattr(token, "source", None)
    return Location(src.path, src.line) if src is not None and src.line > 0 else None


def _near(name: str, stack: Any) -> str | None:
    """A known flag `name` is a near miss of: of either framework's surface, ours, or one a
    function of the launch adds. One the stack itself lacks is no fix there (miles'
    --use-miles-router for slime's --use-slime-router: slime's parser drops both)."""
    near = suggest(name)
    if near is not None and not stack.layout_only and stack.flag(near) is None \
            and not known(near):
        near = None
    if near is None and name.startswith("--") and stack.added:
        got = difflib.get_close_matches(name, list(stack.added), n=1, cutoff=0.8)
        near = got[0] if got else None
    return near


def _fw() -> str:
    """Whose parser the launch runs ("miles'" or "slime's"), for messages."""
    from .stack import current

    return "slime's" if current().framework == "slime" else "miles'"


def _unknown(name: str, token: Any) -> Problem | None:
    """A flag the launch's stack does not define (stack.py). The real parser exits at
    start-up ("unrecognized arguments"; Megatron's parser has allow_abbrev=False, so no
    prefix of a flag is taken either), so it is an error when that is certain:
    - a flag another known version or framework defines (slime vs miles, a newer SGLang or
      Megatron-LM) warns and names which: the user's stack may be that one;
    - a near miss of a known flag is an error with did-you-mean, whatever its value;
    - a flag a function of the launch may add (its add_arguments could not be read here) is
      skipped;
    - anything else is an error."""
    from .stack import current

    st = current()
    fw = _fw()
    if st.layout_only:  # no stack to judge against: only a near miss of our own flags
        near = _near(name, st)
        if near is None or not known(near):
            return None
        return Problem(
            "unknown-flag", f"{name} is not a flag of miles' or slime's parser; did you mean "
            f"{near}? (it would leave that size at its default)", f"write {near}", (name,),
            location=where(token))
    other = st.other(name)
    if other is not None and st.drops_unknown:  # slime: the launch runs, without it
        return Problem(
            "ignored-flag",
            f"{name} is not a flag of {fw} train.py ({st.describe()}): its parser drops it "
            f"(ignore_unknown_args), so what it would set keeps its default ({other}).",
            f"remove {name}, or run it on a stack that has it", (name,),
            location=where(token))
    if other is not None:
        return Problem(
            "flag-of-other-version",
            f"{name} is not a flag of {st.describe()}, but {other}: the launch runs only "
            "on a stack that has it.",
            f"run it on that stack (check it there, or with --stack PATH), or remove {name}",
            (name,), location=where(token))
    near = _near(name, st)
    if near is None and st.unresolved:
        funcs = ", ".join(st.unresolved)
        return Problem(
            "unverified-flag",
            f"{name} is unknown: it may come from {funcs}'s add_arguments, which cannot be "
            "read here.",
            "check where that function is importable (its checkout, or --stack PATH)",
            (name,), "skipped", where(token))
    hint = f"; did you mean {near}?" if near else "."
    if st.drops_unknown:
        return Problem(
            "ignored-flag",
            f"{name} is not a flag of {fw} train.py ({st.describe()}): its parser drops it "
            f"(ignore_unknown_args), so what it would set keeps its default{hint}",
            f"write {near}" if near else f"remove {name}, or check its spelling against "
            "`python train.py --help`", (name,), location=where(token))
    return Problem(
        "unknown-flag",
        f"{name} is not a flag of {fw} train.py ({st.describe()}): its parser refuses it "
        f"at start-up{hint}",
        f"write {near}" if near else f"remove {name}, or check its spelling against "
        "`python train.py --help`", (name,), location=where(token),
    )


def spelling_problem(name: str, token: Any = None) -> Problem | None:
    """The finding of one flag spelling whose value is not known (the script reader keeps
    such flags out of argv): its name alone decides it. A typo is a typo, and a renamed or
    deprecated flag is one, whatever its value (`--sglang-cuda-graph-bs 1 2 $(seq 16 8
    256)`, slime scripts/run-qwen3-30B-A3B.sh)."""
    from .stack import current

    if name in RENAMED:
        return _renamed(name, RENAMED[name].new, token)
    f = current().flag(name)
    if f is not None and (f.renamed_to or f.removed):
        return _upstream_deprecated(name, f, token)
    if not _is_flag(name) and name not in SHORT or known(name) or f is not None:
        return None
    return _unknown(name, token)


def _upstream_deprecated(name: str, f: Any, token: Any) -> Problem:
    """A spelling upstream still accepts but has renamed (it warns) or ignores."""
    if f.renamed_to:
        text, fix = f"{name} is deprecated upstream; it now reads {f.renamed_to}.", \
            f"replace {name} with {f.renamed_to}"
    else:
        text, fix = f"{name} is deprecated upstream and has no effect.", f"remove {name}"
    return Problem("deprecated-flag", text, fix, (name,), location=where(token))


def _repeated(name: str, first: object, last: object, token: Any) -> Problem:
    """The one report of a repeated flag (`check` and the launcher alike): at the last
    occurrence, the one that wins. Repeats with the same value change nothing and are not
    reported; a repeat whose value is unknown never reaches here (the script reader drops
    it and reports the flag unresolved, so the checks that read it are skipped)."""
    return Problem(
        "flag-given-twice",
        f"{name} is given twice, {first} and then {last}; {_fw()} parser keeps the last, "
        f"{last}.",
        f"give {name} once ({name} {last} is what runs)", (name,), location=where(token),
    )


_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's _negative_number_matcher


def argparse_option(word: str) -> bool:
    """Whether argparse reads `word` as an option string rather than a value (its
    _parse_optional: starts with '-', longer than '-', not a negative number, no space)."""
    return word.startswith("-") and len(word) > 1 and not _NEGATIVE.match(word) \
        and " " not in word


def _other_flag(out: Parsed, seen: dict[str, str], argv: Sequence[Any], i: int, name: str,
                eq: str, inline: str, own: Collection[str] = ()) -> None:
    """A flag that is not ours: one miles does not define is an error (did-you-mean over
    the whole surface), a deprecated one warns, a repeat with another value warns. `own`:
    the caller's own flags (a launcher's), which it reads from the passthrough itself."""
    from .stack import current

    if not (_is_flag(name) or name in SHORT) or name in own:
        return  # a value such as -1
    f = current().flag(name)
    if f is None:
        p = _unknown(name, argv[i - 1])
        if p is not None:
            (out.errors if p.severity == "error" else out.warnings).append(p)
        return
    if f.renamed_to or f.removed:
        out.warnings.append(_upstream_deprecated(name, f, argv[i - 1]))
    nxt = text_of(argv[i]) if i < len(argv) else None
    if f.takes_value and not eq and f.nargs not in ("?", "*") and \
            (nxt is None or argparse_option(nxt)):
        want = "at least one argument" if f.nargs == "+" else "one argument" \
            if f.nargs is None else f"{f.nargs} arguments"
        out.errors.append(Problem(
            "invalid-flag-value",
            f"{name} got no value; argparse refuses the launch at start-up: \"argument "
            f"{name}: expected {want}\" (the next word, {nxt!r}, is a flag)" if nxt else
            f"{name} got no value; argparse refuses the launch at start-up: \"argument "
            f"{name}: expected {want}\" (it is the last word)",
            f"give {name} a value, or remove it", (name,), location=where(argv[i - 1])))
        return
    value = inline if eq else (nxt if f.takes_value and nxt is not None
                               and not nxt.startswith("--") else None)
    if value is None:
        return
    if seen.get(name, value) != value:
        out.warnings.append(_repeated(name, seen[name], value, argv[i - 1]))
    seen[name] = value


def _lacks(name: str) -> bool:
    """A topology flag the launch's slime does not define: read as any flag it lacks (its
    parser drops it, or refuses it), so its field keeps slime's default. slime 624b824
    defines none of --critic-num-nodes, --critic-num-gpus-per-node, --rollout-external (it
    sets args.rollout_external from --rollout-external-engine-addrs, utils/arguments.py:1904),
    --eval-num-gpus, --eval-num-gpus-per-engine, --update-weight-transfer-mode,
    --use-dynamic-global-batch-size, --allow-partial-train-step,
    --disable-rollout-trim-samples, --qkv-format, --dp-replicate-size, --indep-dp,
    --ft-components (miles 31f1ca9 utils/arguments.py defines each)."""
    from .stack import current

    st = current()
    return st.framework == "slime" and not st.layout_only and name not in RENAMED \
        and name != TOPOLOGY and st.flag(name) is None


def parse_flags(argv: Sequence[Any], own: Collection[str] = ()) -> Parsed:
    """Read topology flags from argv (argparse semantics: the last occurrence wins; a repeat
    with another value warns, a flag miles' parser does not define is an error)."""
    specs = table()
    out = Parsed()
    likes: list[tuple[Rename, str, Any]] = []
    seen: dict[str, str] = {}  # other flags' values, to report repeats
    argv = list(argv)
    i = 0
    while i < len(argv):
        token = argv[i]
        text = text_of(token)
        i += 1
        name, eq, inline = text.partition("=")
        if not _is_flag(text) or not (name in specs or name == TOPOLOGY) or _lacks(name):
            out.passthrough.append(token)
            if text.startswith("-") and len(text) > 1:
                _other_flag(out, seen, argv, i, name, eq, inline, own)
            continue
        value: str | None = inline if eq else None
        spec = specs.get(name)
        if name in RENAMED:
            r = RENAMED[name]
            p = _renamed(name, r.new, token)
            (out.errors if p.severity == "error" else out.warnings).append(p)
            argv[i:i] = list(r.passes)  # read next, as if written here
            if r.like is not None:
                likes.append((r, name, token))
                continue
            if r.field is None:
                continue
        if spec is not None and spec.kind == "switch":
            _switch(out, spec, name, value, token)
            continue
        if value is None:
            if i < len(argv) and not _is_flag(text_of(argv[i])):
                value = text_of(argv[i])
                i += 1
            elif name == TOPOLOGY:  # no file to read: unreadable input (exit 2), not a size
                raise InputError(f"{TOPOLOGY} needs a topology YAML file: {TOPOLOGY} FILE.yaml")
            else:
                out.errors.append(_bad_value(name, None, "it needs a value"))
                continue
        if name == TOPOLOGY:
            out.topology = value
            continue
        parsed, i = _typed(out, spec, name, value, argv, i)
        if parsed is not _REFUSED:
            _set(out, spec.field, parsed, name, token)
    for r, name, token in likes:  # e.g. --sglang-enable-ep-moe: engine EP = engine size
        if r.field not in out.fields:
            like = out.fields.get(r.like, FIELDS[r.like].default)
            _set(out, r.field, like, name, token)
    return out


def _switch(out: Parsed, spec, name: str, value: str | None, token: Any) -> None:
    """A switch: alone, or with true/1/false/0 (`--colocate=false`); another value is an
    error."""
    if value is not None and value.lower() not in ("true", "1", "false", "0"):
        out.errors.append(
            _bad_value(name, value, "a switch takes no value", f"write {name} alone."))
        return
    on = value is None or value.lower() in ("true", "1")
    _set(out, spec.field, spec.values[on] if spec.values else on, name, token)


_REFUSED = object()  # a value its flag's kind refuses (the error is filed)


def _typed(out: Parsed, spec, name: str, value: str, argv: list, i: int
           ) -> tuple[object, int]:
    """The value as its flag's kind reads it, and the position after the words it took: a
    whole number, every word up to the next flag (argparse nargs="+"), one of the choices."""
    if spec.kind == "int":
        try:
            return int(value), i
        except ValueError:
            out.errors.append(_bad_value(name, value, "it must be a whole number"))
            return _REFUSED, i
    if spec.kind == "list":
        items = [value]
        while i < len(argv) and not text_of(argv[i]).startswith("--"):
            items.append(text_of(argv[i]))
            i += 1
        return tuple(items), i
    if spec.values and value not in spec.values:
        out.errors.append(_bad_value(
            name, value, f"it must be one of {', '.join(spec.values)}",
            f"give {name} one of: {', '.join(spec.values)}."))
        return _REFUSED, i
    return value, i


def _renamed(old: str, new: str, token: Any = None) -> Problem:
    """A spelling miles renamed. A rename is a fix, not a license: while the stack the
    launch runs on does not define the old spelling (no current miles, slime or SGLang
    does: Megatron's strict parse_args exits on it, "unrecognized arguments"), it is an
    `unknown-flag` error whose fix is the rename; a stack that still has it (an old
    checkout, `--stack`) takes it with a warning."""
    from .stack import current

    fix = f"replace {old} with {new} (`miles-topology migrate SCRIPT --write` does it for a " \
          "launch script)."
    st = current()
    if st.flag(old) is None and st.drops_unknown:
        return Problem(
            "ignored-flag",
            f"{old} is not a flag of {_fw()} train.py ({st.describe()}): its parser drops it "
            f"(ignore_unknown_args); it was renamed, and now reads {new}.",
            fix, (old,), location=where(token))
    if st.flag(old) is None:
        fw = _fw()
        return Problem(
            "unknown-flag",
            f"{old} is not a flag of {fw} train.py ({st.describe()}): its parser refuses it "
            f"at start-up; it was renamed, and now reads {new}.",
            fix, (old,), location=where(token))
    return Problem("deprecated-flag", f"{old} was renamed; it now reads {new}.", fix, (old,),
                   location=where(token))


def _set(out: Parsed, name: str, value: object, flag: str, token: Any) -> None:
    earlier = out.given_by.get(name)
    if earlier == flag and out.fields[name] != value:
        out.warnings.append(_repeated(flag, out.fields[name], value, token))
    if earlier is not None and earlier != flag and out.fields[name] != value:
        out.errors.append(
            Problem(
                "flag-conflict",
                f"{earlier} {out.fields[name]} and {flag} {value} set the same size "
                "to two different values.",
                f"keep one of them: either {earlier} {out.fields[name]} or {flag} {value}.",
                (earlier, flag),
            )
        )
    out.fields[name] = value
    out.given_by[name] = flag
    out.origin[name] = token


def _bad_value(flag: str, value: str | None, rule: str, fix: str = "") -> Problem:
    shown = "no value" if value is None else f"{value!r}"
    fix = fix or f"give {flag} a whole number (e.g. {flag} 1), or drop it to use the default."
    return Problem("invalid-flag-value", f"{flag} got {shown}; {rule}.", fix, (flag,))
