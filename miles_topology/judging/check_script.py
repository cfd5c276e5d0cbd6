"""`check SCRIPT.sh`: what a launch script really launches, judged by the Topology's rules.

The script is read statically (miles_topology/shell); its flags go through the same
`read_flags` as the launcher, so there is one rule set. A problem that involves a value the
reader could not resolve, or a model fact the script does not fix, is reported as skipped,
not failed: `ok` is false only when proven.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..codes import CODES
from ..model.errors import InputError, Location, NoTrainingLaunch, Problem
from ..model.parts import fields_in, summary_fields
from ..reading.channels import read_channels
from ..reading.flags import TOPOLOGY, field_of, flag_of, is_switch, known, spelling_problem
from ..reading.sources import read_flags, refused_topology
from ..reading.stack import for_launch, using
from . import fit
from .verdict import Verdict, verdict_of

if TYPE_CHECKING:
    from ..pylaunch.cluster import ClusterModel
    from ..shell import ScriptRead

# checks that read whether the model is MoE (checks/, Model.is_moe) beyond their flags
MOE_CODES = {"r3-requires-moe", "moe-tp-requires-sp"}
MOE_FLAGS = {"--num-experts", "--moe-layer-freq", "--num-layers"}
# rules whose finding is that a flag is absent (checks/overridden.py no_rollout_gpus)
ABSENT = {"no-rollout-gpus"}


def model_flags() -> set[str]:
    """The flags of the model's shape (the "model" facts), as opposed to its layout."""
    return {flag_of(name) for name in fields_in("model")}


def read(path: str, env: dict[str, str], args: Sequence[str] | None = None,
         cluster=None) -> ScriptRead:
    """Read a script or raise InputError (exit 2) saying why."""
    # the bash reader is imported here, not with this module: a Python launcher's check
    # uses this module's rules and reads no script (issue 36: its start-up time)
    from ..shell import ScriptReadError, read_script, require_launch

    try:
        found = read_script(path, env, positional=args, cluster=cluster)
    except ScriptReadError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    found = require_launch(found)
    not_ours(path, found.entry)
    return found


def actor_words(world: tuple[int, int] | None, flags: set[str]) -> list[str]:
    """A torchrun launch's world, (nnodes, nproc_per_node), as the actor's shape when the
    launch gives neither --actor-num-nodes nor --actor-num-gpus-per-node; else []."""
    if world is None or flags & {"--actor-num-nodes", "--actor-num-gpus-per-node"}:
        return []
    return ["--actor-num-nodes", str(world[0]), "--actor-num-gpus-per-node", str(world[1])]


def _torchrun_values(ranks: list[str]) -> dict:
    """The values report of the actor flags `torchrun_actor` gave, sourced to torchrun."""
    return {flag: {"value": value, "source": f"torchrun {opt} (the world it starts)",
                   "overridden": []}
            for flag, value, opt in zip(ranks[::2], ranks[1::2], ("--nnodes",
                                                                    "--nproc-per-node"))}


def torchrun_actor(found: ScriptRead) -> list[str]:
    """`actor_words` of a script's torchrun launch (torchrun's options before the entry, read
    again from the script's text); [] when an option is not known here."""
    import shlex

    from ..reading.commandline import torchrun_world
    from ..reading.gate import reread

    site = found.site
    if "torch" not in (found.launcher or "") or site is None or site.statement is None \
            or site.entry is None or site.statement.file != site.entry.file:
        return []
    text = reread(site.entry.file)
    try:
        words = shlex.split(text[site.statement.start:site.entry.start].replace("\\\n", " "))
    except (ValueError, TypeError):  # an open quote; no text (None)
        return []
    world = torchrun_world([None if "$" in w or "`" in w else w for w in words])
    return actor_words(world, {fv.flag for fv in found.argv})


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


def unknown_facts(found: ScriptRead) -> tuple[set[str], str]:
    """Model-shape flags whose value the script does not fix, and why (see `model_facts`)."""
    gap = next((u for u in found.unresolved if u.flag is None), None)
    where = f"{gap.expression} at {gap.source} ({gap.why})" if gap else "run-time words"
    return model_facts([(fv.flag, fv.value) for fv in found.argv],
                       max(found.gaps) if found.gaps else None,
                       f"the model shape may come from {where}")


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
    known = {flag_of(field_of(f)) for f, v in argv[start:]
             if v is not None and field_of(f) in names}
    if last_gap is not None:
        why = gap_why
    elif "--num-layers" in known:  # the shape is spelled out: a flag left out is its default
        return given - known, "its value is only known when the script runs"
    elif any(f == "--hf-checkpoint" for f, _ in argv):
        why = "the model shape is not given as flags; it comes from the checkpoint " \
              "(--hf-checkpoint) when the job runs"
    else:
        why = "the model shape is not given as flags (no --num-layers)"
    return model_flags() - known, why


def flag_pairs(argv: Sequence[str]) -> list[tuple[str, str]]:
    """A plain argv (a Python launcher's, all known) as (flag, value) pairs; "" for a switch."""
    out = []
    for i, word in enumerate(argv):
        if word.startswith("--"):
            flag, eq, value = word.partition("=")
            nxt = argv[i + 1] if i + 1 < len(argv) else "--"
            out.append((flag, value if eq else "" if nxt.startswith("--") else nxt))
    return out


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
    v.skipped += [replace(p, severity="skipped") for p in v.errors if skip(p)]
    v.skipped += [replace(p, severity="skipped") for p in v.warnings if ruled(p)]
    v.errors = [p for p in v.errors if not skip(p)]
    v.warnings = [p for p in v.warnings if not ruled(p)]


def fork_ranges(v: Verdict, stack, pairs: Sequence[tuple[str, str | None]]) -> None:
    """A fork under its own package name validates its values itself, in code this check does
    not read (a fork's --critic-train-only takes --actor-num-nodes 0): a whole number our
    model's range refuses is not proven wrong there, so it is skipped, saying whose
    validation decides. miles' and slime's own range refusals stay errors."""
    from ..reading.stack import FRAMEWORKS

    if stack.package in (None, *FRAMEWORKS):
        return
    given = dict(pairs)

    def whole(flag: str) -> bool:
        try:
            int(given.get(flag) or "")
            return True
        except ValueError:
            return False

    moved = [p for p in v.errors if p.code == "invalid-flag-value" and p.flags
             and all(whole(f) for f in p.flags)]
    v.errors = [p for p in v.errors if p not in moved]
    v.skipped += [replace(p, severity="skipped", message=f"{p.message} ({stack.package}'s own "
                          "validation decides: the fork's parser is not miles' or slime's)")
                  for p in moved]


def facts_line(facts: set[str], why: str) -> str:
    return (f"model shape unknown ({', '.join(sorted(facts))}): {why}; the checks that need "
            "it are skipped")


def values_report(found: ScriptRead) -> dict:
    """Each topology flag's final value with its source, and the earlier places it was set."""
    out = {}
    for flag, seen in found.values().items():
        if not known(flag):
            continue
        last = seen[-1]
        out[flag] = {
            "value": last.value,
            "source": str(last.source),
            "overridden": [{"value": v.value, "source": str(v.source)} for v in seen[:-1]],
        }
    return out


def check_script(path: str, env: dict[str, str], args: Sequence[str] | None = None,
                 cluster: ClusterModel | None = None) -> Verdict:
    """`args`: the script's positional arguments (``check SCRIPT.sh -- ARGS``); `cluster`: the
    modelled cluster (pylaunch/cluster.py): the GPU the memory estimate is judged on (fit.py;
    None: assumed), and the answers to the script's GPU probes (``$(nvidia-smi -L | wc -l)``)
    when the user gave it (an assumed cluster answers no probe: a guessed GPU count would
    print sizes the script may not get)."""
    probed = None if cluster is None or {"nodes", "gpus_per_node", "gpu"} <= set(
        cluster.assumed) else cluster
    found = read(path, env, args, probed)
    exported = found.site.environ() if found.site else env  # what a --topology YAML sees
    stack = for_launch(path, found.entry, [(fv.flag, fv.value) for fv in found.argv])
    channel, words = read_channels(
        [(fv.flag, fv.value, Location(fv.source.path, fv.source.line)) for fv in found.argv],
        _dirs(path, stack), stack.framework)
    tokens, refused = refused_topology(found.tokens())  # a --topology the gate refuses
    ranks = torchrun_actor(found)
    tokens = ranks + tokens
    with using(stack):
        v = verdict_of(path, lambda: read_flags(tokens + words, exported).topology)
        for p in channel:
            v.file(p)
        for p in may_vanish(found):
            v.warnings.append(p)
        for p in _unresolved_spellings(found):
            v.file(p)
    unresolved = _unresolved(found, refused, exported)
    unknown = {u["flag"] for u in unresolved if u["flag"]}
    if not any(p.code == "missing-line-continuation" for p in found.notes):  # its cause
        v.errors += _no_layers_in(found, words, stack.framework)
    fit.apply(v, found.tokens(), cluster, {u["flag"] for u in unresolved})
    facts, why = unknown_facts(found)
    skip_unknown(v, unknown, facts)
    fork_ranges(v, stack, [(fv.flag, fv.value) for fv in found.argv])
    if found.gaps and _sizes_after(found, max(found.gaps)) is False:
        v.summary = None  # words known only at run time may set a size: none is printed
    # the reader's findings at their code's severity: errors fail, notes are listed with
    # the warnings (they do not fail the check either)
    v.errors = [p for p in found.notes if p.severity == "error"] + v.errors
    v.warnings = [p for p in found.notes if p.severity != "error"] + v.warnings
    where = _where(found)
    v.errors, v.warnings, v.skipped = (
        [p.at(_locate(p, where)) if p.location is None else p for p in ps]
        for ps in (v.errors, v.warnings, v.skipped))
    values = values_report(found)
    values.update(_torchrun_values(ranks))
    _channel_values(values, words)
    v.extra = {
        "stack": stack.describe(),
        "launcher": found.launcher,
        "entry": found.entry,
        "values": values,
        "unresolved": unresolved,
        "unknown_model_facts": {"flags": sorted(facts), "why": why} if facts else None,
        "report_lines": _lines(values, found, unresolved, facts, why),
    }
    return v


def _unresolved(found: ScriptRead, refused: list, exported) -> list[dict]:
    """The report's `unresolved` entries: one per unknown the reader met, though the launch
    may use it more than once; a --topology the gate refuses; the fields of its YAML left
    unread for a name of an environment known only in part."""
    unresolved = [
        dict(t) for t in dict.fromkeys(
            (("flag", u.flag), ("expression", u.expression), ("source", str(u.source)),
             ("why", u.why)) for u in found.unresolved)
    ]
    at = next((str(fv.source) for fv in found.argv if fv.flag == TOPOLOGY), "?")
    unresolved += [{"flag": TOPOLOGY, "expression": f"{TOPOLOGY} {value}", "source": at,
                    "why": why} for value, why in refused]
    unresolved += env_unresolved(exported, _topology_file(found)) if not refused else []
    return unresolved


def _unresolved_spellings(found: ScriptRead) -> list[Problem]:
    """A flag whose value is unresolved stays out of argv: its spelling is judged here."""
    out = []
    for name in dict.fromkeys(u.flag for u in found.unresolved if u.flag):
        p = spelling_problem(name)
        if p is not None:
            out.append(p.at(Location(*_first_source(found, name))))
    return out


def _no_layers_in(found: ScriptRead, words: list, framework: str) -> list[Problem]:
    """`no_layers` over the script's argv and the words its YAML channels add; undecided
    while a gap or an unknown value may hold the flag."""
    return no_layers([(fv.flag, fv.value) for fv in found.argv] +
                     [(w.text.partition("=")[0], "") for w in words],
                     bool(found.gaps) or any(fv.value is None for fv in found.argv)
                     or any(u.flag is None for u in found.unresolved), framework)


# a flag that gives (or may give) Megatron the layer count some other way than --num-layers
LAYERS_FROM = ("--num-layers", "--encoder-num-layers", TOPOLOGY, "--use-checkpoint-args",
               "--yaml-cfg")


def no_layers(pairs: Sequence[tuple[str, str | None]], gap: bool, framework: str
              ) -> list[Problem]:
    """A Megatron-backend launch that gives no layer count: Megatron-LM's validate_args
    (training/arguments.py) asserts "either num_layers or encoder_num_layers should be
    specified", and miles' parse_args always runs it for the Megatron backend (miles
    31f1ca9 utils/arguments.py:2711); slime's unless --debug-rollout-only
    (slime 624b824 utils/arguments.py:1638). Nothing fills it from the HF checkpoint on that
    backend (FSDP does). Undecided while an unknown word may hold the flag."""
    given = {f: v for f, v in pairs}
    if gap or given.get("--train-backend", "megatron") != "megatron" \
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


def may_vanish(found: ScriptRead) -> list[Problem]:
    """A value-taking flag whose one value word is an unquoted expansion known only at run
    time, followed by a flag or nothing (``--wandb-key ${WANDB_KEY} --wandb-project x``):
    when it is empty, bash drops the word and argparse refuses the launch ("argument
    --wandb-key: expected one argument"). Run by the stack being judged (`current`)."""
    from ..reading.stack import current

    out = []
    argv = found.argv
    for k, fv in enumerate(argv):
        if not fv.bare:
            continue
        f = current().flag(fv.flag)
        takes = f.takes_value and f.nargs not in ("?", "*") if f is not None else \
            known(fv.flag) and not is_switch(fv.flag)
        nxt = argv[k + 1] if k + 1 < len(argv) else None
        if not takes or nxt is not None and not nxt.flag:
            continue
        name = fv.bare.strip("${}").partition(":")[0] or fv.bare
        out.append(Problem(
            "flag-value-may-be-empty",
            f"{fv.flag} {fv.bare}: if {name} is empty when the script runs, bash drops the "
            f"unquoted word and argparse refuses the launch (\"argument {fv.flag}: expected "
            "one argument\")",
            f"quote the expansions that carry it (\"{fv.bare}\", and \"${{ARGS[@]}}\" for an "
            f"array holding it), give {name} a default (${{{name}:-...}}), or leave "
            f"{fv.flag} out when {name} is empty", (fv.flag,),
            location=Location(fv.source.path, fv.source.line)))
    return out


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


def _dirs(path: str, stack) -> list[str]:
    """Where a file a launch names may be: beside the script, its checkout, here."""
    import os

    return [os.path.dirname(os.path.abspath(path))] + ([stack.root] if stack.root else [])


def _first_source(found: ScriptRead, flag: str) -> tuple[str, int]:
    src = next(u.source for u in found.unresolved if u.flag == flag)
    return src.path, src.line


def _sizes_after(found: ScriptRead, gap: int) -> bool:
    """Whether every flag of the summary is given, known, after argv position `gap` (an
    unresolved word list that may hold any flag: the last occurrence wins)."""
    given = {field_of(fv.flag) for fv in found.argv[gap:] if fv.value is not None}
    return set(summary_fields()) <= given


def env_unresolved(environ, yaml: str) -> list[dict]:
    """The topology YAML's fields left unread because they read a name of an environment
    known only in part (config.PartialEnv), as `unresolved` entries of a report."""
    return [{"flag": flag_of(name), "expression": f"{name} in {yaml}", "source": yaml,
             "why": environ.why} for name in getattr(environ, "dropped", ())]


def _topology_file(found: ScriptRead) -> str:
    got = found.values().get(TOPOLOGY)
    return got[-1].value or "?" if got else "?"


def _where(found: ScriptRead) -> dict[str, Location]:
    """Flag (and, for a --topology file, each field's flag) -> where its final value is set."""
    out = {}
    for flag, seen in found.values().items():
        src = seen[-1].source
        if src.line > 0:
            out[flag] = Location(src.path, src.line)
            name = field_of(flag)
            if name:  # problems quote a field's own flag, the script may use another spelling
                out.setdefault(flag_of(name), out[flag])
    return out


def _locate(p: Problem, where: dict[str, Location]) -> Location | None:
    """The line that sets the first of the problem's flags the script sets."""
    return next((where[f] for f in p.flags if f in where), None)


def _lines(values: dict, found: ScriptRead, unresolved: list[dict], facts: set[str], why: str
           ) -> list[str]:
    lines = [f"launch: {found.launcher or '?'} {found.entry}"]
    for flag, info in values.items():
        shown = {"": "(switch)", None: "?"}.get(info["value"], info["value"])
        lines.append(f"{flag} {shown}  <- {info['source']}")
        for old in info["overridden"]:
            lines.append(f"    overrides {old['value'] or '(switch)'} at {old['source']}")
    for u in unresolved:
        what = f"{u['flag']} = {u['expression']}" if u["flag"] else u["expression"]
        lines.append(f"unresolved {what}  at {u['source']}: {u['why']}")
    if facts:
        lines.append(facts_line(facts, why))
    return lines
