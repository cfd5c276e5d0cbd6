"""0002: state the implied value that surprises people, and drop the flag that does nothing.

- Expert TP: with tp > 1 on an MoE model and no ``--expert-tensor-parallel-size``, Megatron
  splits every expert over the TP group (etp = tp; the `etp-implied` warning). The step
  writes ``--expert-tensor-parallel-size`` right after the TP value, with the same text, so
  the two keep moving together and nothing changes for Megatron.
- ``--rollout-num-gpus`` under ``--colocate``: the engines use the actor's GPUs whatever it
  says (the `colocate-ignores-rollout-gpus` warning), so it goes.

Each change leaves a comment above the command it touched saying why.
"""

from __future__ import annotations

from .common import (
    Edit,
    Reading,
    State,
    apply,
    delete,
    field_of,
    insert,
    insert_lines,
    snippet,
    where_not,
    words,
)

ID = "0002"
SUMMARY = "make an implied expert TP explicit and remove --rollout-num-gpus under --colocate, " \
          "with a comment saying why"

ETP = "--expert-tensor-parallel-size"


def migrate(state: State, r: Reading) -> None:
    edits: list[Edit] = []
    notes: dict[int, list[str]] = {}
    explicit_etp(state, r, edits, notes)
    dead_rollout_gpus(state, r, edits, notes)
    for line, lines in notes.items():
        edits.append(insert_lines(state.text, line, lines))
    state.text = apply(state.text, edits)


def explicit_etp(state: State, r: Reading, edits: list[Edit], notes: dict) -> None:
    topo = r.topology
    if "etp-implied" not in {p.code for p in topo.warnings}:
        return
    tps = [fv for fv in r.script.argv if field_of(fv.flag) == "tp"]
    why = "tp does not come from a flag of the script" if not tps else \
        where_not(tps[-1], state, r, moving=False)
    if why:
        state.kept.append(f"{ETP} stays implied (etp = tp = {topo.layout.tp}): {why}; add "
                          f"{ETP} {topo.layout.tp} by hand")
        return
    tp = tps[-1]
    last = words(tp)[-1]
    value = snippet(state, last) if last is not tp.span else str(topo.layout.tp)
    edits.append(insert(last.end, f" {ETP} {value}"))
    notes.setdefault(last.stmt_line, []).append(
        f"# miles-topology {ID}: expert TP made explicit; without it Megatron uses etp = tp "
        f"= {topo.layout.tp} (each expert split over the TP group).")
    state.done.append(
        f"{tp.source}: added {ETP} {value} (etp = tp = {topo.layout.tp}, was implied)"
    )


def dead_rollout_gpus(state: State, r: Reading, edits: list[Edit], notes: dict) -> None:
    topo = r.topology
    dead = [fv for fv in r.script.argv if field_of(fv.flag) == "rollout_gpus"]
    if not topo.rollout.colocate or not dead or topo.layout.framework != "miles":
        return  # slime keeps a given --rollout-num-gpus under --colocate (placement.py)
    colocate = [fv for fv in r.script.argv if field_of(fv.flag) == "colocate"]
    why = next((w for w in (where_not(fv, state, r) for fv in dead) if w), None)
    if not why and any(fv.span is None or fv.span.branch for fv in colocate):
        why = "--colocate itself is conditional (or not a word of its own)"
    if why:
        state.kept.append(f"--rollout-num-gpus (ignored under --colocate) stays: {why}")
        return
    for fv in dead:
        for span in words(fv):
            edits.append(delete(span))
        notes.setdefault(fv.span.stmt_line, []).append(
            f"# miles-topology {ID}: removed --rollout-num-gpus {fv.value}: under --colocate "
            f"the engines use the actor's {topo.layout.actor_gpus} GPUs, so it had no effect.")
        state.done.append(f"{fv.source}: removed --rollout-num-gpus {fv.value} (ignored under "
                          "--colocate)")
