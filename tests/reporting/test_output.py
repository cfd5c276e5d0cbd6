"""`check` prints like ruff: silent on clean inputs, a summary line, concise lines sorted by
file and line, --output-file, --exit-zero, stdin, and each result as its input finishes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from support import SCRIPTS

from miles_topology import cli
from miles_topology.cli import main
from miles_topology.judging.verdict import Verdict
from miles_topology.reporting import formats
from miles_topology.reporting.safetext import Sink

CLEAN = str(SCRIPTS / "run-qwen3-4B.sh")
BAD = str(SCRIPTS / "err-expert-grid.sh")
# two problems on two lines, the later line's written first in the argv
TWO = """#!/bin/bash
ARGS=(
   --lr 1e-6
   --tensor-model-paralel-size 2
)
python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
   --num-layers 4 --num-attention-heads 4 --sequence-parallel --lr 2e-6 "${ARGS[@]}"
"""


def test_a_clean_script_prints_one_line(capsys):
    assert main(["check", CLEAN]) == 0
    assert capsys.readouterr().out == "All checks passed: 1 input.\n"
    assert main(["check", "--quiet", CLEAN]) == 0
    assert capsys.readouterr().out == ""
    assert main(["check", "--verbose", CLEAN]) == 0
    out = capsys.readouterr().out
    assert f"{CLEAN}: OK" in out and "node 0" in out and "<-" in out  # values, sources, map


def test_concise_lines_sorted_by_file_and_line(tmp_path, capsys):
    (tmp_path / "b.sh").write_text(TWO)
    (tmp_path / "a.sh").write_text(TWO.replace("--lr 2e-6", "--lr 2e-6 --lr 3e-6"))
    assert main(["check", "--output-format", "concise", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    problems = [line for line in lines
                if re.match(r"^/.*:\d+:\d+: (error|warning|note|skipped) [a-z-]+ ", line)]
    keys = [(p.split(":")[0], int(p.split(":")[1]), int(p.split(":")[2])) for p in problems]
    assert keys == sorted(keys) and len({k[0] for k in keys}) == 2
    assert any(p.endswith("did you mean --tensor-model-parallel-size?") and
               ":4:4: error unknown-flag" in p for p in problems)
    assert lines[-1].startswith("Found 2 errors, ")


def test_output_file_and_exit_zero(tmp_path, capsys):
    report = tmp_path / "report.txt"
    assert main(["check", "--output-file", str(report), "--exit-zero", BAD]) == 0
    assert capsys.readouterr().out == ""
    assert "expert-grid-divisibility" in report.read_text()
    assert main(["check", "--exit-zero", str(tmp_path / "missing.sh")]) == 2  # not a finding
    assert main(["check", "-o", str(tmp_path / "no" / "such" / "dir.txt"), BAD]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_stdin_is_read_as_the_named_file(tmp_path, capsys, monkeypatch):
    """`check - --stdin-filename` reads an unsaved buffer: sourced files relative to the
    name's folder, directives in the text, and the name in every message."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sh").write_text("MODEL_ARGS=(--num-layers 4 "
                                              "--num-attention-heads 4)\n")
    text = ('#!/bin/bash\nSCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null'
            ' && pwd)"\nsource "${SCRIPT_DIR}/models/m.sh"\n'
            "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\\n"
            '   "${MODEL_ARGS[@]}" --expert-model-parallel-size 3 --num-experts 6\n')
    name = str(tmp_path / "run.sh")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["check", "-", "--stdin-filename", name, "--output-format", "concise"]) == 1
    out = capsys.readouterr().out
    assert f"{name}:5:" in out and "expert-grid-divisibility" in out and ".stdin-" not in out
    assert not list(tmp_path.glob(".*stdin*"))  # the staged copy is gone
    suppressed = text.replace("--num-experts 6", "--num-experts 6 # miles-topology: "
                              "disable=expert-grid-divisibility")
    monkeypatch.setattr("sys.stdin", io.StringIO(suppressed))
    assert main(["check", "-", "--stdin-filename", name]) == 0
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["check", "-", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["path"] == "-"
    assert main(["check", "-", CLEAN]) == 2
    assert main(["check", "-", "--fix"]) == 2
    assert "give the file itself" in capsys.readouterr().err


def test_results_stream_in_order_as_each_input_finishes(tmp_path, monkeypatch):
    """Each input's report is written before the next input is read: the events of the
    reader and the printer interleave (no timing involved)."""
    events: list[str] = []
    for n in "abc":
        (tmp_path / f"{n}.sh").write_text(TWO)

    def judge(path, env, py=None):
        events.append(f"read {Path(path).name}")
        return [Verdict(path, unreadable="stand-in")]

    class Stream(io.StringIO):
        def write(self, s):
            if s.strip():
                events.append(f"print {s.split(':')[0].rsplit('/', 1)[-1]}")
            return super().write(s)

    monkeypatch.setattr(cli, "_one", judge)
    monkeypatch.setattr(formats, "stream_for", lambda _: (Stream(), False))
    assert main(["check", "--output-format", "concise", "--quiet", str(tmp_path)]) == 2
    assert events == ["read a.sh", "print a.sh", "read b.sh", "print b.sh",
                      "read c.sh", "print c.sh"]


def test_progress_line_on_a_terminal_is_erased_before_results(monkeypatch):
    monkeypatch.setattr(formats, "PROGRESS_AFTER_S", 0.0)
    out, err = io.StringIO(), io.StringIO()
    p = formats.Printer("concise", out, progress=err, total=2)
    p.working("a.sh")
    p.add([Verdict("a.sh", unreadable="gone")])
    p.working("b.sh")
    p.close()
    assert err.getvalue() == "\r\033[K[1/2] checking a.sh\r\033[K\r\033[K[2/2] checking b.sh" \
                             "\r\033[K"
    quiet = formats.Printer("concise", io.StringIO(), progress=err, total=2)
    monkeypatch.setattr(formats, "PROGRESS_AFTER_S", 3600.0)
    quiet.working("a.sh")  # under a second: nothing
    assert err.getvalue().endswith("b.sh\r\033[K")


@pytest.mark.parametrize("fmt", ["text", "concise"])
def test_summary_counts(fmt, capsys):
    assert main(["check", "--output-format", fmt, CLEAN, BAD]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(r"Found \d+ errors?(, .*)? in 2 inputs; 1 invalid\.", last), last


def test_launchers_run_side_by_side_and_report_in_order(tmp_path, monkeypatch, capsys):
    """b.py finishes before a.py has (a waits for b); a's result still comes first."""
    import threading

    names = ["a.py", "b.py", "c.sh"]
    for n in names:  # the .py ones launchers by content (a batch skips other Python files)
        (tmp_path / n).write_text('if __name__ == "__main__":\n    U.execute_train("")\n'
                                  if n.endswith(".py") else "")
    b_done = threading.Event()
    waited = []

    def judge(path, env, py=None):
        name = Path(path).name
        if name == "a.py":
            waited.append(b_done.wait(timeout=60))
        if name == "b.py":
            b_done.set()
        return [Verdict(path, unreadable=name)]

    monkeypatch.setattr(cli, "_one", judge)
    monkeypatch.setattr(cli, "JOBS", 2)
    assert main(["check", "--output-format", "concise", "--quiet",
                 *(str(tmp_path / n) for n in names)]) == 2
    assert waited == [True]  # b ran while a was still running
    out = capsys.readouterr().out.splitlines()
    assert [Path(x.split(":")[0]).name for x in out] == names


def test_concise_is_one_line_a_problem_even_for_a_message_of_several():
    v = Verdict("run.py", unreadable="the launcher exited:\n  mkdir -p ~/.config && echo key\n")
    out = io.StringIO()
    formats.concise.Writer(Sink(out)).add(v)
    assert out.getvalue() == "run.py:1:1: error unreadable the launcher exited: mkdir -p " \
                             "~/.config && echo key\n"


@pytest.mark.parametrize("error", [RecursionError("maximum recursion depth exceeded"),
                                   TypeError("'list' object cannot be interpreted")])
def test_an_internal_error_is_that_inputs_verdict_and_the_batch_goes_on(
        tmp_path, monkeypatch, capsys, error):
    """A bug of ours on one input (issue 33 item 6): that input's internal-error verdict,
    exit 2, unsuppressible; the inputs after it are still judged and printed."""
    from miles_topology.judging import check_script

    real = check_script.check_script

    def judge(path, *args, **kw):
        if Path(path).name == "a.sh":
            raise error
        return real(path, *args, **kw)

    monkeypatch.setattr(check_script, "check_script", judge)
    (tmp_path / "a.sh").write_text("# miles-topology: disable-file=all\n" +
                                   Path(BAD).read_text())
    (tmp_path / "b.sh").write_text(Path(BAD).read_text())
    (tmp_path / "c.sh").write_text(Path(CLEAN).read_text())
    args = [str(tmp_path / n) for n in ("a.sh", "b.sh", "c.sh")]
    assert main(["check", "--format", "json", "--ignore", "internal-error", *args]) == 2
    got = json.loads(capsys.readouterr().out)
    assert got[0]["internal_error"] and type(error).__name__ in got[0]["unreadable"]
    assert [v["ok"] for v in got] == [False, False, True]  # b and c judged as ever
    assert got[1]["errors"][0]["code"] == "expert-grid-divisibility"
    assert main(["check", "--format", "concise", "--exit-zero", *args]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{args[0]}:1:1: error internal-error internal error: ")
    assert "expert-grid-divisibility" in out[1]
    assert out[-1] == "Found 1 error, 1 internal error in 3 inputs; 1 invalid."
    assert main(["check", "--format", "sarif", *args]) == 2
    results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    assert results[0]["ruleId"] == "internal-error"
    assert main(["check", args[0]]) == 2  # one input alone: its verdict too
    assert "INTERNAL ERROR: internal error: " in capsys.readouterr().out
    monkeypatch.setenv("MILES_TOPOLOGY_DEBUG", "1")
    with pytest.raises(type(error)):
        main(["check", *args])


def test_the_column_is_the_readers_own_not_searched_again(tmp_path, capsys, monkeypatch):
    """The bash reader knows where the flag word is (Location.column): a line that spells
    the flag earlier (an echo before the launch) is no longer searched for it, and the file
    is not opened again to find it."""
    from miles_topology.judging import verdict

    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\necho --expert-model-parallel-size; python3 train.py "
                      "--actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate "
                      "--num-layers 4 --num-experts 16 --expert-model-parallel-size 16\n")
    monkeypatch.setattr(verdict, "_lines_of", lambda path: pytest.fail(f"re-read {path}"))
    assert main(["check", "--format", "concise", str(script)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "expert-grid" in x)
    text = script.read_text().splitlines()[1]
    assert line.startswith(f"{script}:2:{text.rindex('--expert-model-parallel-size') + 1}: ")


def test_a_launch_is_located_by_its_location_not_a_string_parsed_back():
    from miles_topology.judging.verdict import name
    from miles_topology.model.errors import Location

    v = Verdict("a:b.py", site=Location("a:b.py", 57))
    v.extra = {"launch": {"index": 1, "of": 2, "command": None, "source": "a:b.py:57"}}
    assert name(v) == "a:b.py [launch 2 of 2, line 57]"
    assert v.launch_note().location == Location("a:b.py", 57)
