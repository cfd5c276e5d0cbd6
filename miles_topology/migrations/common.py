"""What the migration steps share: reading a script the way the checker does, finding the
exact words a flag occupies, editing only those, and proving the topology did not change.

A step never guesses. A flag whose words it cannot pin to the script's own text is left
where it is, with the reason; a script it cannot read as a whole (unresolved layout values,
an invalid topology, a launch inside a branch) is refused before anything is edited.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..model.errors import InputError, NoTrainingLaunch, TopologyError
from ..model.parts import FIELDS, fields_in
from ..model.topology import Topology, value
from ..reading import gate
from ..reading.argscan import Added
from ..reading.flags import RENAMED, TOPOLOGY, field_of, is_switch
from ..reading.sources import read_flags
from ..reading.stack import Stack, for_launch, using
from ..reading.yamlflags import STAGED
from ..shell import (
    FlagValue,
    ScriptRead,
    ScriptReadError,
    Span,
    read_script,
    require_launch,
    syntax,
)

# Fields the topology flags set beyond the model shape and batch sizes.
LAYOUT = fields_in("layout", "rollout", "replay")
# Of them, the parallel layout proper (cluster, train and critic grids, rollout and eval
# engines): only these move into the topology file. The algorithm (--advantage-estimator,
# --use-critic, routing replay), the backend, --sglang-config, external engines, the weight
# transfer mode, the MoE all-to-all kernel, debug modes, fault tolerance (--indep-dp) and the
# framework stay where they are.
MOVES = tuple(f for f in LAYOUT if f not in {
    "cluster_nodes", "use_critic", "advantage_estimator", "train_backend", "fsdp_ignored",
    "rollout_external", "external_addrs", "a2a_backend", "sglang_config", "engine_groups",
    "transfer_mode", "train_only", "rollout_only", "routing_replay", "rollout_routing_replay",
    "framework", "indep_dp", "fault_tolerance", "ft_components"})
# Notes that mean bash runs something other than what the script appears to say: fix first.
BLOCKING = {"missing-line-continuation", "space-after-line-continuation",
            "several-launch-commands", "conditional-launch", "no-launch-command", "source-cycle"}
EP_MOE = "--sglang-enable-ep-moe"


class Refused(Exception):
    """The script is left untouched; `code` is the exit status (2: it cannot be read)."""

    def __init__(self, reason: str, code: int = 1):
        super().__init__(reason)
        self.reason, self.code = reason, code


class Disagrees(Refused):
    """A migrated script sets a layout flag again to another value than its topology file:
    what the pre-commit hook (`migrate --check`) exists for, so `--check` fails on it."""


class NotALaunch(Refused):
    """The file starts no training job (a model file it sources, a converter): `--check`
    reports it and does not count it as pending."""


@dataclass
class State:
    """A script on its way through the steps; nothing is written until all of them pass."""

    path: Path
    text: str
    env: dict[str, str]
    inline: bool = False
    files: dict[Path, str] = field(default_factory=dict)  # other files to write (the YAML)
    done: list[str] = field(default_factory=list)  # what the steps did, for the report
    kept: list[str] = field(default_factory=list)  # flags left in place, and why

    @property
    def file(self) -> str:
        return os.path.abspath(self.path)


@dataclass
class Reading:
    script: ScriptRead
    topology: Topology
    passthrough: list[str]
    beside: list = field(default_factory=list)  # problems elsewhere in the command


def elsewhere(p) -> bool:
    """A problem that does not concern the layout a migration moves: a flag of the command
    that is none of ours (unknown, another version's, deprecated upstream). It is reported
    beside the migration; the flag is carried over as it is written."""
    return p.code in ("unknown-flag", "flag-of-other-version", "unverified-flag",
                      "deprecated-flag") and bool(p.flags) and field_of(p.flags[0]) is None


def _without(argv: list[str], names: set[str]) -> list[str]:
    """argv less the flag words `names` (their values stay, read as passthrough words)."""
    return [w for w in argv if w.partition("=")[0] not in names]


# ---------------------------------------------------------------- reading


def renaming(stack: Stack) -> Stack:
    """`stack` that reads the spellings miles renamed (flags.RENAMED) as they used to read:
    no current stack defines them (check refuses them), and step 0001 writes them under
    their new names, which needs what they meant (--sglang-enable-ep-moe: the engine size)."""
    old = {n: ("a spelling step 0001 renames", Added((n,), not is_switch(n)))
           for n in RENAMED if stack.flag(n) is None}
    return replace(stack, added={**stack.added, **old}) if old else stack


def read(state: State) -> Reading:
    """The script as the steps left it, read like `check` does; the files the steps mean to
    write stand in for the ones on disk, and ${oc.env:VAR} reads what the script exports."""
    token = STAGED.set({**(STAGED.get() or {}), **state.files})  # the YAML as the steps mean it
    try:
        script = read_script(state.path, state.env, text=state.text)
    except ScriptReadError as e:
        raise Refused(f"cannot read it: {e}", 2) from None
    finally:
        STAGED.reset(token)
    try:
        require_launch(script)
    except NoTrainingLaunch as e:
        raise NotALaunch(str(e), 2) from None
    argv = script.flags()
    with tempfile.TemporaryDirectory() as tmp, gate.also(tmp):  # its stand-ins: ours
        for i, tok in enumerate(argv[:-1]):
            if tok == TOPOLOGY and Path(os.path.abspath(argv[i + 1])) in state.files:
                stand_in = Path(tmp, f"{i}.yaml")
                stand_in.write_text(state.files[Path(os.path.abspath(argv[i + 1]))])
                argv[i + 1] = str(stand_in)
        environ = script.site.environ()
        stack = renaming(for_launch(str(state.path), script.entry,
                                    [(fv.flag, fv.value) for fv in script.argv]))
        beside: list = []
        try:
            with using(stack):
                try:
                    got = read_flags(argv, environ)
                except TopologyError as e:
                    if not all(elsewhere(p) for p in e.problems):
                        raise
                    beside = list(e.problems)  # only flags that are not the layout's
                    got = read_flags(_without(argv, {p.flags[0] for p in beside}), environ)
        except TopologyError as e:
            shown = [p for p in e.problems if not elsewhere(p)]
            problems = "; ".join(f"[{p.code}] {p.message}" for p in shown)
            # a flag given with a value known only at run time is not in argv: a problem
            # about it is not proven (check reports it skipped), only not checkable here
            late = sorted({f for p in shown for f in p.flags} & {
                fv.flag for fv in script.argv if fv.value is None})
            if late and all(set(p.flags) & set(late) for p in shown):
                raise Refused(f"its topology cannot be checked: {', '.join(late)} has a value "
                              f"known only at run time ({problems}); pass it with --env "
                              "NAME=VALUE or write it literally first.") from None
            raise Refused(f"its topology is invalid: {problems} Fix it first "
                          f"(miles-topology check {state.path}).") from None
        except InputError as e:
            raise Refused(f"cannot read its topology file: {e}", 2) from None
    if getattr(environ, "dropped", None):  # the job's runtime env is unknown: so is the YAML
        raise Refused(f"its topology file reads {', '.join(environ.dropped)} from the "
                      f"environment, and {environ.why}; pass it literally first.")
    beside += [p for p in got.topology.warnings if elsewhere(p)]
    return Reading(script, got.topology, got.passthrough, beside)


def first_read(state: State) -> Reading:
    """Read the original and refuse what cannot be migrated safely as a whole."""
    r = read(state)
    s = r.script
    bad = [n for n in s.notes if n.code in BLOCKING]
    if bad:
        raise Refused("it does not read as one plain launch command: " + "; ".join(
            f"{n.location}: {n.message}" for n in bad) + ". Fix that first.")
    if s.site.branch is not None:
        raise Refused(f"the launch command at {s.site.command} runs inside the branch at "
                      f"{s.site.branch}; other branches may launch differently.")
    unknown = [u for u in s.unresolved if (u.flag is None or field_of(u.flag) in MOVES)
               and not layout_free(u, s, state)]
    values = [u for u in unknown if u.flag is not None]
    if values:
        shown = "; ".join(f"{u.flag} at {u.source}: {u.why}" for u in values)
        raise Refused(f"parallel-layout values known only at run time: {shown}. Pass "
                      "--env KEY=VALUE to resolve them.")
    if unknown:
        shown = "; ".join(f"{u.expression} at {u.source}: {u.why}" for u in unknown)
        raise Refused(f"words known only at run time reach the launch ({shown}); they may "
                      "hold layout flags, which would then override the moved ones or be "
                      "overridden by them. Write those words out in the script (or pass "
                      "--env KEY=VALUE for what they are built from), then migrate again.")
    return r


_ARRAY_SET = re.compile(r"^([A-Za-z_]\w*)\+?=\(\.\.\.\)$")


def layout_free(u, script: ScriptRead, state: State) -> bool:
    """Whether an unknown word list is known to hold no layout flag, so that moving the
    layout cannot change what it overrides: an array set only in branches decided at run
    time (``if [ -n "$WANDB_API_KEY" ]; then WANDB_ARGS=(...); else WANDB_ARGS=(); fi``),
    every assignment of it, in every file the read went through, of known words none of
    which is a layout flag (a quoted expansion only as the value of a flag before it)."""
    m = _ARRAY_SET.match(u.expression)
    if u.flag is not None or m is None or "'if'" not in u.why and "'case" not in u.why:
        return False
    name = m.group(1)
    files = {state.file, *(k[0] for k in script.uses),
             *(os.path.abspath(x.path) for x in (u.source, *(fv.source for fv in script.argv))
               if x.path != "<env>")}
    found = False
    for f in files:
        try:
            text = state.text if f == state.file else gate.read_text(f, errors="strict")
        except (OSError, UnicodeDecodeError, gate.Refused):
            return False
        if re.search(rf"\b(read|mapfile|readarray|declare|local|eval)\b[^\n]*\b{name}\b", text):
            return False
        try:
            nodes, _ = syntax.parse(text.encode())
        except syntax.ShellSyntaxError:
            return False
        for a in _assigns(nodes, name):
            if a.array is None or not _no_layout(a.array):
                return False
            found = True
    return found


def _assigns(x, name: str):
    if type(x) is syntax.Assign:
        if x.name == name:
            yield x
        return
    if isinstance(x, list | tuple):
        for y in x:
            yield from _assigns(y, name)
    elif hasattr(x, "__slots__") and type(x) not in (syntax.Lit, syntax.Param):
        for slot in x.__slots__:
            yield from _assigns(getattr(x, slot, None), name)


def _no_layout(words: list) -> bool:
    prev = None
    for w in words:
        lit = w.literal()
        if lit is not None:
            flag = lit.split("=", 1)[0]
            if flag == TOPOLOGY or field_of(flag) in MOVES:
                return False
        else:
            one = all(type(p) is syntax.Lit or p.quoted and type(p) is not syntax.Sub and
                      not (type(p) is syntax.Param and (p.name in "@*" or p.index in ("@", "*")))
                      for p in w.parts)
            if not one or prev is None or not prev.startswith("--") or is_switch(prev) or \
                    "=" in prev:
                return False
        prev = lit
    return True


def key(topo: Topology) -> dict:
    """What must not change: every field, except the two a step may legitimately change
    without changing the job (an implied etp made explicit; rollout GPUs under --colocate)."""
    d = {f: value(topo, f) for f in FIELDS}
    if topo.rollout.colocate:
        d["rollout_gpus"] = None
    return d


def verify(step: str, before: Reading, after: Reading) -> None:
    """Refuse unless the result launches the same job the original did."""
    a, b = key(before.topology), key(after.topology)
    changed = [f"{k} {a[k]} -> {b[k]}" for k in a if a[k] != b[k]]
    if changed:
        raise Refused(f"step {step} would change the topology ({', '.join(changed)}); "
                      "nothing was written.")
    if before.passthrough != after.passthrough:
        raise Refused(f"step {step} would change the flags that are not topology flags; "
                      "nothing was written.")
    sa, sb = before.script, after.script
    if (sa.launcher, sa.entry) != (sb.launcher, sb.entry):
        raise Refused(f"step {step} would change the launch command; nothing was written.")
    new = {n.code for n in sb.notes} - {n.code for n in sa.notes}
    if new:
        raise Refused(f"step {step} would make the script read differently ({', '.join(new)}); "
                      "nothing was written.")


# ---------------------------------------------------------------- locating words


def words(fv: FlagValue) -> list[Span | None]:
    """The words a flag occupies: the flag, and the one value word a non-switch consumes
    (later words after it are positional arguments, not its value); None for a word not
    pinned to text of its own (an unknown value: the flag's own word may be pinned)."""
    if fv.joined or is_switch(fv.flag):  # one word
        return [fv.span]
    if not fv.value_spans:
        return [fv.span] if fv.value is not None else [fv.span, None]
    return [fv.span, fv.value_spans[0]]


def where_not(fv: FlagValue, state: State, r: Reading, moving: bool = True) -> str | None:
    """Why this flag's words cannot be edited in place (None when they can). Moving them out
    also needs them unconditional and used by the launch command alone."""
    spans = words(fv)
    if any(s is None for s in spans):
        return "its text is not a word of its own (it comes from a variable that holds " \
               "several words, a command's output, or a text that eval or another shell runs)"
    other = next((s for s in spans if s.file != state.file), None)
    if other is not None:
        return f"it is written in {os.path.relpath(other.file, state.path.parent)}, a sourced " \
               "file this migration does not edit"
    if not moving:
        return None
    branch = next((s.branch for s in spans if s.branch is not None), None)
    if branch is not None:
        return f"it is set inside the if/case/loop/&& at {branch}; moving it out would make " \
               "it unconditional"
    site = r.script.site
    for s in spans:
        users = r.script.uses.get(s.key, frozenset()) - {site.command}
        if users:
            return "the same words also reach the command at " + \
                   ", ".join(sorted(str(u) for u in users))
    return None


def snippet(state: State, span: Span) -> str:
    return state.text[span.start:span.end]


def plain_var(text: str, prefix: str = "") -> str | None:
    """NAME when the word is exactly ``$NAME``/``${NAME}`` (quoted or not) after `prefix`."""
    w = syntax.parse_word(text)
    if w is None:
        return None
    parts = list(w.parts)
    if prefix:
        if not parts or type(parts[0]) is not syntax.Lit or not parts[0].text.startswith(prefix):
            return None
        rest = parts[0].text[len(prefix):]
        parts = ([syntax.Lit(rest, False, 0)] if rest else []) + parts[1:]
    if len(parts) != 1 or type(parts[0]) is not syntax.Param:
        return None
    p = parts[0]
    ok = p.op is None and p.index is None and not p.length and syntax.NAME.fullmatch(p.name)
    return p.name if ok else None


def literal(text: str) -> str | None:
    """The word's value when it has no expansion at all (quotes removed), else None."""
    w = syntax.parse_word(text)
    return w.literal() if w is not None else None


# ---------------------------------------------------------------- editing text

_SENT = "\0"  # marks deleted text until lines are tidied; scripts never hold NUL


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    text: str | None  # None: delete a word (and the blanks that separated it)


def delete(span: Span) -> Edit:
    return Edit(span.start, span.end, None)


def insert(at: int, text: str) -> Edit:
    return Edit(at, at, text)


def line_start(text: str, line: int) -> int:
    at = 0
    for _ in range(line - 1):
        at = text.find("\n", at) + 1
        if at == 0:
            return len(text)
    return at


def insert_lines(text: str, line: int, lines: list[str]) -> Edit:
    """New lines before `line`, indented like it. Refuses where that line continues the one
    above (a line put there would end the command)."""
    at = line_start(text, line)
    above = text[:at].rstrip("\n").rsplit("\n", 1)[-1] if at else ""
    if _continues(above):
        raise Refused(f"cannot put a line before line {line}: it continues line {line - 1}.")
    indent = re.match(r"[ \t]*", text[at:]).group()
    lines = list(dict.fromkeys(lines))  # a loop body run twice notes the same thing twice
    return insert(at, "".join(f"{indent}{x}{eol(text)}" for x in lines))


def eol(text: str) -> str:
    """The file's own line ending, for lines a step adds."""
    return "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"


def _continues(line: str) -> bool:
    body = line.rstrip(" \t\r")
    trail = len(body) - len(body.rstrip("\\"))
    return trail % 2 == 1 and not line.lstrip().startswith("#")


def apply(text: str, edits: list[Edit]) -> str:
    """Apply the edits; a deleted word takes the blanks that separated it along, and a line
    left empty (or holding only a line continuation) goes, without breaking a continuation.
    The same edit twice (a word in a loop body, met once per iteration) is made once."""
    edits = list(dict.fromkeys(edits))
    dels = _spread(text, sorted((e.start, e.end) for e in edits if e.text is None))
    puts = sorted(((e.start, e.end, e.text) for e in edits if e.text is not None),
                  key=lambda x: (x[0], x[1]))
    clash = any((s < b and a < e) if s < e else a < s < b for s, e, _ in puts for a, b in dels)
    if clash or any(s2 < e1 for (_, e1, _), (s2, _, _) in zip(puts, puts[1:])):
        raise Refused("internal: two edits overlap; nothing was written.")
    out, pos = [], 0
    events = [(s, 0, e, t) for s, e, t in puts] + [(a, 1, b, None) for a, b in dels]
    for s, kind, e, t in sorted(events, key=lambda x: (x[0], x[1])):
        out.append(text[pos:s])
        out.append(t if kind == 0 else _SENT)
        pos = e
    out.append(text[pos:])
    return _tidy("".join(out))


def _spread(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge words separated only by blanks, then take the blanks around each group."""
    groups: list[list[int]] = []
    for s, e in spans:
        if groups and (s <= groups[-1][1] or not text[groups[-1][1]:s].strip(" \t")):
            groups[-1][1] = max(groups[-1][1], e)
        else:
            groups.append([s, e])
    out = []
    for s, e in groups:
        j = s
        while j > 0 and text[j - 1] in " \t":
            j -= 1
        if j == s or j == 0 or text[j - 1] == "\n":  # "(--a" or first on its line: keep
            k = e                                     # what is before, take blanks after
            while k < len(text) and text[k] in " \t":
                k += 1
            out.append((s, k))
        else:
            out.append((j, e))
    return out


_OPENS = re.compile(r"^[^#]*[+]?=\([ \t]*\r?$")  # `NAME=(` / `NAME+=(` ending its line


def _tidy(text: str) -> str:
    """Drop the lines the deletions emptied; an array whose first lines went does not start
    with a blank line it did not have (the blank that separated them from the rest goes)."""
    lines = text.split("\n")
    out: list[str] = []
    opened = False  # the lines just dropped were the first of an array
    for line in lines:
        if _SENT not in line:
            if opened and not line.strip(" \t\r"):
                continue
            opened = False
            out.append(line)
            continue
        rest = line.replace(_SENT, "")
        body = rest.strip(" \t\r")
        if body not in ("", "\\"):
            opened = False
            out.append(rest)
            continue
        opened = opened or bool(out and _OPENS.match(out[-1]))
        if body == "" and out and _continues(out[-1]):  # it ended the command: so does above
            out[-1] = re.sub(r"[ \t]*\\(\r?)$", r"\1", out[-1])
    return "\n".join(out)


# ---------------------------------------------------------------- the migration marker

MARKER = re.compile(r"^# miles-topology-migration: (\d{4})[ \t]*\r?$", re.M)


def version(text: str) -> int:
    m = MARKER.search(text)
    return int(m.group(1)) if m else 0


def mark(text: str, step: str) -> str:
    line = f"# miles-topology-migration: {step}"
    m = MARKER.search(text)
    if m:
        return text[:m.start()] + line + ("\r" if m.group().endswith("\r") else "") + \
            text[m.end():]
    end = eol(text)
    if text.startswith("#!"):
        nl = text.find("\n")
        if nl < 0:
            return text + end + line + end
        return text[:nl + 1] + line + end + text[nl + 1:]
    return line + end + text
