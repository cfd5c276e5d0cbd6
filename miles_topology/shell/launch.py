"""Launch finding: which command starts training, and the flags it passes.

A training launch is ``train.py`` / ``train_async.py`` (in any folder), or this project's
``python -m miles.train``, started by python, torchrun, or ``ray job submit ... -- python``
(miles: scripts/run-*.sh; slime the same). Other python commands (``run.py`` wrappers,
``tools/convert_hf_to_torch_dist.py``, agent or router servers) are reported as found, never
checked as a training job. `command_form` reads the command forms from words; the Python
launcher reader (`pylaunch.commands`) uses it too.
"""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

from miles_topology.flags import known

from .model import FlagValue, LaunchSite, Source, Unresolved, is_switch
from .values import Field, Unk

_PY = re.compile(r"python(?:[0-9](?:\.[0-9]+)?)?$")
ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")  # NAME=value before a command
_SHELLS = frozenset(("bash", "sh", "zsh", "dash"))
# words that run the rest of the line as a command -> their options that take a value
_PREFIX = {
    "exec": {"-a"}, "nohup": set(), "time": {"-f", "-o"}, "command": set(), "builtin": set(),
    "nice": {"-n"}, "env": {"-u", "--unset", "-C", "--chdir", "-S"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"}, "sudo": {"-u", "-g", "-C"},
    "stdbuf": {"-i", "-o", "-e"}, "setsid": set(),
}
_TORCHRUN_SWITCHES = frozenset(("--standalone", "--no-python", "--no_python", "--run-path",
                                "--run_path", "--module", "-m"))
TRAIN_FILES = frozenset(("train.py", "train_async.py"))
TRAIN_MODULES = frozenset(("train", "train_async"))


class Launch(NamedTuple):
    launcher: str
    entry: str
    argv: list
    src: Source
    cond: Unk | None
    site: LaunchSite | None = None
    job_env: dict[str, str] | None = None  # ray job submit: its runtime env (None: unknown)

    @property
    def training(self) -> bool:
        return is_training(self.entry)


def is_training(entry: str) -> bool:
    """A training entry: train.py / train_async.py in any folder, or a module such as
    miles.train (the one rule for bash scripts and Python launchers alike)."""
    if entry.endswith(".py"):
        return os.path.basename(entry) in TRAIN_FILES
    return "/" not in entry and "." in entry and entry.rsplit(".", 1)[1] in TRAIN_MODULES


class Form(NamedTuple):
    """How one simple command starts a program, read from its words alone."""

    launcher: str  # "python3", "torchrun", "python -m torch.distributed.run", "ray job submit"
    entry: int  # index of the script, module, or (shell) the command string
    job: tuple[int, int] | None = None  # ray job submit: range of its own option words
    env: dict[str, str] = {}  # NAME=value words before the command, and `env NAME=value`
    shell: bool = False  # `bash -c STRING`: the entry word is a shell string to read


def command_form(vals: list[str | None]) -> Form | None:
    """The program a simple command starts: python SCRIPT / -m MODULE, torchrun (also
    ``python -m torch.distributed.run``), ``ray job submit [OPTS] [--] <one of those>``, or
    ``bash -c STRING``, behind wrappers (exec, nohup, env, timeout, sudo, ...). The one rule
    of command forms for bash scripts and Python launchers alike; None values are words
    not known here."""
    env: dict[str, str] = {}
    k = _skip_wrappers(vals, 0, env)
    if k >= len(vals) or vals[k] is None:
        return None
    base = os.path.basename(vals[k])
    if base == "ray":
        if vals[k + 1:k + 3] != ["job", "submit"]:
            return None
        rest = vals[k + 3:]
        cut = k + 3 + rest.index("--") if "--" in rest else None
        for j in range((cut + 1) if cut is not None else k + 3, len(vals)):
            inner = command_form(vals[j:])  # the entrypoint: the first word that starts one
            if inner is not None and inner.job is None:
                return Form("ray job submit", j + inner.entry,
                            (k + 3, cut if cut is not None else j), inner.env, inner.shell)
        return None
    if base in _SHELLS and "-c" in vals[k + 1:]:
        i = vals.index("-c", k + 1) + 1
        return Form(base + " -c", i, None, env, True) if i < len(vals) else None
    got = _entry(vals, k)
    return Form(got[0], got[1], None, env) if got else None


def reads_stdin_script(vals: list[str | None]) -> bool:
    """Whether a command runs a shell that reads its script from standard input: ``bash``,
    ``bash -s``, ``sh -ex`` as the last program of the words (also ``docker run ... IMAGE
    bash -s``, ``ssh HOST bash``), with options only after it and no ``-c``."""
    for k in range(len(vals) - 1, -1, -1):
        v = vals[k]
        if v is None:
            return False
        if os.path.basename(v) in _SHELLS:
            rest = vals[k + 1:]
            return all(r is not None and r.startswith("-") and r != "--" and
                       not (r[1:2] != "-" and "c" in r[1:]) for r in rest)
        if not v.startswith("-"):
            return False
    return False


def _skip_wrappers(vals: list[str | None], k: int, env: dict[str, str]) -> int:
    """Index of the first word after leading assignments and wrapper commands."""
    while k < len(vals):
        v = vals[k]
        if v is None:
            return k
        if ASSIGN.match(v):
            name, _, value = v.partition("=")
            env[name] = value
            k += 1
        elif os.path.basename(v) in _PREFIX:
            opts = _PREFIX[os.path.basename(v)]
            k += 1
            while k < len(vals) and vals[k] is not None and vals[k].startswith("-"):
                k += 2 if vals[k] in opts else 1
            if v == "timeout":
                k += 1  # its duration
        else:
            return k
    return k


def find(fields: list[Field], src: Source, cond: Unk | None) -> Launch | None:
    """The python, torchrun or ray job launch of one command of a script, if any."""
    vals = [f.value if f.value is not None else f.text for f in fields]
    form = command_form(vals)
    if form is None or form.shell:
        return None
    job_env = None
    if form.job is not None:
        job_env = runtime_env([f.value for f in fields[form.job[0]:form.job[1]]])
    return Launch(form.launcher, vals[form.entry], fields[form.entry + 1:], src, cond,
                  job_env=job_env)


def runtime_env(opts: list[str | None]) -> dict[str, str] | None:
    """env_vars of `ray job submit`'s options: the only environment, beyond the cluster's
    own, that the job's entrypoint gets (ray dashboard/modules/job/cli.py submit:
    --runtime-env FILE, --runtime-env-json JSON). `opts`: the value of each word before
    `--`, None when unknown. {} with no runtime env; None when it is not written
    literally (an unknown word that may hold it, `--runtime-env FILE`) or is not JSON."""
    env: dict[str, str] = {}
    for i, w in enumerate(opts):
        prev = opts[i - 1] if i else None
        if w is None:
            if prev and prev.startswith("-") and "=" not in prev \
                    and not prev.startswith("--runtime-env"):
                continue  # the unknown value of another option (--address $ADDR)
            return None
        if w == "--runtime-env" or w.startswith("--runtime-env="):
            return None  # a YAML file: not read here
        got = w.partition("=")[2] if w.startswith("--runtime-env-json=") else \
            (opts[i + 1] if w == "--runtime-env-json" and i + 1 < len(opts) else False)
        if got is False:
            continue
        try:
            env = {str(k): str(v) for k, v in (json.loads(got).get("env_vars") or {}).items()}
        except (TypeError, ValueError, AttributeError):
            return None
    return env


def _entry(vals: list[str | None], k: int) -> tuple[str, int] | None:
    """(launcher, entry index) when vals[k] starts a python or torchrun launch."""
    base = os.path.basename(vals[k])
    if _PY.match(base):
        i = k + 1
        while i < len(vals):
            v = vals[i]
            if v is None or v == "-c":
                return None
            if v == "-m" and i + 1 < len(vals) and vals[i + 1] is not None:
                mod = vals[i + 1]
                if mod in ("torch.distributed.run", "torch.distributed.launch"):
                    return _torchrun(vals, i + 2, f"{base} -m {mod}")
                return base, i + 1
            if v in ("-X", "-W", "-Q"):
                i += 2
            elif v.startswith("-"):
                i += 1
            else:
                return base, i
        return None
    if base == "torchrun":
        return _torchrun(vals, k + 1, "torchrun")
    return None


def _torchrun(vals: list[str | None], i: int, launcher: str) -> tuple[str, int] | None:
    """Skip torchrun's own options (``--opt value``, ``--opt=value``, switches)."""
    while i < len(vals):
        v = vals[i]
        if v is None:
            return None
        if v.startswith("-"):
            i += 1 if ("=" in v or v in _TORCHRUN_SWITCHES) else 2
        else:
            return launcher, i
    return None


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
            flag = f.value.partition("=")[0] if _is_flag(f) else None
            text = [f.value or f.text]
            while flag and i < n and not _is_flag(fields[i]) and fields[i].cond \
                    and not fields[i].extra:
                text.append(fields[i].value or fields[i].text)
                i += 1
            if flag:
                out.append(FlagValue(flag, None, f.src, unresolved=" ".join(text)))
            unresolved.append(Unresolved(flag, " ".join(text), f.cond.src, f.cond.why))
            continue
        if f.unk is not None:
            unresolved.append(Unresolved(None, f.unk.expr, f.unk.src, f.unk.why))
            continue
        if not _is_flag(f):
            out.append(FlagValue("", f.value, f.src, tokens=(f.value,), span=span(f.span)))
            continue
        flag, eq, val = f.value.partition("=")
        if eq:
            out.append(FlagValue(flag, val, f.src, tokens=(val,), span=span(f.span),
                                 joined=True))
            continue
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
            continue
        bad = next((v for v in vals if v.unk is not None), None)
        if bad is not None:
            text = " ".join(v.text if v.unk else v.value for v in vals)
            out.append(FlagValue(flag, None, f.src, unresolved=text))
            unresolved.append(Unresolved(flag, bad.unk.expr, bad.unk.src, bad.unk.why))
            continue
        toks = tuple(v.value for v in vals)
        out.append(FlagValue(flag, " ".join(toks), f.src, tokens=toks, span=span(f.span),
                             value_spans=tuple(span(v.span) for v in vals)))
    return out
