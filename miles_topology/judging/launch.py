"""One training launch, whichever reader found it, and the one judgement of it.

The bash reader (check_script.py over shell/) and the Python launcher reader
(check_launcher.py over pylaunch/) each turn what they read into a `Launch`: the words the
entry gets, each flag with its value (None when known only at run time) and where it is
written, what stayed unknown, and the environment a ``--topology`` YAML sees. `judge` then
runs every step of `check` on it once: the stack, the YAML channels, the flag reading and
the Topology's rules, the flags whose value is unknown, the model facts the launch does not
fix, the memory fit, and where each problem is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..codes import CODES
from ..model.errors import Location, NoTrainingLaunch, Problem
from ..model.parts import fields_in, summary_fields
from ..reading.channels import read_channels
from ..reading.flags import TOPOLOGY, field_of, flag_of, is_switch, known, spelling_problem
from ..reading.roles import SP_WITHOUT_TP
from ..reading.sources import read_flags
from ..reading.stack import for_launch, using
from . import fit
from .verdict import Verdict, verdict_of

if TYPE_CHECKING:
    from ..pylaunch.cluster import ClusterModel

# checks that read whether the model is MoE (checks/, Model.is_moe) beyond their flags
MOE_CODES = {"r3-requires-moe", "moe-tp-requires-sp"}
MOE_FLAGS = {"--num-experts", "--moe-layer-freq", "--num-layers"}
# rules whose finding is that a flag is absent (checks/overridden.py no_rollout_gpus)
ABSENT = {"no-rollout-gpus"}


@dataclass(frozen=True)
class Arg:
    """One flag of a launch: its value ("" a switch, None known only at run time), where it
    is written (None: not pinned to a line), and, for a value word that is an unquoted
    expansion alone (``--wandb-key ${WANDB_KEY}``), that word (see `may_vanish`)."""

    flag: str
    value: str | None
    at: Location | None = None
    bare: str | None = None


@dataclass
class Launch:
    """A training launch as `judge` reads it (see the module docstring).

    `unresolved`: the report's entries for what stayed unknown (flag, expression, source: a
    Location or text, why). `tokens`: the words the flag reader gets (str, or shell Tokens
    that know their line), with what the reader knows beyond the written flags first
    (torchrun's world as the actor's shape) and a --topology the gate refuses left out.
    `gap`: the position in `args` of the last word list known only at run time, which may
    hold any flag, and `gap_why` what it is. `vague`: a word known only at run time may
    hold the layer count.
    `at`: flag -> where its final value is written; `site`: where the launch itself is (a
    launcher's call), where a problem with no flag written elsewhere points. `problems`:
    what the reader found itself, at its code's severity. `head`: the report's first lines
    (which launch), `shown`: the reader's own report entries."""

    path: str
    launcher: str | None
    entry: str | None
    tokens: list
    args: list[Arg]
    environ: Mapping[str, str]
    dirs: list[str]
    unresolved: list[dict] = field(default_factory=list)
    topology_file: str = "?"
    gap: int | None = None
    gap_why: str = ""
    vague: bool = False
    imports: tuple[str, ...] = ()
    at: dict[str, Location] = field(default_factory=dict)
    site: Location | None = None
    problems: list[Problem] = field(default_factory=list)
    values: dict | None = None
    head: list[str] = field(default_factory=list)
    shown: dict = field(default_factory=dict)
    sized_by_cluster: bool = False  # a launcher: it sizes its job from the cluster it runs on
    # the YAML files a launcher wrote in its sandbox, kept when the launch was recorded
    # (reading.sources.WRITTEN): path -> {"text": ...} or {"why": ...}
    written: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # run in a container (shell/containers.py): (how it is said, the file of this machine
    # its entry is, None when none is known: why)
    box: tuple[str, str | None, str] | None = None

    def pairs(self) -> list[tuple[str, str | None]]:
        return [(a.flag, a.value) for a in self.args]


def judge(launch: Launch, cluster: ClusterModel | None) -> Verdict:
    """The verdict on one launch: `check`'s steps, once, for scripts and launchers alike."""
    pairs = launch.pairs()
    stack = _stack(launch, pairs)
    channel, words = read_channels([(a.flag, a.value, a.at) for a in launch.args],
                                   [*launch.dirs, *([stack.root] if stack.root else [])],
                                   stack.framework, launch.written)
    with using(stack):
        v = verdict_of(launch.path,
                       lambda: read_flags(launch.tokens + words, launch.environ).topology)
        for p in [*channel, *may_vanish(launch.args), *_unresolved_spellings(launch)]:
            v.file(p)
    # a YAML channel's value is set on the parsed arguments, not a second flag: no
    # flag-given-twice for it, and a problem of its flag points at its YAML line
    set_at = {w.source for w in words}
    v.problems = [p for p in v.problems
                  if not (p.code == "flag-given-twice" and p.location in set_at)]
    # the actor's sp at tp 1 set after validate_args is not dropped: megatron-core refuses it
    # (roles.py _sp_without_tp), so sp-ignored ("Megatron drops it") does not hold
    if any(p.code == SP_WITHOUT_TP and p.location in set_at for p in channel):
        v.problems = [p for p in v.problems if p.code != "sp-ignored"]
    at = {**launch.at, **{w.text.partition("=")[0]: w.source for w in words
                          if w.text.startswith("--")}}
    unresolved = launch.unresolved + env_unresolved(launch.environ, launch.topology_file)
    unknown = {u["flag"] for u in unresolved if u["flag"]}
    if not launch.vague:
        v.errors += no_layers(pairs + [(w.text.partition("=")[0], "") for w in words],
                              stack.framework)
    fit.apply(v, launch.tokens, cluster, {u["flag"] for u in unresolved}
              | ({None} if launch.gap is not None else set()), launcher=launch.sized_by_cluster)
    facts, why = model_facts(pairs, launch.gap, launch.gap_why)
    skip_unknown(v, unknown, facts)
    fork_ranges(v, stack, pairs)
    if launch.sized_by_cluster and cluster is not None:
        _assumed_cluster_is_no_proof(v, cluster)
    if launch.gap is not None and not _sizes_after(pairs, launch.gap):
        v.summary = None  # words known only at run time may set a size: none is printed
    # the reader's findings first, at their code's severity (errors fail; notes are listed
    # with the warnings), then every problem at the place that writes its flag
    v.problems = [p if p.location else p.at(_locate(p, at, launch.site))
                  for p in [*launch.problems, *v.problems]]
    v.site = launch.site
    _report(v, launch, stack, words, unresolved, facts, why)
    return v


def _stack(launch: Launch, pairs: list[tuple[str, str | None]]):
    """The stack a launch is judged against; in a container, the one of the file its entry
    is here (mapped by a mount), else none of this machine's (stack.for_launch `image`)."""
    if launch.box is None:
        return for_launch(launch.path, launch.entry, pairs, imports=launch.imports)
    host = launch.box[1]
    if host is None:
        return for_launch(None, launch.entry, pairs, imports=launch.imports, image=True)
    entry = host if (launch.entry or "").endswith(".py") else launch.entry
    return for_launch(host, entry, pairs, imports=launch.imports)


def boxed(launch: Launch) -> str:
    """What the report says of a launch run in a container, beside its stack ("" if not)."""
    if launch.box is None:
        return ""
    said, host, why = launch.box
    said = "the launch runs " + said.removeprefix("It runs ")
    if host is not None:
        return f" ({said}; its entry {launch.entry} is {host} here, by the container's mount)"
    return f" ({said}; its entry {launch.entry} {why}: the image's own stack is not known " \
        "here)"


def _report(v: Verdict, launch: Launch, stack, words: list, unresolved: list[dict],
            facts: set[str], why: str) -> None:
    """The report's entries beyond the problems: the stack, the launch, where each value is
    set (a script), the reader's own entries, what stayed unknown, and its lines."""
    v.extra = {"stack": stack.describe() + boxed(launch), "launcher": launch.launcher,
               "entry": launch.entry}
    lines = list(launch.head)
    if launch.values is not None:
        values = dict(launch.values)
        _channel_values(values, words)
        v.extra["values"] = values
        lines += _value_lines(values)
    v.extra.update(launch.shown)
    v.extra["unresolved"] = [{**u, "source": str(u["source"])} for u in unresolved]
    v.extra["unknown_model_facts"] = {"flags": sorted(facts), "why": why} if facts else None
    v.extra["report_lines"] = lines + _unresolved_lines(unresolved) + (
        [facts_line(facts, why)] if facts else [])


def _locate(p: Problem, at: Mapping[str, Location], site: Location | None
            ) -> Location | None:
    """Where the first of the problem's flags the launch writes is set, else the launch."""
    return next((at[f] for f in p.flags if f in at), site)


def _unresolved_spellings(launch: Launch) -> list[Problem]:
    """A flag whose value is unresolved stays out of the flag reader's words: its spelling is
    judged here, where the flag is written (the unresolved entry's source is where its
    value comes from, an assignment perhaps lines above)."""
    out = []
    for name in dict.fromkeys(u["flag"] for u in launch.unresolved if u["flag"]):
        p = spelling_problem(name)
        if p is not None:
            src = next(u["source"] for u in launch.unresolved if u["flag"] == name)
            out.append(p.at(launch.at.get(name)
                            or (src if isinstance(src, Location) else None)))
    return out


def _sizes_after(pairs: Sequence[tuple[str, str | None]], gap: int) -> bool:
    """Whether every flag of the summary is given, known, after argv position `gap` (a word
    list known only at run time that may hold any flag: the last occurrence wins)."""
    given = {field_of(f) for f, v in pairs[gap:] if v is not None}
    return set(summary_fields()) <= given


def _value_lines(values: dict) -> list[str]:
    lines = []
    for flag, info in values.items():
        shown = {"": "(switch)", None: "?"}.get(info["value"], info["value"])
        lines.append(f"{flag} {shown}  <- {info['source']}")
        for old in info["overridden"]:
            lines.append(f"    overrides {old['value'] or '(switch)'} at {old['source']}")
    return lines


def _unresolved_lines(unresolved: list[dict]) -> list[str]:
    lines = []
    for u in unresolved:
        what = f"{u['flag']} = {u['expression']}" if u["flag"] else u["expression"]
        lines.append(f"unresolved {what}  at {u['source']}: {u['why']}")
    return lines


def _channel_values(values: dict, words: list) -> None:
    """A value a YAML channel sets wins over the command line's: its source is the YAML line."""
    i = 0
    while i < len(words):
        flag, eq, inline = words[i].text.partition("=")
        value = inline if eq else words[i + 1].text if i + 1 < len(words) else ""
        if known(flag):
            before = values.get(flag)
            values[flag] = {"value": value, "source": str(words[i].source),
                            "overridden": ([*before["overridden"], {
                                "value": before["value"], "source": before["source"]}]
                                if before else [])}
        i += 1 if eq else 2


def model_flags() -> set[str]:
    """The flags of the model's shape (the "model" facts), as opposed to its layout."""
    return {flag_of(name) for name in fields_in("model")}


def model_facts(argv: Sequence[tuple[str, str | None]], last_gap: int | None = None,
                gap_why: str = "") -> tuple[set[str], str]:
    """Model-shape flags whose value the launch does not fix, and why: the one rule of
    `check` for bash scripts and Python launchers alike.

    `argv` is the launch's (flag, value) pairs, value None when unknown. An unresolved word
    list at position `last_gap` (``${MODEL_ARGS[@]}`` read from a helper's output, ``$@``)
    may hold any flag, and the last occurrence wins: a flag given after the last such list
    is known, one given only before it, or not at all, is not. With no such list, a launch
    that spells the shape out (--num-layers) means the defaults of the flags it leaves out;
    one that does not takes the shape from elsewhere (the HF config behind --hf-checkpoint,
    a helper), so nothing about it is known.
    """
    names = fields_in("model")
    start = last_gap or 0
    given = {flag_of(field_of(f)) for f, _ in argv if field_of(f) in names}
    known_ = {flag_of(field_of(f)) for f, v in argv[start:]
              if v is not None and field_of(f) in names}
    if last_gap is not None:
        why = gap_why
    elif "--num-layers" in known_:  # the shape is spelled out: a flag left out is its default
        return given - known_, "its value is only known when the script runs"
    elif any(f == "--hf-checkpoint" for f, _ in argv):
        why = "the model shape is not given as flags; it comes from the checkpoint " \
              "(--hf-checkpoint) when the job runs"
    else:
        why = "the model shape is not given as flags (no --num-layers)"
    return model_flags() - known_, why


def facts_line(facts: set[str], why: str) -> str:
    return (f"model shape unknown ({', '.join(sorted(facts))}): {why}; the checks that need "
            "it are skipped")


def skip_unknown(v: Verdict, unknown: set[str], facts: set[str]) -> None:
    """Move to `skipped` the errors that involve a flag whose value is unknown (`unknown`) or
    need a model fact that is (`facts`): not proven, so not failed. Sizes that depend on an
    unknown value are not reported."""
    # a value the parser refuses (`--actor-num-nodes None`, upstream's run_deepseek_v32.py
    # with its defaults) is an error of its own; what the rules derived from the default that
    # stood in for it is not proven
    invalid = {f for p in v.errors if p.code == "invalid-flag-value" for f in p.flags}
    # one fact, one finding: a rule that says such a flag is not given (its value was
    # refused, so its default stood in) says nothing the invalid-flag-value error does not
    # (upstream scripts/run_deepseek_v32.py with its defaults: --rollout-num-gpus None)
    v.warnings = [p for p in v.warnings if not (p.code in ABSENT and invalid & set(p.flags))]
    v.errors = [p for p in v.errors if not (p.code in ABSENT and invalid & set(p.flags))]
    unknown = unknown | invalid
    if any(field_of(f) in summary_fields() for f in unknown):
        v.summary = None
    if not (unknown or facts):
        return

    def skip(p: Problem) -> bool:
        if p.code in ("unknown-flag", "invalid-flag-value", "missing-num-layers"):
            # refused whatever the rest (no layer count is a fact about the words given)
            return False
        return bool((unknown | facts) & set(p.flags)
                    or p.code in MOE_CODES and facts & MOE_FLAGS)

    def ruled(p: Problem) -> bool:
        """A rule's warning decides from values too (a flag given with an unresolved value
        is present, not absent, and not its default: `--rollout-num-gpus ${N}` is no
        `no-rollout-gpus`); a warning about a flag's name (deprecated, of another version)
        stands whatever its value."""
        return CODES[p.code].by.startswith("rule ") and skip(p)
    def unproven(p: Problem) -> Problem:
        """The finding, saying which of its flags it rests on are not known: its message
        was worded from the defaults that stood in for them ("tp = 1", "neither ... is
        given" of `--rollout-num-gpus "${N}"`)."""
        names = sorted((unknown | facts) & set(p.flags)) or sorted(facts & MOE_FLAGS)
        refused = [f for f in names if f in invalid]
        known_not = [f for f in names if f not in invalid]
        why = "; ".join(x for x in (
            known_not and f"{', '.join(known_not)}: value not known here",
            refused and f"{', '.join(refused)}: value refused, its default stood in") if x)
        return replace(p, severity="skipped", message=f"{p.message} (not proven: {why})"
                       if why else p.message)
    v.skipped += [unproven(p) for p in v.errors if skip(p)]
    v.skipped += [unproven(p) for p in v.warnings if ruled(p)]
    v.errors = [p for p in v.errors if not skip(p)]
    v.warnings = [p for p in v.warnings if not ruled(p)]


def fork_ranges(v: Verdict, stack, pairs: Sequence[tuple[str, str | None]]) -> None:
    """A fork validates its values itself, in code this check does not read (a fork's
    --critic-train-only takes --actor-num-nodes 0): a whole number our model's range refuses
    is not proven wrong there, so it is skipped, saying whose validation decides. A fork is
    a package under its own name, or a checkout's miles or slime given a flag of its own
    (one neither upstream parser has; an installed one with such a flag is taken as a newer
    miles or slime). miles' and slime's own range refusals stay errors."""
    from ..reading import surface
    from ..reading.stack import FRAMEWORKS

    given = dict(pairs)
    name = stack.package or stack.framework
    if name in FRAMEWORKS:
        table = surface.slime_table() if stack.framework == "slime" else None
        own = [f for f in given if (stack.added.get(f) or ("",))[0].startswith(f"{name} of ")
               and (table.get(f) if table is not None else surface.flag(f)) is None]
        if stack.origin not in ("checkout", "--stack") or not own:  # installed: a newer one
            return
        whose = f"the validation of the {name} at {stack.root}, which adds {own[0]}, decides"
    else:
        whose = f"{name}'s own validation decides"

    def whole(flag: str) -> bool:
        try:
            int(given.get(flag) or "")
            return True
        except ValueError:
            return False

    moved = [p for p in v.errors if p.code == "invalid-flag-value" and p.flags
             and all(whole(f) for f in p.flags)]
    v.errors = [p for p in v.errors if p not in moved]
    v.skipped += [replace(p, severity="skipped", message=f"{p.message} ({whose}: the fork's "
                          "parser is not miles' or slime's)")
                  for p in moved]


def _assumed_cluster_is_no_proof(v: Verdict, cluster: ClusterModel) -> None:
    """A launcher sizes its job from the cluster it runs on (miles' ExecuteTrainConfig reads
    SLURM_JOB_NUM_NODES, its options default to one node): on the assumed cluster a layout
    meant for many nodes puts a whole model on one, and `memory-exceeds-gpu` would promise an
    OOM the real run never has (upstream's scripts/run_deepseek.py and run_glm45_355b_a32b.py
    with their defaults). Without `--nodes` the finding is skipped, saying what to pass."""
    if "nodes" not in cluster.assumed:
        return
    moved = [p for p in v.errors if p.code == "memory-exceeds-gpu"]
    v.errors = [p for p in v.errors if p.code != "memory-exceeds-gpu"]
    v.skipped += [replace(p, severity="skipped", message=f"{p.message} (on the assumed cluster: "
                          "the launcher may size its job from the nodes it runs on)",
                          fix=f"pass --nodes N --gpus-per-node N --gpu NAME of the cluster it "
                              f"runs on; {p.fix}") for p in moved]


def env_unresolved(environ: Any, yaml: str) -> list[dict]:
    """The topology YAML's fields left unread because they read a name of an environment
    known only in part (config.PartialEnv), as `unresolved` entries of a report."""
    return [{"flag": flag_of(name), "expression": f"{name} in {yaml}", "source": yaml,
             "why": environ.why} for name in getattr(environ, "dropped", ())]


def actor_words(world: tuple[int, int] | None, flags: set[str]) -> list[str]:
    """A torchrun launch's world, (nnodes, nproc_per_node), as the actor's shape when the
    launch gives neither --actor-num-nodes nor --actor-num-gpus-per-node; else []."""
    if world is None or flags & {"--actor-num-nodes", "--actor-num-gpus-per-node"}:
        return []
    return ["--actor-num-nodes", str(world[0]), "--actor-num-gpus-per-node", str(world[1])]


def not_ours(path: str, entry: str | None) -> None:
    """NoTrainingLaunch (nothing to check) when the entry is found in the checkout and builds
    neither miles' nor slime's parser (stack.parser_package): another program's train.py,
    such as a vendored Megatron-LM's examples/mimo/train.py, whose flags are its own. An
    entry not found here (a container's /root/miles/train.py), or named bare (`train.py`:
    the working folder decides which), is judged as miles' or slime's training, as its name
    says."""
    from ..reading.stack import entry_parser

    if not os.path.dirname(entry or ""):  # a bare train.py runs from the working folder,
        return  # which may be another checkout (`cd /root/slime`): not decided here
    got = entry_parser(path, entry)
    if got is not None and got[1] is None:
        raise NoTrainingLaunch(
            f"{path}: the launch runs {entry}, which builds neither miles' nor slime's parser "
            "(it imports no miles, slime, nor a fork's PACKAGE.utils.arguments): not a miles "
            "or slime training job, so there is nothing to check")


# a flag that gives (or may give) Megatron the layer count some other way than --num-layers
LAYERS_FROM = ("--num-layers", "--encoder-num-layers", TOPOLOGY, "--use-checkpoint-args",
               "--yaml-cfg")


def no_layers(pairs: Sequence[tuple[str, str | None]], framework: str) -> list[Problem]:
    """A Megatron-backend launch that gives no layer count: Megatron-LM's validate_args
    (training/arguments.py) asserts "either num_layers or encoder_num_layers should be
    specified", and miles' parse_args always runs it for the Megatron backend (miles
    31f1ca9 utils/arguments.py:2711); slime's unless --debug-rollout-only
    (slime 624b824 utils/arguments.py:1638). Nothing fills it from the HF checkpoint on that
    backend (FSDP does). Undecided (not called) while an unknown word may hold the flag."""
    given = {f: v for f, v in pairs}
    if given.get("--train-backend", "megatron") != "megatron" \
            or any(f in given for f in LAYERS_FROM) \
            or framework == "slime" and "--debug-rollout-only" in given:
        return []
    return [Problem(
        "missing-num-layers",
        "no --num-layers (nor --encoder-num-layers): Megatron's validate_args refuses the "
        "launch at start-up (\"either num_layers or encoder_num_layers should be "
        "specified\"); the Megatron backend does not read it from --hf-checkpoint.",
        "give the model's flags (--num-layers N ..., e.g. from scripts/models/MODEL.sh)",
        ("--num-layers",))]


def may_vanish(args: Sequence[Arg]) -> list[Problem]:
    """A value-taking flag whose one value word is an unquoted expansion known only at run
    time, followed by a flag or nothing (``--wandb-key ${WANDB_KEY} --wandb-project x``):
    when it is empty, bash drops the word and argparse refuses the launch ("argument
    --wandb-key: expected one argument"). Run by the stack being judged (`current`)."""
    from ..reading.stack import current

    out = []
    for k, a in enumerate(args):
        if not a.bare:
            continue
        f = current().flag(a.flag)
        takes = f.takes_value and f.nargs not in ("?", "*") if f is not None else \
            known(a.flag) and not is_switch(a.flag)
        nxt = args[k + 1] if k + 1 < len(args) else None
        if not takes or nxt is not None and not nxt.flag:
            continue
        name = a.bare.strip("${}").partition(":")[0] or a.bare
        out.append(Problem(
            "flag-value-may-be-empty",
            f"{a.flag} {a.bare}: if {name} is empty when the script runs, bash drops the "
            f"unquoted word and argparse refuses the launch (\"argument {a.flag}: expected "
            "one argument\")",
            f"quote the expansions that carry it (\"{a.bare}\", and \"${{ARGS[@]}}\" for an "
            f"array holding it), give {name} a default (${{{name}:-...}}), or leave "
            f"{a.flag} out when {name} is empty", (a.flag,), location=a.at))
    return out
