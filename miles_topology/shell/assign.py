"""Assignments (Oils' state.Mem setters beside cmd_eval): ``NAME=V``, ``A=(...)``,
``A[k]=v``, associative arrays, ``(( ))`` that assign, ``local``/``declare``, and what a
command that is not followed may set (a source not read, a call too deep). Under a run-time
condition a value becomes unknown unless unchanged; an unknown value is taken from ``env``
when it has the name."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..model.errors import Location
from . import syntax
from .budget import Budget
from .cursor import Cursor
from .state import Shell
from .values import (
    MAX_CALL_DEPTH,
    MAX_ITEMS,
    MAX_VALUE,
    ArithError,
    Field,
    Unk,
    Var,
    arith,
    arith_targets,
)


class Assignments:
    """Sets variables in the shell state (`sh`) from words (`w`), counting what they hold
    in the budget; `env` is what --env gives."""

    def __init__(self, sh: Shell, w, env: Mapping[str, str], budget: Budget, at: Cursor):
        self.sh, self.w, self.env, self.budget, self.at = sh, w, env, budget, at

    @contextmanager
    def held(self, prefix: tuple, cond: Unk | None, export: bool = False) -> Iterator[None]:
        """``X=4 source FILE`` / ``X=4 func``: X is set while the file or function runs and
        given back after it (bash outside POSIX mode), so a model file's
        ``${MODEL_ARGS_NUM_LAYERS:-61}`` reads 4. `export`: the command is another program
        (``PP=2 bash run.sh``, ``PP=2 nohup bash run.sh``): bash puts X in its environment,
        so a shell it starts sees it."""
        sh = self.sh
        names = dict.fromkeys(a.name for a in prefix)
        saved, given = {k: sh.vars.get(k) for k in names}, sh.inherited & set(names)
        was = set(sh.exported)
        for a in prefix:
            self.assign(a, cond)
        if export:
            sh.exported |= set(names)
        try:
            yield
        finally:
            if export:
                sh.exported = (sh.exported - set(names)) | (was & set(names))
            for k, old in saved.items():
                if old is None:
                    sh.vars.pop(k, None)
                else:
                    sh.vars[k] = old
            sh.inherited |= given

    def assign(self, a: syntax.Assign, cond: Unk | None):
        cond = self.sh.plain(cond)
        src = self.at.src(a.line)
        name = a.name
        self.sh.inherited.discard(name)  # --env gave it, but the script sets it itself
        if a.array is not None:
            if any(type(w) is tuple for w in a.array) or name in self.sh.assoc:
                return self.keyed(a, src, cond)
            return self.assign_array(a, src, cond)
        got = self.w.join(a.value)
        if a.index is not None and name in self.sh.assoc:
            return self.keyed(syntax.Assign(name=name, append=True, array=[(a.index, a.value)],
                                            line=a.line, text=a.text), src, cond)
        if a.index is not None:
            old = self.sh.vars.get(name)
            items = list(old.items) if old else []
            try:
                k = int(a.index)
            except ValueError:
                k = -1
            if cond or got.unk or k < 0 or k > len(items):
                why = cond.why if cond else "array element set at an index known at run time"
                self.sh.vars[name] = Var([Field(None, src, Unk(a.text, src, why), a.text, True)],
                                         True)
                return
            f = Field(got.value, src, None, a.value.text)
            items[k:k + 1] = [f]
            self.sh.vars[name] = Var(items, True)
            return
        value, unk = got.value, got.unk
        old = self.sh.vars.get(name)
        if a.append and not unk:
            if old is not None and old.items and old.items[0].unk:
                unk = old.items[0].unk
            else:
                value = (old.items[0].value if old and old.items else "") + value
        self.set(name, value, unk, src, cond, a.text, a.value.text,
                 got.tail if unk is got.unk and not a.append else "")


    def assign_array(self, a: syntax.Assign, src: Location, cond: Unk | None):
        """``A=(WORDS)``, ``A+=(WORDS)``."""
        name = a.name
        items: list[Field] = []
        for w in a.array:
            got = self.w.expand(w)
            for f in got:  # unknown words next to unknown words: still just unknown words
                if not (f.extra and f.unk and items and items[-1].extra and items[-1].unk):
                    items.append(f)
        if a.append:
            old = self.sh.vars.get(name)
            if cond:
                items = [Field(f.value, f.src, f.unk, f.text, f.extra, f.cond or cond, f.span)
                         for f in items]
            self.hold(0, None, items)
            if old is not None and old.array:
                old.items.extend(items)  # in place: n appends cost O(n), not O(n^2)
                items = old.items
            else:
                items = (old.items if old else []) + items
            if len(items) > MAX_ITEMS:
                items = [Field(None, src, Unk(a.text + "(...)", src, f"{name} grows past "
                                                  f"{MAX_ITEMS} words; not followed"),
                               a.text, True)]
            self.sh.vars[name] = old if old is not None and old.items is items \
                else Var(items, True)
        elif cond:
            self.sh.vars[name] = Var([Field(None, src, Unk(a.text + "(...)", src, cond.why),
                                            a.text, True)], True)
        elif len(items) > MAX_ITEMS:
            why = f"{name} has more than {MAX_ITEMS} words; not followed"
            self.sh.vars[name] = Var([Field(None, src, Unk(a.text + "(...)", src, why),
                                            a.text, True)], True)
        else:
            self.hold(0, self.sh.vars.get(name), items)
            self.sh.vars[name] = Var(items, True)


    def keyed(self, a: syntax.Assign, src: Location, cond: Unk | None):
        """``A=([0]=x [3]=y z)`` (indexed: values in index order) and associative arrays
        (``declare -A M=([k]=v)``, ``M[k]=v``)."""
        name = a.name
        old = self.sh.vars.get(name) if a.append else None
        assoc = name in self.sh.assoc or any(type(w) is tuple and not w[0].strip().isdigit()
                                          for w in a.array)
        got: dict = {}
        if old is not None and not any(f.unk for f in old.items):
            got = dict(zip(old.keys, old.items)) if old.keys is not None else \
                dict(enumerate(old.items))
        nxt = max((k for k in got if isinstance(k, int)), default=-1) + 1
        for w in a.array:
            if type(w) is tuple:
                key = self.w.join(syntax.parse_word(w[0]) or
                                  syntax.Word(parts=[], line=a.line, text=w[0]))
                if key.unk or cond:
                    why = cond.why if cond else f"a key of {name} is only known at run time"
                    self.sh.vars[name] = Var([Field(None, src, Unk(a.text, src, why), a.text,
                                                    True)], True)
                    return
                k = key.value if assoc else int(key.value.strip())
                got[k] = self.w.join(w[1])
                nxt = k + 1 if not assoc else nxt
            else:
                for f in self.w.expand(w):
                    got[nxt] = f
                    nxt += 1
        if cond or any(f.unk for f in got.values()):
            why = cond.why if cond else "an element is only known at run time"
            self.sh.vars[name] = Var([Field(None, src, Unk(a.text, src, why), a.text, True)], True)
        elif assoc:
            self.hold(0, self.sh.vars.get(name), list(got.values()))
            self.sh.vars[name] = Var(list(got.values()), True, [str(k) for k in got])
        else:
            self.hold(0, self.sh.vars.get(name), list(got.values()))
            self.sh.vars[name] = Var([got[k] for k in sorted(got)], True)


    def set(self, name: str, value: str | None, unk: Unk | None, src: Location,
            cond: Unk | None, expr: str, text: str, tail: str = ""):
        """Set a string variable; under a run-time condition it becomes unknown (unless
        unchanged), and an unknown value is taken from ``env`` when it has the name. `tail`:
        the known end of an unknown value (Field.tail)."""
        cond = self.sh.plain(cond)
        old = self.sh.vars.get(name)
        if value is not None and not unk and len(value) > MAX_VALUE:
            unk = Unk(expr, src, f"{name} grows past {MAX_VALUE >> 20} MB; its value is not "
                      "followed")
        if cond and not unk:
            same = old is not None and not old.array and old.items and \
                old.items[0].value == value
            if not same:
                unk = Unk(expr, src, f"{name} is assigned {cond.why}")
        if unk is not None and name in self.env:
            v = self.env[name]
            self.sh.vars[name] = Var([Field(v, Location("<env>", 0), text=f"--env {name}={v}")],
                                     False)
            return
        self.hold(len(value) if value is not None and not unk else 0, old)
        self.sh.vars[name] = Var([Field(None if unk else value, src, unk, text,
                                        tail=tail if unk is not None and not cond else "")],
                                 False)


    def hold(self, size: int, old: Var | None = None, items: list[Field] | None = None):
        """Count what a variable now holds, less what `old` held (Budget.take_held)."""
        self.budget.take_held(lambda: self.at.src(self.at.stmt_line), size, old, items)

    def arith_set(self, name: str, v: int, src: Location, cond: Unk | None, text: str):
        self.sh.inherited.discard(name)
        self.set(name, str(v), None, src, cond, text, text)

    def arith_cmd(self, n: syntax.ArithCmd, cond: Unk | None):
        """``(( expr ))`` run as a command: its assignments take effect."""
        self.at.stmt_line = n.line
        self.budget.steps += 1
        if not arith_targets(n.expr.text):  # nothing to assign: its status is all it gives
            return
        src = self.at.src(n.line)
        got = self.w.join(n.expr)
        why = got.unk.why if got.unk else ""
        if not got.unk:
            try:
                arith(got.value, self.w.arith_lookup(n),
                      lambda name, v: self.arith_set(name, v, src, cond, n.text))
                return
            except ArithError as e:
                why = str(e)
        for name in arith_targets(n.expr.text if got.unk else got.value):
            self.sh.inherited.discard(name)
            self.set(name, None, Unk(n.text, src, f"{name} is set by {n.text}, which is only "
                                     f"known at run time ({why})"), src, cond, n.text, n.text)

    def declare(self, n: syntax.Simple, head: str):
        """``local``/``declare``/``typeset``: in a function the names are its own (unless
        ``-g``); ``-A`` makes them associative."""
        opts = "".join(w.text[1:] for w in n.words[1:] if w.text.startswith("-"))
        names = [a.name for a in n.assigns] + [
            w.text for w in n.words[1:] if syntax.NAME.fullmatch(w.text)]
        if self.sh.scopes and "g" not in opts:
            given = {a.name for a in n.assigns}
            for name in names:
                self.sh.make_local(name)
                if name not in given:  # `local X`: unset here until assigned
                    self.sh.vars.pop(name, None)
        if "A" in opts:
            self.sh.assoc |= set(names)

    def taint(self, what: str, at: Location, why: str):
        """A source or eval not read may set any variable: each is unknown from here on
        until it is assigned again (a value given with --env stands)."""
        why = f"it may be set by '{what}' at {at}, which is not read ({why})"
        for name, var in list(self.sh.vars.items()):
            unk = Unk(what, at, f"{name}: {why}")
            if var.array:
                self.sh.vars[name] = Var([Field(None, at, unk, what, True)], True)
            else:
                self.set(name, None, unk, at, None, what, what)  # --env NAME stands
        self.sh.taint = Unk(what, at, why)

    def taint_names(self, what: str, at: Location, names: tuple[str, ...]):
        """A source not read that sets only `names` (an environment manager's activation
        script): those become unknown, the script's other variables keep their values."""
        why = f"it may be set by '{what}' at {at}, an environment's activation, not read here"
        for name in names:
            self.set(name, None, Unk(what, at, f"{name}: {why}"), at, None, what, what)

    def too_deep(self, name: str, n: syntax.Simple, body: list | None = None,
                 why: str = ""):
        """A call (or an eval's `body`) past the depth cap is not followed, or one of a
        function defined only at run time (state.Either; `why` says so): what it (and the
        functions it calls) may set is unknown from here on."""
        src = self.at.src(n.line)
        why = f"it may be set by '{name}' called at {src}" + (
            why or f" more than {MAX_CALL_DEPTH} calls deep, which is not followed")
        for var in sorted(sets(self.sh.funcs[name] if body is None else body,
                                self.sh.funcs)):
            self.sh.inherited.discard(var)
            old = self.sh.vars.get(var)
            array = old is not None and old.array
            self.sh.vars[var] = Var([Field(None, src, Unk(name, src, f"{var}: {why}"), name,
                                           array)], array)


def walk(body: list, funcs: dict[str, list]) -> Iterator:
    """Every command node of `body`, the functions it calls included (their text, not run)."""
    return (node for node, _ in walk_called(body, funcs))


def walk_called(body: list, funcs: dict[str, list]) -> Iterator[tuple[Any, bool]]:
    """`walk`'s nodes, each with whether it lies in a function the body calls (a `return`
    there leaves the function, not the body)."""
    seen, todo = set(), [(node, False) for node in body]
    while todo:
        node, called = todo.pop()
        t = type(node)
        if isinstance(node, list):
            todo.extend((n, called) for n in node)
            continue
        yield node, called
        kids: list = []
        if t is syntax.Simple:
            head = node.words[0].literal() if node.words else None
            if head in funcs and head not in seen:
                seen.add(head)
                todo.extend((n, True) for n in funcs[head])
        elif t is syntax.AndOr:
            kids = [c for _, c in node.items]
        elif t is syntax.Pipe:
            kids = node.cmds
        elif t is syntax.If:
            for test, branch in node.branches:
                kids += test + branch
            kids += node.orelse or ()
        elif t is syntax.Case:
            for arm in node.arms:
                kids += arm[1]
        elif t in (syntax.Loop, syntax.Group):
            kids = node.body
        todo.extend((n, called) for n in kids)


def sets(body: list, funcs: dict[str, list]) -> set[str]:
    """The variables commands may assign, the functions they call included."""
    out: set[str] = set()
    for node in walk(body, funcs):
        t = type(node)
        if t is syntax.Simple:
            out.update(a.name for a in node.assigns)
            words = [w.literal() for w in node.words]
            head = words[0] if words else None
            if head in ("read", "mapfile", "readarray", "getopts", "printf", "declare",
                        "local", "export", "typeset"):
                out.update(w for w in words[1:] if w and syntax.NAME.fullmatch(w))
                out.update(("OPTARG", "OPTIND", "MAPFILE", "REPLY"))
            for w in node.words:
                out.update(arith_targets(w.text))
        elif t is syntax.Loop:
            out.update((node.var,) if node.var else ())
        elif t is syntax.ArithCmd:
            out.update(arith_targets(node.expr.text))
    return out


def may_exit(body: list, funcs: dict[str, list]) -> bool:
    """Some command of `body` (or of a function it calls) is `exit`."""
    return any(type(n) is syntax.Simple and n.words and n.words[0].literal() == "exit"
               for n in walk(body, funcs))
