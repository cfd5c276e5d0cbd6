"""What CI passes so that the pull request it checks cannot turn the check off (issue 33
item 7): --isolated reads no [tool.miles-topology] table (ignore, exclude, cluster keys),
--no-respect-gitignore walks past .gitignore files."""

from __future__ import annotations

from miles_topology.cli import main

# EP 16 on 8 GPUs (as fixtures/scripts/err-expert-grid.sh, without its model file): one error
BAD = ("python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\\n"
       "   --num-layers 4 --num-experts 16 --tensor-model-parallel-size 1 \\\n"
       "   --expert-model-parallel-size 16 \\\n"
       "   --expert-tensor-parallel-size 1 --rollout-num-gpus-per-engine 8\n")
CLEAN = ("python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\\n"
         "   --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 64\n")


def test_isolated_reads_no_table_of_the_checked_tree(tmp_path, capsys, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.miles-topology]\nignore = ["all"]\nextend-exclude = ["hidden/"]\n'
        'gpu = "B200"\n')
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "bad.sh").write_text(BAD)
    (tmp_path / "bad.sh").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "."]) == 0  # the pull request's own table passes it
    assert "1 input" in capsys.readouterr().out
    assert main(["check", "--isolated", "."]) == 1
    out = capsys.readouterr().out
    assert "Found 2 errors in 2 inputs" in out and "hidden/bad.sh" in out
    assert main(["check", "--isolated", "--select", "expert-grid-divisibility", "bad.sh"]) == 1
    capsys.readouterr()


def test_isolated_drops_the_cluster_keys_the_command_line_gives_them(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text('[tool.miles-topology]\ngpu = "B200"\n')
    script = tmp_path / "run.sh"
    script.write_text(CLEAN)
    for cmd in ("check", "show"):
        args = [cmd, "--verbose", str(script)] if cmd == "check" else [cmd, str(script)]
        main(args)
        assert "GiB B200" in capsys.readouterr().out
        main([*args, "--isolated"])
        out = capsys.readouterr().out
        assert "B200" not in out and "H100 (assumed)" in out
        main([*args, "--isolated", "--gpu", "H200"])
        assert "GiB H200" in capsys.readouterr().out


def test_no_respect_gitignore_checks_what_gitignore_hides(tmp_path, capsys):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("scripts/bad.sh\n")  # above the folder named
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / ".gitignore").write_text("worse.sh\n")
    (tmp_path / "scripts" / "bad.sh").write_text(BAD)
    (tmp_path / "scripts" / "worse.sh").write_text(BAD)
    (tmp_path / "scripts" / "ok.sh").write_text(CLEAN)
    folder = str(tmp_path / "scripts")
    assert main(["check", folder]) == 0
    assert "1 input" in capsys.readouterr().out
    assert main(["check", "--no-respect-gitignore", folder]) == 1
    assert "in 3 inputs" in capsys.readouterr().out
