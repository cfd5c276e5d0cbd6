"""0001: write renamed flags under their new names (flags.RENAMED).

The launcher still accepts the old spellings with a `deprecated-flag` warning; this step
makes the warning go away without changing what the job does:

- ``--rollout-num-gpus-per-node N`` -> ``--num-gpus-per-node N``
- ``--sglang-enable-ep-moe`` -> ``--sglang-ep-size N``, N the engine size it implied
  (``--rollout-num-gpus-per-engine``), or dropped when ``--sglang-ep-size`` is given anyway
- ``--sglang-enable-deepep-moe`` -> ``--sglang-moe-a2a-backend deepep``
"""

from __future__ import annotations

import shlex

from ..reading.flags import RENAMED
from .common import (
    EP_MOE,
    Edit,
    Reading,
    State,
    apply,
    delete,
    field_of,
    insert_lines,
    literal,
    plain_var,
    snippet,
    where_not,
)

ID = "0001"
SUMMARY = "rename renamed flags to their new names (--num-gpus-per-node, --sglang-ep-size N, " \
          "--sglang-moe-a2a-backend deepep)"

OLD_NODE = "--rollout-num-gpus-per-node"
NEW_NODE = RENAMED[OLD_NODE].new
DEEPEP = "--sglang-enable-deepep-moe"
DEEPEP_NEW = " ".join(RENAMED[DEEPEP].passes)


def migrate(state: State, r: Reading) -> None:
    edits: list[Edit] = []
    notes: dict[int, list[str]] = {}
    argv = r.script.argv
    for fv in argv:
        if fv.flag not in (OLD_NODE, EP_MOE, DEEPEP):
            continue
        why = where_not(fv, state, r, moving=False)
        if why:
            state.kept.append(f"{fv.flag} at {fv.source} keeps its old name: {why}")
            continue
        span, word = fv.span, snippet(state, fv.span)
        if fv.flag == OLD_NODE:
            if word.startswith(OLD_NODE):  # --old N, or --old=VALUE: only the name changes
                edits.append(Edit(span.start, span.start + len(OLD_NODE), NEW_NODE))
            elif literal(word) is not None:  # "--old" or '--old=N': requote the new word
                edits.append(Edit(span.start, span.end,
                                  shlex.quote(NEW_NODE + literal(word)[len(OLD_NODE):])))
            else:
                state.kept.append(f"{fv.flag} at {fv.source} keeps its old name: its word "
                                  f"{word} mixes quotes and expansions")
                continue
            state.done.append(f"{fv.source}: {OLD_NODE} -> {NEW_NODE}")
        elif fv.flag == DEEPEP:
            edits.append(Edit(span.start, span.end, DEEPEP_NEW))
            state.done.append(f"{fv.source}: {DEEPEP} -> {DEEPEP_NEW}")
        elif any(field_of(o.flag) == "engine_ep" and o.flag not in RENAMED for o in argv):
            edits.append(delete(span))
            notes.setdefault(span.stmt_line, []).append(
                f"# miles-topology {ID}: removed {EP_MOE}; --sglang-ep-size is given, "
                "which it would not override.")
            state.done.append(f"{fv.source}: removed {EP_MOE} (--sglang-ep-size is given)")
        else:
            size = engine_size_text(state, r)
            edits.append(Edit(span.start, span.end, f"--sglang-ep-size {size}"))
            state.done.append(f"{fv.source}: {EP_MOE} -> --sglang-ep-size {size} (the engine "
                              f"size, {r.topology.rollout.engine_size} GPUs)")
    for line, lines in notes.items():
        edits.append(insert_lines(state.text, line, lines))
    state.text = apply(state.text, edits)


def engine_size_text(state: State, r: Reading) -> str:
    """The engine size as the script writes it, when that is a number or one variable of the
    script itself (so the two keep moving together); else the number it resolves to."""
    sizes = [fv for fv in r.script.argv if field_of(fv.flag) == "engine_size"]
    if sizes and sizes[-1].value_spans and sizes[-1].value_spans[0] is not None \
            and sizes[-1].value_spans[0].file == state.file:
        text = snippet(state, sizes[-1].value_spans[0])
        if text.isdigit() or plain_var(text):
            return text
    return str(r.topology.rollout.engine_size)
