"""Bash syntax from tree-sitter-bash, as the small tree the interpreter walks.

tree-sitter parses the file (every real miles/slime launcher parses with no error node);
this module only turns its concrete syntax tree into a few plain node classes, with the
line of each node and the character span of each word (tree-sitter counts bytes; spans
count characters, so a rewrite of a UTF-8 script edits exactly the word). ERROR and
MISSING nodes become a `ShellSyntaxError` naming the line and a fix. tree_sitter itself
is imported on first use, so ``import miles_topology`` stays light.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import MISSING, dataclass, fields, replace
from functools import lru_cache

__all__ = ["ShellSyntaxError", "parse", "parse_word"]

MAX_DEPTH = 60  # nested $( ... ) / if / ${ ... }; far beyond real scripts, well below recursion
RESERVED = frozenset("then elif else fi do done esac in }".split())
DECLARE = frozenset("export declare local readonly typeset".split())
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = frozenset((":-", ":=", ":?", ":+", "-", "=", "?", "+", "##", "#", "%%", "%",
                  "//", "/#", "/%", "/", "^^", "^", ",,", ",", ":", "@"))
_EXPANSIONS = frozenset(("simple_expansion", "expansion", "command_substitution",
                         "arithmetic_expansion", "string", "raw_string", "ansi_c_string",
                         "translated_string", "process_substitution"))
_STATEMENTS = frozenset((
    "command", "declaration_command", "unset_command", "variable_assignment",
    "variable_assignments", "redirected_statement", "pipeline", "list", "negated_command",
    "if_statement", "case_statement", "for_statement", "c_style_for_statement",
    "while_statement", "function_definition", "compound_statement", "subshell", "test_command"))
_REDIRECTS = frozenset(("file_redirect", "herestring_redirect", "heredoc_redirect"))

_PARSER = None
_CR = "\ue000"  # a CR while parsing: a word character to tree-sitter, as to bash
_CR_BYTES = _CR.encode()
# a `[` tree-sitter-bash 0.25 reads as the opener of a test where bash runs the command `[`:
# in a function, `if` or `{ }` body, `[ "$A" -eq 1 ] || cmd > "$F"` followed by a `]` on a
# later line parses, with no error, as one test from that `[` to the later `]`, the commands
# between them inside it. Such a `[` is held as this byte (a word to tree-sitter; bash scripts
# hold none) and read back as `[`: the command `[ ... ]` that bash runs.
_LB = "\x01"
_LB_BYTES = _LB.encode()
_MISREAD = frozenset(("redirected_statement", "list", "pipeline", "command"))


def _parser():
    global _PARSER
    if _PARSER is None:
        import tree_sitter
        import tree_sitter_bash

        _PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    return _PARSER


class _Misread(Exception):
    """A test tree-sitter built around commands: its `[` (at byte `at`) is the command's."""

    def __init__(self, at: int):
        super().__init__(at)
        self.at = at


class ShellSyntaxError(Exception):
    """A script bash itself would reject (unterminated quote, array, if ... fi)."""

    def __init__(self, line: int, message: str, fix: str):
        super().__init__(message)
        self.line, self.message, self.fix = line, message, fix


# ---------------------------------------------------------------- the tree


def _node(cls):
    """A frozen, slotted dataclass built by keyword only, plus ``cls.make(**fields)``: the
    same node, built the way the parser builds ~10^5 of them a run. Calling a class with
    keywords packs them in a dict, and a frozen class sets each slot through
    ``object.__setattr__``: that made a parse ~35% slower than plain positional classes.
    `make` is a plain function (keywords passed without a dict) that fills a mutable twin
    with the same slots by direct stores, then gives it the frozen class (``__class__``
    assignment between identical slot layouts); `__init__` sets slots through one bound
    ``object.__setattr__`` for everyone else."""
    cls = dataclass(frozen=True, slots=True, kw_only=True)(cls)
    names = [f.name for f in fields(cls)]
    assert tuple(names) == cls.__slots__, cls  # the twin's layout must be the class's
    params = ", ".join(f.name if f.default is MISSING else f"{f.name}={f.default!r}"
                       for f in fields(cls))
    code = (f"def __init__(self, *, {params}):\n"
            + "".join(f"    _set(self, {n!r}, {n})\n" for n in names)
            + f"def make(*, {params}):\n    node = _Twin()\n"
            + "".join(f"    node.{n} = {n}\n" for n in names)
            + "    node.__class__ = _cls\n    return node\n")
    scope = {"_set": object.__setattr__, "_cls": cls,
             "_Twin": type(f"{cls.__name__}Draft", (), {"__slots__": cls.__slots__})}
    exec(code, scope)
    scope["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    scope["make"].__qualname__ = f"{cls.__qualname__}.make"
    cls.__init__, cls.make = scope["__init__"], staticmethod(scope["make"])
    return cls


@_node
class Lit:
    """Literal text; `quoted` text is never split into several words."""

    text: str
    quoted: bool
    line: int


@_node
class Param:
    """``$X`` / ``${X...}``: `op` is the operator (``:-``, ``#``, ``/`` ...) and `arg` its word;
    `index` is "@", "*", a Word, or None."""

    name: str
    index: object = None
    op: str | None = None
    arg: Word | None = None
    arg2: Word | None = None
    length: bool = False
    quoted: bool
    text: str
    line: int


@_node
class Sub:
    """``$(...)``, backquotes, or (`proc` set) a process substitution ``<(...)``."""

    body: list | None
    quoted: bool
    text: str
    line: int
    proc: str | None = None


@_node
class Arith:
    """``$((...))``; `expr` is a Word whose expansion is then evaluated as integers."""

    expr: Word
    quoted: bool
    text: str
    line: int


@_node
class Word:
    """`start`/`end`: character offsets of the word in the file (-1 when the word is not
    the file's own text, e.g. inside an ``eval`` string)."""

    parts: list
    line: int
    text: str
    start: int = -1
    end: int = -1

    def literal(self) -> str | None:
        """The word's text when it has no expansion at all (quotes removed)."""
        out = []
        for p in self.parts:
            if type(p) is not Lit:
                return None
            out.append(p.text)
        return "".join(out)


@_node
class Assign:
    """``X=v``, ``X+=v``, ``A=(...)``, ``A+=(...)``, ``A[i]=v`` (also after export/declare)."""

    name: str
    index: str | None = None
    append: bool = False
    value: Word | None = None
    array: list | None = None
    line: int
    text: str


@_node
class Simple:
    """A simple command. `start`: character offset where it begins (-1 when not the file's
    text); `line`/`end`: its first and last line; `stdin`: what a ``<<<`` word, ``< <(...)``
    or ``< FILE`` feeds it (a Word, a Sub, or the string "file"), else None; `prefix`: the
    ``X=1 cmd`` assignments; `stdout`: (Word, append) of a ``> FILE`` / ``>> FILE``."""

    assigns: list
    words: list
    line: int
    end: int
    start: int = -1
    stdin: object = None
    prefix: tuple = ()
    stdout: tuple | None = None


@_node
class Heredoc:
    """A here-document fed to a command: its body as written, and the body's first line.
    `word`: an unquoted delimiter's body as one double-quoted-like Word, expanded by the
    shell that feeds it; None when the delimiter is quoted (the text is literal)."""

    text: str
    line: int
    word: Word | None = None


@_node
class AndOr:
    """``a && b || c``: every item after the first runs only conditionally."""

    items: list


@_node
class Pipe:
    """``a | b``, or ``! a`` (`neg`): the status is the last command's, maybe negated."""

    cmds: list
    neg: bool = False


@_node
class If:
    branches: list
    orelse: list | None
    line: int


@_node
class Case:
    """`arms`: (patterns, body, more): `more` when the arm ends in ``;;&`` (the arms after
    it are tested too); one ending in ``;&`` has the next arm's body after its own."""

    word: Word
    arms: list
    line: int


@_node
class Loop:
    """A loop. `words`: the list of ``for NAME in WORDS`` (``"$@"`` when there is no ``in``);
    `header`: the (init, test, update) Words of ``for ((...))``, each None when empty, or
    `header` None when the header is not those three parts. `cond` (while/until): the test."""

    kind: str
    var: str | None
    body: list
    line: int
    words: list | None = None
    header: tuple | None = None
    cond: list | None = None


@_node
class ArithCmd:
    """``(( expr ))``: `expr` is a Word whose expansion is evaluated; true when nonzero."""

    expr: Word
    line: int
    text: str


@_node
class Func:
    name: str
    body: list
    line: int


@_node
class Group:
    body: list
    subshell: bool
    line: int


# ---------------------------------------------------------------- text helpers

_ESC = re.compile(r"\\(\n|.)", re.S)
_DQ_ESC = re.compile(r"\\([$`\"\\\n])")
_ANSI = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r", "e": "\x1b"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESC.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _dq_unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _DQ_ESC.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _ansi_c(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ANSI.get(m.group(1), m.group(0)), text)


class _Text:
    """One file's text as the converters see it: node text, positions (characters,
    lines; `base` is added to line numbers for eval strings), nesting depth and notes."""

    def __init__(self, data: bytes, located: bool, base: int):
        self.data = data
        self.crlf = _CR_BYTES in data
        self.held = False  # `[`s held as _LB (see _parse); None: the file holds _LB itself
        self.located = located
        self.base = base
        self.depth = 0
        self.notes: list[tuple[str, int, str, str]] = []
        # byte offset -> character offset, only where the text is not ASCII
        self.marks: list[int] = []
        self.extra: list[int] = []
        if not data.isascii():
            total, k = 0, 0
            text = data.decode("utf-8", "surrogateescape")
            for m in re.finditer(r"[^\x00-\x7f]+", text):
                k = m.start() + total
                for ch in m.group():
                    n = len(ch.encode("utf-8", "surrogateescape"))
                    k += n
                    total += n - 1
                    self.marks.append(k)
                    self.extra.append(total)

    def char(self, b: int) -> int:
        if not self.marks:
            return b
        k = bisect.bisect_right(self.marks, b)
        return b - (self.extra[k - 1] if k else 0)

    def text(self, n) -> str:
        return self.back(self.data[n.start_byte:n.end_byte].decode("utf-8", "replace"))

    def lead(self, n) -> int:
        """Blank bytes before an expansion's `$`: tree-sitter-bash 0.25.1 starts the second
        of two expansions a blank apart in a string at the blank (``"$A $B"``)."""
        k = n.start_byte
        while k < n.end_byte and self.data[k] in b" \t":
            k += 1
        return k - n.start_byte

    def expr(self, n) -> str:
        """An expansion's text, from its `$` (`lead`)."""
        return self.gap(n.start_byte + self.lead(n), n.end_byte)

    def gap(self, a: int, b: int) -> str:
        return self.back(self.data[a:b].decode("utf-8", "replace"))

    def back(self, got: str) -> str:
        """Text as bash has it: each held CR and `[` given back."""
        if self.crlf:
            got = got.replace(_CR, "\r")
        return got.replace(_LB, "[") if self.held else got

    def line(self, n) -> int:
        return n.start_point[0] + self.base

    def enter(self, n):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ShellSyntaxError(self.line(n), f"nesting deeper than {MAX_DEPTH} levels",
                                   "simplify the script")


class _Commands:
    """Statements, commands, redirections and compound commands (if, case, loops,
    functions, groups, tests) as nodes; their words through `words` (_Words)."""

    def __init__(self, src: _Text):
        self.src = src
        self.words = _Words(src, self)

    def stmts(self, children) -> list:
        out = []
        for c in children:
            if c.type in _STATEMENTS:
                out.append(self.stmt(c))
        return out

    def stmt(self, n):
        self.src.enter(n)
        try:
            return getattr(self, "s_" + n.type)(n)
        finally:
            self.src.depth -= 1

    def s_command(self, n, stdin=None, stdout=None):
        assigns, words, prefix = [], [], []
        prev = None  # the node of the last word
        for c in n.children:
            t = c.type
            if t == "variable_assignment":
                (assigns if not words else prefix).append(self.words.assign(c))
            elif t == "command_name":
                w = self.words.word(c.children[0]) if c.children else None
                if w is not None:
                    if w.text in RESERVED:
                        raise ShellSyntaxError(self.src.line(c), f"unexpected '{w.text}'",
                                               "remove it, or add the command that opens it")
                    words.append(w)
            elif t in _REDIRECTS:
                stdin = self.redirect(c) or stdin
                stdout = self.to_file(c) or stdout
            elif t == "subscript":  # A[i]=v parsed as part of a command: not one we model
                continue
            elif c.is_named and t != "comment":
                if words and prev is not None and prev.end_byte == c.start_byte:
                    words.append(self.words.glue(words.pop(), c))
                else:
                    words.append(self.words.word(c))
                prev = c
                continue
        if words:  # `cmd \ ` at a line end: bash passes the escaped blank as one more word
            m = _TRAILING_ESC.match(self.src.data, n.end_byte)
            if m:
                a, b = m.start(1), m.end(1)
                t = self.src.gap(a, b)
                at = (self.src.char(a), self.src.char(b)) if self.src.located else (-1, -1)
                line = self.src.line(n)
                words.append(Word.make(parts=[Lit.make(text=t[1:], quoted=True, line=line)],
                                       line=line, text=t, start=at[0], end=at[1]))
        if words:  # X=1 cmd: the assignments are the command's environment only
            prefix, assigns = assigns + prefix, []
        return Simple.make(assigns=assigns, words=words, line=self.src.line(n),
                      end=n.end_point[0] + self.src.base,
                      start=self.src.char(n.start_byte) if self.src.located else -1, stdin=stdin,
                      prefix=tuple(prefix), stdout=stdout)

    def s_declaration_command(self, n):
        assigns, words = [], []
        for c in n.children:
            t = c.type
            if t == "variable_assignment":
                assigns.append(self.words.assign(c))
            elif not c.is_named:
                words.append(self.words.word(c))  # the keyword
            elif t in _REDIRECTS:
                continue
            elif t != "comment":
                words.append(self.words.word(c))
        return Simple.make(assigns=assigns, words=words, line=self.src.line(n),
                      end=n.end_point[0] + self.src.base,
                      start=self.src.char(n.start_byte) if self.src.located else -1)

    s_unset_command = s_declaration_command

    def s_variable_assignment(self, n):
        return Simple.make(assigns=[self.words.assign(n)], words=[], line=self.src.line(n),
                      end=n.end_point[0] + self.src.base,
                      start=self.src.char(n.start_byte) if self.src.located else -1)

    def s_variable_assignments(self, n):
        assigns = [self.words.assign(c) for c in n.children if c.type == "variable_assignment"]
        return Simple.make(assigns=assigns, words=[], line=self.src.line(n),
                           end=n.end_point[0] + self.src.base,
                           start=self.src.char(n.start_byte) if self.src.located else -1)

    def s_redirected_statement(self, n):
        body, stdin, stdout = None, None, None
        for c in n.children:
            if c.type in _REDIRECTS:
                stdin = self.redirect(c) or stdin
                stdout = self.to_file(c) or stdout
            elif c.type in _STATEMENTS and body is None:
                body = c
        if body is None:
            return Simple.make(assigns=[], words=[], line=self.src.line(n),
                               end=n.end_point[0] + self.src.base)
        if body.type == "command":
            self.src.enter(body)
            try:
                return self.s_command(body, stdin, stdout)
            finally:
                self.src.depth -= 1
        got = self.stmt(body)
        if type(got) is Simple and stdin is not None and got.stdin is None:
            got = replace(got, stdin=stdin)
        if type(got) is Simple and stdout is not None and got.stdout is None:
            got = replace(got, stdout=stdout)
        return got

    def to_file(self, n):
        """(Word, append) when `n` sends standard output to a file (``>``, ``>>``, ``>|``)."""
        if n.type != "file_redirect" or any(c.type == "file_descriptor" and self.src.text(c) != "1"
                                            for c in n.children):
            return None
        op = next((c.type for c in n.children if not c.is_named), None)
        dest = [c for c in n.children if c.is_named and c.type != "file_descriptor"]
        if op not in (">", ">>", ">|") or not dest:
            return None
        return self.words.word(dest[-1]), op == ">>"

    def redirect(self, n):
        kids = n.children
        if n.type == "heredoc_redirect":
            body = next((c for c in kids if c.type == "heredoc_body"), None)
            if body is None:
                return Heredoc.make(text="", line=self.src.line(n) + 1)
            start = next((c for c in kids if c.type == "heredoc_start"), None)
            if start is not None and any(q in self.src.text(start) for q in "'\"\\"):
                return Heredoc.make(text=self.src.text(body), line=self.src.line(body))
            parts: list = []
            pos, line = body.start_byte, self.src.line(body)
            if body.has_error:  # its expansions are not read here (_only_in_heredocs)
                text = self.src.text(body)
                return Heredoc.make(text=text, line=line, word=Word.make(parts=[Sub.make(
                    body=None, quoted=True, text=text, line=line)], line=line, text=text))
            for c in body.children:
                if c.type == "heredoc_content":
                    continue
                if c.start_byte > pos:
                    parts.append(Lit.make(text=_dq_unescape(self.src.gap(pos, c.start_byte)),
                                          quoted=True, line=line))
                self.words.parts(c, True, parts)
                pos = c.end_byte
            if body.end_byte > pos:
                parts.append(Lit.make(text=_dq_unescape(self.src.gap(pos, body.end_byte)),
                                      quoted=True, line=line))
            word = Word.make(parts=parts, line=line, text=self.src.text(body))
            return Heredoc.make(text=self.src.text(body), line=line, word=word)
        if n.type == "herestring_redirect":
            arg = [c for c in kids if c.is_named]
            return self.words.word(arg[-1]) if arg else None
        if n.type == "file_redirect" and any(c.type == "<" for c in kids):
            dest = [c for c in kids if c.is_named and c.type != "file_descriptor"]
            if dest and dest[-1].type == "process_substitution":
                return self.words.sub(dest[-1], False)
            return "file"
        return None

    def s_pipeline(self, n):
        cmds = self.stmts(n.children)
        if len(cmds) > 1 and type(cmds[0]) is Pipe and cmds[0].neg and len(cmds[0].cmds) == 1:
            # tree-sitter reads `! a | b` as (! a) | b; bash negates the whole pipeline
            return Pipe.make(cmds=cmds[0].cmds + cmds[1:], neg=True)
        return cmds[0] if len(cmds) == 1 else Pipe.make(cmds=cmds)

    def s_negated_command(self, n):
        return Pipe.make(cmds=self.stmts(n.children), neg=True)

    def s_list(self, n):
        items, op = [], None
        for c in n.children:
            if c.type in ("&&", "||"):
                op = c.type
            elif c.type in _STATEMENTS:
                got = self.stmt(c)
                if type(got) is AndOr and not items:
                    items.extend(got.items)
                else:
                    items.append((op, got))
        return items[0][1] if len(items) == 1 else AndOr.make(items=items)

    def s_if_statement(self, n):
        branches, orelse = [], None
        cond, body, part = [], [], "cond"
        for c in n.children:
            t = c.type
            if t == "then":
                part = "body"
            elif t == "elif_clause":
                ec, eb, p = [], [], "cond"
                for d in c.children:
                    if d.type == "then":
                        p = "body"
                    elif d.type in _STATEMENTS:
                        (ec if p == "cond" else eb).append(self.stmt(d))
                branches.append((ec, eb))
            elif t == "else_clause":
                orelse = self.stmts(c.children)
            elif t in _STATEMENTS:
                (cond if part == "cond" else body).append(self.stmt(c))
        return If.make(branches=[(cond, body)] + branches, orelse=orelse, line=self.src.line(n))

    def s_case_statement(self, n):
        word, arms = None, []
        for c in n.children:
            if c.type == "case_item":
                pats, body, seen, end = [], [], False, ";;"
                for d in c.children:
                    if d.type == ")":
                        seen = True
                    elif not seen and d.is_named and d.type != "comment":
                        pats.append(self.words.word(d))
                    elif seen and d.type in _STATEMENTS:
                        body.append(self.stmt(d))
                    elif d.type in (";&", ";;&"):
                        end = d.type
                arms.append((pats, body, end))
            elif c.is_named and word is None and c.type != "comment":
                word = self.words.word(c)
        for k in range(len(arms) - 2, -1, -1):  # `;&`: the next arm's body runs too
            pats, body, end = arms[k]
            if end == ";&":
                arms[k] = (pats, body + arms[k + 1][1], arms[k + 1][2])
        arms = [(pats, body, end == ";;&") for pats, body, end in arms]
        line = self.src.line(n)
        return Case.make(word=word or Word.make(parts=[], line=line, text=""), arms=arms,
                         line=line)

    def s_for_statement(self, n):
        var, body, words, listed = None, [], [], False
        for c in n.children:
            if c.type == "variable_name" and var is None:
                var = self.src.text(c)
            elif c.type == "in":
                listed = True
            elif c.type == "do_group":
                body = self.stmts(c.children)
            elif listed and c.is_named and c.type != "comment":
                words.append(self.words.word(c))
        if not listed:  # for NAME; do ...: the positional arguments
            line = self.src.line(n)
            words = [Word.make(parts=[Param.make(name="@", quoted=True, text='"$@"', line=line)],
                          line=line, text='"$@"')]
        return Loop.make(kind="for", var=var, body=body, line=self.src.line(n), words=words)

    def s_c_style_for_statement(self, n):
        body = next((self.stmts(c.children) for c in n.children
                     if c.type in ("do_group", "compound_statement")), [])
        kids = n.children
        opened = next((c for c in kids if c.type == "(("), None)
        closed = next((c for c in kids if c.type == "))"), None)
        header = None
        if opened is not None and closed is not None:
            semis = [c for c in kids if c.type == ";" and
                     opened.end_byte <= c.start_byte and c.end_byte <= closed.start_byte]
            if len(semis) == 2:
                cuts = [opened.end_byte, semis[0].start_byte, semis[0].end_byte,
                        semis[1].start_byte, semis[1].end_byte, closed.start_byte]
                header = tuple(self.words.region(n, cuts[k], cuts[k + 1], True)
                               if self.src.gap(cuts[k], cuts[k + 1]).strip() else None
                               for k in (0, 2, 4))
        return Loop.make(kind="for", var=None, body=body, line=self.src.line(n), words=None,
                         header=header)

    def s_while_statement(self, n):
        kind = n.children[0].type if n.children else "while"
        cond, body = [], []
        for c in n.children:
            if c.type == "do_group":
                body = self.stmts(c.children)
            elif c.type in _STATEMENTS:
                cond.append(self.stmt(c))
        return Loop.make(kind=kind, var=None, body=cond + body, line=self.src.line(n), cond=cond)

    def s_function_definition(self, n):
        name = next((self.src.text(c) for c in n.children if c.type == "word"), "")
        body = next((c for c in reversed(n.children) if c.type in _STATEMENTS), None)
        empty = Group.make(body=[], subshell=False, line=0)
        return Func.make(name=name, body=self.stmt(body) if body is not None else empty,
                    line=self.src.line(n))

    def s_compound_statement(self, n):
        kids = n.children
        if kids and kids[0].type == "((":  # ((...)): arithmetic only
            b = kids[-1].start_byte if len(kids) > 1 and kids[-1].type == "))" else n.end_byte
            return ArithCmd.make(expr=self.words.region(n, kids[0].end_byte, b, True),
                                 line=self.src.line(n), text=self.src.text(n))
        return Group.make(body=self.stmts(n.children), subshell=False, line=self.src.line(n))

    def s_subshell(self, n):
        return Group.make(body=self.stmts(n.children), subshell=True, line=self.src.line(n))

    def s_test_command(self, n):
        """``[ ... ]`` / ``[[ ... ]]`` as the words of a command, operators included."""
        if self.src.held is not None and n.children and n.children[0].type == "[" and \
                any(c.type in _MISREAD for c in n.children):
            raise _Misread(n.start_byte)
        words: list[Word] = []
        stack = [n]
        while stack:
            c = stack.pop()
            if c.type in ("binary_expression", "unary_expression", "parenthesized_expression",
                          "test_command", "negated_expression", "postfix_expression",
                          "ternary_expression"):
                stack.extend(reversed(c.children))
            elif c.type == "comment":
                continue
            elif c.type in _EXPANSIONS or c.type in ("word", "number", "concatenation",
                                                      "variable_name", "extglob_pattern",
                                                      "regex"):
                words.append(self.words.word(c))
            else:
                t = self.src.text(c)
                words.append(Word.make(parts=[Lit.make(text=t, quoted=True, line=self.src.line(c))],
                                  line=self.src.line(c), text=t))
        return Simple.make(assigns=[], words=words, line=self.src.line(n),
                           end=n.end_point[0] + self.src.base,
                           start=self.src.char(n.start_byte) if self.src.located else -1)


class _Words:
    """Words (literals, quoting, parameter, command and arithmetic expansions) and
    assignments as nodes; a command substitution's body through `cmds` (_Commands)."""

    def __init__(self, src: _Text, cmds: _Commands):
        self.src, self.cmds = src, cmds

    def assign(self, n) -> Assign:
        kids = n.children
        name, index, append, value = "", None, False, None
        eq_end = n.end_byte
        for c in kids:
            t = c.type
            if t == "variable_name" and not name:
                name = self.src.text(c)
            elif t == "subscript" and not name:
                for d in c.children:
                    if d.type == "variable_name":
                        name = self.src.text(d)
                    elif d.is_named:
                        index = self.src.text(d)
            elif t in ("=", "+="):
                append = t == "+="
                eq_end = c.end_byte
            elif c.is_named and t != "comment":
                value = c
        line = self.src.line(n)
        if value is not None and value.type == "array":
            items: list = []
            prev = None
            for c in value.children:
                if not c.is_named or c.type == "comment":
                    continue
                if items and type(items[-1]) is Word and prev is not None and \
                        prev.end_byte == c.start_byte:
                    items.append(self.glue(items.pop(), c))
                else:
                    items.append(self.element(c))
                prev = c
            return Assign.make(name=name, index=None, append=append, value=None, array=items,
                               line=line, text=self.src.gap(n.start_byte, eq_end))
        word = self.word(value) if value is not None else Word.make(parts=[], line=line, text="")
        return Assign.make(name=name, index=index, append=append, value=word, array=None, line=line,
                      text=self.src.text(n))

    def element(self, n):
        """An array element: a Word, or (key, Word) for ``[key]=value``."""
        if n.type == "concatenation":
            kids = n.children
            if len(kids) >= 3 and kids[0].type == "word" and self.src.text(kids[0]) == "[":
                close = next((k for k, c in enumerate(kids) if k and self.src.text(c) == "]"), None)
                if close is not None and close + 1 < len(kids):
                    eq = kids[close + 1]
                    if self.src.data[eq.start_byte:eq.start_byte + 1] == b"=":
                        key = self.src.gap(kids[0].end_byte, kids[close].start_byte)
                        value = self.region(n, eq.start_byte + 1, n.end_byte, False, kids)
                        return (key, value)
        return self.word(n)

    # -- words

    def glue(self, prev: Word, n) -> Word:
        """`prev` and node `n`, which follows it with no blank between, as one word: bash
        reads one word where tree-sitter-bash makes two, as in ``[0]*$N+[1]*$M`` (it ends
        the first at a bare ``$``, which expands the name that starts `n`)."""
        parts = list(prev.parts)
        more: list = []
        self.parts(n, False, more)
        last = parts[-1] if parts else None
        if type(last) is Lit and not last.quoted and last.text.endswith("$") and more and \
                type(more[0]) is Lit and not more[0].quoted and \
                self.src.data[n.start_byte - 1:n.start_byte] == b"$":
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]", more[0].text)
            if m:
                if last.text == "$":
                    parts.pop()
                else:
                    parts[-1] = Lit.make(text=last.text[:-1], quoted=False, line=last.line)
                parts.append(Param.make(name=m.group(), quoted=False,
                                   text="$" + m.group(), line=more[0].line))
                rest = more[0].text[m.end():]
                more = ([Lit.make(text=rest, quoted=False,
                             line=more[0].line)] if rest else []) + more[1:]
        text = prev.text + self.src.text(n)
        if not self.src.located:
            return Word.make(parts=parts + more, line=prev.line, text=text)
        return Word.make(parts=parts + more, line=prev.line, text=text, start=prev.start,
                    end=self.src.char(n.end_byte))

    def word(self, n) -> Word:
        parts: list = []
        self.parts(n, False, parts)
        a, b = n.start_byte, n.end_byte
        text = parts[0].text if len(parts) == 1 and n.type == "word" and \
            len(parts[0].text) == b - a else self.src.data[a:b].decode("utf-8", "replace")
        text = self.src.back(text)
        line = parts[0].line if parts else self.src.line(n)
        if not self.src.located:
            return Word.make(parts=parts, line=line, text=text)
        if self.src.marks:
            a, b = self.src.char(a), self.src.char(b)
        return Word.make(parts=parts, line=line, text=text, start=a, end=b)

    def parts(self, n, quoted: bool, out: list):
        t = n.type
        line = n.start_point[0] + self.src.base
        if t == "word" or t == "number":
            text = self.src.back(self.src.data[n.start_byte:n.end_byte].decode("utf-8", "replace"))
            out.append(Lit.make(text=_unescape(text) if "\\" in text else text, quoted=quoted,
                           line=line))
        elif t == "string" or t == "translated_string":
            self.string(n, line, out)
        elif t == "raw_string":
            out.append(Lit.make(text=self.src.text(n)[1:-1], quoted=True, line=line))
        elif t == "ansi_c_string":
            out.append(Lit.make(text=_ansi_c(self.src.text(n)[2:-1]), quoted=True, line=line))
        elif t == "concatenation":
            pos = n.start_byte
            for c in n.children:
                if c.start_byte > pos:
                    out.append(Lit.make(text=_unescape(self.src.gap(pos, c.start_byte)),
                                        quoted=quoted, line=line))
                self.parts(c, quoted, out)
                pos = c.end_byte
        elif t == "simple_expansion":
            text = self.src.expr(n)
            out.append(Param.make(name=text[1:], quoted=quoted, text=text, line=line))
        elif t == "expansion":
            self.src.enter(n)
            try:
                out.append(self.expansion(n, quoted))
            finally:
                self.src.depth -= 1
        elif t == "command_substitution" and _misread_arith(n, self.src.expr(n)):
            # tree-sitter-bash 0.25.1 reads ``${X:-$((A - B))}`` as $( (A - B) ); bash reads
            # ``$((`` as arithmetic whenever it can
            self.src.enter(n)
            try:
                a = n.start_byte + self.src.lead(n) + 3
                out.append(Arith.make(expr=self.region(n, a, n.end_byte - 2, True),
                                 quoted=quoted, text=self.src.expr(n), line=line))
            finally:
                self.src.depth -= 1
        elif t == "command_substitution":
            out.append(self.sub(n, quoted))
        elif t == "process_substitution":
            out.append(self.sub(n, quoted))
        elif t == "arithmetic_expansion":
            self.src.enter(n)
            try:
                a = n.children[0].end_byte if n.children else n.start_byte
                b = n.children[-1].start_byte if len(n.children) > 1 else n.end_byte
                out.append(Arith.make(expr=self.region(n, a, b, True), quoted=quoted,
                                 text=self.src.expr(n), line=line))
            finally:
                self.src.depth -= 1
        elif t == "$" and self.src.text(n) == "$$":  # ends a concatenation: still the pid
            out.append(Param.make(name="$", quoted=quoted, text="$$", line=line))
        else:
            out.append(Lit.make(text=_unescape(self.src.text(n)), quoted=quoted, line=line))

    def string(self, n, line: int, out: list):
        """``"..."`` / ``$"..."``: its text and expansions, all quoted."""
        kids = [c for c in n.children if c.type not in ('"', '$"')]
        pos = n.start_byte + (2 if n.type == "translated_string" else 1)
        end = n.end_byte - 1
        before = len(out)
        for c in kids:
            start = c.start_byte + (self.src.lead(c) if c.type != "string_content" else 0)
            if start > pos:
                out.append(Lit.make(text=_dq_unescape(self.src.gap(pos, start)), quoted=True,
                               line=line))
            if c.type == "string_content":
                out.append(Lit.make(text=_dq_unescape(self.src.text(c)), quoted=True, line=line))
            else:
                self.parts(c, True, out)
            pos = c.end_byte
        if end > pos:
            out.append(Lit.make(text=_dq_unescape(self.src.gap(pos, end)), quoted=True, line=line))
        if len(out) == before:
            out.append(Lit.make(text="", quoted=True, line=line))

    def sub(self, n, quoted: bool) -> Sub:
        self.src.enter(n)
        try:
            body = self.cmds.stmts(n.children)
        finally:
            self.src.depth -= 1
        proc = self.src.text(n)[:2] if n.type == "process_substitution" else None
        return Sub.make(body=body, quoted=quoted, text=self.src.expr(n), line=self.src.line(n),
                        proc=proc)

    def region(self, n, a: int, b: int, quoted: bool, kids=None, line=None) -> Word:
        """Bytes [a, b) of `n` as one word: expansions inside it, the text between literal."""
        parts: list = []
        if line is None:
            line = self.src.line(n)
        pos = a
        if kids is None:
            kids = n.children
        inner = [c for c in kids if c.end_byte > a and c.start_byte < b]
        if len(inner) == 1 and inner[0].start_byte == a and inner[0].end_byte == b and \
                inner[0].type in ("word", "number"):
            text = self.src.gap(a, b)
            lit = Lit.make(text=_unescape(text), quoted=quoted, line=line)
            return Word.make(parts=[lit], line=line, text=text)
        stack = list(reversed(kids))
        while stack:
            c = stack.pop()
            if c.end_byte <= a or c.start_byte >= b:
                continue
            if c.type in _EXPANSIONS:
                if c.start_byte > pos:
                    parts.append(Lit.make(text=_unescape(self.src.gap(pos, c.start_byte)),
                                          quoted=quoted, line=line))
                self.parts(c, quoted, parts)
                pos = c.end_byte
            else:
                stack.extend(reversed(c.children))
        if b > pos:
            parts.append(Lit.make(text=_unescape(self.src.gap(pos, b)), quoted=quoted, line=line))
        return Word.make(parts=parts, line=line, text=self.src.gap(a, b))

    def expansion(self, n, quoted: bool) -> Param:
        allk = n.children
        line = n.start_point[0] + self.src.base
        kids = allk[1:-1] if len(allk) >= 2 else []
        name, index, length, bad = "", None, False, False
        ops: list = []  # operator nodes after the name
        k = 0
        if kids and kids[0].type == "#" and len(kids) > 1:
            length, k = True, 1
        elif kids and kids[0].type == "!":
            bad, k = True, 1
        if k < len(kids):
            c = kids[k]
            if c.type in ("variable_name", "special_variable_name"):
                name, k = self.src.text(c), k + 1
            elif c.type == "subscript":
                k += 1
                for d in c.children:
                    if d.type == "variable_name":
                        name = self.src.text(d)
                    elif d.is_named:
                        ix = self.src.text(d)
                        index = ix if ix in ("@", "*") else self.word(d) \
                            if d.type in _EXPANSIONS or d.type in ("word", "number") \
                            else self.region(d, d.start_byte, d.end_byte, True)
        if not name and len(kids) == 1 and kids[0].type == "#":
            name = "#"
        rest = kids[k:]
        for c in rest:
            if not c.is_named:
                ops.append(c)
        op = arg = arg2 = None
        if ops:
            op = ops[0].type
            end = allk[-1].start_byte
            if op in ("/", "//", "/#", "/%") and len(ops) > 1:
                arg = self.region(n, ops[0].end_byte, ops[1].start_byte, quoted, allk, line)
                arg2 = self.region(n, ops[1].end_byte, end, quoted, allk, line)
            else:
                arg = self.region(n, ops[0].end_byte, end, quoted, allk, line)
            if op not in _OPS:
                op = "?bad"
        elif rest:
            op = "?bad"
        if bad or not name:
            op = "?bad"
        return Param.make(name=name, index=index, op=op, arg=arg, arg2=arg2, length=length,
                     quoted=quoted, text=self.src.expr(n), line=line)


# ---------------------------------------------------------------- errors

_MISSING = {
    ")": "'(' is never closed by ')'", "}": "'{' is never closed by '}'",
    "fi": "'if' is not closed by 'fi'", "done": "the loop is not closed by 'done'",
    "esac": "'case' is never closed by 'esac'", "`": "unterminated backquote `",
    '"': "unterminated double quote", "]]": "'[[' is not closed by ']]'",
    "]": "'[' is not closed by ']'", "))": "unterminated arithmetic, missing '))'",
}
_OPENERS = {"array": "array '(' is never closed by ')'",
            "command_substitution": "'$(' is never closed by ')'",
            "expansion": "unterminated ${...}, missing '}'",
            "arithmetic_expansion": "unterminated arithmetic $((...)), missing '))'",
            "subshell": "'(' is never closed by ')'"}


def _error(root, conv: _Text) -> ShellSyntaxError:
    stack = [root]
    while stack:
        n = stack.pop()
        if n.is_missing or n.type == "ERROR":
            break
        if n.has_error:
            stack.extend(reversed(n.children))
    else:  # pragma: no cover - has_error promised a node
        return ShellSyntaxError(1, "bash cannot parse this script", "check its syntax")
    if n.is_missing:
        p = n.parent
        msg = _MISSING.get(n.type) if n.type != ")" and n.type != "}" else None
        msg = msg or (_OPENERS.get(p.type) if p is not None else None)
        msg = msg or _MISSING.get(n.type, f"missing '{n.type}'")
        at = p if p is not None else n
        return ShellSyntaxError(conv.line(at), msg, f"add the missing '{n.type}' "
                                "(or remove the unbalanced opener)")
    text = conv.text(n)
    lead = text.lstrip()
    kinds = [c.type for c in n.children]
    line = conv.line(n) + text[:len(text) - len(lead)].count("\n")
    if lead.startswith('"') or '"' in kinds[:1]:
        return ShellSyntaxError(line, "unterminated double quote",
                                'close the quote with " (look for a stray " on this line)')
    if lead.startswith("'"):
        return ShellSyntaxError(line, "unterminated single quote",
                                "close the quote with ' (or remove it)")
    if lead.startswith("`"):
        return ShellSyntaxError(line, "unterminated backquote `", "close it with ` or use $(...)")
    if "$((" in kinds:
        if lead.endswith("))") and "\n" not in lead:
            return ShellSyntaxError(line, f"bash cannot evaluate the arithmetic '{lead[:40]}'",
                                    "complete the expression")
        return ShellSyntaxError(line, "unterminated arithmetic, missing '))'",
                                "close it with '))'")
    if "case" in kinds:
        return ShellSyntaxError(line, "'case' is never closed by 'esac'", "add 'esac'")
    for opener, closer in (("if", "fi"), ("for", "done"), ("while", "done"), ("until", "done")):
        if opener in kinds and closer not in kinds:
            return ShellSyntaxError(line, f"'{opener}' is not closed by '{closer}'",
                                    f"add the missing '{closer}'")
    shown = lead.split("\n", 1)[0][:30] or text[:1]
    return ShellSyntaxError(line, f"unexpected '{shown}'",
                            "remove it or balance it (quotes, brackets, if/fi, case/esac)")


_SPACE_CONT = re.compile(rb"\\[ \t]+\r?\n")
_TRAILING_ESC = re.compile(rb"[ \t]*(\\[ \t])[ \t]*\r?(?:\n|$)")


def _space_notes(root, conv: _Text):
    """``\\`` then spaces at the end of a line escapes a space; the command ends there."""
    for m in _SPACE_CONT.finditer(conv.data):
        at = root.descendant_for_byte_range(m.start(), m.start() + 1)
        if at is not None and at.type in ("comment", "string_content", "raw_string",
                                          "heredoc_body", "heredoc_content", "string"):
            continue
        line = conv.data.count(b"\n", 0, m.start()) + conv.base
        conv.notes.append((
            "space-after-line-continuation", line,
            f"line {line} ends in '\\' followed by spaces, so the '\\' escapes a space "
            "instead of continuing the line; the command ends on this line",
            f"delete the spaces after the '\\' at the end of line {line}"))


def parse(data: bytes, located: bool = True, base_line: int = 1) -> tuple[list, list]:
    """Parse a whole script; returns (commands, notes). Raises ShellSyntaxError.

    `located`: words carry their character spans in `data` (False for eval strings).
    The nodes are never changed once built, so the same text (a model file sourced by many
    scripts, a script a migration reads again after each step) is parsed once.
    """
    if len(data) <= 1 << 20:
        return _cached(data, located, base_line)
    return _parse(data, located, base_line)


@lru_cache(maxsize=4)
def _cached(data: bytes, located: bool, base_line: int) -> tuple[list, list]:
    return _parse(data, located, base_line)


def _parse(data: bytes, located: bool, base_line: int) -> tuple[list, list]:
    cr = data.find(b"\r")
    if cr >= 0:
        cr_line = data.count(b"\n", 0, cr) + base_line
        data = _hold_cr(data)
    data = _end_continued(_blank_comments(data))
    held: bool | None = None if _LB_BYTES in data else False
    while True:
        root = _parser().parse(data).root_node
        conv = _Text(data, located, base_line)
        conv.held = held
        if root.has_error and not _only_in_heredocs(root):
            raise _error(root, conv)
        try:
            body = _Commands(conv).stmts(root.children)
            break
        except _Misread as e:  # read again with that `[` held as a word
            data, held = data[:e.at] + _LB_BYTES + data[e.at + 1:], True
    if b"\\" in data:
        _space_notes(root, conv)
    if cr >= 0:
        line = cr_line
        conv.notes.append((
            "crlf-line-ends", line, f"line {line} ends in CR LF (a Windows line end): bash "
            "keeps the CR in the last word of each line ('--colocate\\r'), and a '\\' before "
            "it no longer continues the line", "convert the file to LF line ends (dos2unix)"))
    return body, conv.notes


def _end_continued(data: bytes) -> bytes:
    """A file whose last line ends in ``\\``: bash drops the backslash-newline and the
    command ends with the file; tree-sitter-bash 0.25 reports an error. The backslash is
    read as a blank (offsets unchanged)."""
    end = len(data.rstrip(b"\n"))
    if end == 0 or data[end - 1:end] != b"\\" or len(data) - end > 1:
        return data
    k = end - 1
    while k > 0 and data[k - 1:k] == b"\\":
        k -= 1
    if (end - k) % 2 == 0:  # an escaped backslash: a word, not a continuation
        return data
    return data[:end - 1] + b" " + data[end:]


# `# a comment` \ in a continued command: an empty command substitution (its body is only a
# comment), which bash expands to no word; tree-sitter-bash 0.25 reads the '#' as a comment to
# the end of the line, the closing backquote with it, and reports an unterminated backquote
_COMMENT_SUB = re.compile(rb"(?<=[ \t])`#[^`\n]*`(?=[ \t]*\\\n)")


def _blank_comments(data: bytes) -> bytes:
    """Each such substitution read as blanks (offsets unchanged)."""
    if b"`#" not in data:
        return data
    return _COMMENT_SUB.sub(lambda m: b" " * len(m.group()), data)


def _hold_cr(data: bytes) -> bytes:
    """Bash keeps a CR in the word; tree-sitter would take it for a blank, so each CR is held
    as a private character, except inside here-documents (tree-sitter matches a CR LF
    delimiter line itself, and the body's text keeps its CRs either way)."""
    keep, todo = [], [_parser().parse(data).root_node]
    while todo:
        node = todo.pop()
        if node.type == "heredoc_redirect":
            end = data.find(b"\n", node.end_byte)  # the delimiter line's own CR too
            keep.append((node.start_byte, len(data) if end < 0 else end))
        else:
            todo.extend(node.children)
    out, pos = [], 0
    for a, b in sorted(keep):
        out += [data[pos:a].replace(b"\r", _CR_BYTES), data[a:b]]
        pos = b
    out.append(data[pos:].replace(b"\r", _CR_BYTES))
    return b"".join(out)


_BASE = re.compile(rb"[0-9]+#")


def _only_in_heredocs(root) -> bool:
    """Every error tree-sitter reports lies in the body of an unquoted here-document (it
    reads ``$(( (A + 1) / 2 ))`` there as $( (A + 1) / 2 ), bash as arithmetic): the body is
    text another command reads, so the script itself is valid; the body's value is then not
    known here (`redirect`). Or it is the base of ``$((10#$N))`` (bash's BASE#DIGITS with the
    digits of a variable; tree-sitter-bash 0.25 takes ``10#${N}`` only): the arithmetic's
    text is read as bash writes it (`_Words.region`), its value evaluated as bash does."""
    todo = [root]
    while todo:
        node = todo.pop()
        if node.type == "heredoc_body":
            continue
        if node.type == "ERROR" and not node.children and node.parent is not None \
                and node.parent.type == "arithmetic_expansion" \
                and _BASE.fullmatch(node.text or b""):
            continue
        if node.type == "ERROR" or node.is_missing:
            return False
        todo.extend(c for c in node.children if c.has_error or c.is_missing)
    return True


def _misread_arith(n, text: str) -> bool:
    named = [c for c in n.children if c.is_named]
    return text.startswith("$((") and text.endswith("))") and len(named) == 1 and \
        named[0].type == "subshell"


def parse_word(text: str) -> Word | None:
    """`text` as one shell word, or None when it is not exactly one word."""
    try:
        body, _ = parse(b": " + text.encode("utf-8", "surrogateescape"))
    except ShellSyntaxError:
        return None
    if len(body) != 1 or type(body[0]) is not Simple or len(body[0].words) != 2:
        return None
    w = body[0].words[1]
    return w if w.text == text else None
