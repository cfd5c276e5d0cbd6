"""0003: gather the parallel layout, scattered over arrays and lines, in one validated place.

Every parallel-layout flag (cluster, train grid, rollout engines: `common.MOVES`) moves out of
the script into ``NAME.topology.yaml`` beside it, one field per line with a comment naming its
flag. Upstream miles and slime ``train.py`` have no ``--topology`` flag, so the script expands
the YAML into flags when it runs, through the checker (see yamlflags.py)::

    TOPOLOGY_FLAGS="$(miles-topology flags "${SCRIPT_DIR}/run.topology.yaml")" || exit 1
    eval "TOPOLOGY_ARGS=(${TOPOLOGY_FLAGS})"
    ... python3 train.py "${TOPOLOGY_ARGS[@]}" ...

An invalid layout stops the script there, before ``ray job submit``. A launch of our own
launcher (``python -m miles.train``), which reads the file itself, gets ``--topology FILE``.
With ``--inline`` the flags move into one ``TOPOLOGY_ARGS=(...)`` array instead. Model shape,
batch sizes, the algorithm (``--advantage-estimator``, routing replay) and kernel options stay.

A value the script takes from a variable keeps coming from it: the YAML reads it as
``${oc.env:VAR,value}`` and the script exports VAR (``miles-topology flags`` runs in the
script's shell, so it sees it, also under ``ray job submit``). A value computed by an
expression (``$((EP / 2))``, ``${PP:-1}``) is exported under a new name, ``TOPO_<FIELD>``,
computed where the flag was. For ``--topology`` under ``ray job submit`` those variables are
also passed with ``--runtime-env-json`` (the entrypoint does not inherit the script's exports).

The YAML is named through a folder variable made absolute before any ``cd`` (the script's
own ``SCRIPT_DIR``, or ``MILES_TOPOLOGY_DIR`` added on its first line). A comment after a
moved flag moves with it into the YAML; one that shares its line with words that stay gets a
note. A migrated script given a layout flag again is migrated again: the flag joins the YAML.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..reading.flags import TOPOLOGY, flag_of, is_switch, parse_flags
from ..reading.sources import schema_comment
from ..shell import FlagValue
from .common import (
    EP_MOE,
    MOVES,
    Disagrees,
    Edit,
    Reading,
    Refused,
    State,
    apply,
    delete,
    field_of,
    insert,
    insert_lines,
    literal,
    plain_var,
    snippet,
    where_not,
    words,
)

ID = "0003"
SUMMARY = "move every parallel-layout flag into NAME.topology.yaml beside the script, " \
          "expanded into flags by `miles-topology flags` (or one TOPOLOGY_ARGS array)"

ARRAY = "TOPOLOGY_ARGS"
FLAGS_VAR = "TOPOLOGY_FLAGS"
OURS = "miles.train"  # our launcher reads --topology FILE itself (miles/train.py)


def yaml_path(state: State) -> Path:
    return state.path.with_name(state.path.name.removesuffix(".sh") + ".topology.yaml")


def migrate(state: State, r: Reading) -> None:
    existing = current_yaml(state, r)
    if existing is None and TOPOLOGY in r.script.values():
        if movable(state, r, None):
            raise Refused("it already reads a topology file (--topology) and still sets "
                          "layout flags; merge them into that file by hand.")
        return
    moving = movable(state, r, existing)
    if not moving:
        if existing is None:
            state.done.append("no layout flag to move")
        return
    site = r.script.site
    if site.entry is None or site.entry.file != state.file or site.statement is None \
            or site.statement.file != state.file:
        raise Refused("the launch command's entry script is not a plain word of the script "
                      "itself, so there is no place to add the topology flags.")
    seen, edits = set(), []
    for fvs in moving.values():
        for fv in fvs:
            for span in words(fv):
                if span.key not in seen:
                    seen.add(span.key)
                    edits.append(delete(span))
    notes = comments(state, moving, edits, "TOPOLOGY_ARGS" if state.inline and existing is None
                     else yaml_path(state).name)
    if existing is not None:
        merge(state, r, moving, edits, notes, existing)
    elif state.inline:
        inline(state, r, moving, edits, notes)
    else:
        to_yaml(state, r, moving, edits, notes)
    state.text = apply(state.text, edits)


def current_yaml(state: State, r: Reading) -> tuple[Path, str, str] | None:
    """(path, text, form) of the YAML this script already reads, written by this step:
    form "flags" ($(miles-topology flags FILE)) or "topology" (--topology FILE)."""
    path = Path(os.path.abspath(yaml_path(state)))
    body = state.files.get(path)
    if body is None and path.exists():
        from ..reading import gate

        try:  # the YAML beside the script, through the gate
            body = gate.read_text(path, limit=gate.AST_LIMIT, errors="strict")
        except gate.Refused as e:  # its reason names the path
            raise Refused(f"{e}; nothing was written.") from None
        except UnicodeDecodeError as e:
            raise Refused(f"{path}: {e}; nothing was written.") from None
    if body is None:
        return None
    if re.search(rf"^[^#\n]*\bmiles-topology flags\b[^\n]*/{re.escape(path.name)}\b",
                 state.text, re.M):
        return path, body, "flags"
    named = [fv.value for fv in r.script.values().get(TOPOLOGY, [])]
    if any(v and os.path.abspath(v) == str(path) for v in named):
        return path, body, "topology"
    return None


def movable(state: State, r: Reading, existing) -> dict[str, list[FlagValue]]:
    """Layout field -> every flag that sets it, for the fields whose flags can all move.
    Refuses when a flag whose value comes from a variable cannot move (the layout would be
    half in the script, half in the YAML)."""
    found: dict[str, list[FlagValue]] = {}
    ours = own_array(state)
    for fv in r.script.argv:
        if field_of(fv.flag) in MOVES:
            if existing is not None and fv.span is None:  # expanded from the YAML itself
                continue
            if ours and fv.span is not None and ours[0] <= fv.span.start < ours[1]:
                continue  # already in the TOPOLOGY_ARGS array of --inline
            found.setdefault(field_of(fv.flag), []).append(fv)
    pinned = any(fv.flag == EP_MOE for fv in r.script.argv)  # it reads the engine size
    ours = topology_form(r, existing) == "topology"
    out = {}
    for name in MOVES:
        fvs = found.get(name)
        if not fvs:
            continue
        why = next((w for w in (where_not(fv, state, r) for fv in fvs) if w), None)
        if why is None and pinned and name in ("engine_size", "engine_ep"):
            why = f"{EP_MOE} is still there and takes the engine size from the flags"
        if why is None and not state.inline:
            kind, how = form(state, r, fvs[-1])
            why = how if kind == "no" else None
            if kind in ("var", "expr") and ours and ray_env_fixed(state, r):
                why = ("its value comes from the script's variables, which the entrypoint of "
                       "ray job submit does not inherit, and the command already sets its own "
                       "--runtime-env, which this migration does not edit")
        if why and any(from_variable(state, fv) for fv in fvs):
            raise Refused(f"{fvs[-1].flag} ({fvs[-1].source}) takes its value from the "
                          f"script's variables and cannot move with them: {why}. Write it "
                          "where the other layout flags are (or pass --env NAME=VALUE), "
                          "then migrate again.")
        if why:
            state.kept.append(f"{fvs[-1].flag} ({fvs[-1].source}) stays in the script: {why}")
            continue
        out[name] = fvs
    return out


def from_variable(state: State, fv: FlagValue) -> bool:
    """Whether the script's own text writes this flag's value with an expansion ($TP)."""
    last = words(fv)[-1]
    if last is None or last.file != state.file or (last is fv.span and not fv.joined):
        return False
    return literal(snippet(state, last)) is None


def own_array(state: State) -> tuple[int, int] | None:
    """Where the ``TOPOLOGY_ARGS=(...)`` array that --inline wrote is (its own lines)."""
    m = re.search(rf"^[ \t]*{ARRAY}=\(\r?\n.*?^[ \t]*\)", state.text, re.M | re.S)
    return (m.start(), m.end()) if m else None


def topology_form(r: Reading, existing) -> str:
    """"topology" for our launcher (it reads --topology FILE), else "flags"."""
    if existing is not None:
        return existing[2]
    return "topology" if r.script.entry == OURS else "flags"


def form(state: State, r: Reading, fv: FlagValue) -> tuple[str, str | None]:
    """How the YAML holds the value: ("lit", None), ("var", NAME), ("expr", bash text), or
    ("no", why)."""
    spans = words(fv)
    if len(spans) == 1 and not fv.joined:  # a switch
        return "lit", None
    text = snippet(state, spans[-1])
    if fv.joined:  # --flag=VALUE in one word
        if literal(text) is not None:
            return "lit", None
        name = plain_var(text, f"{fv.flag}=")
        if name and r.script.site.variables.get(name) == fv.tokens[0]:
            return "var", name
        return "no", f"it is written {text} with an expansion inside; write {fv.flag} VALUE"
    if literal(text) is not None:
        return "lit", None
    name = plain_var(text)
    if name and r.script.site.variables.get(name) == fv.tokens[0]:
        return "var", name
    return "expr", text


def comments(state: State, moving: dict, edits: list[Edit], where: str) -> dict[str, str]:
    """A comment after a moved flag: it moves along (field -> its text, the comment taken
    out) when nothing stays on its line, else it stays with a note saying where the flag
    went (an edit added to `edits`)."""
    gone = [(e.start, e.end) for e in edits if e.text is None]
    out: dict[str, str] = {}
    noted: set[int] = set()
    for name, fvs in moving.items():
        last = words(fvs[-1])[-1]
        end = state.text.find("\n", last.end)
        end = len(state.text) if end < 0 else end
        m = re.match(r"[ \t]+(#[^\r\n]*)", state.text[last.end:end])
        if m is None:
            continue
        at = last.end + m.start(1)
        start = state.text.rfind("\n", 0, last.start) + 1
        rest = "".join(c for i, c in enumerate(state.text[start:at], start)
                       if not any(a <= i < b for a, b in gone))
        text = m.group(1).lstrip("#").strip()
        if not rest.strip(" \t"):
            edits.append(delete_text(at, last.end + m.end(1)))
            out[name] = text
        elif at not in noted:
            noted.add(at)
            flags = ", ".join(flag_of(n) for n, f in moving.items()
                              if words(f[-1])[-1].line == last.line)
            edits.append(insert(last.end + m.end(1), f" (miles-topology {ID}: {flags} moved "
                                                     f"to {where})"))
    above(state, moving, edits, where, out)
    return out


def above(state: State, moving: dict, edits: list[Edit], where: str, out: dict) -> None:
    """Comment lines heading a group of lines (up to a blank line, a comment or the
    array's end) whose flags all move: they move along, with the group's first field; when
    only some of the group's lines go, the comment stays with a note naming what moved."""
    gone = [(e.start, e.end) for e in edits if e.text is None]
    lines = state.text.split("\n")
    starts = [0]
    for x in lines[:-1]:
        starts.append(starts[-1] + len(x) + 1)
    fields_at: dict[int, list[str]] = {}
    for name, fvs in moving.items():
        for fv in fvs:
            for span in words(fv):
                fields_at.setdefault(span.line, []).append(name)

    def emptied(k: int) -> bool:  # 0-based line index
        left = "".join(c for i, c in enumerate(lines[k], starts[k])
                       if not any(a <= i < b for a, b in gone))
        return (k + 1) in fields_at and left.strip(" \t\r\\") == ""

    def comment(k: int) -> bool:
        return lines[k].lstrip().startswith("#") and not (k == 0 and lines[k].startswith("#!"))

    k = 0
    while k < len(lines):
        if not comment(k):
            k += 1
            continue
        head = k
        while k < len(lines) and comment(k):
            k += 1
        group = []
        while k < len(lines) and lines[k].strip(" \t\r") not in ("", ")") and not comment(k):
            group.append(k)
            k += 1
        moved = [j for j in group if emptied(j)]
        if not moved or not group or not emptied(group[0]):
            continue
        names = list(dict.fromkeys(n for j in moved for n in fields_at[j + 1]))
        if len(moved) == len(group):
            text = " ".join(lines[j].strip(" \t\r").lstrip("#").strip()
                            for j in range(head, group[0]))
            out[names[0]] = f"{text}; {out[names[0]]}" if out.get(names[0]) else text
            edits.append(Edit(starts[head], starts[group[0]] - 1, None))
        else:
            end = starts[group[0]] - 1 - (1 if lines[group[0] - 1].endswith("\r") else 0)
            flags = ", ".join(flag_of(n) for n in names)
            edits.append(insert(end, f" (miles-topology {ID}: {flags} moved to {where})"))


def delete_text(start: int, end: int) -> Edit:
    return Edit(start, end, None)


def moved_values(moving: dict) -> dict:
    """The values the moving flags give their fields, as the launch reads them."""
    argv: list[str] = []
    for fvs in moving.values():
        for fv in fvs:
            argv += [f"{fv.flag}={fv.value}"] if fv.joined else \
                [fv.flag] if is_switch(fv.flag) else [fv.flag, *fv.tokens]
    return parse_flags(argv).fields


def entries(state: State, r: Reading, moving: dict, path: Path, notes: dict):
    """(field, value, comment) for the YAML, the names to export, and the lines computing
    derived values (line -> lines)."""
    site = r.script.site
    values = moved_values(moving)
    out, exports, derived = [], [], {}
    taken = set(site.variables) | set(re.findall(r"\w+", state.text))
    for name, fvs in moving.items():
        value = values[name]
        kind, how = form(state, r, fvs[-1])
        if kind == "var":
            value = f"${{oc.env:{how},{value}}}"
            if how not in site.exported and how not in exports:
                exports.append(how)
        elif kind == "expr":
            var = fresh(f"TOPO_{name.upper()}", taken)
            line = words(fvs[-1])[-1].stmt_line
            derived.setdefault(line, []).append(f"export {var}={how}  # read by {path.name}")
            value = f"${{oc.env:{var},{value}}}"
        comment = flag_of(name) + (f"; {notes[name]}" if notes.get(name) else "")
        out.append((name, value, comment))
    return out, exports, derived


def yaml_lines(fields: list) -> list[str]:
    """`field: value  # --flag` lines, each value written by the YAML library (so that it
    is quoted where YAML needs it, e.g. "cfg: a.yaml")."""
    import yaml

    out = []
    for name, value, comment in fields:
        shown = yaml.safe_dump(list(value) if isinstance(value, tuple) else value,
                               default_flow_style=True, width=1 << 30, allow_unicode=True)
        body = f"{name}: " + shown.removesuffix("\n").removesuffix("\n...")
        if "\n" in body:
            out += [f"# {comment}", body]
        else:
            out.append(f"{body}  # {comment}")
    return out


def to_yaml(state: State, r: Reading, moving: dict, edits: list[Edit], notes: dict) -> None:
    site = r.script.site
    path = yaml_path(state)
    if re.search(r"[\x00-\x1f\x7f]", path.name):  # a newline would end a comment line of both
        raise Refused(f"its name holds a control character ({path.name}), and the topology "
                      "file's name goes into the YAML's and the script's comments; rename it, "
                      "or use --inline; nothing was written.")
    ours = topology_form(r, None) == "topology"
    fields, exports, derived = entries(state, r, moving, path, notes)
    how = "passes this file with --topology" if ours else \
        "expands this file into train.py flags with `miles-topology flags`"
    head = [schema_comment(), f"# Parallel layout of {state.path.name}, which {how}.",
            f"# Moved here from the script's flags by `miles-topology migrate` (step {ID}); "
            "each line names its flag."]
    if exports or derived:
        head.append("# ${oc.env:VAR,value} reads VAR, which the script exports; value is what "
                    "it was when migrated.")
    text = "\n".join(head + yaml_lines(fields)) + "\n"
    if path.exists() and path.read_text() != text:
        raise Refused(f"{path} exists and is not what this migration would write; move it "
                      "away first.")
    state.files[Path(os.path.abspath(path))] = text
    if not ours:
        alone(state, r, path, text)
    ref, how_ref, top = reference(state, r, path.name)
    if top:
        edits.append(insert_lines(state.text, 2 if state.text.startswith("#!") else 1, top))
    launch_lines = [f"export {' '.join(exports)}  # read by {path.name}"] if exports else []
    if ours:
        edits.append(insert(site.entry.end, f" --topology {ref}"))
        read_env = list(dict.fromkeys(re.findall(r"\$\{oc\.env:(\w+),", text)))
        if read_env and r.script.launcher == "ray job submit":
            at, option = runtime_env(state, r, read_env)
            edits.append(insert(at, option))
            state.done.append(f"passed {', '.join(read_env)} to the job with "
                              "--runtime-env-json (the entrypoint of ray job submit does not "
                              "inherit the script's exports)")
        said = f"read through --topology {ref}{how_ref}"
    else:
        taken = set(site.variables) | set(re.findall(r"\w+", state.text))
        flags_var, array = fresh(FLAGS_VAR, taken), fresh(ARRAY, taken)
        launch_lines += [f'{flags_var}="$(miles-topology flags {ref})" || exit 1  # the '
                         f"layout, checked (exit 1 when invalid)",
                         f'eval "{array}=(${{{flags_var}}})"  # its words, quotes removed']
        edits.append(insert(site.entry.end, f' "${{{array}[@]}}"'))
        said = f"expanded into flags by `miles-topology flags {ref}`{how_ref}"
    for line, extra in derived.items():
        edits.append(insert_lines(state.text, line, extra))
    if launch_lines:
        edits.append(insert_lines(state.text, site.statement.line, launch_lines))
    state.done.append(f"moved {', '.join(flag_of(f) for f in moving)} to {path.name}, {said}")
    if exports:
        state.done.append(f"exported {', '.join(exports)} for the YAML's ${{oc.env:...}}")
    for extra in derived.values():
        state.done.extend(f"computed {x.split('  #')[0].removeprefix('export ')} where the flag "
                          "was" for x in extra)


def alone(state: State, r: Reading, path: Path, text: str) -> None:
    """`miles-topology flags` validates the YAML on its own when the script runs: refuse a
    YAML that is valid only with layout flags that stay in the script."""
    from ..model.errors import InputError, TopologyError
    from ..reading.yamlflags import STAGED, load, validate

    token = STAGED.set({Path(os.path.abspath(path)): text})
    try:
        validate(load(path, r.script.site.environ()))
    except TopologyError as e:
        kept = "; ".join(state.kept) or "flags that stay in the script"
        raise Refused(f"the layout that can move is not valid on its own "
                      f"([{e.problems[0].code}] {e.problems[0].message}), and `miles-topology "
                      f"flags` would stop the script; it needs {kept}. Move those by hand "
                      "first (or use --inline).") from None
    except InputError as e:
        raise Refused(f"the topology file it would write does not read back: {e}", 2) \
            from None
    finally:
        STAGED.reset(token)


def merge(state: State, r: Reading, moving: dict, edits: list[Edit], notes: dict,
          existing: tuple[Path, str, str]) -> None:
    """A migrated script given layout flags again: they join its YAML (appended: the lines
    already there are kept byte for byte); one the YAML sets to another value is refused."""
    path, body, how = existing
    if how == "topology" and r.script.launcher == "ray job submit":
        raise Refused(f"it reads {path.name} with --topology under ray job submit and sets "
                      f"{', '.join(flag_of(f) for f in moving)} again; move them into "
                      f"{path.name} by hand.")
    fields, exports, derived = entries(state, r, moving, path, notes)
    have, given = load_fields_of(path, body, r), moved_values(moving)
    new = []
    for name, value, comment in fields:
        if name not in have:
            new.append((name, value, comment))
        elif str(value).startswith("${"):
            raise Refused(f"{flag_of(name)} is set again in the script, and {path.name} sets "
                          f"{name} too; keep one of them (edit {path.name}), then migrate "
                          "again.")
        elif str(have[name]) != str(given[name]):
            fv = moving[name][-1]
            at = next((i for i, x in enumerate(body.split("\n"), 1)
                       if re.match(rf"\s*{re.escape(name)}\s*:", x)), 0)
            raise Disagrees(
                f"{fv.flag} {given[name]} at {fv.source} disagrees with its topology file: "
                f"{name}: {have[name]} at {path.name}:{at}; keep one of them (edit "
                f"{path.name}, or drop {fv.flag} from the script), then migrate again.")
    end = "\r\n" if "\r\n" in body else "\n"
    text = body if body.endswith("\n") or not body else body + end
    text += end.join(yaml_lines(new)) + end if new else ""
    state.files[path] = text
    line = next((i for i, x in enumerate(state.text.split("\n"), 1)
                 if re.search(r"\bmiles-topology flags\b", x) and not x.lstrip().startswith("#")),
                r.script.site.statement.line)
    for at, extra in derived.items():
        edits.append(insert_lines(state.text, at, extra))
    if exports:
        edits.append(insert_lines(state.text, line,
                                  [f"export {' '.join(exports)}  # read by {path.name}"]))
    state.done.append(f"moved {', '.join(flag_of(f) for f in moving)}, given again, to "
                      f"{path.name}")


def load_fields_of(path: Path, body: str, r: Reading) -> dict:
    from ..reading.yamlflags import STAGED, load

    token = STAGED.set({path: body})
    try:
        return load(path, r.script.site.environ())
    finally:
        STAGED.reset(token)


def inline(state: State, r: Reading, moving: dict, edits: list[Edit], notes: dict) -> None:
    site = r.script.site
    body_of = own_array(state)
    if body_of is not None:  # flags given again next to the array: they join it
        end = state.text.count("\n", 0, body_of[1]) + 1
        body = ["   " + " ".join(snippet(state, s) for s in words(fvs[-1]))
                for fvs in moving.values()]
        edits.append(insert_lines(state.text, end, body))
        state.done.append(f"moved {', '.join(flag_of(f) for f in moving)}, given again, "
                          f"into {ARRAY}")
        return
    if ARRAY in site.variables or re.search(rf"\b{ARRAY}\b", state.text):
        raise Refused(f"{ARRAY} is already used in the script.")
    body = ["   " + " ".join(snippet(state, s) for s in words(fvs[-1])) +
            (f"  # {notes[name]}" if notes.get(name) else "") for name, fvs in moving.items()]
    edits.append(insert_lines(state.text, site.statement.line, [f"{ARRAY}=("] + body + [")"]))
    edits.append(insert(site.entry.end, f' "${{{ARRAY}[@]}}"'))
    state.done.append(f"moved {', '.join(flag_of(f) for f in moving)} into {ARRAY}")


def reference(state: State, r: Reading, name: str) -> tuple[str, str, list[str]]:
    """How the launch names the YAML so that it is found from any directory, also after a
    ``cd`` in the script: through the script's own folder variable when it is made absolute
    before any cd, else through a variable this step adds on the script's first line. Returns
    the reference, a note for the report, and the lines to add at the top."""
    here = os.path.dirname(state.file)
    quoted = re.sub(r'([\\$`"])', r"\\\1", name)  # literal inside "...": `run$(x).sh`
    dirs = sorted((k for k, v in r.script.site.variables.items()
                   if v and os.path.normpath(v) == here and re.fullmatch(r"[A-Za-z_]\w*", k)
                   and set_before_cd(state.text, k)),
                  key=lambda k: (k != "SCRIPT_DIR", k))
    if dirs:
        return f'"${{{dirs[0]}}}/{quoted}"', "", []
    var = fresh("MILES_TOPOLOGY_DIR", set(r.script.site.variables) |
                set(re.findall(r"\w+", state.text)))
    line = f'{var}="$(cd -- "$(dirname -- "${{BASH_SOURCE[0]}}")" &>/dev/null && pwd)"' \
        f"  # this script's folder, where {name} is"
    return (f'"${{{var}}}/{quoted}"', f" (${var}, this script's folder, is set on its first line, "
            "before any cd; the YAML must stay beside the script)", [line])


_CD = re.compile(r"^[ \t]*(cd|pushd|popd)\b|(&&|\|\||;|\bthen|\bdo)[ \t]*(cd|pushd|popd)\b",
                 re.M)


def set_before_cd(text: str, name: str) -> bool:
    """Whether every assignment of `name` in the script makes it absolute (pwd, realpath,
    readlink -f) and comes before the first cd/pushd/popd: then it names the script's folder
    wherever the launch runs. (A bare $(dirname "$0") is relative to the first directory.)"""
    sets = list(re.finditer(rf"^[ \t]*(?:(?:export|readonly|declare|local)(?:[ \t]+-\w+)*"
                            rf"[ \t]+)?{name}=(.*)$", text, re.M))
    if not sets or not all(re.search(r"\bpwd\b|\brealpath\b|readlink -[fem]", m.group(1))
                           for m in sets):
        return False
    cd = _CD.search(text)
    return cd is None or all(m.start() < cd.start() for m in sets)


def ray_env_fixed(state: State, r: Reading) -> bool:
    """Whether a ray job submit launch sets its own runtime env (which holds everything its
    entrypoint gets from outside the cluster), or could through an expansion."""
    site = r.script.site
    if r.script.launcher != "ray job submit":
        return False
    if site.statement is None or site.entry is None or site.statement.file != state.file:
        return True
    head = state.text[site.statement.start:site.entry.start]
    return "--runtime-env" in head or re.search(r"\bsubmit\b", head) is None


def runtime_env(state: State, r: Reading, names: list[str]) -> tuple[int, str]:
    """Where and what to add to `ray job submit` so its entrypoint gets `names`."""
    site = r.script.site
    if ray_env_fixed(state, r):
        raise Refused("internal: the ray job submit command already sets a runtime env; "
                      "nothing was written.")
    head = state.text[site.statement.start:site.entry.start]
    at = site.statement.start + re.search(r"\bsubmit\b", head).end()
    pairs = ", ".join(f'\\"{n}\\": \\"${{{n}}}\\"' for n in names)
    return at, f' --runtime-env-json="{{\\"env_vars\\": {{{pairs}}}}}"'


def fresh(name: str, taken: set[str]) -> str:
    k, out = 1, name
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out
