"""The one gate for every path an input names (miles_topology/reading/gate.py, issue 33 item 1).

A CI runner's workspace, faked in a scratch folder: a HOME holding fake secrets (.netrc,
.ssh, .config/gh, the Hugging Face token cache), the pull request's checkout (a git work tree
whose .git/config holds a token) and another repository beside it. Each attack class is held
(the secret never reaches the output, the file is not opened or written), and its harmless
twin inside the checkout still reads with its values known.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from miles_topology.cli import main
from miles_topology.reading import gate

SECRET = "fake-secret-gate-0123456789"
LAUNCH = "python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --num-layers 4"


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """(home, repo, other): the fake runner's HOME, the checkout under test, another repo."""
    home = tmp_path / "home"
    for rel in (".netrc", ".ssh/id_rsa", ".config/gh/hosts.yml", ".cache/huggingface/token",
                ".docker/config.json", ".git-credentials"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(f"tp: 1\ntoken: {SECRET}\n")
    repo, other = home / "work" / "repo", home / "work" / "other"
    for r in (repo, other):
        (r / ".git").mkdir(parents=True)
        (r / ".git" / "config").write_text(f"[remote]\n url = https://x:{SECRET}@github.com\n")
        (r / "scripts").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(repo)
    gate._root_of_folder.cache_clear()
    return home, repo, other


def check(capsys, *args) -> tuple[int, str]:
    code = main(["check", "--format", "json", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out + err


def values(out: str) -> dict:
    got = json.loads(out)
    return (got[0] if isinstance(got, list) else got)["topology"] or {}


# ---------------------------------------------------------------- the gate itself


def test_admit_resolves_links_and_stays_in_the_roots(ws):
    home, repo, other = ws
    (repo / "scripts" / "m.sh").write_text("A=1\n")
    (repo / "scripts" / "in.sh").symlink_to("m.sh")  # the harmless twin: a link inside
    (repo / "scripts" / "out.sh").symlink_to(other / ".git" / "config")
    (repo / "cfg").symlink_to("../..")  # to HOME
    roots = (repo,)
    assert gate.read_text(repo / "scripts" / "in.sh", roots) == "A=1\n"
    for bad in (repo / "scripts" / "out.sh", repo / "cfg" / ".netrc", home / ".netrc",
                repo / ".." / "other" / "scripts"):
        with pytest.raises((gate.Refused, OSError)):
            gate.read_text(bad, roots)
    with pytest.raises(gate.Refused) as e:
        gate.read_text(repo / "cfg" / ".netrc", roots)
    assert e.value.kind == "outside" and SECRET not in str(e.value)


@pytest.mark.parametrize("rel", [".git/config", "sub/.ssh/id_rsa", "a/.netrc",
                                 "x/.cache/huggingface/token", "y/.config/gh/hosts.yml",
                                 "z/.docker/config.json", "w/.aws/credentials"])
def test_credential_and_vcs_names_are_refused_at_any_depth(ws, rel):
    _, repo, _ = ws
    f = repo / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(SECRET)
    with pytest.raises(gate.Refused) as e:
        gate.read_text(f, (repo,))
    assert e.value.kind == "hidden"


def test_ordinary_dot_folders_and_the_tools_temp_files_are_read(ws):
    _, repo, _ = ws
    for rel in (".github/workflows/run.sh", "scripts/.run.sh.fix-abc.py",
                ".config-not/x.sh", "scripts/.run.sh.stdin-1.sh", ".cache/pip-notes.sh"):
        f = repo / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("A=1\n")
        assert gate.read_text(f, (repo,)) == "A=1\n", rel


def test_only_bounded_regular_files(ws):
    _, repo, _ = ws
    fifo = repo / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(gate.Refused) as e:
        gate.read_text(fifo, (repo,))  # would block on a FIFO: refused before opening
    assert e.value.kind == "type"
    big = repo / "big.yaml"
    big.write_text("a: 1\n" * 1000)
    with pytest.raises(gate.Refused) as e:
        gate.read_text(big, (repo,), limit=100)
    assert e.value.kind == "size"
    with pytest.raises(gate.Refused):
        gate.read_text("/dev/stdin", (Path("/dev"),))


def test_root_is_never_home_or_slash(ws):
    home, repo, _ = ws
    (home / "run.sh").write_text(LAUNCH)
    assert gate.root_of(home / "run.sh") == home / "run.sh"  # the file alone
    assert gate.root_of(repo / "scripts" / "x.sh") == repo
    loose = home / "work" / "loose"
    loose.mkdir()
    assert gate.root_of(loose / "x.sh") == loose  # no checkout: its own folder


def test_a_user_root_that_is_the_checkout_is_named_once(ws):
    # `check --path . run.py` in the checkout: a refusal listed the checkout twice
    home, repo, _ = ws
    token = gate.USER.set(())
    try:
        gate.add_user_roots([repo, home / "work" / "other"])
        with gate.checking(repo / "scripts" / "x.sh") as roots:
            assert roots == (repo, home / "work" / "other")
            with pytest.raises(gate.Refused) as e:
                gate.check_path(home / ".netrc")
        assert str(e.value).count(str(repo)) == 1
    finally:
        gate.USER.reset(token)


def test_an_absolute_path_is_looked_up_by_its_tail_never_above_the_root(ws):
    home, repo, _ = ws
    (repo / "scripts" / "models").mkdir()
    (repo / "scripts" / "models" / "m.sh").write_text("A=1\n")
    got = gate.by_tail("/root/miles/scripts/models/m.sh", (repo,), str(repo / "scripts"))
    assert got == repo / "scripts" / "models" / "m.sh"
    # ~/.netrc by its tail: not inside the checkout, and never looked for above it
    assert gate.by_tail(str(home / ".ssh" / "id_rsa"), (repo,), str(repo / "scripts")) is None


def test_reread_only_what_the_gate_admitted(ws):
    home, repo, _ = ws
    f = repo / "scripts" / "ok.sh"
    f.write_text("A=1\n")
    assert gate.reread(home / ".netrc") is None
    gate.admit(f, (repo,))
    assert gate.reread(f) == "A=1\n"


# ---------------------------------------------------------------- bash scripts


def test_sourced_credentials_are_not_read_through_parent_folders(ws, capsys):
    home, repo, _ = ws
    script = repo / "scripts" / "run.sh"
    script.write_text("source .netrc\nsource .config/gh/hosts.yml\nsource ../../../.netrc\n"
                      f"source {home}/.netrc\nsource .git/config\nsource cfg/.netrc\n"
                      f"{LAUNCH} --tensor-model-parallel-size 2\n")
    (repo / "scripts" / "cfg").symlink_to("../../..")
    code, out = check(capsys, script)
    assert SECRET not in out and code == 0
    assert values(out)["tp"] == 2


def test_sourced_file_inside_the_checkout_still_reads(ws, capsys):
    _, repo, _ = ws
    (repo / "scripts" / "models").mkdir()
    (repo / "scripts" / "models" / "m.sh").write_text("TP=(--tensor-model-parallel-size 2)\n")
    (repo / "models").symlink_to("scripts/models")  # a link that stays inside
    script = repo / "scripts" / "run.sh"
    script.write_text('source "$(dirname "$0")/models/m.sh"\nsource ../models/m.sh\n'
                      "source /root/miles/scripts/models/m.sh\n"
                      f'{LAUNCH} "${{TP[@]}}"\n')
    code, out = check(capsys, script)
    assert code == 0 and values(out)["tp"] == 2
    assert "sourced-from-checkout" in out  # the absolute one, by its tail in the checkout


def test_topology_outside_the_checkout_is_unknown_not_read(ws, capsys):
    home, repo, _ = ws
    script = repo / "scripts" / "run.sh"
    script.write_text(f"{LAUNCH} --topology ../../.netrc\n")
    code, out = check(capsys, script)
    assert SECRET not in out and code == 0  # the input is still judged
    (u,) = json.loads(out)["unresolved"]
    assert u["flag"] == "--topology" and "outside the input's checkout" in u["why"]
    (repo / "topo.yaml").write_text("tp: 2\n")  # the twin: a YAML in the checkout
    script.write_text(f"{LAUNCH} --topology topo.yaml\n")
    code, out = check(capsys, script)
    assert code == 0 and values(out)["tp"] == 2


def test_topology_fifo_or_device_never_blocks(ws):
    _, repo, _ = ws
    os.mkfifo(repo / "t.yaml")
    script = repo / "scripts" / "run.sh"
    script.write_text(f"{LAUNCH} --topology t.yaml\n{LAUNCH} --topology /dev/stdin\n")
    for _ in range(2):
        out = subprocess.run([sys.executable, "-m", "miles_topology", "check", str(script)],
                             capture_output=True, text=True, timeout=60, cwd=repo,
                             stdin=subprocess.PIPE)  # a stdin nobody writes: would block
        assert "Traceback" not in out.stderr and out.returncode in (0, 1, 2)
        script.write_text(f"{LAUNCH} --topology /dev/stdin\n")


def test_yaml_channel_outside_the_checkout_is_not_read(ws, capsys):
    _, repo, _ = ws
    script = repo / "scripts" / "run.sh"
    script.write_text(f"{LAUNCH} --custom-config-path ../../../.netrc\n")
    code, out = check(capsys, script)
    assert SECRET not in out
    (repo / "scripts" / "cfg.yaml").write_text("tensor_model_parallel_size: 2\n")
    script.write_text(f"{LAUNCH} --custom-config-path scripts/cfg.yaml\n")
    code, out = check(capsys, script)
    assert SECRET not in out and "custom-config-unread" not in out


def test_helper_gets_no_folder_outside_the_checkout(ws, capsys):
    home, repo, _ = ws
    script = repo / "scripts" / "run.sh"
    script.write_text(f'cd {home}\nexport PYTHONPATH={home}\n'
                      'TP=$(python3 -c "print(open(\'.netrc\').read())")\n'
                      f"{LAUNCH} --tensor-model-parallel-size \"$TP\"\n")
    code, out = check(capsys, script)
    assert SECRET not in out
    (repo / "scripts" / "tp.txt").write_text("2\n")  # the twin: its own folder, readable
    script.write_text(f'cd {repo}/scripts\n'
                      'TP=$(python3 -c "print(open(\'tp.txt\').read().strip())")\n'
                      f"{LAUNCH} --tensor-model-parallel-size \"$TP\"\n")
    code, out = check(capsys, script)
    if "sandbox" in out and "refus" in out:
        pytest.skip("the launcher sandbox is not available on this machine")
    assert code == 0 and values(out)["tp"] == 2


def test_helper_program_outside_the_checkout_is_not_run(ws, capsys):
    home, repo, _ = ws
    (home / "evil.py").write_text(f"print('{SECRET}')\n")
    script = repo / "scripts" / "run.sh"
    script.write_text(f'TP=$(python3 {home}/evil.py)\n{LAUNCH} --tensor-model-parallel-size '
                      '"$TP"\n')
    code, out = check(capsys, script)
    assert SECRET not in out and "outside the input's checkout" in out


# ---------------------------------------------------------------- folder walk, writes


def test_walk_skips_entries_linked_out_of_the_checkout(ws, capsys):
    home, repo, other = ws
    (repo / "x.topology.yaml").symlink_to(home / ".netrc")
    (repo / "sub").mkdir()
    (repo / "sub" / "real.topology.yaml").write_text("tp: 2\nnodes: 1\n")
    (repo / "y.topology.yaml").symlink_to("sub/real.topology.yaml")  # the twin: inside
    code, out = check(capsys, ".")
    assert SECRET not in out
    got = json.loads(out)
    assert [v["path"] for v in got] == ["./sub/real.topology.yaml", "./y.topology.yaml"]
    assert all(v["topology"]["tp"] == 2 for v in got)


@pytest.mark.parametrize("name,body", [
    ("run.sh", f"#!/bin/bash\n{LAUNCH} --tensor-model-parallel-size {SECRET}\n"),
    ("launch.py", "import subprocess\nsubprocess.run(['python3', 'train.py', "
                  f"'--num-layers', '4', '--tensor-model-parallel-size', '{SECRET}'])\n"),
    ("t.topology.yaml", f"nodes: 1\ntp: {SECRET}\n")])
def test_a_named_input_linked_out_of_the_checkout_is_not_read(ws, capsys, name, body):
    """A file named on the command line is a pull request's too (`check scripts/run.sh` in
    a workflow, the file swapped for a link to the runner's secrets): a link out of its
    checkout is refused as in a walk, and nothing of the target is printed; a link to a file
    inside it is read (the value it sets is printed: so would the secret be, unguarded)."""
    home, repo, other = ws
    target = home / ".aws" / name
    target.parent.mkdir()
    target.write_text(body)
    (repo / "scripts" / name).symlink_to(target)
    code, out = check(capsys, f"scripts/{name}")
    assert code == 2 and SECRET not in out and "outside the input's checkout" in out, out
    (repo / "inside").mkdir()
    (repo / "inside" / name).write_text(body.replace(SECRET, "public-value"))
    (repo / "scripts" / name).unlink()
    (repo / "scripts" / name).symlink_to(repo / "inside" / name)
    code, out = check(capsys, f"scripts/{name}")
    assert "outside the input's checkout" not in out and "public-value" in out, out


def test_fix_never_writes_through_a_link_out_of_the_checkout(ws, capsys):
    _, repo, other = ws
    victim = other / "scripts" / "run.sh"
    text = f"{LAUNCH} --tensor-model-parallel-size 2 --sglang-cuda-graph-bs 1\n"
    victim.write_text(text)
    (repo / "scripts" / "run.sh").symlink_to(victim)
    main(["check", "--fix", "scripts"])
    capsys.readouterr()
    assert victim.read_text() == text


def test_migrate_never_writes_through_a_dangling_link(ws, capsys):
    home, repo, _ = ws
    script = repo / "scripts" / "run.sh"
    script.write_text(f"{LAUNCH} --tensor-model-parallel-size 2\n")
    target = home / "planted.yaml"
    (repo / "scripts" / "run.topology.yaml").symlink_to(target)  # dangling, points out
    main(["migrate", "--write", str(script)])
    _, err = capsys.readouterr()
    assert not target.exists() and "dangling" in err
    (repo / "scripts" / "run.topology.yaml").unlink()  # the twin: written beside it
    assert main(["migrate", "--write", str(script)]) == 0
    capsys.readouterr()
    assert (repo / "scripts" / "run.topology.yaml").is_file()


def test_fork_sources_linked_out_of_the_checkout_are_not_read(ws):
    from miles_topology.reading.stack import _read_under

    home, repo, _ = ws
    pkg = repo / "miles" / "utils"
    pkg.mkdir(parents=True)
    (pkg / "arguments.py").symlink_to(home / ".netrc")
    assert _read_under(repo, [pkg / "arguments.py"]) is None
    (pkg / "arguments.py").unlink()
    (pkg / "arguments.py").write_text("X = 1\n")
    assert _read_under(repo, [pkg / "arguments.py"]) == "X = 1\n"


# ---------------------------------------------------------------- Landlock rules


def test_landlock_rules_never_follow_a_link_out_and_hide_names_at_any_depth(ws):
    from miles_topology.pylaunch import isolate

    home, repo, _ = ws
    (repo / "cfg").symlink_to("../..")  # a committed link to HOME
    (repo / "a" / "home" / ".ssh").mkdir(parents=True)
    (repo / "a" / "home" / ".ssh" / "id").write_text(SECRET)
    (repo / "a" / "home" / ".cache" / "huggingface").mkdir(parents=True)
    (repo / "a" / "ok.py").write_text("")
    (repo / ".github").mkdir()
    rules = isolate.readable([repo])
    full = [p for p, r in rules if r & isolate.FS_READ_FILE]
    for p in full:
        rel = Path(p).relative_to(repo)  # every rule inside the checkout, none through cfg
        assert rel.parts[:1] != ("cfg",)
        assert not {".ssh", ".git", "huggingface"} & set(rel.parts)
        for below in Path(p).rglob("*"):  # no readable tree holds a hidden name
            assert below.name not in (".ssh", ".git", "huggingface"), below
    assert str(repo / "a" / "ok.py") in full and str(repo / ".github") in full


def test_helper_read_rules_keep_cwd_and_pythonpath_inside_the_checkout(ws):
    from miles_topology.pylaunch import read_paths

    home, repo, _ = ws
    root, paths = read_paths(None, "/", {"PYTHONPATH": f"/:{home}:{repo}/lib"}, (), "/w",
                             confine=(repo,))
    assert root == str(repo) and "/" not in paths and str(home) not in paths
    assert f"{repo}/lib" in paths


# ---------------------------------------------------------------- the kernel behind the gate


def test_static_reading_runs_under_the_kernels_read_rules(ws):
    """A path the code forgets to send through the gate is still refused (confine.py)."""
    from miles_topology.pylaunch import confine

    home, repo, _ = ws
    if not confine.available():
        pytest.skip("no Landlock on this kernel: the gate alone (the report says so)")
    (repo / "scripts" / "ok.txt").write_text("fine\n")
    script = str(repo / "scripts" / "run.sh")
    with pytest.raises(PermissionError):
        confine.run(script, lambda: (home / ".netrc").read_text())  # no gate: the kernel
    with pytest.raises(PermissionError):
        confine.run(script, lambda: (repo / ".git" / "config").read_text())
    assert confine.run(script, lambda: (repo / "scripts" / "ok.txt").read_text()) == "fine\n"
    assert (home / ".netrc").read_text()  # the checker itself is not restricted


def test_without_landlock_the_gate_alone_reads_and_says_so_once(ws, capsys, monkeypatch):
    _, repo, _ = ws
    monkeypatch.setenv("MILES_TOPOLOGY_CONFINE", "0")  # as on a kernel without Landlock
    (repo / "topo.yaml").write_text("tp: 2\n")
    for name in ("a", "b"):
        (repo / "scripts" / f"{name}.sh").write_text(f"{LAUNCH} --topology topo.yaml\n")
    code = main(["check", "--format", "json", "scripts"])
    out, err = capsys.readouterr()
    assert code == 0 and all(v["topology"]["tp"] == 2 for v in json.loads(out))
    assert err.count("the user-space gate only") == 1
    assert "(MILES_TOPOLOGY_CONFINE=0," in err  # the reason given is the switch, not the kernel


# ---------------------------------------------------------------- Python launchers


def _launcher(repo: Path, body: str) -> Path:
    """The attacker's launcher: the in-process hook switched off first (UNHOOK), so what
    stops it is the kernel."""
    from support import UNHOOK

    path = repo / "scripts" / "run.py"
    path.write_text(UNHOOK + "import subprocess\n" + body + "\n")
    return path


def test_launcher_topology_outside_the_checkout_is_unknown_not_read(ws, capsys):
    _, repo, _ = ws
    run = _launcher(repo, "subprocess.run(['python3', 'train.py', '--actor-num-nodes', '1', "
                          "'--actor-num-gpus-per-node', '8', '--topology', '../../.netrc'])")
    code, out = check(capsys, run)
    if "cannot isolate" in out or "lacks" in out:
        pytest.skip("the launcher sandbox is not available on this machine")
    assert SECRET not in out
    got = json.loads(out)
    assert any(u["flag"] == "--topology" and "outside" in u["why"] for u in got["unresolved"])


def test_launcher_cannot_read_through_a_committed_link_out(ws, capsys):
    home, repo, _ = ws
    (repo / "cfg").symlink_to("../..")  # the checkout holds a link to HOME
    (repo / "scripts" / "ok.txt").write_text("2\n")
    run = _launcher(repo, f"""
import os
def grab(p):
    try:
        return open(p).read().split()[-1]
    except OSError:
        return 'none'
tp = open({str(repo / 'scripts' / 'ok.txt')!r}).read().strip()  # the twin: inside
subprocess.run(['python3', 'train.py', '--actor-num-nodes', '1', '--actor-num-gpus-per-node',
                '8', '--tensor-model-parallel-size', tp, '--wandb-key',
                grab({str(repo / 'cfg' / '.netrc')!r}) + grab({str(repo / 'cfg' / 'work' /
                'other' / '.git' / 'config')!r}) + grab({str(repo / 'cfg' / '.cache' /
                'huggingface' / 'token')!r})])
""")
    code, out = check(capsys, run)
    if "cannot isolate" in out or "lacks" in out:
        pytest.skip("the launcher sandbox is not available on this machine")
    assert SECRET not in out and values(out)["tp"] == 2


def test_a_checkout_too_big_to_walk_is_read_by_the_gate_alone(ws, capsys, monkeypatch):
    """Landlock grants whole trees, so hidden names are excluded by walking the checkout;
    past isolate.WALK_MAX entries the tree is listable only and the kernel would refuse the
    script itself (`check -` staged in /tmp: 'Permission denied'). Then the user-space gate
    reads it alone, values known, a credential still refused."""
    from miles_topology.pylaunch import confine, isolate

    if not confine.available():
        pytest.skip("no Landlock here: the gate alone reads in every case")
    _, repo, _ = ws
    monkeypatch.setattr(isolate, "WALK_MAX", 1)
    confine._RULES.clear()
    (repo / "scripts" / "tp.sh").write_text("TP=2\n")
    script = repo / "scripts" / "run.sh"
    script.write_text(f'source "$(dirname "$0")/tp.sh"\n'
                      f'{LAUNCH} --tensor-model-parallel-size "$TP"\n')
    code, out = check(capsys, script)
    assert code == 0 and values(out).get("tp") == 2, out
    script.write_text(f"source {repo}/.git/config\n{LAUNCH}\n")  # the gate still refuses
    code, out = check(capsys, script)
    assert SECRET not in out
    confine._RULES.clear()
