"""0003: gather the parallel layout, scattered over arrays and lines, in one validated place.

Every layout flag (cluster, train grid, rollout engines, routing replay) moves out of the
script into ``NAME.topology.yaml`` beside it, which the launch reads through one
``--topology`` flag; with ``--inline`` they move into one ``TOPOLOGY_ARGS=(...)`` array
expanded into the launch instead. Model-shape flags (layers, heads, experts, top-k, layer
pattern), batch sizes and kernel options describe the model and the run, not the layout:
they stay where they are, usually a sourced model file.

A value the script takes from a variable keeps coming from it: the YAML reads it as
``${oc.env:VAR,value}`` and the script exports VAR. A value computed by an expression the
YAML cannot hold (``$((EP / 2))``, ``${PP:-1}``) is exported under a new name,
``TOPO_<FIELD>``, computed where the flag was.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..config import schema_comment
from ..flags import TOPOLOGY, flag_of, is_switch, parse_flags
from ..shell import FlagValue
from .common import (
    EP_MOE,
    LAYOUT,
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
SUMMARY = "move every parallel-layout flag into NAME.topology.yaml beside the script, read " \
          "by one --topology flag (or one TOPOLOGY_ARGS array with --inline)"

ARRAY = "TOPOLOGY_ARGS"


def yaml_path(state: State) -> Path:
    return state.path.with_name(state.path.name.removesuffix(".sh") + ".topology.yaml")


def migrate(state: State, r: Reading) -> None:
    moving = movable(state, r)
    if TOPOLOGY in r.script.values():
        if moving:
            raise Refused("it already reads a topology file (--topology) and still sets "
                          f"{', '.join(flag_of(f) for f in moving)} by flags; merge them by hand.")
        return
    if not moving:
        state.done.append("no layout flag to move")
        return
    site = r.script.site
    if site.entry is None or site.entry.file != state.file or site.statement is None \
            or site.statement.file != state.file:
        raise Refused("the launch command's entry script is not a plain word of the script "
                      "itself, so there is no place to add --topology.")
    seen, edits = set(), []
    for fvs in moving.values():
        for fv in fvs:
            for span in words(fv):
                if span.key not in seen:
                    seen.add(span.key)
                    edits.append(delete(span))
    (inline if state.inline else to_yaml)(state, r, moving, edits)
    state.text = apply(state.text, edits)


def movable(state: State, r: Reading) -> dict[str, list[FlagValue]]:
    """Layout field -> every flag that sets it, for the fields whose flags can all move."""
    found: dict[str, list[FlagValue]] = {}
    for fv in r.script.argv:
        if field_of(fv.flag) in LAYOUT:
            found.setdefault(field_of(fv.flag), []).append(fv)
    pinned = any(fv.flag == EP_MOE for fv in r.script.argv)  # it reads the engine size
    out = {}
    for name in LAYOUT:
        fvs = found.get(name)
        if not fvs:
            continue
        why = next((w for w in (where_not(fv, state, r) for fv in fvs) if w), None)
        if why is None and pinned and name in ("engine_size", "engine_ep"):
            why = f"{EP_MOE} is still there and takes the engine size from the flags"
        if why is None and not state.inline:
            kind, how = form(state, r, fvs[-1])
            why = how if kind == "no" else None
        if why:
            state.kept.append(f"{fvs[-1].flag} ({fvs[-1].source}) stays in the script: {why}")
            continue
        out[name] = fvs
    return out


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


def to_yaml(state: State, r: Reading, moving: dict, edits: list[Edit]) -> None:
    site = r.script.site
    path = yaml_path(state)
    argv: list[str] = []
    for fvs in moving.values():
        for fv in fvs:
            argv += [f"{fv.flag}={fv.value}"] if fv.joined else \
                [fv.flag] if is_switch(fv.flag) else [fv.flag, fv.tokens[0]]
    values = parse_flags(argv).fields
    lines, exports, derived = [], [], {}
    taken = set(site.variables) | set(re.findall(r"\w+", state.text))
    for name, fvs in moving.items():
        value = values[name]
        key, shown = name, ("true" if value else "false") if isinstance(value, bool) else value
        kind, how = form(state, r, fvs[-1])
        if kind == "var":
            shown = f"${{oc.env:{how},{shown}}}"
            if how not in site.exported and how not in exports:
                exports.append(how)
        elif kind == "expr":
            var = fresh(f"TOPO_{key.upper()}", taken)
            line = words(fvs[-1])[-1].stmt_line
            derived.setdefault(line, []).append(f"export {var}={how}  # read by {path.name}")
            shown = f"${{oc.env:{var},{shown}}}"
        lines.append(f"{key}: {shown}")
    head = [schema_comment(),
            f"# Parallel layout of {state.path.name}, which passes this file with --topology.",
            f"# Moved here from the script's flags by `miles-topology migrate` (step {ID})."]
    if exports or derived:
        head.append("# ${oc.env:VAR,value} reads VAR, which the script exports; value is what "
                    "it was when migrated.")
    text = "\n".join(head + lines) + "\n"
    if path.exists() and path.read_text() != text:
        raise Refused(f"{path} exists and is not what this migration would write; move it "
                      "away first.")
    state.files[Path(os.path.abspath(path))] = text
    ref, how_ref = reference(state, r, path.name)
    edits.append(insert(site.entry.end, f" --topology {ref}"))
    for line, extra in derived.items():
        edits.append(insert_lines(state.text, line, extra))
    if exports:
        edits.append(insert_lines(state.text, site.statement.line,
                                  [f"export {' '.join(exports)}  # read by {path.name}"]))
    state.done.append(f"moved {', '.join(flag_of(f) for f in moving)} to {path.name}, "
                      f"read through --topology {ref}{how_ref}")
    if exports:
        state.done.append(f"exported {', '.join(exports)} for the YAML's ${{oc.env:...}}")
    for extra in derived.values():
        state.done.extend(f"computed {x.split('  #')[0].removeprefix('export ')} where the flag "
                          "was" for x in extra)


def inline(state: State, r: Reading, moving: dict, edits: list[Edit]) -> None:
    site = r.script.site
    if ARRAY in site.variables or re.search(rf"\b{ARRAY}\b", state.text):
        raise Refused(f"{ARRAY} is already used in the script.")
    body = ["   " + " ".join(snippet(state, s) for s in words(fvs[-1]))
            for fvs in moving.values()]
    edits.append(insert_lines(state.text, site.statement.line, [f"{ARRAY}=("] + body + [")"]))
    edits.append(insert(site.entry.end, f' "${{{ARRAY}[@]}}"'))
    state.done.append(f"moved {', '.join(flag_of(f) for f in moving)} into {ARRAY}")


def reference(state: State, r: Reading, name: str) -> tuple[str, str]:
    """How the launch names the YAML: through the script's own folder variable when it has
    one, else through the folder of ${BASH_SOURCE[0]}, so it works from any directory."""
    here = os.path.dirname(state.file)
    dirs = sorted((k for k, v in r.script.site.variables.items()
                   if v and os.path.normpath(v) == here and re.fullmatch(r"[A-Za-z_]\w*", k)),
                  key=lambda k: (k != "SCRIPT_DIR", k))
    if dirs:
        return f'"${{{dirs[0]}}}/{name}"', ""
    return (f'"$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)/{name}"',
            " (the script keeps no variable with its own folder, so the path is taken from "
            "the script's location; the YAML must stay beside it)")


def fresh(name: str, taken: set[str]) -> str:
    k, out = 1, name
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out
