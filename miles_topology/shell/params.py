"""Parameter expansion (``$X``, ``${A[@]}``, ``$1``, ``$@``, ``${#X}``, ``${X:-d}``,
``${X:=d}``, ``${X:?m}``, ``${X:+a}``, ``${X%p}``, ``${X/a/b}``, ``${A[@]:1:2}``...) over
the shell state: known values, or unknown ones that say why."""

from __future__ import annotations

from .pattern import replace, strip
from .syntax import Param
from .values import INT_LIMIT, PID, ArithError, Field, Var, arith


class Params:
    """The parameters word expansion (`w`: join, unknown, arith_lookup) reads; it counts
    the words it uses in provenance."""

    def __init__(self, w):
        self.w, self.sh, self.at, self.found, self.prov = w, w.sh, w.at, w.found, w.prov

    def lookup(self, name: str, index, part) -> tuple[list[Field] | None, bool]:
        """(fields, is_list) of a parameter, or (None, False) when it is unset."""
        if not (name[:1].isalpha() or name[:1] == "_") or name == "BASH_SOURCE":
            got = self.special(name, index, part)
            if got is not None:
                return got
        var = self.sh.vars.get(name)
        if var is None:
            taint = self.sh.taint
            if taint is None:
                return None, False
            why = f"{name} is not set here, but {taint.why}"
            return [self.w.unknown(part, why, extra=index in ("@", "*"))], False
        if index is None:
            if var.array and not var.items:
                return None, False
            self.prov.consume(var.items[:1])
            return var.items[:1], False
        if index in ("@", "*"):
            if var.keys is not None and len(var.items) > 1:
                why = f"{name} is an associative array: bash lists its values in its own order"
                return [self.w.unknown(part, why, extra=True)], False
            return var.items, index == "@"
        if var.array and len(var.items) == 1 and var.items[0].extra:
            return var.items, False
        got = self.w.join(index)
        if got.unk:
            return [Field(None, got.src, got.unk, part.text)], False
        if var.keys is not None:
            k = var.keys.index(got.value) if got.value in var.keys else -1
            return ([var.items[k]], False) if k >= 0 else (None, False)
        try:
            k = arith(got.value, self.w.arith_lookup(part))
        except ArithError as e:
            return [self.w.unknown(part, f"array index: {e}")], False
        items = var.items
        if k < 0:
            k += len(items)
        self.prov.consume(items[:k + 1] if k >= 0 else items)  # the words before it fix its place
        return ([items[k]], False) if 0 <= k < len(items) else (None, False)

    def special(self, name: str, index, part) -> tuple[list[Field] | None, bool] | None:
        """Positional and special parameters (``$@ $1 $# $$ $0``, ``BASH_SOURCE``); None for
        an ordinary variable."""
        if name in ("@", "*"):
            frame = self.sh.frames[-1]
            if frame is None:
                why = ("positional arguments passed when the script is run (none assumed; "
                       "pass --env 1=VALUE ...)")
                return [self.w.unknown(part, why, extra=True)], True
            return frame, name == "@"
        if name.isdigit():
            if name == "0":
                return [Field(self.sh.zero or self.at.main_abs, self.at.src(part.line),
                              text=part.text)], False
            frame = self.sh.frames[-1]
            if frame is None:
                why = f"positional argument ${name}: pass --env {name}=VALUE"
                return [self.w.unknown(part, why)], False
            k = int(name) - 1
            self.prov.read_position(k + 1)
            return ([frame[k]], False) if k < len(frame) else (None, False)
        if name == "#" and self.sh.frames[-1] is not None:
            self.prov.read_position(INT_LIMIT)
            return [Field(str(len(self.sh.frames[-1])), self.at.src(part.line))], False
        if name == "$":  # the same in each use (gen_$$.sh written, then sourced)
            return [Field(PID, self.at.src(part.line), text=part.text)], False
        if name in "#?$!-":
            return [self.w.unknown(part, f"${name} is only known when the script runs")], False
        if name == "BASH_SOURCE" and (index is None or getattr(index, "text", "").strip() == "0"):
            # the file being read, absolute, so the dirname idioms locate model files
            return [Field(self.at.file_abs, self.at.src(part.line), text=part.text)], False
        return None

    def param(self, p: Param) -> tuple[list[Field], bool]:
        name, op = p.name, p.op
        if op in ("?bad", "@"):
            return [self.w.unknown(p, "this form of ${...} is not modelled")], False
        items, is_list = self.lookup(name, p.index, p)
        if p.length:
            return [self.length(p, items)], False
        if op is None:
            return self.plain(p, items, is_list)
        if items is not None and any(f.unk for f in items):
            return [f for f in items if f.unk][:1], False
        return self.operator(p, items, is_list)

    def length(self, p: Param, items: list[Field] | None) -> Field:
        """``${#X}``, ``${#A[@]}``."""
        if items is None:
            return Field("0", self.at.src(p.line), text=p.text)
        cause = next((f.unk for f in items if f.unk), None)
        if cause is not None:  # its why says what would make it known (--nodes ...)
            return self.w.unknown(p, f"length of a value only known at run time ({cause.expr}: "
                                     f"{cause.why})")
        cond = next((f.cond for f in items if f.cond), None)
        if cond is not None:  # words that may be absent: how many is not known
            return self.w.unknown(p, f"it counts a value added {cond.why}")
        self.prov.consume(items)
        n = len(items) if (p.index in ("@", "*")) else len(items[0].value)
        return Field(str(n), self.at.src(p.line), text=p.text)

    def plain(self, p: Param, items: list[Field] | None,
              is_list: bool) -> tuple[list[Field], bool]:
        """``$X``, ``${A[@]}`` with no operator."""
        name = p.name
        if items is None and p.index in ("@", "*"):
            # arrays are never inherited from the environment: unset is empty in bash,
            # unless a sourced file that was not found may have set it
            if not self.found.missing:
                return [], True
            why = f"{name} is not set here; it may be set by {self.found.missing[-1]}, " \
                  "which was not found"
            return [self.w.unknown(p, why, extra=True)], False
        if items is None:
            why = f"{name} is not set and has no default: pass --env {name}=VALUE"
            got = self.w.unknown(p, why)
            got.bare = True  # set nowhere in the script: empty unless the environment sets it
            return [got], False
        return items, is_list

    def operator(self, p: Param, items: list[Field] | None,
                 is_list: bool) -> tuple[list[Field], bool]:
        """``${X:-d}``, ``${X:=d}``, ``${X:?m}``, ``${X:+a}``, ``${X%p}``, ``${X/a/b}``..."""
        name, op = p.name, p.op
        empty = items is None or (not is_list and items[0].value == "")
        if op in (":-", "-", ":=", "="):
            if items is None or (empty and op[0] == ":"):
                got = self.w.join(p.arg)
                if op in (":=", "="):
                    self.sh.vars[name] = Var([Field(got.value, got.src, got.unk, got.text,
                                                    tail=got.tail)], False)
                return [Field(got.value, got.src, got.unk, p.text, cond=got.cond,
                              tail=got.tail)], False
            return items, is_list
        if op in (":?", "?"):
            if items is None or (empty and op == ":?"):
                msg = p.arg.text if p.arg is not None and p.arg.text else "null or not set"
                why = f"{name} must be set ({msg}): pass --env {name}=VALUE"
                return [self.w.unknown(p, why)], False
            return items, is_list
        if op in (":+", "+"):
            if items is None or (empty and op == ":+"):
                return [Field("", self.at.src(p.line), text=p.text)], False
            got = self.w.join(p.arg)
            return [Field(got.value, got.src, got.unk, p.text)], False
        if items is None:
            items, is_list = [Field("", self.at.src(p.line), text=p.text)], False
        arg = self.w.join(p.arg) if p.arg is not None else Field("", self.at.src(p.line))
        if arg.unk:
            return [Field(None, arg.src, arg.unk, p.text)], False
        if op == ":" and (p.index in ("@", "*") or p.name in ("@", "*")):
            return self.slice(items, arg.value, p), is_list
        out = []
        self.prov.consume(items)
        for f in items:
            try:
                v = self.transform(f.value, op, arg.value, p)
            except ArithError as e:
                return [self.w.unknown(p, f"${{...}} offset: {e}")], False
            out.append(Field(v, f.src, None, f.text, False, f.cond))
        return out, is_list

    def slice(self, items: list[Field], arg: str, p: Param) -> list[Field]:
        """``${A[@]:off:len}`` / ``${@:off:len}``: a slice of the words, not of each word
        (for ``$@`` offset 1 is the first argument)."""
        if any(f.unk for f in items):
            return [self.w.unknown(p, "a slice of words only known at run time", extra=True)]
        lookup = self.w.arith_lookup(p)
        off, _, ln = arg.partition(":")
        try:
            a = arith(off, lookup) if off.strip() else 0
            b = arith(ln, lookup) if ln.strip() else None
        except ArithError as e:
            return [self.w.unknown(p, f"${{...}} offset: {e}", extra=True)]
        words = list(items)
        if p.name in ("@", "*"):  # $0 comes first
            words = [Field(self.at.main_abs, self.at.src(p.line), text=p.text)] + words
        a = max(0, len(words) + a) if a < 0 else a
        end = len(words) if b is None else (a + b if b >= 0 else len(words) + b)
        self.prov.consume(words)
        return words[a:max(a, end)]

    def transform(self, v: str, op: str, arg: str, p: Param) -> str:
        if op in ("#", "##", "%", "%%"):
            return strip(v, arg, op)
        if op in ("^^", "^"):
            return v.upper() if op == "^^" else v[:1].upper() + v[1:]
        if op in (",,", ","):
            return v.lower() if op == ",," else v[:1].lower() + v[1:]
        if op == ":":
            lookup = self.w.arith_lookup(p)
            off, _, ln = arg.partition(":")
            a = arith(off, lookup)
            a = max(0, len(v) + a) if a < 0 else a
            if not ln:
                return v[a:]
            b = arith(ln, lookup)
            return v[a:a + b] if b >= 0 else v[a:len(v) + b]
        rep = self.w.join(p.arg2).value if p.arg2 is not None else ""
        return replace(v, arg, rep or "", op) if arg else v
