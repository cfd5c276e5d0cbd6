"""textfilters against the real coreutils/grep/sed/awk: each pipeline runs under bash (C locale)
and in Python; stdout and exit status must be equal. The real programs are the ground truth."""

import shlex
import shutil
import subprocess

import pytest

from miles_topology.reading.textfilters import Ran, run_pipeline

TOPO = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\n"
    "GPU0\t X \tNV18\tNV18\tNV18\t0-47\n"
    "GPU1\tNV18\t X \tNV18\tNV18\t0-47\n"
    "GPU2\tNV18\tNV18\t X \tNV18\t48-95\n"
    "GPU3\tNV18\tNV18\tNV18\t X \t48-95\n")
GPUS = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:04d})\n" for i in range(4))
CSV = "index, name, memory.total [MiB]\n0, NVIDIA H100, 81559 MiB\n1, NVIDIA H100, 81559 MiB\n"

CASES = [
    ([["echo", "0,1,2,3"], ["tr", ",", "\n"], ["wc", "-l"]], ""),
    ([["echo", "-n", "a b"], ["wc", "-c"]], ""),
    ([["printf", "%s\n", "a", "b", "c"], ["wc", "-l"]], ""),
    ([["printf", "%-4s|%3d\n", "x", "7", "yy", "12"]], ""),
    ([["printf", "no conversion\n", "extra"]], ""),
    ([["grep", "-o", "NV[0-9][0-9]*"], ["wc", "-l"]], TOPO),
    ([["grep", "-c", "NV18"]], TOPO),
    ([["grep", "-c", "NVLINK"]], TOPO),
    ([["grep", "-q", "NV"]], TOPO),
    ([["grep", "-v", "GPU0"]], TOPO),
    ([["grep", "-E", "^GPU[0-9]+"], ["cut", "-f", "1"]], TOPO),
    ([["grep", "^GPU[0-9]\\+"], ["cut", "-f1,3"]], TOPO),
    ([["grep", "-iw", "gpu0"]], TOPO),
    ([["grep", "-m", "2", "GPU"]], TOPO),
    ([["grep", "-x", "GPU"]], "GPU\nGPUS\n"),
    ([["grep", "-F", "a.b"]], "a.b\naxb\n"),
    ([["wc", "-l"]], GPUS),
    ([["head", "-n", "1"], ["awk", "{print $4}"]], GPUS),
    ([["head", "-1"]], GPUS),
    ([["tail", "-n", "2"]], GPUS),
    ([["tail", "-n", "+2"], ["wc", "-l"]], CSV),
    ([["tail", "-n", "+2"], ["cut", "-d", ",", "-f", "2"], ["sort"], ["uniq", "-c"]], CSV),
    ([["awk", "-F", ", ", "{print $2}"]], CSV),
    ([["awk", "NR==2{print $1, $NF}"]], CSV),
    ([["awk", "END {print NR}"]], CSV),
    ([["cut", "-c", "1-3"]], GPUS),
    ([["cut", "-d", ":", "-f", "2-"]], GPUS),
    ([["sort", "-n", "-r"]], "3\n10\n2\n"),
    ([["sort", "-u"]], "b\na\nb\n"),
    ([["uniq", "-d"]], "a\na\nb\n"),
    ([["tr", "-d", " "]], "a b c\n"),
    ([["tr", "a-z", "A-Z"]], "gpu\n"),
    ([["tr", "-s", " "]], "a    b\n"),
    ([["tr", "[:lower:]", "[:upper:]"]], "h100\n"),
    ([["sed", "s/NVIDIA //"]], GPUS),
    ([["sed", "-E", "s/GPU ([0-9]+):.*/\\1/"]], GPUS),
    ([["sed", "s/a/b/g"]], "aaa\n"),
    ([["xargs"]], "  4 \n"),
    ([["cat"], ["wc", "-w"]], "a b\nc\n"),
    ([["wc", "-l", "-w"]], "a b\nc\n"),
    ([["echo", "x"], ["grep", "y"]], ""),
    ([["head", "-c", "3"]], "abcdef"),
    ([["seq", "16", "8", "64"]], ""),
    ([["seq", "3"], ["wc", "-l"]], ""),
    ([["seq", "5", "-2", "-1"]], ""),
    ([["seq", "4", "2"]], ""),
    ([["seq", "-2", "1"]], ""),
    ([["seq", "0"]], ""),
    ([["seq", "1", "0", "3"]], ""),
    ([["wc", "-l"]], "no trailing newline"),
]


def _bash(commands, stdin):
    line = " | ".join(" ".join(shlex.quote(w) for w in argv) for argv in commands)
    p = subprocess.run(["bash", "-c", line], input=stdin, capture_output=True, text=True,
                       env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}, timeout=30)
    return Ran(p.stdout, p.returncode)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("commands,stdin", CASES, ids=[" | ".join(c[0] for c in cmds)
                                                       for cmds, _ in CASES])
def test_pipeline_equals_the_real_programs(commands, stdin):
    assert run_pipeline(commands, stdin) == _bash(commands, stdin)


@pytest.mark.parametrize("commands", [
    [["nvidia-smi"]],                       # a program, not a filter
    [["echo", "x"], ["python3", "-c", "print(1)"]],
    [["cat", "/etc/hostname"]],             # reads a file
    [["grep", "x", "file.txt"]],
    [["wc", "--bytes"]],                    # long options are not modelled
    [["sed", "-n", "2p"]],
    [["awk", "{s+=$1} END {print s}"]],
    [["echo", "-e", "a\\tb"]],
    [["xargs", "rm"]],
    [["seq", "-s", ",", "3"]],
    [["seq", "0.5", "2"]],
])
def test_what_is_not_modelled_is_unknown(commands):
    assert run_pipeline(commands, "1\n2\n") is None


def test_a_wrong_filter_would_be_caught():
    """The comparison catches a filter that miscounts: a wc that counts lines by split()."""
    stdin = "no trailing newline"
    real = _bash([["wc", "-l"]], stdin)
    wrong = Ran(f"{len(stdin.splitlines())}\n", 0)
    assert real != wrong and run_pipeline([["wc", "-l"]], stdin) == real


def test_output_is_bounded():
    assert run_pipeline([["printf", "%s\n", *["x" * 1000] * 2000]]) is None
