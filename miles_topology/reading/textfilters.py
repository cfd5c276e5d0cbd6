"""Pure text pipelines evaluated in Python: the answer `$(echo "$X" | tr ',' '\\n' | wc -l)` or
``nvidia-smi topo -m | grep -o 'NV[0-9]*' | wc -l`` would give, without running anything.

Launch scripts and Python launchers count GPUs and read probes through short pipelines of
coreutils filters. The bash reader (on known text) and the launcher sandbox (on a modelled
``nvidia-smi``) both need their output; this is the one place that knows what the filters do.
Each filter follows GNU coreutils/grep/sed/awk in the C locale (the behaviour is checked
against the real programs in tests/shell/test_textfilters.py). A command or option not modelled
makes the whole pipeline unknown (None): the caller reports the value unresolved, never
guessed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

LIMIT = 1 << 20  # bytes of text a filter may produce: the reader's string cap


@dataclass(frozen=True)
class Ran:
    """What a pipeline prints and its exit status (that of the last command, as bash's)."""

    stdout: str
    status: int


class _Unknown(Exception):
    """A command or option this module does not model."""


def run_pipeline(commands: Sequence[Sequence[str]], stdin: str = "") -> Ran | None:
    """The output of `commands` (each an argv list) piped one into the next, reading `stdin`;
    None when any command is not a text filter modelled here."""
    text, status = stdin, 0
    try:
        for argv in commands:
            if not argv or argv[0] not in FILTERS:
                return None
            text, status = FILTERS[argv[0]](list(argv[1:]), text)
            if len(text) > LIMIT:
                return None
    except (_Unknown, ValueError, IndexError, re.error):
        return None
    return Ran(text, status)


def _lines(text: str) -> list[str]:
    """Lines as the filters see them: a last line without a newline still counts."""
    out = text.split("\n")
    if out and out[-1] == "":
        out.pop()
    return out


def _join(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _options(args: list[str], flags: str, valued: str = "") -> tuple[dict[str, str], list[str]]:
    """getopt-style short options: `flags` take no value, `valued` take one (``-n5``, ``-n 5``).
    Anything else starting with '-' is not modelled."""
    opts: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest += args[i + 1:]
            break
        if len(a) > 1 and a[0] == "-" and not rest:
            j = 1
            while j < len(a):
                c = a[j]
                if c in valued:
                    value = a[j + 1:]
                    if not value:
                        i += 1
                        value = args[i]
                    opts[c] = value
                    break
                if c not in flags:
                    raise _Unknown(a)
                opts[c] = ""
                j += 1
        else:
            rest.append(a)
        i += 1
    return opts, rest


# ---------------------------------------------------------------- producers


def _echo(args: list[str], _stdin: str):
    newline = True
    while args and args[0] in ("-n", "-e", "-E", "-ne", "-en"):
        if "e" in args[0][1:]:
            raise _Unknown("echo -e")  # escapes: rare in launch scripts, not modelled
        newline = False
        args = args[1:]
    return " ".join(args) + ("\n" if newline else ""), 0


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "r": "\r", "a": "\a", "0": "\0", '"': '"',
            "'": "'"}


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), text)


def _printf(args: list[str], _stdin: str):
    """bash's printf: %s %d %i %% with widths and escapes; the format is reused while
    arguments remain, and printed once when it converts none."""
    if not args:
        raise _Unknown("printf")
    fmt, values = _unescape(args[0]), args[1:]
    spec = re.compile(r"%(-?\d*)([sdi%])")
    if re.search(r"%(?!-?\d*[sdi%])", fmt):
        raise _Unknown("printf conversion")
    converts = any(m.group(2) != "%" for m in spec.finditer(fmt))
    out, i = [], 0

    def sub(m):
        nonlocal i
        width, conv = m.group(1), m.group(2)
        if conv == "%":
            return "%"
        value = values[i] if i < len(values) else ""
        i += 1
        if conv in "di":
            value = str(int(value or "0", 10))
        align = "<" if width.startswith("-") else ">"
        return f"{value:{align}{width.lstrip('-') or 0}}"

    while True:
        out.append(spec.sub(sub, fmt))
        if not converts or i >= len(values):
            break
    return "".join(out), 0


def _cat(args: list[str], stdin: str):
    if any(a != "-" for a in args):
        raise _Unknown("cat FILE")  # files are the caller's to read
    return stdin, 0


# ---------------------------------------------------------------- filters


_CLASSES = {"[:upper:]": "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "[:lower:]": "abcdefghijklmnopqrstuvwxyz",
            "[:digit:]": "0123456789", "[:space:]": " \t\n\r\f\v", "[:blank:]": " \t"}


def _tr_set(spec: str) -> str:
    spec = _unescape(spec)
    for name, chars in _CLASSES.items():
        spec = spec.replace(name, chars)
    out, i = [], 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            out += [chr(c) for c in range(ord(spec[i]), ord(spec[i + 2]) + 1)]
            i += 3
        else:
            out.append(spec[i])
            i += 1
    return "".join(out)


def _tr(args: list[str], stdin: str):
    opts, sets = _options(args, "ds")
    if "d" in opts:
        gone = set(_tr_set(sets[0]))
        text = "".join(c for c in stdin if c not in gone)
        if "s" in opts:
            text = _squeeze(text, set(_tr_set(sets[1])))
        return text, 0
    if len(sets) == 1 and "s" in opts:
        return _squeeze(stdin, set(_tr_set(sets[0]))), 0
    a, b = _tr_set(sets[0]), _tr_set(sets[1])
    if not b:
        raise _Unknown("tr with an empty second set")
    b = b + b[-1] * (len(a) - len(b))
    text = stdin.translate({ord(x): y for x, y in zip(a, b)})
    if "s" in opts:
        text = _squeeze(text, set(b))
    return text, 0


def _squeeze(text: str, chars: set[str]) -> str:
    return re.sub("|".join(f"{re.escape(c)}{re.escape(c)}+" for c in chars),
                  lambda m: m.group(0)[0], text) if chars else text


def _wc(args: list[str], stdin: str):
    opts, files = _options(args, "lwcm")
    if files:
        raise _Unknown("wc FILE")
    counts = {"l": stdin.count("\n"), "w": len(stdin.split()), "c": len(stdin.encode()),
              "m": len(stdin)}
    asked = [k for k in "lwmc" if k in opts] or ["l", "w", "c"]
    if len(asked) == 1:
        return f"{counts[asked[0]]}\n", 0
    return " ".join(f"{counts[k]:7d}" for k in asked) + "\n", 0


def _ranges(spec: str) -> Callable[[int], bool]:
    """cut's LIST (1-based: N, N-M, N-, -M, comma-separated)."""
    parts = []
    for piece in spec.split(","):
        lo, dash, hi = piece.partition("-")
        parts.append((int(lo) if lo else 1, (int(hi) if hi else 1 << 62) if dash else int(lo)))
    return lambda i: any(lo <= i <= hi for lo, hi in parts)


def _cut(args: list[str], stdin: str):
    opts, files = _options(args, "s", "dfc")
    if files:
        raise _Unknown("cut FILE")
    out = []
    if "c" in opts:
        keep = _ranges(opts["c"])
        out = ["".join(c for i, c in enumerate(line, 1) if keep(i)) for line in _lines(stdin)]
    elif "f" in opts:
        delim = opts.get("d", "\t")
        if len(delim) != 1:
            raise _Unknown("cut -d with more than one character")
        keep = _ranges(opts["f"])
        for line in _lines(stdin):
            if delim not in line:
                if "s" not in opts:
                    out.append(line)
                continue
            out.append(delim.join(f for i, f in enumerate(line.split(delim), 1) if keep(i)))
    else:
        raise _Unknown("cut without -f or -c")
    return _join(out), 0


def _count_arg(args: list[str]) -> list[str]:
    """head/tail's old forms: -5 means -n 5."""
    return [("-n" + a[1:]) if re.fullmatch(r"-\d+", a) else a for a in args]


def _head(args: list[str], stdin: str):
    opts, files = _options(_count_arg(args), "", "nc")
    if files:
        raise _Unknown("head FILE")
    if "c" in opts:
        n = int(opts["c"])
        data = stdin.encode()
        return data[:n].decode(errors="replace"), 0  # a negative n: all but the last -n
    n = int(opts.get("n", "10"))
    lines = _lines(stdin)
    return _join(lines[:n]), 0


def _tail(args: list[str], stdin: str):
    opts, files = _options(_count_arg(args), "", "nc")
    if files or "c" in opts:
        raise _Unknown("tail FILE or -c")
    spec = opts.get("n", "10")
    lines = _lines(stdin)
    if spec.startswith("+"):
        return _join(lines[max(int(spec[1:]) - 1, 0):]), 0
    n = abs(int(spec))
    return _join(lines[-n:] if n else []), 0


def _number(line: str) -> float:
    m = re.match(r"\s*(-?\d+(\.\d*)?)", line)
    return float(m.group(1)) if m else 0.0


def _sort(args: list[str], stdin: str):
    """C-locale sort (byte order): the caller's locale may order letters otherwise, so only
    digits-and-ASCII text is taken as known by callers that care."""
    opts, files = _options(args, "nru")
    if files:
        raise _Unknown("sort FILE")
    lines = _lines(stdin)
    key = (lambda s: (_number(s), s.encode())) if "n" in opts else (lambda s: s.encode())
    lines = sorted(lines, key=key, reverse="r" in opts)
    if "u" in opts:
        seen, out = set(), []
        for line in lines:
            k = _number(line) if "n" in opts else line
            if k not in seen:
                seen.add(k)
                out.append(line)
        lines = out
    return _join(lines), 0


def _uniq(args: list[str], stdin: str):
    opts, files = _options(args, "cdu")
    if files:
        raise _Unknown("uniq FILE")
    runs: list[list] = []
    for line in _lines(stdin):
        if runs and runs[-1][0] == line:
            runs[-1][1] += 1
        else:
            runs.append([line, 1])
    if "d" in opts:
        runs = [r for r in runs if r[1] > 1]
    if "u" in opts:
        runs = [r for r in runs if r[1] == 1]
    return _join(f"{n:7d} {line}" if "c" in opts else line for line, n in runs), 0


_QUANT = re.compile(r"(?<!\\)(?:[*+]|\{\d*,?\d*\})")
MAX_QUANTIFIERS = 4


# The longest line a regex with k repeats is run over (Python's engine backtracks: each
# repeat can multiply the work by the line's length; `.*.*x` on 4,000 characters: 10 s).
LONGEST_LINE = {0: LIMIT, 1: 8192, 2: 1024}
LONGEST_LINE_MORE = 128


def _tame(rx: str, text: str = "") -> str:
    """A regex of the script's, refused (unknown) where Python's backtracking engine can take
    time exponential or of a high power in the line: a quantified group holding a quantifier
    or an alternation (``(a|aa)*b``, ``(a+)+``), a back-reference, more than
    MAX_QUANTIFIERS repeats (``.*.*.*.*.*x``), or a line of `text` longer than its repeats
    allow (LONGEST_LINE). Launch scripts' filters (``s/.*=//``, ``s/^ *//`` on a path or a
    number) pass."""
    k = len(_QUANT.findall(rx))
    if re.search(r"\\[1-9]", rx) or k > MAX_QUANTIFIERS:
        raise _Unknown("a regular expression that may backtrack without bound")
    if text and max(map(len, text.split("\n"))) > LONGEST_LINE.get(k, LONGEST_LINE_MORE):
        raise _Unknown("a regular expression over lines too long to match in bounded time")
    stack: list[bool] = []  # per open group: holds a repeat or an alternation
    i, n = 0, len(rx)
    while i < n:
        c = rx[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a bracket: nothing inside counts
            j = rx.find("]", i + 2)
            i = n if j < 0 else j + 1
            continue
        if c == "(":
            stack.append(False)
        elif c in "|*+{?" and stack and not (c == "?" and rx[i - 1] == "("):
            stack[-1] = True
        elif c == ")" and stack:
            inner = stack.pop()
            after = rx[i + 1:i + 2]
            if inner and after in ("*", "+", "{", "?"):
                raise _Unknown("a regular expression that may backtrack without bound")
            if stack:
                stack[-1] = stack[-1] or inner
        i += 1
    return rx


def _bre(pattern: str) -> str:
    r"""A POSIX basic regular expression (GNU flavour) as Python's: \( \) \{ \} \| \+ \? are the
    operators and their bare forms are literal."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            out.append(n if n in "(){}|+?" else "\\" + n)
            i += 2
            continue
        if c == "[":  # a bracket expression is copied whole
            j = i + 1
            if j < len(pattern) and pattern[j] == "^":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            j = pattern.index("]", j)
            out.append(_bracket(pattern[i:j + 1]))
            i = j + 1
            continue
        out.append("\\" + c if c in "(){}|+?" else c)
        i += 1
    return "".join(out)


def _bracket(expr: str) -> str:
    for name, chars in _CLASSES.items():
        expr = expr.replace(name, re.escape(chars) if name != "[:space:]" else r"\s")
    return expr


def _ere(pattern: str) -> str:
    return re.sub(r"\[(\^?\]?[^\]]*)\]", lambda m: _bracket(m.group(0)), pattern)


def _grep(args: list[str], stdin: str):
    opts, rest = _options(args, "covEFiwxqsnh", "em")
    if "n" in opts:
        raise _Unknown("grep -n")
    patterns = [opts["e"]] if "e" in opts else rest[:1]
    if len(rest) > (0 if "e" in opts else 1) or not patterns:
        raise _Unknown("grep FILE")
    src = patterns[0]
    rx = re.escape(src) if "F" in opts else _ere(src) if "E" in opts else _bre(src)
    if "w" in opts:
        rx = rf"(?<![\w])(?:{rx})(?![\w])"
    if "x" in opts:
        rx = rf"^(?:{rx})$"
    compiled = re.compile(_tame(rx, stdin), re.IGNORECASE if "i" in opts else 0)
    limit = int(opts["m"]) if "m" in opts else None
    out, count = [], 0
    for line in _lines(stdin):
        if limit is not None and count >= limit:
            break
        hit = compiled.search(line) is not None
        if hit == ("v" in opts):
            continue
        count += 1
        if "o" in opts and "v" not in opts:
            out += [m.group(0) for m in compiled.finditer(line) if m.group(0)]
        else:
            out.append(line)
    status = 0 if count else 1
    if "q" in opts:
        return "", status
    if "c" in opts:
        return f"{count}\n", status
    return _join(out), status


_AWK_ITEM = re.compile(r'\s*(\$(?:NF|\d+)|NR|NF|"[^"\\]*")\s*')


def _awk(args: list[str], stdin: str):
    """awk programs of the shape launch scripts use: ``[NR==K] {print ITEM[, ITEM]...}`` and
    ``END {print NR}``, ITEM being $N, $NF, NR, NF or a string; -F SEP."""
    opts, rest = _options(args, "", "F")
    if len(rest) != 1:
        raise _Unknown("awk with files")
    m = re.fullmatch(r"\s*(END|NR\s*==\s*(\d+))?\s*\{\s*print\s*(.*?)\s*;?\s*\}\s*", rest[0])
    if not m:
        raise _Unknown("awk program")
    items = [i for i in re.split(r",", m.group(3))] if m.group(3) else ["$0"]
    if not all(_AWK_ITEM.fullmatch(i) or i.strip() == "$0" for i in items):
        raise _Unknown("awk print item")
    sep = opts.get("F")
    lines = _lines(stdin)

    def fields_of(line: str) -> list[str]:
        if sep is None or sep == " ":
            return line.split()
        return line.split(sep) if len(sep) == 1 else re.split(_tame(sep, line), line)

    def value(item: str, line: str, nr: int) -> str:
        item = item.strip()
        fields = fields_of(line)
        if item == "$0":
            return line
        if item in ("NR", "NF"):
            return str(nr if item == "NR" else len(fields))
        if item.startswith('"'):
            return item[1:-1]
        k = len(fields) if item == "$NF" else int(item[1:])
        return line if k == 0 else fields[k - 1] if k <= len(fields) else ""

    if m.group(1) == "END":
        last = lines[-1] if lines else ""
        return " ".join(value(i, last, len(lines)) for i in items) + "\n", 0
    want = int(m.group(2)) if m.group(2) else None
    out = [" ".join(value(i, line, nr) for i in items)
           for nr, line in enumerate(lines, 1) if want in (None, nr)]
    return _join(out), 0


def _sed(args: list[str], stdin: str):
    """sed with one or more s/RE/REPLACEMENT/[g] expressions (-e, -E/-r)."""
    opts, rest = _options(args, "Er", "e")
    scripts = [opts["e"]] if "e" in opts else rest[:1]
    if len(rest) > (0 if "e" in opts else 1) or not scripts:
        raise _Unknown("sed FILE")
    out = _lines(stdin)
    for script in (s.strip() for s in scripts[0].split(";") if s.strip()):
        if len(script) < 2 or script[0] != "s":
            raise _Unknown("sed command other than s")
        d = script[1]
        parts = re.split(rf"(?<!\\){re.escape(d)}", script[2:])
        if len(parts) != 3 or parts[2] not in ("", "g"):
            raise _Unknown("sed s flags")
        rx = re.compile(_tame(_ere(parts[0]) if ("E" in opts or "r" in opts) else
                              _bre(parts[0]), "\n".join(out)))
        rep = re.sub(r"\\(\d)", r"\\g<\1>", parts[1].replace("&", r"\g<0>").replace(r"\&", "&"))
        out = [rx.sub(rep, line, count=0 if parts[2] == "g" else 1) for line in out]
    return _join(out), 0


def _xargs(args: list[str], stdin: str):
    if args:
        raise _Unknown("xargs COMMAND")
    words = stdin.split()
    return (" ".join(words) + "\n") if words else "\n", 0


def _seq(args: list[str], _stdin: str):
    """GNU seq over whole numbers: ``seq LAST``, ``seq FIRST LAST``, ``seq FIRST INCR LAST``
    (`--sglang-cuda-graph-bs 1 2 4 8 $(seq 16 8 256)` in slime's scripts); options and
    fractions are not modelled."""
    if not 1 <= len(args) <= 3 or any(not re.fullmatch(r"[+-]?[0-9]+", a) for a in args):
        raise _Unknown("seq with options or fractions")
    nums = [int(a) for a in args]
    first, step, last = (1, 1, nums[0]) if len(nums) == 1 else (nums[0], 1, nums[1]) \
        if len(nums) == 2 else nums
    if step == 0:
        return "", 1  # seq: invalid Zero increment value
    if (last - first) // step > LIMIT // 2:
        raise _Unknown("seq of more lines than the reader keeps")
    return _join(str(k) for k in range(first, last + (1 if step > 0 else -1), step)), 0


FILTERS: dict[str, Callable[[list[str], str], tuple[str, int]]] = {
    "echo": _echo, "printf": _printf, "cat": _cat, "tr": _tr, "wc": _wc, "cut": _cut,
    "head": _head, "tail": _tail, "sort": _sort, "uniq": _uniq, "grep": _grep, "awk": _awk,
    "sed": _sed, "xargs": _xargs, "seq": _seq,
}
