"""The built-in commands the reader models, as a table of small handlers by command name
(as shellcheck organises its command checks): each takes the reader, the command's expanded
words, its syntax node and the run-time condition it runs under. A handler that returns
False did not take the command (it is then read as any other command)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from . import syntax
from .records import Unresolved, note
from .values import (
    INT_LIMIT,
    MAX_CALL_DEPTH,
    MAX_ITEMS,
    MAX_SOURCE_DEPTH,
    Field,
    Unk,
    Var,
    printf,
)

if TYPE_CHECKING:
    from .interpret import Reader


def set_(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    """``set -a`` / ``set -o allexport`` (what a launched process sees); ``set -- WORDS``
    (or words after the options) become the positional parameters."""
    k = next((i for i, f in enumerate(fields[1:], 1) if f.value == "--" or
              f.value is None or f.value[:1] not in ("-", "+") or f.value in ("-", "+")),
             None)
    if k is not None:
        words = fields[k + (fields[k].value == "--"):]
        known = cond is None and not any(f.unk or f.cond for f in words)
        r.sh.frames[-1] = list(words) if known else None
        if r.sh.positions:
            r.read_position(INT_LIMIT)
        fields = fields[:k]
    for f in fields[1:]:
        v = f.value or ""
        if v[:1] in "-+" and v[1:2] != "-" and "a" in v:
            r.sh.allexport = v[0] == "-"
    if [f.value for f in fields[1:3]] in (["-o", "allexport"], ["+o", "allexport"]):
        r.sh.allexport = fields[1].value == "-o"


def unset(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    for f in fields[1:]:
        if f.value and not f.value.startswith("-"):
            r.sh.vars.pop(f.value, None)


def cd(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    """Only an absolute, unconditional ``cd`` is followed (relative paths then resolve)."""
    rest = [f for f in fields[1:] if not (f.value or "-").startswith("-")]
    target = rest[0].value if rest else None
    if target and target.startswith("/") and not cond:
        r.sh.cwd = os.path.normpath(target)
    else:
        r.sh.cwd = None


def shift(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    frame = r.sh.frames[-1]
    k = fields[1].value if len(fields) > 1 else "1"
    if frame is not None and k is not None and k.isdigit():
        r.sh.frames[-1] = frame[int(k):]
        if r.sh.positions:
            r.sh.positions[-1][0] += int(k)
    else:
        r.read_position(INT_LIMIT)


def getopts_next(r: Reader, fields: list[Field]) -> tuple[bool, dict] | None:
    """What ``getopts OPTSTRING NAME [ARGS]`` does next over known words: (status, the
    variables it sets, None to unset), or None when that is only known at run time (unknown
    words, options grouped in one word such as ``-vx``)."""
    if len(fields) < 3 or any(f.value is None or f.cond for f in fields[1:]):
        return None
    spec, name = fields[1].value, fields[2].value
    args = [f.value for f in fields[3:]] if len(fields) > 3 else None
    if args is None:
        frame = r.sh.frames[-1]
        if frame is None or any(f.value is None or f.cond for f in frame):
            return None
        args = [f.value for f in frame]
    ind = r.sh.vars.get("OPTIND")
    try:
        k = int(ind.items[0].value) if ind is not None else 1
    except (TypeError, ValueError, IndexError):
        return None
    end = {name: "?"}
    if k > len(args) or not args[k - 1].startswith("-") or args[k - 1] == "-":
        return False, end
    word = args[k - 1]
    if word == "--":
        return False, {**end, "OPTIND": str(k + 1)}
    c = word[1]
    at = spec.find(c) if c != ":" else -1
    if at < 0:
        return (True, {name: "?", "OPTIND": str(k + 1), "OPTARG": None}) \
            if len(word) == 2 else None
    if spec[at + 1:at + 2] != ":":
        return (True, {name: c, "OPTIND": str(k + 1), "OPTARG": None}) \
            if len(word) == 2 else None
    if len(word) > 2:
        return True, {name: c, "OPTARG": word[2:], "OPTIND": str(k + 1)}
    if k < len(args):
        return True, {name: c, "OPTARG": args[k], "OPTIND": str(k + 2)}
    return True, {name: "?", "OPTIND": str(k + 1), "OPTARG": None}  # its argument is missing


def getopts(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    got = getopts_next(r, fields)
    src = r.src(n.line)
    what = " ".join(f.value or f.text for f in fields)
    if got is None or cond is not None:
        for v in ((fields[2].value,) if len(fields) > 2 and fields[2].value else ()) + \
                ("OPTARG", "OPTIND"):
            r.set(v, None, Unk(what, src, f"{v} is set by {what} at run time"), src, cond,
                  what, what)
        return
    for v, value in got[1].items():
        r.sh.inherited.discard(v)
        if value is None:
            r.sh.vars.pop(v, None)
        else:
            r.set(v, value, None, src, None, what, what)


def jump(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    r.jump(fields[0].value, fields, n, cond)


def stdin(r: Reader, n: syntax.Simple, what: str) -> Field:
    """The text a command reads: a here-string's word (plus a newline), the output of
    ``< <(...)`` when it is known, else unknown."""
    src = r.src(n.line)
    got = n.stdin
    if type(got) is syntax.Word:
        f = r.join(got)
        return f if f.unk else Field(f.value + "\n", f.src, text=got.text)
    if type(got) is syntax.Sub:
        f = r.substitute(got)
        return f if f.unk else Field(f.value + "\n", f.src, text=got.text)
    if type(got) is syntax.Heredoc:  # quoted delimiter: as written; else expanded first
        f = r.join(got.word) if got.word is not None else Field(got.text, src, text=got.text)
        return f if f.unk or f.cond else Field(f.value, src, text=what)
    why = "standard input, only known when the script runs" if got is None else \
        "a file, only known when the script runs"
    return Field(None, src, Unk(what, src, f"{what} reads {why}"), what)


def read(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    name = fields[0].value
    """``read [-r] [-a A] NAMES`` and ``mapfile/readarray [-t] [-d D] A`` over known text."""
    takes = "adnNptui" if name == "read" else "dnOsuCc"
    array, delim, names = None, "\n", []
    it = iter(fields[1:])
    for f in it:
        v = f.value
        if v is None:
            continue
        if v.startswith("-") and len(v) > 1:
            for k, c in enumerate(v[1:], 1):
                if c in takes:
                    arg = v[k + 1:] or (next(it, None) or Field("", f.src)).value or ""
                    if c == "a":
                        array = arg
                    elif c == "d":
                        delim = (arg or "\0")[:1]
                    break
            continue
        names.append(v)
    if name != "read":
        array, names = (names[-1] if names else "MAPFILE"), []
    elif array is None and not names:
        names = ["REPLY"]
    if array is not None and not syntax.NAME.fullmatch(array):
        array = None
    names = [x for x in names if syntax.NAME.fullmatch(x)]
    what = " ".join(f.value or f.text for f in fields)
    src = r.src(n.line)
    got = stdin(r, n, what)
    ifs = next((a for a in n.prefix if a.name == "IFS"), None)
    ifs_v = r.join(ifs.value).value if ifs is not None else \
        (r.sh.vars["IFS"].items[0].value if "IFS" in r.sh.vars and r.sh.vars["IFS"].items
         else " \t\n")
    unk = got.unk or cond or (None if ifs_v is not None else Unk(what, src, "IFS unknown"))
    if unk is not None or any(f.value is None for f in fields[1:]):
        unk = unk or next(f.unk for f in fields[1:] if f.value is None)
        for v, is_array in [(array, True)] * (array is not None) + [(x, False) for x in names]:
            why = f"{v} is read from text only known when the script runs ({unk.why})"
            r.sh.vars[v] = Var([Field(None, src, Unk(what, src, why), f"${{{v}[@]}}",
                                      extra=is_array)], is_array)
        return
    text = got.value
    if name != "read":
        lines = text.split(delim)
        if lines and lines[-1] == "":
            lines.pop()
        keep = "-t" not in [f.value for f in fields]
        items = [Field(x + (delim if keep else ""), src, text=what) for x in lines]
        r.hold(0, r.sh.vars.get(array), items[:MAX_ITEMS])
        r.sh.vars[array] = Var(items[:MAX_ITEMS], True)
        return
    raw = any(f.value and f.value[:1] == "-" and "r" in f.value for f in fields[1:])
    if not raw:
        text = text.replace("\\\n", "")  # a backslash-newline joins lines
    line = text.split(delim, 1)[0]
    if not raw:
        line = re.sub(r"\\(.)", r"\1", line, flags=re.S)
    words = _split(line, ifs_v)
    if array is not None:
        items = [Field(w, src, text=what) for w in words[:MAX_ITEMS]]
        r.hold(0, r.sh.vars.get(array), items)
        r.sh.vars[array] = Var(items, True)
    blank = ifs_v and not ifs_v.strip(" \t\n")  # IFS of blanks only: the rest is kept as is
    for k, v in enumerate(names):
        last = k == len(names) - 1
        if last and blank and len(words) > k:
            value = _rest(line, ifs_v, k)
        else:
            value = " ".join(words[k:]) if last else (words[k] if k < len(words) else "")
        r.set(v, value, None, src, cond, what, what)


def eval_(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    """``eval "A=(...)"``: a known string is parsed and run here; its words are not the
    file's text, so they carry no span."""
    if any(f.unk for f in fields[1:]):
        return
    code = " ".join(f.value for f in fields[1:])
    if not code.strip():
        return
    body = r.parse(code.encode("utf-8", "surrogateescape"), r.file, False, n.line)
    if r.calls >= MAX_CALL_DEPTH:  # not followed: what it may set is unknown from here on
        return r.too_deep("eval", n, body)
    r.calls += 1
    try:
        r.run(body, cond)
    finally:
        r.calls -= 1


def printf_v(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None) -> bool:
    if not (len(fields) > 2 and fields[1].value == "-v" and fields[2].value):
        return False  # plain printf prints: nothing to set
    """``printf -v NAME FORMAT ARGS``: only %s, %d and %% are formatted statically."""
    name, src = fields[2].value, r.src(n.line)
    r.sh.inherited.discard(name)
    expr = " ".join(f.text if f.unk else f.value for f in fields)
    bad = next((f.unk for f in fields[3:] if f.unk), None)
    value = None
    if bad is None and len(fields) > 3:
        value = printf(fields[3].value, [f.value for f in fields[4:]])
    if value is None and bad is None:
        bad = Unk(expr, src, f"{name} is formatted by printf at run time")
    r.set(name, value, bad, src, cond, expr, expr)
    return True


def source(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    args = fields[1:]
    if not args:
        return
    f = args[0]
    where = r.src(n.line)
    key = r.path_of(n.words[1]) if len(n.words) > 1 else None
    if key is not None and r.file_key(key) in r.sh.written:
        return r.run_written(r.file_key(key), n, cond)
    if f.value is None:
        r.unresolved.append(Unresolved(None, f.text, f.unk.src,
                                          f"cannot tell which file is sourced: {f.unk.why}"))
        return
    tried = []
    if f.value.startswith("/"):
        tried.append(os.path.normpath(f.value))
    else:
        if r.sh.cwd:
            tried.append(os.path.join(r.sh.cwd, f.value))
        here = os.path.dirname(r.stack[-1][0])
        tried.append(os.path.join(here, f.value))
        d = os.path.dirname(r.main_abs)
        while True:
            cand = os.path.join(d, f.value)
            if cand not in tried:
                tried.append(cand)
            up = os.path.dirname(d)
            if up == d:
                break
            d = up
    found = next((os.path.normpath(p) for p in tried if os.path.isfile(p)), None)
    if found is None and f.value.startswith("/"):
        found = _in_checkout(r, f.value)
        if found is not None:
            r.notes.append(note(
                "sourced-from-checkout", f"'{f.value}' does not exist here; read "
                f"{r.disp(found)} instead, the same path inside the script's checkout",
                "pass the real file's folder with --env, or source it relative to the "
                "script", where))
    if found is None:
        looked = "it does not exist, nor does its path's tail inside the script's folder or " \
            "the folders above it" if f.value.startswith("/") else \
            "looked for it relative to the script and the directories above it"
        r.missing.append(f"'{f.value}' (sourced at {where})")
        r.unresolved.append(Unresolved(
            None, n.words[1].text if len(n.words) > 1 else f.text, where,
            f"sourced file '{f.value}' not found ({looked}); the flags it defines are "
            "unknown"))
        return
    if len(r.stack) >= MAX_SOURCE_DEPTH or any(found == s for s, _ in r.stack):
        r.notes.append(note("source-cycle", f"'{f.value}' is sourced again while it is "
                               "being read; the nested read is skipped",
                               "source each model file once", where))
        return
    r.run_file(found, cond)


def _in_checkout(r: Reader, path: str) -> str | None:
    """``source /root/slime/scripts/models/glm4.sh`` read where it is not installed: the
    same tail (``scripts/models/glm4.sh``, at least a folder and the file) in the script's
    folder or one above it, the nearest folder and the longest tail first."""
    parts = os.path.normpath(path).strip("/").split("/")
    tails = [os.path.join(*parts[k:]) for k in range(1, len(parts) - 1)]
    d = os.path.dirname(r.main_abs)
    while True:
        for tail in tails:
            cand = os.path.join(d, tail)
            if os.path.isfile(cand):
                return os.path.normpath(cand)
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def _rest(line: str, ifs: str, k: int) -> str:
    """What ``read`` gives its last name: the line after k fields, IFS blanks trimmed at
    both ends (the blanks inside, newlines of a ``-d ''`` read too, are kept)."""
    ws = f"[{re.escape(ifs)}]+"
    rest = line.strip(ifs)
    for _ in range(k):
        rest = re.split(ws, rest, maxsplit=1)[1] if re.search(ws, rest) else ""
    return rest.strip(ifs)


def _split(text: str, ifs: str) -> list[str]:
    """Field splitting by IFS: IFS white space runs and each other IFS character delimit."""
    ws = "".join(c for c in ifs if c in " \t\n")
    other = "".join(c for c in ifs if c not in " \t\n")
    if not ifs:
        return [text] if text else []
    if not other:
        return re.split(f"[{re.escape(ws)}]+", text.strip(ws)) if text.strip(ws) else []
    text = text.strip(ws)
    if not text:
        return []
    out = [x.strip(ws) for x in re.split(f"[{re.escape(ws)}]*[{re.escape(other)}]", text)]
    if out and out[-1] == "":
        out.pop()
    return out


def nothing(r: Reader, fields: list[Field], n: syntax.Simple, cond: Unk | None):
    """``:``, ``true``, ``false``: no effect beyond their status (read by `status`)."""


BUILTINS = {
    ":": nothing, "true": nothing, "false": nothing,
    "source": source, ".": source, "set": set_, "unset": unset, "cd": cd, "printf": printf_v,
    "shift": shift, "read": read, "mapfile": read, "readarray": read, "break": jump,
    "continue": jump, "eval": eval_, "getopts": getopts,
}
