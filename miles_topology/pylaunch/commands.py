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

import os
import re
import shlex
from dataclasses import dataclass, field

# one reading of ray job submit's runtime env, one rule of what a training entry is
from ..shell.launch import is_training, runtime_env

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_OPERATORS = {";", "&&", "||", "|", "&", "\n", ";;", "|&"}
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# words that run the rest of the line as a command
_WRAPPERS = {"exec", "nohup", "env", "time", "command", "sudo", "stdbuf", "setsid", "nice"}


@dataclass
class Launch:
    """A training launch found in one recorded command."""

    argv: list[str]  # the flags after train.py / train_async.py
    entry: str
    launcher: str  # "python", "torchrun" or "ray job submit"
    env: dict[str, str] = field(default_factory=dict)  # set for the entry by the command itself
    env_known: bool = True  # False: a ray job's runtime env not given literally (a file)


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


def _strip(words: list[str], env: dict[str, str]) -> list[str]:
    """Drop leading VAR=value assignments (kept in `env`) and wrappers like env/nohup."""
    i = 0
    while i < len(words):
        w = words[i]
        if _ASSIGN.match(w):
            k, _, v = w.partition("=")
            env[k] = v
        elif os.path.basename(w) in _WRAPPERS:
            pass
        elif w.startswith("-") and i and os.path.basename(words[i - 1]) in _WRAPPERS:
            pass  # env -i, nohup --, time -p
        else:
            break
        i += 1
    return words[i:]


def _entry_at(words: list[str]) -> int | None:
    for i, w in enumerate(words):
        if w.endswith(".py") and is_training(w):
            return i
    return None


def find(words: list[str], env: dict[str, str] | None = None) -> Launch | None:
    """The training launch in one simple command's words, or None."""
    env = dict(env or {})
    words = _strip(words, env)
    if not words:
        return None
    head = os.path.basename(words[0])
    if head in ("bash", "sh", "zsh", "dash") and "-c" in words[1:]:
        i = words.index("-c")
        if i + 1 < len(words):
            return find_in_shell(words[i + 1], env)
        return None
    if head == "ray" and words[1:3] == ["job", "submit"]:
        if "--" not in words:
            return None
        cut = words.index("--")
        inner = find(words[cut + 1:])
        if inner is None:
            return None
        inner.launcher = "ray job submit"
        job_env = runtime_env(list(words[3:cut]))
        if job_env is None:
            inner.env_known = False
        else:
            inner.env = {**inner.env, **job_env}
        return inner
    if head == "torchrun" or (_PYTHON.fullmatch(head) and "-m" in words
                              and words[words.index("-m") + 1:][:1]
                              in (["torch.distributed.run"], ["torch.distributed.launch"])):
        at = _entry_at(words)
        return None if at is None else Launch(words[at + 1:], words[at], "torchrun", env)
    if _PYTHON.fullmatch(head):
        # python [interpreter options] SCRIPT ARGS: the script is the first non-option word
        for i, w in enumerate(words[1:], 1):
            if w == "-m" and i + 1 < len(words) and is_training(words[i + 1]):
                return Launch(words[i + 2:], words[i + 1], "python", env)  # e.g. miles.train
            if w in ("-m", "-c"):
                return None
            if not w.startswith("-"):
                if is_training(w):
                    return Launch(words[i + 1:], w, "python", env)
                return None
    return None


def find_in_shell(text: str, env: dict[str, str] | None = None) -> Launch | None:
    """The first training launch in a shell string; `export X=Y` before it reaches it."""
    env = dict(env or {})
    for words in split_shell(text):
        if words[0] == "export":
            for w in words[1:]:
                if _ASSIGN.match(w):
                    k, _, v = w.partition("=")
                    env[k] = v
            continue
        got = find(words, env)
        if got is not None:
            return got
    return None


def launch_of(record: dict) -> Launch | None:
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
