"""The servers a launcher starts, answered inside the sandbox's own network namespace.

miles' launchers start a server and wait for it before they launch training:
``command_utils.start_mooncake_master`` runs ``mooncake_master --rpc_port 50051 ...`` in the
background and then polls ``127.0.0.1:50051`` (``http_utils.wait_for_server_ready``: TCP
connect every 0.5 s until a deadline); routers and engines are polled with an HTTP GET of a
health path. In the sandbox no command runs, so without an answer such a launcher waits until
the check's timeout. Here a recorded command that was started to serve a port (its
``--port``/``--rpc-port``/listen-address flags, a server's own default port, or, for a
command sent to the background, the port the launcher then polls) is a *modelled server*: a
connect to it (loopback, or the modelled node's address) reaches the switchboard, one
listener on the namespace's loopback (``isolate.SWITCHBOARD_PORT``, the only port Landlock
lets the launcher connect to), which accepts and answers an HTTP request with 200. A connect
to any other port is refused, and nothing outside the namespace is reachable at all.

`Polls` notices a launcher that waits: the same poll (a probe answered from the model, a
refused connect) again and again with only sleeps between, which no answer will change.

Loaded by the sandbox's child too: the standard library and commandline only.
"""

from __future__ import annotations

import os
import re
import selectors
import socket
import threading
from dataclasses import dataclass

from ..reading.commandline import _skip_wrappers, command_form
from .commands import find, split_shell

# flags naming the port a program serves: --port, --rpc-port / --rpc_port (mooncake_master),
# --http-port, --dashboard-port (ray start), ...; not the port of a server elsewhere
# (--master-port: torchrun's rendezvous on node 0, --sglang-router-port: an external router)
_PORT_FLAG = re.compile(r"--(?:[a-z]+[-_])*port$")
_CLIENT_PORTS = re.compile(r"--(?:master|dist|router|sglang[-_].*|.*[-_]router)[-_]port$")
# flags naming the address it listens on, HOST:PORT (etcd --listen-client-urls, uvicorn --bind)
_LISTEN_FLAG = re.compile(r"--(?:listen|bind)(?:[-_][a-z]+)*$")
_ADDRESS = re.compile(r"(?:[a-z]+://)?[^\s:/]*:(\d{1,5})/?$")
# a server's own port when no flag gives it: mooncake's master (mooncake-store's
# master --rpc_port default, miles' MOONCAKE_MASTER_PORT), sglang's server and router
# (ServerArgs.port, sglang_router's --port), redis; ray start --head: the GCS (--port) and
# the dashboard (--dashboard-port), ray's defaults
DEFAULT_PORTS = {
    "mooncake_master": (("--rpc_port", 50051),),
    "sglang.launch_server": (("--port", 30000),),
    "sglang_router.launch_router": (("--port", 30000),),
    "redis-server": (("--port", 6379),),
    "ray start --head": (("--port", 6379), ("--dashboard-port", 8265)),
}
LOOPBACK = ("127.0.0.1", "localhost", "0.0.0.0", "::1", "::", "", "::ffff:127.0.0.1")
WAIT_POLLS = 5  # the same poll this many times, only sleeps between: the launcher waits


@dataclass
class Server:
    """A port a recorded command was started to serve."""

    name: str  # the program: mooncake_master, sglang.launch_server, ray start --head
    port: int
    node: int  # the modelled node it runs on
    flag: str  # --rpc_port, --port; "default" (the program's own); "polled" (the launcher's)
    command: str  # the command, as one line
    source: list | None = None  # the launcher's file:line that started it
    polls: int = 0

    def as_record(self) -> dict:
        return {"server": self.name, "port": self.port, "node": self.node, "flag": self.flag,
                "command": self.command[:300], "source": self.source}


def _program(words: list[str]) -> str | None:
    """The program a simple command runs, as a server is named: a python module or script
    (``python -m sglang.launch_server``), ``ray start --head``, or the program's name."""
    k = _skip_wrappers(list(words), 0, {})
    if k >= len(words):
        return None
    form = command_form(list(words))
    if form is not None and not form.shell and form.job is None:
        entry = words[form.entry]
        return os.path.basename(entry) if entry.endswith(".py") else entry
    base = os.path.basename(words[k])
    if base == "ray":
        return "ray start --head" if words[k + 1:k + 2] == ["start"] and \
            "--head" in words[k + 2:] else None
    return base


def served(words: list[str]) -> list[tuple[str, int]]:
    """(flag, port) of each port one simple command serves; [] for a training launch (it
    runs on the cluster, not beside the launcher) or a client."""
    if find(list(words)) is not None:
        return []
    name = _program(words)
    if name is None or name == "ray":
        return []
    out: list[tuple[str, int]] = []
    for i, w in enumerate(words):
        flag, eq, value = w.partition("=")
        if not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
        if _PORT_FLAG.match(flag) and not _CLIENT_PORTS.match(flag) and value.isdigit():
            port = int(value)
        elif _LISTEN_FLAG.match(flag) and _ADDRESS.match(value):
            port = int(_ADDRESS.match(value).group(1))
        else:
            continue
        if 0 < port < 65536:  # 0: the program picks a free one (--metrics_port 0)
            out.append((flag, port))
    given = {f.replace("_", "-") for f, _ in out}
    out += [("default", p) for f, p in DEFAULT_PORTS.get(name, ()) if f.replace("_", "-")
            not in given]
    return out


def _background(words: list[str], last: bool, text: str | None) -> bool:
    """Whether a simple command is sent to the background: ``&`` after it, or setsid/nohup."""
    return words[0] in ("setsid", "nohup") or bool(
        text and last and re.search(r"&\s*\)?\s*$", text) and not text.rstrip().endswith("&&"))


class Servers:
    """The modelled servers of one run, by (node, port); see the module text."""

    def __init__(self, cluster=None):
        self.cluster = cluster
        self.by_port: dict[tuple[int, int], Server] = {}
        self.pending: list[Server] = []  # sent to the background, port not given

    def started(self, argv: list[str] | None, shell: str | None, node: int = 0,
                source=None) -> list[Server]:
        """The servers a recorded command starts (new ones only)."""
        commands = [list(argv)] if argv else split_shell(shell) if shell else []
        if argv and shell is None and len(argv) == 3 and os.path.basename(argv[0]) in (
                "bash", "sh") and argv[1] in ("-c", "-lc"):
            shell, commands = argv[2], split_shell(argv[2])
        text = shell if shell is not None else " ".join(argv or ())
        new = []
        for n, words in enumerate(commands):
            if not words:
                continue
            name = _program(words)
            ports = served(words)
            for flag, port in ports:
                if (node, port) not in self.by_port:
                    s = Server(name or words[0], port, node, flag, text, source)
                    self.by_port[node, port] = s
                    new.append(s)
            if not ports and name and name not in ("ray", "pkill", "kill", "sleep", "true") \
                    and _background(words, n == len(commands) - 1, shell):
                self.pending.append(Server(name, 0, node, "polled", text, source))
        return new

    def node_of(self, host) -> int | None:
        """The modelled node an address names (loopback: the launcher's own, node 0)."""
        host = host.decode() if isinstance(host, bytes) else str(host)
        if host in LOOPBACK or host.startswith("127."):
            return self.cluster.current if self.cluster is not None else 0
        for i in range(self.cluster.nodes if self.cluster is not None else 0):
            if host in (self.cluster.ip(i), self.cluster.hostname(i)):
                return i
        return None

    def lookup(self, address, count: bool = True) -> tuple[Server | None, bool]:
        """(the server a connect to `address` reaches, whether it was just modelled from a
        background command); (None, False) when no recorded command serves it. `count`: a
        connect (not a look)."""
        if not (isinstance(address, tuple) and len(address) >= 2 and
                isinstance(address[1], int)):
            return None, False
        node = self.node_of(address[0])
        if node is None:
            return None, False
        got, new = self.by_port.get((node, address[1])), False
        if got is None and self.pending:
            got, new = self.pending[0], True  # the launcher's own constant: the port it polls
            if count:
                self.pending.pop(0)
                got.port, got.node = address[1], node
                self.by_port[node, got.port] = got
        if got is not None and count:
            got.polls += 1
        return got, new


class Polls:
    """Notices a launcher waiting for what no answer changes (see the module text)."""

    def __init__(self, times: int = WAIT_POLLS):
        self.times, self.last, self.count, self.slept = times, None, 0, 0

    def sleep(self) -> None:
        self.slept += 1

    def seen(self, key) -> bool:
        """Count one poll; True when the same one came `times` times in a row, a sleep
        between each (nothing else recorded between them: `other` resets)."""
        if key == self.last and self.slept:
            self.count += 1
        else:
            self.last, self.count = key, 1
        self.slept = 0
        return self.count >= self.times

    def other(self) -> None:
        self.last, self.count = None, 0


_OK = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n"
       b"Connection: close\r\n\r\n{\"status\":\"ok\"}")
_METHODS = (b"GET ", b"HEAD ", b"POST ", b"PUT ", b"OPTIONS ")


def serve(listener: socket.socket) -> threading.Thread:
    """Answer on `listener` in a daemon thread: every connection is accepted; an HTTP
    request gets 200 and a small JSON body (a health path's answer); anything else is
    closed after the client's first bytes (a TCP readiness probe needs only the accept)."""
    def loop():
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ)
        buffers: dict[socket.socket, bytes] = {}
        while True:
            for key, _ in sel.select():
                sock = key.fileobj
                if sock is listener:
                    try:
                        conn, _ = listener.accept()
                    except OSError:
                        continue
                    if len(buffers) >= 64:  # the launcher's fd limit is small
                        conn.close()
                        continue
                    buffers[conn] = b""
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                got = buffers.get(sock, b"") + data
                http = got.startswith(_METHODS)
                if data and (not http or b"\r\n\r\n" not in got) and len(got) < 65536 and \
                        (http or any(got.startswith(m[:len(got)]) for m in _METHODS)):
                    buffers[sock] = got
                    continue
                if http and b"\r\n\r\n" in got:
                    try:
                        sock.sendall(_OK if not got.startswith(b"HEAD ") else
                                     _OK[:_OK.index(b"\r\n\r\n") + 4])
                    except OSError:
                        pass
                sel.unregister(sock)
                buffers.pop(sock, None)
                sock.close()

    thread = threading.Thread(target=loop, name="miles-topology-switchboard", daemon=True)
    thread.start()
    return thread


class Clock:
    """The launcher's clock in the sandbox: a ``time.sleep`` of its main thread returns at
    once (nothing it polls for will change in the meantime: no command runs) and moves
    ``time.time`` and ``time.monotonic`` on by as much, so a poll with a deadline
    (``wait_for_server_ready``: sleep 0.5 s until ``time.time()`` passes it) ends as it
    would, in no time. Other threads sleep for real, and so does a sleep of `POLL_MAX_S` or
    more (no poll interval: a hang, which the wall limit ends as before)."""

    POLL_MAX_S = 600.0

    def __init__(self, polls: Polls | None = None):
        self.offset, self.polls = 0.0, polls

    def advance(self, seconds: float) -> None:
        """The launcher slept (``time.sleep``, or a recorded ``sleep N`` command)."""
        self.offset += max(float(seconds), 0.0)
        if self.polls is not None:
            self.polls.sleep()

    def install(self, time_module) -> None:
        real_sleep, real_time, real_mono = time_module.sleep, time_module.time, \
            time_module.monotonic

        def sleep(seconds):
            if threading.current_thread() is not threading.main_thread() or \
                    seconds >= self.POLL_MAX_S:
                return real_sleep(seconds)
            real_sleep(min(max(seconds, 0), 0.001))  # a moment for threads; time.sleep's errors
            self.advance(seconds)

        time_module.sleep = sleep
        time_module.time = lambda: real_time() + self.offset
        time_module.monotonic = lambda: real_mono() + self.offset
        time_module.time_ns = lambda: int((real_time() + self.offset) * 1e9)
        time_module.monotonic_ns = lambda: int((real_mono() + self.offset) * 1e9)


class Hooks:
    """What the sandbox's child calls (pylaunch/child.py, its [servers hook] lines), kept here
    so the child stays the recorders: the servers a recorded command starts, a connect sent to
    the switchboard when it reaches one, a wait that is stopped. `emit` writes a record,
    `record` records a call as the recorders do, `where` gives the launcher's file:line,
    `stop` ends the launcher at once; `listener` is the switchboard's socket (bound by
    isolate.py in the namespace, or trusted on this machine's loopback), None for none."""

    def __init__(self, cluster, emit, record, where, stop, listener):
        self.cluster, self.emit, self.record, self.where, self.stop = cluster, emit, record, \
            where, stop
        self.servers, self.polls = Servers(cluster), Polls()
        self.clock = Clock(self.polls)
        self.listener, self.port = listener, None  # port: once it answers

    def ran(self, argv, shell, ran, how) -> None:
        """After a command is recorded: the servers it starts; a probe whose answer will not
        change, polled again (then the launcher is stopped); `sleep N`, a sleep."""
        node = self.cluster.current if self.cluster.remote else 0
        for s in self.servers.started(argv, shell, node, self.where()):
            self.emit(s.as_record())
        words = argv if argv else (shell or "").split()
        if how == "cluster":
            self.polled(("probe", shell if shell is not None else " ".join(argv or ())),
                        ran.stdout if ran is not None else "")
        elif len(words) == 2 and words[0] == "sleep" and \
                words[1].replace(".", "", 1).isdigit():
            self.clock.advance(float(words[1]))  # between polls: a sleep, as time.sleep
        else:
            self.polls.other()

    def polled(self, key, said) -> None:
        if self.polls.seen(key):
            self.emit({"end": "waiting", "poll": list(key), "answer": said,
                       "times": self.polls.times,
                       "cluster": [self.cluster.nodes, self.cluster.gpus_per_node]})
            self.stop()

    def serves(self, address) -> bool:
        return self.servers.lookup(address, count=False)[0] is not None

    def connect(self, sock, address, kind: str, shown: list):
        """Record a connect; the switchboard's address when `address` is a modelled
        server's (the connect goes there), else None (it is refused)."""
        got, new = self.servers.lookup(address)
        if new:  # a command sent to the background serves the port the launcher polls
            self.emit(got.as_record())
        if got is None or not self.answering() or sock.family not in (2, 10):
            self.record(kind, shown, None)
            self.polled(("connect", tuple(shown)), None)
            return None
        self.record(kind, shown, None, answer="server", server=got.name, port=got.port,
                    node=got.node)
        self.polls.other()
        return ("127.0.0.1", self.port) if sock.family == 2 else \
            ("::ffff:127.0.0.1", self.port, 0, 0)

    def answering(self) -> bool:
        """Answer on the switchboard, from the first connect to a modelled server on."""
        if self.port is None and self.listener is not None:
            self.port = self.listener.getsockname()[1]
            serve(self.listener)
        return self.port is not None

    def to_switchboard(self, address) -> bool:
        return self.port is not None and isinstance(address, tuple) and len(address) >= 2 \
            and address[1] == self.port and str(address[0]) in ("127.0.0.1",
                                                                 "::ffff:127.0.0.1")
