"""Every problem code, its kind and when it is reported: the one registry, and the rules.

A rule declares the codes it reports in its decorator (`@rule(source=..., codes={...})`,
checks/); a code raised outside the rules is declared with `declare` by what raises it
(below, and checks/fsdp.py). Declaring a code twice is an error, so the registry cannot
drift from what is raised; a test scans the sources for codes no one declared.
docs/problem-codes.md is generated from it (`python -m miles_topology.codes > docs/...`
runs __main__.py; a test keeps the two equal). Codes are stable kebab-case strings: add
rows, never rename one. The registry is complete once `miles_topology` is imported (its
`__init__` imports checks/).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

# kind: error (the real stack refuses, crashes, hangs or trains wrongly), warning (it
# silently changes or drops something), note (the script reader: bash runs something other
# than what the script appears to say), skipped (a fact the rule needs is unknown; absence of
# a flag is not knowledge when the real stack reads it elsewhere).
_KINDS = ("error", "warning", "note", "skipped")
CODES: dict[str, tuple[str, str]] = {}  # code -> (kind, when), in declaration order
RAISED_BY: dict[str, str] = {}  # code -> the rule or module that declared it

# The rules a Topology must satisfy, in the order they run (checks/ sorts them): each takes a
# Topology and yields its problems. The rules register here, so the model that runs them
# (model.py, on every construction) imports none of them.
Rule = Callable[[Any], Iterable[Any]]
RULES: list[Rule] = []


def declare(by: str, codes: dict[str, tuple[str, str]]) -> None:
    """Register `codes` (code -> (kind, when)), raised by `by`."""
    for code, (kind, when) in codes.items():
        if code in CODES:
            raise ValueError(f"problem code {code} declared twice: {RAISED_BY[code]}, {by}")
        if kind not in _KINDS or not when:
            raise ValueError(f"problem code {code}: kind {kind!r} not one of {_KINDS}")
        CODES[code] = (kind, when)
        RAISED_BY[code] = by


def rule(source: str, codes: dict[str, tuple[str, str]] | None = None,
         uses: tuple[str, ...] = ()) -> Callable[[Rule], Rule]:
    """A rule: it reports `codes` (declared here) and `uses` (declared elsewhere), following
    upstream's `source`; it runs on every Topology."""

    def register(fn: Rule) -> Rule:
        declare(f"rule {fn.__name__} ({fn.__module__})", codes or {})
        fn.declares = tuple(codes or {})  # type: ignore[attr-defined]
        fn.codes = (*fn.declares, *uses)  # type: ignore[attr-defined]
        fn.source = source  # type: ignore[attr-defined]
        RULES.append(fn)
        return fn

    return register


def run_rules(topo: Any) -> list[Any]:
    """Every problem of every registered rule, in rule order."""
    return [p for fn in RULES for p in fn(topo)]


# ---- codes raised outside the rules -------------------------------------------------------

declare("flags.py (the flag grammar); sources.py (flags against a YAML); model.py (values)", {
    'flag-conflict': (
        'error', 'the same size given two different ways (flag vs YAML, alias vs name)'),
    'invalid-flag-value': (
        'error', "a flag's value is not a whole number (`None`), or is missing"),
    'unknown-field': ('error', 'a topology YAML has a key that is not a field'),
    'missing-model-fact': ('error', 'a derivation needs a model fact that was not given'),
    'deprecated-flag': (
        'warning', 'a renamed flag was used, or one upstream deprecates (SGLang renamed or '
        'ignores it); the message names the new one'),
    'unknown-flag': (
        'error', "a flag the launch's stack does not define (miles' or slime's train.py: "
        'their own flags, Megatron-LM, SGLang as `--sglang-*`, the add_arguments of the '
        'functions the launch names; the stack installed, beside the script, given by '
        '`--stack`, else miles_topology/surface.json), or a short alias such as `-tp`, '
        'whatever its value: its parser exits at start-up; the message names the closest '
        'known flag'),
    'flag-of-other-version': (
        'warning', 'a flag the stack checked against does not define but another known '
        'version or framework does (slime vs miles, a newer SGLang or Megatron-LM, slime\'s '
        'patched Megatron-LM): the message names which'),
    'unverified-flag': (
        'skipped', "a flag the stack does not define, while a function the launch names "
        "(`--rollout-function-path`, `--custom-generate-function-path`) cannot be read here: "
        "its add_arguments may add it"),
    'flag-given-twice': (
        'warning', "one flag given twice with different values on a command line; miles' "
        'parser keeps the last'),
})
declare("channels.py (YAML files that set arguments after parsing)", {
    'custom-config-layout': (
        'error', '`--custom-config-path` YAML sets a layout or rollout size: miles applies it '
        'in miles_validate_args, after world size and placement were computed from the '
        'command line'),
    'custom-config-unread': (
        'skipped', '`--custom-config-path` cannot be read here (unknown value, missing file, '
        'not YAML): the arguments it sets are not checked'),
    'yaml-cfg-replaces-flags': (
        'warning', "Megatron-LM's `--yaml-cfg` replaces every parsed argument with the YAML's: "
        "the command line's sizes are not what runs"),
})
declare("report.py (where a Python launcher starts training)", {
    'launch': (
        'note', 'a training launch of a Python launcher, at its file:line: one notice per '
        'launch in `--format github`/`sarif`, so each launch of a file is located'),
})
declare("report.py and cli.py (an input that cannot be read)", {
    'unreadable': (
        'error', 'an input cannot be read at all (missing file, bad YAML, bash syntax): exit '
        '2; in `--format github`/`sarif` and batch output'),
})
declare("the script reader (shell/ interpret.py, read.py; check_script.py reports them)", {
    'missing-line-continuation': (
        'error', 'a line starts with flags (or an unresolved `${A[@]}` and flags) but the line '
        'above does not end in `\\`: bash drops them from the launch'),
    'space-after-line-continuation': (
        'note', 'a line ends in `\\` followed by spaces, so the command ends there'),
    'source-cycle': ('note', 'a file is sourced again while it is being sourced'),
    'no-launch-command': (
        'note', 'no training launch (`train.py`/`train_async.py` by python, `torchrun` or `ray '
        'job submit`); converters, servers and `run.py` wrappers do not count: exit 2'),
    'several-launch-commands': ('note', 'more than one launch command; the last one is read'),
    'conditional-launch': ('note', 'the launch command runs inside an if/case/loop/&&'),
    'crlf-line-ends': (
        'warning', "the script has CR LF line ends: bash keeps each CR in the line's last word, "
        'so flags arrive as `--flag\\r` and `\\` no longer continues a line'),
    'sourced-from-checkout': (
        'note', 'a file sourced by an absolute path that does not exist here is read from the '
        "same path inside the script's checkout"),
})


# Where each code's page is: a row of docs/problem-codes.md, anchored by its code. The
# package's "Documentation" project URL (pyproject [project.urls]) when it has one, else a
# reference relative to the repository root; SARIF helpUri carries it.
PAGES = "docs/problem-codes.md"


@cache
def _pages() -> str:
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("miles-topology").get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation":
            return url.strip()
    return PAGES


def page_uri(code: str) -> str:
    return f"{_pages()}#{code}"


def page(code: str) -> str:
    """What `miles-topology rule CODE` prints: the code's kind, when it is reported, and
    how to turn it off."""
    kind, when = CODES[code]
    exits = {"error": "fails the check (exit 1)", "skipped": "is reported as skipped"}.get(
        kind, "is reported; the check still passes")
    return "\n".join([
        f"{code} ({kind})", "", f"Reported when: {when}.", f"A report of it {exits}.", "",
        "Turn it off:",
        f"  on one line       # miles-topology: disable={code}   (on the line or the line "
        "before)",
        f"  in one file       # miles-topology: disable-file={code}",
        f"  in a run          miles-topology check --ignore {code} ...",
        f"  in a project      [tool.miles-topology] ignore = [\"{code}\"]  (pyproject.toml)",
        "", f"Page: {page_uri(code)}", ""])


def markdown() -> str:
    """The text of docs/problem-codes.md."""
    lines = [
        "# Problem codes",
        "",
        "<!-- generated from miles_topology/codes.py: "
        "python -m miles_topology.codes > docs/problem-codes.md -->",
        "",
        "Every problem `miles-topology check`, `show`, `migrate` and the launcher report has a",
        "stable kebab-case code (never renamed). Errors make the configuration invalid (exit 1);",
        "warnings and script-reader notes do not.",
        "",
        "| code | kind | when |",
        "|---|---|---|",
    ]
    by_rule = [c for fn in RULES for c in fn.declares]  # type: ignore[attr-defined]
    for code in dict.fromkeys([*by_rule, *CODES]):  # the rules' codes in rule order, then others
        kind, when = CODES[code]
        lines.append(f'| `{code}` | {kind} | {when.replace("|", "/")} <a id="{code}"></a> |')
    return "\n".join(lines) + "\n"
