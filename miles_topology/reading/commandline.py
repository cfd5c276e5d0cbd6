"""How a command line starts a training program: python SCRIPT / -m MODULE, torchrun, ray job
submit, `bash -c`, behind wrappers (exec, nohup, env, timeout, sudo, ...).

The one rule of command forms for bash scripts (shell/) and Python launchers (pylaunch/):
both readers give words, this tells which word is the entry and what runs it. It imports
nothing of the core, so both readers stand on it without reaching each other.
"""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

_PY = re.compile(r"python(?:[0-9](?:\.[0-9]+)?)?$")
ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")  # NAME=value before a command
_SHELLS = frozenset(("bash", "sh", "zsh", "dash"))
# words that run the rest of the line as a command -> their options that take a value
_PREFIX = {
    "exec": {"-a"}, "nohup": set(), "time": {"-f", "-o"}, "command": set(), "builtin": set(),
    "nice": {"-n"}, "env": {"-u", "--unset", "-C", "--chdir", "-S"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"}, "sudo": {"-u", "-g", "-C"},
    "stdbuf": {"-i", "-o", "-e"}, "setsid": set(),
}
# launchers that run the rest of the line as a command on other nodes, for the command's
# form only (a file they name is another machine's: shell/containers.py reads srun's
# container mounts by the same table): SLURM's srun runs it on each task (srun(1)). Its
# options that take a value as the next word: those of SchedMD/slurm src/common/slurm_opt.c
# (284c3b95f0) with `.has_arg = required_argument` that srun sets (`set_func` or
# `set_func_srun`), and pyxis' --container-* ones (NVIDIA/pyxis, a SPANK plugin); an option
# whose value is optional takes it only after `=` (getopt_long), so it reads as a switch, as
# does any option not listed
SRUN_SHORT = "ABCDFGJLMNSTWbcdeimnopqrtwx"  # its short options that take a value
SRUN_VALUED = frozenset((
    *(f"-{c}" for c in SRUN_SHORT),
    "--accel-bind", "--account", "--acctg-freq", "--autocomplete", "--bb", "--bbf",
    "--bcast-exclude", "--begin", "--chdir", "--cluster", "--cluster-constraint", "--clusters",
    "--comment", "--constraint", "--container", "--container-id", "--context", "--core-spec",
    "--cores-per-socket", "--cpu-bind", "--cpu-freq", "--cpu_bind", "--cpus-per-gpu",
    "--cpus-per-task", "--deadline", "--delay-boot", "--dependency", "--distribution",
    "--epilog", "--error", "--exclude", "--export", "--extra", "--extra-node-info",
    "--gpu-bind", "--gpu-freq", "--gpus", "--gpus-per-node", "--gpus-per-socket",
    "--gpus-per-task", "--gres", "--gres-flags", "--het-group", "--hint", "--ignore-signals",
    "--input", "--job-name", "--jobid", "--licenses", "--mail-type", "--mail-user",
    "--mcs-label", "--mem", "--mem-bind", "--mem-per-cpu", "--mem-per-gpu", "--mem-update",
    "--mincpus", "--mpi", "--msg-timeout", "--network", "--nodefile", "--nodelist", "--nodes",
    "--ntasks", "--ntasks-per-core", "--ntasks-per-gpu", "--ntasks-per-node",
    "--ntasks-per-socket", "--ntasks-per-tres", "--open-mode", "--output", "--pack-group",
    "--partition", "--prefer", "--priority", "--profile", "--prolog", "--qos", "--relative",
    "--reservation", "--resources", "--runtime", "--segment", "--signal", "--slurmd-debug",
    "--sockets-per-node", "--switches", "--task-epilog", "--task-prolog", "--tasks-per-node",
    "--thread-spec", "--threads", "--threads-per-core", "--time", "--time-min", "--tmp",
    "--treewidth", "--tres-bind", "--tres-per-task", "--wait", "--wckey", "--container-image",
    "--container-mounts", "--container-workdir", "--container-name", "--container-save",
    "--container-env"))
_RUNNERS = {"srun": SRUN_VALUED}
_SHELL_VALUED = frozenset(("-o", "+o", "-O", "+O", "--rcfile", "--init-file"))
_TORCHRUN_SWITCHES = frozenset(("--standalone", "--no-python", "--no_python", "--run-path",
                                "--run_path", "--module", "-m"))
# miles' entries at the checkout's root; train_multi_lora_async.py parses the same arguments
# (miles.utils.arguments.parse_args), examples/multi_lora/run_multi_lora.py launches it
TRAIN_FILES = frozenset(("train.py", "train_async.py", "train_multi_lora_async.py"))
TRAIN_MODULES = frozenset(("train", "train_async", "train_multi_lora_async"))


def is_training(entry: str) -> bool:
    """A training entry: train.py / train_async.py (`TRAIN_FILES`) in any folder, or a module
    such as miles.train (the one rule for bash scripts and Python launchers alike)."""
    if entry.endswith(".py"):
        return os.path.basename(entry) in TRAIN_FILES
    return "/" not in entry and "." in entry and entry.rsplit(".", 1)[1] in TRAIN_MODULES


class Form(NamedTuple):
    """How one simple command starts a program, read from its words alone."""

    launcher: str  # "python3", "torchrun", "python -m torch.distributed.run", "ray job submit"
    entry: int  # index of the script, module, or (shell) the command string
    job: tuple[int, int] | None = None  # ray job submit: range of its own option words
    env: dict[str, str] = {}  # NAME=value words before the command, and `env NAME=value`
    shell: bool = False  # `bash -c STRING`: the entry word is a shell string to read


def command_form(vals: list[str | None]) -> Form | None:
    """The program a simple command starts: python SCRIPT / -m MODULE, torchrun (also
    ``python -m torch.distributed.run``), ``ray job submit [OPTS] [--] <one of those>``, or
    ``bash -c STRING``, behind wrappers (exec, nohup, env, timeout, sudo, ...). The one rule
    of command forms for bash scripts and Python launchers alike; None values are words
    not known here."""
    env: dict[str, str] = {}
    k = _skip_wrappers(vals, 0, env, runners=True)
    if k >= len(vals) or vals[k] is None:
        return None
    base = os.path.basename(vals[k])
    if base == "ray":
        if vals[k + 1:k + 3] != ["job", "submit"]:
            return None
        rest = vals[k + 3:]
        cut = k + 3 + rest.index("--") if "--" in rest else None
        for j in range((cut + 1) if cut is not None else k + 3, len(vals)):
            inner = command_form(vals[j:])  # the entrypoint: the first word that starts one
            if inner is not None and inner.job is None:
                return Form("ray job submit", j + inner.entry,
                            (k + 3, cut if cut is not None else j), inner.env, inner.shell)
        return None
    if base in _SHELLS and (i := _shell_string(vals, k)) is not None:
        return Form(base + " -c", i, None, env, True)
    got = _entry(vals, k)
    return Form(got[0], got[1], None, env) if got else None


def reads_stdin_script(vals: list[str | None]) -> bool:
    """Whether a command runs a shell that reads its script from standard input: ``bash``,
    ``bash -s``, ``sh -ex`` as the last program of the words (also ``docker run ... IMAGE
    bash -s``, ``ssh HOST bash``), with options only after it and no ``-c``."""
    for k in range(len(vals) - 1, -1, -1):
        v = vals[k]
        if v is None:
            return False
        if os.path.basename(v) in _SHELLS:
            rest = vals[k + 1:]
            return all(r is not None and r.startswith("-") and r != "--" and
                       not (r[1:2] != "-" and "c" in r[1:]) for r in rest)
        if not v.startswith("-"):
            return False
    return False


def _shell_string(vals: list[str | None], k: int) -> int | None:
    """Index of STRING in ``bash [OPTIONS] -c STRING [NAME ARGS...]``: -c alone or in a
    cluster (``bash -lc``, ``sh -ec``), the command string the first word after the options
    (bash(1): "commands are read from the first non-option argument"); None without -c,
    or when a word before -c is not known."""
    c, j = False, k + 1
    while j < len(vals):
        v = vals[j]
        if v is None:  # after -c: the string, not known here; before it: maybe an option
            return j if c else None
        if v in ("--", "-"):
            j += 1
            break
        if v in _SHELL_VALUED:
            j += 2
        elif len(v) > 1 and v[0] in "-+":
            c = c or (v[0] == "-" and v[1] != "-" and "c" in v[1:])
            j += 1
        else:
            break
    return j if c and j < len(vals) else None


def wrapped_shell(vals: list[str | None]) -> int | None:
    """Index of the shell that runs a script behind wrappers (``nohup bash run.sh``,
    ``timeout 3h bash run.sh``), None when no wrapper precedes a shell."""
    k = _skip_wrappers(vals, 0, {})
    if 0 < k < len(vals) and vals[k] is not None and os.path.basename(vals[k]) in _SHELLS:
        return k
    return None


def _skip_wrappers(vals: list[str | None], k: int, env: dict[str, str],
                   runners: bool = False) -> int:
    """Index of the first word after leading assignments and wrapper commands (`runners`:
    also srun, `_RUNNERS`)."""
    while k < len(vals):
        v = vals[k]
        if v is None:
            return k
        if ASSIGN.match(v):
            name, _, value = v.partition("=")
            env[name] = value
            k += 1
        elif (b := os.path.basename(v)) in _PREFIX or runners and b in _RUNNERS:
            opts = _PREFIX[b] if b in _PREFIX else _RUNNERS[b]
            k += 1
            while k < len(vals) and vals[k] is not None and vals[k].startswith("-"):
                k += 2 if vals[k] in opts else 1
            if v == "timeout":
                k += 1  # its duration
        else:
            return k
    return k


def runtime_env(opts: list[str | None]) -> dict[str, str] | None:
    """env_vars of `ray job submit`'s options: the only environment, beyond the cluster's
    own, that the job's entrypoint gets (ray dashboard/modules/job/cli.py submit:
    --runtime-env FILE, --runtime-env-json JSON). `opts`: the value of each word before
    `--`, None when unknown. {} with no runtime env; None when it is not written
    literally (an unknown word that may hold it, `--runtime-env FILE`) or is not JSON."""
    env: dict[str, str] = {}
    for i, w in enumerate(opts):
        prev = opts[i - 1] if i else None
        if w is None:
            if prev and prev.startswith("-") and "=" not in prev \
                    and not prev.startswith("--runtime-env"):
                continue  # the unknown value of another option (--address $ADDR)
            return None
        if w == "--runtime-env" or w.startswith("--runtime-env="):
            return None  # a YAML file: not read here
        got = w.partition("=")[2] if w.startswith("--runtime-env-json=") else \
            (opts[i + 1] if w == "--runtime-env-json" and i + 1 < len(opts) else False)
        if got is False:
            continue
        try:
            env = {str(k): str(v) for k, v in (json.loads(got).get("env_vars") or {}).items()}
        except (TypeError, ValueError, AttributeError):
            return None
    return env


def _entry(vals: list[str | None], k: int) -> tuple[str, int] | None:
    """(launcher, entry index) when vals[k] starts a python or torchrun launch."""
    base = os.path.basename(vals[k])
    if _PY.match(base):
        i = k + 1
        while i < len(vals):
            v = vals[i]
            if v is None or v in ("-c", "-"):  # a program given inline or on stdin; the
                return None  # words after it are its arguments (python(1))
            if v == "-m" and i + 1 < len(vals) and vals[i + 1] is not None:
                mod = vals[i + 1]
                if mod in ("torch.distributed.run", "torch.distributed.launch"):
                    return _torchrun(vals, i + 2, f"{base} -m {mod}")
                return base, i + 1
            if v in ("-X", "-W", "-Q"):
                i += 2
            elif v.startswith("-"):
                i += 1
            else:
                return base, i
        return None
    if base == "torchrun":
        return _torchrun(vals, k + 1, "torchrun")
    return None


def _torchrun(vals: list[str | None], i: int, launcher: str) -> tuple[str, int] | None:
    """Skip torchrun's own options (``--opt value``, ``--opt=value``, switches)."""
    while i < len(vals):
        v = vals[i]
        if v is None:
            return None
        if v.startswith("-"):
            i += 1 if ("=" in v or v in _TORCHRUN_SWITCHES) else 2
        else:
            return launcher, i
    return None


def torchrun_world(words: list[str | None]) -> tuple[int, int] | None:
    """(nnodes, nproc_per_node) of torchrun's options in `words` (its defaults 1 and 1;
    torch/distributed/run.py), or None when one is not a plain number here (an unknown word,
    an elastic ``--nnodes 1:4``, ``--nproc-per-node gpu``)."""
    got = {"nnodes": "1", "nproc_per_node": "1"}
    for i, w in enumerate(words):
        if w is None:
            continue
        name, eq, value = w.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if key in got and name.startswith("--"):
            got[key] = value if eq else (words[i + 1] if i + 1 < len(words) else None)
    try:
        return int(got["nnodes"]), int(got["nproc_per_node"])
    except (TypeError, ValueError):
        return None
