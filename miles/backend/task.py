"""The toy verifiable task: answer a prompt of digits with the digits reversed, then EOS.

Prompts vary in length so packed sequences, CP chunks and SP slices cut samples unevenly.
The reward is checkable without a model (the fraction of the target produced in place),
and GRPO advantages are normalised within each prompt's group of samples.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DIGITS = 10
BOS, EOS = 10, 11
VOCAB = 12
MAX_NEW = 6


@dataclass(frozen=True)
class Batch:
    """One rollout's prompts: `prompts[i]` is the prompt of global sample i."""

    prompts: tuple[tuple[int, ...], ...]
    group: int  # samples per prompt (GRPO group size)


def make_batch(step: int, prompts: int, group: int, seed: int) -> Batch:
    rng = random.Random(seed * 7919 + step)
    out = []
    for _ in range(prompts):
        digits = tuple(rng.randrange(DIGITS) for _ in range(rng.randint(2, 4)))
        out += [(BOS, *digits)] * group
    return Batch(tuple(out), group)


def target(prompt: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(reversed(prompt[1:])) + (EOS,)


def reward(prompt: tuple[int, ...], response: tuple[int, ...]) -> float:
    want = target(prompt)
    return sum(a == b for a, b in zip(want, response)) / len(want)


def advantages(rewards: list[float], group: int) -> list[float]:
    """Group-normalised (GRPO); with one sample per prompt, the batch mean is the baseline."""
    size = group if group > 1 else len(rewards)
    out = []
    for i in range(0, len(rewards), size):
        g = rewards[i : i + size]
        mean = sum(g) / len(g)
        std = (sum((r - mean) ** 2 for r in g) / len(g)) ** 0.5
        out += [(r - mean) / (std + 1e-6) for r in g]
    return out
