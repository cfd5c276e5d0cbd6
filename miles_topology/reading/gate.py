"""The one gate for every path an input names (docs/sandbox.md, "The gate").

What `check`, `show`, `plan` and `migrate` read may be a pull request's, run on a CI runner
whose home folder, other checkouts and `.git/config` hold secrets, with the report published.
So a file is opened because an input names it (a sourced file, `--topology`, a YAML or model
file, a fork's sources, a folder-walk entry, a `--fix`/migrate target, a helper's program, the
report's re-read for columns) only through `admit`: its path resolved through every symlink
must lie inside one of the input's roots (its checkout, `root_of`, and the roots the user gave:
`--read`, `--stack`, `--path`), hold no credential or VCS name (`HIDDEN`, `HIDDEN_PAIRS`) below
that root, and be a regular file of bounded size (never a FIFO, a device, `/dev/stdin`). A
refused path raises `Refused`; its reader leaves what the file would have set unknown with the
reason, and the input is still judged.

`ROOTS` is the input being judged (`checking`); with none (the library's own use:
`Topology.from_yaml`, `miles.train --topology` at run time) only the file-type and size
bounds hold, since the user chose the path.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path

LIMIT = 8 << 20  # bytes of a script, a sourced file or a re-read for columns
AST_LIMIT = 2 << 20  # bytes of a YAML, a model file or a fork's Python source (parsed whole)

# Names refused at any depth below a root: VCS data (a remote URL with a token in
# .git/config), credential files and folders, token caches, shell histories.
HIDDEN = frozenset((
    ".git", ".hg", ".svn", ".ssh", ".netrc", "_netrc", ".git-credentials", ".gitconfig",
    ".aws", ".azure", ".gcloud", ".docker", ".dockercfg", ".gnupg", ".kube", ".pypirc",
    ".npmrc", ".yarnrc", ".pgpass", ".my.cnf", ".vault-token", ".terraform.d",
    ".password-store", ".boto", ".s3cfg", ".huggingface", ".kaggle", ".databrickscfg",
    ".modal.toml", ".env", ".envrc", ".bash_history", ".zsh_history", ".python_history",
    ".psql_history", ".mysql_history", ".lesshst", ".viminfo"))
# Two names in a row refused at any depth (a folder of tokens under an ordinary one).
HIDDEN_PAIRS = frozenset((
    (".config", "gh"), (".config", "hub"), (".config", "gcloud"), (".config", "git"),
    (".config", "rclone"), (".config", "wandb"), (".config", "op"), (".config", "doctl"),
    (".cache", "huggingface"), (".cache", "wandb"), (".local", "share"),
    (".cargo", "credentials"), (".cargo", "credentials.toml"), (".m2", "settings.xml"),
    (".gradle", "gradle.properties"), (".aider", "keys")))

_ADMITTED: set[str] = set()  # resolved paths admitted in this process (`reread`)
# Files a migration is about to write (absolute path -> text), read in place of the disk
# (yamlflags.staged): the tool's own text, not a file the input names.
STAGED: ContextVar[Mapping[Path, str] | None] = ContextVar("staged_files", default=None)
ROOTS: ContextVar[tuple[Path, ...] | None] = ContextVar("gate_roots", default=None)
USER: ContextVar[tuple[Path, ...]] = ContextVar("gate_user_roots", default=())


class Refused(Exception):
    """A path the gate does not open; `str()` is the one-line reason (never the content).
    `kind`: "outside" (no root holds it), "hidden", "type" or "size"."""

    def __init__(self, reason: str, kind: str):
        super().__init__(reason)
        self.kind = kind


def hidden_in(parts: Iterable[str]) -> str | None:
    """The first credential or VCS name among path components, as written; else None."""
    parts = list(parts)
    for k, name in enumerate(parts):
        if name in HIDDEN:
            return name
        if k + 1 < len(parts) and (name, parts[k + 1]) in HIDDEN_PAIRS:
            return f"{name}/{parts[k + 1]}"
    return None


MARKERS = ("pyproject.toml", "setup.py", "setup.cfg")


def _folders(here: str) -> list[str]:
    folders = [here]
    while os.path.dirname(folders[-1]) != folders[-1]:
        folders.append(os.path.dirname(folders[-1]))
    return folders


def git_root(folder: str) -> str | None:
    """The git work tree holding `folder` (the nearest one above with a .git), else None."""
    return next((d for d in _folders(os.path.abspath(folder))
                 if os.path.exists(os.path.join(d, ".git"))), None)


def project_root(folder: str) -> str | None:
    """The nearest folder above `folder` with a pyproject.toml, setup.py or setup.cfg."""
    return next((d for d in _folders(os.path.abspath(folder))
                 if any(os.path.isfile(os.path.join(d, m)) for m in MARKERS)), None)


def _too_wide(folder: Path) -> bool:
    """$HOME, / or a folder above $HOME: never a checkout."""
    home = Path(os.path.expanduser("~")).resolve()
    return folder == Path(folder.anchor) or folder == home or folder in home.parents


@lru_cache(maxsize=1024)
def _root_of_folder(folder: Path) -> Path | None:
    for found in (git_root(str(folder)), project_root(str(folder))):
        if found is not None and not _too_wide(Path(found)):
            return Path(found)
    return None if _too_wide(folder) else folder


def root_of(path: str | os.PathLike) -> Path:
    """The input's checkout (pylaunch/checkout.py): its git root, else the nearest project
    folder above (pyproject.toml, setup.py); with neither, its own folder; never $HOME or /
    (then the file alone). Found from the folder the path is in, its last link not followed:
    a file named on the command line that is a link out of its checkout (a pull request's
    `run.sh -> ~/.aws/credentials`) is then outside its roots and refused, as in a walk; and
    a file to write (`--fix`, `migrate --write`) and what it links to must stay inside it."""
    folder = Path(os.path.realpath(os.path.dirname(os.path.abspath(path))))
    return _root_of_folder(folder) or folder / Path(path).name


def writable(path: str | os.PathLike, root: Path) -> None:
    """Refused unless writing `path` stays inside `root`: no link out of it, no dangling
    link (writing through one creates its target wherever it points), no hidden name."""
    if os.path.islink(path) and not os.path.exists(path):
        raise Refused(f"{path}: a dangling symbolic link; not written through", "outside")
    check_path(path, (root,))


def add_user_roots(paths: Iterable[str | os.PathLike]) -> None:
    """Roots the user gave (--read, --stack, --path): readable for every input."""
    got = [Path(os.path.realpath(p)) for p in paths if p]
    USER.set(tuple(dict.fromkeys([*USER.get(), *got])))


def roots_for(path: str | os.PathLike) -> tuple[Path, ...]:
    """The input's checkout, then the user's roots; each once (`--path .` in the checkout
    named it twice in a refusal)."""
    return tuple(dict.fromkeys((root_of(path), *USER.get())))


@contextmanager
def checking(path: str | os.PathLike) -> Iterator[tuple[Path, ...]]:
    """Judge the input at `path`: what it names is read only inside its roots."""
    roots = roots_for(path)
    token = ROOTS.set(roots)
    try:
        yield roots
    finally:
        ROOTS.reset(token)


@contextmanager
def also(folder: str | os.PathLike) -> Iterator[None]:
    """The tool's own temporary folder readable too, while it reads what it wrote there."""
    now = ROOTS.get()
    token = ROOTS.set(None if now is None else (*now, Path(os.path.realpath(folder))))
    try:
        yield
    finally:
        ROOTS.reset(token)


def current() -> tuple[Path, ...] | None:
    return ROOTS.get()


def inside(path: Path, roots: Iterable[Path]) -> Path | None:
    """The root that holds the resolved `path`, else None."""
    return next((r for r in roots if path == r or r in path.parents), None)


def check_path(path: str | os.PathLike, roots: Iterable[Path] | None = None) -> Path:
    """`path` resolved through every symlink, when it stays inside a root and holds no hidden
    name below it; else Refused. Not opened: a target to write (fix, migrate) is checked so."""
    roots = current() if roots is None else tuple(Path(r) for r in roots)
    real = Path(os.path.realpath(path))
    if roots is None:
        return real
    root = inside(real, roots)
    if root is None:
        raise Refused(f"{path}: outside the input's checkout ({_show(roots)}); not read", "outside")
    bad = hidden_in(real.relative_to(root).parts) or hidden_in([Path(path).name])
    if bad is not None:
        raise Refused(f"{path}: a credential or VCS name ({bad}); not read", "hidden")
    return real


def _show(roots: tuple[Path, ...]) -> str:
    return ", ".join(str(r) for r in roots[:3]) + (", ..." if len(roots) > 3 else "")


def admit(path: str | os.PathLike, roots: Iterable[Path] | None = None, *,
          limit: int = LIMIT) -> Path:
    """`path`, resolved, when it may be opened: inside a root (`roots`, else the current
    input's; with neither, anywhere), no hidden name, a regular file of at most `limit`
    bytes. Else Refused with the reason; OSError when it is not there."""
    real = check_path(path, roots)
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{path}: not a regular file (a device, FIFO or folder); not read",
                      "type")
    if st.st_size > limit:
        raise Refused(f"{path}: {st.st_size >> 10} KiB, over the {limit >> 10} KiB an input's "
                      "file may be; not read", "size")
    if len(_ADMITTED) < 100_000:
        _ADMITTED.add(str(real))
    return real


def reread(path: str | os.PathLike, *, limit: int = LIMIT) -> str | None:
    """A file's text read again for the report (columns, directives): only a file the gate
    admitted in this run, and only while it is still a bounded regular file; else None."""
    real = os.path.realpath(path)
    if real not in _ADMITTED:
        return None
    try:
        return read_text(real, (Path(real),), limit=limit)
    except (OSError, Refused):
        return None


def read_bytes(path: str | os.PathLike, roots: Iterable[Path] | None = None, *,
               limit: int = LIMIT) -> bytes:
    """The file's bytes through `admit`, opened without blocking and read with the bound (it
    may have grown since)."""
    real = admit(path, roots, limit=limit)
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(f"{path}: not a regular file; not read", "type")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"{path}: over the {limit >> 10} KiB an input's file may be; not read",
                      "size")
    return data


def read_text(path: str | os.PathLike, roots: Iterable[Path] | None = None, *,
              limit: int = LIMIT, errors: str = "replace") -> str:
    return read_bytes(path, roots, limit=limit).decode("utf-8", errors)


def is_file(path: str | os.PathLike, roots: Iterable[Path] | None = None, *,
            limit: int = LIMIT) -> bool:
    """Whether `admit` lets the file through (for a lookup among candidates)."""
    try:
        admit(path, roots, limit=limit)
        return True
    except (Refused, OSError):
        return False


def find(path: str, roots: Iterable[Path] | None = None, start: str | None = None, *,
         limit: int = LIMIT) -> Path:
    """`admit`, and an absolute path outside the roots looked up by its tail inside them
    (`by_tail`) instead of read; Refused (or OSError: not there) when neither gives one.
    The path as given when it is admitted (messages keep its name), or when it is a text
    `migrate` is about to write (yamlflags.STAGED: the tool's own, read in its place)."""
    if (STAGED.get() or {}).get(Path(os.path.abspath(path))) is not None:
        return Path(path)
    try:
        admit(path, roots, limit=limit)
        return Path(path)
    except Refused as e:
        if e.kind != "outside" or not os.path.isabs(path):
            raise
        got = by_tail(str(path), roots, start)
        if got is None:
            raise
        return admit(got, roots, limit=limit)


def by_tail(path: str, roots: Iterable[Path] | None = None, start: str | None = None,
            min_parts: int = 2) -> Path | None:
    """An absolute path that is not inside the input's roots, looked up by its tail inside
    them (``/root/slime/scripts/models/glm4.sh`` -> ``ROOT/scripts/models/glm4.sh``): in
    `start`'s folder and each one above it up to its root (never above), then each other
    root; the nearest folder and the longest tail of at least `min_parts` names first.
    None: not found."""
    roots = current() if roots is None else tuple(roots)
    if not roots:
        return None
    parts = [p for p in Path(os.path.normpath(path)).parts if p not in ("/", "")]
    tails = [Path(*parts[k:]) for k in range(1, len(parts) - min_parts + 1)]
    folders: list[Path] = []
    if start is not None:
        d = Path(os.path.realpath(start))
        while inside(d, roots) is not None:
            folders.append(d)
            if d.parent == d:
                break
            d = d.parent
    folders += [r for r in roots if r not in folders and os.path.isdir(r)]
    for d in folders:
        for tail in tails:
            cand = d / tail
            if is_file(cand, roots):
                return cand
    return None
