"""The static launch-script reader against hand-written fixtures and small bash snippets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT, SCRIPTS, bash_launch, flag_values

from miles_topology.model.errors import Location
from miles_topology.shell import (
    FlagValue,
    ScriptRead,
    ScriptReadError,
    read_script,
)

HERE = SCRIPTS
EXPECTED = json.loads((HERE / "expected.json").read_text())["fixtures"]
CASES = [(name, k) for name, spec in EXPECTED.items() for k in range(len(spec["cases"]))]


def rel(src: Location) -> str:
    return f"{os.path.relpath(src.path, HERE)}:{src.line}"


def test_at_least_25_fixtures_all_listed():
    scripts = {p.name for p in HERE.glob("*.sh")}
    assert len(scripts) >= 25
    assert scripts == set(EXPECTED)


@pytest.mark.parametrize(("name", "case"), CASES, ids=[f"{n}[{k}]" for n, k in CASES])
def test_fixture(name: str, case: int):
    want = EXPECTED[name]["cases"][case]
    read = read_script(HERE / name, env=want["env"])
    assert (read.launcher, read.entry) == (want["launcher"], want["entry"])
    values = read.values()
    for flag, value in want["values"].items():
        assert flag in values, f"{flag} missing"
        assert values[flag][-1].value == value, flag
    for flag, where in want["sources"].items():
        assert rel(values[flag][-1].source) == where, flag
    for flag in want["absent"]:
        assert flag not in values, flag
    got = sorted([u.flag or "", rel(u.source)] for u in read.unresolved)
    assert got == sorted([f or "", w] for f, w in want["unresolved"])
    assert sorted(n.code for n in read.notes) == sorted(want["notes"])
    for code, where in want.get("note_lines", {}).items():
        assert [rel(n.location) for n in read.notes if n.code == code] == [where]
    for u in read.unresolved:
        assert u.expression and u.why
    # flags() is argv without the unresolved flags, in order
    flat = read.flags()
    for fv in read.argv:
        if fv.value is None:
            assert fv.flag not in flat or any(o.value is not None for o in values[fv.flag])


def write(tmp_path: Path, text: str, name: str = "run.sh") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def read_text(tmp_path: Path, text: str, env=None) -> ScriptRead:
    return read_script(write(tmp_path, text), env=env)


def final(read: ScriptRead) -> dict[str, str | None]:
    return {k: v[-1].value for k, v in read.values().items()}


def test_api_shapes(tmp_path):
    read = read_text(tmp_path, "python3 train.py --a 1 --b --c=x --d 1 2 3 pos\n")
    assert str(read.argv[0].source) == f"{tmp_path / 'run.sh'}:1"
    assert read.argv[0] == FlagValue("--a", "1", Location(str(tmp_path / "run.sh"), 1))
    assert final(read) == {"--a": "1", "--b": "", "--c": "x", "--d": "1 2 3 pos"}
    assert read.flags() == ["--a", "1", "--b", "--c", "x", "--d", "1", "2", "3", "pos"]


def test_one_launch_command_run_twice_is_said_as_one_place(tmp_path):
    # a function holding the launch, called for two variants (held-out: a benchmark script's
    # run_variant): one place, run twice, not "2 launch commands found (run.sh:2 and run.sh:2)"
    read = read_text(tmp_path, "run() {\n  python3 train.py --lr \"$1\"\n}\nrun 1e-6\n"
                     "run 2e-6\n")
    (n,) = [p for p in read.notes if p.code == "several-launch-commands"]
    assert n.message == f"the launch command at {tmp_path / 'run.sh'}:2 runs 2 times (a " \
        "function or a loop runs it again); its last run is read"
    assert final(read) == {"--lr": "2e-6"}


def test_positional_before_flags_and_empty_value(tmp_path):
    read = read_text(tmp_path, 'python3 train.py cfg.yaml --name "" --on\n')
    assert read.argv[0].flag == "" and read.argv[0].value == "cfg.yaml"
    assert read.flags() == ["cfg.yaml", "--name", "", "--on"]
    assert "" not in read.values()


@pytest.mark.parametrize(("expr", "value"), [
    ("$((1 + 2 * 3))", "7"), ("$(( (1 + 2) * 3 ))", "9"), ("$((7 / 2))", "3"),
    ("$((-7 / 2))", "-3"), ("$((7 % 3))", "1"), ("$((-7 % 3))", "-1"), ("$((2 ** 10))", "1024"),
    ("$((N * 2))", "8"), ("$(($N*2))", "8"), ("$((${N} + ${M:-3}))", "7"),
    ("$((0x10 + 010))", "24"), ("$(( - (N - 10) ))", "6"), ("$((N))", "4"),
    ("$((1 << 2))", "4"), ("$((N ? 1 : 2))", "1"), ("$((N < 5 && N != 3))", "1"),
    ("$((N >= 5 || !N))", "0"), ("$((-2 ** 2))", "4"), ("$((2 ** 3 ** 2))", "512"),
    ("$((0 && 1 / 0))", "0"), ("$((N > 3 ? N * 2 : 1 / 0))", "8"), ("$((~N ^ 1 | 2 & 3))", "-6"),
    ("$((1, N == 4))", "1"), ("$((-7 >> 1))", "-4"), ("$((16#ff + 2#101 + 36#z))", "295"),
    ("$((10#0009 + 1))", "10"),
])
def test_arithmetic(tmp_path, expr, value):
    read = read_text(tmp_path, f"N=4\npython3 train.py --x {expr}\n")
    assert final(read)["--x"] == value


def test_arithmetic_base_of_a_variable(tmp_path):
    # bash expands ${STEP} first, then reads 10#0001432 in base 10 (0001432 alone is octal)
    read = read_text(tmp_path, 'STEP=iter_0001432\nSTEP="${STEP#iter_}"\nB=101\n'
                     'python3 train.py --a $((10#${STEP})) --b $(( 10#${STEP} + 1 )) '
                     '--c $((10#$STEP - 1)) --d "$(( 2#$B ))"\n')
    # tree-sitter-bash 0.25 reports `10#$STEP` (no braces) as an error; bash reads it
    assert final(read) == {"--a": "1432", "--b": "1433", "--c": "1431", "--d": "5"}


@pytest.mark.parametrize("expr", ["$((1 / 0))", "$((UNSET + 1))", "$((1 << 64))", "$((2 ** 99))",
                                  "$((8#9))", "$((2 ** -1))", "$((9999999999 * 9999999999))",
                                  "$((N++))", "$((N = 2))", "$((A[0]))"])
def test_arithmetic_unknowable(tmp_path, expr):
    read = read_text(tmp_path, f"N=4\npython3 train.py --x {expr}\n")
    assert final(read)["--x"] is None
    assert read.unresolved[0].flag == "--x"
    assert read.unresolved[0].source.line == 2


@pytest.mark.parametrize(("setup", "word", "value"), [
    ("X=abc.tar.gz", "${X%.*}", "abc.tar"), ("X=abc.tar.gz", "${X%%.*}", "abc"),
    ("X=a/b/c", "${X#*/}", "b/c"), ("X=a/b/c", "${X##*/}", "c"), ("X=a-b-c", "${X//-/_}", "a_b_c"),
    ("X=a-b-c", "${X/-/_}", "a_b-c"), ("X=Abc", "${X,,}", "abc"), ("X=abc", "${X^^}", "ABC"),
    ("X=abcdef", "${X:2:3}", "cde"), ("X=abcdef", "${#X}", "6"), ("A=(a b c)", "${#A[@]}", "3"),
    ("A=(a b c)", "${A[1]}", "b"), ("A=(a b c)", "${A[-1]}", "c"), ("A=(a b c)", "$A", "a"),
    ("X=", "${X:-d}", "d"), ("X=", "${X-d}", ""), ("", "${X-d}", "d"), ("X=1", "${X:+on}", "on"),
    ("", "${X:+on}", ""), ("", "${X:-${Y:-${Z:-deep}}}", "deep"), ("A=(x y)", '"${A[*]}"', "x y"),
    ("X='a  b'", '"$X"', "a  b"), ("X=1", "'$X'", "$X"), ("X=1", '\\$X', "$X"),
    ("", "$'a\\tb'", "a\tb"),
    ("X=v", "pre${X}post", "prevpost"), ("X=v", '"${X}"-"$X"', "v-v"),
])
def test_expansions(tmp_path, setup, word, value):
    read = read_text(tmp_path, f"{setup}\npython3 train.py --x {word} --end\n")
    assert final(read)["--x"] == value


def test_default_assign_and_required(tmp_path):
    read = read_text(tmp_path, ': ${TP:=4}\nX=${NEED:?set NEED}\n'
                     'python3 train.py --tp $TP --x $X\n')
    assert final(read) == {"--tp": "4", "--x": None}
    (u,) = read.unresolved
    assert (u.flag, u.source.line, u.expression) == ("--x", 2, "${NEED:?set NEED}")
    assert "set NEED" in u.why and "--env NEED" in u.why
    assert final(read_script(tmp_path / "run.sh", env={"NEED": "y"}))["--x"] == "y"


def test_word_splitting(tmp_path):
    read = read_text(tmp_path, 'A="--a 1  --b"\nB=(" --c  2 " "--d")\nC="x  y"\n'
                     'python3 train.py $A "$C" ${B[@]} --e "${B[@]}"\n')
    assert [(f.flag, f.value) for f in read.argv] == [
        ("--a", "1"), ("--b", "x  y"), ("--c", "2"), ("--d", ""), ("--e", " --c  2 "), ("--d", "")]


def test_empty_array_and_empty_quotes(tmp_path):
    read = read_text(tmp_path, 'E=()\npython3 train.py --a "${E[@]}" --b "" --c ${E[@]}\n')
    assert [(f.flag, f.value) for f in read.argv] == [("--a", ""), ("--b", ""), ("--c", "")]
    assert read.flags() == ["--a", "--b", "", "--c"]


def test_arrays_comments_and_append(tmp_path):
    read = read_text(tmp_path, """
ARGS=(
   --a 1   # trailing comment
   # --b 2
   #--c 3

   --d 4 --e
)
ARGS+=(--f 5)
ARGS+=(
   --g "six seven"
)
python3 train.py "${ARGS[@]}"
""")
    assert final(read) == {"--a": "1", "--d": "4", "--e": "", "--f": "5", "--g": "six seven"}
    assert [f.source.line for f in read.argv] == [3, 7, 7, 9, 11]


def test_process_environment_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv("MT_SECRET_TP", "8")
    read = read_text(tmp_path, "python3 train.py --tp ${MT_SECRET_TP}\n")
    assert final(read)["--tp"] is None
    assert final(read_script(tmp_path / "run.sh", env={"MT_SECRET_TP": "2"}))["--tp"] == "2"


def test_env_resolves_command_substitution_but_not_literal_assignment(tmp_path):
    path = write(tmp_path, "N=$(nproc)\nM=3\npython3 train.py --n $N --m $M\n")
    assert final(read_script(path)) == {"--n": None, "--m": "3"}
    assert final(read_script(path, env={"N": "8", "M": "9"})) == {"--n": "8", "--m": "3"}


def test_positional_arguments(tmp_path):
    path = write(tmp_path, 'TP=${1:-2}\npython3 train.py --tp $TP "$@"\n')
    read = read_script(path)
    assert final(read) == {"--tp": None}
    assert {(u.flag, u.source.line) for u in read.unresolved} == {("--tp", 1), (None, 2)}
    read = read_script(path, env={"1": "4", "2": "--extra"})
    assert read.flags() == ["--tp", "4", "4", "--extra"]
    assert read.unresolved == []


def test_dirname_idioms(tmp_path):
    (tmp_path / ".git").mkdir()  # a checkout: a file is looked for up to its root (gate.py)
    write(tmp_path, "MODEL_ARGS=(--num-layers 2)\n", "scripts/models/m.sh")
    for idiom in [
        'D="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"\n'
        'source "$D/models/m.sh"',
        'source "$(dirname "${BASH_SOURCE[0]}")/models/m.sh"',
        'D=$(dirname $(readlink -f "$0"))\n. $D/models/m.sh',
        'D=$(realpath "$(dirname "$0")")\nsource "${D}/../scripts/models/m.sh"',
        'D=`dirname $0`\nsource $D/models/m.sh',
        'D=$(cd "$(dirname "$0")"/.. && pwd -P)\nsource "$D/scripts/models/m.sh"',
        "source models/m.sh",
        "source scripts/models/m.sh",
    ]:
        path = write(tmp_path, idiom + '\npython3 train.py "${MODEL_ARGS[@]}"\n', "scripts/run.sh")
        read = read_script(path)
        assert final(read) == {"--num-layers": "2"}, idiom
        assert read.argv[0].source.path.endswith("models/m.sh")


def test_missing_source_is_unresolved(tmp_path):
    read = read_text(tmp_path, 'source "${ROOT}/m.sh"\nsource ./nope.sh\npython3 train.py --a 1\n')
    assert [(u.flag, u.source.line) for u in read.unresolved] == [(None, 1), (None, 2)]
    assert "not found" in read.unresolved[1].why


def test_source_cycle_is_noted_not_infinite(tmp_path):
    write(tmp_path, 'source "$(dirname "${BASH_SOURCE[0]}")/b.sh"\nA=1\n', "a.sh")
    write(tmp_path, 'source "$(dirname "${BASH_SOURCE[0]}")/a.sh"\n', "b.sh")
    read = read_text(tmp_path, "source a.sh\npython3 train.py --a $A\n")
    assert final(read) == {"--a": "1"}
    assert "source-cycle" in [n.code for n in read.notes]


@pytest.mark.parametrize(("text", "launcher", "entry"), [
    ("python3 train.py --a 1", "python3", "train.py"),
    ("python train_async.py --a 1", "python", "train_async.py"),
    ("/usr/bin/python3.11 -u -X dev ../miles/train.py --a 1", "python3.11", "../miles/train.py"),
    ("python -m miles.train --a 1", "python", "miles.train"),
    ("torchrun --nproc-per-node=8 --nnodes 2 --rdzv_endpoint h:1 train.py --a 1", "torchrun",
     "train.py"),
    ("python3 -m torch.distributed.run --nproc_per_node 8 train.py --a 1",
     "python3 -m torch.distributed.run", "train.py"),
    ("ray job submit --address=http://h:8265 --no-wait -- python3 train.py --a 1",
     "ray job submit", "train.py"),
    ("ray job submit --working-dir . -- torchrun --standalone train.py --a 1", "ray job submit",
     "train.py"),
    ("X=1 exec nohup env A=1 B=2 timeout -s INT 10h python3 train.py --a 1 &", "python3",
     "train.py"),
    ("${PYTHON:-python3} train.py --a 1", "python3", "train.py"),
    # wrappers the Python-launcher reader knows too (one rule of command forms)
    ("sudo -u ray setsid stdbuf -o L python3 train.py --a 1", "python3", "train.py"),
    ("ray job submit --runtime-env-json '{}' python3 train.py --a 1", "ray job submit",
     "train.py"),
])
def test_launch_forms(tmp_path, text, launcher, entry):
    read = read_text(tmp_path, text + "\n")
    assert (read.launcher, read.entry) == (launcher, entry)
    assert read.flags() == ["--a", "1"]


def test_training_launch_preferred_over_helpers(tmp_path):
    read = read_text(tmp_path, "python3 tools/convert.py --x 1\npython3 train.py --a 1\n"
                     "python3 tools/after.py --y 2\npython3 -c 'print(1)'\n")
    assert (read.entry, read.flags()) == ("train.py", ["--a", "1"])
    assert read.notes == []


def test_no_launch(tmp_path):
    read = read_text(tmp_path, "echo hi\nlaunch() { python3 train.py --a 1; }\n")
    assert (read.launcher, read.entry, read.argv) == (None, None, [])
    assert [n.code for n in read.notes] == ["no-launch-command"]


def test_test_conditions_decided_statically(tmp_path):
    text = """
X=1
if [ "$X" -eq 1 ] && true; then A=one; else A=other; fi
if [[ $X == 1 && -n "$X" ]]; then B=yes; fi
if [ -z "$X" ]; then C=empty; elif [ "$X" != 2 ]; then C=not2; fi
case "$X" in 0|2) D=a ;; [1]) D=b ;; *) D=c ;; esac
[ "$X" = 1 ] || E=set
[ "$X" = 1 ] && F=set
python3 train.py --a $A --b $B --c $C --d $D --e ${E:-unset} --f $F
"""
    read = read_text(tmp_path, text)
    assert final(read) == {"--a": "one", "--b": "yes", "--c": "not2", "--d": "b", "--e": "unset",
                           "--f": "set"}
    assert read.unresolved == []


@pytest.mark.parametrize("opener", ["pick() {", "if true; then", "{"])
def test_bracket_command_with_redirect_in_a_body(tmp_path, opener):
    # tree-sitter-bash 0.25 reads `[ ... ] || cmd > F` in a body, then a `]` on a later line,
    # as one test around the commands between them (no error); bash runs `[` as a command
    close = {"pick() {": "}\npick", "if true; then": "fi", "{": "}"}[opener]
    text = (f'D=1\n{opener}\n  [ "$D" -eq 1 ] || echo x > /dev/null\n'
            '  if [ "$D" -eq 1 ]; then N=one; else N=two; fi\n'
            f'  [ -n "$D" ] && echo "[" > /dev/null\n{close}\n'
            'python3 train.py --n "$N" --b "[x]"\n')
    read = read_text(tmp_path, text)
    assert final(read) == {"--n": "one", "--b": "[x]"}
    assert read.unresolved == []


def test_loop_assignment_is_unresolved(tmp_path):
    read = read_text(tmp_path, "for n in $(nproc); do TP=$n; done\nwhile false; do X=1; done\n"
                     "python3 train.py --tp $TP\n")
    assert final(read) == {"--tp": None}
    assert "loop" in read.unresolved[0].why


def test_subshell_assignment_does_not_leak(tmp_path):
    read = read_text(tmp_path, "TP=1\n(TP=2; cd /tmp)\npython3 train.py --tp $TP\n")
    assert final(read) == {"--tp": "1"}


def test_unset_and_read(tmp_path):
    read = read_text(tmp_path, "A=1\nunset A\nread B < f\npython3 train.py --a ${A:-u} --b $B\n")
    assert final(read) == {"--a": "u", "--b": None}


def test_missing_continuation_after_array_expansion(tmp_path):
    read = read_text(tmp_path, "A=(--a 1)\nB=(--b 2)\npython3 train.py \\\n  ${A[@]}\n"
                     "  ${B[@]}\n")
    assert final(read) == {"--a": "1"}
    (note,) = read.notes
    assert note.code == "missing-line-continuation" and note.location.line == 5
    assert "line 4" in note.fix


def test_incomplete_arithmetic_is_a_read_error(tmp_path):
    # bash parses $((1 +)) and fails when it runs it; tree-sitter rejects it up front
    with pytest.raises(ScriptReadError, match=r"run.sh:2: bash cannot evaluate the arithmetic"):
        read_text(tmp_path, "N=4\npython3 train.py --x $((1 +))\n")


@pytest.mark.parametrize(("text", "line", "words"), [
    ('python3 train.py --a "x\n', 1, "double quote"),
    ("python3 train.py --a 'x\n", 1, "single quote"),
    ("A=(\n --a 1\n", 1, "array"),
    ("if true; then\n echo\n", 1, "fi"),
    ("X=$(echo\n", 1, "$("),
    ("X=${A\n", 1, "${"),
    ("X=$((1 + 2)\n", 1, "arithmetic"),
    ("echo a\nfi\n", 2, "unexpected"),
    ("case x in\n a) echo ;;\n", 1, "esac"),
    ("X=`echo\n", 1, "backquote"),
    ("for x in 1; do\n", 1, "done"),
])
def test_syntax_errors(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(ScriptReadError) as err:
        read_script(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}:") and words in msg and "Fix:" in msg


def test_syntax_error_in_sourced_file_names_it(tmp_path):
    write(tmp_path, "A=(--a\n", "models/m.sh")
    with pytest.raises(ScriptReadError, match=r"models/m.sh:1: array"):
        read_text(tmp_path, "source models/m.sh\npython3 train.py\n")


def test_unreadable_inputs(tmp_path):
    with pytest.raises(ScriptReadError, match="no such file"):
        read_script(tmp_path / "missing.sh")
    with pytest.raises(ScriptReadError):
        read_script(tmp_path)
    (tmp_path / "bin.sh").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ScriptReadError, match="not a text file"):
        read_script(tmp_path / "bin.sh")


def test_heredoc_and_ansi_and_crlf(tmp_path):
    # bash keeps the CR: '\\' before it escapes the CR, so the command ends at the line end
    # and ' --a 1' runs on its own; a CR LF here-document ends at its CR LF delimiter line
    read = read_text(tmp_path, "cat <<EOF\r\n--x 1\r\nEOF\r\npython3 train.py --b \\\r\n"
                     " --a $'1'\r\n")
    assert final(read) == {"--b": "\r"}
    assert {n.code for n in read.notes} >= {"crlf-line-ends", "missing-line-continuation"}
    assert [n.location.line for n in read.notes if n.code == "crlf-line-ends"] == [1]


def test_function_positional_frames(tmp_path):
    read = read_text(tmp_path, 'run() {\n  local tp=$1; shift\n'
                     '  python3 train.py --tp "$tp" "$@"\n}\nrun 4 --a "x y" --b\n')
    assert final(read) == {"--tp": "4", "--a": "x y", "--b": ""}


def test_import_is_light():
    code = ("import sys; import miles_topology.shell; "
            "print([m for m in ('torch', 'ray', 'megatron') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- word spans (for rewriting)


def spanned(read: ScriptRead, text: str) -> list[tuple]:
    """(flag, flag word as written, value words as written) for each flag with a span."""
    def at(s):
        return None if s is None else text[s.start:s.end]
    return [(fv.flag, at(fv.span), tuple(at(s) for s in fv.value_spans)) for fv in read.argv]


def test_spans_are_the_words_as_written(tmp_path):
    text = ('TP=2\nP=(\n   --tp "${TP}"   # c\n   --sp\n)\nA="--x 1"\n'
            'python3 train.py --n=4 ${P[@]} \\\n  $A --e $((TP*2)) --w "a b" pos\n')
    read = read_text(tmp_path, text)
    assert spanned(read, text) == [
        ("--n", "--n=4", ()), ("--tp", "--tp", ('"${TP}"',)), ("--sp", "--sp", ()),
        ("--x", None, (None,)), ("--e", "--e", ("$((TP*2))",)),
        ("--w", "--w", ('"a b"', "pos"))]
    tp = read.argv[1]
    assert (tp.span.line, tp.span.col, tp.span.end_col, tp.span.stmt_line) == (3, 3, 7, 2)
    assert tp.span.file == str(tmp_path / "run.sh") and tp.span.branch is None
    v = tp.value_spans[0]
    assert (v.line, v.col, v.end_line, v.end_col) == (3, 8, 3, 15)


def test_spans_through_functions_sourced_files_and_branches(tmp_path):
    write(tmp_path, "M=(--layers 4)\n", "models/m.sh")
    text = ('source models/m.sh\nif [ "$X" = 1 ]; then Q=(--q 1); fi\n'
            'go() {\n  python3 train.py --n "$1" "$@"\n}\ngo 2 ${M[@]} ${Q[@]} --k\n')
    read = read_text(tmp_path, text, env={"X": "1"})
    by = {fv.flag: fv for fv in read.argv}
    assert by["--layers"].span.file == str(tmp_path / "models" / "m.sh")
    assert by["--q"].span.branch == Location(str(tmp_path / "run.sh"), 2)
    assert text[by["--k"].span.start:by["--k"].span.end] == "--k"
    n = by["--n"]
    assert n.tokens == ("2", "2")  # "$1", then "$@" passes the call's words on
    assert [text[s.start:s.end] for s in n.value_spans] == ['"$1"', "2"]
    assert n.value_spans[1].line == 6
    # $1 is read by position: removing a word before it would shift it, so the call uses it
    call = Location(str(tmp_path / "run.sh"), 6)
    assert read.uses[n.value_spans[1].key] == {call, read.site.command}
    assert call not in read.uses[by["--k"].span.key]


def test_launch_site_entry_exports_and_uses(tmp_path):
    text = ('export A=1\nB=2\nC=3\nexport C\nD=$(nproc)\nP=(--tp 2)\necho "${P[@]}"\n'
            'cd /x && true\npython3 -u train.py ${P[@]}\n')
    read = read_text(tmp_path, text, env={"D": "8", "E": "5"})
    site = read.site
    assert text[site.entry.start:site.entry.end] == "train.py"
    assert site.statement.line == 9 and site.branch is None
    assert site.environ() == {"A": "1", "C": "3", "E": "5"}  # D is set by the script
    assert site.variables["D"] == "8" and site.variables["B"] == "2"
    tp = read.argv[0]
    assert read.uses[tp.span.key] == {Location(str(tmp_path / "run.sh"), 7), site.command}


def test_text_replaces_the_file(tmp_path):
    path = write(tmp_path, "python3 train.py --a 1\n")
    read = read_script(path, text="python3 train.py --a 2\n")
    assert final(read) == {"--a": "2"}


def test_switch_with_a_value_keeps_it(tmp_path):
    read = read_text(tmp_path, "python3 train.py --colocate=false --tp=2 --use-critic\n")
    assert read.flags() == ["--colocate=false", "--tp", "2", "--use-critic"]


def test_words_used_apart_count_as_used_there(tmp_path):
    text = ('A=(--tp 2 --pp 1)\nB=(--ep 4)\nC=(--cp 1)\nN=${A[1]}\necho "${B[*]}"\n'
            'L=${#C[@]}\npython3 train.py "${A[@]}" "${B[@]}" "${C[@]}"\n')
    read = read_text(tmp_path, text)
    src = {k: Location(str(tmp_path / "run.sh"), k) for k in range(1, 8)}
    users = {fv.flag: read.uses[fv.span.key] for fv in read.argv}
    assert users == {"--tp": {src[4], src[7]}, "--pp": {src[7]}, "--ep": {src[5], src[7]},
                     "--cp": {src[6], src[7]}}


def test_exported_stays_exported_when_set_again(tmp_path):
    read = read_text(tmp_path, "export A=1\nA=2\nB=3\npython3 train.py\n", env={"B": "x", "C": "y"})
    assert read.site.environ() == {"A": "2", "C": "y"}


# ---------------------------------------------------------------- real idioms (tree-sitter reader)


def test_unresolved_array_is_never_a_flag_value(tmp_path):
    text = ('read -ra X <<< "$(python3 model_args.py qwen3-4B)"\n'
            "python3 train.py --colocate ${X[@]} --rollout-num-gpus 4 ${X[@]} "
            '--tensor-model-parallel-size "${X[@]}"\n')
    read = read_text(tmp_path, text)
    got = final(read)
    assert got["--colocate"] == "" and got["--rollout-num-gpus"] == "4"
    assert got["--tensor-model-parallel-size"] is None  # its value may be X's first word
    assert read.gaps == [1, 2, 3]
    assert read.flags() == ["--colocate", "--rollout-num-gpus", "4"]
    assert {u.flag for u in read.unresolved} == {None, "--tensor-model-parallel-size"}


def test_here_string_is_not_a_heredoc(tmp_path):
    # the old reader took <<< for <<, and swallowed the rest of the file as its body
    read = read_text(tmp_path, 'read -r A B <<< "x y z"\npython3 train.py --a $A --b "$B"\n')
    assert final(read) == {"--a": "x", "--b": "y z"}


def test_read_mapfile_eval_of_unknown_text_stay_unknown(tmp_path):
    text = ("mapfile -t M < <(ls /ckpt)\nread -ra R < args.txt\neval \"$(cat cmd)\"\n"
            "python3 train.py --m ${M[@]} --r \"${R[@]}\"\n")
    read = read_text(tmp_path, text)
    assert final(read) == {"--m": "", "--r": ""}  # --m/--r are no known topology flags
    assert len(read.gaps) == 2 and all(u.flag is None for u in read.unresolved)


def test_utf8_text_keeps_character_spans(tmp_path):
    text = '# é — 中文 😀\nA=(--tp "2")  # ü\npython3 train.py --x=é "${A[@]}"\n'
    read = read_text(tmp_path, text)
    by = {fv.flag: fv for fv in read.argv}
    assert text[by["--tp"].span.start:by["--tp"].span.end] == "--tp"
    assert text[by["--tp"].value_spans[0].start:by["--tp"].value_spans[0].end] == '"2"'
    assert (by["--tp"].span.line, by["--tp"].span.col) == (2, 3)
    assert text[by["--x"].span.start:by["--x"].span.end] == "--x=é"
    assert by["--x"].value == "é"


def test_unicode_fixture_migrates_exactly(tmp_path):
    from miles_topology.migrations.runner import migrate
    src = HERE / "unicode-comments.sh"
    run = tmp_path / "unicode-comments.sh"
    run.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    shutil.copytree(HERE / "models", tmp_path / "models")  # a link out of it is not read
    out = migrate(run)
    assert "0003" in out.applied
    new = out.new
    assert "# Qwen3-4B — modèle dense, réglé à la main (UTF-8: é, —, 中文)" in new
    assert "--tensor-model-parallel-size" not in new
    (yaml,) = out.files.values()  # the comment heading the moved lines moved along
    assert "tp: 2  # --tensor-model-parallel-size; taille TP → 2\n" in yaml
    assert "   --sequence-parallel" not in new  # moved whole, nothing left half-cut
    from miles_topology.reading.yamlflags import STAGED

    token = STAGED.set(out.files)  # the YAML it would write, expanded by `miles-topology flags`
    try:
        after = read_script(run, text=new)
    finally:
        STAGED.reset(token)
    assert after.entry == "train.py"
    assert any(fv.flag == "--tensor-model-parallel-size" and fv.span is None for fv in after.argv)


def test_doubling_string_is_bounded(tmp_path):
    text = "X=ab\n" + 'X="$X$X"\n' * 40 + "python3 train.py --x \"$X\" --y 1\n"
    start = time.perf_counter()
    read = read_text(tmp_path, text)
    assert time.perf_counter() - start < 5
    assert final(read) == {"--x": None, "--y": "1"}
    assert "MB" in read.unresolved[0].why


def test_doubling_array_is_bounded(tmp_path):
    text = "A=(x)\n" + 'A=("${A[@]}" "${A[@]}")\n' * 60 + 'python3 train.py --y 1 "${A[@]}"\n'
    start = time.perf_counter()
    read = read_text(tmp_path, text)
    assert time.perf_counter() - start < 30  # ~2 s idle: 17 doublings, then one unknown
    assert final(read) == {"--y": "1"} and read.gaps == [1]
    assert "more than" in read.unresolved[0].why


@pytest.mark.slow
def test_array_appends_are_linear(tmp_path):
    def cost(n: int) -> float:
        path = write(tmp_path, "A=()\n" + "A+=(w)\n" * n + 'python3 train.py "${A[@]}"\n',
                     f"run{n}.sh")
        start = time.perf_counter()
        read = read_script(path)
        took = time.perf_counter() - start
        assert len(read.argv) == n
        return took
    small, big = cost(4_000), cost(40_000)  # under the reader's 50000-word bound
    assert big < 25 * small  # 10x the appends; quadratic copies would be ~100x


def test_huge_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.sh"
    with open(path, "wb") as f:
        f.truncate(51 << 20)
    with pytest.raises(ScriptReadError, match=r"big.sh:0: the file is 51 MB, over the 50 MB"):
        read_script(path)


@pytest.mark.slow
def test_exponential_function_calls_are_bounded(tmp_path):
    text = "f() { f; f; }\nf\npython3 train.py --a 1\n"
    start = time.perf_counter()
    try:
        read_text(tmp_path, text)
    except ScriptReadError as e:
        assert "more than" in str(e)
    assert time.perf_counter() - start < 60


def test_tree_sitter_is_loaded_lazily():
    code = ("import sys; import miles_topology, miles_topology.shell, miles_topology.cli; "
            "print('tree_sitter' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_command_held_in_an_array_is_not_a_cut_off_line(tmp_path):
    read = read_text(tmp_path, 'CMD=(python3 train.py --a 1)\n"${CMD[@]}" --b 2\n')
    assert (read.entry, read.flags(), read.notes) == ("train.py", ["--a", "1", "--b", "2"], [])
    read = read_text(tmp_path, 'read -ra CMD < cmd.txt\n"${CMD[@]}"\npython3 train.py\n')
    assert read.notes == []


def test_word_slices(tmp_path):
    text = ('A=(--a 1 --b 2 --c 3)\nrun() {\n  python3 train.py "${@:2}" "${A[@]:2:2}" '
            '${A[@]: -2}\n}\nrun skip --x 1\n')
    read = read_text(tmp_path, text)
    assert read.flags() == ["--x", "1", "--b", "2", "--c", "3"]


def test_keyed_and_associative_arrays(tmp_path):
    text = ('A=([0]=--tp [1]=2 [3]="--pp" 1)\nB=(--ep)\nB+=([5]=4)\n'
            'declare -A SIZE=([qwen3-4B]=2 [qwen3-30B]=8)\nSIZE[tiny]=1\nM=qwen3-30B\n'
            'python3 train.py "${A[@]}" "${B[@]}" --cp "${SIZE[$M]}" --x "${SIZE[tiny]}"\n'
            'python3 train.py --all "${SIZE[@]}"\n')
    read = read_text(tmp_path, text.split("python3 train.py --all")[0])
    assert read.flags() == ["--tp", "2", "--pp", "1", "--ep", "4", "--cp", "8", "--x", "1"]
    # bash lists an associative array's values in its own order: not guessed
    read = read_text(tmp_path, text)
    assert final(read)["--all"] == "" and read.gaps


def test_heredoc_read_by_a_shell_is_a_script(tmp_path):
    # bash -s / ssh HOST bash read the here-document as a script, located in the file
    text = ("TP=4\nssh host bash -s <<EOF\nPP=2\npython3 train.py --tp $TP --pp \\$PP\nEOF\n")
    read = read_text(tmp_path, text)
    assert read.entry == "train.py"
    assert final(read) == {"--tp": "4", "--pp": "2"}
    assert read.argv[0].source.line == 4


def test_heredoc_script_variables_stay_in_its_shell(tmp_path):
    read = read_text(tmp_path, "sh -ex <<'EOF'\nPP=2\nEOF\npython3 train.py --pp ${PP:-none}\n")
    assert final(read) == {"--pp": "none"}


@pytest.mark.parametrize("cmd", ["cat", "bash -c 'echo hi'", "python3 -", "bash run.sh"])
def test_heredoc_of_other_commands_is_not_run(tmp_path, cmd):
    read = read_text(tmp_path, f"{cmd} <<'EOF'\npython3 train.py --x 1\nEOF\n"
                     "python3 train.py --y 2\n")
    assert final(read) == {"--y": "2"}


# ---------------------------------------------------------------- loops stepped through

MOE_FREQ = """NLAYERS=8
FIRST_K_DENSE_REPLACE={k}
arr=()
for ((i=0; i<NLAYERS; i++)); do
  if (( i < FIRST_K_DENSE_REPLACE )); then
    arr+=(0)
  else
    arr+=(1)
  fi
done
printf -v MOE_LAYER_FREQ "[%s]" "$(IFS=', '; echo "${{arr[*]}}")"
MODEL_ARGS=(--num-layers $NLAYERS --moe-layer-freq $MOE_LAYER_FREQ)
python3 train.py "${{MODEL_ARGS[@]}}" --i $i
"""
SHOW = "show() { for w; do printf '%s\\n' \"$w\"; done; }; show"  # each word on a line


def bash_words(text: str) -> list[str]:
    return subprocess.run(["/bin/bash", "-c", text.replace("python3 train.py", SHOW)],
                          capture_output=True, text=True, check=True).stdout.splitlines()


def test_c_style_for_builds_moe_layer_freq(tmp_path):
    # "${arr[*]}" joins with the first character of IFS: ',' (bash prints [0,0,0,1,...])
    read = read_text(tmp_path, MOE_FREQ.format(k=3))
    assert final(read) == {"--num-layers": "8", "--moe-layer-freq": "[0,0,0,1,1,1,1,1]",
                           "--i": "8"}
    assert read.unresolved == []
    assert final(read_text(tmp_path, MOE_FREQ.format(k=0)))["--moe-layer-freq"] == \
        "[1,1,1,1,1,1,1,1]"


@pytest.mark.skipif(not os.path.exists("/bin/bash"), reason="needs bash")
@pytest.mark.parametrize("k", [0, 3, 8])
def test_moe_layer_freq_loop_matches_bash(tmp_path, k):
    text = MOE_FREQ.format(k=k)
    assert read_text(tmp_path, text).flags() == bash_words(text)


@pytest.mark.parametrize(("loop", "want"), [
    ("for x in a b c; do ARGS+=(--$x 1); done", ["--a", "1", "--b", "1", "--c", "1"]),
    ('L="p q"; for x in $L "r s"; do ARGS+=("$x"); done', ["p", "q", "r s"]),
    ("for x in ${E[@]}; do ARGS+=($x); done", []),
    ("for ((i=1; i<=64; i*=2)); do ARGS+=($i); done", ["1", "2", "4", "8", "16", "32", "64"]),
    ("for ((i=0, j=9; i<j; i+=3, j--)); do ARGS+=($i:$j); done", ["0:9", "3:8", "6:7"]),
    ("for ((i=0; ; i++)); do (( i < 2 )) || break; ARGS+=($i); done", ["0", "1"]),
    ("for x in a b c d; do [ $x = c ] && break; ARGS+=($x); done", ["a", "b"]),
    ("for x in a b c; do if [ $x = b ]; then continue; fi; ARGS+=($x); done", ["a", "c"]),
    ("for x in a b; do for y in 1 2 3; do ARGS+=($x$y); done; done",
     ["a1", "a2", "a3", "b1", "b2", "b3"]),
    ("for x in a b; do for y in 1 2 3; do [ $y = 2 ] && continue 2; ARGS+=($x$y); done; done",
     ["a1", "b1"]),
    ("for x in a b; do for y in 1 2; do [ $x$y = a2 ] && break 2; ARGS+=($x$y); done; done",
     ["a1"]),
    ("n=0; for x in a b c; do (( n++ )); ((n+=10)); done; ARGS+=($n)", ["33"]),
    ("for x in 1 2 3; do :; done; ARGS+=($x)", ["3"]),
    ("f() { for x; do ARGS+=(-$x); done; }; f a b", ["-a", "-b"]),
    ("n=0; while true; do n=$((n + 1)); [ $n -ge 3 ] && break; done; ARGS+=($n)", ["3"]),
    ("n=0; until false; do n=$((n + 1)); [ $n = 2 ] && break; done; ARGS+=($n)", ["2"]),
])
def test_known_loops_are_stepped_through(tmp_path, loop, want):
    text = f'ARGS=()\n{loop}\npython3 train.py "${{ARGS[@]}}"\n'
    read = read_text(tmp_path, text)
    assert read.flags() == want
    assert read.unresolved == []
    if os.path.exists("/bin/bash"):
        assert bash_words(text) == want  # what bash passes


@pytest.mark.parametrize(("loop", "reason"), [
    ("for ((i=0; i<N; i++)); do ARGS+=(1); done", "N is not set"),
    ("for x in $(ls); do ARGS+=($x); done", "'ls'"),
    ("for ((i=0; i<20000; i++)); do ARGS+=(1); done", "more than 10000 times"),
    ("for x in a b; do for ((i=0; i<6000; i++)); do ARGS+=(1); done; done",
     "more than 10000 times"),
    ("for x in a b; do [ $X = 1 ] && break; ARGS+=($x); done", "'break' at"),
    ("f() { break; }; for x in a b; do f; ARGS+=($x); done", "in a function"),
    ("for x in a b; do ARGS+=($x); continue $N; done", "known only at run time"),
])
def test_loops_not_stepped_through_stay_unresolved(tmp_path, loop, reason):
    read = read_text(tmp_path, f'ARGS=(--a 1)\n{loop}\npython3 train.py "${{ARGS[@]}}"\n')
    assert read.flags() == ["--a", "1"]  # the words the loop adds are not guessed
    (u,) = read.unresolved
    assert u.flag is None and "loop at" in u.why
    assert "run a number of times known only at run time" in u.why
    assert reason in u.why


@pytest.mark.slow
def test_stepping_is_bounded_by_commands_and_per_read(tmp_path):
    body = "; ".join(["X=1"] * 20)  # 20 commands a time, 6000 times: over 100000 commands
    read = read_text(tmp_path, f"for ((i=0; i<6000; i++)); do {body}; done\n"
                     "python3 train.py --i $i\n")
    assert "more than 100000 commands" in read.unresolved[0].why
    loops = "".join(f"for ((i{k}=0; i{k}<9000; i{k}++)); do :; done\n" for k in range(12))
    start = time.perf_counter()
    read = read_text(tmp_path, loops + "python3 train.py --a $i0 --l $i10 --m $i11\n")
    assert final(read) == {"--a": "9000", "--l": "9000", "--m": None}  # 11 x 9000 fit
    assert "stepped through 100000 loop iterations already" in read.unresolved[-1].why
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("loop", [
    'while true; do [ -f /tmp/t ] && s=$((s + 1)); sleep 5; done',
    'f() { return 1; }; until false; do f || s=1; done',
    'while :; do s=1; bash -c "exit 2"; done',
])
def test_an_endless_loop_is_read_once_not_stepped(tmp_path, loop):
    # `while true` with nothing in it that leaves it (a checkpoint poller): each step is the
    # last one again; stepping it to the cap spent seconds of the input's time budget (a
    # poller with a few tests: most of a minute) for the same unknown result
    read = read_text(tmp_path, f"s=0\n{loop}\npython3 train.py --s $s\n")
    (u,) = read.unresolved
    assert u.flag == "--s" and "nothing in it leaves it" in u.why


def test_loop_effects_are_undone_when_it_cannot_be_stepped(tmp_path):
    read = read_text(tmp_path, "A=1; n=0\nfor ((i=0; i<20000; i++)); do A=2; (( n++ )); done\n"
                     "python3 train.py --a $A --n $n --i $i\n")
    assert final(read) == {"--a": None, "--n": None, "--i": None}
    assert all("more than 10000 times" in u.why for u in read.unresolved)


def test_arith_condition_with_unknown_operand_is_conditional(tmp_path):
    read = read_text(tmp_path, "A=()\nfor ((i=0; i<4; i++)); do\n  if (( i < K )); then A+=(0);"
                     " else A+=(1); fi\ndone\nT=0\n(( K > 1 )) && T=1\n"
                     'python3 train.py --freq "[${A[*]}]" --n ${#A[@]} --t $T\n')
    assert final(read) == {"--freq": None, "--n": None, "--t": None}
    why = {u.flag: u.why for u in read.unresolved}
    assert "inside the 'if' at" in why["--freq"] and "K is not set" in why["--freq"]
    assert "K is not set" in why["--t"]
    assert final(read_script(tmp_path / "run.sh", env={"K": "2"})) == {
        "--freq": "[0 0 1 1]", "--n": "4", "--t": "1"}


def test_arith_commands_and_expansions_assign(tmp_path):
    read = read_text(tmp_path, "x=1; ((x+=2)); (( y = x * 2, x++ )); ((0)) || z=no\n"
                     "if (( x++ == 4 )) && (( x == 5 )); then w=yes; fi\n"
                     "python3 train.py --x $x --y $y --z $z --w $w --e $((x++)) --after $x\n")
    assert final(read) == {"--x": "5", "--y": "6", "--z": "no", "--w": "yes", "--e": None,
                           "--after": None}  # $((x++)) is not followed: x is unknown after it


def test_ifs_joins_star_words(tmp_path):
    read = read_text(tmp_path, "A=(a b c)\nX=\"$(IFS=; echo \"${A[*]}\")\"\nV=\"${A[*]}\"\nIFS=:\n"
                     'Y="${A[*]}"\nZ="${A[@]}"\nunset IFS\n'
                     'python3 train.py --x $X --v "$V" --y $Y --z "$Z" --w "${A[*]}" '
                     '--u "$(IFS=,; echo ${A[*]})"\n')
    assert final(read) == {"--x": "abc", "--v": "a b c", "--y": "a:b:c", "--z": "a b c",
                           "--w": "a b c",
                           "--u": None}  # unquoted words split by a changed IFS: not modelled


def test_ten_thousand_iterations_are_fast(tmp_path):
    read_text(tmp_path, "true\n")  # the parser loaded
    start = time.perf_counter()
    read = read_text(tmp_path, "A=()\nfor ((i=0; i<10000; i++)); do\n"
                     "  if (( i % 2 == 0 )); then A+=(0); else A+=(1); fi\ndone\n"
                     "python3 train.py --n ${#A[@]} --last ${A[-1]}\n")
    took = time.perf_counter() - start
    assert final(read) == {"--n": "10000", "--last": "1"}
    assert took < 5  # about 0.2 s


@pytest.mark.parametrize("between", ["( cd /tmp )", "bash -s <<EOF\necho hi\nEOF",
                                     "for i in 1; do break; done"])
def test_an_associative_array_keeps_its_keys_across_a_saved_state(tmp_path, between):
    # a subshell, a here-document script and a stepped loop all save and restore the
    # variables; an associative array must come back with its keys
    read = read_text(tmp_path, f"declare -A TP=([small]=2 [big]=8)\n{between}\n"
                     "python3 train.py --tensor-model-parallel-size ${TP[big]}\n")
    assert final(read) == {"--tensor-model-parallel-size": "8"}


def test_past_the_call_depth_cap_what_may_be_set_is_unknown(tmp_path):
    # bash: TP 40 (40 calls deep); the reader follows 32 calls, so TP is not known (not 32)
    read = read_text(tmp_path, 'TP=0\ngrow() { TP=$((TP + 1)); if [ "$TP" -lt 40 ]; then '
                     'grow; fi; }\ngrow\nE=0\nf() { eval "E=$1"; [ "$1" -lt 40 ] && f '
                     '$(($1 + 1)); }\nf 1\npython3 train.py --tp $TP --e $E --x 1\n')
    assert final(read) == {"--tp": None, "--e": None, "--x": "1"}
    assert "more than 32 calls deep" in read.unresolved[0].why
    read = read_text(tmp_path, "TP=1\nf(){ TP=$((TP+1)); f; }\nf\npython3 train.py --tp $TP\n")
    assert final(read) == {"--tp": None}  # the form: not 32


def test_two_expansions_a_blank_apart_in_double_quotes_keep_the_blank(tmp_path):
    # tree-sitter-bash 0.25.1 starts the second of "$A $B" at the blank: it was read as a
    # variable named "$B" (unknown), and "${A} ${B}" as "41"; checked against bash
    script = tmp_path / "run.sh"
    script.write_text('A=4\nB=1\nX="$A $B"\nY="a$A\t$B $(echo 7) $((1+1)) ${B} $(( A - B ))"\n'
                      'python3 train.py --y "$A $B" --x "$X" --z "$Y" --w "${A} ${B}" '
                      '--v "$A ${Q:-$(( A - B ))}"\n')
    truth = flag_values(bash_launch(script, [], tmp_path))
    assert truth["--y"] == "4 1" and truth["--v"] == "4 3"
    assert {fv.flag: fv.value for fv in read_script(script).argv} == truth
