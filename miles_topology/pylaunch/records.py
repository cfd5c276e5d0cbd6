"""The record a launcher's run leaves, read as untrusted input.

The recorders write one JSON line per action into a pipe the launcher holds too, so any line
may be the launcher's own. Each is kept only when it fits the schema below (known keys, known
types, bounded sizes; other keys dropped), and a source location only when it names a regular
file inside the launcher's checkout: the checker reads those files (report columns), so a
forged `/dev/zero` or `/dev/stdin` must never reach it. What the record cannot forge (how the
launcher ended, the supervisor's verdict, its typer commands) is taken elsewhere
(`pylaunch.execute`, `typerapp`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

RECORD_MAX = 16 << 20  # bytes of record kept (the child's RLIMIT_FSIZE, as before)
TEXT_MAX = 1 << 20  # one string
WORDS_MAX = 1 << 16  # words of one command, entries of one environment
LINE_MAX = 1 << 24  # the largest line a source location may name
BYTES_MAX = 4 << 20  # one record line: parsed JSON takes ~30x its bytes in memory
ACTIONS_MAX = 20_000  # records kept; past them only an end record is read (a marker says so)
JSON_MAX = 4096  # values and depth (JSON_DEPTH) of a free-form field ("json" below)
JSON_DEPTH = 16
FILES_MAX = 4  # YAML files one command carries (child.WRITTEN_FILES)
# why the child did not read one (child._capture)
UNREAD = {"link": "it resolves outside the launcher's work folder (a link out is never read)",
          "type": "it is not a regular file (a FIFO or device is never opened)",
          "links": "it has more than one link (a hard link is never read)",
          "size": f"it is over the {TEXT_MAX >> 10} KiB a file the launcher writes may be",
          "unreadable": "it could not be read there (missing, or refused by the kernel)"}

ENDS = ("ok", "exit", "error", "missing", "memory", "refused", "waiting")
_STR, _OPT_STR, _BOOL, _INT = "str", "str?", "bool", "int"
_CALL = {"kind": _STR, "argv": "words?", "shell": _OPT_STR, "source": "where",
         "env": "env?", "env_changes": "changes?", "via_shell": _BOOL, "cwd": _OPT_STR,
         "captured": _BOOL, "answer": _OPT_STR, "node": _INT, "via": _OPT_STR,
         "server": _OPT_STR, "port": _INT,
         # the text of a YAML a command names, written in the work folder (child._written):
         # input-chosen text, as argv is; only a path inside the work folder is kept
         "files": "files", "files_base": "base"}
_SHAPES = {  # the key that names a record's kind -> the keys it may hold
    "kind": _CALL,
    "unknown": {"unknown": _INT, "what": _STR, "source": "where"},
    "assumed": {"assumed": _STR, "as": _STR, "source": "where"},
    "missing_module": {"missing_module": _STR, "source": "where"},
    # lines of the user's code that ran (child._flush_ran): a file of the checkout
    "ran": {"ran": "where", "lines": "ints"},
    # a modelled server (servers.py); "json": any small JSON value (`_small`), only reported
    # (never a path the checker opens)
    "server": {"server": _STR, "port": _INT, "node": _INT, "flag": _OPT_STR,
               "command": _STR, "source": "where"},
    # where it failed: quoted in the message (never read), so any file, as text
    "end": {"end": _STR, "code": "code", "error": _OPT_STR, "type": _OPT_STR, "where": "at",
            "inner": "inner", "module": _OPT_STR, "missing": _OPT_STR, "sizes": "json",
            "poll": "json", "answer": "json", "times": _INT, "cluster": "json"},
}


def _int(v) -> bool:
    return type(v) is int and abs(v) < 1 << 62


def _ints(v) -> bool:
    return isinstance(v, list) and len(v) <= WORDS_MAX and all(
        type(x) is int and 0 <= x < LINE_MAX for x in v)


def _words(v) -> bool:
    return v is None or isinstance(v, list) and len(v) <= WORDS_MAX and all(map(_text, v))


def _env(v, some: bool = False) -> bool:
    """None, or names to text values (`some`: None too, a variable the launcher unsets)."""
    return v is None or isinstance(v, dict) and len(v) <= WORDS_MAX and all(
        _text(k) and (_text(x) or some and x is None) for k, x in v.items())


# a field's shape -> whether a value has it (RecordReader._value; "where", "at" and
# "inner" are read into a location there)
_FITS = {
    "json": lambda v: _small(v),
    _STR: lambda v: _text(v),
    _OPT_STR: lambda v: v is None or _text(v),
    _BOOL: lambda v: isinstance(v, bool),
    _INT: _int,
    "code": lambda v: v is None or _text(v) or _int(v),
    "ints": _ints,
    "words?": _words,
    "env?": _env,
    "changes?": lambda v: _env(v, some=True),
    "files": lambda v: isinstance(v, dict) and len(v) <= FILES_MAX and all(
        _text(k) and isinstance(x, dict) and len(x) == 1 and (
            _text(x.get("text")) or x.get("why") in UNREAD) for k, x in v.items()),
}


class RecordReader:
    """Parses record lines for one launcher whose checkout is `root` and whose work folder
    is `work`."""

    def __init__(self, root: str, work: str = ""):
        self.root = os.path.realpath(root)
        self.works = tuple(dict.fromkeys(os.path.join(w, "") for w in (
            os.path.abspath(work), os.path.realpath(work)))) if work else ()
        self._seen: dict[str, bool] = {}

    def parse(self, data: bytes) -> list[dict]:
        """The records that fit the schema; past ACTIONS_MAX of them, only end records, and
        a last {"cut": N} (a key no launcher can write: unknown kinds are dropped) counting
        the lines left unread."""
        out, cut = [], 0
        for line in data[:RECORD_MAX].splitlines():
            if len(line) > BYTES_MAX:
                continue
            if len(out) >= ACTIONS_MAX and not line.startswith(b'{"end"'):
                cut += 1
                continue
            try:
                rec = json.loads(line.decode(errors="replace"))
            except (ValueError, RecursionError):
                continue  # a line cut off by the kill, or not JSON
            rec = self.record(rec) if isinstance(rec, dict) else None
            if rec is not None:
                out.append(rec)
        return out + [{"cut": cut}] if cut else out

    def record(self, rec: dict) -> dict | None:
        """The record as the schema allows it, or None."""
        kind = next((k for k in _SHAPES if k in rec), None)
        if kind is None:
            return None
        out = {}
        for key, shape in _SHAPES[kind].items():
            if key not in rec:
                continue
            ok, value = self._value(shape, rec[key])
            if not ok:
                return None
            out[key] = _clean(value)
        if kind == "end" and out.get("end") not in ENDS:
            return None
        return out

    def _value(self, shape: str, v) -> tuple[bool, object]:
        if shape == "where":
            return True, self.where(v)
        if shape == "files" and _FITS[shape](v):  # a forged path outside it: dropped
            return True, {k: x for k, x in v.items() if os.path.isabs(k) and
                          os.path.normpath(k) == k and k.startswith(self.works)}
        if shape == "base":  # the folder the relative names were found from: in it too
            return True, v if _text(v) and os.path.isabs(v) and os.path.normpath(v) == v and \
                os.path.join(v, "").startswith(self.works) else None
        if shape in ("at", "inner"):
            n = 2 if shape == "at" else 4
            return True, v if isinstance(v, list) and len(v) == n and _text(v[0]) and \
                type(v[1]) is int and all(map(_text, v[2:])) else None
        fits = _FITS.get(shape)
        return (fits(v), v) if fits is not None else (False, None)

    def where(self, src) -> list | None:
        """A source location [path, line], only where the path is a regular file inside the
        checkout (resolved, links followed) and the line a plausible number."""
        if not (isinstance(src, list) and len(src) == 2 and _text(src[0]) and
                type(src[1]) is int and 0 <= src[1] < LINE_MAX):
            return None
        path = src[0]
        ok = self._seen.get(path)
        if ok is None:
            from ..reading import (
                gate,  # inside the checkout, no hidden name, a bounded regular file
            )

            try:
                ok = gate.is_file(path, (Path(self.root),))
            except ValueError:
                ok = False
            self._seen[path] = ok
        return [path, src[1]] if ok else None


def _text(v) -> bool:
    return isinstance(v, str) and len(v) <= TEXT_MAX


def _clean(v):
    """`v` with each lone surrogate (JSON's "\\ud800", or a non-UTF-8 file name Python
    decoded) as a `\\udcff`-style escape: UTF-8 cannot encode one, the report's print
    would fail on it."""
    if isinstance(v, str):
        try:
            v.encode()
            return v
        except UnicodeEncodeError:
            return v.encode(errors="backslashreplace").decode()
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {_clean(k): _clean(x) for k, x in v.items()}
    return v


def _small(v) -> bool:
    """A JSON value of at most JSON_MAX values, JSON_DEPTH deep, its strings `_text`: the
    report prints it with every launch."""
    todo, seen = [(v, 0)], 0
    while todo:
        x, depth = todo.pop()
        seen += 1
        if seen > JSON_MAX or depth > JSON_DEPTH:
            return False
        if isinstance(x, dict):
            if not all(map(_text, x)):
                return False
            todo += [(y, depth + 1) for y in x.values()]
        elif isinstance(x, list):
            todo += [(y, depth + 1) for y in x]
        elif isinstance(x, str) and not _text(x):
            return False
    return True
