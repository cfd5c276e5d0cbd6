"""Scripts another bash runs from text, not from a file: a here-document read by a shell
(``bash -s <<'EOF'``) and ``bash -c TEXT`` (SLURM launchers start each node with ``srun ...
bash -lc '...'``). Their words are not located (as in ``eval``)."""

from __future__ import annotations

from . import launch as launches
from . import syntax
from .builtins import _frame
from .records import ScriptReadError
from .values import Field, Unk


class Texts:
    """The texts other hidden run, of one read (`r`: interpret.Reader)."""

    def __init__(self, r):
        self.r = r

    def heredoc(self, doc: syntax.Heredoc, cond: Unk | None):
        """``bash -s <<'EOF'`` (also behind ``docker run IMAGE``, ``ssh HOST``): the
        here-document is a script another shell runs; read here with this shell's values,
        its variables not kept. An unquoted one is expanded by this shell first (when that
        is unknown, its text is read as written)."""
        r = self.r
        text = doc.text
        if doc.word is not None:  # unquoted delimiter: this shell expands the text first
            got = r.w.join(doc.word)
            if got.unk is None and got.cond is None:
                text = got.value
        if not text.strip() or r.budget.deep:
            return
        try:
            body = r.files.parse(text.encode("utf-8", "surrogateescape"), r.at.file, False,
                                 doc.line)
        except ScriptReadError:
            if text is doc.text and doc.word is not None:
                return None  # its expansions unknown, its text as written is not bash: the
                # other shell's script is not known here (and sets nothing in this one)
            raise
        r.budget.calls += 1
        try:
            r.subshell(body, cond, shell=True)
        finally:
            r.budget.calls -= 1

    def command(self, fields: list[Field], i: int, cond: Unk | None):
        """``bash -c TEXT [NAME ARGS...]`` (`i`: TEXT's index; behind wrappers too): another
        shell runs TEXT with NAME as $0 and ARGS as $1..., as ``bash FILE`` runs a file
        (interpret.Reader.run_child: only the exported variables, nothing comes back). A TEXT
        not known here is not read; one that names train.py is kept for the message."""
        r, f = self.r, fields[i]
        if f.value is None and any(t in f.text for t in launches.TRAIN_FILES):
            r.found.hidden.append((f.src, f.unk.why if f.unk else "its value is unknown"))
        if f.value is None or f.cond is not None or not f.value.strip() or r.budget.deep:
            return
        try:
            body = r.files.parse(f.value.encode("utf-8", "surrogateescape"), r.at.file, False,
                                 f.src.line)
        except ScriptReadError as e:
            raise ScriptReadError(f"{f.src}: the text `bash -c` runs is not valid bash: "
                                  f"{e}") from None
        zero = fields[i + 1].value if i + 1 < len(fields) else None
        with r.child_shell(_frame(fields[i + 2:]), zero or "bash"), \
                r.ending("exit", shell=True):
            r.run(body, cond)
