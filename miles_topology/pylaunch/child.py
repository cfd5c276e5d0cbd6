"""Run one Python launcher (or ``python3 -c`` / ``-m`` program) and record what it does.

This file runs as ``python -E -B -S child.py CONFIG.json`` and imports nothing of miles_topology.
First it isolates itself (``isolate.enter``: namespaces, Landlock, seccomp), with only the
standard library imported and the launcher's folder not on ``sys.path``; that, the kernel's,
is what keeps the machine safe (docs/sandbox.md). Then, for recording only, every way to start
a program, signal one, reach the network or change files outside the work folder is replaced by
a recorder that answers "done" (exit 0, empty output; a file opened for writing outside the work
folder is opened under WORK/outside/ instead, so that lock files and logs work), and a PEP 578
audit hook notes and refuses what slips past the recorders. Each recorded command is one JSON
line in the record file, written as it happens, so a launcher that hangs or crashes later still
leaves what it did; the last line says how the launcher ended.

With ``trust`` (``check --trust-launcher``) the isolation is skipped: the recorders and the hook
are all there is, and they are no boundary for code that means harm.
"""

from __future__ import annotations

import io
import json
import os
import resource
import sys
import threading
import traceback

REAL_EXIT = os._exit
_lock = threading.Lock()
_out = -1
WORK = ""
HERE = ""  # the launcher's folder: frames of files there are the launcher's own
_BASE_ENV: dict[str, str] = {}
_FAKE_PID = 0x3FFFFF00
_ISOLATED = False  # whether the kernel sandbox holds (not --trust-launcher)
FSIZE = 16 << 20  # the most any file it writes may hold, its stdout and stderr included


class SandboxRefused(PermissionError):
    """What the audit hook raises: an OSError, so code that expects I/O failures copes."""


_SENT_BYTES = [0]


def emit(rec: dict) -> None:
    """Write one record line; past FSIZE bytes in all (what the checker keeps of the record,
    records.RECORD_MAX) nothing more is written: a launcher that records in an endless loop
    runs on to its time limit instead of failing on the pipe the checker closed."""
    data = (json.dumps(rec, default=str) + "\n").encode()
    with _lock:
        if _SENT_BYTES[0] + len(data) > FSIZE:
            return
        _SENT_BYTES[0] += len(data)
        os.write(_out, data)


def _where() -> list | None:
    """The innermost frame in the launcher's folder: its own file:line for this call (from
    the caller of this function's caller; frames walked, not formatted: traceback's
    extract_stack reads each frame's source line)."""
    frame = sys._getframe(2)
    while frame is not None:
        if own(frame.f_code.co_filename):
            return [frame.f_code.co_filename, frame.f_lineno]
        frame = frame.f_back
    return None


_OWN: dict[str, bool] = {}  # file name -> own(), resolved once (realpath walks each link)


def own(filename: str | None) -> bool:
    """A file of the launcher: itself or a helper module beside it (not an installed one)."""
    if not filename:
        return False
    got = _OWN.get(filename)
    if got is None:
        got = _OWN[filename] = os.path.dirname(os.path.realpath(filename)) == HERE
    return got


def _env_changes() -> dict:
    now = dict(os.environ)
    out = {k: v for k, v in now.items() if _BASE_ENV.get(k) != v}
    out.update({k: None for k in _BASE_ENV if k not in now})
    return out


def record(kind: str, argv=None, shell: str | None = None, env=None, **extra) -> None:
    _flush_ran()
    rec = {"kind": kind, "argv": argv, "shell": shell, "source": _where(),
           "env": dict(env) if env is not None else None, "env_changes": _env_changes()}
    rec.update(extra)
    if kind in ("subprocess", "os.system") or kind.startswith(("os.exec", "os.spawn",
                                                               "os.posix_spawn")):
        files, base = _written(argv, shell, extra.get("cwd"))
        if files:
            rec["files"] = files
        if base is not None:  # the folder its relative names were found from
            rec["files_base"] = base
    emit(rec)


# ------------------------------------- the YAML files a command names, written in the sandbox
#
# slime's PPO CI tests write their --megatron-config-path YAML to a NamedTemporaryFile (in
# TMPDIR: the work folder) and pass its name; the checker reads the launch after the work
# folder is gone. So a command's YAML flag whose value is a path in the work folder (absolute,
# or relative to the command's working folder: its cwd=, else the launcher's current one,
# recorded as "files_base") carries that file's text, read here when the command is recorded
# (under the kernel's read rules) and only from a bounded regular file that resolves inside
# the work folder and has one link: never through a link out, never a FIFO or device
# (records.py re-checks the shape; the text is the launcher's to choose, as its argv is).
YAML_FLAGS = ("--megatron-config-path", "--yaml-cfg", "--custom-config-path")
WRITTEN_MAX = 1 << 20  # bytes of one file (records.TEXT_MAX)
WRITTEN_FILES = 4  # files one command carries (records.FILES_MAX)
WRITTEN_JSON = 2 << 20  # their JSON in all: the record line stays under records.BYTES_MAX
_WORKS: tuple = ()  # the work folder, as given and resolved


def _written(argv, shell, cwd: str | None = None) -> tuple[dict, str | None]:
    """({path: {"text": ...} or {"why": ...}} for each YAML flag of the command whose value
    is a path in the work folder (at most WRITTEN_FILES), the folder a relative one was
    found from, or None when none was). A relative name is taken only when something is
    there: else it is one of the checkout's, which the checker reads through its gate."""
    text = " ".join(argv) if argv is not None else shell or ""
    if not any(f in text for f in YAML_FLAGS):
        return {}, None
    try:
        base = os.path.normpath(os.path.join(os.getcwd(), cwd or ""))
    except OSError:  # its current folder was removed
        base = None
    out, size, relative = {}, 0, False
    for value in _yaml_paths(argv if argv is not None else _split(shell), 2):
        if not os.path.isabs(value) and base is None:
            continue
        path = os.path.normpath(os.path.join(base or "/", value))
        if os.path.isabs(value) and not path.startswith(_WORKS):
            # written outside the work folder, so into its shadow (slime's
            # U.save_to_temp_file: /tmp/slime_temp_file_*.yaml): that copy, when this run
            # made one; never the real path
            path = os.path.join(WORK, "outside", path.lstrip(os.sep))
            if not os.path.lexists(path):
                continue
        if path in out or not path.startswith(_WORKS):
            continue
        if not os.path.isabs(value):
            if not os.path.lexists(path):
                continue
            relative = True
        if len(out) == WRITTEN_FILES:
            break
        got = _capture(path)
        n = len(json.dumps(got))
        if size + n > WRITTEN_JSON:
            got, n = {"why": "size"}, 20
        out[path], size = got, size + n
    return out, base if relative else None


def _split(text: str) -> list[str]:
    import shlex

    try:
        return shlex.split(text)
    except ValueError:  # an unclosed quote: the words as they stand
        return text.split()


def _yaml_paths(words: list, depth: int) -> list[str]:
    """The paths given to a YAML flag (`--flag PATH`, `--flag=PATH`), also inside a word
    that is a command of its own (`bash -c "..."`, a ray job's entrypoint)."""
    out = []
    for i, w in enumerate(words):
        if not isinstance(w, str):
            continue
        flag, eq, value = w.partition("=")
        if flag in YAML_FLAGS:
            value = value if eq else words[i + 1] if i + 1 < len(words) else ""
            if isinstance(value, str) and value:
                out.append(value)
        elif depth and any(f in w for f in YAML_FLAGS) and any(c.isspace() for c in w):
            out += _yaml_paths(_split(w), depth - 1)
    return out


def _capture(path: str) -> dict:
    """The file's text, or why it is not read: "link" (it resolves outside the work folder),
    "type" (not a regular file), "links" (a hard link: more than one name), "size",
    "unreadable" (missing, or refused by the kernel)."""
    import stat

    real = os.path.realpath(path)
    if not real.startswith(WORK + os.sep):
        return {"why": "link"}
    try:  # O_NOFOLLOW: not through a link made since; O_NONBLOCK: a FIFO's open does not wait
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {"why": "unreadable"}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return {"why": "type"}
        if st.st_nlink != 1:
            return {"why": "links"}
        data = b""
        while st.st_size <= WRITTEN_MAX and len(data) <= WRITTEN_MAX:
            chunk = os.read(fd, WRITTEN_MAX + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if st.st_size > WRITTEN_MAX or len(data) > WRITTEN_MAX:
            return {"why": "size"}
    except OSError:
        return {"why": "unreadable"}
    finally:
        os.close(fd)
    return {"text": data.decode("utf-8", "replace")}


def _words(args) -> tuple[list | None, str | None]:
    if isinstance(args, (str, bytes, os.PathLike)):
        return None, os.fsdecode(args)
    return [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args], None


def inside(path) -> bool:
    """Whether `path` (relative to the current folder) resolves into the work folder."""
    try:
        full = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return full == WORK or full.startswith(WORK + os.sep)


# ------------------------------------ which statements spelling a flag ran (issue 36)
#
# The checker locates each flag of a launch at the string literal that spells it, among the
# statements that ran (pylaunch/locate.py): a flag spelled in both branches of a `match` lands
# on the branch taken. sys.settrace would tell, but slows all code down 2-3x (3.11 drops its
# specialized instructions while any trace function is set); instead each statement of the
# user's code (the launcher, the modules of its checkout) that holds a `--` literal is
# preceded by a call noting its line, put into the syntax tree before it is compiled.

_RAN: dict[str, set] = {}  # file -> lines of marked statements run since the last flush
_USER: dict[str, bool] = {}  # file -> whether it is the user's code (cached)
_SKIP: tuple = ()  # folders whose code is not the user's: the standard library, site, ours
_MARK = "__miles_topology_ran__"
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _is_user(name: str) -> bool:
    got = _USER.get(name)
    if got is None:
        got = _USER[name] = not name.startswith("<") and not name.startswith(_SKIP) and \
            "site-packages" not in name and name.endswith(".py")
    return got


def _ran(path: str, line: int) -> None:
    _RAN.setdefault(path, set()).add(line)


def _spells(node) -> bool:
    """Whether a statement's own part (not the statements nested in it) holds a `--`
    literal."""
    import ast

    todo = [v for f, v in ast.iter_fields(node) if f not in _BODIES]
    while todo:
        x = todo.pop()
        if isinstance(x, list):
            todo += x
        elif isinstance(x, ast.Constant):
            if isinstance(x.value, str) and "--" in x.value:
                return True
        elif isinstance(x, ast.AST) and not isinstance(x, ast.stmt):
            todo += [v for _, v in ast.iter_fields(x)]
    return False


def _marked(stmts: list, path: str) -> list:
    import ast

    out = []
    for st in stmts:
        for f in _BODIES:
            inner = getattr(st, f, None)
            if isinstance(inner, list):
                for x in inner:  # except handlers and match cases hold bodies of their own
                    if isinstance(x, (ast.ExceptHandler, ast.match_case)):
                        x.body = _marked(x.body, path)
                if inner and isinstance(inner[0], ast.stmt):
                    setattr(st, f, _marked(inner, path))
        if not isinstance(st, ast.Expr) or not isinstance(st.value, ast.Constant):
            if _spells(st):
                call = ast.Expr(ast.Call(ast.Name(_MARK, ast.Load()),
                                         [ast.Constant(path), ast.Constant(st.lineno)], []))
                out.append(ast.fix_missing_locations(ast.copy_location(call, st)))
        out.append(st)
    return out


def _compile_marked(source, path: str):
    """`source` compiled with its flag-spelling statements marked; None when it has none or
    does not parse (then it is compiled as it is)."""
    import ast

    if (b"--" if isinstance(source, bytes) else "--") not in source:
        return None
    try:
        tree = ast.parse(source, path)
        tree.body = _marked(tree.body, path)
        return compile(tree, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _trace_on(cfg: dict) -> None:
    """Mark the launcher run by runpy and each module of the user's code it imports."""
    global _SKIP
    import builtins
    import importlib.machinery
    import runpy
    import sysconfig

    paths = sysconfig.get_paths()
    _SKIP = tuple(os.path.join(paths[k], "") for k in ("stdlib", "platstdlib", "purelib",
                                                       "platlib")) + (
        os.path.join(os.path.realpath(cfg.get("package") or os.path.dirname(
            os.path.dirname(os.path.abspath(__file__)))), ""), os.path.abspath(__file__))
    setattr(builtins, _MARK, _ran)
    real = runpy._get_code_from_file

    def launcher_code(*args):
        got = real(*args)
        fname = args[-1]
        try:
            with _REAL["open"](fname, "rb") as f:
                code = _compile_marked(f.read(), fname)
        except OSError:
            code = None
        if code is None:
            return got
        return (code, *got[1:]) if isinstance(got, tuple) else code

    runpy._get_code_from_file = launcher_code

    class Loader(importlib.machinery.SourceFileLoader):
        def get_code(self, fullname):
            path = self.get_filename(fullname)
            code = _compile_marked(self.get_data(path), path)
            return code if code is not None else super().get_code(fullname)

    class Finder(importlib.machinery.PathFinder):
        @classmethod
        def find_spec(cls, fullname, path=None, target=None):
            spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
            if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader) \
                    and spec.origin and _is_user(spec.origin):
                spec.loader = Loader(fullname, spec.origin)
            return spec

    at = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder),
              len(sys.meta_path))
    sys.meta_path.insert(at, Finder)


def _flush_ran() -> None:
    """The marked lines run for the first time since the last record, one record per file
    (before the record of a command: the checker locates each launch's words with what had
    run by then, adding up the records; a line run again is not sent again, so a loop adds
    no records)."""
    if not _RAN:
        return
    got = [(f, sorted(lines - _SENT.get(f, set()))) for f, lines in _RAN.items()]
    _RAN.clear()
    for f, lines in got:
        _SENT.setdefault(f, set()).update(lines)
        for i in range(0, len(lines), 4096):
            emit({"ran": [f, 0], "lines": lines[i:i + 4096]})


_SENT: dict[str, set] = {}  # file -> marked lines already in the record


# ---------------------------------------------------------------- recorders


class FakePopen:
    """subprocess.Popen that records the command and finishes at once with status 0.
    run/call/check_call/check_output/getoutput and os.popen all come through here."""

    def __init__(self, args, bufsize=-1, executable=None, stdin=None, stdout=None, stderr=None,
                 preexec_fn=None, close_fds=True, shell=False, cwd=None, env=None,
                 universal_newlines=None, startupinfo=None, creationflags=0, restore_signals=True,
                 start_new_session=False, pass_fds=(), *, text=None, encoding=None, errors=None,
                 **_):
        import subprocess

        argv, string = _words(args)
        if shell and argv is not None:  # Popen(["cmd ..."], shell=True): the first is the script
            argv, string = None, argv[0] if argv else ""
        captured = stdout == subprocess.PIPE
        # [launchers hook] the modelled cluster's answer
        ran, how = answer(argv, string, captured)
        record("subprocess", argv, string, env, via_shell=bool(shell),
               cwd=os.fsdecode(cwd) if cwd is not None else None,
               captured=captured, answer=how, **_node())
        if SERVERS is not None:  # [servers hook] the servers it starts; a wait
            SERVERS.ran(argv, string, ran, how)
        self.args, self.returncode, self.pid = args, None, _FAKE_PID
        self._status = ran.status if ran is not None else 0
        texty = bool(text or universal_newlines or encoding or errors)
        said = ran.stdout if ran is not None else ""
        empty = (lambda: io.StringIO("")) if texty else (lambda: io.BytesIO(b""))
        self.stdin = io.StringIO() if texty and stdin == subprocess.PIPE else \
            io.BytesIO() if stdin == subprocess.PIPE else None
        self.stdout = (io.StringIO(said) if texty else io.BytesIO(said.encode())) \
            if stdout == subprocess.PIPE else None
        self._said = said if texty else said.encode()
        self.stderr = empty() if stderr == subprocess.PIPE else None
        self._empty = "" if texty else b""

    def communicate(self, input=None, timeout=None):
        self.returncode = self._status
        return (self._said if self.stdout is not None else None,
                self._empty if self.stderr is not None else None)

    def poll(self):
        self.returncode = self._status
        return self._status

    def wait(self, timeout=None):
        self.returncode = self._status
        return self._status

    def send_signal(self, sig):
        pass

    terminate = kill = send_signal

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.returncode = self._status
        return False


def _system(command):
    ran, how = answer(None, os.fsdecode(command))  # [launchers hook]
    record("os.system", None, os.fsdecode(command), answer=how, **_node())
    if SERVERS is not None:  # [servers hook]
        SERVERS.ran(None, os.fsdecode(command), ran, how)
    return (ran.status if ran is not None else 0) << 8  # a wait status, as os.system gives


def _exec(name):
    def execute(path, args=(), *rest):
        argv, _ = _words(args if not isinstance(args, (str, bytes)) else [args, *rest])
        env = rest[-1] if name.endswith("e") and rest else None
        record(f"os.{name}", argv, None, env if isinstance(env, dict) else None)
        raise SystemExit(0)  # exec never returns: the launcher's process became that program

    return execute


def _execl(name):
    def execute(path, *args):
        env = args[-1] if name.endswith("e") else None
        words = list(args[:-1] if env is not None else args)
        record(f"os.{name}", _words(words)[0], None, env)
        raise SystemExit(0)

    return execute


def _spawn(name):
    def spawn(mode, path, *args):
        argv = args[0] if name.startswith("spawnv") else (
            args[:-1] if name.endswith("e") else args)
        record(f"os.{name}", _words(argv)[0], None)
        return _FAKE_PID if mode == os.P_NOWAIT else 0

    return spawn


def _posix_spawn(name):
    def spawn(path, argv, env, *a, **k):
        record(f"os.{name}", _words(argv)[0], None, env)
        return _FAKE_PID

    return spawn


def _fork():
    record("os.fork", None, None)
    return _FAKE_PID  # the launcher carries on as the parent of a child that did nothing


def _waitpid(pid, options):
    return (pid, 0)


def _kill(name):
    def kill(pid, sig):
        record(f"os.{name}", [str(pid), str(sig)], None)

    return kill


# the kernel sandbox refuses changes of mode, owner and times (seccomp: Landlock does not
# cover them); in the throwaway work folder they mean nothing, so they are taken as done
_METADATA = ("os.chmod", "os.chown", "os.lchown", "os.utime")


def _guard(name, real, nargs=1):
    """Run `real` inside the work folder; elsewhere record the call and report success."""
    def guarded(*args, **kwargs):
        paths = args[:nargs]
        if all(inside(p) for p in paths) and kwargs.get("dir_fd") is None:
            return None if name in _METADATA and _ISOLATED else real(*args, **kwargs)
        record(name, [os.path.abspath(os.fsdecode(p)) for p in paths], None)
        try:  # [launchers hook] done in the temp view, so that what it reads back agrees
            real(*[p if inside(p) else _shadow(p) for p in paths], *args[nargs:], **kwargs)
        except OSError:
            pass
        return None

    return guarded


def _addr(address) -> list[str]:
    if isinstance(address, tuple) and len(address) >= 2:
        return [f"{address[0]}:{address[1]}"]
    return [os.fsdecode(address) if isinstance(address, (str, bytes)) else str(address)]


def _shadow(path) -> str:
    """Where a write outside the work folder goes instead: the same path under WORK/outside,
    so the launcher carries on (a lock file, a log) and the real file is never touched."""
    full = os.path.abspath(os.fsdecode(path))
    shadow = os.path.join(WORK, "outside", full.lstrip(os.sep))
    _REAL["makedirs"](os.path.dirname(shadow), exist_ok=True)
    return shadow


def _writes(mode, flags) -> bool:
    return any(c in mode for c in "wax+") if isinstance(mode, str) else \
        bool((flags or 0) & _WRITE)


def _open(file, mode="r", *args, **kwargs):
    if isinstance(file, (str, bytes, os.PathLike)) and _writes(mode, 0) and not inside(file):
        record("write", [os.path.abspath(os.fsdecode(file))], None)
        file = _shadow(file)
    elif isinstance(file, (str, bytes, os.PathLike)) and not inside(file):
        got = _read_view(file, mode)  # [launchers hook] the temp view, or a missing file
        if got is not None:
            return got if not isinstance(got, str) else _REAL["open"](got, mode, *args,
                                                                       **kwargs)
    return _REAL["open"](file, mode, *args, **kwargs)


def _os_open(path, flags, mode=0o777, *, dir_fd=None):
    if dir_fd is None and _writes(None, flags) and not inside(path):
        record("write", [os.path.abspath(os.fsdecode(path))], None)
        path = _shadow(path)
    return _REAL["os.open"](path, flags, mode, dir_fd=dir_fd)


def _served(sock, address):
    """[servers hook] Record a connect; where it goes when a modelled server's, else None."""
    if SERVERS is None:
        record("socket.connect", _addr(address), None)
        return None
    return SERVERS.connect(sock, address, "socket.connect", _addr(address))


def _connect(self, address):
    to = _served(self, address)
    if to is not None:
        return _REAL["connect"](self, to)
    raise ConnectionRefusedError(111, "the sandbox has no network (miles-topology check)")


def _connect_ex(self, address):
    to = _served(self, address)
    if to is not None:
        return _REAL["connect_ex"](self, to)
    return 111  # ECONNREFUSED, as connect_ex reports it


def _create_connection(address, *a, **k):
    if SERVERS is not None and SERVERS.serves(address):  # [servers hook] its connect does
        return _REAL["create_connection"](address, *a, **k)
    record("socket.create_connection", _addr(address), None)
    if SERVERS is not None:
        SERVERS.polled(("connect", tuple(_addr(address))), None)
    raise ConnectionRefusedError(111, "the sandbox has no network (miles-topology check)")


def _getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    import socket

    port = int(port) if isinstance(port, (int, str)) and str(port).isdigit() else 0
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]


_REAL: dict = {}


class Plain:
    """A recorder that stays a plain function when a module stores it on a class (3.10's
    pathlib keeps os functions as class attributes, where a Python function would become a
    method and get the instance as its first argument)."""

    __slots__ = ("f",)

    def __init__(self, f):
        self.f = f

    def __call__(self, *args, **kwargs):
        return self.f(*args, **kwargs)


def _put(module, name: str, f) -> None:
    setattr(module, name, Plain(f))


def install() -> None:
    import builtins
    import shutil
    import socket
    import subprocess
    import types

    _REAL.update({"open": builtins.open, "os.open": os.open, "makedirs": os.makedirs,
                  "connect": socket.socket.connect, "connect_ex": socket.socket.connect_ex,
                  "create_connection": socket.create_connection})
    _put(builtins, "open", _open)
    _put(io, "open", _open)
    _put(os, "open", _os_open)

    subprocess.Popen = FakePopen
    subprocess._USE_POSIX_SPAWN = False
    _put(os, "system", _system)
    for name in ("execv", "execve", "execvp", "execvpe"):
        _put(os, name, _exec(name))
    for name in ("execl", "execle", "execlp", "execlpe"):
        _put(os, name, _execl(name))
    for name in ("spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp",
                 "spawnvpe"):
        if hasattr(os, name):
            _put(os, name, _spawn(name))
    for name in ("posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            _put(os, name, _posix_spawn(name))
    _put(os, "fork", _fork)
    _put(os, "waitpid", _waitpid)
    _put(os, "kill", _kill("kill"))
    _put(os, "killpg", _kill("killpg"))
    for name in ("remove", "unlink", "rmdir", "removedirs", "mkdir", "makedirs", "chmod",
                 "chown", "lchown", "truncate", "utime", "symlink", "link", "mkfifo", "mknod"):
        if hasattr(os, name):
            _put(os, name, _guard(f"os.{name}", getattr(os, name),
                                  2 if name in ("symlink", "link") else 1))
    for name in ("rename", "replace"):
        _put(os, name, _guard(f"os.{name}", getattr(os, name), 2))
    # Python 3.10's pathlib calls os through an accessor that copied os.mkdir & co. when
    # pathlib was imported: imported before the guards (by the checker's own code), Path.mkdir
    # would bypass them (3.11+ calls os.* directly)
    accessor = getattr(sys.modules.get("pathlib"), "_NormalAccessor", None)
    if accessor is not None:
        for name in ("mkdir", "unlink", "rmdir", "chmod", "rename", "replace", "symlink",
                     "link"):
            if hasattr(accessor, name):
                setattr(accessor, name, staticmethod(getattr(os, name)))
    _put(shutil, "rmtree", _guard("shutil.rmtree", shutil.rmtree))
    _put(shutil, "move", _guard("shutil.move", shutil.move, 2))
    socket.socket.connect = _connect  # methods: these do take the socket first
    socket.socket.connect_ex = _connect_ex
    _put(socket, "create_connection", _create_connection)
    _put(socket, "getaddrinfo", _getaddrinfo)
    _put(socket, "gethostbyname", _host_ip)  # [launchers hook] the modelled nodes
    _put(socket, "gethostbyname_ex", lambda host: (host, [], [_host_ip(host)]))
    _put(socket, "gethostname", lambda: CLUSTER.hostname(CLUSTER.current))
    _put(socket, "getfqdn", lambda name="": name or CLUSTER.hostname(CLUSTER.current))
    # The C helper subprocess forks with raises no audit event: take it out of reach (3.11+
    # holds it as _fork_exec, 3.10 as the module); an import of it again is refused by the hook.
    subprocess._fork_exec = _refuse_fork_exec
    if hasattr(subprocess, "_posixsubprocess"):
        subprocess._posixsubprocess = types.SimpleNamespace(fork_exec=_refuse_fork_exec)
    sys.modules.pop("_posixsubprocess", None)


def _refuse_fork_exec(*a, **k):
    raise SandboxRefused("starting a program is not allowed in the sandbox")


# ------------------------------------------- [launchers hook] the modelled cluster (issue 17)

CLUSTER = None  # cluster.ClusterModel, from the config
_STANDINS = None


def launchers_setup(cfg: dict) -> None:
    """Load the modelled cluster (pylaunch/cluster.py) and the stand-in modules
    (pylaunch/standins/) from this package's own files, under the private name ``_mt`` (the
    package's __init__ would import the whole checker; the launcher's folder is not on the
    path they are found by), and put the stand-ins' import finders in place (for a launcher:
    a program run for its output, `run_program`, imports what is installed)."""
    global CLUSTER, _STANDINS
    import importlib
    import types

    root = cfg.get("package") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name, path in (("_mt", root), ("_mt.pylaunch", os.path.join(root, "pylaunch"))):
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
    given = dict(cfg.get("cluster") or {})
    given["assumed"] = tuple(given.get("assumed", ()))
    try:
        CLUSTER = importlib.import_module("_mt.pylaunch.cluster").ClusterModel(**given)
    except ImportError:  # child.py copied away from its package: the recorders alone
        return
    import shutil

    for name in ("copyfile", "copy", "copy2", "copytree"):  # into the temp view, recorded
        setattr(shutil, name, _copier(name, getattr(shutil, name)))
    if "real_imports" not in cfg:  # run_program: its stdout is read as is, no Unknowns in it
        return
    _STANDINS = importlib.import_module("_mt.pylaunch.standins")
    _STANDINS.EMIT, _STANDINS.WHERE, _STANDINS.OWN = emit, _where, own
    _STANDINS.USER = _users_code
    _STANDINS.CLUSTER = CLUSTER
    _STANDINS.install(bool(cfg.get("real_imports")))
    global SERVERS  # [servers hook]
    import socket
    import time

    listener = getattr(sys.modules.get("isolate"), "SWITCHBOARD", None)
    if not _ISOLATED:  # trusted: on this machine's loopback, bound before the audit hook
        try:
            listener = socket.create_server(("127.0.0.1", 0))
        except OSError:
            listener = None
    SERVERS = importlib.import_module("_mt.pylaunch.servers").Hooks(
        CLUSTER, emit, record, _where, _stop, listener)
    SERVERS.clock.install(time)
    loads = json.loads

    def parse(s, *args, **kwargs):  # json.load of a missing file's stand-in: its Unknown
        got = _STANDINS.parsed(s)
        return got if got is not None else loads(s, *args, **kwargs)

    json.loads = parse


def _copier(name, real):
    """shutil.copy* to a path outside the work folder: recorded, and made in the temp view
    (from the view's copy of the source when the launcher wrote one); a source that is not
    here (a checkout the launcher would have cloned) is only recorded."""
    def copy(src, dst, *args, **kwargs):
        if inside(dst):
            return real(src, dst, *args, **kwargs)
        full = os.path.abspath(os.fsdecode(dst))
        record(f"shutil.{name}", [os.path.abspath(os.fsdecode(src)), full], None)
        view = os.path.join(WORK, "outside", os.path.abspath(os.fsdecode(src)).lstrip(os.sep))
        try:
            real(view if os.path.exists(view) else src, _shadow(dst), *args, **kwargs)
        except OSError:
            pass
        return full

    return copy


def answer(argv, shell, captured=False):
    """(what the command prints and its status, how it was answered): "cluster" from the
    modelled cluster's probes, "filters" by text filters alone, None when not modelled (then
    it is answered as the recorders always did: exit 0, no output). A python program run
    for its output (`captured`) runs here, with the stand-ins (a probe of Ray or torch)."""
    if CLUSTER is None:
        return None, None
    python = _STANDINS.run_python if captured and SERVERS is not None else None
    ran, probed = CLUSTER.answer(argv, shell, python)
    return ran, None if ran is None else "cluster" if probed else "filters"


def _node() -> dict:
    """The node a command runs on, inside a stand-in Ray task pinned to one."""
    return {"node": CLUSTER.current} if CLUSTER is not None and CLUSTER.remote else {}


def _host_ip(host) -> str:
    host = os.fsdecode(host) if isinstance(host, (bytes, os.PathLike)) else str(host)
    for i in range(CLUSTER.nodes if CLUSTER else 0):
        if host in (CLUSTER.hostname(i), CLUSTER.ip(i)):
            return CLUSTER.ip(i)
    return "127.0.0.1"


_NOT_DATA = (".py", ".pyc", ".so", ".pth")

# ---------------------------------------------------------------- [servers hook] (issue 29)

SERVERS = None  # servers.Hooks: the servers a launcher starts, its waits (pylaunch/servers.py)


def _stop() -> None:
    """End the launcher at once (it waits for what will not come): its last record is the
    end the hook wrote."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    REAL_EXIT(0)


def _read_view(file, mode):
    """A read outside the work folder: the temp view's copy when the launcher wrote one (a
    path string to open), a missing file's stand-in when the launcher itself reads a file
    that does not exist here (its contents are Unknown), else None (read the real file)."""
    path = os.path.abspath(os.fsdecode(file))
    shadow = os.path.join(WORK, "outside", path.lstrip(os.sep))
    if os.path.exists(shadow):
        return shadow
    if _STANDINS is None or os.path.exists(path) or path.endswith(_NOT_DATA) or \
            path in {os.path.abspath(p) for p in sys.path if isinstance(p, str)}:
        return None  # a sys.path entry (python311.zip): importlib.metadata probes them
    if not _users_code(sys._getframe(1)):
        return None
    record("read (no such file)", [path], None)
    return _STANDINS.missing_file(path, "b" in (mode or ""))


_LIBS: tuple | None = None  # (the standard library's folders, site-packages'), once known


def _users_code(frame, imports: bool = False) -> bool:
    """Whether the nearest caller outside the standard library is the user's code (the
    launcher, a helper beside it or on PYTHONPATH), not an installed library or the import
    system, which probe for files that may be missing and expect FileNotFoundError.
    `imports`: the caller of an import (the import system's own frames are skipped)."""
    global _LIBS
    if _LIBS is None:
        import sysconfig

        paths = sysconfig.get_paths()
        _LIBS = (tuple(os.path.join(paths[k], "") for k in ("stdlib", "platstdlib")),
                 tuple(os.path.join(paths[k], "") for k in ("purelib", "platlib")))
    stdlib, libs = _LIBS
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<") and not imports:  # frozen importlib looking for its files
            return False
        if imports and (name.startswith("<frozen") or name == __file__ or
                        name.endswith(os.path.join("importlib", "__init__.py"))):
            frame = frame.f_back  # the import system, importlib.import_module: its caller
            continue
        if imports:  # the module that imports: the user's, not the stdlib's or a library's
            return not name.startswith(stdlib + libs) and "site-packages" not in name
        # site-packages first: in a venv platstdlib (<venv>/lib/pythonX.Y) is a prefix of it,
        # and a library's probe (pydantic's plugin scan of entry_points.txt) is not the user's
        if name != __file__ and (name.startswith(libs) or "site-packages" in name):
            return False
        if name != __file__ and not name.startswith(stdlib):
            return True
        frame = frame.f_back
    return False


# ---------------------------------------------------------------- the audit hook

_NEVER = {"subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
          "os.forkpty", "os.kill", "os.killpg", "signal.pthread_kill", "socket.connect",
          "socket.sendto", "socket.sendmsg", "socket.bind", "socket.getaddrinfo",
          "socket.gethostbyname", "socket.gethostbyaddr", "ctypes.dlsym", "ctypes.dlsym/handle",
          "ctypes.call_function", "ctypes.cdata", "ctypes.string_at", "ctypes.wstring_at",
          "shutil.chown", "os.setxattr", "os.removexattr", "pty.spawn",
          "winreg.OpenKey", "sys.remote_exec"}
_PATHS = {"shutil.rmtree": 1,  # [launchers hook] inside the work folder: allowed
          "os.remove": 1, "os.rmdir": 1, "os.rename": 2, "os.chmod": 1, "os.chown": 1,
          "os.mkdir": 1, "os.symlink": 2, "os.link": 2, "os.truncate": 1, "os.utime": 1,
          "shutil.copyfile": 2, "shutil.copytree": 2, "shutil.move": 2, "shutil.make_archive": 1,
          "shutil.unpack_archive": 2}
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_BLOCKED_IMPORTS = {"_posixsubprocess"}
# [servers hook] what the kernel sandbox enforces itself (seccomp refuses execve, fork and the
# rest whatever calls them, ctypes included; Landlock refuses writes): refused in-process only
# when trusted, where the hook is all there is (miles' fault-tolerance e2e tests load C
# libraries through ctypes). _BLOCKED_IMPORTS stays: it keeps the recorders in place (a
# launcher that reloads subprocess would get the real Popen back), it guards no boundary
_KERNEL_ENFORCED = {"ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
                    "ctypes.cdata", "ctypes.string_at", "ctypes.wstring_at"}


_inside_hook = threading.local()


def refuse(event: str, why: str, what=()) -> None:
    """Record what the hook refused (once: recording reads source files, which is audited
    too), then refuse it."""
    if not getattr(_inside_hook, "on", False):
        _inside_hook.on = True
        try:
            record(f"refused {event}", [os.fsdecode(w) if isinstance(w, (str, bytes)) else
                                        str(w) for w in what], None)
        finally:
            _inside_hook.on = False
    raise SandboxRefused(why)


def hook(event: str, args: tuple) -> None:
    if getattr(_inside_hook, "on", False) and event == "open":
        return
    if event == "socket.connect" and SERVERS is not None and SERVERS.to_switchboard(args[1]):
        return  # [servers hook] a modelled server's connect, to the switchboard
    if event in _NEVER:
        refuse(event, f"{event} is not allowed in the sandbox", args[:1] if event not in (
            "socket.connect", "socket.sendto", "socket.bind") else _addr(args[1]))
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, 0))[:3]
        if isinstance(path, int):
            return
        if _writes(mode, flags) and not inside(path):
            refuse(event, f"writing {os.fsdecode(path)} is not allowed in the sandbox (only "
                   "in its temporary folder)", [os.fsdecode(path)])
        return
    if event == "import" and args and args[0] in _BLOCKED_IMPORTS:
        refuse(event, f"importing {args[0]} is not allowed in the sandbox", args[:1])
    n = _PATHS.get(event)
    if n:
        if event in ("os.chmod", "os.chown", "os.truncate", "os.utime") and \
                isinstance(args[0], int):  # through a file descriptor: of any file
            refuse(event, f"{event} of an open file is not allowed in the sandbox", args[:1])
        paths = [p for p in args[:n] if isinstance(p, (str, bytes, os.PathLike))]
        if event in ("shutil.copyfile", "shutil.copytree", "shutil.move", "os.symlink",
                     "os.link"):
            paths = paths[-1:]  # only the destination is written
        if any(not inside(p) for p in paths):
            refuse(event, f"{event} outside the sandbox's temporary folder is not allowed",
                   [os.fsdecode(p) for p in paths])


# ---------------------------------------------------------------- running the launcher


def limits(cfg: dict) -> None:
    mem = int(cfg["memory_mb"]) << 20
    cpu = max(1, int(cfg["cpu_s"]))
    # RLIMIT_DATA counts private writable memory (heap, anonymous maps), not mapped
    # libraries: RLIMIT_AS at 2 GiB breaks `import torch` (libtorch_cpu.so: failed to map
    # segment), RLIMIT_DATA at 1 GiB does not (measured: 218 MiB resident after the import).
    # Shared memory, which it does not count, the supervisor bounds (isolate._supervise).
    for what, soft, hard in ((resource.RLIMIT_DATA, mem, mem), (resource.RLIMIT_CPU, cpu, cpu + 2),
                             (resource.RLIMIT_NOFILE, 256, 256),
                             (resource.RLIMIT_FSIZE, FSIZE, FSIZE),
                             (resource.RLIMIT_CORE, 0, 0)):
        try:
            resource.setrlimit(what, (soft, hard))
        except (ValueError, OSError):
            pass


def _last_line(exc: BaseException) -> dict:
    """The launcher's own line where it failed, the innermost line when that is elsewhere (an
    installed helper), and the error."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if own(f.filename)]
    at = (mine or frames or [None])[-1]
    inner = frames[-1] if frames and frames[-1] is not at else None
    text = traceback.format_exception_only(type(exc), exc)[-1].strip()
    cluster = sys.modules.get("_mt.pylaunch.cluster")  # [servers hook] sizes it asserts
    try:
        sizes = cluster.sizes_asserted(exc) if cluster is not None else []
    except Exception:  # noqa: BLE001 - only a better message
        sizes = []
    return {"error": text, "type": type(exc).__name__,
            "where": [at.filename, at.lineno] if at else None,
            "inner": [inner.filename, inner.lineno, inner.name, (inner.line or "").strip()]
            if inner else None, **({"sizes": sizes} if sizes else {})}


def _wait(fd: int) -> None:
    """A spare child (spare.py): import what a run needs first (the standard library's
    modules, isolate.py), then wait until the checker has written the configuration; end
    quietly when it never will (the pipe closed with nothing written)."""
    import ast  # noqa: F401 - for _compile_marked
    import importlib.machinery  # noqa: F401
    import runpy  # noqa: F401
    import shutil  # noqa: F401
    import socket  # noqa: F401
    import subprocess  # noqa: F401
    import sysconfig  # noqa: F401
    import types  # noqa: F401

    import isolate

    isolate._lists()
    try:
        go = os.read(fd, 1)
    except OSError:
        go = b""
    os.close(fd)
    if not go:
        REAL_EXIT(0)


def main() -> None:
    global _out, WORK, HERE, _BASE_ENV, _ISOLATED, _WORKS
    if sys.argv[2:3] == ["--wait"]:
        _wait(int(sys.argv[3]))
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    if "environ" in cfg:  # a spare child: the run's environment, in its order (spare.take)
        os.environ.clear()
        os.environ.update(cfg["environ"])
    limits(cfg)
    # the record: a pipe the checker drains (a file in tests that run this alone)
    _out = cfg["record_fd"] if "record_fd" in cfg else \
        os.open(cfg["record"], os.O_WRONLY | os.O_APPEND)
    verdict = cfg.get("verdict_fd", -1)
    WORK = os.path.realpath(cfg["work"])
    _WORKS = tuple(dict.fromkeys(os.path.join(w, "") for w in (os.path.abspath(cfg["work"]),
                                                                 WORK)))
    if not cfg.get("trust"):
        # isolation first: so far only the standard library is imported, sys.path holds it
        # and this folder (python -S: not even site-packages), not the launcher's folder
        import isolate

        try:
            isolate.enter(WORK, int(cfg["memory_mb"]), cfg.get("deny") or "", emit,
                          cfg.get("reads", ()), verdict)
        except isolate.Missing as e:
            emit({"end": "refused", "missing": str(e)})
            REAL_EXIT(REFUSED)
        _ISOLATED = True
        _NEVER.difference_update(_KERNEL_ENFORCED)  # [servers hook]
    elif verdict >= 0:
        os.close(verdict)
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]  # this file's folder, which python put first
    import site

    site.main()  # site-packages and their .pth files, with the real HOME's user site
    os.chdir(cfg.get("cwd") or WORK)
    HERE = os.path.dirname(os.path.realpath(cfg["launcher"])) if cfg.get("mode", "path") == \
        "path" else os.path.realpath(os.getcwd())
    _OWN.clear()
    os.environ.update(cfg["env"])  # HOME, TMPDIR... in the sandbox's folder
    _BASE_ENV = dict(os.environ)
    launchers_setup(cfg)  # [launchers hook] the modelled cluster, the stand-in modules
    install()  # imports subprocess, shutil, socket: before the launcher's folder is on sys.path
    import runpy  # the same: a runpy.py beside the launcher is not ours to run
    mode = cfg.get("mode", "path")  # as `python FILE`, `python -c CODE`, `python -m MODULE`
    # sys.path[0] as python sets it: the script's folder, or the current one for -c and -m
    first = os.path.dirname(os.path.abspath(cfg["launcher"])) if mode == "path" else \
        ("" if mode == "code" else os.getcwd())
    sys.path[:0] = [first] + cfg["pythonpath"]
    sys.path += cfg.get("checkout", [])  # after site-packages: what is installed comes first
    sys.argv = [cfg["launcher"] if mode == "path" else "-c" if mode == "code" else
                cfg["launcher"], *cfg["args"]]
    sys.addaudithook(hook)
    _trace_on(cfg)
    end: dict = {"end": "ok"}
    try:
        if mode == "code":
            exec(compile(cfg["launcher"], "<string>", "exec"), {"__name__": "__main__"})
        elif mode == "module":
            runpy.run_module(cfg["launcher"], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(cfg["launcher"], run_name="__main__")
    except SystemExit as e:
        code = e.code
        end = {"end": "exit", "code": code if isinstance(code, int) or code is None
               else str(code)}
    except MemoryError:
        end = {"end": "memory"}
    except ModuleNotFoundError as e:
        end = {"end": "missing", "module": e.name, **_last_line(e)}
    except BaseException as e:  # noqa: BLE001 - every way the launcher can fail is reported
        end = {"end": "error", **_last_line(e)}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    emit(end)
    REAL_EXIT(status_of(end))


REFUSED = 3  # the exit status of a refusal, before the launcher ran


def status_of(end: dict) -> int:
    """The exit status the launcher's end gives, as python gives it: the checker takes the
    status from the wait, never from a record line (which the launcher can write too)."""
    if end["end"] in ("ok", "waiting"):  # waiting: stopped by the servers hook (_stop)
        return 0
    if end["end"] == "exit":
        code = end.get("code")
        return 0 if code is None else code & 0xFF if isinstance(code, int) else 1
    return 1


if __name__ == "__main__":
    main()
