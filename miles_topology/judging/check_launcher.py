"""`check LAUNCHER.py`: the verdict on each training launch a Python launcher issues.

pylaunch/ runs the launcher in the sandbox and reads its launches; this judges them with
the rules bash scripts get (check_script's unknown-model-facts rule, one reading of flags),
so the reader of launchers and the bash reader (which runs helpers through the same sandbox)
never import each other's verdicts.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..model.errors import Location, NoTrainingLaunch
from ..pylaunch import UNKNOWN_ENV, PythonLaunch, read_python_launches
from ..pylaunch.cluster import ClusterModel
from ..pylaunch.standins import unknowns_in
from ..reading.channels import read_channels
from ..reading.env import AT_RUN_TIME, PartialEnv
from ..reading.flags import TOPOLOGY, parse_flags
from ..reading.sources import read_flags, refused_topology
from ..reading.stack import for_launch, using
from . import fit
from .check_script import (
    actor_words,
    env_unresolved,
    facts_line,
    fork_ranges,
    model_facts,
    no_layers,
    not_ours,
    skip_unknown,
)
from .verdict import verdict_of


def check_python(path: str, launcher_args: list[str], env: Mapping[str, str] | None = None,
                 cluster: ClusterModel | None = None, real_imports: bool = False,
                 trust: bool = False, pass_env: Sequence[str] = (),
                 reads: Sequence[str] = ()):
    """The Verdict on the launcher's first training launch (see `check_python_all`)."""
    return check_python_all(path, launcher_args, env, cluster, real_imports, trust, pass_env,
                            reads)[0]


def check_python_all(path: str, launcher_args: list[str], env: Mapping[str, str] | None = None,
                     cluster: ClusterModel | None = None, real_imports: bool = False,
                     trust: bool = False, pass_env: Sequence[str] = (),
                     reads: Sequence[str] = ()) -> list:
    """`check LAUNCHER.py [-- ARGS]`: one Verdict per training launch the launcher issues
    (per typer command, per call), each pointing at its own file:line. `pass_env`
    (--pass-env NAME) and `reads` (--read PATH): what of this machine it may see beyond
    the sandbox's allow-lists (pylaunch.launcher_env, pylaunch.read_paths)."""
    cluster = cluster or ClusterModel.of({})
    got = read_python_launches(path, launcher_args, env, cluster=cluster,
                               real_imports=real_imports, trust=trust, pass_env=pass_env,
                               reads=reads)
    ours, last = [], None
    for g in got:  # a launch of another program's train.py is not judged (check_script)
        try:
            not_ours(path, g.entry)
            ours.append(g)
        except NoTrainingLaunch as e:
            if len(got) == 1:
                raise
            last = e
    if last is not None and not ours:
        raise last
    return [_verdict(path, g, env, cluster, len(ours)) for g in ours]


STANDIN_WHY = ("a value from a stand-in module, which the check does not guess "
               "(--real-imports uses the installed modules)")


def _untaint(got: PythonLaunch) -> tuple[list[str], list[tuple[str, str | None]], list[dict],
                                         int | None]:
    """The launch's argv without the flags whose value holds a stand-in's Unknown, as (argv
    for the rules, (flag, value or None) pairs, unresolved entries, position of the last
    unknown word that may hold any flag)."""
    argv, pairs, unresolved, gap = [], [], [], None
    words = got.argv
    i = 0

    def entry(flag, word):
        ids = unknowns_in(word)
        info = [got.unknowns.get(n, {"what": "a stand-in's value", "source": None})
                for n in ids]
        src = next((x["source"] for x in info if x["source"]), got.source)
        what = "; ".join(dict.fromkeys(x["what"] for x in info))
        missing = "(no such file here)" in what
        unresolved.append({"flag": flag, "expression": what,
                           "source": f"{src[0]}:{src[1]}" if src else "?",
                           "why": "the file does not exist here" if missing else STANDIN_WHY,
                           "kind": "missing-file" if missing else "stand-in"})

    while i < len(words):
        w = words[i]
        flag, eq, value = w.partition("=")
        if w.startswith("--") and not unknowns_in(flag):
            nxt = words[i + 1] if not eq and i + 1 < len(words) else None
            if eq and unknowns_in(value):
                entry(flag, value)
                pairs.append((flag, None))
                i += 1
                continue
            if nxt is not None and not nxt.startswith("--") and unknowns_in(nxt):
                entry(flag, nxt)
                pairs.append((flag, None))
                i += 2
                continue
            pairs.append((flag, value if eq else "" if nxt is None or nxt.startswith("--")
                          else nxt))
        elif unknowns_in(w):  # a word that may stand for any flags
            entry(None, w)
            gap = len(pairs)
            i += 1
            continue
        argv.append(w)
        i += 1
    return argv, pairs, unresolved, gap


def _imports(path: str) -> tuple[str, ...]:
    """The frameworks a launcher imports (`import slime`, `from miles.utils ...`)."""
    from ..reading import gate

    try:  # the launcher the user named: a bounded regular file (and re-read for columns)
        text = gate.read_text(path, (gate.Path(os.path.realpath(path)),))
    except (OSError, gate.Refused):
        return ()
    return tuple(fw for fw in ("slime", "miles")
                 if re.search(rf"^\s*(?:from|import)\s+{fw}\b", text, re.M))


def _verdict(path: str, got: PythonLaunch, env, cluster: ClusterModel, of: int):
    """A ``--topology`` YAML is resolved with the environment the entry really gets: under
    ray job submit only the runtime env; else what the command sets and --env, the rest
    being known only at run time (this process's environment is never read: in CI it holds
    secrets, which a YAML's ${oc.env:NAME} would print)."""
    argv, pairs, tainted, gap = _untaint(got)
    argv = actor_words(got.world, {f for f, _ in pairs}) + argv  # torchrun's world
    argv, refused = refused_topology(argv)  # a --topology the gate refuses: unknown, with why
    tainted = tainted + [{"flag": TOPOLOGY, "expression": f"{TOPOLOGY} {value}",
                          "source": f"{got.source[0]}:{got.source[1]}" if got.source else "?",
                          "why": why} for value, why in refused]
    environ = _environ(got, env)
    stack = for_launch(path, getattr(got, "entry", None), pairs, imports=_imports(path))
    channel, words = read_channels([(f, val, None) for f, val in pairs],
                                   [os.path.dirname(os.path.abspath(path)), os.getcwd(),
                                    *([stack.root] if stack.root else [])],
                                   stack.framework)
    with using(stack):
        v = verdict_of(path, lambda: read_flags(argv + words, environ).topology)
    for p in channel:
        v.file(p)
    v.errors += _no_layers(got, argv, pairs, words, gap is not None, stack.framework)
    unresolved = tainted + (env_unresolved(environ, parse_flags(argv).topology or "?")
                            if getattr(environ, "dropped", None) else [])
    gap_why = f"the model shape may come from {tainted[-1]['expression']}" if gap is not None \
        else ""
    facts, why = model_facts(pairs, gap, gap_why)  # as for bash scripts: one rule
    skip_unknown(v, {u["flag"] for u in unresolved if u["flag"]}, facts)
    fork_ranges(v, stack, pairs)
    fit.apply(v, argv, cluster, {u["flag"] for u in unresolved} | ({None} if gap is not None
                                                                    else set()), launcher=True)
    _assumed_cluster_is_no_proof(v, cluster)
    where = _shown(path, got.source) if got.source else None
    # a problem is at the literal that spells its flag (pylaunch/locate.py), else at the
    # call that launches: every problem is in the flags of that call
    v.errors, v.warnings, v.skipped = ([p if p.location else p.at(_spelled(p, got, path) or where)
                                        for p in ps] for ps in (v.errors, v.warnings, v.skipped))
    at = str(where) if where else "?"
    lines = _lines(got, of, at, cluster, tainted, facts, why)
    v.extra = {"launcher": got.launcher, "entry": got.entry, "argv": got.argv,
               "source": at, "unresolved": unresolved,
               "launch": {"index": got.index, "of": of, "command": got.command, "source": at},
               "cluster": cluster.as_dict(), "probes": got.probes, "servers": got.servers,
               "assumed": got.assumed,
               "others": [{"kind": o.kind, "command": o.command,
                           "source": f"{o.source[0]}:{o.source[1]}" if o.source else None}
                          for o in got.others],
               "notes": got.notes, "report_lines": lines,
               "unknown_model_facts": {"flags": sorted(facts), "why": why} if facts else None}
    return v


def _environ(got: PythonLaunch, env):
    """The environment the entry gets: a ray job's runtime env alone (known in part when it
    is not given literally); else what the command sets over --env, the rest known only at
    run time."""
    if not got.env_known:
        return PartialEnv(got.env, why=UNKNOWN_ENV)
    if got.launcher == "ray job submit":
        return dict(got.env)
    return PartialEnv({**(env or {}), **got.env}, why=AT_RUN_TIME, defaults=True)


def _lines(got: PythonLaunch, of: int, at: str, cluster: ClusterModel, tainted: list[dict],
           facts: set[str], why: str) -> list[str]:
    """The report's lines: which launch and where, the sandbox's notes, the cluster, the
    probes and servers answered, what was assumed, what stayed unresolved."""
    which = "launch: "
    if of > 1 or got.command:
        which = f"launch {got.index + 1} of {of}" if of > 1 else "launch"
        which += f" (command `{got.command}`)" if got.command else ""
        which += ": "
    lines = [f"{which}{got.launcher} {got.entry}  <- {at} (run in a sandbox in "
             f"{got.seconds:.2f} s; {len(got.others)} other action(s) recorded, not run)"]
    lines += [f"note: {n}" for n in got.notes]
    lines.append(cluster.line())
    by = {"cluster": [], None: []}
    for p in got.probes:
        if p["answer"] in by:
            by[p["answer"]].append(p["command"])
    if by["cluster"]:
        lines.append("probes answered from the modelled cluster: " + "; ".join(
            f"`{c}`" + (f" (x{n})" if n > 1 else "")
            for c, n in Counter(by["cluster"]).items()))
    if by[None]:
        lines.append("probes not modelled (answered with exit 0 and no output): " + "; ".join(
            f"`{c[:100]}`" for c, _ in Counter(by[None]).items()))
    if any(s["polls"] for s in got.servers):  # [servers] the ones it waited for
        lines.append(_servers_line(got.servers, cluster))
    lines += [f"assumed: {a}" for a in got.assumed]
    for u in tainted:
        what = f"{u['flag']} = {u['expression']}" if u["flag"] else u["expression"]
        lines.append(f"unresolved {what}  at {u['source']}: {u['why']}")
    if facts:
        lines.append(facts_line(facts, why))
    return lines


def _no_layers(got: PythonLaunch, argv: list[str], pairs, words, gap: bool, framework: str):
    """check_script.no_layers, as for a bash script, undecided while a word known only at run
    time may hold the layer count: a stand-in's value, a shell expansion the command leaves
    to bash (slime's execute_train passes `${MODEL_ARGS[@]}` to `bash -c`), or the output of
    a command the sandbox did not run (answered with no output)."""
    return no_layers(pairs + [(w.text.partition("=")[0], "") for w in words],
                     gap or any(val is None for _, val in pairs) or any("$" in w for w in argv)
                     or any(p["answer"] is None for p in got.probes), framework)


def _shown(path: str, source) -> Location:
    """A location in the launcher as the user named it, in another file relative to here."""
    same = os.path.realpath(source[0]) == os.path.realpath(path)
    return Location(path if same else os.path.relpath(source[0]), source[1])


def _spelled(p, got: PythonLaunch, path: str) -> Location | None:
    """Where the first of the problem's flags the launcher spells is written."""
    return next((_shown(path, got.spelled[f]) for f in p.flags if f in got.spelled), None)


def _assumed_cluster_is_no_proof(v, cluster: ClusterModel) -> None:
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


def _servers_line(servers: list[dict], cluster: ClusterModel) -> str:
    """The servers the launcher's commands were started to serve (pylaunch/servers.py): the
    ones it connected to, then the others by name."""
    def at(s: dict) -> str:
        return f"{'127.0.0.1' if not s['node'] else cluster.ip(s['node'])}:{s['port']}"

    how = {"default": "its default port", "polled": "the port the launcher polls"}
    polled = [f"`{s['server']}` at {at(s)} ({how.get(s['flag'], s['flag'])}; connected "
              f"{s['polls']}x)" for s in servers if s["polls"]]
    idle = [f"`{s['server']}` ({at(s)})" for s in servers if not s["polls"]]
    text = "servers modelled (answered by the check, nothing runs): " + (
        "; ".join(polled) if polled else "none connected to")
    return text + (f"; also modelled: {', '.join(idle)}" if idle else "")
