"""tools/gen_surface.py reads upstream's argument code statically: on small sources written
in upstream's styles (Megatron's ArgumentGroupFactory dataclasses, SGLang's A[T, Arg(...)]
fields, miles' prefixing wrapper, reset_arg, FSDP's dataclass), each helper's rule holds."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest
from support import ROOT

SOURCES = {
    "megatron/training/arguments.py": '''
import argparse
from megatron.training.argument_utils import ArgumentGroupFactory
from megatron.core.cfg import Cfg

def add_megatron_arguments(parser):
    parser = _add_size_args(parser)
    return parser

def _add_size_args(parser):
    exclude = ["skip_me"]
    factory = ArgumentGroupFactory(Cfg, exclude=exclude)
    group = factory.build_group(parser, "cfg")
    group = parser.add_argument_group(title="size")
    group.add_argument("--tensor-model-parallel-size", type=int, default=1)
    group.add_argument("--no-fusion", action="store_false", dest="fusion")
    group.add_argument("--levels", nargs="+", type=int, choices=[1, 2], default=[1])
    if HAVE_KITCHEN:
        group.add_argument("--kitchen", type=str)
    return parser
''',
    "megatron/core/cfg.py": '''
from dataclasses import dataclass, field
from typing import Literal, Optional

@dataclass
class Base:
    use_a: bool = True
    sizes: Optional[list[int]] = None

@dataclass
class Cfg(Base):
    mode: Literal["x", "y"] = "x"
    skip_me: int = 0
    hidden: int = field(default=0, init=False)
    renamed: int = field(default=0, metadata={"argparse_meta": {"arg_names": ["--other-name"]}})
''',
    "miles/utils/arguments.py": '''
from miles.backends.sglang_utils.arguments import add_sglang_arguments

def reset_arg(parser, name, **kwargs):
    pass

def get_miles_extra_args_provider(add_custom_arguments=None):
    def add_miles_arguments(parser):
        def add_cluster_arguments(parser):
            parser.add_argument("--actor-num-nodes", type=int, default=1)
            return parser

        def add_user_provided_function_arguments(parser):
            parser.add_argument("--from-a-plugin")
            return parser

        if add_custom_arguments is not None:
            parser = add_custom_arguments(parser)
        parser = add_cluster_arguments(parser)
        parser = add_sglang_arguments(parser)
        parser = add_user_provided_function_arguments(parser)
        reset_arg(parser, "--tensor-model-parallel-size", default=2)
        reset_arg(parser, "--padded-vocab-size", type=int, default=None)
        return parser
    return add_miles_arguments
''',
    "miles/backends/sglang_utils/arguments.py": '''
from sglang.srt.server_args import ServerArgs

_SKIPPED_SERVER_ARGS = ["model_path"]
_EVAL_SKIPPED_SERVER_ARGS = _SKIPPED_SERVER_ARGS + ["tp_size"]

def add_sglang_arguments(parser):
    parser.add_argument("--sglang-server-concurrency", type=int, default=512)
    _add_prefixed_server_args(parser, flag_prefix="sglang", dest_prefix="sglang_",
                              skipped_args=_SKIPPED_SERVER_ARGS, inherit=False)
    _add_prefixed_server_args(parser, flag_prefix="eval-sglang", dest_prefix="eval_sglang_",
                              skipped_args=_EVAL_SKIPPED_SERVER_ARGS, inherit=True)
    return parser
''',
    "miles/backends/fsdp_utils/arguments.py": '''
from dataclasses import dataclass

@dataclass
class FSDPArgs:
    dp_replicate_size: int = 1
    gradient_checkpointing: bool = False
    config: str | None = None
''',
}
SGLANG = {
    "sglang/srt/server_args.py": '''
from typing import Literal
from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass
from sglang.srt.arg_groups.argparse_actions import DeprecatedAliasStoreAction, DeprecatedAction

class ServerArgs:
    model_path: A[str, Arg(help="weights", aliases=["--model"])]
    tp_size: A[int, Arg(help="tp", aliases=["--tensor-parallel-size"])] = 1
    ep_size: A[int, Arg(help="ep", aliases=["--expert-parallel-size", "--ep"])] = 1
    enable_x: A[bool, "x"] = False
    mode: A[Literal["a", "b"], "mode"] = "a"
    paths: A[list[str], "paths"] = None
    plain: int = 3
    internal: A[int, Arg(no_cli=True)] = 0

    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        parser.add_argument("--old-mode", dest="mode", action=DeprecatedAliasStoreAction,
                            new_flag="--mode", type=str)
        parser.add_argument("--gone", action=DeprecatedAction)
''',
    "sglang/srt/arg_groups/argparse_actions.py": '''
import argparse

class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

class DeprecatedAliasStoreAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
''',
}


def wheel(path: Path, files: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return str(path)


def load_gen():
    """tools/gen_surface.py as a fresh module (it keeps the trees it reads in globals)."""
    spec = importlib.util.spec_from_file_location("gen_surface", ROOT / "tools/gen_surface.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules["gen_surface"] = gen  # its dataclasses look their module up
    try:
        spec.loader.exec_module(gen)
    finally:
        del sys.modules["gen_surface"]
    return gen


@pytest.fixture
def surface(tmp_path):
    gen = load_gen()
    upstream = wheel(tmp_path / "upstream.whl", SOURCES)
    data = gen.surface(gen.Tree(upstream), gen.Tree(upstream),
                       gen.Tree(wheel(tmp_path / "sglang.whl", SGLANG)),
                       gen.Tree(wheel(tmp_path / "router.whl", {"x.py": ""})))
    rows = {n: r for r in data["arguments"] for n in r["names"]}
    fsdp = {n: r for r in data["fsdp_arguments"] for n in r["names"]}
    return rows, fsdp, data


def test_megatron_dataclass_and_hand_written_arguments(surface):
    rows, _, _ = surface
    assert rows["--no-use-a"] is rows["--disable-use-a"]  # a True bool: --no-/--disable-
    assert rows["--no-use-a"]["action"] == "store_false" and rows["--no-use-a"]["dest"] == "use_a"
    assert rows["--sizes"]["nargs"] == "+"  # Optional[list[int]]
    assert rows["--mode"]["choices"] == ["x", "y"]
    assert "--other-name" in rows and "--renamed" not in rows  # argparse_meta arg_names
    assert "--skip-me" not in rows and "--hidden" not in rows  # excluded; init=False
    assert rows["--no-fusion"]["dest"] == "fusion"
    assert rows["--levels"]["choices"] == [1, 2]
    assert "--kitchen" in rows  # behind an import-time condition: both branches read


def test_miles_arguments_reset_arg_and_plugins(surface):
    rows, _, _ = surface
    assert rows["--tensor-model-parallel-size"]["default"] == 2  # reset_arg changes it
    assert rows["--padded-vocab-size"]["source"] == "miles"  # reset_arg adds it when absent
    assert rows["--actor-num-nodes"]["source"] == "miles"
    assert "--from-a-plugin" not in rows  # whatever a user's rollout function adds


def test_sglang_as_miles_prefixes_it(surface):
    rows, _, _ = surface
    tp = rows["--sglang-tp-size"]
    assert tp["names"] == ["--sglang-tp-size", "--sglang-tensor-parallel-size"]
    assert tp["dest"] == "sglang_tp_size" and tp["default"] == 1
    assert rows["--sglang-ep"]["dest"] == "sglang_ep_size"
    assert rows["--sglang-enable-x"]["action"] == "store_true"
    assert rows["--sglang-mode"]["choices"] == ["a", "b"]
    assert rows["--sglang-paths"]["nargs"] == "+"
    assert "--sglang-model-path" not in rows and "--sglang-model" not in rows  # skipped
    assert "--sglang-plain" not in rows and "--sglang-internal" not in rows
    assert rows["--sglang-old-mode"]["renamed_to"] == "--sglang-mode"
    assert rows["--sglang-old-mode"]["dest"] == "sglang_mode"
    assert rows["--sglang-gone"]["removed"] is True and "nargs" not in rows["--sglang-gone"]
    # --eval-sglang-*: inherit, so no default and a switch that can also turn off
    x = rows["--eval-sglang-enable-x"]
    assert x["action"] == "BooleanOptionalAction" and x["default"] == "==SUPPRESS=="
    assert "--eval-sglang-tp-size" not in rows and "--eval-sglang-ep" in rows


def test_fsdp_parser_and_pins(surface):
    _, fsdp, data = surface
    assert fsdp["--dp-replicate-size"]["default"] == 1
    assert fsdp["--gradient-checkpointing"]["action"] == "BooleanOptionalAction"
    assert list(fsdp).count("--config") == 1
    assert data["commits"]["radixark/miles"].startswith("upstream.whl sha256:")


def test_slime_arguments_are_its_own_module_s(tmp_path):
    gen = load_gen()
    slime = wheel(tmp_path / "slime.whl", {"slime/utils/arguments.py": '''
from slime.backends.sglang_utils.arguments import add_sglang_arguments

def get_slime_extra_args_provider(add_custom_arguments=None):
    def add_slime_arguments(parser):
        def add_train_arguments(parser):
            parser.add_argument("--actor-num-nodes", type=int, default=1)
            parser.add_argument("--update-weight-mode", type=str)
            return parser
        parser = add_train_arguments(parser)
        parser = add_sglang_arguments(parser)
        return parser
    return add_slime_arguments

def _pre_parse_mode():
    temp_parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    temp_parser.add_argument("--train-backend", type=str, choices=["megatron"], default="megatron")
    temp_parser.add_argument("--debug-train-only", action="store_true", default=False)
    temp_args, _ = temp_parser.parse_known_args()
    return temp_args
''', "slime/backends/sglang_utils/arguments.py": '''
def add_sglang_arguments(parser):
    parser.add_argument("--sglang-only-in-slime")
    return parser
'''})
    rows = gen.slime_arguments(gen.Tree(slime))
    got = [r["names"] for r in rows]
    # other modules unread, but for slime's SGLang flags (parsed apart: sglang_parse_args)
    # and the flags its _pre_parse_mode parses before them (slime 624b824:1583)
    assert got == [["--actor-num-nodes"], ["--update-weight-mode"], ["--sglang-only-in-slime"],
                   ["--train-backend"], ["--debug-train-only"]]
    assert rows[3]["choices"] == ["megatron"] and rows[4]["action"] == "store_true"


def test_patch_flags_are_the_added_lines():
    gen = load_gen()
    patch = (" group.add_argument('--kept', type=int)\n"
             "-    group.add_argument('--removed', action='store_true')\n"
             "+    group.add_argument('--use-gated-attention', action='store_true',\n")
    assert gen.patch_flags(patch) == ["--use-gated-attention"]
