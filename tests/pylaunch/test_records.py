"""The parent's bounds on what a sandboxed launcher says (issue 30): its record stream is
untrusted input (records.py: schema, sizes, counts), its typer commands come from its syntax
tree capped at MAX_COMMANDS (typerapp.py). Unit tests feed records.RecordReader hostile lines; two
tiny launchers, aimed only at their pipes, flood the record and define 1,000 commands, and
the checker (a subprocess, its peak memory measured) stays bounded and says so in a note.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from support import UNHOOK

from miles_topology.pylaunch import read_python_launches, records, typerapp
from miles_topology.pylaunch.outcome import _servers
from miles_topology.pylaunch.records import RecordReader

LAUNCH = {"kind": "subprocess", "argv": ["python3", "train.py", "--colocate"]}


def parse(tmp_path, *recs, raw: bytes = b"") -> list[dict]:
    return RecordReader(str(tmp_path)).parse(b"".join(json.dumps(r).encode() + b"\n" for r in recs)
                                       + raw)


# ---------------------------------------------------------------- the schema, unit by unit


def test_over_long_strings_and_too_many_words_drop_the_record(tmp_path):
    long = "x" * (records.TEXT_MAX + 1)
    many = ["w"] * (records.WORDS_MAX + 1)
    assert parse(tmp_path, {**LAUNCH, "argv": ["python3", long]}) == []
    assert parse(tmp_path, {**LAUNCH, "argv": many}) == []
    assert parse(tmp_path, {**LAUNCH, "env": {f"K{i}": "v" for i in range(len(many))}}) == []
    # the control: at the bounds, each is kept as it came
    fits = ["python3", "x" * records.TEXT_MAX]
    assert parse(tmp_path, {**LAUNCH, "argv": fits})[0]["argv"] == fits
    assert len(parse(tmp_path, {**LAUNCH, "argv": many[1:]})[0]["argv"]) == records.WORDS_MAX


@pytest.mark.parametrize("bad", [
    {"argv": "python3 train.py"}, {"argv": ["python3", 3]}, {"port": "80"}, {"port": True},
    {"port": 1 << 70}, {"via_shell": 1}, {"env": ["A=1"]}, {"env": {"A": 1}}, {"cwd": 5}])
def test_wrong_types_drop_the_record(tmp_path, bad):
    assert parse(tmp_path, {**LAUNCH, **bad}) == []
    assert parse(tmp_path, LAUNCH) == [LAUNCH]  # the control


def test_unknown_keys_and_kinds_are_dropped(tmp_path):
    got = parse(tmp_path, {**LAUNCH, "verdict": "ok", "commands": ["a"] * 1000},
                {"commands": ["a"]}, {"cut": 0}, [1, 2], "text")
    assert got == [LAUNCH]


def test_deep_nesting_is_refused_without_a_crash(tmp_path):
    def nested(depth):
        return {"end": "error", "sizes": json.loads("[" * depth + "]" * depth)}

    assert parse(tmp_path, nested(records.JSON_DEPTH + 2)) == []
    # deeper than json.loads goes (RecursionError): the line is skipped, nothing raised
    deep = b'{"end": "ok", "sizes": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"
    assert parse(tmp_path, LAUNCH, raw=deep) == [LAUNCH]
    wide = {"end": "error", "sizes": [0] * (records.JSON_MAX + 1)}
    assert parse(tmp_path, wide) == []
    ok = nested(records.JSON_DEPTH)  # the control: as deep as allowed
    assert parse(tmp_path, ok) == [ok]


def test_a_servers_node_is_a_number(tmp_path):
    """A forged server on node [1] made `_servers` fail (a list cannot be a dict key)."""
    server = {"server": "s", "port": 1, "node": [1], "command": "x"}
    assert _servers(parse(tmp_path, server)) == []
    got = _servers(parse(tmp_path, {**server, "node": 0}))  # the control
    assert [(s["server"], s["node"], s["polls"]) for s in got] == [("s", 0, 0)]
    many = [{**server, "node": 0, "port": p} for p in range(1000)]
    assert len(_servers(parse(tmp_path, *many))) == 32  # every launch's report lists them


def test_non_utf8_and_lone_surrogates_stay_printable(tmp_path):
    raw = (b'{"kind": "subprocess", "argv": ["python3", "train.py", "--x", "\xff\xfe"]}\n'
           b'{"kind": "subprocess", "argv": ["python3", "train.py", "--y", "\\ud800"]}\n')
    got = RecordReader(str(tmp_path)).parse(raw)
    assert [r["argv"][-1] for r in got] == ["\ufffd\ufffd", "\\ud800"]
    for r in got:
        json.dumps(r, ensure_ascii=False).encode()  # a lone surrogate would raise here
    assert "\ud800".encode(errors="surrogatepass")  # the control: it is a real code point


def test_the_record_is_bounded_in_bytes_lines_and_actions(tmp_path):
    reader = RecordReader(str(tmp_path))
    huge = b'{"end": "error", "sizes": [' + b"{}, " * (records.BYTES_MAX // 4) + b"{}]}\n"
    assert reader.parse(huge + json.dumps(LAUNCH).encode()) == [LAUNCH]
    line = json.dumps({"kind": "a"}).encode() + b"\n"
    n = records.ACTIONS_MAX + 5000
    t0 = time.perf_counter()
    got = reader.parse(line * n + b'{"end": "exit", "code": 3}\n')
    assert time.perf_counter() - t0 < 5
    assert len(got) == records.ACTIONS_MAX + 2 and got[-2:] == [
        {"end": "exit", "code": 3}, {"cut": 5000}]  # the end is still read
    assert reader.parse(line * 10) == [{"kind": "a"}] * 10  # the control: no marker
    # past RECORD_MAX nothing is looked at
    past = b" " * records.RECORD_MAX + json.dumps(LAUNCH).encode()
    assert reader.parse(past) == []


# ---------------------------------------------------------------- the checker, end to end


def launcher(folder, code: str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.py"
    path.write_text(UNHOOK + "import subprocess\n" + textwrap.dedent(code))
    return path


# The checker's own peak: VmHWM of its address space (ru_maxrss is not: across exec it keeps
# the forking parent's peak, ~600 MB when a whole pytest run forks it)
MEASURED = """
import contextlib, io, json, re, sys, time
from miles_topology.cli import main
t0 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["check", "--format", "json", *sys.argv[1:]])
hwm = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
print(json.dumps({"code": code, "s": time.perf_counter() - t0, "report": out.getvalue(),
                  "rss_mib": hwm / 1024}))
"""


def checked(*args) -> dict:
    """`check --format json ARGS` in a fresh process: exit code, seconds, report, and the
    checker's own peak memory (the sandbox's processes are not its)."""
    got = subprocess.run([sys.executable, "-c", MEASURED, *map(str, args)], text=True,
                         capture_output=True, timeout=120, check=True)
    return json.loads(got.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_flooded_record_keeps_the_checker_bounded(tmp_path):
    """Measured before the bounds (one launch, then 40 MiB of forged actions): 22 s, 1.2 GB
    of checker memory, a 95 MB report; after: ~6 s, ~125 MiB, 1.5 MB."""
    run = launcher(tmp_path / "pr", """
        import json, stat
        subprocess.run(["python3", "train.py", "--colocate", "--num-layers", "8"])
        n = int(sys.argv[1])
        line = json.dumps({"kind": "subprocess", "argv": ["echo", "x"]}).encode() + b"\\n"
        for fd in range(3, 64):
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    for _ in range(n):  # past 16 MiB the checker closes the pipe: EPIPE
                        os.write(fd, line * 1000)
            except OSError:
                pass
        """)
    got = checked(run, "--", 2000)  # 2,000 x 1,000 lines: 88 MB a pipe, if it were read
    launch = json.loads(got["report"])  # one launch: one object
    notes = " ".join(launch["notes"])
    assert got["code"] == 0 and f"recorded more than {records.ACTIONS_MAX} actions" in notes
    assert "stopped after" not in notes  # it ended (EPIPE), not the wall clock
    assert got["rss_mib"] < 400 and len(got["report"]) < 4 << 20 and got["s"] < 60, \
        {k: v for k, v in got.items() if k != "report"}
    assert len(launch["others"]) <= records.ACTIONS_MAX
    honest = checked(run, "--", 1)  # the control: 1,000 actions are all read, no note
    launch = json.loads(honest["report"])
    assert len(launch["others"]) == 1000 and not any("recorded more" in n
                                                     for n in launch["notes"])


THOUSAND = """
import typer
app = typer.Typer()
{}
if __name__ == "__main__":
    app()
"""


def test_a_thousand_typer_commands_are_read_bounded(tmp_path):
    code = "\n".join(f"@app.command()\ndef c{i}():\n    pass\n" for i in range(1000))
    path = tmp_path / "run.py"
    path.write_text(THOUSAND.format(code))
    t0 = time.perf_counter()
    names = typerapp.commands(str(path))
    assert len(names) == 1000 and names[:2] == ["c0", "c1"]
    assert time.perf_counter() - t0 < 5
    # a launcher larger than SOURCE_MAX is not parsed (run once, as it is)
    path.write_text(THOUSAND.format(code) + "#" * typerapp.SOURCE_MAX)
    assert typerapp.commands(str(path)) is None


def test_a_thousand_typer_commands_run_at_most_the_cap(tmp_path, monkeypatch):
    """Each command is one sandboxed run: the cap (32; 3 here, to keep the test short) with a
    note, all within one wall-clock budget."""
    pytest.importorskip("typer")
    monkeypatch.setattr(typerapp, "MAX_COMMANDS", 3)
    body = "\n".join(f"@app.command()\ndef c{i}():\n    subprocess.run(['python3', 'train.py', "
                     f"'--colocate', '--seed', '{i}'])\n" for i in range(1000))
    run = launcher(tmp_path / "pr", THOUSAND.format(body))
    t0 = time.perf_counter()
    got = read_python_launches(str(run), [])
    assert [g.command for g in got] == ["c0", "c1", "c2"]
    assert "the typer app has 1000 commands; the first 3 are run" in got[0].notes
    assert time.perf_counter() - t0 < 60
    # the control: three commands, at the cap: every one runs, no note
    run = launcher(tmp_path / "three", THOUSAND.format(body.split("@app.command()\ndef c3")[0]))
    got = read_python_launches(str(run), [])
    assert [g.command for g in got] == ["c0", "c1", "c2"] and not any(
        "commands; the first" in n for n in got[0].notes)


@pytest.mark.slow
def test_a_thousand_typer_commands_run_the_real_cap(tmp_path):
    """The cap as shipped: 1,000 commands that each launch; at most 32 runs, and those the one
    wall-clock budget (10 s) leaves no time for are a note each, not a run."""
    pytest.importorskip("typer")
    body = "\n".join(f"@app.command()\ndef c{i}():\n    subprocess.run(['python3', 'train.py', "
                     f"'--colocate'])\n" for i in range(1000))
    run = launcher(tmp_path / "pr", THOUSAND.format(body))
    t0 = time.perf_counter()
    got = read_python_launches(str(run), [])
    took = time.perf_counter() - t0
    ran = [g.command for g in got]
    # in order, among the first 32 (on a loaded machine one command may be stopped at its
    # share of the budget while the next still runs: that one is a note, not a run)
    order = [int(c[1:]) for c in ran]
    assert order == sorted(order) and 0 < len(ran) <= typerapp.MAX_COMMANDS
    assert max(order) < typerapp.MAX_COMMANDS
    notes = got[0].notes
    assert "the typer app has 1000 commands; the first 32 are run" in notes
    skipped = [n for n in notes if n.startswith("command `c")]  # out of time: not run, or stopped
    assert len(ran) + len(skipped) == typerapp.MAX_COMMANDS, notes
    assert not any(n.startswith(f"command `{c}`") for c in ran for n in skipped), notes
    assert took < 30, took  # the budget, plus the last run's start
