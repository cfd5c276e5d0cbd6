"""`miles-topology migrate SCRIPT...`: apply the pending steps, then show, write or check.

Nothing is written unless every pending step passed and the result reads as the same job:
the same Topology, the same other flags, the same launch. Writes are atomic (a temporary
file in the same folder, then os.replace on the file a symbolic link points to), the topology
YAML before the script that names it; the script keeps its mode and owner, and its previous
text goes to a new SCRIPT.bak (SCRIPT.bak.1, ... when that exists). Read-only files are
refused. The script is read again just before it is replaced: when an editor saved it in
the meantime, nothing is written (what was created is removed) and the edit stays.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import tempfile
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from ..reporting.safetext import ERR, OUT, Sink
from . import m0001_rename_flags, m0002_explicit_and_dead, m0003_consolidate
from .common import (
    Disagrees,
    NotALaunch,
    Refused,
    State,
    first_read,
    mark,
    read,
    verify,
    version,
)

STEPS = (m0001_rename_flags, m0002_explicit_and_dead, m0003_consolidate)  # in order
LATEST = STEPS[-1].ID


@dataclass
class Outcome:
    """A migrated script, not yet written."""

    path: Path
    old: str
    new: str
    files: dict[Path, str] = field(default_factory=dict)  # absolute path -> new text
    applied: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    old_names: list[str] = field(default_factory=list)  # kept renames: not up to date
    beside: list = field(default_factory=list)  # problems elsewhere in the command, as found

    @property
    def changed(self) -> bool:
        return self.new != self.old or any(
            not p.exists() or p.read_text() != t for p, t in self.files.items())


def load(path: Path) -> str:
    from ..reading import gate

    try:  # a bounded regular file in its own checkout (a link out of it is not read)
        data = gate.read_bytes(path, (gate.root_of(path),))
    except OSError as e:
        raise Refused(f"cannot read it: {e.strerror or e}", 2) from None
    except gate.Refused as e:
        raise Refused(str(e), 2) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("it is not UTF-8 text, so it cannot be edited byte for byte", 2) from None


def migrate(path: str | Path, env: dict[str, str] | None = None, inline: bool = False) -> Outcome:
    """Run every step on a script in memory; raises Refused, never writes. What is pending
    is read from the content, not the marker: a step that changes nothing is not applied,
    and a layout flag written again into a migrated script is moved again."""
    path = Path(path)
    not_shell(path)
    text = load(path)
    out = Outcome(path, text, text)
    state = State(path, text, dict(env or {}), inline)
    before = current = first_read(state)
    for step in STEPS:
        was, k = (state.text, dict(state.files)), len(state.kept)
        step.migrate(state, current)
        if step is m0001_rename_flags:  # a renamed flag left as it is (in a bash -c text, a
            out.old_names = state.kept[k:]  # variable, a sourced file) is not up to date
        if (state.text, state.files) == was:
            continue
        current = reread(step.ID, state)
        verify(step.ID, before, current)
        out.applied.append(step.ID)
    if out.applied and version(state.text) != int(LATEST):
        state.text = mark(state.text, LATEST)
        verify(LATEST, before, reread(LATEST, state))
    out.new, out.files, out.done, out.kept = state.text, state.files, state.done, state.kept
    out.beside = before.beside
    return out


def not_shell(path: Path) -> None:
    """A Python launcher or a YAML is refused by its name: read as bash, its first quote or
    `if` gave a false parse error (held-out: a launcher's docstring was an unclosed 'if')."""
    from ..reading.discover import YAML

    name = path.name.lower()
    if name.endswith(".py"):
        raise NotALaunch("it is a Python launcher; migrate rewrites shell launch scripts. "
                         "`miles-topology check --fix` renames its deprecated flags", 2)
    if name.endswith(YAML):
        raise NotALaunch("it is a YAML file; migrate rewrites the shell launch scripts "
                         "that name it", 2)


def reread(step: str, state: State):
    try:
        return read(state)
    except Refused as e:
        raise Refused(f"step {step} would leave a script that does not read back "
                      f"({e.reason}); nothing was written.") from None


def target_of(out: Outcome) -> Path:
    """The file the script's text lives in: a symbolic link is followed, never replaced."""
    return Path(os.path.realpath(out.path))


def writable(out: Outcome) -> None:
    """Refuse, before anything is written, what `write` could not do safely: the script and
    each file beside it stay in the script's checkout (gate.writable: no link out of it,
    no dangling link), then the checks below."""
    from ..reading import gate

    root = gate.root_of(out.path)
    for p in [out.path, *out.files]:
        try:
            gate.writable(p, root)
        except gate.Refused as e:
            raise Refused(f"{e}; nothing was written.") from None
    target = target_of(out)
    if out.path.is_symlink() and out.files and target.parent != out.path.absolute().parent:
        raise Refused(f"it is a symbolic link to {target}, in another folder; the topology "
                      "file would sit beside only one of them. Migrate the file itself (or "
                      "use --inline); nothing was written.")
    try:
        st = target.stat()
    except OSError as e:
        raise Refused(f"cannot read it: {e.strerror or e}", 2) from None
    if not st.st_mode & stat.S_IWUSR or not os.access(target, os.W_OK):
        raise Refused(f"it is read-only (mode {stat.S_IMODE(st.st_mode):04o}); nothing was "
                      "written. Make it writable (chmod u+w) to rewrite it.")
    if st.st_nlink > 1:
        raise Refused(f"it has {st.st_nlink} hard links, and replacing it would leave the "
                      "others with the old text; nothing was written.")
    for d in {target.parent, *(p.parent for p in out.files)}:
        if not os.access(d, os.W_OK | os.X_OK):
            raise Refused(f"its folder {d} is not writable; nothing was written.")
    if os.geteuid() != 0 and (st.st_uid != os.geteuid() or
                              st.st_gid not in (os.getegid(), *os.getgroups())):
        raise Refused(f"it belongs to uid {st.st_uid} gid {st.st_gid}, which a rewritten file "
                      "could not keep; nothing was written.")


def backup_path(target: Path) -> Path:
    """SCRIPT.bak, or the first free SCRIPT.bak.N: an earlier backup is never overwritten."""
    bak, n = target.with_name(target.name + ".bak"), 0
    while os.path.lexists(bak):
        n += 1
        bak = target.with_name(f"{target.name}.bak.{n}")
    return bak


def write(out: Outcome) -> list[Path]:
    """Write the YAML first, then the script (its previous text goes to a new SCRIPT.bak[.N]);
    on failure undo what was created and leave the script as it was. A symbolic link is
    followed; the mode and owner of the script are kept. Returns the files written, the
    backup last."""
    writable(out)
    target = target_of(out)
    st = target.stat()
    owner = (st.st_uid, st.st_gid)
    written, created, replaced = [], [], {}
    try:
        unchanged(out, target)
        for p, text in out.files.items():
            if p.exists() and p.read_text() == text:
                continue
            p = Path(os.path.realpath(p))  # a link stays a link here too
            if p.exists():
                replaced[p] = p.read_bytes()
            else:
                created.append(p)
            _atomic(p, text.encode(), 0o644, owner)
            written.append(p)
        bak = backup_path(target)
        _atomic(bak, out.old.encode(), stat.S_IMODE(st.st_mode), owner, exclusive=True)
        created.append(bak)
        unchanged(out, target)  # just before the replace: an edit meanwhile is not lost
        _atomic(target, out.new.encode(), stat.S_IMODE(st.st_mode), owner)
        written += [target, bak]
    except (OSError, Refused) as e:
        for p in created:
            with suppress(OSError):
                p.unlink()
        for p, data in replaced.items():
            with suppress(OSError):
                _atomic(p, data, 0o644, owner)
        if isinstance(e, Refused):
            raise
        raise Refused(f"cannot write ({e.strerror or e}); the script was left as it was") \
            from None
    return written


def replace_in_place(out: Outcome) -> None:
    """Replace the script with `out.new`, keeping no backup (`check --fix`): refused as
    `write` refuses, and not when it changed since it was read."""
    writable(out)
    target = target_of(out)
    st = target.stat()
    try:
        unchanged(out, target)
        _atomic(target, out.new.encode(), stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid))
    except OSError as e:
        raise Refused(f"cannot write ({e.strerror or e}); the script was left as it was") \
            from None


def unchanged(out: Outcome, target: Path) -> None:
    """Refuse when the script on disk is no longer the text that was migrated (an editor
    saved it meanwhile): replacing it would lose that edit."""
    try:
        now = target.read_bytes()
    except OSError as e:
        raise Refused(f"cannot read it again before writing ({e.strerror or e}); nothing "
                      "was written") from None
    if now != out.old.encode():
        raise Refused("it changed while it was being migrated (saved by an editor?); "
                      "nothing was written, and the change is kept. Run migrate again.")


def _atomic(path: Path, data: bytes, mode: int, owner: tuple[int, int] | None = None,
            exclusive: bool = False) -> None:
    """A temporary file in the same folder, renamed over `path` (or linked to it when
    `exclusive`: then an existing file is an error, never replaced)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if owner is not None and (os.stat(tmp).st_uid, os.stat(tmp).st_gid) != owner:
            os.chown(tmp, *owner)
        os.chmod(tmp, mode)
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def diff(out: Outcome) -> str:
    """A unified diff of the script and of each file written beside it."""
    parts = [_udiff(out.old, out.new, str(out.path), str(out.path))]
    for p, text in out.files.items():
        shown = os.path.join(os.path.dirname(str(out.path)), p.name)
        old = p.read_text() if p.exists() else ""
        parts.append(_udiff(old, text, shown if p.exists() else "/dev/null", shown))
    return "".join(parts)


_LINES = re.compile(r"[^\n]*\n|[^\n]+$")


def _udiff(a: str, b: str, fa: str, fb: str) -> str:
    # lines as bash ends them, at "\n" only (splitlines also ends one at "\r", "\x1c"...)
    lines = difflib.unified_diff(_LINES.findall(a), _LINES.findall(b), fa, fb)
    return "".join(x if x.endswith("\n") else x + "\n\\ No newline at end of file\n"
                   for x in lines)


def say(text: str, sink: Sink = OUT) -> None:
    """Print one line that holds a script's words (a pull request's, in CI) through the sink:
    each control character escaped, a newline in a file name too (it would start a line of its
    own: a forged verdict), no workflow command (safetext, as `check` prints)."""
    sink.line(text)


def report(out: Outcome, stream: Sink) -> None:
    say(f"{out.path}: applied {', '.join(out.applied)}", stream)
    for line in out.done:
        say(f"  {line}", stream)
    for line in out.kept:
        say(f"  kept: {line}", stream)
    for p in out.beside:  # not the layout's: carried over as written, for the user to fix
        say(f"  also ({p.severity}): [{p.code}] {p.message}", stream)


def main(inputs: list[str], env: dict[str, str], *, write: bool = False, check: bool = False,
         inline: bool = False, quiet: bool = False, only_migrated: bool = False) -> int:
    """The `migrate` subcommand; returns the exit code (0 done, 1 pending or refused, 2 unreadable
    input or usage)."""
    if check and write:
        ERR.line("miles-topology migrate: --check only reports; give it without --write")
        return 2
    if not inputs:
        ERR.line("miles-topology migrate: give the launch scripts to migrate")
        return 2
    from ..reading import gate

    code = 0
    for name in inputs:
        if quiet and check and not _launches(name):
            continue  # a model file, a helper: no launch, nothing to move (pre-commit hook)
        try:
            with gate.checking(name):  # what the script names is read only inside its roots
                code = max(code, _one(Path(name), env, write, check, inline, quiet,
                                      only_migrated))
        except Refused as e:
            say(f"{name}: refused: {e.reason}", ERR)
            code = max(code, e.code)
    return code


def _launches(name: str) -> bool:
    """Whether a file is a launch script by its content (discover.py), as a walk finds it."""
    from ..reading.discover import kind

    return not os.path.isfile(name) or kind(name) == "script"


def _one(path: Path, env: dict[str, str], write_: bool, check: bool, inline: bool,
         quiet: bool = False, only_migrated: bool = False) -> int:
    if check:
        return _check(path, env, inline, quiet, only_migrated)
    out = migrate(path, env, inline)
    if not out.applied:
        say(_unchanged(out), ERR)
        for line in out.old_names:
            say(f"  kept: {line}", ERR)
        return 0
    if not write_:
        OUT.diff(diff(out))
        report(out, ERR)
        return 0
    written = write(out)
    report(out, OUT)
    say(f"  wrote {', '.join(str(p) for p in written[:-1])} (previous script in "
        f"{written[-1].name})")
    return 0


def _unchanged(out: Outcome) -> str:
    """A script no step changes: up to date, unless a renamed flag had to keep its old name
    (inside a `bash -c` text, a variable, a sourced file: `old_names`)."""
    if not out.old_names:
        return f"{out.path}: up to date (migration {LATEST})"
    return f"{out.path}: nothing to write, but not up to date: {len(out.old_names)} renamed " \
        "flag(s) keep their old names, left to you"


def _check(path: Path, env: dict[str, str], inline: bool, quiet: bool = False,
           only_migrated: bool = False) -> int:
    """Pending is what `--write` would write: a file it would refuse, or one with no launch
    of its own (a sourced model file), is reported but not pending. `quiet`: only pending
    scripts are printed; `only_migrated`: a script never migrated (no marker) is not
    looked at, so a repository can keep its migrated scripts migrated (pre-commit)."""
    text = load(path)  # unreadable: exit 2
    if only_migrated and not version(text):
        return 0
    try:
        out = migrate(path, env, inline)
        if out.applied and out.changed:
            writable(out)
    except Disagrees as e:  # the script and its topology file disagree: the hook fails
        say(f"{path}: {e.reason}")
        return 1
    except Refused as e:
        if e.code == 2 and not isinstance(e, NotALaunch):
            raise
        if not quiet:
            say(f"{path}: not migrated (--write would refuse: {e.reason})")
        return 0
    if not out.applied or not out.changed:
        if not quiet:
            say(_unchanged(out))
        return 0
    todo = ", ".join(f"{s.ID} ({s.SUMMARY})" for s in STEPS if s.ID in out.applied)
    say(f"{path}: pending {todo}; run `miles-topology migrate --write {path}`")
    return 1
