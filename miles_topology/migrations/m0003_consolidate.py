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
``TOPO_<FIELD>``, computed where the flag was. Under ``ray job submit`` exports do not reach
train.py (the job's entrypoint gets the cluster's environment plus its runtime env), so those
variables are also passed with ``--runtime-env-json``; where the command already sets its own
runtime env, such values stay in the script.

The launch names the YAML through a folder variable made absolute before any ``cd`` (the
script's own ``SCRIPT_DIR``, or ``MILES_TOPOLOGY_DIR`` added on its first line), so that it
is found wherever the script is run from.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..flags import TOPOLOGY, flag_of, is_switch, parse_flags
from ..shell import FlagValue
from ..sources import schema_comment
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
            if kind in ("var", "expr") and ray_env_fixed(state, r):
                why = ("its value comes from the script's variables, which the entrypoint of "
                       "ray job submit does not inherit, and the command already sets its own "
                       "--runtime-env, which this migration does not edit")
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
    ref, how_ref, top = reference(state, r, path.name)
    if top:
        edits.append(insert_lines(state.text, 2 if state.text.startswith("#!") else 1, top))
    edits.append(insert(site.entry.end, f" --topology {ref}"))
    read_env = list(dict.fromkeys(re.findall(r"\$\{oc\.env:(\w+),", "\n".join(lines))))
    if read_env and r.script.launcher == "ray job submit":
        at, option = runtime_env(state, r, read_env)
        edits.append(insert(at, option))
        state.done.append(f"passed {', '.join(read_env)} to the job with --runtime-env-json "
                          "(the entrypoint of ray job submit does not inherit the script's "
                          "exports)")
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


def reference(state: State, r: Reading, name: str) -> tuple[str, str, list[str]]:
    """How the launch names the YAML so that it is found from any directory, also after a
    ``cd`` in the script: through the script's own folder variable when it is made absolute
    before any cd, else through a variable this step adds on the script's first line. Returns
    the reference, a note for the report, and the lines to add at the top."""
    here = os.path.dirname(state.file)
    dirs = sorted((k for k, v in r.script.site.variables.items()
                   if v and os.path.normpath(v) == here and re.fullmatch(r"[A-Za-z_]\w*", k)
                   and set_before_cd(state.text, k)),
                  key=lambda k: (k != "SCRIPT_DIR", k))
    if dirs:
        return f'"${{{dirs[0]}}}/{name}"', "", []
    var = fresh("MILES_TOPOLOGY_DIR", set(r.script.site.variables) |
                set(re.findall(r"\w+", state.text)))
    line = f'{var}="$(cd -- "$(dirname -- "${{BASH_SOURCE[0]}}")" &>/dev/null && pwd)"' \
        f"  # read by --topology"
    return (f'"${{{var}}}/{name}"', f" (${var}, this script's folder, is set on its first line, "
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
