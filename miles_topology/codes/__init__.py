"""Every problem code, declared once with everything a user needs to know about it.

Like ruff's registry, each code is one record (`Code`): its severity, whether `--fix` can
rewrite it, a one-line summary, why it matters (what the real stack does), the upstream
source it follows and an example that reports it. A rule declares the codes it reports in
its decorator (`@rule(source=..., codes={...})`, checks/; the rule's docstring is their
`why`); a code reported outside the rules is declared with `declare` by what reports it
(below, and checks/fsdp.py). Declaring a code twice is an error, so the registry cannot
drift from what is reported; a test scans the sources for codes no one declared. `rule
CODE` prints a code's whole record and docs/problem-codes.md is generated from the registry
(`python tools/gen_codes.py > docs/problem-codes.md`; a test keeps the two equal).
Codes are stable kebab-case strings: add codes, never rename one. Rules run in the order
they register (checks/__init__.py imports them in order). The registry is complete once
`miles_topology` is imported (its `__init__` imports checks/).

Severity is the code's, for every report of it and every format. `skipped` is not a
severity but a status: a rule that cannot decide because a fact it needs is unknown reports
its code as skipped (for example `r3-requires-moe` when the model shape comes from the
checkpoint); a report is never of another severity than its code's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# error: the real stack refuses, crashes, hangs or trains wrongly; warning: it silently
# changes or drops something; note: the script reader says bash runs something other than
# what the script appears to say, or where a launcher starts training.
SEVERITIES = ("error", "warning", "note")
SKIPPED = "skipped"  # the status of a report whose rule could not decide (not a severity)


@dataclass(frozen=True)
class Code:
    """One problem code: what `rule CODE`, SARIF and docs/problem-codes.md say about it."""

    code: str
    severity: str  # one of SEVERITIES
    summary: str  # when it is reported, one line
    why: str  # why it matters: what the real stack does
    source: str  # the upstream file and function it follows
    by: str  # the rule or module that reports it
    example: str = ""  # an input that reports it (flags of a topology rule)
    # `--fix` can rewrite it mechanically: set by the fix's registration (migrations/fix.py
    # `fixer`), never declared here, so the two cannot disagree; what reads it loads the
    # fixers first (`miles-topology rule`, the SARIF help, docs/problem-codes.md)
    fixable: bool = False
    off: bool = False  # reported only when selected by name (or `all`), as ruff's RUF100


CODES: dict[str, Code] = {}  # in declaration order

# The rules a Topology must satisfy, in the order they run (registration order): each takes
# a Topology and yields its problems. The rules register here, so the model that runs them
# (model.py, on every construction) imports none of them.
Rule = Callable[[Any], Iterable[Any]]
RULES: list[Rule] = []


def declare(by: str, codes: dict[str, tuple | dict], *, why: str = "", source: str = ""
            ) -> None:
    """Register `codes`, reported by `by`. Each is (severity, summary[, example]) or a dict
    of `Code`'s fields; `why` and `source` are the group's unless a code gives its own."""
    for code, spec in codes.items():
        if code in CODES:
            raise ValueError(f"problem code {code} declared twice: {CODES[code].by}, {by}")
        fields = dict(spec) if isinstance(spec, dict) else dict(
            zip(("severity", "summary", "example"), spec))
        fields.setdefault("why", why or fields.get("summary", ""))
        fields.setdefault("source", source)
        if fields.get("severity") not in SEVERITIES or not fields.get("summary"):
            raise ValueError(f"problem code {code}: severity {fields.get('severity')!r} not one "
                             f"of {SEVERITIES} (a rule that cannot decide reports its code as "
                             f"{SKIPPED}), or no summary")
        CODES[code] = Code(code=code, by=by, **fields)


def rule(source: str, codes: dict[str, tuple | dict] | None = None,
         uses: tuple[str, ...] = ()) -> Callable[[Rule], Rule]:
    """A rule: it reports `codes` (declared here; their `why` is the rule's docstring) and
    `uses` (declared elsewhere), following upstream's `source`; it runs on every Topology."""

    def register(fn: Rule) -> Rule:
        declare(f"rule {fn.__name__} ({fn.__module__})", codes or {},
                why=inspect.cleandoc(fn.__doc__ or ""), source=source)
        fn.declares = tuple(codes or {})  # type: ignore[attr-defined]
        fn.codes = (*fn.declares, *uses)  # type: ignore[attr-defined]
        fn.source = source  # type: ignore[attr-defined]
        RULES.append(fn)
        return fn

    return register


def run_rules(topo: Any) -> list[Any]:
    """Every problem of every registered rule, in rule order."""
    return [p for fn in RULES for p in fn(topo)]


# ---- codes reported outside the rules ------------------------------------------------------

declare("flags.py (the flag grammar); sources.py (flags against a YAML); model.py (values)", {
    'flag-conflict': (
        'error', 'the same size given two different ways (flag vs YAML, alias vs name)',
        '--topology t.yaml --tensor-model-parallel-size 4   (t.yaml: tp: 2)'),
    'invalid-flag-value': (
        'error', "a flag's value is not a whole number (`None`), or is missing",
        '--tensor-model-parallel-size two'),
    'lora-weight-transfer': (
        'error', 'LoRA (`--lora-rank` > 0) with `--update-weight-transfer-mode p2p` or '
        '`disk-delta`: miles_validate_args refuses it ("LoRA weight sync is not supported for '
        'p2p (RDMA) weight transfer")',
        '--lora-rank 16 --update-weight-transfer-mode p2p'),
    'unknown-field': ('error', 'a topology YAML has a key that is not a field',
                      'tensor_parallel: 2   (in a topology YAML; the field is tp)'),
    'missing-model-fact': ('error', 'a derivation needs a model fact that was not given',
                           'topo.stage_layers(0) without --num-layers'),
    'deprecated-flag': {
        'severity': 'warning',
        'summary': 'a flag upstream deprecates (SGLang renamed or ignores it), or one miles '
                   "renamed that the launch's stack still defines; the message names the new "
                   'one (a renamed flag no stack defines is an `unknown-flag`)',
        'example': '--sglang-cuda-graph-bs 8   (now --sglang-cuda-graph-bs-decode)'},
    'unknown-flag': {
        'severity': 'error',
        'summary': "a flag the launch's stack does not define (miles' or slime's train.py: "
                   'their own flags, Megatron-LM, SGLang as `--sglang-*`, the add_arguments of '
                   'the functions the launch names; the stack given by `--stack`, beside the '
                   'script, installed, else miles_topology/reading/surface.json), or a short '
                   'alias '
                   'such as `-tp`, whatever its value: its parser exits at start-up; the '
                   'message names the closest known flag',
        'example': '--expert-model-paralel-size "${EP}"'},
    'flag-of-other-version': {
        'severity': 'warning',
        'summary': 'a flag the stack checked against does not define but another known '
                   "version or framework does (slime vs miles, a newer SGLang or Megatron-LM, "
                   "slime's patched Megatron-LM, the SGLang of miles' image): the message "
                   'names which',
        'example': '--use-gated-attention   (on miles: slime\'s patched Megatron-LM has it)'},
    'unverified-flag': {
        'severity': 'note',
        'summary': 'reported as skipped: a flag the stack does not define, while a function '
                   'the launch names (`--rollout-function-path`, `--custom-generate-function-'
                   'path`) cannot be read here, and its add_arguments may add it',
        'why': "miles' parse_args calls add_arguments(parser) of those functions "
               '(add_user_provided_function_arguments) before it parses: a flag they add is '
               'accepted',
        'example': '--custom-generate-function-path "${FN}" --agent-max-turns 4'},
    'ignored-flag': {
        'severity': 'warning',
        'summary': "a flag a slime launch's stack does not define: slime's parser drops it "
                   'and what it would set keeps its default; the message names the closest '
                   'known flag',
        'why': "slime parses Megatron's and its own flags with ignore_unknown_args=True and "
               'its SGLang flags with parse_known_args, so an unknown flag stops nothing: it '
               'is silently dropped (a typo leaves its setting at the default). miles parses '
               'strictly and refuses it (`unknown-flag`)',
        'source': 'slime 624b824 slime/backends/megatron_utils/arguments.py '
                  'megatron_parse_args (ignore_unknown_args=True); slime/utils/arguments.py '
                  'parse_args',
        'example': '--ref-micro-batch-size 4   (in a slime launch)'},
    'flag-given-twice': {
        'severity': 'warning',
        'summary': "one flag given twice with different values on a command line; miles' "
                   'parser keeps the last',
        'example': '--tensor-model-parallel-size 2 ... --tensor-model-parallel-size 4'},
}, why="miles parses its command line with argparse (Megatron-LM's parser plus miles' and the "
       "prefixed SGLang arguments): an undefined flag or a value of the wrong type ends the "
       "job at start-up, and a flag given twice keeps its last value without a word.",
   source="miles utils/arguments.py parse_args; Megatron-LM training/arguments.py; SGLang "
          "python/sglang/srt/server_args.py ServerArgs.add_cli_args")
declare("channels.py (YAML files that set arguments after parsing)", {
    'custom-config-layout': (
        'error', '`--custom-config-path` YAML sets a layout or rollout size: miles applies it '
        'in miles_validate_args, after world size and placement were computed from the '
        'command line', '--custom-config-path c.yaml   (c.yaml: tensor_model_parallel_size: 4)'),
    'custom-config-unread': (
        'note', 'reported as skipped: `--custom-config-path` cannot be read here (unknown '
        'value, missing file, not YAML), so the arguments it sets are not checked',
        '--custom-config-path "${CONFIG}"'),
    'yaml-cfg-incomplete': (
        'error', "Megatron-LM's `--yaml-cfg` YAML replaces the parsed arguments and has no "
        'top-level actor_num_nodes / actor_num_gpus_per_node, which miles\' parse_args reads '
        'next (AttributeError; slime\'s megatron_parse_args reads hf_checkpoint first)',
        '--yaml-cfg gpt_config.yaml   (nested language_model: ...)'),
    'yaml-cfg-replaces-flags': (
        'warning', "Megatron-LM's `--yaml-cfg` replaces every parsed argument with the YAML's: "
        "a command-line size the YAML does not set is dropped (on slime, its `--sglang-*` and "
        "pre-parsed flags are merged back and win)", '--yaml-cfg megatron.yaml'),
    'yaml-cfg-unread': (
        'note', 'reported as skipped: `--yaml-cfg` cannot be read here (unknown value, '
        'missing file, not YAML), so the arguments it sets are not checked',
        '--yaml-cfg "${CFG}"'),
}, why="miles_validate_args setattr()s each key of --custom-config-path's YAML onto the parsed "
       "arguments after parse_args computed args.world_size; Megatron-LM's parse_args returns "
       "the --yaml-cfg YAML as the namespace, before miles computes world size from it.",
   source="miles utils/arguments.py miles_validate_args, parse_args; Megatron-LM "
          "training/yaml_arguments.py load_yaml")
declare("reading/roles.py (slime's --megatron-config-path: PPO actor / critic overrides)", {
    'megatron-config-structure': (
        'error', "slime's `--megatron-config-path` YAML fails parse_megatron_role_args when a "
        'role is built: no top-level `megatron` list, an entry that is not a mapping, two '
        'entries for one role, or overrides that are not a mapping of names',
        '--megatron-config-path m.yaml   (m.yaml: two `- role: actor` entries)'),
    'megatron-config-unread': (
        'note', 'reported as skipped: `--megatron-config-path` cannot be read here (unknown '
        'value, a file a launcher wrote in its sandbox and did not keep: a link, a hard link, '
        'not a regular file, over 1 MiB; missing, refused by the gate, not YAML), so the '
        'role overrides it sets are not checked', '--megatron-config-path "${CFG}"'),
    'megatron-config-resources': (
        'warning', '`num_nodes` / `num_gpus_per_node` in a role\'s overrides: slime skips them; '
        'placement follows the command line', '(m.yaml: overrides: {num_nodes: 2})'),
    'megatron-config-topology': (
        'warning', "a role's overrides set a parallel size: that role trains with it, but "
        "it is applied after the command line's sizes were validated (the actor's value is "
        'the layout judged, at its YAML line); a virtual pipeline size does nothing there',
        '(m.yaml: role: actor, overrides: {tensor_model_parallel_size: 4})'),
    'megatron-config-sp-without-tp': (
        'error', "a role's overrides leave sequence parallel on at tensor parallel size 1 "
        "(they set it, or set tp 1 under the command line's validated --sequence-parallel): "
        "validate_args ran before them, so nothing switches it off, and megatron-core's "
        'ModelParallelConfig refuses the role\'s model config (ValueError)',
        '--tensor-model-parallel-size 1   (m.yaml: role: actor, overrides: '
        '{sequence_parallel: true})'),
    'megatron-config-roles-apart': (
        'error', 'with a PPO critic, the overrides give actor and critic dense grids that put '
        'a rank at another data-parallel rank or pipeline stage (or a critic grid that does '
        "not divide the world): slime splits each batch once and pairs actor and critic "
        "rank i, so the job fails or trains on another shard's values",
        '--advantage-estimator ppo   (m.yaml: role: critic, overrides: '
        '{tensor_model_parallel_size: 1}; the command line: --tensor-model-parallel-size 2)'),
}, why="slime (not miles) copies the validated arguments for each role and setattr()s the "
       "YAML's overrides on the copy, after parse_args; the actor's copy always, the critic's "
       "only with --advantage-estimator ppo. Megatron then builds each role's grid from its "
       "copy, so a parallel size there is what the role trains with, validated by nobody.",
   source="slime 624b824 utils/arguments.py parse_megatron_role_args, "
          "_apply_megatron_role_overrides; ray/placement_group.py create_actor_model, "
          "create_training_models; backends/megatron_utils/initialize.py "
          "_initialize_distributed; backends/megatron_utils/model_provider.py:134; "
          "utils/data.py process_rollout_data; docs/en/advanced/megatron-config.md; "
          "megatron-core 0.16 model_parallel_config.py:409-411")
declare("fit.py (memory.py's per-rank estimate against the GPU; check, launchers)", {
    'memory-exceeds-gpu': (
        'error', "weights, main grads and optimizer state alone (no activations) exceed the "
        "GPU's memory on some train rank: a certain out-of-memory at start-up (no `--gpu`: "
        'judged against the largest GPU modelled)',
        'Qwen3-235B-A22B with --tensor-model-parallel-size 4 --expert-model-parallel-size 1 '
        'on 8 H100 (--gpu H100)'),
    'memory-near-gpu': (
        'warning', "a train rank's estimate with activations passes 90 % of the GPU's memory "
        '(or, with a `--spec` plugin or the GPU assumed, its static memory passes the GPU)',
        'a rank at 74 of 80 GiB with --max-tokens-per-gpu 65536'),
}, why="Every train rank holds its parameters in bf16, fp32 main grads and (sharded by the "
       "distributed optimizer over dp x cp, and over edp for experts) fp32 master weights and "
       "Adam moments before the first step; past the GPU's memory the job dies with CUDA out "
       "of memory at start-up. Activations come on top (an estimate).",
   source="Megatron-LM training/theoretical_memory_usage.py; megatron-core GPTModel; "
          "Korthikanti et al. 2022 (arXiv 2205.05198) Table 2")
declare("judging/verdict.py (where a Python launcher starts training)", {
    'launch': (
        'note', 'a training launch of a Python launcher, at its file:line: one notice per '
        'launch in `--format github`/`sarif`, so each launch of a file is located',
        'miles-topology check run_qwen3.py --format github'),
    'launcher-note': (
        'note', 'what the sandbox saw while running a launcher beyond its launch: an import '
        'a recording stand-in answered, a launch after the first, the launcher stopped or '
        'failed after its training launch was recorded',
        'import polars   (not installed here: a recording stand-in answered it)'),
}, why="A Python launcher may start several trainings (one per model size, say); each is "
       "checked on its own and located at the line that starts it.",
   source="miles/utils/external_utils/command_utils.py execute_train")
declare("judging/launch.py judge (a whole launch: a script or a launcher's call)", {
    'flag-value-may-be-empty': (
        'warning', 'a value-taking flag whose value is one unquoted expansion known only at '
        'run time, before another flag: empty then, bash drops the word and argparse '
        'refuses the launch ("expected one argument")',
        '--wandb-key ${WANDB_KEY} --wandb-project miles   (WANDB_KEY unset)'),
    'missing-num-layers': (
        'error', 'a Megatron-backend launch script with no `--num-layers` (nor '
        "`--encoder-num-layers`) and no word list that may hold it: Megatron's validate_args "
        'asserts one is given',
        'python3 train.py --hf-checkpoint /root/Qwen3-4B ...   (no MODEL_ARGS)'),
}, why="A whole launch is what the real parser sees: what it leaves out, or what bash may "
       "leave out of it, is refused at start-up.",
   source="Megatron-LM training/arguments.py validate_args; Python argparse _match_argument")
declare("judging/verdict.py and cli.py (an input that cannot be read)", {
    'unreadable': (
        'error', 'an input cannot be read at all (missing file, bad YAML, bash syntax): exit '
        '2; in `--format github`/`sarif` and batch output',
        'miles-topology check missing.sh'),
}, why="Nothing can be checked in an input that cannot be read; it is reported so that a "
       "batch or a CI annotation names it.")
declare("cli.py (a bug of the checker while judging one input)", {
    'internal-error': (
        'error', 'the checker failed on this input (an exception of its own, e.g. a '
        'RecursionError on a deeply nested expression): exit 2; the other inputs of the batch '
        'are still judged, and no directive or `ignore` silences it',
        'miles-topology check scripts/'),
}, why="A checker bug on one pull-request file must neither pass that file unseen nor take "
       "the verdicts of every other file with it; report it with MILES_TOPOLOGY_DEBUG=1's "
       "traceback.")
declare("selection.py (suppression directives, as ruff's noqa and RUF100)", {
    'unknown-directive-code': (
        'warning', 'a `# miles-topology: disable=` directive names a code that does not '
        'exist (a misspelling): it suppresses nothing',
        '--sequence-parallel   # miles-topology: disable=sp-ignord'),
    'unused-suppression': {
        'severity': 'warning', 'off': True,
        'summary': 'a `# miles-topology: disable=` directive suppresses no report of its '
                   'file (off unless selected: `--select unused-suppression`)',
        'example': '--tensor-model-parallel-size 2   # miles-topology: disable=sp-ignored'},
}, why="A directive that names no code, or no report, turns nothing off: the report it was "
       "written for (or a later one) would pass unseen, or the directive outlived its cause.",
   source="ruff's noqa handling (RUF100 unused-noqa)")
declare("the script reader (shell/ interpret.py, read.py; judging/launch.py reports them)", {
    'missing-line-continuation': (
        'error', 'a line starts with flags (or an unresolved `${A[@]}` and flags) but the line '
        'above does not end in `\\`: bash drops them from the launch',
        'python3 train.py --colocate   (next line:)   --tensor-model-parallel-size 2'),
    'space-after-line-continuation': (
        'note', 'a line ends in `\\` followed by spaces, so the command ends there',
        'python3 train.py \\␠   (a space after the backslash)'),
    'source-cycle': ('note', 'a file is sourced again while it is being sourced',
                     'source a.sh   (in a.sh itself)'),
    'no-launch-command': (
        'note', 'no training launch (`train.py`/`train_async.py` by python, `torchrun` or `ray '
        'job submit`); converters, servers and `run.py` wrappers do not count: exit 2',
        'a script that only runs convert_hf_to_torch_dist.py'),
    'several-launch-commands': ('note', 'more than one launch command; the last one is read',
                                'python3 train.py ... ; python3 train.py ...'),
    'conditional-launch': ('note', 'the launch command runs inside an if/case/loop/&&',
                           'if [ "$MODE" = rl ]; then python3 train.py ...; fi'),
    'crlf-line-ends': (
        'warning', "the script has CR LF line ends: bash keeps each CR in the line's last word, "
        'so flags arrive as `--flag\\r` and `\\` no longer continues a line',
        'a script saved with Windows line ends'),
    'sourced-file-missing': (
        'error', "`source` of a path inside the script's checkout that does not exist, under "
        '`set -e` and not tested (`if source F`, `source F || true`): bash stops there, '
        'before the launch',
        'set -e; source "${SCRIPT_DIR}/../scripts/models/qwen3-4B.sh"   (scripts/scripts/...)'),
    'sourced-file-skipped': (
        'warning', "`source` of a path inside the script's checkout that does not exist, "
        'without `set -e` (or tested): bash goes on and what the file would set stays unset',
        'source "${SCRIPT_DIR}/models/missing.sh"   (no set -e)'),
    'sourced-from-checkout': (
        'note', 'a file sourced by an absolute path that does not exist here is read from the '
        "same path inside the script's checkout",
        'source /root/miles/scripts/models/qwen3-4B.sh   (read from ./scripts/models/)'),
}, why="The checker reads a launch script as bash does (variables, arrays, sourced files, "
       "line continuations) and says where bash runs something other than what the script "
       "appears to say, or where it read a file from.",
   source="bash(1): QUOTING, Simple Commands, `source`; miles scripts/run-*.sh")


_EXITS = {"error": "fails the check (exit 1)",
          "warning": "is reported; the check still passes",
          "note": "is reported; the check still passes"}


def page(code: str) -> str:
    """What `miles-topology rule CODE` prints: the code's whole record and how to turn it
    off (no link: the wheel ships no docs/)."""
    c = CODES[code]
    lines = [f"{code} ({c.severity}{', fixable' if c.fixable else ''})", "",
             f"Reported when: {c.summary}.",
             f"A report of it {_EXITS[c.severity]}; when a fact it needs is unknown it is "
             f"reported as {SKIPPED} instead.", "", "Why:"]
    lines += [f"  {line}".rstrip() for line in c.why.splitlines()]
    lines += ["", f"Upstream: {c.source or '-'}", f"Reported by: {c.by}"]
    if c.example:
        lines += [f"Example: {c.example}"]
    lines += [
        "", "Turn it off:",
        f"  on one line       # miles-topology: disable={code}   (on the line or the line "
        "before)",
        f"  in one file       # miles-topology: disable-file={code}",
        f"  in a run          miles-topology check --ignore {code} ...",
        f"  in a project      [tool.miles-topology] ignore = [\"{code}\"]  (pyproject.toml)",
        ""]
    return "\n".join(lines)


def markdown() -> str:
    """The text of docs/problem-codes.md: a table, then every code's record."""
    lines = [
        "# Problem codes",
        "",
        "<!-- generated from miles_topology/codes/: "
        "python tools/gen_codes.py > docs/problem-codes.md -->",
        "",
        "Every problem `miles-topology check`, `show`, `migrate` and the launcher report has a",
        "stable kebab-case code (never renamed) and one severity: errors make the configuration",
        "invalid (exit 1); warnings and notes do not. A rule that cannot decide, because a fact",
        f"it needs is unknown, reports its code as `{SKIPPED}` (a status, not a severity).",
        "`miles-topology rule CODE` prints one record.",
        "",
        "| code | severity | fixable | when |",
        "|---|---|---|---|",
    ]
    for c in CODES.values():
        summary = c.summary.replace("|", "/")
        lines.append(f"| [`{c.code}`](#{c.code}) | {c.severity} | "
                     f"{'yes' if c.fixable else ''} | {summary} |")
    for c in CODES.values():
        lines += ["", f"## {c.code}", "",
                  f"{c.severity}{', fixable' if c.fixable else ''}: {c.summary}.", ""]
        lines += [c.why, "", f"Upstream: {c.source or '-'}. Reported by: {c.by}."]
        if c.example:
            lines += ["", f"Example: `{c.example}`"]
    return "\n".join(lines) + "\n"
