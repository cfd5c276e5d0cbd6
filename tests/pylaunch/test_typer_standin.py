"""The typer stand-in (pylaunch/standins/typer.py) gives a launcher the values the real typer
gives: the same function, arguments and environment through each, compared. (No `from
__future__ import annotations`: typer reads the annotations as objects.)"""


import dataclasses
import enum
import functools
import inspect
import typing
from pathlib import Path
from typing import Annotated, Literal

import pytest

from miles_topology.pylaunch.standins import typer as fake


class Backend(enum.Enum):
    fsdp = "fsdp"
    megatron = "megatron"


@dataclasses.dataclass
class Args:
    """miles' ScriptArgs shape (ExecuteTrainConfig fields and a launcher's own)."""

    num_nodes: int = 1
    hardware: Literal["H100", "GB200", "GB300"] = "H100"
    num_gpus_per_node: int | None = None
    extra_args: str = ""
    true_on_policy: bool = False
    enable_eval: bool = True
    backend: Backend = Backend.megatron
    model_dir: Path = Path("/root/models")
    ratio: float = 0.5
    tags: list[str] = dataclasses.field(default_factory=list)


def dataclass_cli(t, func):
    """miles/utils/typer_utils.py's shape: one option per field, bound to MILES_SCRIPT_NAME."""
    cls = Args
    hints = typing.get_type_hints(cls)
    params = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
            else f.default
        params.append(inspect.Parameter(
            f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
            annotation=Annotated[hints[f.name], t.Option(envvar=f"MILES_SCRIPT_{f.name.upper()}")]))

    @functools.wraps(func)
    def wrapped(**kwargs):
        return func(cls(**kwargs))

    wrapped.__signature__ = inspect.Signature(params)
    return wrapped


def run(t, argv: list[str], style: str = "dataclass"):
    """(exit status, what the function got) through typer module `t`."""
    got = {}

    def main(args: Args):
        got.update(dataclasses.asdict(args))

    def plain(name: str, count: int = 3, verbose: bool = False,
              mode: Annotated[str, t.Option("--mode", "-m")] = "a", flag: bool = t.Option(
                  False, "--flag")):
        got.update(name=name, count=count, verbose=verbose, mode=mode, flag=flag)

    if style == "dataclass":
        app = t.Typer()
        app.command()(dataclass_cli(t, main))
    elif style == "plain":
        app = t.Typer()
        app.command()(plain)
    else:  # two commands and a callback
        app = t.Typer()

        @app.callback(invoke_without_command=True)
        def cb(ctx: t.Context, seed: int = 1):
            got["sub"], got["seed"] = ctx.invoked_subcommand, seed

        @app.command()
        def train(steps: int = 2):
            got["steps"] = steps

        @app.command(name="full-run")
        def full(steps: int = 5):
            got["full"] = steps
    try:
        app(argv, prog_name="run.py")
    except SystemExit as e:
        return e.code or 0, got
    return 0, got


CASES = [
    ([], {}),
    (["--num-nodes", "4", "--hardware", "GB200", "--true-on-policy", "--no-enable-eval"], {}),
    (["--num-nodes=2", "--backend", "fsdp", "--model-dir", "/m", "--ratio", "2"], {}),
    (["--tags", "a", "--tags", "b", "--extra-args", "--foo 1"], {}),
    ([], {"MILES_SCRIPT_NUM_NODES": "8", "MILES_SCRIPT_TRUE_ON_POLICY": "yes",
          "MILES_SCRIPT_HARDWARE": "GB300", "MILES_SCRIPT_NUM_GPUS_PER_NODE": "4",
          "MILES_SCRIPT_ENABLE_EVAL": "0"}),
    (["--num-nodes", "3"], {"MILES_SCRIPT_NUM_NODES": "8"}),  # the command line wins
    (["--num-nodes", "x"], {}),  # usage errors: status 2
    (["--hardware", "A100"], {}),
    (["--no-such-flag"], {}),
    ([], {"MILES_SCRIPT_NUM_NODES": "many"}),
    (["--help"], {}),
]


@pytest.mark.parametrize("argv,env", CASES)
def test_dataclass_cli_as_the_real_typer(argv, env, monkeypatch, capsys):
    real = pytest.importorskip("typer")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert run(fake, argv) == run(real, argv)


@pytest.mark.parametrize("argv", [["x"], ["x", "--count", "5", "--verbose", "-m", "b",
                                          "--flag"], ["--count", "2", "y"], [], ["x", "y"]])
def test_plain_function_as_the_real_typer(argv, capsys):
    real = pytest.importorskip("typer")
    assert run(fake, argv, "plain") == run(real, argv, "plain")


@pytest.mark.parametrize("argv", [["train"], ["--seed", "4", "full-run", "--steps", "7"],
                                  ["nope"], []])
def test_commands_and_callback_as_the_real_typer(argv, capsys):
    real = pytest.importorskip("typer")
    assert run(fake, argv, "app") == run(real, argv, "app")


def test_without_typer_installed_values_are_parsed():
    """What the comparison rests on, without the real typer: defaults, env, flags."""
    import os

    os.environ["MILES_SCRIPT_NUM_NODES"] = "2"
    try:
        code, got = run(fake, ["--true-on-policy", "--hardware", "GB200"])
    finally:
        del os.environ["MILES_SCRIPT_NUM_NODES"]
    assert code == 0
    assert got["num_nodes"] == 2 and got["true_on_policy"] is True
    assert got["hardware"] == "GB200" and got["backend"] is Backend.megatron
    assert run(fake, ["--num-nodes", "x"])[0] == 2
