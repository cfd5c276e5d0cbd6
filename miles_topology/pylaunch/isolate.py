"""The kernel's isolation of a launcher: namespaces, Landlock and seccomp, with no root needed.

``child.py`` calls `enter` before it imports anything beyond the standard library and before
the launcher's folder is on ``sys.path``. The process then splits in two:

- the *supervisor* (the process the checker started) stays in the checker's PID namespace,
  waits for the other and kills it when its memory in use (RssAnon + RssShmem from /proc) or
  its thread count passes the bound; it runs no launcher code;
- the *sandboxed* process is PID 1 of a new PID namespace (in a new user, network and IPC
  namespace: no process outside is visible or signalable by number, no network device but its
  own loopback, where only the switchboard listens, no System V / POSIX IPC shared with the
  machine), restricted by Landlock (writes, file creation, removal, truncation, device ioctls
  only under the work folder; no execution; no TCP bind, no TCP connect but to the
  switchboard's port; signals and abstract unix sockets scoped to the sandbox) and by a
  seccomp filter (no execve, no new process but threads, no ptrace, no signal to any process
  but itself, no change of file modes/owners/times/xattrs, which Landlock does not cover, no
  unix/vsock sockets, no namespace or mount calls, no io_uring).

Why these libraries: plain ``ctypes`` system calls, no dependency. Python 3.11 has no
``os.unshare`` (3.12+); bubblewrap would be a program to install and to trust; ``pyseccomp``
needs libseccomp's shared library, and the filter here is a few dozen BPF instructions. Each
facility that is not there is named in the refusal (`Missing`), never skipped.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import select
import signal
import socket
import stat
import struct
import sys

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNS = 0x10000000, \
    0x40000000, 0x08000000, 0x20000000, 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
WORK_MB = 256  # the work folder is a tmpfs of this size: a launcher cannot fill the disk
CLONE_THREAD = 0x00010000
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38
MAX_THREADS = 256  # torch's import starts a handful; a thread bomb is stopped here
POLL_S = 0.02
# what `enter` may be told to treat as missing, to test the refusal (MILES_TOPOLOGY_SANDBOX_DENY)
FACILITIES = ("namespaces", "landlock", "seccomp")
# [servers] the one TCP port of the sandbox's loopback: the servers a launcher starts are
# answered there (pylaunch/servers.py). Below 1024, so it is bound before the capabilities
# are dropped and no launcher can bind it (nor any other port: Landlock allows no bind)
SWITCHBOARD_PORT = 1
SWITCHBOARD = None  # its listening socket, in the sandboxed process


class Missing(Exception):
    """A facility the kernel does not offer: the launcher is not run."""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _sys(nr: int, *args) -> int:
    r = _libc.syscall(ctypes.c_long(nr), *args)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def _prctl(option: int, *args) -> None:
    args = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]
    args += [ctypes.c_ulong(0)] * (4 - len(args))
    if _libc.prctl(option, *args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _unshare(flags: int) -> None:
    if hasattr(os, "unshare"):  # Python 3.12+
        os.unshare(flags)
    elif _libc.unshare(flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# ---------------------------------------------------------------- Landlock

LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_READS = FS_READ_FILE | FS_READ_DIR
FS_WRITES = sum(1 << i for i in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write, remove, make_*
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
RULE_NET_PORT = 2
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
LANDLOCK_MIN_ABI = 3  # below it, truncate(2) of any file and linking across folders are open


def landlock_abi() -> int:
    """The Landlock ABI the kernel offers; 0 when it has none (or it is disabled)."""
    try:
        return _sys(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except OSError:
        return 0


# Files the C library and Python read below /etc (name lookups, time zone, certificates,
# locale): /etc as a whole holds the machine's secrets too, so only these.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
       "passwd", "group", "hosts", "host.conf", "resolv.conf", "gai.conf", "services",
       "protocols", "ssl", "ca-certificates", "pki", "os-release", "mime.types",
       "locale.alias", "locale.conf", "lsb-release", "debian_version", "alternatives")
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/sys", "/proc",
          "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full",
          *(f"/etc/{n}" for n in ETC))
# Left out of a readable folder that holds them, at any depth (a checkout, HOME on the import
# path): a repository's .git (its config may hold a token), the usual credential files and
# token caches (gate.HIDDEN, gate.HIDDEN_PAIRS), and all of .config.
_NAMES: tuple = ()


def _lists() -> tuple:
    """gate.HIDDEN and gate.HIDDEN_PAIRS, the one list: gate.py loaded by its file, since
    in the child this module is imported on its own (only the standard library so far)."""
    global _NAMES
    if not _NAMES:
        import importlib.util

        where = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "reading", "gate.py")
        spec = importlib.util.spec_from_file_location("_miles_topology_gate", where)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _NAMES = (mod.HIDDEN | {".config"}, mod.HIDDEN_PAIRS)
    return _NAMES


def _hidden(parts: tuple) -> bool:
    """Whether the last of `parts` is left out: a credential name, the second of a pair
    (gate.HIDDEN, gate.HIDDEN_PAIRS), or .config."""
    names, pairs = _lists()
    return parts[-1] in names or len(parts) > 1 and (parts[-2], parts[-1]) in pairs


WALK_MAX = 200_000  # entries looked at below the readable folders of one launcher


def _own_trees() -> tuple[str, ...]:
    """The interpreter's and this package's trees: the checker's own, not walked (its
    virtual environment too: the child runs with -S, so sys.prefix is the base one)."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    venv = [venv] if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) else []
    return tuple(dict.fromkeys(os.path.realpath(p) for p in (
        sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, pkg, *venv)))


def readable(paths) -> list[tuple[str, int]]:
    """(path, rights) to allow reads beneath: each given path resolved (a committed symlink
    never widens a rule to its target), but a folder that holds a hidden name at any depth
    (`_hidden`) is split: listable only (names, not contents), its other entries readable
    (Landlock allows a whole tree, never takes a part back out); a symlinked entry gets no
    rule of its own (what it points to is readable only where a rule allows it already). A
    tree with more than WALK_MAX entries is listable only. The interpreter's own trees are
    not walked: only their top level is split."""
    out: list[tuple[str, int]] = []
    own = _own_trees()
    budget = [WALK_MAX]
    for path in dict.fromkeys(os.path.realpath(p) for p in paths):
        if not os.path.isdir(path):
            if os.path.exists(path):
                out.append((path, FS_READS))
            continue
        deep = not any(path == t or path.startswith(t.rstrip(os.sep) + os.sep) for t in own)
        marks = _marks(path, deep, budget)
        out += [(path, FS_READ_DIR)] if marks is None else _rules(path, marks)
    return out


def _rules(path: str, marks: set) -> list[tuple[str, int]]:
    """Whole when no hidden entry is below `path`; else names only, each entry split."""
    if not marks:
        return [(path, FS_READS)]
    out = [(path, FS_READ_DIR)]
    try:
        entries = list(os.scandir(path))
    except OSError:
        return out
    for e in entries:
        if e.is_symlink():
            continue
        mine = {m[1:] for m in marks if m[0] == e.name}
        if () in mine:
            continue  # hidden itself
        if not mine:
            out.append((e.path, FS_READS))
        elif e.is_dir(follow_symlinks=False):
            out += _rules(e.path, mine)
    return out


def _marks(path: str, deep: bool, budget: list[int]) -> set | None:
    """The relative parts of each hidden entry below `path` (not walked into); None when
    the walk passed its bound. Not `deep`: only the top level."""
    found: set = set()
    stack: list[tuple[str, tuple]] = [(path, ())]
    while stack:
        d, rel = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        budget[0] -= len(entries)
        if budget[0] < 0:
            return None
        for e in entries:
            parts = (*rel, e.name)
            if _hidden(parts):
                found.add(parts)
            elif deep and e.is_dir(follow_symlinks=False):
                stack.append((e.path, parts))
    return found


def landlock(work: str, reads=None, proc: bool = True) -> int:
    """Writing, creating, removing, renaming, linking, truncating and device ioctls only
    beneath `work`; reading only there, beneath each of `reads` (the launcher's checkout, its
    import path, system libraries: `readable`) and SYSTEM; executing nothing; no TCP but a
    connect to the switchboard's port (`SWITCHBOARD_PORT`, in the sandbox's own network
    namespace); signals and abstract unix sockets only within the sandbox. `reads` None:
    reads are not handled (the refusal's test); `proc`: /proc is the PID namespace's own."""
    abi = landlock_abi()
    if abi < LANDLOCK_MIN_ABI:
        raise Missing(f"Landlock ABI {LANDLOCK_MIN_ABI} or newer (this kernel offers "
                      f"{abi or 'none'}; it needs Linux 6.2+ with landlock in the lsm= list)")
    fs = FS_EXECUTE | FS_WRITES | FS_REFER | FS_TRUNCATE | (FS_IOCTL_DEV if abi >= 5 else 0) \
        | (FS_READS if reads is not None else 0)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("QQQ", fs, net, scoped) if abi >= 6 else struct.pack("QQ", fs, net) \
        if abi >= 4 else struct.pack("Q", fs)
    ruleset = _sys(LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    try:
        rules = [(work, fs & ~FS_EXECUTE), (os.devnull, FS_WRITE_FILE | FS_TRUNCATE)]
        if reads is not None:
            rules += [(p, FS_READS) for p in SYSTEM if proc or p != "/proc"]
            rules += readable(reads)
        for path, allowed in rules:
            try:  # resolved paths (readable); O_NOFOLLOW: a link is never a rule's root
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC | (
                    os.O_NOFOLLOW if (path, allowed) not in rules[:2] and path not in SYSTEM
                    else 0))
            except OSError:
                continue  # not on this machine
            if allowed == FS_READS and not stat.S_ISDIR(os.fstat(fd).st_mode):
                allowed = FS_READ_FILE  # a file takes no folder right
            try:  # struct landlock_path_beneath_attr is packed: u64 allowed, s32 parent_fd
                _sys(LANDLOCK_ADD_RULE, ruleset, 1, struct.pack("=Qi", allowed, fd),
                     ctypes.c_uint32(0))
            finally:
                os.close(fd)
        if net:  # struct landlock_net_port_attr: u64 allowed, u64 port
            _sys(LANDLOCK_ADD_RULE, ruleset, RULE_NET_PORT,
                 struct.pack("=QQ", NET_CONNECT_TCP, SWITCHBOARD_PORT), ctypes.c_uint32(0))
        _sys(LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi


# ---------------------------------------------------------------- seccomp

# syscall numbers by machine (asm/unistd_64.h; aarch64 uses the generic table)
_NR = {
    "x86_64": dict(
        arch=0xC000003E, execve=59, execveat=322, fork=57, vfork=58, clone=56, clone3=435,
        ptrace=101, process_vm_readv=310, process_vm_writev=311, kill=62, tkill=200,
        tgkill=234, rt_sigqueueinfo=129, rt_tgsigqueueinfo=297, pidfd_send_signal=424,
        pidfd_getfd=438, process_madvise=440, setsid=112, setpgid=109, prctl=157, ioctl=16,
        socket=41, unshare=272, setns=308, mount=165, umount2=166, pivot_root=155, chroot=161,
        open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433,
        mount_setattr=442, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
        bpf=321, perf_event_open=298, userfaultfd=323, keyctl=250, add_key=248,
        request_key=249, chmod=90, fchmod=91, fchmodat=268, fchmodat2=452, chown=92,
        fchown=93, lchown=94, fchownat=260, utime=132, utimes=235, futimesat=261,
        utimensat=280, setxattr=188, lsetxattr=189, fsetxattr=190, removexattr=197,
        lremovexattr=198, fremovexattr=199, setxattrat=463, removexattrat=466, iopl=172,
        ioperm=173, socketpair=53, memfd_create=319, memfd_secret=447, fallocate=285,
        flock=73, fcntl=72, shmget=29),
    "aarch64": dict(
        arch=0xC00000B7, execve=221, execveat=281, clone=220, clone3=435, ptrace=117,
        process_vm_readv=270, process_vm_writev=271, kill=129, tkill=130, tgkill=131,
        rt_sigqueueinfo=138, rt_tgsigqueueinfo=240, pidfd_send_signal=424, pidfd_getfd=438,
        process_madvise=440, setsid=157, setpgid=154, prctl=167, ioctl=29, socket=198,
        unshare=97, setns=268, mount=40, umount2=39, pivot_root=41, chroot=51, open_tree=428,
        move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442,
        io_uring_setup=425, io_uring_enter=426, io_uring_register=427, bpf=280,
        perf_event_open=241, userfaultfd=282, keyctl=219, add_key=217, request_key=218,
        fchmod=52, fchmodat=53, fchmodat2=452, fchown=55, fchownat=54, utimensat=88,
        setxattr=5, lsetxattr=6, fsetxattr=7, removexattr=14, lremovexattr=15,
        fremovexattr=16, setxattrat=463, removexattrat=466, socketpair=199,
        memfd_create=279, memfd_secret=447, fallocate=47, flock=32, fcntl=25, shmget=194),
}
# refused outright (EPERM): programs, processes, other processes' memory, namespaces and
# mounts, the kernel surfaces a launcher never needs, and metadata changes Landlock allows
_DENY = ("execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv",
         "process_vm_writev", "tkill", "pidfd_send_signal", "pidfd_getfd", "process_madvise",
         "setsid", "setpgid", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
         "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
         "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open",
         "userfaultfd", "keyctl", "add_key", "request_key", "chmod", "fchmod", "fchmodat",
         "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes", "futimesat",
         "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
         "fremovexattr", "setxattrat", "removexattrat", "iopl", "ioperm",
         # memory no bound sees (a memfd's pages are counted nowhere while unmapped), and a
         # unix socket pair, whose datagram end sends to any socket path (sendto)
         "memfd_create", "memfd_secret", "socketpair")
F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW = 6, 7, 37, 38
F_SETSIG, F_SETLEASE, F_NOTIFY = 10, 1024, 1026
SHM_MB = 16  # SysV shared memory of the sandbox's IPC namespace, all segments together
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
ALLOW, KILL = 0x7FFF0000, 0x80000000
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # push input into a terminal: someone else's keystrokes


def _errno(e: int) -> int:
    return 0x00050000 | e


def _ins(code, k, jt=0, jf=0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _arg(i: int) -> int:
    return 16 + 8 * i  # offsetof(struct seccomp_data, args[i]), low word (little-endian)


def bpf_program(self_pid: int, machine: str | None = None, shm: bool = True) -> bytes:
    """The filter, as struct sock_filter[]: each rule is a test of the call number followed
    by a block that always returns, so no jump is longer than a few instructions. `shm`:
    SysV shared memory is bounded by its namespace (else `shmget` is refused)."""
    nr = _NR[machine or os.uname().machine]
    prog = [_ins(_LD, 4), _ins(_JEQ, nr["arch"], 1, 0), _ins(_RET, KILL), _ins(_LD, 0)]
    if nr["arch"] == 0xC000003E:  # the x32 call numbers of the same machine
        prog += [_ins(_JGE, 0x40000000, 0, 1), _ins(_RET, _errno(errno.ENOSYS))]
    eperm = _ins(_RET, _errno(errno.EPERM))

    def when(name, *block):
        if name in nr:
            prog.extend([_ins(_JEQ, nr[name], 0, len(block)), *block])

    for name in _DENY:
        when(name, eperm)
    # clone3's flags are behind a pointer the filter cannot read: ENOSYS, and glibc falls
    # back to clone, whose flags it can (pthread_create passes CLONE_THREAD)
    when("clone3", _ins(_RET, _errno(errno.ENOSYS)))
    when("clone", _ins(_LD, _arg(0)), _ins(_JSET, CLONE_THREAD, 0, 1), _ins(_RET, ALLOW),
         eperm)
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):  # arg 0: the pid
        when(name, _ins(_LD, _arg(0)), _ins(_JEQ, self_pid, 0, 1), _ins(_RET, ALLOW), eperm)
    when("ioctl", _ins(_LD, _arg(1)), _ins(_JEQ, TIOCSTI, 1, 0), _ins(_JEQ, TIOCLINUX, 0, 1),
         eperm, _ins(_RET, ALLOW))
    # sockets: only AF_INET/AF_INET6, which reach nothing in the new network namespace; no
    # AF_UNIX (a path socket such as a daemon's is not a file write Landlock sees), no vsock
    when("socket", _ins(_LD, _arg(0)), _ins(_JEQ, 2, 1, 0), _ins(_JEQ, 10, 0, 1),
         _ins(_RET, ALLOW), eperm)
    # locks (flock, fcntl record and OFD locks) succeed without taking effect: the sandbox is
    # one process, so a lock has nobody to exclude inside, and one on a file outside (which it
    # can open for reading) would stall a process there. Leases, F_SETSIG and F_NOTIFY: refused
    when("flock", _ins(_RET, _errno(0)))
    when("fcntl", _ins(_LD, _arg(1)), _ins(_JEQ, F_SETLK, 3, 0), _ins(_JEQ, F_SETLKW, 2, 0),
         _ins(_JEQ, F_OFD_SETLK, 1, 0), _ins(_JEQ, F_OFD_SETLKW, 0, 1), _ins(_RET, _errno(0)),
         _ins(_JEQ, F_SETSIG, 2, 0), _ins(_JEQ, F_SETLEASE, 1, 0), _ins(_JEQ, F_NOTIFY, 0, 1),
         eperm, _ins(_RET, ALLOW))
    # fallocate can reserve blocks beyond RLIMIT_FSIZE (FALLOC_FL_KEEP_SIZE): "not supported",
    # and glibc's posix_fallocate writes the zeros itself, which the bounds see
    when("fallocate", _ins(_RET, _errno(errno.EOPNOTSUPP)))
    if not shm:
        when("shmget", eperm)
    # the parent-death signal is what ends it with the supervisor: not to be cleared
    when("prctl", _ins(_LD, _arg(0)), _ins(_JEQ, PR_SET_PDEATHSIG, 0, 1), eperm,
         _ins(_RET, ALLOW))
    prog.append(_ins(_RET, ALLOW))
    return b"".join(prog)


def seccomp(self_pid: int, shm: bool = True) -> None:
    machine = os.uname().machine
    if machine not in _NR:
        raise Missing(f"a seccomp filter for this machine ({machine}; written for "
                      f"{', '.join(_NR)})")
    code = bpf_program(self_pid, machine, shm)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(buf))
    try:
        _prctl(PR_SET_SECCOMP, 2, ctypes.c_char_p(prog))
    except OSError as e:
        raise Missing(f"seccomp filters (prctl(PR_SET_SECCOMP) failed: {e.strerror})") from None


# ---------------------------------------------------------------- namespaces and the split


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _drop_capabilities() -> None:
    """The user namespace gave every capability within it; keep none (capset, version 3)."""
    header = struct.pack("Ii", 0x20080522, 0)
    if _libc.capset(header, bytes(24)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def namespaces(work: str) -> bool:
    """Enter new user, network, IPC, PID and mount namespaces; mount the work tmpfs. Returns
    whether SysV shared memory of the new IPC namespace is bounded (SHM_MB)."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        _unshare(CLONE_NEWUSER)
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")  # the same ids inside as outside
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        _unshare(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNS)
    except OSError as e:
        raise Missing(f"unprivileged user namespaces ({e.strerror}; see "
                      "/proc/sys/user/max_user_namespaces, and on Ubuntu "
                      "kernel.apparmor_restrict_unprivileged_userns)") from None
    # a mount made in a namespace of a less privileged user is not propagated back out
    options = f"size={WORK_MB}m,nr_inodes=65536,mode=700".encode()
    if _libc.mount(b"tmpfs", os.fsencode(work), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                   options) != 0:
        e = ctypes.get_errno()
        raise Missing(f"a tmpfs in a mount namespace ({os.strerror(e)})")
    try:  # the IPC namespace's own bounds (writable by its owner since Linux 5.17)
        _write("/proc/sys/kernel/shmmax", str(SHM_MB << 20))
        _write("/proc/sys/kernel/shmall", str((SHM_MB << 20) // os.sysconf("SC_PAGE_SIZE")))
        shm = True
    except OSError:
        shm = False
    _loopback_up()
    return shm


SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _loopback_up() -> None:
    """The new network namespace's loopback, up (it starts down): the servers a launcher
    starts are answered on it (pylaunch/servers.py); there is still no other device."""
    import fcntl

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            flags = struct.unpack_from("16sH", fcntl.ioctl(s, SIOCGIFFLAGS,
                                                           struct.pack("16sH22x", b"lo", 0)))[1]
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    except OSError:
        pass  # no loopback: the launcher's polls of its servers are refused, as before


def _switchboard() -> None:
    """Bind the switchboard's port while the capabilities allow a port below 1024."""
    global SWITCHBOARD
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", SWITCHBOARD_PORT))
        s.listen(64)
    except OSError:
        return
    SWITCHBOARD = s


def _own_proc() -> bool:
    """A /proc of the new PID namespace mounted over /proc (the supervisor reads the
    machine's through a descriptor it opened before): the launcher sees only itself, not
    other processes' command lines and environments. False where the kernel refuses the
    mount (then /proc is not readable at all). A mount namespace of its own would cost a
    tenth of a second at exit (measured)."""
    return _libc.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV |
                                                                  MS_NOEXEC), None) == 0


def enter(work: str, memory_mb: int, deny: str = "", emit=None, reads=(),
          verdict_fd: int = -1) -> None:
    """Isolate this process, or raise Missing. Returns in the sandboxed process only: the
    supervisor waits, then exits as the sandboxed process did. `reads`: the paths it may read
    beneath (`landlock`). `verdict_fd`: where the supervisor writes its verdict (memory,
    threads) as a record line, a descriptor the sandboxed process closes; `emit`, without
    one (tests)."""
    if sys.platform != "linux":
        raise Missing(f"Linux (namespaces, Landlock, seccomp); this is {sys.platform}")
    denied = set((deny or "").split(","))
    for name in FACILITIES:
        if name in denied:
            raise Missing(f"{name} (MILES_TOPOLOGY_SANDBOX_DENY={deny} says to treat it as "
                          "missing)")
    if landlock_abi() < LANDLOCK_MIN_ABI:
        landlock(work)  # raises Missing, naming the ABI the kernel has
    if os.uname().machine not in _NR:
        seccomp(0)  # raises Missing: no filter written for this machine
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the supervisor ends with the checker
    shm = namespaces(work)
    alive_r, alive_w = os.pipe()
    procfd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the machine's
    pid = os.fork()  # the child is PID 1 of the new PID namespace
    if pid:
        os.close(alive_r)
        _supervise(pid, memory_mb, verdict_fd, emit, procfd)
    os.close(procfd)
    os.close(alive_w)
    if verdict_fd >= 0:
        os.close(verdict_fd)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.set_blocking(alive_r, False)
    try:
        if os.read(alive_r, 1) == b"":  # the supervisor died before the line above
            os._exit(1)
    except BlockingIOError:
        pass
    os.close(alive_r)
    proc = _own_proc()
    try:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _switchboard()
        _drop_capabilities()
    except OSError as e:
        raise Missing(f"no_new_privs and capset ({e.strerror})") from None
    try:
        landlock(work, [p for p in reads if proc or not p.startswith("/proc")], proc)
    except OSError as e:
        raise Missing(f"a Landlock ruleset ({e.strerror})") from None
    seccomp(os.getpid(), shm)


def _usage(pid: int, procfd: int) -> tuple[int, int]:
    """(memory in use in KiB, threads): anonymous and shared memory, not mapped files. Read
    from a live thread: a leader that has ended (its other threads go on) shows none."""
    got = _status(f"{pid}/status", procfd)
    if got is None:
        task = os.open(f"{pid}/task", os.O_RDONLY | os.O_DIRECTORY, dir_fd=procfd)
        try:
            for tid in os.listdir(task):
                got = _status(f"{pid}/task/{tid}/status", procfd)
                if got is not None:
                    break
        finally:
            os.close(task)
    return got or (0, 0)


def _status(path: str, procfd: int) -> tuple[int, int] | None:
    kib, threads = 0, 0
    with open(os.open(path, os.O_RDONLY, dir_fd=procfd), "rb") as f:
        for line in f:
            if line.startswith((b"RssAnon:", b"RssShmem:")):
                kib += int(line.split()[1])
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
            elif line.startswith(b"State:") and line.split()[1] in (b"Z", b"X"):
                return None
    return kib, threads


def _supervise(pid: int, memory_mb: int, verdict_fd: int, emit, procfd: int) -> None:
    """Wait for the sandboxed process; kill it over the bounds; exit as it exited."""
    poll = select.poll()
    fd = os.pidfd_open(pid)
    poll.register(fd, select.POLLIN)
    verdict = None
    while not poll.poll(POLL_S * 1000):
        try:
            kib, threads = _usage(pid, procfd)
        except (OSError, ValueError):
            break
        if kib > memory_mb << 10:
            verdict = {"end": "memory", "used_mib": kib >> 10}
        elif threads > MAX_THREADS:
            verdict = {"end": "threads", "threads": threads}
        if verdict:
            os.kill(pid, signal.SIGKILL)
            break
    _, status = os.waitpid(pid, 0)
    if verdict and verdict_fd >= 0:
        os.write(verdict_fd, (json.dumps(verdict) + "\n").encode())
    elif verdict and emit:
        emit(verdict)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
