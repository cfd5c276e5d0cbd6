"""Mutated launch scripts: the reader answers or raises ScriptReadError, never anything else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutation import mutated
from support import SCRIPTS

from miles_topology.shell import ScriptRead, ScriptReadError, read_script

FIXTURES = SCRIPTS
TEXTS = [p.read_text() for p in sorted(FIXTURES.glob("*.sh")) + sorted(
    (FIXTURES / "idioms").glob("*.sh"))]
NASTY = ["'", '"', "{", "}", "(", ")", "$((", "$(", "${", "`", "\\", "\\\n", "\n", "#", ";", ";;",
         "|", "&&", "<<EOF\n", "[[", "]]", "fi", "done", "esac", "then", "=(", "$", "!", "*", "\0",
         "$((1/0))", "${X:-${Y:?", "if true; then", "case x in", "\t", " ", "<<<", " <<< \"$X\"",
         "read -ra A <<< ", "mapfile -t A < <(echo --a 1)\n", "eval \"A=(--b 2)\"\n",
         "${A[@]} \\\n", "é", "\\ \n", "X=\"$X$X\"\n", "{1..3}", "{a,b}", "{0..9..2}",
         "\r", "\r\n", "set -- --a 1\n", "shift\n", "local X=1\n", "$#", "\"$@\"",
         "while getopts 'a:' o; do X=$OPTARG; done\n", "read -r -d '' X <<'EOF'\n",
         "cat > /tmp/f.$$ <<EOF\n", "source /tmp/f.$$\n", "echo --c 3 > f\n",
         "$(echo 0,1 | tr ',' '\\n' | wc -l)", "${X:-$((A - B))}", "f() { f; }; f\n"]


MUTATED = mutated(TEXTS, NASTY, 1, 6)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder beside which the fixtures' model files resolve, as for the real scripts."""
    d = tmp_path_factory.mktemp("fuzz")
    os.symlink(FIXTURES / "models", d / "models")
    return d


def check(workdir: Path, text: str, env=None) -> None:
    path = workdir / "run.sh"
    path.write_text(text, errors="surrogateescape")
    try:
        read = read_script(path, env=env)
    except ScriptReadError as e:
        assert str(e).startswith(f"{path}") or "models/" in str(e)
        return
    assert isinstance(read, ScriptRead)
    read.flags()
    read.values()


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=MUTATED)
def test_mutated_fixture_scripts(workdir, text):
    check(workdir, text)


@pytest.mark.slow
@settings(max_examples=800, deadline=None)
@given(text=st.lists(st.sampled_from(NASTY + ["--a", "1", "X=", "A=(", ")", "python3 train.py",
                                               "$X", "${A[@]}", "source models/qwen3-4B.sh"]),
                     max_size=40).map(" ".join),
       env=st.dictionaries(st.sampled_from(["X", "A", "1", "Y"]), st.text(max_size=5), max_size=3))
def test_random_shell_soup(workdir, text, env):
    check(workdir, text, env)


def test_deep_nesting_is_a_read_error(workdir):
    for text in ["X=" + "$(" * 500, "X=$((" + "(" * 2000 + "1" + ")" * 2000 + "))",
                 "X=" + "${A:-" * 500, "if true; then " * 300,
                 "X=" + "$(echo " * 300 + "1" + ")" * 300, "{ " * 400 + "true; " + "} " * 400,
                 "eval " + "'eval " * 50 + "x=1" + "'" * 50]:
        check(workdir, text + "\npython3 train.py --a 1\n")
