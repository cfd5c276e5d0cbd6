"""The one sink (safetext.py): whatever text an input chose, what the sink writes drives no
terminal, starts no CI workflow command and hides no character; JSON keeps values exact; a
diff keeps tabs and CRLF line ends; and nothing else in the package writes to stdout/stderr."""

from __future__ import annotations

import ast
import io
import json
import re

from hostile import BAD, NASTY, clean, hostile
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import ROOT

from miles_topology.reporting.safetext import Paint, Sink, printable


def sink(**kw) -> tuple[Sink, io.StringIO]:
    out = io.StringIO()
    return Sink(out, **kw), out


@settings(max_examples=300, deadline=None)
@given(st.lists(hostile, min_size=1, max_size=4), st.booleans())
@example([NASTY], True)
def test_a_line_of_hostile_parts_is_one_clean_line(parts, color):
    s, out = sink(color=color)
    s.line(*parts[:-1], Paint(parts[-1], "error"))
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    clean(re.sub(r"\x1b\[[0-9;]*m", "", text))  # the tool's own colour is all that is raw
    assert text.count("\x1b") in ((0, 2) if color else (0,))


@settings(max_examples=300, deadline=None)
@given(hostile)
@example(NASTY)
def test_text_status_and_commands_are_clean(text):
    s, out = sink()
    s.text(text)
    s.command("error", [("file", text), ("line", 3), ("title", text)], text)
    clean(out.getvalue(), commands=True)
    rows = out.getvalue().split("\n")
    assert rows[-2].startswith("::error file=") and ",line=3,title=" in rows[-2]
    s, out = sink()
    s.status(text)
    assert clean(out.getvalue().removeprefix("\r\x1b[K")) is None


@settings(max_examples=300, deadline=None)
@given(st.recursive(hostile | st.integers() | st.booleans() | st.none(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(hostile, inner, max_size=3), max_leaves=8))
@example({NASTY: [NASTY]})
def test_a_document_keeps_every_value_exact_in_clean_ascii(data):
    s, out = sink()
    s.document(data)
    text = out.getvalue()
    assert json.loads(text) == data  # invisible characters kept, json-escaped
    assert text.isascii()
    clean(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(hostile, max_size=6), st.booleans())
def test_a_diff_keeps_tabs_and_crlf_ends_and_escapes_the_rest(rows, crlf):
    end = "\r\n" if crlf else "\n"
    text = "".join(f"+x\t{r}{end}" for r in rows)
    s, out = sink()
    s.diff(text)
    got = out.getvalue()
    clean(got, tabs=True, crlf=True)
    assert got.count("\n") == text.count("\n")  # a newline inside a row is escaped
    plain = [r for r in rows if not BAD.search(r) and "##[" not in r and "\t" not in r]
    for r in plain:  # an ordinary row is written byte for byte, its line end too
        assert f"+x\t{r}{end}" in got


def test_invisible_and_bidi_characters_are_shown():
    assert printable("--tensor\u200b-model") == "--tensor\\u200b-model"
    assert printable("a\U000e0041\u061c\u00ad") == "a\\U000e0041\\u061c\\xad"
    assert printable("é 中文 ✓ │") == "é 中文 ✓ │"  # visible text stays as written
    s, out = sink()
    s.line("x ##[error] y", " ::notice::")
    assert out.getvalue() == "x ##\\x5berror] y ::notice::\n"  # :: only at a line's start


# ---------------------------------------------------------------- nothing bypasses it


def test_nothing_in_the_package_writes_to_stdout_or_stderr_but_the_sink():
    """No print(), sys.stdout/sys.stderr .write, os.write to fd 1/2 outside safetext.py; the
    sandbox's child (pylaunch/child.py) writes only its own protocol pipe, and the stand-ins
    (pylaunch/standins/: typer's help and usage errors) are the launcher's libraries: they
    print inside the sandbox, to pipes the checker reads as the launcher's output."""
    found = []
    for path in (ROOT / "miles_topology").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("miles_topology/reporting/safetext.py", "miles_topology/pylaunch/child.py") or \
                rel.startswith("miles_topology/pylaunch/standins/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = ast.unparse(node.func)
            if f == "print" or re.fullmatch(r"sys\.(stdout|stderr|__stdout__|__stderr__)"
                                           r"\.(write|writelines|buffer\.write)", f) or \
                    f == "os.write" and ast.unparse(node.args[0]) in ("1", "2"):
                found.append(f"{rel}:{node.lineno}: {f}")
    assert not found, found
