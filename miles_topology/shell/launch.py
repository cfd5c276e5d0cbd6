"""Launch finding: which command starts training, and the flags it passes.

A training launch is ``train.py`` / ``train_async.py`` (in any folder), or this project's
``python -m miles.train``, started by python, torchrun, or ``ray job submit ... -- python``
(miles: scripts/run-*.sh; slime the same). Other python commands (``run.py`` wrappers,
``tools/convert_hf_to_torch_dist.py``, agent or router servers) are reported as found, never
checked as a training job. The command forms themselves (which word is the entry, what runs it) are
commandline.py's, shared with the Python launcher reader.
"""

from __future__ import annotations

from typing import NamedTuple

from miles_topology.reading.flags import known

from ..model.errors import Location
from ..reading.commandline import (  # noqa: F401  (the shell's names for them)
    ASSIGN,
    TRAIN_FILES,
    TRAIN_MODULES,
    Form,
    command_form,
    is_training,
    reads_stdin_script,
    runtime_env,
    torchrun_world,
)
from .records import FlagValue, LaunchSite, Unresolved, is_switch
from .values import Field, Unk


class Launch(NamedTuple):
    launcher: str
    entry: str
    argv: list
    src: Location
    cond: Unk | None
    site: LaunchSite | None = None
    job_env: dict[str, str] | None = None  # ray job submit: its runtime env (None: unknown)
    world: tuple[int, int] | None = None  # torchrun's (nnodes, nproc_per_node); None: unknown
    unknown: str | None = None  # why the entry word is not known here (None: it is)
    # run in a container (shell/containers.py): (how it is said, the file of this machine
    # the entry is, None when none is known: why)
    box: tuple[str, str | None, str] | None = None

    @property
    def training(self) -> bool:
        return is_training(self.entry)


def find(fields: list[Field], src: Location, cond: Unk | None) -> Launch | None:
    """The python, torchrun or ray job launch of one command of a script, if any."""
    vals = [f.value if f.value is not None else _shown(f) for f in fields]
    form = command_form(vals)
    if form is None or form.shell:
        return None
    job_env = None
    if form.job is not None:
        job_env = runtime_env([f.value for f in fields[form.job[0]:form.job[1]]])
    world = _world(fields[:form.entry]) if "torch" in form.launcher else None
    e = fields[form.entry]
    unknown = None if e.value is not None or e.base() is not None else \
        e.unk.why if e.unk else "its value is unknown"
    return Launch(form.launcher, vals[form.entry], fields[form.entry + 1:], src, cond,
                  job_env=job_env, world=world, unknown=unknown)


def shell_text(fields: list[Field]) -> int | None:
    """Index of TEXT when the command is ``bash -c TEXT`` (behind wrappers: ``srun
    --ntasks="$N" bash -lc '...'``), words not known here read as `find` reads them."""
    form = command_form([f.value if f.value is not None else _shown(f) for f in fields])
    return form.entry if form is not None and form.shell else None


def _world(before: list[Field]) -> tuple[int, int] | None:
    """torchrun's world from the words before the entry as expanded (``--nnodes ${NNODES}``
    with NNODES known); None when a word that may hold an option of it is not known."""
    words: list[str | None] = []
    for f in before:
        if f.value is None or f.cond is not None:
            prev = words[-1] if words else None
            if f.extra or not (prev and prev.startswith("--") and "=" not in prev):
                return None  # unknown words that may be --nnodes, --nproc-per-node
            words.append(None)
        else:
            words.append(f.value)
    return torchrun_world(words)


def _shown(f: Field) -> str:
    """An unknown word as the command forms read it: by its text, or, when its last path
    component is known (``"${RAY_BIN}"`` with RAY_BIN=$(dirname "$PY")/ray,
    ``"${ROOT}/${ENTRY}"`` with ENTRY=train.py), a path ending in that component, so the
    program it runs (ray, python3) and the entry it names are recognised whatever variables
    carried them."""
    base = f.base()
    if base is None:
        return f.text
    text = f.text.replace('"', "").replace("'", "")
    return text if text.rsplit("/", 1)[-1] == base else f"{text.rsplit('/', 1)[0]}/{base}" \
        if "/" in text else f".../{base}"


def _is_flag(f: Field) -> bool:
    v = f.value
    return v is not None and len(v) > 2 and v.startswith("--")


def argv_of(fields: list, unresolved: list[Unresolved], span=lambda t: None,
            gaps: list[int] | None = None) -> list[FlagValue]:
    """The launch's words as flags with values. An unknown number of words (an unresolved
    ``${A[@]}``) is never a flag's value: the flag before it keeps what it had, and its
    place in argv goes to `gaps` (it may hold any flag)."""
    out: list[FlagValue] = []
    i, n = 0, len(fields)
    while i < n:
        f = fields[i]
        i += 1
        if f.unk is not None and gaps is not None and (f.extra or f.cond is None):
            gaps.append(len(out))  # unknown words not a flag's value: they may hold any flag
        if f.cond is not None:
            i = _conditional(f, fields, i, out, unresolved)
        elif f.unk is not None:
            unresolved.append(Unresolved(None, f.unk.expr, f.unk.src, f.unk.why))
        elif not _is_flag(f):
            out.append(FlagValue("", f.value, f.src, tokens=(f.value,), span=span(f.span)))
        else:
            i = _flag(f, fields, i, out, unresolved, span)
    return out


def _conditional(f: Field, fields: list, i: int, out: list[FlagValue],
                 unresolved: list[Unresolved]) -> int:
    """A word that is there only under a run-time condition, with the conditional words
    after it that a flag takes: unresolved. Gives the index after them."""
    n = len(fields)
    flag = f.value.partition("=")[0] if _is_flag(f) else None
    text = [f.value or f.text]
    while flag and i < n and not _is_flag(fields[i]) and fields[i].cond \
            and not fields[i].extra:
        text.append(fields[i].value or fields[i].text)
        i += 1
    if flag:
        out.append(FlagValue(flag, None, f.src, unresolved=" ".join(text)))
    unresolved.append(Unresolved(flag, " ".join(text), f.cond.src, f.cond.why))
    return i


def _flag(f: Field, fields: list, i: int, out: list[FlagValue],
          unresolved: list[Unresolved], span) -> int:
    """A known ``--flag`` (``--flag=V``, or with the words after it as its value). Gives
    the index after its value."""
    n = len(fields)
    flag, eq, val = f.value.partition("=")
    if eq:
        out.append(FlagValue(flag, val, f.src, tokens=(val,), span=span(f.span),
                             joined=True))
        return i
    vals: list[Field] = []
    while i < n and not _is_flag(fields[i]) and not fields[i].extra \
            and fields[i].cond is None and not (  # an unknown word after a switch
                fields[i].unk is not None and known(flag) and is_switch(flag)):
        vals.append(fields[i])
        i += 1
    if not vals and i < n and fields[i].extra and known(flag) and not is_switch(flag):
        g = fields[i]  # its value may be the first of the unknown words
        out.append(FlagValue(flag, None, f.src, unresolved=g.text, span=span(f.span)))
        unresolved.append(Unresolved(flag, g.unk.expr, g.unk.src,
                                     f"{flag} has no value of its own; it takes the first "
                                     f"word of {g.text}, and {g.unk.why}"))
        return i
    bad = next((v for v in vals if v.unk is not None), None)
    if bad is not None:
        text = " ".join(v.text if v.unk else v.value for v in vals)
        out.append(FlagValue(flag, None, f.src, unresolved=text, span=span(f.span),
                             bare=bad.text if len(vals) == 1 and bad.bare else None))
        unresolved.append(Unresolved(flag, bad.unk.expr, bad.unk.src, bad.unk.why))
        return i
    toks = tuple(v.value for v in vals)
    out.append(FlagValue(flag, " ".join(toks), f.src, tokens=toks, span=span(f.span),
                         value_spans=tuple(span(v.span) for v in vals)))
    return i
