"""The one way out: every byte `miles-topology` prints goes through a `Sink`, which escapes
whatever an input chose.

`check` runs in CI on a pull request's files and its output is a log and annotations: a flag
name holding ESC sequences would drive the terminal; a CR would overwrite what the line said;
a line starting with ``::`` (``::error``, ``::add-mask::``, ``::stop-commands::``) is a
workflow command, and so is GitHub's legacy ``##[error]`` / ``##[add-mask]`` anywhere in a
line; an invisible or bidirectional character makes ``--tensor<U+200B>-model-parallel-size``
look like the real flag. So the text of a line is never written as is:

- `printable` shows each control (C0, C1, DEL, ESC, CR, tab), line and paragraph separator,
  invisible or format character (zero-width ones, soft hyphen, bidi marks, embeddings and
  isolates, tag characters U+E0000..U+E0FFF, variation selectors, fillers), unusual space and
  lone surrogate as a ``\\x1b`` / ``\\u200b`` / ``\\U000e0041`` escape;
- `line` then escapes a ``::`` that starts the line (after spaces) and the ``[`` of every
  ``##[``.

A `Sink` writes lines of parts (`Sink.line`): each ``str`` part is escaped; a `Paint` part is
the tool's own colour around escaped text. The GitHub format's ``::error ...::`` framing is
written by `Sink.command` (its properties and message %-encoded after escaping); JSON and
SARIF by `Sink.document`, which keeps every value exact (json-escaped, ASCII only, so an
invisible character is kept, written as ``\\u200b``, and ``##[`` as ``##\\u005b``). A
`--diff` is written by `Sink.diff`: a tab and a CRLF line end stay (the patch applies), any
other control is escaped. Nothing else in the package writes to stdout, stderr or a report
file (tests/reporting/test_safetext.py greps for it).
"""

from __future__ import annotations

import json
import re
import sys
from typing import IO

# Cc, Cf, Zl, Zp, Cs and the spaces but " " (Unicode 14), the tag and variation-selector
# planes, and the invisible letters and marks (fillers, grapheme joiner, braille blank)
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\xa0\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u1680\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u2800\u3000"
    "\u3164\ud800-\udfff\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\ufffe\uffff\U000110bd"
    "\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_LEAD = re.compile(r"^(\s*):(?=:)")
_LEGACY = re.compile(r"(?<=##)\[")  # GitHub's ##[command] is read anywhere in a line

# ANSI SGR colours of the text format on a terminal (no dependency: the core stays light)
COLORS = {"error": "31", "warning": "33", "skipped": "36", "note": "36", "INVALID": "1;31",
          "UNREADABLE": "1;31", "OK": "32", "nothing": "2"}


def _escape(m: re.Match) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def printable(text: object) -> str:
    """`text` with each control, invisible or bidi character as an escape."""
    return _CONTROL.sub(_escape, str(text))


def line(text: str) -> str:
    """One output line that cannot be a workflow command: a leading ``::`` (after any
    spaces) has its first colon escaped, and each ``##[`` its bracket. Controls are for
    `printable` to escape first."""
    return _LEGACY.sub("\\\\x5b", _LEAD.sub(lambda m: m.group(1) + "\\x3a", text))


def safe(text: object) -> str:
    """`printable`, then `line`: text that is one harmless line."""
    return line(printable(text))


class Paint(str):
    """A part of a `Sink.line` the tool colours (`what`: a key of COLORS) on a terminal;
    its text is escaped as any other."""

    what: str

    def __new__(cls, text: object, what: str) -> Paint:
        self = super().__new__(cls, str(text))
        self.what = what
        return self


class Sink:
    """Writes lines to one stream (stdout, stderr, --output-file); the only writer."""

    def __init__(self, stream: IO[str] | None = None, color: bool = False,
                 err: bool = False):
        self._stream, self.color, self.err = stream, color, err

    @property
    def stream(self) -> IO[str]:
        """The stream, looked up when written when none was given (a test's capture)."""
        if self._stream is not None:
            return self._stream
        return sys.stderr if self.err else sys.stdout

    def line(self, *parts: str) -> None:
        """One line of parts, each escaped (a newline in one is shown as ``\\n``); a line
        that `line` must change (a workflow command) loses its colour."""
        texts = [printable(p) for p in parts]
        plain = "".join(texts)
        safe_ = line(plain)
        if self.color and safe_ == plain:
            safe_ = "".join(f"\033[{COLORS[p.what]}m{t}\033[0m" if isinstance(p, Paint) and
                            p.what in COLORS else t for p, t in zip(parts, texts))
        self.stream.write(safe_ + "\n")

    def text(self, text: str, end: str = "\n") -> None:
        """Text of several lines, each escaped as a `line`; `end` after the last."""
        self.stream.write("\n".join(safe(x) for x in str(text).split("\n")) + end)

    def diff(self, text: str) -> None:
        """A unified diff: tabs and CRLF line ends kept (it applies), every other control and
        invisible character escaped, and ``##[`` on any line."""
        *rows, last = str(text).split("\n")
        out = [_diff_row(r[:-1]) + "\r" if r.endswith("\r") else _diff_row(r) for r in rows]
        self.stream.write("".join(x + "\n" for x in out) + (_diff_row(last) if last else ""))

    def document(self, data: object) -> None:
        """A JSON document: exact values, ASCII only, no ``##[`` (as ``##\\u005b``)."""
        self.stream.write(_LEGACY.sub("\\\\u005b", json.dumps(data, indent=2)) + "\n")

    def command(self, level: str, props: list[tuple[str, object]], message: str) -> None:
        """A GitHub workflow command ``::level k=v,...::message``: the framing is ours; each
        property and the message are escaped, then %-encoded as the runner reads them."""
        head = ",".join(f"{k}={_percent(v, True)}" for k, v in props)
        self.stream.write(f"::{level} {head}::{_percent(message)}\n")

    def status(self, text: str) -> None:
        """A progress line on a terminal: it replaces the one before (`clear`)."""
        self.stream.write(f"\r\033[K{safe(text)}")
        self.stream.flush()

    def clear(self) -> None:
        self.stream.write("\r\033[K")
        self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()


def _diff_row(text: str) -> str:
    return line("\t".join(printable(x) for x in text.split("\t")))


def _percent(text: object, prop: bool = False) -> str:
    """Escaped text %-encoded for a workflow command (a newline stays one, as %0A)."""
    text = "\n".join(safe(x) for x in str(text).split("\n"))
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


OUT = Sink()  # standard output, as it is when written (a test may capture it)
ERR = Sink(err=True)
