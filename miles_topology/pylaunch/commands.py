"""Which recorded command launches training, and with which flags.

A launcher hands its command to a subprocess either as words (``["ray", "job", "submit",
...]``) or as one shell string (``bash -c "pkill -9 sglang; ...; ray job submit ... -- python3
train.py ..."``, ``os.system(...)``). A shell string is cut into simple commands at ``;``,
``&&``, ``||``, ``|``, ``&`` and newlines; each is then read the way miles starts training:
``python3 .../train.py ARGS``, ``torchrun [OPTS] .../train.py ARGS`` (also ``python -m
torch.distributed.run``) or ``ray job submit [OPTS] -- <one of those>`` (miles'
``execute_train`` in ``miles/utils/external_utils/command_utils.py`` builds the last one), and
this project's own launcher, ``python -m miles.train``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

# one rule of command forms, of ray job submit's runtime env and of a training entry
from ..reading.commandline import ASSIGN, command_form, is_training, runtime_env, torchrun_world

_OPERATORS = {";", "&&", "||", "|", "&", "\n", ";;", "|&"}


@dataclass
class CommandLaunch:
    """A training launch found in one recorded command."""

    argv: list[str]  # the flags after train.py / train_async.py
    entry: str
    launcher: str  # as the command says it: "python3", "torchrun", "ray job submit", ...
    env: dict[str, str] = field(default_factory=dict)  # set for the entry by the command itself
    env_known: bool = True  # False: a ray job's runtime env not given literally (a file)
    # torchrun's (nnodes, nproc_per_node), from its options before the entry
    world: tuple[int, int] | None = None
    # files the shell string sources before the launch (`source F && ray job submit ...
    # ${MODEL_ARGS[@]}`: slime's execute_train); their arrays are read by `check`
    sourced: list[str] = field(default_factory=list)


def split_shell(text: str) -> list[list[str]]:
    """Simple commands of a shell string, as words (quotes removed); a string shlex cannot
    split (an open quote) is one command of whitespace-separated words."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = "#"
    out: list[list[str]] = [[]]
    try:
        for tok in lex:
            if tok in _OPERATORS or set(tok) <= set(";&|\n"):
                out.append([])
            elif tok in ("(", ")", "{", "}"):
                continue
            else:
                out[-1].append(tok)
    except ValueError:
        return [text.split()]
    return [c for c in out if c]


def find(words: list[str], env: dict[str, str] | None = None) -> CommandLaunch | None:
    """The training launch in one simple command's words, or None."""
    form = command_form(list(words))
    if form is None:
        return None
    # a ray job's entrypoint sees only the job's runtime env, not the submitting shell's
    env = dict(form.env) if form.job else {**(env or {}), **form.env}
    if form.shell:
        got = find_in_shell(words[form.entry], env)
    elif is_training(words[form.entry]):
        got = CommandLaunch(list(words[form.entry + 1:]), words[form.entry], form.launcher, env)
        if "torch" in form.launcher:
            got.world = torchrun_world(list(words[:form.entry]))
    else:
        return None
    if got is None or form.job is None:
        return got
    got.launcher = "ray job submit"
    job_env = runtime_env(list(words[form.job[0]:form.job[1]]))
    if job_env is None:
        got.env_known = False
    else:
        got.env = {**got.env, **job_env}
    return got


def find_in_shell(text: str, env: dict[str, str] | None = None) -> CommandLaunch | None:
    """The first training launch in a shell string; `export X=Y` before it reaches it, and
    the files `source F` / `. F` read before it are kept with it."""
    env = dict(env or {})
    sourced: list[str] = []
    for words in split_shell(text):
        if words[0] in ("source", ".") and len(words) > 1:
            sourced.append(words[1])
            continue
        if words[0] == "export":
            for w in words[1:]:
                if ASSIGN.match(w):
                    k, _, v = w.partition("=")
                    env[k] = v
            continue
        got = find(words, env)
        if got is not None:
            got.sourced = sourced + got.sourced
            return got
    return None


def launch_of(record: dict) -> CommandLaunch | None:
    """The training launch in one recorded call, or None."""
    env = {k: v for k, v in (record.get("env") or {}).items()}
    if record.get("shell") is not None:
        return find_in_shell(record["shell"], env)
    if record.get("argv"):
        return find(list(record["argv"]), env)
    return None


def shown(record: dict) -> str:
    """The command as one line, for reports."""
    if record.get("shell") is not None:
        return record["shell"]
    return shlex.join(record.get("argv") or [])
