"""A topology YAML as the train.py flags it stands for: what `miles-topology flags FILE.yaml`
prints, and what the script reader takes its output to be.

Upstream miles and slime train.py have no ``--topology`` flag (their argparse refuses it), so
a migrated launch script keeps its layout in the YAML and expands it into flags when it runs:

    TOPOLOGY_FLAGS="$(miles-topology flags "${SCRIPT_DIR}/run.topology.yaml")" || exit 1
    eval "TOPOLOGY_ARGS=(${TOPOLOGY_FLAGS})"

The output is one shell-quoted word per line (``eval`` removes the quotes, so a value with a
blank or a glob character stays one word). A plain assignment carries the command's exit
status (an array assignment ``A=($(...))`` does only in some bash versions), so an invalid
topology stops the script before ``ray job submit``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from ..model.errors import InputError
from . import gate
from .sources import ENV_REF, load_fields

COMMAND = ("miles-topology", "flags")
# Files a migration is about to write, read in place of the disk (absolute path -> text), so
# that the reader sees the result before anything is written.
STAGED = gate.STAGED  # one variable: the gate lets these texts through as the tool's own


def staged(path: Path) -> str | None:
    return (STAGED.get() or {}).get(Path(os.path.abspath(path)))


def flag_words(fields: Mapping) -> list[str]:
    """The flags that set these fields, in the fields' order, as train.py reads them (a
    switch is given when on; off is argparse's default, so it is left out)."""
    from .flags import flag_of, table

    out: list[str] = []
    for name, value in fields.items():
        flag = flag_of(name)
        spec = table().get(flag)
        if spec is None:
            raise InputError(f"field {name} has no train.py flag; only the launcher's "
                             "--topology reads it (python -m miles.train)")
        if spec.kind == "switch":
            on = value == spec.values[1] if spec.values else value is True
            off = value == spec.values[0] if spec.values else value is False
            if not (on or off):
                raise InputError(f"{name}: {value!r} is not a value of {flag}")
            out += [flag] if on else []
        elif spec.kind == "list":
            out += [flag, *map(str, value if isinstance(value, list | tuple) else [value])]
        elif isinstance(value, bool) or value is None or isinstance(value, dict | list):
            raise InputError(f"{name}: {value!r} is not a value {flag} takes")
        else:
            out += [flag, str(value)]
    return out


def load(path: str | Path, env: Mapping[str, str] | None = None) -> dict:
    """The YAML's fields, a staged text in place of the file; `env` resolves ${oc.env:...}."""
    p = Path(path)
    body = staged(p)
    if body is None:
        return load_fields(p, env=env)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        stand_in = Path(tmp, p.name)
        stand_in.write_text(body)
        return load_fields(stand_in, env=env)


def validate(fields: Mapping) -> None:
    """Raise TopologyError unless the layout is valid on its own (model facts live in the
    script; `miles-topology check SCRIPT` judges the whole launch)."""
    from ..model.topology import Topology

    Topology(**fields)


def text(path: str | Path, env: Mapping[str, str] | None = None, check: bool = True,
         sep: str = "\n") -> str:
    """What `miles-topology flags FILE` prints: one shell-quoted word per line. The script
    reader asks with `check` off (the launch's check judges the layout with the script's
    other flags, and reports the problems the command would stop on) and `sep` " " (one
    line, so that the words point at the line that reads them)."""
    fields = load(path, env)
    if check:
        validate(fields)
    return "".join(shlex.quote(w) + sep for w in flag_words(fields)).rstrip(" ")


def env_names(path: str | Path) -> list[str]:
    """The environment variables the YAML reads (${oc.env:NAME,...})."""
    from . import gate

    p = Path(path)
    try:
        body = staged(p)
        body = body if body is not None else gate.read_text(p, limit=gate.AST_LIMIT)
    except (OSError, gate.Refused):
        return []
    return list(dict.fromkeys(m.group(1) for m in ENV_REF.finditer(body)))
