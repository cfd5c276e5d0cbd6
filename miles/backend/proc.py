"""A train rank or engine as a process forked from its node's zygote (the process side).

Importing torch and megatron.core costs ~5 s of CPU; paid by every rank process it made
start-up several times the cost of one import. So each node's `workers.Host` keeps a
multiprocessing forkserver that preloads the roles' modules once (`PRELOAD`), and every rank
and engine of the node is a fork of it: the imports are shared, copy-on-write. A forked
process cannot use Ray, so it talks to its host over a pipe: the host sends calls, the
process answers, and what a role asks of its peers (a trainer's uploads to engines) goes
up the same pipe for the host to forward (`Peer`).

Protocol (pickled tuples): host -> process `(method, args, kwargs)` or None to stop;
process -> host `("ok", value)`, `("err", "Type: message", traceback text)`, or `("peer",
i, method, args, kwargs)`, answered with `("ok", value)` / `("err", text)`.

This module stays light (no torch) so the host imports it too; the heavy modules are the
forkserver's preload.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
import warnings

QUIET = [".*Transformer Engine.*", ".*Apex.*", ".*NumPy array is not writable.*"]
for _msg in QUIET:  # first in the preload, so the heavy imports' warnings are filtered too
    warnings.filterwarnings("ignore", message=_msg)

PRELOAD = ["miles.backend.proc", "miles.backend.trainer", "miles.backend.engine"]


class PeerError(RuntimeError):
    """A call a role made to a peer failed on the peer's side."""


class Peer:
    """Another role (an engine), reached through this process's host."""

    def __init__(self, conn, index: int):
        self.conn, self.index = conn, index

    def call(self, method: str, *args, **kwargs):
        self.conn.send(("peer", self.index, method, args, kwargs))
        tag, value = self.conn.recv()
        if tag != "ok":
            raise PeerError(f"engine {self.index}: {value}")
        return value


def ready() -> None:
    """A no-op process: forking one shows the zygote has finished its preload."""


def serve(conn, kind: str, env: dict[str, str], kwargs: dict, peers: int, name: str = ""
          ) -> None:
    """Become `kind` ("trainer" or "engine") built with `kwargs`, then answer calls until
    the host stops it or goes away. `name` ("rank3", "engine0") becomes the process name
    that ps and top show."""
    _die_with_parent(name)
    gc.freeze()  # the zygote's objects: never scanned here, so their pages stay shared
    os.environ.update(env)
    t0 = time.monotonic()
    try:
        if kind == "trainer":
            from .trainer import Trainer

            role = Trainer(**kwargs, engines=[Peer(conn, i) for i in range(peers)])
        else:
            from .engine import Engine

            role = Engine(**kwargs)
    except BaseException as e:
        _reply(conn, _error(e))
        return
    if not _reply(conn, ("ok", {"pid": os.getpid(), "init_s": time.monotonic() - t0,
                                "env": {k: os.environ.get(k) for k in env}})):
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the host is gone
            return
        if msg is None:
            return
        method, args, kw = msg
        try:
            out = ("ok", getattr(role, method)(*args, **kw))
        except BaseException as e:
            out = _error(e)
        if not _reply(conn, out):
            return


def _reply(conn, msg) -> bool:
    """Send to the host; False when it is gone. The process then ends quietly: a dead host
    is reported once, by the driver, not by a traceback from each of its role processes
    (multiprocessing prints one for a target that raises, and Ray forwards it)."""
    try:
        conn.send(msg)
        return True
    except OSError:  # BrokenPipeError, ConnectionResetError
        return False


def _error(e: BaseException) -> tuple[str, str, str]:
    return ("err", f"{type(e).__name__}: {e}", traceback.format_exc())


def _die_with_parent(name: str = "") -> None:
    """Linux: be killed when the zygote exits (it exits when its host does), so a killed
    host leaves no rank process behind, even one blocked in a collective; and take the
    role's name as the process name (/proc/PID/comm, at most 15 bytes)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if name:
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))
