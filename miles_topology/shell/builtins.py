"""The built-in commands the reader models, one method each on a class that holds its
reader (as shellcheck organises its command checks by name): each takes the command's
expanded words, its syntax node and the run-time condition it runs under. A handler that
returns False did not take the command (it is then read as any other command)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Protocol

from ..model.errors import Location
from ..reading import gate
from . import syntax
from .state import Leave
from .values import INT_LIMIT, MAX_ITEMS, Field, Unk, Var, printf

# conda's etc/profile.d/conda.sh and bin/activate, a venv's bin/activate: they set up a Python
# environment manager (its shell functions, PATH, PS1 and its own names), never a launch
# script's names, so a copy not read here leaves only these unknown
_ACTIVATE = re.compile(r"(^|/)(etc/profile\.d/conda\.sh|bin/activate)[\"']?$")
_ACTIVATE_SETS = ("PATH", "PS1", "PYTHONHOME", "CONDA_EXE", "CONDA_PYTHON_EXE", "CONDA_SHLVL",
                 "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_PROMPT_MODIFIER", "_CE_M",
                 "_CE_CONDA", "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT")


class Commands(Protocol):
    """What the built-ins ask of command execution (interpret.Reader)."""

    def source_file(self, path: str, n: syntax.Simple, cond: Unk | None, shown: str): ...

    def run_written(self, key: str, n: syntax.Simple, cond: Unk | None): ...

    def run_text(self, text: str, line: int, cond: Unk | None, name: str, n: syntax.Simple): ...

    def run_child(self, path: str, args: list[Field] | None, n: syntax.Simple,
                  cond: Unk | None, shown: str, written: bool = False): ...

    returns: int  # functions and sourced files running: `return` ends the innermost
    returned: list[list[tuple]]  # per one of them: the states its `return`s left in
    checked: int  # >0 where a command's failure is tested (set -e ignores it)
    guards: list[frozenset[str]]  # paths a run-time test requires to exist, innermost last
    box: object  # in a container (containers.Box): its paths are mapped by its mounts

    def contained(self, fields: list[Field], n: syntax.Simple, cond: Unk | None): ...


class Builtins:
    """The built-ins of one read; `table` maps a command name to its handler. They run
    files and text through `r`, set variables through `assigns` (assign.Assignments) and
    jump out of loops through `loops` (loops.Loops)."""

    def __init__(self, r: Commands, words, prov, assigns, loops):
        self.r, self.w, self.prov, self.assigns, self.loops = r, words, prov, assigns, loops
        self.sh, self.at, self.found = words.sh, words.at, words.found
        self.table = {
            ":": self.nothing, "true": self.nothing, "false": self.nothing,
            "source": self.source, ".": self.source, "set": self.set_, "unset": self.unset,
            "cd": self.cd, "printf": self.printf_v, "shift": self.shift, "read": self.read,
            "mapfile": self.read, "readarray": self.read, "break": self.jump,
            "continue": self.jump, "eval": self.eval_, "getopts": self.getopts,
            "bash": self.script, "sh": self.script, "exit": self.leave, "return": self.leave,
            "exec": self.exec_,
        }

    def nothing(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``:``, ``true``, ``false``: no effect beyond their status (read by `status`)."""

    def leave(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``exit`` / ``return``: this way of the script goes no further (state.Leave). Only
        where the read surely runs it (no condition, or a way of a branch being joined);
        under any other condition (a loop run an unknown number of times) the read goes on
        as before. ``return`` outside a function or sourced file: bash refuses it and goes
        on."""
        if self.sh.plain(cond) is not None or fields[0].value == "return" and \
                not self.r.returns:
            return None
        if fields[0].value == "return":  # joined with the other ways where the call ends
            self.r.returned[-1].append((self.sh.snapshot(), cond))
        raise Leave(fields[0].value)

    def exec_(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``exec bash FILE ARGS``: `bash FILE ARGS`, then (run surely) the end of this shell."""
        if len(fields) < 2 or fields[1].value not in ("bash", "sh") or \
                self.script(fields[1:], n, cond) is False:
            return False
        if self.sh.plain(cond) is None:
            raise Leave("exit")
        return None

    def set_(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``set -a`` / ``set -o allexport`` (what a launched process sees); ``set -- WORDS``
        (or words after the options) become the positional parameters."""
        cond = self.sh.plain(cond)
        k, named = None, False  # named: the word is the name an -o/+o option takes
        for i, f in enumerate(fields[1:], 1):
            v = f.value
            if named and v is not None:
                named = False
                continue
            if v == "--" or v is None or v[:1] not in ("-", "+") or v in ("-", "+"):
                k = i
                break
            named = v[-1] == "o" and v[1:2] != "-"  # -o NAME, -euo NAME
        if k is not None:
            words = fields[k + (fields[k].value == "--"):]
            known = cond is None and not any(f.unk or f.cond for f in words)
            self.sh.frames[-1] = list(words) if known else None
            if self.sh.positions:
                self.prov.read_position(INT_LIMIT)
            fields = fields[:k]
        named, on = False, True
        for f in fields[1:]:
            v = f.value or ""
            if named:  # the name of -o/+o: -o allexport, -o errexit
                named = False
                if v in ("allexport", "errexit"):
                    setattr(self.sh, v, on)
                continue
            if v[:1] in "-+" and v[1:2] != "-":
                on = v[0] == "-"
                self.sh.allexport = on if "a" in v else self.sh.allexport
                if "e" in v and cond is None:  # set -e, set -euo pipefail, set +e
                    self.sh.errexit = on
                named = v.endswith("o")

    def unset(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        for f in fields[1:]:
            if f.value and not f.value.startswith("-"):
                self.sh.vars.pop(f.value, None)

    def cd(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """Only an absolute, unconditional ``cd`` is followed (relative paths then resolve)."""
        rest = [f for f in fields[1:] if not (f.value or "-").startswith("-")]
        target = rest[0].value if rest else None
        if target and target.startswith("/") and not self.sh.plain(cond):
            self.sh.cwd = os.path.normpath(target)
        else:
            self.sh.cwd = None

    def shift(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        frame = self.sh.frames[-1]
        k = fields[1].value if len(fields) > 1 else "1"
        if frame is not None and k is not None and k.isdigit():
            self.sh.frames[-1] = frame[int(k):]
            if self.sh.positions:
                self.sh.positions[-1][0] += int(k)
        else:
            self.prov.read_position(INT_LIMIT)

    def getopts_next(self, fields: list[Field]) -> tuple[bool, dict] | None:
        """What ``getopts OPTSTRING NAME [ARGS]`` does next over known words: (status, the
        variables it sets, None to unset), or None when that is only known at run time (unknown
        words, options grouped in one word such as ``-vx``)."""
        if len(fields) < 3 or any(f.value is None or f.cond for f in fields[1:]):
            return None
        spec, name = fields[1].value, fields[2].value
        args = [f.value for f in fields[3:]] if len(fields) > 3 else None
        if args is None:
            frame = self.sh.frames[-1]
            if frame is None or any(f.value is None or f.cond for f in frame):
                return None
            args = [f.value for f in frame]
        ind = self.sh.vars.get("OPTIND")
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

    def getopts(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        got = self.getopts_next(fields)
        cond = self.sh.plain(cond)
        src = self.at.src(n.line)
        what = " ".join(f.value or f.text for f in fields)
        if got is None or cond is not None:
            for v in ((fields[2].value,) if len(fields) > 2 and fields[2].value else ()) + \
                    ("OPTARG", "OPTIND"):
                self.assigns.set(v, None, Unk(what, src, f"{v} is set by {what} at run time"),
                                 src, cond, what, what)
            return
        for v, value in got[1].items():
            self.sh.inherited.discard(v)
            if value is None:
                self.sh.vars.pop(v, None)
            else:
                self.assigns.set(v, value, None, src, None, what, what)

    def jump(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        self.loops.jump(fields[0].value, fields, self.at.src(n.line), cond)

    def read(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``read [-r] [-a A] NAMES`` and ``mapfile/readarray [-t] [-d D] A`` over known text."""
        name = fields[0].value
        cond = self.sh.plain(cond)
        array, delim, names = _read_options(fields)
        what = " ".join(f.value or f.text for f in fields)
        src = self.at.src(n.line)
        got = self.w.subs.stdin(n, what)
        ifs = next((a for a in n.prefix if a.name == "IFS"), None)
        var = self.sh.vars.get("IFS")
        ifs_v = self.w.join(ifs.value).value if ifs is not None else \
            (var.items[0].value if var is not None and var.items else " \t\n")
        unk = got.unk or cond or (None if ifs_v is not None else Unk(what, src, "IFS unknown"))
        if unk is not None or any(f.value is None for f in fields[1:]):
            unk = unk or next(f.unk for f in fields[1:] if f.value is None)
            for v, is_array in [(array, True)] * (array is not None) + [(x, False) for x in names]:
                why = f"{v} is read from text only known when the script runs ({unk.why})"
                self.sh.vars[v] = Var([Field(None, src, Unk(what, src, why), f"${{{v}[@]}}",
                                             extra=is_array)], is_array)
        elif name != "read":
            lines = got.value.split(delim)
            if lines and lines[-1] == "":
                lines.pop()
            keep = "-t" not in [f.value for f in fields]
            items = [Field(x + (delim if keep else ""), src, text=what) for x in lines]
            self.assigns.hold(0, self.sh.vars.get(array), items[:MAX_ITEMS])
            self.sh.vars[array] = Var(items[:MAX_ITEMS], True)
        else:
            raw = any(f.value and f.value[:1] == "-" and "r" in f.value for f in fields[1:])
            self.read_line(got.value, raw, delim, ifs_v, array, names, (src, cond, what))

    def read_line(self, text: str, raw: bool, delim: str, ifs_v: str, array: str | None,
                  names: list[str], at: tuple):
        """``read``'s assignments from the first line of known text."""
        src, cond, what = at
        if not raw:
            text = text.replace("\\\n", "")  # a backslash-newline joins lines
        line = text.split(delim, 1)[0]
        if not raw:
            line = re.sub(r"\\(.)", r"\1", line, flags=re.S)
        words = _split(line, ifs_v)
        if array is not None:
            items = [Field(w, src, text=what) for w in words[:MAX_ITEMS]]
            self.assigns.hold(0, self.sh.vars.get(array), items)
            self.sh.vars[array] = Var(items, True)
        blank = ifs_v and not ifs_v.strip(" \t\n")  # IFS of blanks only: the rest is kept
        for k, v in enumerate(names):
            last = k == len(names) - 1
            if last and blank and len(words) > k:
                value = _rest(line, ifs_v, k)
            else:
                value = " ".join(words[k:]) if last else (words[k] if k < len(words) else "")
            self.assigns.set(v, value, None, src, cond, what, what)

    def eval_(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``eval "A=(...)"``: a known string is parsed and run here; its words are not the
        file's text, so they carry no span."""
        bad = next((f for f in fields[1:] if f.unk), None)
        if bad is not None:  # it may set anything
            where = self.at.src(n.line)
            why = f"eval of text only known when the script runs ({bad.unk.why})"
            self.found.unknown(bad.text, where, why)
            return self.assigns.taint("eval " + bad.text, where, why)
        code = " ".join(f.value for f in fields[1:])
        if not code.strip():
            return
        self.r.run_text(code, n.line, cond, "eval", n)

    def printf_v(self, fields: list[Field], n: syntax.Simple, cond: Unk | None) -> bool:
        if not (len(fields) > 2 and fields[1].value == "-v" and fields[2].value):
            return False  # plain printf prints: nothing to set
        """``printf -v NAME FORMAT ARGS``: only %s, %d and %% are formatted statically."""
        name, src = fields[2].value, self.at.src(n.line)
        self.sh.inherited.discard(name)
        expr = " ".join(f.text if f.unk else f.value for f in fields)
        bad = next((f.unk for f in fields[3:] if f.unk), None)
        value = None
        if bad is None and len(fields) > 3:
            value = printf(fields[3].value, [f.value for f in fields[4:]])
        if value is None and bad is None:
            bad = Unk(expr, src, f"{name} is formatted by printf at run time")
        self.assigns.set(name, value, bad, src, cond, expr, expr)
        return True

    def source(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``source FILE [ARGS]``: its commands run here (with ARGS as $1...)."""
        args = fields[1:]
        if not args:
            return
        if len(args) > 1:  # its arguments are $1 ... while it runs; bash gives ours back
            self.sh.frames.append(_frame(args[1:]))
            self.sh.positions.append([0, 0])
            try:
                return self.source_one(fields[:2], n, cond)
            finally:
                self.sh.frames.pop()
                self.prov.pin(args[1:], self.sh.positions.pop()[1], n)
        return self.source_one(fields, n, cond)

    def source_one(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        f = fields[1]
        where = self.at.src(n.line)
        key = self.w.path_of(n.words[1]) if len(n.words) > 1 else None
        if key is not None and self.w.file_key(key) in self.sh.written:
            return self.r.run_written(self.w.file_key(key), n, cond)
        if f.value is None or f.value.startswith("~/"):
            shown = f.value or (n.words[1].text if len(n.words) > 1 else f.text)
            near = _by_tail(f, shown, where, self.at, self.found)
            if near is not None:
                return self.r.source_file(near, n, cond, shown)
        if _activation(self, fields[0].value, f, n, where):
            return None
        if f.value is None:
            why = f"cannot tell which file is sourced: {f.unk.why}"
            self.found.unknown(f.text, f.unk.src, why)
            what = n.words[1].text if len(n.words) > 1 else f.text  # as written, not the
            return self.assigns.taint(f"{fields[0].value} {what}", where, why)  # taint's text
        found = self.locate(f.value, where)
        if f.value.startswith("/") and found != os.path.normpath(f.value):
            self.found.machine.add(f.value)  # the job's machine's file (/root/slime/...)
        gone = _absent(f.value, self.sh.cwd, self.at.main_abs) if found is None else None
        if gone is not None:
            return self.missing_source(f.value, gone, n, where, cond)
        if found is None and (self.sh.cwd is None or f.value.startswith("/")) and \
                any(f.value in g for g in self.r.guards):
            # optional, skipped where absent (`[ -f .env ] && . .env`, `[ -f /opt/env.sh ] &&`):
            # what the script sets stays; what it never sets may come from /opt/... (MODEL_ARGS)
            if f.value.startswith("/"):
                self.found.missing.append(f"'{f.value}' (sourced at {where}, if it exists)")
            return None
        if found is None:
            looked = self.refused or _looked_for(f.value)
            self.found.missing.append(f"'{f.value}' (sourced at {where})")
            what = n.words[1].text if len(n.words) > 1 else f.text
            why = f"sourced file '{f.value}' not found ({looked})"
            self.found.unknown(what, where, f"{why}; the flags it defines are unknown")
            return self.assigns.taint(f"{fields[0].value} {what}", where, why)
        self.r.source_file(found, n, cond, f.value)

    def missing_source(self, path: str, root: str, n: syntax.Simple, where: Location,
                       cond: Unk | None):
        """``source F`` of a file inside the checkout that does not exist: "No such file or
        directory", status 1. Under `set -e`, unless its failure is tested (`if source F`,
        `source F || true`), bash stops there: the launch never runs (an error). Otherwise
        bash goes on and the names the file would set stay unset (a warning). Under a
        condition known only at run time (a guard such as `[ -f F ] &&`) nothing is said."""
        if cond is not None:  # a guarded source (`[ -f F ] && source F`): bash skips it, or
            return None  # runs it and it sets nothing; either way nothing becomes unknown
        shown = os.path.relpath(os.path.normpath(path), root) if path.startswith("/") \
            else path
        what = n.words[1].text if len(n.words) > 1 else path
        near = gate.by_tail(path, self.at.roots, os.path.dirname(self.at.main_abs)) \
            if path.startswith("/") else None
        here = os.path.dirname(self.at.file_abs)
        fix = f"source {os.path.relpath(near, root)}, the file of that name in the checkout " \
            f"(from the script's folder: {os.path.relpath(near, here)})" \
            if near and os.path.commonpath([root, near]) == root else \
            f"source the file by its real path (the folder that holds {os.path.basename(shown)})"
        if self.sh.errexit and not self.r.checked:
            self.found.note(
                "sourced-file-missing", f"{what} is {shown}, which does not exist in the "
                "script's checkout: under `set -e` bash stops at this `source` (No such file "
                "or directory), before the launch", fix, where)
            why = f"sourced file '{path}' does not exist; bash stops here (set -e)"
            self.found.unknown(what, where, why)
            return self.assigns.taint(f"{n.words[0].text} {what}", where, why)
        self.found.note(
            "sourced-file-skipped", f"{what} is {shown}, which does not exist in the script's "
            "checkout: bash reports it and goes on, and what the file would set stays unset",
            fix, where)
        return None

    def script(self, fields: list[Field], n: syntax.Simple, cond: Unk | None):
        """``bash FILE ARGS`` of a script found beside this one (``bash common_train.sh "$@"``):
        read as another shell runs it (its launch is the wrapper's); else any other command."""
        if len(fields) < 2 or fields[1].value is None or fields[1].value.startswith("-"):
            return False
        key = self.w.file_key(fields[1].value)
        if key in self.sh.written:  # a script it wrote (cat > start.sh <<EOF ... EOF)
            self.r.run_child(key, _frame(fields[2:]), n, cond, fields[1].value, written=True)
            return None
        if self.r.box is not None:  # a path of the container: mapped by its mounts, if any
            return self.r.contained(fields, n, cond)
        found = self.locate(fields[1].value, self.at.src(n.line), note=False)
        if found is None or not found.endswith(".sh"):
            return False
        return self.r.run_child(found, _frame(fields[2:]), n, cond, fields[1].value)  # None

    def locate(self, path: str, where: Location, note: bool = True) -> str | None:
        """The file a relative or absolute path names, through the gate (gate.py): from the
        current directory, the file being read, the main script's folder or one above it
        up to its checkout's root, never above; an absolute path outside the checkout is
        never read: the same tail inside the checkout (noted), else not found. A candidate
        the gate refuses (a credential name, a link out, a device) is skipped; the first
        reason is kept in `self.refused` for the message."""
        self.refused = None
        roots = self.at.roots
        tried = []
        if path.startswith("/"):
            tried.append(os.path.normpath(path))
        else:
            if self.sh.cwd:
                tried.append(os.path.join(self.sh.cwd, path))
            tried.append(os.path.join(os.path.dirname(self.at.file_abs), path))
            d = os.path.dirname(self.at.main_abs)
            while True:
                cand = os.path.join(d, path)
                if cand not in tried:
                    tried.append(cand)
                up = os.path.dirname(d)
                if up == d or not gate.inside(Path(os.path.realpath(up)), roots):
                    break  # never above the checkout
                d = up
        found = None
        for p in tried:
            try:
                gate.admit(p, roots)
            except gate.Refused as e:
                if os.path.lexists(p) and not (path.startswith("/") and e.kind == "outside"):
                    self.refused = self.refused or str(e)
                continue
            except OSError:
                continue
            found = os.path.normpath(p)
            break
        if found is None and path.startswith("/") and \
                _absent(path, self.sh.cwd, self.at.main_abs) is None:
            # a path outside the checkout (a container's /root/slime/...) only: one inside
            # it that does not exist is missing wherever the script runs
            got = gate.by_tail(path, roots, os.path.dirname(self.at.main_abs))
            found = None if got is None else os.path.normpath(got)
            if found is not None and note:
                self.found.note(
                    "sourced-from-checkout", f"'{path}' is not inside the script's checkout; "
                    f"read {self.at.disp(found)} instead, the same path inside it",
                    "pass the real file's folder with --env, or source it relative to the "
                    "script", where)
        return found


def _activation(b: Builtins, cmd: str | None, f: Field, n: syntax.Simple, where: Location
                ) -> bool:
    """``source`` of an environment's activation script (_ACTIVATE) that is not here (made by
    an install, never committed): only the manager's own names become unknown."""
    shown = n.words[1].text if len(n.words) > 1 else f.text
    if not _ACTIVATE.search(f.value or shown) or (f.value is not None and
                                                  b.locate(f.value, where, False) is not None):
        return False
    b.assigns.taint_names(f"{cmd} {shown}", where, _ACTIVATE_SETS)
    return True


def _looked_for(path: str) -> str:
    """Where a sourced file that was not found was looked for."""
    return ("it is not inside the script's checkout, nor does its path's tail exist there"
            if path.startswith("/") else "looked for it relative to the script and the "
            "directories above it, within its checkout")


def _absent(path: str, cwd: str | None, main: str) -> str | None:
    """The checkout root when `path` (absolute, or relative to a known working folder)
    lies inside the main script's checkout and does not exist: bash's `source` fails
    there, whatever the machine (the checkout travels with the script). None when it
    may exist where the job runs: a path outside the checkout (`/root/slime/...`), or a
    relative one read from a working folder that is not known."""
    from ..pylaunch.checkout import root_of

    if not path.startswith("/") and cwd is None:
        return None
    full = os.path.normpath(os.path.join(cwd or "/", path))
    root = root_of(main)
    if root is None or os.path.commonpath([root, full]) != root or os.path.exists(full):
        return None
    return root


def _by_tail(f: Field, shown: str, where: Location, at, found) -> str | None:
    """A sourced path whose folder is known only at run time (``~/slime/scripts/models/
    M.sh``, ``${HOME}/slime/...``, ``$(cmd)/models/M.sh``) but whose last names are known:
    the file of that tail inside the checkout (at least a folder and the file's name), as for
    a container's ``/root/slime/...`` (`Builtins.locate`); noted. None when there is none."""
    tail = f.value[1:] if f.value is not None else f.tail
    if tail.count("/") < 2 or "/../" in tail + "/":
        return None
    got = gate.by_tail("/~" + tail, at.roots, os.path.dirname(at.main_abs))
    if got is None:
        return None
    path = os.path.normpath(got)
    found.note(
        "sourced-from-checkout", f"'{shown}' is in a folder known only when the script runs; "
        f"read {at.disp(path)} instead, the file of the same tail in the script's checkout",
        "pass the folder with --env, or source the file relative to the script", where)
    return path


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


def _read_options(fields: list[Field]) -> tuple[str | None, str, list[str]]:
    """(array, delimiter, names) of ``read``/``mapfile`` words."""
    name = fields[0].value
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
    return array, delim, [x for x in names if syntax.NAME.fullmatch(x)]


def _frame(args: list[Field]) -> list[Field] | None:
    """Positional parameters from words; None (unknown) when how many is not known."""
    return None if any(f.extra or f.cond for f in args) else list(args)
