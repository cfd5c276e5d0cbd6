"""A script run inside a container (``docker run -v "$PWD":/workspace -w /workspace IMAGE
bash /workspace/scripts/run.sh``): which file of this machine the container's path is.

The one rule of the mapping. A container path is a file here only through the command's
own mounts (``-v``/``--volume``, ``--mount type=bind``, ``--bind``/``-B``,
``--container-mounts``, enroot's ``--mount``) or its working folder (``-w``, ``--pwd``,
``--container-workdir``; apptainer runs in the host's working folder by default); the
innermost mount that covers the path decides, as the container's mount table does.
Anything else (``docker exec`` into a running container, a path of the image's own files,
a mount whose words are not known here) is not mapped, and says why: it is never looked
for by name. The host path it gives is read as ``bash FILE``'s is, through the gate."""

from __future__ import annotations

import posixpath
import re
from typing import NamedTuple

from ..reading import gate
from ..reading.commandline import (
    _SHELLS,
    SRUN_SHORT,
    SRUN_VALUED,
    _skip_wrappers,
    wrapped_shell,
)
from .launch import shell_text
from .values import Field, Unk, Var

UNKNOWN = "\0"  # heads a word whose start is unknown here; what follows is its known end
# the host's working folder heading a word (its double quotes removed): $PWD, $(pwd), `pwd`
# after an option's `--opt=` or a list's `source=`, `,`; what follows must be literal
_CWD = re.compile(r"((?:[^$`\\']*[=,])?)(?:\$PWD|\$\{PWD\}|\$\(pwd(?: -[LP])?\)|"
                  r"`pwd(?: -[LP])?`)(?=[^$`\\']*$)")


class Inside(NamedTuple):
    """A shell that one command starts in a container, with what maps its paths."""

    how: str  # "docker run", "docker exec", "apptainer exec", "srun", "enroot start"
    image: int  # index of the image or container word (-1: srun's --container-image)
    name: str  # srun's image ("?" when not known here)
    shell: int  # index of the shell word (bash, sh) the container runs
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
    """How a command runs a shell in a container: ``docker|podman run|exec``, ``apptainer|
    singularity exec``, ``srun --container-image``, ``enroot start``, behind wrappers (sudo,
    nohup, ...); None for any other command, or when its options are not read to the end
    here (an unknown word)."""
    k = _skip_wrappers(vals, 0, {})
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
    else:
        got = _read(vals, k + 1, "srun", _SRUN) if head == "srun" else None
    if got is None or got.shell >= len(vals) or vals[got.shell] is None or \
            posixpath.basename(vals[got.shell]) not in _SHELLS:
        return None
    return got


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


def follow(r, fields: list[Field], n, cond) -> None:
    """A script another shell runs behind wrappers (``nohup bash F &``, ``srun bash -lc
    '...'``) or in a container (`inside`): read as ``bash FILE`` is (Builtins.script: through
    the gate), a ``bash -c TEXT`` as its text (texts.Texts.command); a container's shell sees
    only the variables its command passes. A container's script that is not read is kept in
    `found.contained`, with why, for the refusal's message."""
    c = inside(words(fields, n.words))
    if c is None:
        if (k := shell_text(fields)) is not None:
            r.texts.command(fields, k, cond)
        elif (k := wrapped_shell([f.value for f in fields])) is not None:
            r.builtins.script(fields[k:], n, cond)
        return
    where = r.at.src(n.line)
    f = fields[c.shell + 1] if c.shell + 1 < len(fields) else None
    ran = " ".join(x.text for x in fields[c.shell:c.shell + 3])
    name = c.name if c.image < 0 else fields[c.image].value or fields[c.image].text
    said = f"It runs `{ran if len(ran) <= 80 else ran[:77] + '...'}` in the container " \
        f"{name} ({c.how}) at {where}"
    if f is not None and (k := shell_text(fields[c.shell:])) is not None:
        return _text(r, c, fields, c.shell + k, cond, said)
    if f is None or f.value is None or f.value.startswith("-"):
        why = "its script is its standard input" if f is None else "its script's path is " \
            "not known here" if f.value is None else "a shell with options is not followed"
        r.found.contained.append((where, f"{said}: {why}; it is not read"))
        return
    host, why = host_path(c, f.value)
    if host is None:
        r.found.contained.append((where, f"{said}: {f.value} maps to no file here, as {why}; "
                                  "that script is not read"))
        return
    if host.startswith("/"):  # named by the mount: no other file is looked for by its tail
        try:
            gate.admit(host, r.at.roots)
        except (gate.Refused, OSError) as e:
            why = f"refused: {e}" if isinstance(e, gate.Refused) else "which does not exist"
            r.found.contained.append((where, f"{said}: {f.value} is {host} on this machine, "
                                      f"{why}"))
            return
    sh = r.sh
    saved = sh.snapshot()
    _pass_env(sh, c, where)
    try:
        got = r.builtins.script([fields[c.shell], Field(host, f.src, text=f.text),
                                 *fields[c.shell + 2:]], n, cond)
    finally:
        sh.restore(saved)
    if got is False:
        why = f"refused: {r.builtins.refused}" if r.builtins.refused else \
            "not a script (.sh) found inside the checkout; it is not read"
        r.found.contained.append((where, f"{said}: {f.value} is {host} on this machine, "
                                  f"{why}"))


def _text(r, c: Inside, fields: list[Field], k: int, cond, said: str) -> None:
    """``bash -c TEXT`` in the container (``srun --container-image=IMG bash -lc '...'``): its
    text is read with what the container's shell gets; a ``bash FILE`` in it names a path of
    the container, which is not followed from there (Reader.run_child: `r.boxed`)."""
    sh = r.sh
    saved, boxed = sh.snapshot(), r.boxed
    _pass_env(sh, c, fields[k].src)
    r.boxed = said
    try:
        r.texts.command(fields, k, cond)
    finally:
        sh.restore(saved)
        r.boxed = boxed


def _pass_env(sh, c: Inside, where) -> None:
    """What the container's shell gets of the variables: docker and enroot pass only their
    ``-e NAME=VALUE`` and ``-e NAME`` (the host's exported value); an ``--env-file`` may
    set any."""
    if c.env_file:
        sh.taint = Unk("--env-file", where, "the container's --env-file is not read")
    if c.env is None:
        return
    given = set(sh.vars) if sh.allexport else sh.exported | sh.inherited
    kept: dict[str, Var] = {}
    for name, value in c.env:
        if value is not None:
            kept[name] = Var([Field(value, where, text=f"-e {name}={value}")], False)
        elif name in given and name in sh.vars:
            kept[name] = sh.vars[name]
    sh.vars, sh.exported, sh.inherited, sh.allexport = kept, set(kept), set(), False
