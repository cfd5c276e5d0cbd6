"""How a process of the job ended, and the error that says so.

A role process's exit code comes from its host (multiprocessing's convention: -N for signal
N). A host actor is a Ray worker: its parent is a raylet, and Ray only reports "the worker
died", never how. So the driver keeps a pidfd of every host on its own machine (a local
cluster), and reads the exit status from it after the death (Linux 6.15+ `PIDFD_GET_INFO`
with `PIDFD_INFO_EXIT`, which works for processes that are not our children). Elsewhere the
status is reported as unknown.
"""

from __future__ import annotations

import os
import signal
import struct
import sys

PIDFD_INFO_EXIT = 1 << 3
_INFO_SIZE = 64  # struct pidfd_info up to exit_code (PIDFD_INFO_SIZE_VER0)
_GET_INFO = (3 << 30) | (_INFO_SIZE << 16) | (0xFF << 8) | 11  # _IOWR(PIDFS_IOCTL_MAGIC, 11, ...)
_EXIT_CODE_AT = 60


def how(code: int | None) -> str:
    """'killed by SIGKILL', 'exit status 1' or 'exit status unknown' for an exit code."""
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class Died(RuntimeError):
    """A process of the job died: `role` ("rank 3", "engine 0", "the host of node 1") and
    how it ended."""

    def __init__(self, role: str, code: int | None, also: tuple[str, ...] = ()):
        self.role, self.code, self.also = role, code, tuple(also)
        more = f" (also gone: {', '.join(also)})" if also else ""
        super().__init__(f"{role} died ({how(code)}){more}")


class Watch:
    """The exit code of a process that is not our child, read through a pidfd opened while
    it lived. `code()` is None while it runs, or when this kernel cannot tell."""

    def __init__(self, pid: int):
        self.fd = None
        if sys.platform.startswith("linux") and hasattr(os, "pidfd_open"):
            try:
                self.fd = os.pidfd_open(pid)
            except OSError:
                pass

    def code(self) -> int | None:
        if self.fd is None:
            return None
        import fcntl

        buf = bytearray(_INFO_SIZE)
        struct.pack_into("Q", buf, 0, PIDFD_INFO_EXIT)
        try:
            fcntl.ioctl(self.fd, _GET_INFO, buf, True)
        except OSError:  # an older kernel (no PIDFD_GET_INFO)
            return None
        if not struct.unpack_from("Q", buf, 0)[0] & PIDFD_INFO_EXIT:
            return None  # still running (or not reaped yet)
        return os.waitstatus_to_exitcode(struct.unpack_from("i", buf, _EXIT_CODE_AT)[0])

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
