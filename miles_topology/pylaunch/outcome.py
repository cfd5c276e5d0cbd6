"""What a launcher's run says: its records read into training launches (`PythonLaunch`),
the other actions it tried (`Recorded`) and notes, or the one error saying why it launched
nothing (it timed out, failed, exited, waited, or the sandbox refused it), with the fix."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field

from ..model.errors import InputError, NoTrainingLaunch
from . import checkout
from . import records as records_mod
from .commands import launch_of, shown
from .locate import locate

_THREADS = "the launcher started more threads than the sandbox allows (a thread bomb?); stopped"

# What the import name does not say: the name to pip install.
PIP_NAMES = {"yaml": "pyyaml", "sklearn": "scikit-learn", "PIL": "pillow", "cv2":
             "opencv-python", "dateutil": "python-dateutil", "google": "protobuf"}


def refusal(end: dict) -> str:
    """The one line saying why the launcher was not run, and how to proceed."""
    return (f"not run: the kernel here cannot isolate a launcher, it lacks "
            f"{end.get('missing')}. `check` runs Python launchers only in a sandbox the "
            "kernel enforces; to run this one anyway with in-process recorders only (which "
            "the launcher can get around), give --trust-launcher if you trust its code")


@dataclass
class Recorded:
    """A command the launcher tried to run (or a network/file action it tried), not run."""

    kind: str  # "subprocess", "os.system", "os.execv", "socket.connect", "shutil.rmtree"...
    command: str  # as one line
    source: tuple[str, int] | None  # the launcher's own file:line of the call


@dataclass
class PythonLaunch:
    """The training command a Python launcher issues, as `check` reads it."""

    path: str
    argv: list[str]  # the flags after train.py / train_async.py
    entry: str  # the train script as the command names it
    launcher: str  # "python", "torchrun" or "ray job submit"
    source: tuple[str, int] | None  # the launcher's file:line of the call that issued it
    # what the launch sets in the entry's environment beyond the one the launcher ran with;
    # under ray job submit, its runtime env (the entrypoint inherits nothing else from it)
    env: dict[str, str] = field(default_factory=dict)
    others: list[Recorded] = field(default_factory=list)  # everything else it tried
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    env_known: bool = True  # False: the runtime env of its ray job submit is not literal
    command: str | None = None  # the typer command it was run with, when one was named
    index: int = 0  # which launch of the run (0: the first)
    unknowns: dict = field(default_factory=dict)  # marker id -> {"what", "source"}
    assumed: list[str] = field(default_factory=list)  # branches on stand-in values
    probes: list[dict] = field(default_factory=list)  # captured commands, how answered
    # servers its commands were started to serve, answered in the sandbox (servers.py):
    # {"server", "port", "node", "flag", "command", "source", "polls"}
    servers: list[dict] = field(default_factory=list)
    # flag -> (file, line, column) of the literal that spells it (locate.py), where one does
    spelled: dict = field(default_factory=dict)
    world: tuple[int, int] | None = None  # torchrun's (nnodes, nproc_per_node)
    # the YAML files its flags name in the sandbox's work folder, as the child read them
    # when the launch was recorded: path -> {"text": ...} or {"why": records.UNREAD key}
    files: dict = field(default_factory=dict)
    sourced: list[str] = field(default_factory=list)  # files its shell string sources first


MAX_LAUNCHES = 200  # launches checked per launcher file (a report entry each)


def capped_note(n: int) -> str:
    return (f"it launches training {n} times or more; only the first {MAX_LAUNCHES} are "
            "checked (the most `check` reads of one launcher)")


def source_of(src) -> tuple[str, int] | None:
    return (src[0], int(src[1])) if src else None


def interpret(path, records, err, status, child_env, timeout_s, memory_mb, seconds, end,
               every: bool = False) -> list[PythonLaunch]:
    calls = [r for r in records if "kind" in r]
    _mark_ran(records)
    found, others, launches = _split(calls, child_env, every)
    name = os.path.basename(path)
    notes = []
    # [launchers hook] modules the launcher's own code imports that are not installed here
    absent = list(dict.fromkeys(r["missing_module"] for r in records if "missing_module" in r))
    notes += [f"it imports {m}, which is not installed here: a recording stand-in answered it"
              for m in absent[:MAX_NOTES]]
    cut = next((r["cut"] for r in records if "cut" in r), 0)
    if cut:
        notes.append(f"it recorded more than {records_mod.ACTIONS_MAX} actions; the "
                     f"{cut} after them are not read (the most `check` reads of one run)")
    quiet_end = end is not None and (end["end"] == "ok" or end["end"] == "exit" and
                                     end.get("code") in (None, 0))
    if found is None and absent and quiet_end and not any(_runs(r["kind"]) for r in calls):
        # it ran nothing: what it would run went through the absent module
        raise InputError(f"{name} imports {absent[0]}, which is not installed here: pip install "
                         f"{PIP_NAMES.get(absent[0], absent[0])} (or put it on PYTHONPATH); a "
                         "recording stand-in answered it, and the launcher launched no "
                         f"training; {checkout.hint(absent[0])}")
    try:
        return _launches(path, found, launches, others, calls, records, notes, err, status,
                         child_env, timeout_s, memory_mb, seconds, every, end)
    except InputError as e:
        if not absent:
            raise
        raise type(e)(f"{e} (it also imports {', '.join(absent[:MAX_NOTES])}, not installed "
                      "here and answered by recording stand-ins)") from None


def _mark_ran(records: list[dict]) -> None:
    """Each action that runs a program carries the lines of the user's code run before it
    (`_ran`, for locate.py)."""
    ran: dict[str, set[int]] = {}
    for r in records:
        if r.get("ran"):
            ran.setdefault(r["ran"][0], set()).update(r["lines"])
        elif "kind" in r and _runs(r["kind"]):
            r["_ran"] = {f: set(lines) for f, lines in ran.items()}


def _split(calls: list[dict], child_env: dict, every: bool) -> tuple:
    """(the first training launch and its record or None, the other actions, each launch
    with its record and the actions recorded since the one before)."""
    found, others, launches, since = None, [], [], []
    for r in calls:
        env = r.get("env")
        if env is None:
            env = {k: v for k, v in {**child_env, **(r.get("env_changes") or {})}.items()
                   if v is not None}
        got = launch_of({**r, "env": env}) if _runs(r["kind"]) else None
        if got is not None:
            launches.append((got, r, since))
            since = []
        if got is not None and found is None:
            found = (got, r)
        elif got is None or not every:
            others.append(Recorded(r["kind"], shown(r), source_of(r.get("source"))))
            since.append(r)
    if launches:  # what follows the last launch is reported with it
        launches[-1][2].extend(since)
    return found, others, launches


MAX_NOTES = 32  # distinct notes of one kind (assumed values, absent modules) per launcher
# Characters of one free-form text a launcher recorded that every launch of it carries
# (assumed values, servers): the report stays linear in what was sent, not launches x text
NOTE_MAX = 300


def brief(text: str) -> str:
    return text if len(text) <= NOTE_MAX else f"{text[:NOTE_MAX]}... ({len(text)} characters)"


def _launches(path, found, launches, others, calls, records, notes, err, status, child_env,
              timeout_s, memory_mb, seconds, every, end) -> list[PythonLaunch]:
    _outcome(path, found, calls, notes, err, status, child_env, timeout_s, memory_mb, end)
    if found is None:
        ran = f"ran {len(calls)} command(s)" if calls else "ran no command"
        raise NoTrainingLaunch(f"{path}: no training launch: the launcher {ran}, none of them "
                         "starts train.py or train_async.py (python3, torchrun, or ray job "
                         "submit ... -- python3 train.py)")
    if len(launches) > 1 and not every:
        notes.append("it launches training more than once; the first launch is the one read")
    chosen = launches if every else launches[:1]
    if len(chosen) > MAX_LAUNCHES:
        chosen = chosen[:MAX_LAUNCHES]
        chosen[-1][2].append({"kind": "capped"})  # the others of the rest are not reported
        notes.append(capped_note(len(launches)))
    unknowns = {r["unknown"]: {"what": r["what"], "source": source_of(r.get("source"))}
                for r in records if "unknown" in r}
    assumed = list(dict.fromkeys(brief(f"{r['assumed']} taken as {r['as']}")
                                 for r in records if "assumed" in r))[:MAX_NOTES]
    servers = _servers(records)
    out = []
    for i, (launch, rec, since) in enumerate(chosen):
        env = {k: v for k, v in launch.env.items() if launch.launcher == "ray job submit"
               or child_env.get(k) != v}
        # each launch carries what was recorded since the one before it (all of it, for
        # the one launch read): the report stays linear in the launches
        mine = others if not every else [
            Recorded(r["kind"], shown(r), source_of(r.get("source"))) for r in since
            if r["kind"] != "capped"]
        probes = [_probe(r) for r in (calls if not every else since)
                  if r.get("captured") or r.get("answer") == "cluster"]
        marks = {n: unknowns[n] for n in _marks(launch.argv) if n in unknowns}
        out.append(PythonLaunch(path, launch.argv, launch.entry, launch.launcher,
                                source_of(rec.get("source")), env, mine, list(notes), seconds,
                                launch.env_known, None, i, marks, assumed, probes,
                                servers, locate(launch.argv, rec.get("_ran") or {}, path),
                                launch.world, _files(rec.get("files") or {}, rec.get("files_base"),
                                                           launch.argv),
                                launch.sourced))
    return out


def _files(files: dict, base: str | None, argv) -> dict:
    """The YAML files a launch carries, each with its text or why it was not read; by path,
    and by each relative name of `argv` (`--yaml-cfg cfg.yaml`) that is one of them from
    `base`, the folder the child found them from (records.py keeps it in the work folder)."""
    out = {k: {"why": records_mod.UNREAD[x["why"]]} if "why" in x else x
           for k, x in files.items()}
    for w in argv if base else ():
        for name in (w, w.partition("=")[2]) if isinstance(w, str) else ():
            full = os.path.normpath(os.path.join(base, name)) if name else None
            if full in files and not os.path.isabs(name):
                out[name] = {**out[full], "as": full}  # the file it names (sources.written_name)
    # an absolute name outside the work folder: the copy its write made in the work
    # folder's shadow (child._shadow: WORK/outside/PATH), which the child read instead
    shadows = {k[k.index(_OUTSIDE) + len(_OUTSIDE) - 1:]: k for k in files if _OUTSIDE in k}
    for w in argv:
        for name in (w, w.partition("=")[2]) if isinstance(w, str) else ():
            if name in shadows and name not in out:
                out[name] = {**out[shadows[name]], "as": shadows[name]}
    return out


_OUTSIDE = f"{os.sep}outside{os.sep}"


def _outcome(path, found, calls, notes, err, status, child_env, timeout_s, memory_mb, end
             ) -> None:
    """How the launcher's run ended: an InputError when it ended before a training launch
    was recorded, else a note saying how it ended after (in `notes`)."""
    if status in ("timeout", -signal.SIGXCPU):  # the wall clock, or RLIMIT_CPU
        if found is None:
            raise InputError(f"{path}: the launcher did not finish within {timeout_s:g} s and "
                             "recorded no training launch (an endless loop, or waiting for "
                             "something the sandbox never starts; the time of one input is "
                             "bounded by --timeout)")
        notes.append(f"the launcher was stopped after {timeout_s:g} s, after its training "
                     "launch was recorded")
    elif end is None:
        why = f"killed by signal {-status}" if isinstance(status, int) and status < 0 else \
            f"exited with status {status}"
        if found is None:
            raise InputError(f"{path}: the launcher was {why} before it launched training "
                             f"(memory limit {memory_mb} MiB, CPU limit {timeout_s:g} s)"
                             + last_words(err))
        notes.append(f"the launcher was {why} after its training launch was recorded")
    else:
        _ended(path, found, calls, notes, err, child_env, memory_mb, end)


def _ended(path, found, calls, notes, err, child_env, memory_mb, end: dict) -> None:
    """The child's own end record (`end`): refused, out of threads or memory, a module
    missing, an error, a wait, an exit."""
    if end["end"] == "refused":
        raise InputError(f"{path}: {refusal(end)}")
    elif end["end"] == "threads":
        raise InputError(f"{path}: {_THREADS}")
    elif end["end"] == "memory":
        if found is None:
            raise InputError(f"{path}: the launcher ran out of memory (limit {memory_mb} MiB) "
                             "before it launched training")
        notes.append(f"the launcher ran out of memory (limit {memory_mb} MiB) afterwards")
    elif end["end"] == "missing":
        pkg = (end.get("module") or "?").split(".")[0]
        raise InputError(f"{os.path.basename(path)} imports {pkg}, which is not installed "
                         f"here: pip install {PIP_NAMES.get(pkg, pkg)} (or put it on PYTHONPATH); "
                         + checkout.hint(pkg))
    elif end["end"] == "error":
        if found is None and end.get("sizes"):
            raise InputError(f"{path}: the launcher's check of the cluster it expects failed "
                             f"before it launched training: {_at(end)}; {_sizes(end['sizes'])}")
        if found is None:
            raise InputError(f"{path}: the launcher failed before it launched training: "
                             f"{_at(end)}{_limit(end)}{_hint(calls)}"
                             f"{_unset(end.get('error') or '', child_env, _at(end))}")
        notes.append(f"the launcher failed after its training launch: {_at(end)}")
    elif end["end"] == "waiting":
        if found is None:
            raise InputError(f"{path}: {_waiting(end)}")
        notes.append(f"the launcher was stopped after its training launch: {_waiting(end)}")
    elif end["end"] == "exit" and isinstance(end.get("code"), str) and found is None:
        raise InputError(f"{path}: the launcher stopped before it launched training: "
                         f"{_said(end['code'], child_env)}")
    elif end["end"] == "exit" and end.get("code") not in (None, 0):
        if found is None:
            gone = checkout.missing_in(err)  # typer prints the ImportError in a box, then exits
            raise InputError(f"{path}: the launcher exited with status {end['code']} before "
                             f"it launched training{last_words(err)}"
                             + (f"; {checkout.hint(gone)}" if gone else ""))
        notes.append(f"the launcher exited with status {end['code']} after its training "
                     "launch was recorded")


def _probe(r: dict) -> dict:
    return {"command": _probe_text(r), "answer": r.get("answer"), "node": r.get("node"),
            "source": source_of(r.get("source"))}


def _marks(argv: list[str]) -> list[int]:
    """The stand-in Unknowns a launch's words hold (standins.unknowns_in)."""
    from .standins import unknowns_in

    return [n for w in argv for n in unknowns_in(w)]


def _servers(records: list[dict]) -> list[dict]:
    """The modelled servers of a run, each with how often the launcher connected to it."""
    out = {(r["node"], r["port"]): {**{k: brief(v) if isinstance(v, str) else v
                                       for k, v in r.items()}, "polls": 0}
           for r in records if "server" in r and "kind" not in r}
    for r in records:
        if r.get("answer") == "server" and (r.get("node"), r.get("port")) in out:
            out[r["node"], r["port"]]["polls"] += 1
    return list(out.values())[:MAX_NOTES]  # each launch's report lists them


def _waiting(end: dict) -> str:
    """Why a launcher that polled the same thing again and again was stopped (servers.py)."""
    kind, what = (end.get("poll") or ["?", "?"])[:2]
    if kind == "connect":
        return (f"the launcher waits for a server at {what[0] if what else '?'}, which none of "
                f"its recorded commands serves (it connected {end.get('times')} times, "
                "refused each time; a server is modelled on the port its command is started "
                "with: --port, --rpc-port, a listen address, its own default, or for a command "
                "sent to the background the port polled next)")
    said = " ".join((end.get("answer") or "").split())[:80] or "nothing"
    nodes, gpus = (end.get("cluster") or ["?", "?"])[:2]
    return (f"the launcher waits for the cluster to change: it ran `{what[:160]}` "
            f"{end.get('times')} times, sleeping between, and the modelled cluster ({nodes} "
            f"node(s) x {gpus} GPUs) answered `{said}` each time; if it waits for more nodes "
            "or GPUs, model the cluster it expects with --nodes N --gpus-per-node N (and "
            "--gpu NAME)")


def _sizes(sizes: list[dict]) -> str:
    """Which of the launcher's options size the cluster it asserts, and how to pass them."""
    given = ", ".join(f"{s['flag']} ({s['value']!r})" for s in sizes)
    example = " ".join(f"{s['flag']} N" for s in sizes)
    return (f"it reads its options {given}: pass the ones the launch needs after `--` (e.g. "
            f"`-- {example}`), with --nodes/--gpus-per-node to model the same cluster")


def _said(message: str, child_env: dict) -> str:
    """A launcher's exit message, its first line, with the sandbox's HOME shown as ``~`` (a
    file it looked for there is not the user's), and the variables to give (`_unset`)."""
    home = child_env.get("HOME")
    first = next((x.strip() for x in message.splitlines() if x.strip()), message)
    if home:
        first = first.replace(home, "~")
    return f"{first}{_unset(message, child_env)}"


def _unset(message: str, child_env: dict, at: str = "") -> str:
    """The environment variables a launcher's message names that are not set, to give with
    --env (its API key: DAYTONA_API_KEY; any name, whatever its case, whose os.environ[NAME]
    raised the KeyError `at` that place: http_proxy)."""
    names = re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", message)
    if re.search(r"<frozen os>|[/\\]os\.py", at):
        names = re.findall(r"KeyError: '([A-Za-z_][A-Za-z0-9_]*)'", message) + names
    names = [n for n in dict.fromkeys(names) if n not in child_env]
    return f" (give {', '.join(f'--env {n}=...' for n in names)})" if names else ""


def _probe_text(r: dict) -> str:
    """A probe as its shell text (``bash -c TEXT`` is TEXT)."""
    argv = r.get("argv") or []
    if r.get("shell") is None and len(argv) == 3 and argv[1] in ("-c", "-lc"):
        return argv[2]
    return shown(r)


def _runs(kind: str) -> bool:
    """Whether a recorded call starts a program (the others touch files or the network)."""
    return kind in ("subprocess", "os.system") or kind.startswith(
        ("os.exec", "os.spawn", "os.posix_spawn"))


def _at(end: dict) -> str:
    where, inner = end.get("where"), end.get("inner")
    at = f"{where[0]}:{where[1]}: " if where else ""
    if inner:
        code = f": `{inner[3]}`" if inner[3] else ""  # a frozen module has no source line
        at += f"(in {inner[2]}, {inner[0]}:{inner[1]}{code}) "
    return f"{at}{end.get('error')}"


# what the sandbox's bounds look like from inside, as the launcher saw them fail
_LIMITS = {"[Errno 27]": "the sandbox bounds each file it writes, its output included, to "
                          "16 MiB",
           "[Errno 28]": "the sandbox's work folder holds 256 MiB",
           "[Errno 1]": "the sandbox refuses that: docs/sandbox.md",
           "[Errno 32]": "the sandbox bounds its output, stdout and stderr each, to 16 MiB",
           "[Errno 13]": "the sandbox reads only the launcher's checkout, its import path and "
                         "each --read PATH (a model folder): docs/sandbox.md",
           "can't start new thread": "the sandbox bounds memory, thread stacks included, and "
                                     "threads"}


def _limit(end: dict) -> str:
    """Name the sandbox's bound behind a failure, where it is one."""
    why = next((v for k, v in _LIMITS.items() if k in (end.get("error") or "")), None)
    return f" ({why})" if why else ""


def _hint(calls: list[dict]) -> str:
    """When a launcher fails on a command's output, say that the sandbox gave it none."""
    if not calls or not calls[-1].get("captured") or calls[-1].get("answer"):
        return ""  # [launchers hook] an answered probe's output was not empty
    last = calls[-1]
    return (f" (the sandbox runs no command: the last one, `{shown(last)[:120]}`, was "
            "answered with exit 0 and empty output; where the launcher can take that value "
            "from the environment, give it with --env KEY=VALUE)")


_BOX = "│╭╮╰╯─┃┏┓┗┛━ |"  # rich's (typer's) frames around an error: no text of their own


def stop_reason(out: str) -> str:
    """The line of a launcher's stdout that says why it stopped (see _read)."""
    lines = [x for x in out.splitlines() if x.strip()]
    said = [x for x in lines if re.search(r"\b(error|usage)\b", x, re.I)]
    return (said or lines or [""])[-1]


def last_words(err: str) -> str:
    lines = [x.strip(_BOX).strip() for x in err.splitlines()]
    lines = [x for x in lines if any(c.isalnum() for c in x)]
    return f": {lines[-1]}" if lines else ""
