"""`read_script`: a launch script read statically into the flags its training launch gets."""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..model.errors import Location, NoTrainingLaunch
from ..pylaunch import brief
from .findings import MAX_KEPT
from .interpret import Reader
from .launch import TRAIN_FILES, argv_of
from .records import FlagValue, ScriptRead, ScriptReadError, Unresolved, note


def read_script(path: str | Path, env: Mapping[str, str] | None = None,
                text: str | None = None, positional: Sequence[str] | None = None,
                cluster=None) -> ScriptRead:
    """Read a launch script statically: the flags after its entry script, with sources.

    `text`, when given, is read as the script's content in place of the file's (a rewrite
    checks its result this way before writing it); files it sources are read from disk.
    `positional` are the script's arguments ($1 ...; ``check SCRIPT.sh -- ARGS``); without
    them ``--env 1=VALUE`` gives some, else they are unknown. `cluster` (pylaunch's
    Cluster) answers the script's GPU probes (``nvidia-smi``, ``rocm-smi``); without it they
    stay unknown.
    Only a training launch counts (see launch.py); other commands found are listed in
    `others`, and `entry` is None when there is no training launch.
    """
    r = Reader(Path(path), env or {}, positional)
    r.w.subs.cluster = cluster
    r.files.text = text
    abs_path = r.at.main_abs
    if text is None and not os.path.isfile(abs_path):
        raise ScriptReadError(f"{path}:0: no such file. Fix: check the script path.")
    # The read makes many small acyclic objects; the cyclic collector's passes over them
    # would make a long script quadratic (10^5 appends: 22 s instead of 2 s). It runs again
    # once the read is done, when the temporary objects are gone.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _read(r, path)
    finally:
        if collecting:
            gc.enable()


_DRIVER = re.compile(r"[ /](train_\w+\.py)$")  # "LAUNCHER ENTRY" of a found launch


def read_sourced(files: Sequence[str], words: str) -> ScriptRead:
    """What ``python3 train.py WORDS`` gets after ``source FILE`` of each file, read as bash
    would (nothing runs): a model file's MODEL_ARGS for `plan`, the arrays a launcher's shell
    string sources before its launch for `check`. The files are read under the caller's gate
    (gate.py); the script that sources them is ours, in a temporary folder the gate admits."""
    import shlex
    import tempfile

    from ..reading import gate

    text = "".join(f"source {shlex.quote(f)}\n" for f in files)
    with tempfile.TemporaryDirectory() as tmp:
        launch = os.path.join(tmp, "launch.sh")
        with open(launch, "w") as f:
            f.write(f"{text}python3 train.py {words}\n")
        with gate.also(tmp):
            return read_script(launch, {})


def require_launch(found: ScriptRead) -> ScriptRead:
    """`found`, or NoTrainingLaunch (exit 2) when it launches no training job."""
    if found.entry is not None and found.site is not None:
        return found
    instead = "; found instead: " + ", ".join(f"{what} at {src}" for src, what in
                                              found.others) if found.others else ""
    why = " A converter, server or wrapper is not a training job: check the script that " \
        "starts train.py" if found.others else " A program named only by a variable the " \
        "environment sets (\"$PYTHON\" train.py) is not known here: pass it with --env " \
        "NAME=VALUE, or check the script that starts train.py"
    drivers = sorted({m[1] for _, w in found.others if (m := _DRIVER.search(w))})
    if drivers:  # a fork's own train_*.py (slime-n's train_multi_policy.py)
        known = ", ".join(sorted(TRAIN_FILES))
        why = f" {', '.join(drivers)} is not an entry known here ({known}): a fork's own " \
            "training driver, whose arguments and layout are not checked"
    if found.hidden:  # python3 "$ENTRY", srun bash -c '...'"$N"'...': not known here
        at, reason = found.hidden[0]
        why = f" The command at {at} may launch training, but what it runs is not known " \
            f"here: {brief(reason)}"
    if found.written:  # the launch is text another program runs (kubectl apply, sbatch)
        at, name = found.written[0]
        why = f" It writes a training launch into {name} at {at} (a here-document), which " \
            "this script does not run itself: check the command that file holds where it runs"
    if found.contained:  # docker exec CONTAINER bash /root/slime/scripts/run.sh
        why = f" {found.contained[0][1]}: check the script that path holds by its own name " \
            "(its copy in this checkout), or mount its folder by the command (-v HOST:DIR, " \
            "--bind HOST:DIR; --env NAME=VALUE for a word known only at run time)"
    raise NoTrainingLaunch(
        f"{found.path}: no training launch found (python3 train.py, train_async.py, torchrun, "
        f"or ray job submit ... -- python3 train.py){instead}.{why}")


def _read(r: Reader, path: str | Path) -> ScriptRead:
    r.run_main()
    res = r.found
    unresolved = list(res.unresolved)
    notes = list(res.notes)
    pool = [x for x in res.launches if x.training]
    others = [(x.src, f"{x.launcher} {x.entry}") for x in res.launches  # known: not training
              if not x.training and not x.unknown]
    launch = pool[-1] if pool else None
    argv: list[FlagValue] = []
    gaps: list[int] = []
    if launch is None:
        found = "; found instead: " + ", ".join(f"{w} at {s}" for s, w in others) \
            if others else ""
        notes.append(note("no-launch-command", "no training launch ('python ... train.py', "
                          "'train_async.py', 'torchrun ... train.py' or 'ray job submit ... -- "
                          f"python ... train.py') was found{found}",
                          "check that the launch command is not inside a function that is "
                          "never called", Location(str(path), 1)))
    elif launch.argv is None:  # its words were dropped (MAX_KEPT) in a loop undone
        raise ScriptReadError(f"{launch.src}: the launch read is one of more than "
                              f"{MAX_KEPT} launch commands run in a loop; its words were not kept. "
                              "Fix: launch once, after the loop.")
    else:
        argv = argv_of(launch.argv, unresolved, r.prov.span, gaps)
        if "torch" in launch.launcher and launch.world is None and not {
                fv.flag for fv in argv} & {"--actor-num-nodes", "--actor-num-gpus-per-node"}:
            # the actor's shape is torchrun's world (judging.check_script.torchrun_actor)
            unresolved.append(Unresolved(
                "--actor-num-gpus-per-node", f"{launch.launcher} --nnodes/--nproc-per-node",
                launch.src, "torchrun's world (--nnodes x --nproc-per-node) is only known "
                "when the script runs"))
        if len(pool) > 1:
            shown = ", ".join(str(x.src) for x in pool[:-1])
            said = f"{len(pool)} launch commands found ({shown} and {launch.src}); the last " \
                f"one, at {launch.src}, is read"
            if all(x.src == launch.src for x in pool):  # a function or loop runs it again
                said = f"the launch command at {launch.src} runs {len(pool)} times (a " \
                    "function or a loop runs it again); its last run is read"
            notes.append(note("several-launch-commands", said,
                              "keep one launch command per script", launch.src))
        if launch.cond is not None:
            notes.append(note("conditional-launch", f"the launch command at {launch.src} runs "
                              f"only {launch.cond.why}", "pass --env to decide the branch",
                              launch.src))
    read = ScriptRead(str(path), launch.launcher if launch else None,
                      launch.entry if launch else None, argv, unresolved, notes,
                      launch.site if launch else None,
                      {k: frozenset(v) for k, v in res.uses.items()}, gaps, others,
                      launch.world if launch else None, _frameworks(res.machine),
                      list(res.written), list(res.contained), list(res.hidden) + [
                          (x.src, x.unknown) for x in res.launches if x.unknown and not x.training],
                      launch.box if launch else None)
    return read


def _frameworks(paths) -> tuple[str, ...]:
    """The one framework the sourced machine paths name by a folder (stack.entry_framework),
    else ()."""
    from ..reading.stack import entry_framework

    got = {entry_framework(p) for p in paths} - {None}
    return tuple(got) if len(got) == 1 else ()
