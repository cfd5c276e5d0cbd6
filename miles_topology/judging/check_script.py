"""`check SCRIPT.sh`: what a launch script really launches, judged by the Topology's rules.

The script is read statically (miles_topology/shell); its flags go through the same
`read_flags` as the launcher, so there is one rule set. A problem that involves a value the
reader could not resolve, or a model fact the script does not fix, is reported as skipped,
not failed: `ok` is false only when proven.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model.errors import InputError, Location
from ..pylaunch import brief
from ..reading.flags import TOPOLOGY, field_of, flag_of, known
from ..reading.sources import refused_topology
from ..shell import FlagValue, ScriptRead, ScriptReadError, read_script, require_launch
from .launch import Arg, Launch, actor_words, judge, not_ours
from .verdict import Verdict

if TYPE_CHECKING:
    from ..pylaunch.cluster import ClusterModel


def read(path: str, env: dict[str, str], args: Sequence[str] | None = None,
         cluster=None) -> ScriptRead:
    """Read a script or raise InputError (exit 2) saying why."""
    try:
        found = read_script(path, env, positional=args, cluster=cluster)
    except ScriptReadError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    found = require_launch(found)
    if found.box is None:
        not_ours(path, found.entry)
    elif found.box[1] is not None:  # in a container: the file its mount maps the entry to
        not_ours(found.box[1], found.box[1] if found.entry.endswith(".py") else found.entry)
    return found


def _torchrun_values(ranks: list[str]) -> dict:
    """The values report of the actor flags `torchrun_actor` gave, sourced to torchrun."""
    return {flag: {"value": value, "source": f"torchrun {opt} (the world it starts)",
                   "overridden": []}
            for flag, value, opt in zip(ranks[::2], ranks[1::2], ("--nnodes",
                                                                    "--nproc-per-node"))}


def torchrun_actor(found: ScriptRead) -> list[str]:
    """`actor_words` of a script's torchrun launch (its options before the entry as bash
    expands them: ``--nnodes ${NNODES}`` with NNODES known); [] when one is not known here."""
    if "torch" not in (found.launcher or ""):
        return []
    return actor_words(found.world, {fv.flag for fv in found.argv})


def flag_pairs(argv: Sequence[str]) -> list[tuple[str, str]]:
    """A plain argv (a Python launcher's, all known) as (flag, value) pairs; "" for a switch."""
    out = []
    for i, word in enumerate(argv):
        if word.startswith("--"):
            flag, eq, value = word.partition("=")
            nxt = argv[i + 1] if i + 1 < len(argv) else "--"
            out.append((flag, value if eq else "" if nxt.startswith("--") else nxt))
    return out


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
    return judge(launch_of(path, read(path, env, args, probed), env), cluster)


def launch_of(path: str, found: ScriptRead, env: dict[str, str]) -> Launch:
    """The launch a script makes, as `judge` reads it."""
    exported = found.site.environ() if found.site else env  # what a --topology YAML sees
    tokens, refused = refused_topology(found.tokens())  # a --topology the gate refuses
    ranks = torchrun_actor(found)
    gap = next((u for u in found.unresolved if u.flag is None), None)
    where = f"{gap.expression} at {gap.source} ({gap.why})" if gap else "run-time words"
    values = values_report(found)
    values.update(_torchrun_values(ranks))
    return Launch(
        path, found.launcher, found.entry, ranks + tokens,
        [Arg(fv.flag, fv.value, _at(fv), fv.bare) for fv in found.argv], exported,
        [os.path.dirname(os.path.abspath(path))],
        unresolved=_unresolved(found, refused), topology_file=_topology_file(found),
        gap=max(found.gaps) if found.gaps else None,
        gap_why=f"the model shape may come from {where}",
        vague=bool(found.gaps) or any(fv.value is None for fv in found.argv)
        or any(u.flag is None for u in found.unresolved)
        or any(p.code == "missing-line-continuation" for p in found.notes),  # its cause
        at=_where(found), problems=list(found.notes), values=values,
        head=[f"launch: {found.launcher or '?'} {found.entry}"] + (
            [f"container: {found.box[0].removeprefix('It runs ')}"] if found.box else []),
        imports=found.frameworks, box=found.box)


def _at(fv: FlagValue) -> Location:
    """Where a flag is written: its line, and its column when the word is pinned there."""
    span = fv.span
    col = span.col + 1 if span is not None and span.line == fv.source.line else None
    return Location(fv.source.path, fv.source.line, col)


def _unresolved(found: ScriptRead, refused: list) -> list[dict]:
    """The report's `unresolved` entries: one per unknown the reader met, though the launch
    may use it more than once; a --topology the gate refuses."""
    # a reason nests its causes and may quote a whole eval'd program (a heredoc of
    # `$(python3 - <<EOF ...)`): each text is kept to its first 300 characters (`brief`)
    unresolved = [
        dict(t) for t in dict.fromkeys(
            (("flag", u.flag), ("expression", brief(u.expression)), ("source", u.source),
             ("why", brief(u.why))) for u in found.unresolved)
    ]
    at = next((str(fv.source) for fv in found.argv if fv.flag == TOPOLOGY), "?")
    unresolved += [{"flag": TOPOLOGY, "expression": f"{TOPOLOGY} {value}", "source": at,
                    "why": why} for value, why in refused]
    return unresolved


def _topology_file(found: ScriptRead) -> str:
    got = found.values().get(TOPOLOGY)
    return got[-1].value or "?" if got else "?"


def _where(found: ScriptRead) -> dict[str, Location]:
    """Flag (and, for a --topology file, each field's flag) -> where its final value is set."""
    out = {}
    for flag, seen in found.values().items():
        if seen[-1].source.line > 0:
            out[flag] = _at(seen[-1])
            name = field_of(flag)
            if name:  # problems quote a field's own flag, the script may use another spelling
                out.setdefault(flag_of(name), out[flag])
    return out
