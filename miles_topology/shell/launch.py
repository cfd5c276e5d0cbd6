"""Launch finding: which command starts training, and the flags it passes.

A training launch is ``train.py`` / ``train_async.py`` (in any folder), or this project's
``python -m miles.train``, started by python, torchrun, or ``ray job submit ... -- python``
(miles: scripts/run-*.sh; slime the same). Other python commands (``run.py`` wrappers,
``tools/convert_hf_to_torch_dist.py``, agent or router servers) are reported as found, never
checked as a training job.
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
_PREFIX = frozenset(("exec", "nohup", "time", "command", "builtin", "nice"))
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


def find(fields: list[Field], src: Source, cond: Unk | None) -> Launch | None:
    """The launch a command starts (python, torchrun, ray job submit -- ...), if any."""
    vals = [f.value if f.value is not None else f.text for f in fields]
    k = 0
    while k < len(vals):
        v = vals[k]
        if v in _PREFIX:
            k += 1
        elif v == "env":
            k += 1
            while k < len(vals) and ("=" in vals[k] or vals[k].startswith("-")):
                k += 2 if vals[k] in ("-u", "--unset", "-C", "--chdir") else 1
        elif v == "timeout":
            k += 1
            while k < len(vals) and vals[k].startswith("-"):
                k += 2 if vals[k] in ("-s", "-k", "--signal", "--kill-after") else 1
            k += 1
        else:
            break
    if k >= len(vals):
        return None
    base = os.path.basename(vals[k])
    if base == "ray":
        if vals[k + 1:k + 3] != ["job", "submit"]:
            return None
        rest = vals[k + 3:]
        j = rest.index("--") + 1 if "--" in rest else 0
        j += k + 3
        while j < len(vals):
            got = _entry(fields, vals, j)
            if got:
                opts = fields[k + 3:k + 3 + rest.index("--")] if "--" in rest else []
                return Launch("ray job submit", got[1], got[2], src, cond,
                              job_env=runtime_env([f.value for f in opts]))
            j += 1
        return None
    got = _entry(fields, vals, k)
    return Launch(got[0], got[1], got[2], src, cond) if got else None

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


def _entry(fields, vals, k) -> tuple[str, str, list] | None:
    """(launcher, entry, argv) when vals[k] starts a python or torchrun launch."""
    base = os.path.basename(vals[k])
    if _PY.match(base):
        i = k + 1
        while i < len(vals):
            v = vals[i]
            if v == "-c":
                return None
            if v == "-m" and i + 1 < len(vals):
                mod = vals[i + 1]
                if mod in ("torch.distributed.run", "torch.distributed.launch"):
                    return _torchrun(fields, vals, i + 2, f"{base} -m {mod}")
                return base, mod, fields[i + 2:]
            if v in ("-X", "-W", "-Q"):
                i += 2
            elif v.startswith("-"):
                i += 1
            else:
                return base, v, fields[i + 1:]
        return None
    if base == "torchrun":
        return _torchrun(fields, vals, k + 1, "torchrun")
    return None

def _torchrun(fields, vals, i, launcher) -> tuple[str, str, list] | None:
    """Skip torchrun's own options (``--opt value``, ``--opt=value``, switches)."""
    while i < len(vals):
        v = vals[i]
        if v.startswith("-"):
            i += 1 if ("=" in v or v in _TORCHRUN_SWITCHES) else 2
        else:
            return launcher, v, fields[i + 1:]
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
        if f.unk is not None and f.extra and gaps is not None:
            gaps.append(len(out))
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
                and fields[i].cond is None:
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
