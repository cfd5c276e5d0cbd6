"""Hostile text for the sink's tests (tests/reporting/test_safetext.py, test_sink.py),
and the check that output holds none of it raw."""

from __future__ import annotations

import re

from hypothesis import strategies as st

# what an attacker writes: controls, ESC sequences, CR, workflow commands (both spellings),
# invisible, bidi and tag characters, lone surrogates, next to plain text
HOSTILE = ["\x1b[5;41m", "\x1b[2J", "\x1b]0;t\x07", "\r", "\n", "\x00", "\x7f", "\x85", "\x9b",
           "\t",
           "::error::x", "::add-mask::", "##[error]", "##[add-mask]", "##[stop-commands]",
           "#", "[", ":", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u061c", "\u00ad",
           "\u2060", "\u2061", "\u2064", "\ufeff", "\U000e0041", "\U000e007f", "\U000e0000",
           "\u202a", "\u202e", "\u2066", "\u2069", "\u2028", "\u2029", "\u00a0", "\ufe0f",
           "\udc80", "--tensor-model-parallel-size", " ", "a", "é", "%", ","]
hostile = st.lists(st.sampled_from(HOSTILE), max_size=12).map("".join)

# what may never appear raw in a line of text output
BAD = re.compile("[\x00-\x08\x0a-\x1f\x7f-\xa0\xad\u061c\u200b-\u200f\u2028-\u202e"
                 "\u2060-\u2069\ufe0f\ufeff\ud800-\udfff\U000e0000-\U000e0fff]")
NASTY = "".join(HOSTILE)


# the tool's own colours (safetext.COLORS; HOSTILE's ESC sequences are none of them)
OWN_COLOR = re.compile(r"\x1b\[(?:31|33|36|1;31|32|2|0)m")


def clean(out: str, tabs: bool = False, crlf: bool = False, commands: bool = False) -> None:
    """Assert no line of `out` holds a raw hostile character or a workflow command (a
    github-format line's own `::level ...::` framing aside; the tool's colours aside)."""
    for row in OWN_COLOR.sub("", out).split("\n"):
        if crlf:
            row = row.removesuffix("\r")
        bad = BAD.search(row.replace("\t", "") if tabs else row)
        assert bad is None, (bad, row)
        assert "##[" not in row, row
        if row.lstrip().startswith("::"):
            assert commands and re.match(r"::(error|warning|notice) [^:\n]*::", row), row
