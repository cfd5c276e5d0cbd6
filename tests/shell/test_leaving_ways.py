"""Ways of a branch that leave (issue 37): after ``if [ -z "$MODEL" ]; then echo usage; exit 1;
fi`` the state is the other way's; a ``return`` joins its way where the function or sourced
file ends; ``a && b || c`` is an if/else; and what the join of ways must not make known
(a function defined in one way, a `local` in one way, a subshell's functions). Each script is
written in the style of slime's and miles' launch scripts and their forks; where bash can run
it here, the launch bash really runs is compared (bash_launch)."""

from __future__ import annotations

import pytest
from support import bash_launch, flag_values
from support import slime_checkout as checkout

from miles_topology.shell.read import read_script

LAUNCH = """\
python3 "${SLIME_ROOT}/train.py" --actor-num-nodes 1 --actor-num-gpus-per-node 8 \\
   --colocate "${MODEL_ARGS[@]}" --tensor-model-parallel-size ${TP} \\
   --context-parallel-size ${CP:-1}
"""


def got(run, args=None) -> dict:
    return {fv.flag: fv.value for fv in read_script(run, positional=args).argv}


# what the scripts test, set for bash (`set -u`); empty unless a test says otherwise
RUN_TIME = ("MODEL", "CKPT", "MODE", "FAST", "DEBUG", "SEQ", "BIG", "SHARE", "LONG",
            "TP_OVERRIDE", "X")


def truth(run, tmp_path, env=None, args=()) -> dict:
    env = {**dict.fromkeys(RUN_TIME, ""), "NNODES": "1", **(env or {})}
    return flag_values(bash_launch(run, list(args), tmp_path, env))


# -- 1. a way that leaves is not joined into what follows -------------------------------------

GUARDS = {
    "if-exit": 'TP=2\nif [ -z "${MODEL}" ]; then\n   echo "usage: MODEL=..." >&2\n   TP=4\n'
               '   exit 1\nfi\n',
    "and-group": 'TP=2\n[ -z "${MODEL}" ] && { echo "MODEL is required"; TP=4; exit 1; }\n',
    "missing-ckpt": 'TP=2\nif [ ! -f "${CKPT}/config.json" ]; '
                    'then\n   echo "missing ${CKPT}"; TP=4; exit 1\nfi\n',
    "or-exit": 'TP=2\ncommand -v ray >/dev/null 2>&1 || { TP=4; exit 1; }\n',
    "die": 'die() { echo "error: $*" >&2; exit 1; }\nTP=2\n'
           '[ -n "${MODEL}" ] || { TP=4; die "MODEL is required"; }\n',
    "elif-else-exit": 'if [ "${MODE}" = small ]; then TP=2\nelif [ "${MODE}" = big ]; '
                      'then TP=2; CP=2\nelse echo "unknown MODE"; TP=8; exit 2\nfi\n',
    "case-exit": 'case "${MODE}" in\n   small) TP=2 ;;\n   *) echo "usage"; TP=8; exit 1 '
                 ';;\nesac\n',
}


@pytest.mark.parametrize("name", GUARDS)
def test_a_guard_that_exits_leaves_the_other_way_s_state(tmp_path, name):
    run = checkout(tmp_path, GUARDS[name] + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] == "2"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    env = {"MODEL": "qwen3-4b", "CKPT": str(ckpt), "MODE": "small"}
    assert truth(run, tmp_path, env)["--tensor-model-parallel-size"] == "2"


KNOWN_GUARDS = {
    "and": 'TP=2\n[ -z "${MODEL:-}" ] && { echo "MODEL is required"; TP=4; exit 1; }\n',
    "if": 'TP=2\nif [ -z "${MODEL:-}" ]; then echo usage; TP=4; exit 1; fi\n',
    "else": 'TP=1\nif [ "${MODE:-}" = small ]; then TP=2\nelif [ "${MODE:-}" = big ]; then '
            'TP=2; CP=2\nelse echo "MODE is small or big"; TP=8; exit 1\nfi\n',
    "case": 'TP=1\ncase "${MODE:-}" in\n   small) TP=2 ;;\n   big) TP=2; CP=2 ;;\n'
            '   *) echo usage; exit 1 ;;\nesac\n',
    "die": 'die() { echo "$*"; exit 1; }\nTP=2\n[ -n "${MODEL:-}" ] || die "need MODEL"\n',
}


@pytest.mark.parametrize("name", KNOWN_GUARDS)
def test_a_guard_known_values_fail_is_passed_as_when_the_script_runs(tmp_path, name):
    # MODEL/MODE unset here (no --env): the guard exits, so bash reaches the launch only
    # the other way; read that way (not: the read ends, nor TP=4 from the exiting way)
    run = checkout(tmp_path, KNOWN_GUARDS[name] + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] == "2"
    for mode in ("small", "big"):
        t = truth(run, tmp_path, {"MODEL": "m", "MODE": mode})
        assert t["--tensor-model-parallel-size"] == "2"

def test_every_way_exits_before_the_launch_means_no_launch(tmp_path):
    run = checkout(tmp_path, 'if [ -n "${1:-}" ]; then exit 0; else exit 1; fi\n' + LAUNCH)
    assert read_script(run).argv == []


def test_a_known_exit_ends_the_read(tmp_path):
    run = checkout(tmp_path, 'TP=2\nexit 0\nTP=4\n' + LAUNCH)
    assert read_script(run).argv == []


def test_an_exit_in_a_subshell_or_a_loop_read_once_does_not_end_the_script(tmp_path):
    run = checkout(tmp_path, 'TP=2\n( exit 1 ) || true\n( TP=4; exit 0 )\n'
                   'for f in $(ls); do [ -e "$f" ] || exit 1; done\n' + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] == "2"
    assert truth(run, tmp_path)["--tensor-model-parallel-size"] == "2"


def test_exit_under_set_e_is_only_the_explicit_one(tmp_path):
    # a failing test under `set -e` may stop bash, but no command's status is inferred:
    # only `exit` drops a way
    run = checkout(tmp_path, 'TP=2\n[ -n "${FAST}" ] && TP=4\n' + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] is None


# -- return: the way goes on after the call -----------------------------------------------

CONF = """\
TP=2
[ -n "${DEBUG}" ] || return 0
TP=4
"""


def test_a_return_in_a_sourced_file_joins_where_the_file_ends(tmp_path):
    run = checkout(tmp_path, 'source "${SCRIPT_DIR}/conf.sh"\n' + LAUNCH)
    (run.parent / "conf.sh").write_text(CONF)
    assert got(run)["--tensor-model-parallel-size"] is None  # 2, or 4 with DEBUG
    assert truth(run, tmp_path)["--tensor-model-parallel-size"] == "2"
    assert truth(run, tmp_path, {"DEBUG": "1"})["--tensor-model-parallel-size"] == "4"


def test_a_return_in_a_function_joins_where_the_call_ends(tmp_path):
    run = checkout(tmp_path, """\
set_parallel() {
   TP=2
   if [ "${1:-}" = long ]; then
      CP=2
      return
   fi
   CP=1
}
set_parallel "${SEQ}"
""" + LAUNCH)
    g = got(run)
    assert g["--tensor-model-parallel-size"] == "2" and g["--context-parallel-size"] is None
    assert got(run, ["x"])["--context-parallel-size"] is None
    for env, cp in (({}, "1"), ({"SEQ": "long"}, "2")):
        assert truth(run, tmp_path, env)["--context-parallel-size"] == cp


def test_a_function_whose_ways_all_return_the_same_keeps_the_value(tmp_path):
    run = checkout(tmp_path, """\
pick_tp() {
   [ -n "${1:-}" ] && { TP=2; return 0; }
   TP=2
}
pick_tp "${BIG}"
""" + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] == "2"


def test_return_outside_a_function_is_refused_by_bash_and_the_read_goes_on(tmp_path):
    run = checkout(tmp_path, 'TP=2\nreturn 0 2>/dev/null\n' + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] == "2"


# -- 2. a && b || c ---------------------------------------------------------------------------

def test_and_or_with_a_fallback_is_an_if_else(tmp_path):
    run = checkout(tmp_path, """\
[ -n "${TP_OVERRIDE}" ] && TP_ARGS="--tensor-model-parallel-size ${TP_OVERRIDE}" || TP_ARGS=""
[[ ${NNODES} -gt 1 ]] && TP=2 || TP=2
[ -n "${LONG}" ] && CP=2 || CP=1
""" + LAUNCH)
    g = got(run)
    assert g["--tensor-model-parallel-size"] == "2" and g["--context-parallel-size"] is None
    for env in ({}, {"NNODES": "2", "LONG": "1"}):
        assert truth(run, tmp_path, env)["--tensor-model-parallel-size"] == "2"


def test_and_or_c_also_runs_when_b_may_fail(tmp_path):
    # b's status is unknown (a command, not an assignment): c may run after it
    run = checkout(tmp_path, 'TP=2\n[ -n "${X}" ] && TP=4 && grep -q x /etc/hostname '
                   '|| TP=8\n' + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] is None
    run = checkout(tmp_path / "b", '[ -n "${X}" ] && TP=2 || TP=2\nCP=2\n'
                   '[ -z "${X}" ] || { echo; exit 1; } && CP=2 || CP=4\n' + LAUNCH)
    assert got(run)["--context-parallel-size"] == "2"


# -- 3. what a join must not make known -------------------------------------------------------

def test_a_function_defined_in_one_way_is_not_known_after(tmp_path):
    run = checkout(tmp_path, """\
TP=2
if [ -n "${BIG}" ]; then
   set_tp() { TP=8; }
fi
set_tp 2>/dev/null || true
""" + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] is None
    assert truth(run, tmp_path)["--tensor-model-parallel-size"] == "2"
    assert truth(run, tmp_path, {"BIG": "1"})["--tensor-model-parallel-size"] == "8"


def test_functions_defined_differently_in_each_way(tmp_path):
    run = checkout(tmp_path, """\
if [ -n "${BIG}" ]; then set_tp() { TP=8; }; else set_tp() { TP=2; }; fi
set_tp
""" + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] is None
    run = checkout(tmp_path / "same", """\
set_tp() { TP=2; }
if [ -n "${BIG}" ]; then CP=2; fi
set_tp
""" + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] == "2"  # the same definition in each way


def test_a_local_in_one_way_gives_back_an_unknown_value(tmp_path):
    run = checkout(tmp_path, """\
TP=2
tune() {
   if [ -n "${1:-}" ]; then local TP=4; else TP=8; fi
}
tune "${FAST}"
""" + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] is None
    assert truth(run, tmp_path)["--tensor-model-parallel-size"] == "8"
    assert truth(run, tmp_path, {"FAST": "1"})["--tensor-model-parallel-size"] == "2"


def test_a_subshell_keeps_its_functions_folder_and_positional_words(tmp_path):
    run = checkout(tmp_path, """\
TP=2
( set_tp() { TP=8; }; cd /; set -- 8 )
set_tp 2>/dev/null || true
P=$(pwd)
TP=${1:-$TP}
""" + LAUNCH)
    assert got(run, [])["--tensor-model-parallel-size"] == "2"
    assert truth(run, tmp_path)["--tensor-model-parallel-size"] == "2"


def test_export_in_one_way_is_unknown_to_a_child_shell(tmp_path):
    run = checkout(tmp_path, """\
TP=2
if [ -n "${SHARE}" ]; then export TP; fi
bash "${SCRIPT_DIR}/child.sh"
""")
    (run.parent / "child.sh").write_text('python3 "$(dirname "$0")/../train.py" '
                                         '--actor-num-nodes 1 --actor-num-gpus-per-node 8 '
                                         '--tensor-model-parallel-size ${TP:-4}\n')
    assert got(run)["--tensor-model-parallel-size"] is None
    assert truth(run, tmp_path)["--tensor-model-parallel-size"] == "4"
    assert truth(run, tmp_path, {"SHARE": "1"})["--tensor-model-parallel-size"] == "2"


def test_an_array_appended_in_one_way_has_its_words_under_the_branch(tmp_path):
    run = checkout(tmp_path, """\
TP=2
EXTRA=(--context-parallel-size 1)
if [ -n "${LONG}" ]; then EXTRA+=(--context-parallel-size 2); fi
N=${#EXTRA[@]}
[ "$N" -gt 2 ] && TP=4
""" + LAUNCH.replace("${CP:-1}", '1 "${EXTRA[@]}"'))
    g = got(run)
    assert g["--tensor-model-parallel-size"] is None
    assert truth(run, tmp_path, {"LONG": "1"})["--tensor-model-parallel-size"] == "4"


def test_case_arms_that_fall_through(tmp_path):
    # `;&` runs the next arm's body too; `;;&` tests the arms after it
    run = checkout(tmp_path, """\
case "${MODE}" in
   small) TP=2 ;&
   medium) TP=4 ;;
   *) TP=8 ;;
esac
case small in
   s*) CP=2 ;;&
   small) CP=4 ;;
esac
""" + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] is None
    assert got(run, ["x"])["--context-parallel-size"] == "4"
    run = checkout(tmp_path / "known", """\
case small in
   small) TP=2 ;&
   medium) TP=4 ;;
esac
case "${MODE}" in
   s*) CP=2 ;;&
   *) ;;
esac
""" + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] == "4"
    assert got(run)["--context-parallel-size"] is None
    for mode, cp in (("small", "2"), ("big", "1")):
        t = truth(run, tmp_path, {"MODE": mode})
        assert t["--tensor-model-parallel-size"] == "4" and t["--context-parallel-size"] == cp



def test_a_here_document_script_keeps_its_functions(tmp_path):
    run = checkout(tmp_path, """\
TP=2
bash -s <<'EOF'
set_tp() { TP=8; }
EOF
set_tp 2>/dev/null || true
""" + LAUNCH)
    assert got(run)["--tensor-model-parallel-size"] == "2"
    assert truth(run, tmp_path)["--tensor-model-parallel-size"] == "2"


@pytest.mark.parametrize("way", [
    "shift",  # the positional words differ between the ways
    "set -- 8",
    'source "${SCRIPT_DIR}/tp8.sh"',  # a source in one way: what it sets is that way's
    "for t in 8; do TP=$t; done",  # a loop stepped through in one way
    'while [ -n "$(ls)" ]; do TP=8; break; done',  # one read as run at run time
    "export TP=8",
])
def test_what_one_way_changes_is_unknown_after(tmp_path, way):
    run = checkout(tmp_path, f"""\
TP=2
if [ -n "${{BIG}}" ]; then {way}; fi
[ "$1" = 2 ] || TP=$1
""" + LAUNCH)
    (run.parent / "tp8.sh").write_text("TP=8\n")
    assert got(run, ["2", "8"])["--tensor-model-parallel-size"] is None
    assert truth(run, tmp_path, {"BIG": "1"}, ["2", "8"])["--tensor-model-parallel-size"] == "8"


def test_a_pipeline_s_commands_are_subshells(tmp_path):
    # `{ ...; exit 1; } | tee` exits only its subshell; what the first command sets is gone;
    # what the last one sets is unknown (a subshell, or this shell under `shopt -s lastpipe`)
    run = checkout(tmp_path, """\
TP=2
{ echo "starting"; TP=8; exit 1; } | tee /dev/null || true
{ CP=2; echo; } | cat
echo 4 | read -r CP
""" + LAUNCH)
    g = got(run)
    assert g["--tensor-model-parallel-size"] == "2" and g["--context-parallel-size"] is None
    t = truth(run, tmp_path)
    assert t["--tensor-model-parallel-size"] == "2" and t["--context-parallel-size"] == "1"


def test_a_call_of_a_function_defined_in_each_way_runs_each_definition(tmp_path):
    run = checkout(tmp_path, """\
if [ -n "${LONG}" ]; then
   set_parallel() { TP=2; CP=2; }
else
   set_parallel() { TP=2; CP=1; }
fi
set_parallel
""" + LAUNCH)
    g = got(run)
    assert g["--tensor-model-parallel-size"] == "2" and g["--context-parallel-size"] is None
    for env, cp in (({}, "1"), ({"LONG": "1"}, "2")):
        assert truth(run, tmp_path, env)["--context-parallel-size"] == cp
    run = checkout(tmp_path / "launch", """\
TP=2
if [ -n "${LONG}" ]; then train() { CP=2; LAUNCH_LINE; }; else train() { LAUNCH_LINE; }; fi
train
""".replace("LAUNCH_LINE", LAUNCH.replace("\\\n", "").strip()))
    assert got(run)["--tensor-model-parallel-size"] == "2"  # the launch in each definition
