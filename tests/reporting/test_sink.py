"""Hostile text (in flag names, values, file names, comments, YAML keys, the gpu name of the
pull request's pyproject.toml) through every format x mode of the CLI: nothing hostile reaches
stdout, stderr or --output-file raw (the one sink, safetext.py)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from hostile import HOSTILE, NASTY, clean
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from miles_topology.cli import main

# a file can hold neither NUL nor a lone surrogate, a file name no "/"
WRITABLE = [h.replace("\x00", "") for h in HOSTILE if h != "\udc80"]
text = st.lists(st.sampled_from(WRITABLE), min_size=1, max_size=8).map("".join)
FORMATS = [[], ["--verbose"], ["--quiet"], ["--format", "concise"], ["--format", "json"],
           ["--format", "github"], ["--format", "sarif"], ["--diff"],
           ["--format", "json", "--verbose"]]


def quoted(s: str) -> str:
    """A TOML / YAML double-quoted string holding `s` exactly."""
    return '"' + "".join(c if " " <= c <= "~" and c not in '"\\' else f"\\U{ord(c):08x}"
                         for c in s) + '"'


def tree(root: Path, h: str) -> tuple[Path, Path]:
    """A pull request's folder: a script and a topology YAML named and filled with `h`."""
    name = h.replace("/", "")
    (root / "pyproject.toml").write_text(f"[tool.miles-topology]\ngpu = {quoted('G' + h)}\n")
    script = root / f"run{name}.sh"
    script.write_text(
        f"#!/bin/bash\n# {h.replace(chr(10), ' ')}\n"
        "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\\n"
        "   --rollout-num-gpus-per-node 8 --num-layers 4 --hidden-size 256 \\\n"
        f"   --num-attention-heads 4 --tensor-model-parallel-size 2 '--x{h}' 'v{h}' \\\n"
        f"   --num-layerz '{h}'\n")
    (root / f"mem{name}.sh").write_text(  # valid: a memory line naming the gpu
        "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\\n"
        "   --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 64\n")
    yaml = root / f"t{name}.topology.yaml"
    yaml.write_text(f"nodes: 1\ngpus_per_node: 8\ntp: 2\n{quoted(h)}: 1\n")
    return script, yaml


def run(capsys, *argv) -> tuple[str, str]:
    main([str(a) for a in argv])
    got = capsys.readouterr()
    return got.out, got.err


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(text)
@example(NASTY.replace("\x00", "").replace("\udc80", ""))
def test_hostile_text_never_reaches_the_output_raw(capsys, h):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script, yaml = tree(root, h)
        seen = ""
        for target in (script, yaml, root):
            for fmt in FORMATS:
                out, err = run(capsys, "check", "--color", "always", *fmt, target)
                clean(out, tabs="--diff" in fmt, crlf="--diff" in fmt,
                      commands="github" in fmt)
                clean(err)
                seen += out
            report = root / "report.txt"
            out, err = run(capsys, "check", target, "--verbose", "--output-file", report)
            clean(report.read_text() + out)
            clean(err)
        assert "--x" in seen and "memory: not estimated (GPU " in seen  # as reported
        for argv in (["show", script], ["show", yaml], ["migrate", script],
                     ["migrate", "--check", script], ["flags", yaml],
                     ["plan", "--nodes", "1", "--", f"--x{h}", "1"],
                     ["check", "--fix", "--verbose", script], ["migrate", "--write", script]):
            out, err = run(capsys, *argv)
            clean(out, tabs=True, crlf=True)  # migrate prints a diff
            clean(err)


def test_a_crlf_scripts_diff_applies(tmp_path, capsys):
    """--diff of a script with CRLF line ends keeps them: `patch` applies it."""
    script = tmp_path / "run.sh"
    script.write_bytes(b"#!/bin/bash\r\npython3 train.py --actor-num-nodes 1 "
                       b"--actor-num-gpus-per-node 8 --colocate --rollout-num-gpus-per-node 8"
                       b"\r\n")
    out, _ = run(capsys, "check", "--diff", script)
    assert "-python3" in out and "\r\n+python3" in out
    if shutil.which("patch"):
        subprocess.run(["patch", "-s", str(script)], input=out.encode().split(b"\n", 2)[2],
                       check=True)
        assert b"--num-gpus-per-node 8\r\n" in script.read_bytes()


def test_the_progress_line_and_a_stdin_name_are_escaped(monkeypatch, capsys):
    import io

    from miles_topology.judging.verdict import Verdict
    from miles_topology.reporting import formats

    h = NASTY.replace("\x00", "").replace("\udc80", "")
    monkeypatch.setattr(formats, "PROGRESS_AFTER_S", 0.0)
    out, err = io.StringIO(), io.StringIO()
    p = formats.Printer("text", out, progress=err, total=2, color=True)
    p.working(h)
    p.add([Verdict(h, unreadable=h)])
    p.close()
    clean(out.getvalue())
    clean(err.getvalue().replace("\r\x1b[K", ""))
    assert err.getvalue().startswith("\r\x1b[K[1/2] checking \\x1b[5;41m")
    monkeypatch.setattr("sys.stdin", io.StringIO(
        "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate "
        "--tensor-model-parallel-size 3 --num-attention-heads 4\n"))
    assert main(["check", "-", "--stdin-filename", f"/tmp/{h.replace('/', '')}.sh",
                 "--format", "concise"]) == 1
    got = capsys.readouterr()
    clean(got.out)
    clean(got.err)
    assert "heads-not-divisible-by-tp" in got.out
