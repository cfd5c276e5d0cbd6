"""Text from a launcher, a script or a YAML file, made safe to print.

`check` runs in CI on a pull request's files and its output is a log and annotations: a flag
name holding ESC sequences would drive the terminal, a newline followed by ``::error`` or
``::add-mask::`` would be a workflow command of its own (GitHub reads one at the start of any
log line). `printable` shows every control character (and the Unicode ones that move text:
line separators, bidirectional overrides) as a ``\\x1b``-style escape; `line` also keeps a
line from starting with ``::``. JSON and SARIF need neither: json.dumps escapes controls and
every line it writes starts with a quote or bracket.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
                      "\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_LEAD = re.compile(r"^(\s*):(?=:)")


def _escape(m: re.Match) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def printable(text: object, keep_newlines: bool = False) -> str:
    """`text` with each control character as an escape (`keep_newlines`: a newline stays,
    for a message of several lines whose every line is then passed through `line`)."""
    s = str(text)
    if keep_newlines:
        return "\n".join(_CONTROL.sub(_escape, part) for part in s.split("\n"))
    return _CONTROL.sub(_escape, s)


def line(text: str) -> str:
    """One output line that cannot be a workflow command: a leading ``::`` (after any
    spaces) has its first colon escaped. Controls are for `printable` to escape first."""
    return _LEAD.sub(lambda m: m.group(1) + "\\x3a", text)
