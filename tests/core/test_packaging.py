"""The wheel installs beside miles: `miles_topology` only, no torch needed, light import.

Offline: the wheel is built without build isolation (or taken from $MILES_TOPOLOGY_WHEEL,
as .ci/run does) and installed with --no-deps into a fresh venv that sees only the core
dependencies of this environment (a .pth file pointing at them), never torch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from support import ROOT

CORE = ("pydantic", "omegaconf", "tree-sitter", "tree-sitter-bash")  # pyproject dependencies
GOOD = ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
        "--expert-model-parallel-size", "2", "--num-experts", "8", "--colocate"]

CLEAN = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    given = os.environ.get("MILES_TOPOLOGY_WHEEL")
    if given:
        return Path(given)
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed here, so the wheel cannot be built offline")
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src")  # a clean copy: no stale build/ of the checkout
    for name in ("pyproject.toml", "README.md", "miles_topology"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "fixtures"))
        else:
            shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(src)], check=True, timeout=300,
                   capture_output=True)
    (found,) = out.glob("miles_topology-*.whl")
    return found


def test_wheel_holds_miles_topology_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"miles_topology", wheel.name.split("-py3")[0] + ".dist-info"}, top
    assert "miles_topology/migrations/runner.py" in names and "miles_topology/py.typed" in names
    subpackages = [d.name for d in (ROOT / "miles_topology").iterdir()
                   if (d / "__init__.py").exists()]
    assert "migrations" in subpackages
    for sub in subpackages:  # every subpackage of the checkout ships
        assert f"miles_topology/{sub}/__init__.py" in names, sub
    assert "miles_topology/shell/syntax.py" in names  # the script reader
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [x for x in meta.splitlines() if x.startswith("Requires-Dist:")]
    core = [x for x in requires if "extra ==" not in x]
    assert not any(h in x for x in core for h in ("torch", "megatron", "ray", "numpy")), core
    assert "Requires-Python: >=3.10" in meta
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt")))
    assert b"miles-topology = miles_topology.cli:run" in entry and b"miles-train" not in entry


def _site(env: Path) -> Path:
    (site,) = env.glob("lib/python*/site-packages")
    return site


@pytest.fixture(scope="module")
def env_with_miles(tmp_path_factory, wheel) -> tuple[Path, dict[str, str]]:
    """A venv with a stand-in `miles` package, the core dependencies, then our wheel."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True)
    site = _site(env)
    deps = tmp_path_factory.mktemp("deps")
    for src in _core_files():  # only the core dependencies of this environment, never torch
        (deps / src.name).symlink_to(src)
    (site / "core_deps.pth").write_text(f"{deps}\n")
    stand_in = {"miles/__init__.py": "WHO = 'the real miles'\n",
                "miles/ray/__init__.py": "# placement of the real miles\n",
                "miles/rollout/__init__.py": "# rollout of the real miles\n"}
    for rel, text in stand_in.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    before = _digest(site / "miles")
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, timeout=300, env=CLEAN)
    assert _digest(site / "miles") == before  # the stand-in miles is untouched
    return env, before


def _core_files() -> set[Path]:
    """The top-level modules of the core dependencies and everything they require."""
    from importlib import metadata
    from re import match

    seen, todo, out = set(), list(CORE), set()
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(match(r"[A-Za-z0-9_.-]+", req).group())
        for f in dist.files or []:
            top = f.parts[0]
            if not top.endswith((".dist-info", ".data")) and top not in ("..", "__pycache__"):
                out.add(Path(dist.locate_file(top)))
    return out


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _py(env: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(env / "bin" / "python"), "-c", code], capture_output=True,
                          text=True, timeout=120, cwd=env, env=CLEAN)


def test_installs_beside_miles_and_checks_without_torch(env_with_miles):
    env, before = env_with_miles
    assert _digest(_site(env) / "miles") == before
    out = _py(env, "import miles; print(miles.WHO)")
    assert out.stdout.strip() == "the real miles", out.stderr
    assert _py(env, "import torch").returncode != 0  # no torch in this venv
    done = subprocess.run([str(env / "bin" / "miles-topology"), "check", "--", *GOOD],
                          capture_output=True, text=True, timeout=120, cwd=env, env=CLEAN)
    assert done.returncode == 0 and "All checks passed: 1 input." in done.stdout, done.stderr
    bad = subprocess.run([str(env / "bin" / "miles-topology"), "check", "--", *GOOD,
                          "--expert-model-parallel-size", "3"],
                         capture_output=True, text=True, timeout=120, cwd=env, env=CLEAN)
    assert bad.returncode == 1 and "experts-not-divisible-by-ep" in bad.stdout
    out = _py(env, "import miles_topology.migrations.runner as r, miles_topology as m; "
                   "print(len(r.STEPS), m.__file__)")
    steps, where = out.stdout.split()
    assert steps == "3" and where.startswith(str(_site(env))), out.stderr


def test_import_is_fast_there(env_with_miles):
    env, _ = env_with_miles
    # CPU time of the import (wall time on a loaded 2-core machine measures the neighbours)
    code = ("import time, sys; w, c = time.perf_counter(), time.process_time(); "
            "import miles_topology; print(time.process_time() - c, time.perf_counter() - w); "
            "assert not {'torch', 'ray', 'megatron', 'numpy'} & {m.split('.')[0] for m in "
            "sys.modules}")
    cpu, wall = [], []
    for _ in range(5):
        out = _py(env, code)
        assert out.returncode == 0, out.stderr
        c, w = map(float, out.stdout.split())
        cpu.append(c)
        wall.append(w)
    print(f"import miles_topology in a fresh venv: {min(cpu):.3f} s CPU, {min(wall):.3f} s "
          "wall (best of 5)")
    assert min(cpu) < 0.3, cpu


def _check_launcher(python: str, repo: Path, pythonpath: str) -> dict:
    got = subprocess.run([python, "-m", "miles_topology", "check", "--format", "json", "--env",
                          "MILES_SCRIPT_NUM_NODES=2", "scripts/run_qwen3_4b.py"],
                         capture_output=True, text=True, timeout=120, cwd=repo,
                         env={**CLEAN, "PYTHONPATH": pythonpath})
    assert got.returncode in (0, 1), got.stdout + got.stderr
    return json.loads(got.stdout)


def test_a_typer_launcher_is_checked_where_only_the_wheel_is(env_with_miles, tmp_path):
    """The wheel's venv has no typer: miles' dataclass CLI (MILES_SCRIPT_* bound) is answered
    by the stand-in, with the launch and topology the real typer gives (issue 36)."""
    from support import LAUNCHERS

    env, _ = env_with_miles
    python = str(env / "bin" / "python")
    assert _py(env, "import typer").returncode != 0  # not installed there
    repo = tmp_path / "miles"
    for part in ("miles", "scripts"):
        shutil.copytree(LAUNCHERS / "upstream" / part, repo / part)
    bare = _check_launcher(python, repo, str(repo))
    assert bare["topology"] and bare["topology"]["nodes"] == 2, bare
    assert not any("typer" in n for n in bare["notes"]), bare["notes"]
    pytest.importorskip("typer")
    real = _check_launcher(sys.executable, repo, os.pathsep.join((str(repo), str(ROOT))))
    assert bare["argv"] == real["argv"] and bare["topology"] == real["topology"]
    assert bare["errors"] == real["errors"]
