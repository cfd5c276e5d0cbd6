"""Bounded work: absurd sizes answer at once (bounds far above the normal milliseconds)."""

import os
import time

import pytest
from support import ROOT

from miles.plan import plan_text
from miles.train import main
from miles_topology import Topology, TopologyError
from miles_topology.model.checks import _divisors
from miles_topology.reporting.show import text_map

HUGE = 10**30
LIMIT_S = 2.0


def timed(fn):
    start = time.perf_counter()
    out = fn()
    assert time.perf_counter() - start < LIMIT_S
    return out


def build(argv):
    try:
        return Topology.from_flags(argv)
    except TopologyError as e:
        return e


@pytest.mark.parametrize("argv,code", [
    (["--actor-num-nodes", str(HUGE), "--colocate"], None),
    (["--actor-num-nodes", "100000000", "--tensor-model-parallel-size", "3", "--colocate"],
     "dense-grid-divisibility"),
    (["--tensor-model-parallel-size", str(HUGE + 1), "--colocate"], "dense-grid-divisibility"),
    (["--num-layers", str(HUGE), "--pipeline-model-parallel-size", "3", "--colocate"],
     "layers-not-divisible-by-pp"),
    (["--num-layers", str(HUGE), "--num-experts", "8", "--use-rollout-routing-replay",
      "--colocate"], None),
    (["--rollout-num-gpus", str(HUGE), "--rollout-num-gpus-per-engine", "3",
      "--actor-num-gpus-per-node", "5"], "rollout-gpus-not-multiple-of-engine"),
    (["--rollout-num-gpus", str(HUGE), "--rollout-num-gpus-per-engine", "4",
      "--actor-num-gpus-per-node", "6", "--num-gpus-per-node", "8"], "engine-straddles-nodes"),
    (["--num-experts", str(HUGE + 7), "--expert-model-parallel-size", "2", "--colocate"],
     "experts-not-divisible-by-ep"),
    (["--num-attention-heads", str(HUGE + 7), "--tensor-model-parallel-size", "2",
      "--sequence-parallel", "--colocate"], "heads-not-divisible-by-tp"),
    (["--actor-num-nodes", str(HUGE), "--actor-num-gpus-per-node", "6",
      "--tensor-model-parallel-size", "4", "--num-gpus-per-node", "6", "--colocate"], None),
])
def test_check_answers_at_once(argv, code):
    got = timed(lambda: build(argv))
    if code is None:
        assert isinstance(got, Topology)
    else:
        assert isinstance(got, TopologyError) and code in got.codes


def test_tp_groups_crossing_nodes_found_by_arithmetic():
    topo = timed(lambda: Topology.from_flags([
        "--actor-num-nodes", str(HUGE), "--actor-num-gpus-per-node", "6",
        "--num-gpus-per-node", "6", "--tensor-model-parallel-size", "4", "--colocate"]))
    w = next(w for w in topo.warnings if w.code == "tp-group-crosses-nodes")
    assert "spans 2 nodes of 6 GPUs" in w.message
    small = Topology.from_flags(["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "6",
                                 "--num-gpus-per-node", "6", "--tensor-model-parallel-size", "4",
                                 "--colocate"])
    # the same verdict as listing the groups: TP group 1 = ranks 4-7 = node 0 GPUs 4-5, node 1
    assert {small.placement(r)[0] for r in small.rank_groups("tp")[1]} == {0, 1}
    assert "tp-group-crosses-nodes" in [w.code for w in small.warnings]


def test_divisors_and_node_fix_are_bounded_and_right():
    assert _divisors(360) == [d for d in range(1, 361) if 360 % d == 0]
    big = timed(lambda: _divisors(HUGE))
    assert 2 in big and HUGE in big and HUGE // 2 in big
    # nodes must make 8 * nodes divisible by lcm(dense 16, expert 16): the next is 4
    with pytest.raises(TopologyError) as info:
        Topology(nodes=3, gpus_per_node=8, tp=16, colocate=True)
    assert "or 4 nodes of 8 GPUs (--actor-num-nodes)" in info.value.problems[0].fix


def test_dry_run_and_show_of_a_huge_job_print_sizes_not_a_traceback(capsys):
    topo = Topology.from_flags(["--actor-num-nodes", "100000000", "--colocate"])
    text = timed(lambda: plan_text(topo))
    assert "per-GPU plan not listed: 800000000 GPUs" in text
    assert "GPU map not drawn" in timed(lambda: text_map(topo))
    layers = Topology.from_flags(["--num-layers", str(HUGE), "--colocate"])
    assert "layers is more than" in timed(lambda: plan_text(layers))
    assert timed(lambda: main(["--dry-run", "--actor-num-nodes", str(HUGE), "--colocate"])) == 0
    assert "per-GPU plan not listed" in capsys.readouterr().out


# -- the script reader: bounded memory on any input, measured on a child process

RSS_MB = 300


def _words_file(path):
    with open(path, "w") as f:  # 40 MB of words
        line = "xxxxxxx " * 100 + "\n"
        for _ in range((40 << 20) // len(line) + 1):
            f.write(line)


SCRIPTS = {
    "command-of-a-million-words": (lambda p: p.write_text(
        "python3 train.py --colocate " + " ".join(f"w{i}" for i in range(10**6)) + "\n"), 2),
    "forty-mb-of-words": (_words_file, 2),
    "200k-launch-lines": (lambda p: p.write_text("".join(
        f"python3 train.py --tensor-model-parallel-size {i % 8 + 1}\n"
        for i in range(200_000))), 2),
    "command-just-under-the-bound": (lambda p: p.write_text(
        "python3 train.py --colocate --num-layers 8 " + " ".join(f"w{i}" for i in range(45_000))
        + "\n"), 0),
    "brace-sequences-held": (lambda p: p.write_text("".join(
        f"A{i}=({{1..100000}})\n" for i in range(2000)) +
        "python3 train.py --actor-num-nodes 1 --colocate\n"), 2),
    "big-array-launched-in-a-loop": (lambda p: p.write_text(
        'A=({1..100000})\nfor i in {1..10000}; do python3 train.py "${A[@]}"; done\n'), 2),
    "megabyte-values-by-eval": (lambda p: p.write_text(
        'X=$(printf "%01000000d" 0)\nfor i in {1..5000}; do eval "V$i=\\"\\$X\\""; done\n'
        "python3 train.py --actor-num-nodes 1 --colocate --num-layers 8\n"), None),
}


# The checker's own peak RSS: VmHWM of its process, written at exit. Not ru_maxrss from
# wait4: Linux folds the pre-exec memory (a copy of the forking parent's, here a pytest that
# may hold torch and Ray) into the child's maxrss at exec, so a big parent reads as a big child.
_PEAK = ("import atexit, os, runpy, sys\n"
         "def _peak():\n"
         "    with open('/proc/self/status') as f, open(os.environ['PEAK_FILE'], 'w') as out:\n"
         "        out.write(next(x for x in f if x.startswith('VmHWM:')).split()[1])\n"
         "atexit.register(_peak)\n"
         "sys.argv = ['miles-topology', *sys.argv[1:]]\n"
         "runpy.run_module('miles_topology', run_name='__main__')\n")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_reader_memory_is_bounded(name, tmp_path):
    import subprocess
    import sys

    make, want = SCRIPTS[name]
    path = tmp_path / "run.sh"
    make(path)
    err, peak = tmp_path / "err", tmp_path / "peak"
    start = time.perf_counter()
    with open(err, "w") as e:
        rc = subprocess.run([sys.executable, "-c", _PEAK, "check", "--format", "json",
                             str(path)], stdout=subprocess.DEVNULL, stderr=e, timeout=300,
                            cwd=str(ROOT),
                            env={**os.environ, "PEAK_FILE": str(peak)}).returncode
    took = time.perf_counter() - start
    peak_kb = int(peak.read_text())
    assert peak_kb < RSS_MB * 1024, f"{name}: peak RSS {peak_kb >> 10} MB"
    assert took < 120, f"{name}: {took:.0f} s"
    assert rc == want if want is not None else rc in (0, 2)
    if rc == 2:  # the same clear message: one line with a fix, no traceback
        lines = err.read_text().strip().splitlines()
        assert len(lines) == 1 and "Fix:" in lines[0] and "Traceback" not in lines[0]


def test_the_peak_is_the_checker_s_own_and_catches_a_big_one(tmp_path):
    """The measurement reads a child that really grows (400 MB) as big, and a small checker
    started from a big parent as small (ru_maxrss would say the parent's size)."""
    import subprocess
    import sys

    peak = tmp_path / "peak"
    grow = _PEAK.replace("runpy.run_module('miles_topology', run_name='__main__')",
                         "x = bytearray(400 << 20)")
    subprocess.run([sys.executable, "-c", grow], check=True, timeout=60,
                   env={**os.environ, "PEAK_FILE": str(peak)})
    assert int(peak.read_text()) > 380 * 1024
    ballast = bytearray(600 << 20)  # this process is big now; the checker it starts is not
    (tmp_path / "run.sh").write_text("python3 train.py --colocate\n")
    subprocess.run([sys.executable, "-c", _PEAK, "check", str(tmp_path / "run.sh")],
                   stdout=subprocess.DEVNULL, timeout=60, cwd=tmp_path,
                   env={**os.environ, "PEAK_FILE": str(peak)})
    assert int(peak.read_text()) < RSS_MB * 1024
    del ballast


def test_script_reader_time_is_linear_in_words(tmp_path):
    from miles_topology.shell import read_script

    def cost(n: int) -> float:
        path = tmp_path / f"run{n}.sh"
        path.write_text("python3 train.py " + " ".join(f"--f{i} {i}" for i in range(n)) + "\n")
        start = time.perf_counter()
        assert len(read_script(path).argv) == n
        return time.perf_counter() - start
    small, big = cost(2_000), cost(20_000)
    assert big < 25 * small  # 10x the words; quadratic would be ~100x
