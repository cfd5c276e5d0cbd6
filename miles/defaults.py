"""The embedded default job: what `python -m miles.train` runs bare.

Two layers, so a user's flags are never silently overridden:
- model facts fill in one by one, wherever the user did not give them;
- the cluster layout (2 nodes x 4 GPUs, EP 2 != GPUs per node, colocated) applies only
  when the user gave no cluster, grid or rollout setting at all; any one of them means
  the user describes their own cluster and miles' own defaults apply to the rest.
A setting counts as given whether it came as a flag or from the `--topology` YAML.
"""

from __future__ import annotations

from miles_topology.model.parts import fields_in
from miles_topology.reading.flags import parse_flags
from miles_topology.reading.sources import load_fields

# field -> flags added when the field is not given (model facts and the GRPO group size)
MODEL: dict[str, list[str]] = {
    "layers": ["--num-layers", "4"],
    "heads": ["--num-attention-heads", "4"],
    "experts": ["--num-experts", "8"],
    "topk": ["--moe-router-topk", "2"],
    "rollout_routing_replay": ["--use-rollout-routing-replay"],
    "n_samples_per_prompt": ["--n-samples-per-prompt", "4"],  # GRPO needs a group per prompt
}
LAYOUT = [
    "--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4", "--num-gpus-per-node", "4",
    "--expert-model-parallel-size", "2", "--expert-tensor-parallel-size", "1", "--colocate",
]
LAYOUT_FIELDS = set(fields_in("layout", "rollout"))
REPLAY_FIELDS = set(fields_in("replay"))


def given(argv: list[str]) -> set[str]:
    """Model fields the user set, by flag or in the `--topology` YAML (InputError if unreadable)."""
    parsed = parse_flags(argv)
    fields = set(parsed.fields)
    if parsed.topology is not None:
        fields |= set(load_fields(parsed.topology))
    return fields


def with_defaults(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv with the embedded defaults appended, the flags that were added)."""
    have = given(argv)
    added: list[str] = []
    for name, flags in MODEL.items():
        if name in have or (name in REPLAY_FIELDS and have & REPLAY_FIELDS):
            continue
        added += flags
    if not have & LAYOUT_FIELDS:
        added += LAYOUT
    return list(argv) + added, added
