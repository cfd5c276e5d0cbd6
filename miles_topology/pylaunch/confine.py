"""The static reading of an input under the kernel's read rules (issue 33 item 2).

The gate (gate.py) is code: a path some reader forgets to send through it would be read. So
the reading of one bash script or YAML (the script reader, YAML, a fork's `ast`) runs in a
forked child that first restricts itself with Landlock to the same reads a launcher gets
(pylaunch/isolate.py): the input's roots (credential names left out at any depth, links
never followed out), the system's libraries, the checker's own interpreter, package and
import path, and its flag cache. A path the code forgets is then refused by the kernel. Only
reads are restricted (writes are `--fix`/`migrate`'s, which run in the checker).

The child sends back the verdict (or the InputError) and the paths the gate admitted (the
report re-reads them for columns). Where the kernel has no Landlock (macOS, an old kernel, a
container profile without it) the reading runs in-process behind the gate alone, and the
report says so once (`NOTE`). MILES_TOPOLOGY_CONFINE=0 turns the child off (a debugger).
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
NOTE = ("static reading: the user-space gate only (this kernel offers no Landlock, so the "
        "checker's own reads of an input are not also refused by the kernel)")
_SAID: ContextVar[bool] = ContextVar("confine_note_said", default=False)  # once a run


def available() -> bool:
    if sys.platform != "linux" or os.environ.get("MILES_TOPOLOGY_CONFINE") == "0":
        return False
    from . import isolate

    return isolate.landlock_abi() >= 1


def missing_note() -> str | None:
    """NOTE, the first time in a run (cli.main's context) that it applies; the reason is
    the user's switch where MILES_TOPOLOGY_CONFINE=0 turned the kernel rules off."""
    if available() or _SAID.get():
        return None
    _SAID.set(True)
    if os.environ.get("MILES_TOPOLOGY_CONFINE") == "0":
        return NOTE.replace("this kernel offers no Landlock", "MILES_TOPOLOGY_CONFINE=0")
    return NOTE


_RULES: dict[tuple[str, ...], tuple[tuple, list[tuple[str, int]]]] = {}


def _rules(roots: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """The read rules for these roots, computed in the checker (the walk for hidden names is
    the costly part) and inherited by each child; kept while no split folder (one whose
    entries have rules of their own) gained or lost an entry (its mtime)."""
    from . import isolate

    got = _RULES.get(roots)
    if got is not None and all(_mtime(d) == t for d, t in got[1]):
        return got[0]
    rules = _compute(roots)
    split = [(p, _mtime(p)) for p, r in rules if r == isolate.FS_READ_DIR]
    if len(_RULES) > 32:
        _RULES.clear()
    _RULES[roots] = (rules, split)
    return rules


def _cut(rules, roots: tuple[str, ...]) -> bool:
    """Whether a root got names only and nothing below it: its walk passed WALK_MAX (a
    script straight in /tmp, a home folder), so its files, the input's own included, would
    be refused by the kernel."""
    from . import isolate

    under = {p for p, _ in rules}
    for root in (os.path.realpath(r) for r in roots):
        if (root, isolate.FS_READ_DIR) in rules and not any(
                p.startswith(root.rstrip(os.sep) + os.sep) for p in under):
            return True
    return False


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _compute(roots: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    from ..reading.stack import cache_dir
    from . import isolate

    own = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
           str(Path(__file__).resolve().parent.parent), *(p for p in sys.path if p),
           str(cache_dir())]
    system = [(p, isolate.FS_READS) for p in isolate.SYSTEM]
    return tuple(system + isolate.readable([*roots, *own]))


def _restrict(rules) -> None:
    """Landlock: reads (files, folders) only beneath `rules`; nothing else handled."""
    import ctypes
    import stat
    import struct

    from . import isolate

    isolate._prctl(isolate.PR_SET_NO_NEW_PRIVS, 1)
    attr = struct.pack("Q", isolate.FS_READS)
    ruleset = isolate._sys(isolate.LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)),
                           ctypes.c_uint32(0))
    try:
        for path, allowed in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= isolate.FS_READ_FILE
                if allowed:
                    isolate._sys(isolate.LANDLOCK_ADD_RULE, ruleset, 1,
                                 struct.pack("=Qi", allowed, fd), ctypes.c_uint32(0))
            finally:
                os.close(fd)
        isolate._sys(isolate.LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


@lru_cache(maxsize=1)
def _private_tmp() -> str:
    """This run's temporary folder for the children (removed when the checker exits)."""
    import atexit
    import shutil
    import tempfile

    path = os.path.realpath(tempfile.mkdtemp(prefix="miles-topology-confine-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def run(path: str, fn: Callable[[], T]) -> T:
    """`fn()` (the reading of the input at `path`), in a child under the kernel's read rules
    for that input's roots; in-process where the kernel cannot (noted once)."""
    from ..reading import gate

    if not available():
        return fn()
    roots = tuple(str(r) for r in (gate.current() or gate.roots_for(path)))
    tmp = _private_tmp()  # a helper's sandbox writes its config there, and reads it back
    rules = _rules((*roots, tmp))
    if _cut(rules, roots):  # a root too big to walk for hidden names (isolate.WALK_MAX) is
        return fn()  # listable only under the kernel: the user-space gate alone reads it
    if os.path.isfile(path):  # the input itself, whatever the cached rules of its folder say
        from . import isolate  # (a file staged after they were computed: `check -`)

        rules = (*rules, (os.path.realpath(path), isolate.FS_READS))
    r, w = os.pipe()  # child -> checker: helper calls, then the answer
    r2, w2 = os.pipe()  # checker -> child: each helper's result
    import warnings

    with warnings.catch_warnings():  # 3.12 warns of a fork beside the launchers' threads:
        warnings.simplefilter("ignore", DeprecationWarning)  # the child only reads, and
        pid = os.fork()  # CPython resets the import lock in it; its answer comes on a pipe
    if pid == 0:  # the child: restrict, read, answer, leave without cleanup handlers
        code = 0
        try:
            os.close(r)
            os.close(w2)
            import tempfile

            tempfile.tempdir = tmp
            os.environ["TMPDIR"] = tmp
            _restrict(rules)
            _helpers_by_the_checker(w, r2)
            try:
                out: tuple[str, Any] = ("ok", fn())
            except Exception as e:  # InputError, NoTrainingLaunch, a bug: the parent's
                out = ("err", e)
            _send(w, ("done", (out, sorted(gate._ADMITTED))))
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    os.close(r2)
    answer = None
    try:
        while True:
            msg = _recv(r)
            if msg is None:
                break
            kind, body = msg
            if kind == "done":
                answer = body
                break
            from .. import pylaunch  # a helper: run by the checker, in the launcher sandbox

            args, kwargs = body
            _send(w2, pylaunch.run_program(*args, **kwargs))
    except (OSError, EOFError, pickle.PickleError):
        answer = None
    finally:
        os.close(r)
        os.close(w2)
        _, status = os.waitpid(pid, 0)
    if answer is None or os.waitstatus_to_exitcode(status) != 0:
        return fn()  # the child could not answer (a kernel refusing the rules): in-process
    (kind, value), admitted = answer
    gate._ADMITTED.update(admitted)
    if kind == "err":
        raise value
    return value


def _send(fd: int, obj) -> None:
    data = pickle.dumps(obj)
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(fd, view):]


def _recv(fd: int):
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            got = os.read(fd, n - len(out))
            if not got:
                raise EOFError
            out += got
        return bytes(out)

    try:
        head = exactly(8)
    except EOFError:
        return None
    return pickle.loads(exactly(int.from_bytes(head, "little")))


def _helpers_by_the_checker(w: int, r: int) -> None:
    """In the child: a helper (`$(python3 helper.py)`) is run by the checker, whose launcher
    sandbox needs a mount namespace that a Landlock-restricted process cannot make."""
    from .. import pylaunch

    def run_program(*args, **kwargs):
        _send(w, ("call", (args, kwargs)))
        return _recv(r)

    pylaunch.run_program = run_program
