"""Parse the subset of bash that launch scripts use into a small syntax tree.

Nothing here runs a command or spawns a shell: scripts come from users and may do
anything, and the checker must answer the same on any machine. The parser follows bash's
own word rules (quotes, escapes, comments, line continuations, ``$(...)``, ``${...}``,
``$((...))``, arrays, here-documents, ``if``/``case``/loops/functions) closely enough that
a line bash would split differently is never read as part of the same command.
"""

from __future__ import annotations

import bisect
import re

__all__ = ["BashSyntaxError", "parse"]

MAX_DEPTH = 60  # nested $( ... ) / if / ${ ... }; far beyond real scripts, well below recursion


class BashSyntaxError(Exception):
    """A script bash itself would reject (unterminated quote, array, if ... fi)."""

    def __init__(self, line: int, message: str, fix: str):
        super().__init__(message)
        self.line, self.message, self.fix = line, message, fix


# ---------------------------------------------------------------- syntax tree


class Lit:
    """Literal text; `quoted` text is never split into several words."""

    __slots__ = ("text", "quoted", "line")

    def __init__(self, text: str, quoted: bool, line: int):
        self.text, self.quoted, self.line = text, quoted, line


class Param:
    """``$X`` / ``${X...}``: `op` is the operator (``:-``, ``#``, ``/`` ...) and `arg` its word."""

    __slots__ = ("name", "index", "op", "arg", "arg2", "length", "quoted", "text", "line")

    def __init__(self, name, index, op, arg, arg2, length, quoted, text, line):
        self.name, self.index, self.op, self.arg, self.arg2 = name, index, op, arg, arg2
        self.length, self.quoted, self.text, self.line = length, quoted, text, line


class Sub:
    """Command substitution ``$(...)`` or backticks; `body` is its parsed command list."""

    __slots__ = ("body", "quoted", "text", "line")

    def __init__(self, body, quoted, text, line):
        self.body, self.quoted, self.text, self.line = body, quoted, text, line


class Arith:
    """``$((...))``; `expr` is a Word whose expansion is then evaluated as integers."""

    __slots__ = ("expr", "quoted", "text", "line")

    def __init__(self, expr, quoted, text, line):
        self.expr, self.quoted, self.text, self.line = expr, quoted, text, line


class Word:
    """`start`/`end`: character offsets of the word in the file (-1 when not known, e.g. inside
    backquotes), so a rewrite can edit exactly the text a word occupies."""

    __slots__ = ("parts", "line", "text", "start", "end")

    def __init__(self, parts: list, line: int, text: str, start: int = -1, end: int = -1):
        self.parts, self.line, self.text = parts, line, text
        self.start, self.end = start, end

    def literal(self) -> str | None:
        """The word's text when it has no expansion at all (quotes removed)."""
        out = []
        for p in self.parts:
            if type(p) is not Lit:
                return None
            out.append(p.text)
        return "".join(out)


class Assign:
    """``X=v``, ``X+=v``, ``A=(...)``, ``A+=(...)``, ``A[i]=v`` (also after export/declare)."""

    __slots__ = ("name", "index", "append", "value", "array", "line", "text")

    def __init__(self, name, index, append, value, array, line, text):
        self.name, self.index, self.append = name, index, append
        self.value, self.array, self.line, self.text = value, array, line, text


class Simple:
    """`start`: character offset where the command begins (-1 when not known)."""

    __slots__ = ("assigns", "words", "line", "end", "start")

    def __init__(self, assigns, words, line, end, start=-1):
        self.assigns, self.words, self.line, self.end = assigns, words, line, end
        self.start = start


class AndOr:
    """``a && b || c``: every item after the first runs only conditionally."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = items


class Pipe:
    """``a | b``, or ``! a`` (`neg`): the status is the last command's, maybe negated."""

    __slots__ = ("cmds", "neg")

    def __init__(self, cmds, neg=False):
        self.cmds, self.neg = cmds, neg


class If:
    __slots__ = ("branches", "orelse", "line")

    def __init__(self, branches, orelse, line):
        self.branches, self.orelse, self.line = branches, orelse, line


class Case:
    __slots__ = ("word", "arms", "line")

    def __init__(self, word, arms, line):
        self.word, self.arms, self.line = word, arms, line


class Loop:
    __slots__ = ("kind", "var", "body", "line")

    def __init__(self, kind, var, body, line):
        self.kind, self.var, self.body, self.line = kind, var, body, line


class Func:
    __slots__ = ("name", "body", "line")

    def __init__(self, name, body, line):
        self.name, self.body, self.line = name, body, line


class Group:
    __slots__ = ("body", "subshell", "line")

    def __init__(self, body, subshell, line):
        self.body, self.subshell, self.line = body, subshell, line


# ---------------------------------------------------------------- lexer pieces

_WS = re.compile(r"(?:[ \t\r]+|\\\r?\n)+")
_LIT = re.compile(r"[^\s'\"\\$`;&|()<>]+")
_DQ_LIT = re.compile(r"[^\"\\$`]+")
_ARG_LIT = {"}": re.compile(r"[^}'\"\\$`]+"), "/}": re.compile(r"[^}/'\"\\$`]+")}
_AR_LIT = re.compile(r"[^()$\"\\`\]]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!0-]")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_TOKEN = re.compile(r"[^\s;&|()<>]+")
_REDIR = re.compile(r"&>>|&>|(?:[0-9]+)?(?:<<<|<<-|<<|>>|>&|<&|<>|>\||>|<)")
_TEST_OP = re.compile(r"&&|\|\||=~|[<>()!]")
_OPS = (":-", ":=", ":?", ":+", "-", "=", "?", "+", "##", "#", "%%", "%",
        "//", "/#", "/%", "/", "^^", "^", ",,", ",", ":", "@")
RESERVED = frozenset("if then elif else fi case esac for while until do done function "
                     "{ } [[ ! in".split())
DECLARE = frozenset("export declare local readonly typeset".split())
_DELIM = frozenset(" \t\r\n;&|()<>")


class Parser:
    def __init__(self, text: str, base_line: int = 1):
        self.s, self.n, self.i = text, len(text), 0
        self.base = base_line
        self.nl = [k for k, c in enumerate(text) if c == "\n"]
        self.heredocs: list[tuple[str, bool]] = []
        self.notes: list[tuple[str, int, str, str]] = []  # (code, line, message, fix)
        self.depth = 0
        self.located = True  # offsets are into the file (not into unescaped backquote text)

    # -- positions and errors

    def line_at(self, i: int) -> int:
        return bisect.bisect_left(self.nl, i) + self.base

    def fail(self, i: int, message: str, fix: str):
        raise BashSyntaxError(self.line_at(i), message, fix)

    def enter(self, i: int):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(i, f"nesting deeper than {MAX_DEPTH} levels", "simplify the script")

    # -- whitespace, comments, newlines, here-documents

    def ws(self):
        m = _WS.match(self.s, self.i)
        if m:
            self.i = m.end()

    def comment(self):
        j = self.s.find("\n", self.i)
        self.i = self.n if j < 0 else j

    def newline(self):
        """Consume one newline, then the bodies of here-documents opened on that line."""
        self.i += 1
        while self.heredocs:
            delim, strip = self.heredocs.pop(0)
            while self.i < self.n:
                j = self.s.find("\n", self.i)
                end = self.n if j < 0 else j
                line = self.s[self.i:end]
                self.i = end if j < 0 else j + 1
                if (line.lstrip("\t") if strip else line).rstrip("\r") == delim:
                    break

    def blank(self):
        """Skip spaces, newlines and comments between commands."""
        s = self.s
        while True:
            self.ws()
            if self.i >= self.n:
                return
            c = s[self.i]
            if c == "\n":
                self.newline()
            elif c == "#":
                self.comment()
            else:
                return

    def peek_reserved(self) -> str | None:
        m = _TOKEN.match(self.s, self.i)
        if not m:
            return None
        word = m.group()
        if word in RESERVED and (m.end() >= self.n or self.s[m.end()] in _DELIM):
            return word
        return None

    def expect(self, word: str, opener: str, at: int):
        self.ws()
        if self.peek_reserved() != word:
            self.fail(at, f"'{opener}' is not closed by '{word}'",
                      f"add the missing '{word}' (or remove a stray one above)")
        self.i += len(word)

    # -- words

    def word(self) -> Word | None:
        """One shell word at the cursor, or None when the cursor is at an operator."""
        s, n, start = self.s, self.n, self.i
        parts: list = []
        while self.i < n:
            i = self.i
            c = s[i]
            if c in _DELIM:
                break
            if c == "'":
                parts.append(self.squote(False))
            elif c == '"':
                parts.extend(self.dquote())
            elif c == "\\":
                self.backslash(parts, False)
            elif c == "$":
                parts.append(self.dollar(False))
            elif c == "`":
                parts.append(self.backtick(False))
            else:
                self.lit(_LIT, parts, False)
        if self.i == start:
            return None
        if not self.located:
            return Word(parts, self.line_at(start), s[start:self.i])
        return Word(parts, self.line_at(start), s[start:self.i], start, self.i)

    def lit(self, rx: re.Pattern, parts: list, quoted: bool):
        """A run of plain characters (at least one, whatever the pattern says)."""
        m = rx.match(self.s, self.i)
        end = m.end() if m and m.end() > self.i else self.i + 1
        parts.append(Lit(self.s[self.i:end], quoted, self.line_at(self.i)))
        self.i = end

    def backslash(self, parts: list, quoted: bool):
        s, i = self.s, self.i
        nxt = s[i + 1] if i + 1 < self.n else ""
        if nxt == "\n":
            self.i = i + 2
            return
        if nxt and nxt in " \t":
            j = i + 1
            while j < self.n and s[j] in " \t\r":
                j += 1
            if j >= self.n or s[j] == "\n":
                line = self.line_at(i)
                self.notes.append((
                    "space-after-line-continuation", line,
                    f"line {line} ends in '\\' followed by spaces, so the '\\' escapes a space "
                    "instead of continuing the line; the command ends on this line",
                    f"delete the spaces after the '\\' at the end of line {line}"))
        self.i = i + (2 if nxt else 1)
        parts.append(Lit(nxt or "\\", True, self.line_at(i)))

    def squote(self, quoted: bool) -> Lit:
        i = self.i
        j = self.s.find("'", i + 1)
        if j < 0:
            self.fail(i, "unterminated single quote", "close the quote with ' (or remove it)")
        self.i = j + 1
        return Lit(self.s[i + 1:j], True, self.line_at(i))

    def dquote(self) -> list:
        s, n, start = self.s, self.n, self.i
        self.i += 1
        parts: list = []
        while True:
            if self.i >= n:
                self.fail(start, "unterminated double quote", 'close the quote with " '
                          "(look for a stray \" on this line)")
            i = self.i
            c = s[i]
            if c == '"':
                self.i += 1
                break
            if c == "\\":
                nxt = s[i + 1] if i + 1 < n else ""
                if nxt == "\n":
                    self.i += 2
                elif nxt in ('$', '`', '"', "\\"):
                    parts.append(Lit(nxt, True, self.line_at(i)))
                    self.i += 2
                else:
                    parts.append(Lit("\\", True, self.line_at(i)))
                    self.i += 1
            elif c == "$":
                parts.append(self.dollar(True))
            elif c == "`":
                parts.append(self.backtick(True))
            else:
                self.lit(_DQ_LIT, parts, True)
        return parts or [Lit("", True, self.line_at(start))]

    def backtick(self, quoted: bool) -> Sub:
        s, start = self.s, self.i
        j, buf = start + 1, []
        while True:
            if j >= self.n:
                self.fail(start, "unterminated backquote `", "close it with ` or use $(...)")
            c = s[j]
            if c == "`":
                break
            if c == "\\" and j + 1 < self.n and s[j + 1] in "$`\\":
                buf.append(s[j + 1])
                j += 2
                continue
            buf.append(c)
            j += 1
        self.i = j + 1
        self.enter(start)
        sub = Parser("".join(buf), self.line_at(start))
        sub.depth, sub.located = self.depth, False
        body = sub.parse()
        self.depth -= 1
        return Sub(body, quoted, s[start:self.i], self.line_at(start))

    def dollar(self, quoted: bool):
        s, i, n = self.s, self.i, self.n
        line = self.line_at(i)
        nxt = s[i + 1] if i + 1 < n else ""
        if nxt == "(":
            self.enter(i)
            if s.startswith("((", i + 1):
                self.i = i + 3
                expr = self.arith_word("))")
                node = Arith(expr, quoted, s[i:self.i], line)
            else:
                self.i = i + 2
                body = self.parse_list(close=")", opener=("$(", i))
                self.i += 1
                node = Sub(body, quoted, s[i:self.i], line)
            self.depth -= 1
            return node
        if nxt == "{":
            self.enter(i)
            node = self.param(quoted)
            self.depth -= 1
            return node
        if nxt == "'" and not quoted:
            self.i = i + 1
            lit = self.squote(True)
            lit.text = _ansi_c(lit.text)
            return lit
        if nxt == '"' and not quoted:
            self.i = i + 1
            return Lit("", True, line)
        m = _PNAME.match(s, i + 1)
        if m and nxt:
            name = m.group()
            if name[0].isdigit():
                name = name[0]
            self.i = i + 1 + len(name)
            return Param(name, None, None, None, None, False, quoted, s[i:self.i], line)
        self.i = i + 1
        return Lit("$", quoted, line)

    def arith_word(self, close: str) -> Word:
        """Text of ``$((...))`` (close ``))``) or an index ``[...]`` (close ``]``)."""
        s, n, start = self.s, self.n, self.i
        parts: list = []
        depth = 0
        while True:
            if self.i >= n:
                self.fail(start, f"unterminated arithmetic, missing '{close}'",
                          f"close it with '{close}'")
            i = self.i
            c = s[i]
            if c == "(":
                depth += 1
                parts.append(Lit(c, True, self.line_at(i)))
                self.i += 1
            elif c == ")" or c == "]":
                if depth == 0 and s.startswith(close, i):
                    text = s[start:i]
                    self.i = i + len(close)
                    return Word(parts, self.line_at(start), text)
                if c == ")":
                    if depth == 0:
                        self.fail(start, "unbalanced ')' in arithmetic", f"close it with '{close}'")
                    depth -= 1
                parts.append(Lit(c, True, self.line_at(i)))
                self.i += 1
            elif c == "$":
                parts.append(self.dollar(True))
            elif c == '"':
                parts.extend(self.dquote())
            elif c == "`":
                parts.append(self.backtick(True))
            elif c == "\\":
                self.backslash(parts, True)
            else:
                self.lit(_AR_LIT, parts, True)

    def param(self, quoted: bool) -> Param:
        s, n, start = self.s, self.n, self.i
        line = self.line_at(start)
        self.i += 2
        length = False
        if self.i < n and s[self.i] == "#" and self.i + 1 < n and s[self.i + 1] != "}":
            length = True
            self.i += 1
        indirect = self.i < n and s[self.i] == "!"
        if indirect:
            self.i += 1
        m = _PNAME.match(s, self.i)
        name = m.group() if m else ""
        if m:
            self.i = m.end()
        index = None
        if name and self.i < n and s[self.i] == "[":
            self.i += 1
            if s.startswith("@]", self.i) or s.startswith("*]", self.i):
                index = s[self.i]
                self.i += 2
            else:
                index = self.arith_word("]")
        op = arg = arg2 = None
        if self.i < n and s[self.i] != "}":
            for cand in _OPS:
                if s.startswith(cand, self.i):
                    op = cand
                    break
            if op is None:
                op = "?bad"
                arg = self.arg_word("}", quoted)
            else:
                self.i += len(op)
            if op == "?bad":
                pass
            elif op in ("/", "//", "/#", "/%"):
                arg = self.arg_word("/}", quoted)
                if self.i < n and s[self.i] == "/":
                    self.i += 1
                    arg2 = self.arg_word("}", quoted)
            else:
                arg = self.arg_word("}", quoted)
        if self.i >= n or s[self.i] != "}":
            self.fail(start, "unterminated ${...}", "close the expansion with }")
        self.i += 1
        if indirect or not name:
            op = "?bad"
        return Param(name, index, op, arg, arg2, length, quoted, s[start:self.i], line)

    def arg_word(self, stops: str, quoted: bool) -> Word:
        """The word inside ``${X:-...}``: spaces are literal, only `stops` end it."""
        s, n, start = self.s, self.n, self.i
        parts: list = []
        lit = _ARG_LIT[stops]
        while self.i < n:
            i = self.i
            c = s[i]
            if c in stops:
                break
            if c == "'" and not quoted:
                parts.append(self.squote(False))
            elif c == '"':
                parts.extend(self.dquote())
            elif c == "\\":
                self.backslash(parts, True)
            elif c == "$":
                parts.append(self.dollar(quoted))
            elif c == "`":
                parts.append(self.backtick(quoted))
            else:
                self.lit(lit, parts, quoted)
        return Word(parts, self.line_at(start), s[start:self.i])

    # -- commands

    def parse(self) -> list:
        body = self.parse_list()
        if self.i < self.n:
            self.fail(self.i, f"unexpected '{self.s[self.i]}'", "remove it or balance it")
        return body

    def parse_list(self, until: frozenset = frozenset(), close: str | None = None,
                   opener: tuple[str, int] | None = None, arm: bool = False) -> list:
        """Commands up to a reserved word in `until` or the `close` character (not consumed)."""
        self.enter(self.i)
        s, out = self.s, []
        while True:
            self.blank()
            if self.i >= self.n:
                if opener:
                    want = close or "/".join(sorted(until))
                    self.fail(opener[1], f"'{opener[0]}' is never closed by '{want}'",
                              f"add the missing '{want}'")
                break
            c = s[self.i]
            if close and c == close:
                break
            if arm and s.startswith(";;", self.i) or (arm and s.startswith(";&", self.i)):
                break
            kw = self.peek_reserved()
            if kw and kw in until:
                break
            if kw in ("then", "elif", "else", "fi", "do", "done", "esac", "}", "in") or c in ");":
                self.fail(self.i, f"unexpected '{kw or c}'",
                          "remove it, or add the command that opens it")
            out.append(self.and_or())
            self.ws()
            if self.i < self.n:
                c = s[self.i]
                if c == ";" and not s.startswith(";;", self.i) and not s.startswith(";&", self.i):
                    self.i += 1
                elif c == "&" and not s.startswith("&&", self.i):
                    self.i += 1
                elif c == "\n":
                    self.newline()
        self.depth -= 1
        return out

    def and_or(self):
        items = [(None, self.pipeline())]
        s = self.s
        while True:
            self.ws()
            op = s[self.i:self.i + 2]
            if op not in ("&&", "||"):
                break
            self.i += 2
            self.blank()
            if self.i >= self.n:
                self.fail(self.i - 1, f"'{op}' has no command after it", "complete the command")
            items.append((op, self.pipeline()))
        return items[0][1] if len(items) == 1 else AndOr(items)

    def pipeline(self):
        self.ws()
        neg = self.peek_reserved() == "!"
        if neg:
            self.i += 1
        cmds = [self.command()]
        s = self.s
        while True:
            self.ws()
            if self.i < self.n and s[self.i] == "|" and not s.startswith("||", self.i):
                self.i += 2 if s.startswith("|&", self.i) else 1
                self.blank()
                if self.i >= self.n:
                    self.fail(self.i - 1, "'|' has no command after it", "complete the pipeline")
                cmds.append(self.command())
            else:
                break
        return cmds[0] if len(cmds) == 1 and not neg else Pipe(cmds, neg)

    def command(self):
        self.ws()
        s, i = self.s, self.i
        line = self.line_at(i)
        kw = self.peek_reserved()
        if kw == "if":
            node = self.if_(i)
        elif kw in ("while", "until"):
            self.i += len(kw)
            cond = self.parse_list(frozenset({"do"}), opener=(kw, i))
            self.expect("do", kw, i)
            body = self.parse_list(frozenset({"done"}), opener=(kw, i))
            self.expect("done", kw, i)
            node = Loop(kw, None, cond + body, line)
        elif kw == "for":
            node = self.for_(i)
        elif kw == "case":
            node = self.case(i)
        elif kw == "function":
            self.i += len(kw)
            self.ws()
            w = self.word()
            if w is None:
                self.fail(i, "'function' without a name", "name the function")
            self.ws()
            if s.startswith("()", self.i):
                self.i += 2
            self.blank()
            node = Func(w.text, self.command(), line)
        elif kw == "{":
            self.i += 1
            body = self.parse_list(frozenset({"}"}), opener=("{", i))
            self.expect("}", "{", i)
            node = Group(body, False, line)
        elif i < self.n and s[i] == "(":
            if s.startswith("((", i):
                j = s.find("))", i + 2)
                if j < 0:
                    self.fail(i, "unterminated '(('", "close it with '))'")
                self.i = j + 2
                node = Simple([], [], line, line)
            else:
                self.i += 1
                body = self.parse_list(close=")", opener=("(", i))
                self.i += 1
                node = Group(body, True, line)
        else:
            return self.simple()
        self.redirects()
        return node

    def redirects(self):
        while True:
            self.ws()
            if not self.redirect():
                return

    def redirect(self) -> bool:
        m = _REDIR.match(self.s, self.i)
        if not m:
            return False
        op, at = m.group(), self.i
        self.i = m.end()
        self.ws()
        w = self.word()
        if w is None:
            self.fail(at, f"redirection '{op}' has no target", "add the file name after it")
        if op.endswith("<<") or op.endswith("<<-"):
            delim = w.literal()
            self.heredocs.append((delim if delim is not None else w.text, op.endswith("-")))
        return True

    def simple(self) -> Simple:
        s, n = self.s, self.n
        start = self.i
        line = self.line_at(start)
        assigns: list = []
        words: list = []
        while True:
            self.ws()
            if self.i >= n:
                break
            c = s[self.i]
            if c == "#":
                self.comment()
                break
            if c in "<>" or (c == "&" and s.startswith("&>", self.i)):
                self.redirect()
                continue
            if c in "\n;&|)":
                break
            if c == "(":
                if len(words) == 1 and not assigns:
                    return self.funcdef(words[0], line)
                self.fail(self.i, "unexpected '('", "quote it, or write NAME=(...) for an array")
            at = self.i
            w = self.word()
            if w is None:  # pragma: no cover - every delimiter is handled above
                self.fail(at, f"unexpected '{c}'", "remove it")
            if self.i < n and s[self.i] in "<>" and w.text.isdigit():
                continue  # file descriptor number of a redirection (2>&1)
            if not words or (words[0].text in DECLARE and len(words) >= 1):
                a = self.assignment(w)
                if a is not None:
                    assigns.append(a)
                    continue
            words.append(w)
            if len(words) == 1 and w.text == "[[":
                self.test_words(words, at)
        end = self.line_at(max(start, self.i - 1))
        return Simple(assigns, words, line, end, start if self.located else -1)

    def funcdef(self, name: Word, line: int) -> Func:
        self.i += 1
        self.ws()
        if self.i >= self.n or self.s[self.i] != ")":
            self.fail(self.i, "expected ')' after 'name('", "write 'name() { ...; }'")
        self.i += 1
        self.blank()
        if self.i >= self.n:
            self.fail(self.i - 1, "function has no body", "add '{ ...; }'")
        return Func(name.text, self.command(), line)

    def test_words(self, words: list, at: int):
        """``[[ ... ]]``: its && || < > ( ) are operands of the test, not shell operators."""
        s = self.s
        while True:
            self.ws()
            if self.i >= self.n or s[self.i] == "\n":
                self.fail(at, "'[[' is not closed by ']]'", "add ']]'")
            m = _TEST_OP.match(s, self.i)
            if m:
                words.append(Word([Lit(m.group(), True, self.line_at(self.i))],
                                  self.line_at(self.i), m.group()))
                self.i = m.end()
                continue
            w = self.word()
            if w is None:
                self.fail(self.i, f"unexpected '{s[self.i]}' in [[ ]]", "quote it")
            words.append(w)
            if w.text == "]]":
                return

    def assignment(self, w: Word) -> Assign | None:
        first = w.parts[0]
        if type(first) is not Lit or first.quoted:
            return None
        m = _ASSIGN.match(first.text)
        if not m:
            return None
        name, index, plus = m.group(1), m.group(2), m.group(3) == "+"
        rest = first.text[m.end():]
        parts = ([Lit(rest, False, first.line)] if rest else []) + w.parts[1:]
        if not parts and self.i < self.n and self.s[self.i] == "(" and index is None:
            return Assign(name, None, plus, None, self.array(w.line), w.line, w.text)
        value = Word(parts, w.line, w.text[m.end():])
        return Assign(name, index[1:-1] if index else None, plus, value, None, w.line, w.text)

    def array(self, line: int) -> list:
        s, start = self.s, self.i
        self.i += 1
        items = []
        while True:
            self.blank()
            if self.i >= self.n:
                self.fail(start, "array '(' is never closed by ')'",
                          "add the closing ')' after the last element")
            c = s[self.i]
            if c == ")":
                self.i += 1
                return items
            w = self.word()
            if w is None:
                self.fail(self.i, f"unexpected '{c}' inside an array",
                          "quote it, or close the array with ')' first")
            items.append(w)

    def if_(self, at: int) -> If:
        line = self.line_at(at)
        self.i += 2
        branches, orelse = [], None
        while True:
            cond = self.parse_list(frozenset({"then"}), opener=("if", at))
            self.expect("then", "if", at)
            body = self.parse_list(frozenset({"elif", "else", "fi"}), opener=("if", at))
            branches.append((cond, body))
            kw = self.peek_reserved()
            self.i += len(kw)
            if kw == "elif":
                continue
            if kw == "else":
                orelse = self.parse_list(frozenset({"fi"}), opener=("if", at))
                self.expect("fi", "if", at)
            return If(branches, orelse, line)

    def for_(self, at: int) -> Loop:
        s, line = self.s, self.line_at(at)
        self.i += 3
        self.ws()
        if s.startswith("((", self.i):
            j = s.find("))", self.i)
            if j < 0:
                self.fail(at, "unterminated 'for ((...'", "close it with '))'")
            self.i = j + 2
            var = None
        else:
            w = self.word()
            if w is None:
                self.fail(at, "'for' without a variable", "write 'for X in ...; do ...; done'")
            var = w.text
            self.blank()
            if self.peek_reserved() == "in":
                self.i += 2
                while True:
                    self.ws()
                    if self.i >= self.n or s[self.i] in "\n;":
                        break
                    if self.word() is None:
                        self.fail(self.i, f"unexpected '{s[self.i]}' in 'for'", "quote it")
        self.ws()
        if self.i < self.n and s[self.i] == ";":
            self.i += 1
        self.blank()
        self.expect("do", "for", at)
        body = self.parse_list(frozenset({"done"}), opener=("for", at))
        self.expect("done", "for", at)
        return Loop("for", var, body, line)

    def case(self, at: int) -> Case:
        s, line = self.s, self.line_at(at)
        self.i += 4
        self.ws()
        word = self.word()
        if word is None:
            self.fail(at, "'case' without a word", "write 'case WORD in ... esac'")
        self.blank()
        self.expect("in", "case", at)
        arms = []
        while True:
            self.blank()
            if self.i >= self.n:
                self.fail(at, "'case' is never closed by 'esac'", "add 'esac'")
            if self.peek_reserved() == "esac":
                self.i += 4
                return Case(word, arms, line)
            if s[self.i] == "(":
                self.i += 1
            pats = []
            while True:
                self.ws()
                w = self.word()
                if w is None:
                    self.fail(self.i, "bad 'case' pattern", "write 'pattern) commands ;;'")
                pats.append(w)
                self.ws()
                c = s[self.i] if self.i < self.n else ""
                self.i += 1
                if c == ")":
                    break
                if c != "|":
                    self.fail(self.i - 1, "bad 'case' pattern", "write 'pattern) commands ;;'")
            body = self.parse_list(frozenset({"esac"}), opener=("case", at), arm=True)
            for sep in (";;&", ";;", ";&"):
                if s.startswith(sep, self.i):
                    self.i += len(sep)
                    break
            arms.append((pats, body))


def _ansi_c(text: str) -> str:
    table = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r", "e": "\x1b"}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), m.group(0)), text)


def parse(text: str) -> tuple[list, list]:
    """Parse a whole script; returns (commands, notes). Raises BashSyntaxError."""
    p = Parser(text)
    return p.parse(), p.notes
