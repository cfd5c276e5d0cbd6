"""Paths and the CLI runner every test module shares (imported by name: pytest puts tests/lib
on the path, see pyproject's [tool.pytest.ini_options])."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # this file is tests/lib/support.py
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
SCRIPTS = FIXTURES / "scripts"
LAUNCHERS = FIXTURES / "launchers"
STEP_FIXTURES = FIXTURES / "migrations"  # each migration step's before/after scripts
SCHEMAS = TESTS / "schemas"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """`miles-topology ARGV` in this process: (exit code, stdout, stderr)."""
    from miles_topology.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


_STAND_IN = """#!/bin/bash
# stand-in for {name}: a training launch prints its argv (one JSON line), anything else runs
LOG_ARGV='import json, os, sys
open(os.environ["ARGV_LOG"], "a").write(json.dumps(sys.argv[1:]) + "\\n")'
for a in "$@"; do
  case "$a" in
    train.py|*/train.py|train_async.py|*/train_async.py)
      exec {py} -c "$LOG_ARGV" "$@" ;;
  esac
done
{tail}
"""


def bash_launch(script: Path, args: list[str], tmp: Path, env: dict | None = None
                ) -> list[str]:
    """The argv after the entry script of the last training launch bash really runs. A
    command already in ``tmp/bin`` (a test's own stand-in) is kept; `env` is added."""
    bin_ = tmp / "bin"
    bin_.mkdir(exist_ok=True)
    for name, tail in (("python3", f'exec {sys.executable} "$@"'), ("python", 'exec python3 "$@"'),
                       ("ray", "exit 0")):
        p = bin_ / name
        if p.exists() and name not in ("python3", "python"):
            continue
        p.write_text(_STAND_IN.format(name=name, py=sys.executable, tail=tail))
        p.chmod(0o755)
    log = tmp / "argv.jsonl"
    log.write_text("")
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "ARGV_LOG": str(log), "HOME": str(tmp),
           **(env or {})}
    subprocess.run(["bash", str(script), *args], env=env, cwd=tmp, timeout=60,
                   capture_output=True)
    launches = [json.loads(x) for x in log.read_text().splitlines()]
    assert launches, f"{script.name}: bash ran no training launch"
    argv = launches[-1]
    k = next(i for i, a in enumerate(argv) if a.endswith(("train.py", "train_async.py")))
    return argv[k + 1:]


def flag_values(argv: list[str]) -> dict[str, str]:
    """flag -> value as the launch's argv gives it (the last one wins; "" for a switch)."""
    out: dict[str, str] = {}
    flag = None
    for word in argv:
        if word.startswith("--"):
            flag, eq, value = word.partition("=")
            out[flag] = value if eq else ""
            if eq:
                flag = None
        elif flag is not None:
            out[flag] = f"{out[flag]} {word}" if out[flag] else word
    return out


# the attacker's first step: clear the audit hook's tables and make every path "inside"
UNHOOK = """\
import os, posix, sys
_f = sys._getframe()
while _f is not None and "_NEVER" not in _f.f_globals:
    _f = _f.f_back
if _f is not None:
    for _k in ("_NEVER", "_PATHS", "_BLOCKED_IMPORTS"):
        _f.f_globals[_k].clear()
    _f.f_globals["inside"].__code__ = (lambda path: True).__code__
del _f


def attempt(what, f, *args, **kwargs):
    try:
        f(*args, **kwargs)
        print("DONE", what, flush=True)
    except OSError as e:
        print("FAILED", what, e.errno, flush=True)
"""


SLIME_MODEL = """\
MODEL_ARGS=(
   --swiglu
   --num-layers 36
   --hidden-size 2560
   --ffn-hidden-size 9728
   --num-attention-heads 32
   --group-query-attention
   --num-query-groups 8
   --vocab-size 151936
)
"""
SLIME_HEAD = """\
#!/bin/bash
set -euo pipefail
SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
SLIME_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
source "${SCRIPT_DIR}/models/qwen3-4B.sh"
"""


def slime_checkout(tmp_path, body: str, name: str = "run-qwen3-4B.sh"):
    """A slime-like checkout for scripts in the style of slime's scripts/run-*.sh: slime/
    with pyproject.toml, train.py, scripts/models/qwen3-4B.sh and scripts/NAME."""
    root = tmp_path / "slime"
    (root / "scripts" / "models").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'slime'\n")
    (root / "train.py").write_text("from slime.utils.arguments import parse_args\n")
    (root / "scripts" / "models" / "qwen3-4B.sh").write_text(SLIME_MODEL)
    run = root / "scripts" / name
    run.write_text(SLIME_HEAD + body)
    return run
