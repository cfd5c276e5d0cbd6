"""A script run inside a container (``docker run -v "$PWD":/workspace -w /workspace IMAGE
bash /workspace/scripts/run.sh``): which file of this machine the container's path is.

The one rule of the mapping. A container path is a file here only through the command's
own mounts (``-v``/``--volume``, ``--mount type=bind``, ``--bind``/``-B``,
``--container-mounts``, enroot's ``--mount``) or its working folder (``-w``, ``--pwd``,
``--container-workdir``; apptainer runs in the host's working folder by default); the
innermost mount that covers the path decides, as the container's mount table does.
Anything else (``docker exec`` into a running container, a path of the image's own files,
a mount whose words are not known here) is not mapped, and says why: it is never looked
for by name. The host path it gives is read as ``bash FILE``'s is, through the gate.

What runs in the container is read as the container runs it: a script (``bash FILE``, a
``bash -c`` text, and the ``bash FILE`` those run) with only the variables the container
passes and its paths mapped by its mounts; a training launch (``IMAGE python3 train.py
...``) with its words, the environment the container passes, and its entry's file here,
when a mount maps it, for its stack (`launch`, `placed`)."""

from __future__ import annotations

import dataclasses
import posixpath
import re
from contextlib import contextmanager
from typing import NamedTuple

from ..reading import gate
from ..reading.commandline import (
    _SHELLS,
    SRUN_SHORT,
    SRUN_VALUED,
    _skip_wrappers,
    wrapped_shell,
)
from . import launch as launches
from .builtins import _frame
from .launch import shell_text
from .values import Field, Unk, Var

UNKNOWN = "\0"  # heads a word whose start is unknown here; what follows is its known end
# the host's working folder heading a word (its double quotes removed): $PWD, $(pwd), `pwd`
# after an option's `--opt=` or a list's `source=`, `,`; what follows must be literal
_CWD = re.compile(r"((?:[^$`\\']*[=,])?)(?:\$PWD|\$\{PWD\}|\$\(pwd(?: -[LP])?\)|"
                  r"`pwd(?: -[LP])?`)(?=[^$`\\']*$)")


class Inside(NamedTuple):
    """A command (a shell, a launch) that one command runs in a container, with what maps
    its paths."""

    how: str  # "docker run", "docker exec", "apptainer exec", "srun", "enroot start",
    # "srun, apptainer exec" (srun running the container)
    image: int  # index of the image or container word (-1: srun's --container-image)
    name: str  # srun's image ("?" when not known here)
    cmd: int  # index of the command the container runs (a shell, python3, ray, ...)
    # (host folder, container folder); the host folder None: not a folder of this machine
    # (a named volume) or not known here; the container folder None: not known here
    mounts: tuple[tuple[str | None, str | None], ...] = ()
    workdir: str | None = None  # the container's working folder, when the command sets it
    cwd_same: bool = False  # it runs in the host's working folder (apptainer's default)
    # only these variables reach its shell (value None: the host's value of the name);
    # None: every exported one, as for `bash FILE`
    env: tuple[tuple[str, str | None], ...] | None = None
    env_file: bool = False  # --env-file: any variable may be set
    running: bool = False  # docker exec: a container already running, its mounts unknown


class _Spec(NamedTuple):
    """How one runtime's options read: long ones that take a value (or, `switches` set,
    every long one but those), short letters that take one, short names' long ones."""

    values: frozenset[str]
    short: str
    names: dict[str, str]
    switches: bool = False  # `values` lists the long switches instead
    comma: bool = False  # a mount option's value is a comma list, DST defaulting to SRC
    image: bool = True  # an image or container word comes before the command


_DOCKER = _Spec(frozenset((  # docker/podman run --help: the long switches
    "--rm", "--detach", "--interactive", "--tty", "--privileged", "--init", "--publish-all",
    "--read-only", "--sig-proxy", "--no-healthcheck", "--oom-kill-disable", "--help",
    "--disable-content-trust", "--quiet", "--use-api-socket", "--replace", "--rmi",
    "--env-host", "--http-proxy", "--no-hosts", "--read-only-tmpfs")), "acehlmpuvw",
    {"-v": "--volume", "-w": "--workdir", "-e": "--env"}, switches=True)
_APPTAINER = _Spec(frozenset((  # apptainer exec --help: the long options with a value
    "--add-caps", "--app", "--bind", "--cpu-shares", "--cpus", "--cpuset-cpus",
    "--cpuset-mems", "--dns", "--drop-caps", "--env", "--env-file", "--fusemount", "--home",
    "--hostname", "--memory", "--memory-reservation", "--memory-swap", "--mount", "--network",
    "--network-args", "--no-mount", "--overlay", "--pem-path", "--pids-limit", "--pwd",
    "--scratch", "--security", "--workdir", "--apply-cgroups", "--blkio-weight",
    "--blkio-weight-device", "--config", "--device", "--cdi-dirs", "--authfile")), "BHoSW",
    {"-B": "--bind", "-c": "--contain", "-C": "--containall", "-e": "--cleanenv",
     "-W": "--scratch", "--workdir": "--scratch"}, comma=True)  # its --workdir: scratch space
_ENROOT = _Spec(frozenset(("--conf", "--env", "--mount")), "cem",
                {"-m": "--bind", "--mount": "--bind", "-e": "--env"})  # SRC:DST
# srun's options as the command-form reader reads them (reading/commandline.py): one table
_SRUN = _Spec(frozenset(o for o in SRUN_VALUED if o.startswith("--")), SRUN_SHORT, {},
              comma=True, image=False)


def words(fields: list[Field], syn: list) -> list[str | None]:
    """The command's words for `inside`: a known value as it is; an unknown one headed by
    the host's working folder (``"$PWD":/workspace``, ``$(pwd)/data:/data``) as the same
    path relative to it (``.:/workspace``); another unknown one whose end is known as
    UNKNOWN and that end; else None. `syn`: the command's syntax words, read only when
    they are the fields one for one."""
    out: list[str | None] = []
    for i, f in enumerate(fields):
        text = syn[i].text.replace('"', "") if len(syn) == len(fields) else ""
        m = _CWD.match(text) if f.value is None else None
        out.append(f.value if f.value is not None else m[1] + "." + text[m.end():] if m else
                   UNKNOWN + f.tail if f.tail else None)
    return out


def inside(vals: list[str | None]) -> Inside | None:
    """How a command runs a shell in a container (`container`, the command a shell)."""
    got = container(vals)
    if got is None or vals[got.cmd] is None or posixpath.basename(vals[got.cmd]) not in _SHELLS:
        return None
    return got


def container(vals: list[str | None], at: int = 0) -> Inside | None:
    """How a command runs another in a container: ``docker|podman run|exec``, ``apptainer|
    singularity exec``, ``srun --container-image``, ``enroot start``, behind wrappers (sudo,
    nohup, ...) and behind srun without an image (``srun -N 2 apptainer exec IMG ...``: srun
    runs the container on each task, passing the environment); None for any other command,
    for one with no command after the image, or when its options are not read to the end
    here (an unknown word)."""
    k = _skip_wrappers(vals, at, {})
    head = posixpath.basename(vals[k] or "") if k < len(vals) else ""
    verb = vals[k + 1] if k + 1 < len(vals) else None
    if head in ("docker", "podman", "nvidia-docker"):
        k += verb == "container"
        verb = vals[k + 1] if k + 1 < len(vals) else None
        got = _read(vals, k + 2, f"{head} {verb}", _DOCKER) if verb in ("run", "exec") \
            else None
    elif head in ("apptainer", "singularity") and verb == "exec":
        got = _read(vals, k + 2, f"{head} exec", _APPTAINER)
    elif head == "enroot" and verb == "start":
        got = _read(vals, k + 2, "enroot start", _ENROOT)
    elif head == "srun":
        got = _read(vals, k + 1, "srun", _SRUN)
        if got is None and (j := _skip_wrappers(vals, k, {}, runners=True)) > k:
            got = container(vals, j)  # srun runs the container: the environment passes
            return got._replace(how=f"srun, {got.how}") if got is not None else None
    else:
        got = None
    return got if got is not None and got.cmd < len(vals) else None


def host_path(c: Inside, path: str) -> tuple[str | None, str]:
    """(the path on this machine of `path` in the container, "") or (None, why it has
    none). A relative result is relative to the host's working folder."""
    if c.running:
        return None, "the container is already running and its mounts are not known here"
    if not path.startswith("/"):
        if c.workdir is None:
            return (path, "") if c.cwd_same else (
                None, "the path is relative to the image's own working folder, not known "
                "here")
        if not c.workdir.startswith("/"):
            return None, "its working folder is not known here"
        path = posixpath.join(c.workdir, path)
    path = posixpath.normpath(path)
    if any(dst is None for _, dst in c.mounts):
        return None, "a mount of the command is not known here"
    best: tuple[str | None, str] | None = None
    for src, dst in c.mounts:  # the innermost; of two at one folder, the later
        d = posixpath.normpath(dst or "/")
        if (path == d or path.startswith(d.rstrip("/") + "/")) and \
                (best is None or len(d) >= len(best[1])):
            best = (src, d)
    if best is None:
        return None, "no mount of the command covers it (a file of the image itself)"
    if best[0] is None:
        return None, f"the mount at {best[1]} is a named volume or a folder not known here"
    return posixpath.normpath(posixpath.join(best[0], posixpath.relpath(path, best[1]))), ""


def _read(vals: list[str | None], i: int, how: str, spec: _Spec) -> Inside | None:
    """The options from `i` to the image (srun: to the command), and what they map."""
    opts: list[tuple[str, str | None]] = []
    while i < len(vals) and vals[i] != "--":
        v = vals[i]
        if v is None or v.startswith(UNKNOWN):  # the image only when a shell follows:
            if spec.image:  # else it may be options ("${DOCKER_ARGS[@]}")
                break
            return None
        if not v.startswith("-") or v == "-":
            break
        got = _option(vals, i, spec)
        if got is None:
            return None
        i, name, value = got
        opts.append((spec.names.get(name, name), value))
    i += i < len(vals) and vals[i] == "--"
    if spec.image:
        return _inside(how, i, "", i + 1, opts, spec)
    image = [v for n, v in opts if n in ("--container-image", "--container-name")]
    if not image:
        return None
    name = image[-1] if image[-1] and not image[-1].startswith(UNKNOWN) else "?"
    return _inside(how, -1, name, i, opts, spec)


def _option(vals: list[str | None], i: int, spec: _Spec) -> tuple[int, str, str | None] | None:
    """(next index, option name, its value; None for a switch) of the option at `i`."""
    v = vals[i]
    if v.startswith("--"):
        name, eq, value = v.partition("=")
        if eq or (name in spec.values) != spec.switches:
            return (i + 1, name, value) if eq else (
                (i + 2, name, vals[i + 1]) if i + 1 < len(vals) else None)
        return i + 1, name, None
    for j, letter in enumerate(v[1:], 1):
        if letter in spec.short:  # the rest of the word, else the next word, is its value
            rest = v[j + 1:].removeprefix("=")
            name = "-" + letter
            return (i + 1, name, rest) if rest else (
                (i + 2, name, vals[i + 1]) if i + 1 < len(vals) else None)
    return i + 1, v if len(v) == 2 else "-" + v[-1], None


def _inside(how: str, image: int, name: str, shell: int, opts: list[tuple[str, str | None]],
            spec: _Spec) -> Inside:
    """What the options map: mounts, working folder, environment."""
    mounts: list[tuple[str | None, str | None]] = []
    workdir, env, env_file = None, [], False
    apptainer = spec is _APPTAINER
    cwd_same, clean = apptainer, not (apptainer or how == "srun")
    for opt, value in opts:
        if opt in ("--volume", "--bind", "--container-mounts"):
            mounts += _binds(value, spec.comma)
        elif opt == "--mount":
            mounts.append(_mount(value))
        elif opt in ("--workdir", "--pwd", "--container-workdir"):  # "": not known here
            workdir = "" if value is None or value.startswith(UNKNOWN) else value
            cwd_same = False
        elif opt == "--env" and (value is None or value.startswith(UNKNOWN)):
            env_file = True  # a variable named at run time
        elif opt == "--env":
            for item in value.split(",") if apptainer else [value]:
                key, eq, val = item.partition("=")
                env.append((key, val if eq else None))
        elif opt == "--env-file":
            env_file = True
        elif apptainer and opt in ("--contain", "--containall", "--no-mount", "--cleanenv"):
            cwd_same = cwd_same and opt == "--cleanenv"  # cwd not bound (or may not be)
            clean = clean or opt in ("--containall", "--cleanenv")
    return Inside(how, image, name, shell, tuple(mounts), workdir, cwd_same,
                  tuple(env) if clean else None, env_file, how.endswith(" exec") and
                  not apptainer)


def _binds(value: str | None, comma: bool) -> list[tuple[str | None, str | None]]:
    """``SRC:DST[:OPTS]`` (a comma list for apptainer and pyxis, DST defaulting to SRC;
    docker's ``-v DST`` alone is an anonymous volume)."""
    if value is None:
        return [(None, None)]
    out: list[tuple[str | None, str | None]] = []
    for item in value.split(",") if comma else [value]:
        parts = item.split(":")
        if len(parts) == 1 and not comma:
            out.append((None, None if item.startswith(UNKNOWN) else item))
            continue
        dst = parts[1] if len(parts) > 1 else parts[0]
        out.append((_source(parts[0]), None if dst.startswith(UNKNOWN) else dst))
    return out


def _mount(value: str | None) -> tuple[str | None, str | None]:
    """``--mount type=bind,source=SRC,target=DST`` (docker's default type is a volume)."""
    if value is None or value.startswith(UNKNOWN):
        return None, None
    keys = dict(p.partition("=")[::2] for p in value.split(","))
    dst = keys.get("target") or keys.get("destination") or keys.get("dst")
    src = keys.get("source") or keys.get("src")
    if not dst:
        return None, None
    return (_source(src) if keys.get("type") == "bind" and src else None), dst


def _source(src: str) -> str | None:
    """A mount's host folder: absolute, or relative to the working folder (``.``, ``./x``,
    what `words` made of ``$PWD``); None for a named volume or one not known here."""
    if src.startswith("/") or src in (".", "..") or src.startswith(("./", "../")):
        return src
    return None


class Box(NamedTuple):
    """A container the read is in (`Reader.box`): what maps its paths, what it says of
    itself, and the host's working folder when it started (a later ``cd`` there names a
    folder of the container)."""

    c: Inside
    said: str
    cwd: str | None


def follow(r, fields: list[Field], n, cond) -> None:
    """A script another shell runs behind wrappers (``nohup bash F &``, ``srun bash -lc
    '...'``) or in a container (`inside`): read as ``bash FILE`` is (Builtins.script: through
    the gate), a ``bash -c TEXT`` as its text (texts.Texts.command); a container's shell sees
    only the variables its command passes, and the paths it names are the container's
    (`script`). A container's script that is not read is kept in `found.contained`, with
    why, for the refusal's message."""
    c = inside(words(fields, n.words))
    if c is None:
        if (k := shell_text(fields)) is not None:
            r.texts.command(fields, k, cond)
        elif (k := wrapped_shell([f.value for f in fields])) is not None:
            r.builtins.script(fields[k:], n, cond)
        return
    where = r.at.src(n.line)
    box = _box(r, c, fields, where)
    f = fields[c.cmd + 1] if c.cmd + 1 < len(fields) else None
    if f is not None and (k := shell_text(fields[c.cmd:])) is not None:
        with _in(r, box, fields[c.cmd + k].src):
            r.texts.command(fields, c.cmd + k, cond)
        return
    if f is None or f.value is None or f.value.startswith("-"):
        why = "its script is its standard input" if f is None else "its script's path is " \
            "not known here" if f.value is None else "a shell with options is not followed"
        r.found.contained.append((where, f"{box.said}: {why}; it is not read"))
        return
    with _in(r, box, where):
        script(r, fields[c.cmd:], n, cond)


def launch(r, fields: list[Field], n, cond) -> bool:
    """A program the container runs that is a launch (``docker run --gpus all -v
    "$PWD":/w -w /w IMAGE python3 train.py --tensor-model-parallel-size 2``, ``srun
    --container-image=IMG python3 train.py``, ``docker exec C ray job submit -- python3
    train.py``): its words are the container's command, its environment what the container
    passes, its entry a path of the container (`placed`). False: not one (nothing kept)."""
    c = container(words(fields, n.words))
    head = fields[c.cmd].value if c is not None else None
    if c is None or head is not None and posixpath.basename(head) in _SHELLS:
        return False
    got = launches.find(fields[c.cmd:], r.at.src(n.line), cond)
    if got is None:
        return False
    site = r.prov.site(fields, got, n)  # what the host sees (`miles-topology flags` runs here)
    with _in(r, _box(r, c, fields, got.src), got.src):
        r.found.launch(placed(r, got, fields, n, site))
    return True


def placed(r, got: launches.Launch, fields: list[Field], n, site=None) -> launches.Launch:
    """A launch with its site; in a container (`r.box`), with the file of this machine its
    entry is (mapped by the container's mounts and admitted by the gate, else None and
    why) and the environment its process gets (the container's shell's)."""
    here = r.prov.site(fields, got, n)
    box = r.box
    if box is None:
        return got._replace(site=here)
    path = got.entry if got.entry.endswith(".py") else got.entry.replace(".", "/") + ".py"
    host, why = (None, "is a word not known here") if got.unknown else _mapped(r, box, path)
    if host is None and path != got.entry:  # python -m M: imported from the working folder
        why = f"(as {path}) {why}"
    env = (here.environ(), "the container's --env-file is not read" if box.c.env_file
           else None)
    return got._replace(site=dataclasses.replace(site or here, box_env=env),
                        box=(box.said, host, why))


def script(r, fields: list[Field], n, cond) -> None:
    """``bash FILE ARGS`` in the container `r.box`: FILE is a path of the container, read
    as the file its mounts map it to (through the gate), with FILE as $0; one that maps to
    no script here is kept in `found.contained`, with why, and not read."""
    f, where = fields[1], r.at.src(n.line)
    host, why = _mapped(r, r.box, f.value)
    if host is not None and not host.endswith(".sh"):
        host, why = None, f"is {host} on this machine, not a script (.sh)"
    if host is None:
        r.found.contained.append((where, f"{r.box.said}: {f.value} {why}; that script is "
                                  "not read"))
        return
    r.run_child(host, _frame(fields[2:]), n, cond, f.value)


def _mapped(r, box: Box, path: str) -> tuple[str | None, str]:
    """(the file of this machine a container path is, "") when the container's mounts map
    it (`host_path`; a relative one from the folder a ``cd`` in the container moved to) and
    the gate admits it; else (None, why). Never looked for by its tail."""
    c = box.c
    if not path.startswith("/") and r.sh.cwd != box.cwd:
        c = c._replace(workdir=r.sh.cwd or "", cwd_same=False)  # cd DIR: a container folder
    host, why = host_path(c, path)
    if host is None:
        return None, f"maps to no file here, as {why}"
    if host.startswith("/"):  # named by the mount: no other file is looked for by its tail
        try:
            gate.admit(host, r.at.roots)
        except gate.Refused as e:
            return None, f"is {host} on this machine, refused: {e}"
        except OSError:
            return None, f"is {host} on this machine, which does not exist"
        return host, ""
    cwd, r.sh.cwd = r.sh.cwd, box.cwd  # relative to the host's folder, not the container's
    try:
        found = r.builtins.locate(host, r.at.src(r.at.stmt_line), note=False)
    finally:
        r.sh.cwd = cwd
    if found is None:
        why = f"refused: {r.builtins.refused}" if r.builtins.refused else \
            "not found inside the checkout"
        return None, f"is {host} in the host's working folder, {why}"
    return found, ""


def _box(r, c: Inside, fields: list[Field], where) -> Box:
    """The container `c` of a command, as said in messages. One run inside another's
    (docker in docker): its mounts name the outer container's folders, not known here."""
    ran = " ".join(x.text for x in fields[c.cmd:c.cmd + 3])
    name = c.name if c.image < 0 else fields[c.image].value or fields[c.image].text
    said = f"It runs `{ran if len(ran) <= 80 else ran[:77] + '...'}` in the container " \
        f"{name} ({c.how}) at {where}"
    if r.box is not None:
        c = c._replace(mounts=((None, None),))
    return Box(c, said, r.sh.cwd)


@contextmanager
def _in(r, box: Box, where):
    """Read what runs in the container `box`: with what its shell gets of the variables,
    its paths mapped by its mounts (`r.box`)."""
    sh = r.sh
    saved, outer = sh.snapshot(), r.box
    _pass_env(sh, box.c, where)
    r.box = box
    try:
        yield
    finally:
        sh.restore(saved)
        r.box = outer


def _pass_env(sh, c: Inside, where) -> None:
    """What the container's shell gets of the variables: docker and enroot pass only their
    ``-e NAME=VALUE`` and ``-e NAME`` (the host's exported value); an ``--env-file`` may
    set any."""
    if c.env_file:
        sh.taint = Unk("--env-file", where, "the container's --env-file is not read")
    if c.env is None:
        return
    given = sh.child_names()
    kept: dict[str, Var] = {}
    for name, value in c.env:
        if value is not None:
            kept[name] = Var([Field(value, where, text=f"-e {name}={value}")], False)
        elif name in given and name in sh.vars:
            kept[name] = sh.vars[name]
    sh.vars, sh.exported, sh.inherited, sh.allexport = kept, set(kept), set(), False
