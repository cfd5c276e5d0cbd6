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

from ..model.errors import Location, NoTrainingLaunch, Problem
from ..model.topology import Topology
from ..pylaunch import UNKNOWN_ENV, PythonLaunch, read_python_launches
from ..pylaunch.cluster import ClusterModel
from ..pylaunch.standins import unknowns_in
from ..reading import surface
from ..reading.env import AT_RUN_TIME, PartialEnv
from ..reading.flags import TOPOLOGY, parse_flags, table
from ..reading.sources import refused_topology
from .launch import Arg, Launch, actor_words, judge, not_ours


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
    the sandbox's allow-lists (spare.launcher_env, pylaunch.read_paths)."""
    cluster = cluster or ClusterModel.of({})
    got = read_python_launches(path, launcher_args, env, cluster=cluster,
                               real_imports=real_imports, trust=trust, pass_env=pass_env,
                               reads=reads, meanwhile=_warm)
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
    return [judge(launch_of(path, g, env, cluster, len(ours)), cluster) for g in ours]


def _warm() -> None:
    """What judging a launch builds on first use from constants alone (the Topology
    validator, miles' flag surface, our flag table: ~25 ms), built while the launcher runs
    in its sandbox (read_python_launches's `meanwhile`)."""
    try:
        Topology.model_rebuild()
        surface.flag(TOPOLOGY)
        table()
    except Exception:  # noqa: BLE001 - the judging builds them again and says what failed
        pass


STANDIN_WHY = ("a value from a stand-in module, which the check does not guess "
               "(--real-imports uses the installed modules)")


def _untaint(got: PythonLaunch, words: list[str], opaque: Mapping[str, dict]
             ) -> tuple[list[str], list[tuple[str, str | None]], list[dict], int | None,
                        list[int]]:
    """The launch's argv without the flags whose value holds a stand-in's Unknown, as (argv
    for the rules, (flag, value or None) pairs, unresolved entries, position of the last
    unknown word that may hold any flag, the index in `words` of each pair's flag).
    `opaque`: words that may stand for any flags (an array of a sourced file not read), with
    their unresolved entry."""
    argv, pairs, unresolved, gap, at = [], [], [], None, []
    i = 0

    def entry(flag, word):
        ids = unknowns_in(word)
        info = [got.unknowns.get(n, {"what": "a stand-in's value", "source": None})
                for n in ids]
        src = next((x["source"] for x in info if x["source"]), got.source)
        what = "; ".join(dict.fromkeys(x["what"] for x in info))
        missing = "(no such file here)" in what
        unresolved.append({"flag": flag, "expression": what,
                           "source": _raw(src),
                           "why": "the file does not exist here" if missing else STANDIN_WHY,
                           "kind": "missing-file" if missing else "stand-in"})

    while i < len(words):
        w = words[i]
        flag, eq, value = w.partition("=")
        if w in opaque:
            unresolved.append(opaque[w])
            gap = len(pairs)
            i += 1
            continue
        if w.startswith("--") and not unknowns_in(flag):
            at.append(i)
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
    return argv, pairs, unresolved, gap, at


# a word of a shell string that bash expands to a variable's words: ${MODEL_ARGS[@]}, $X
_EXPANSION = re.compile(r"\$(?:\{[A-Za-z_]\w*(?:\[[@*]\])?\}|[A-Za-z_]\w*)")


def _sourced(path: str, got: PythonLaunch) -> tuple[list[str], list[Location | None],
                                                    dict[str, dict]]:
    """The launch's words with each ``${NAME[@]}`` its shell string leaves to the files it
    sources first spelled out, as bash runs it (slime's execute_train: ``source
    scripts/models/X.sh && ray job submit ... -- python3 train.py ${MODEL_ARGS[@]} ...``,
    624b824 slime/utils/external_utils/command_utils.py:164-176): (words, where each word is
    written, None for the launcher's own; the words not spelled out, with why). The files
    are read by the script reader, inside the launcher's checkout (gate.py); nothing runs."""
    words, where, opaque = [], [], {}
    for w in got.argv:
        if not (got.sourced and _EXPANSION.fullmatch(w)):
            words.append(w)
            where.append(None)
            continue
        toks, why = _array(path, got.sourced, w)
        if toks is None:
            if "[" in w:  # a list of words, which may hold any flag; `$X` stays a word
                opaque[w] = {"flag": None, "expression": w, "source": _raw(got.source),
                             "why": why, "kind": "sourced"}
            words.append(w)
            where.append(None)
            continue
        words.extend(t.text for t in toks)
        where.extend(t.source for t in toks)
    return words, where, opaque


def _array(path: str, files: list[str], word: str) -> tuple[list | None, str]:
    """The words `word` expands to after `source FILE` of each file, or None and why."""
    from ..shell import ScriptReadError, read_sourced

    try:
        found = read_sourced(files, word)
    except ScriptReadError as e:
        return None, str(e)
    if found.unresolved or found.gaps:
        u = found.unresolved[0] if found.unresolved else None
        return None, (f"{word} is set by {', '.join(files)}, not read here"
                      + (f" ({u.why})" if u else ""))
    return found.tokens(), ""


def _imports(path: str) -> tuple[str, ...]:
    """The frameworks a launcher imports (`import slime`, `from miles.utils ...`)."""
    from ..reading import gate

    try:  # the launcher the user named: a bounded regular file (and re-read for columns)
        text = gate.read_text(path, (gate.Path(os.path.realpath(path)),))
    except (OSError, gate.Refused):
        return ()
    return tuple(fw for fw in ("slime", "miles")
                 if re.search(rf"^\s*(?:from|import)\s+{fw}\b", text, re.M))


def launch_of(path: str, got: PythonLaunch, env, cluster: ClusterModel, of: int) -> Launch:
    """The launch as `judge` reads it. A ``--topology`` YAML is resolved with the environment
    the entry really gets: under ray job submit only the runtime env; else what the command
    sets and --env, the rest being known only at run time (this process's environment is
    never read: in CI it holds secrets, which a YAML's ${oc.env:NAME} would print)."""
    words, where_w, opaque = _sourced(path, got)
    argv, pairs, tainted, gap, at_w = _untaint(got, words, opaque)
    argv = actor_words(got.world, {f for f, _ in pairs}) + argv  # torchrun's world
    argv, refused = refused_topology(argv)  # a --topology the gate refuses: unknown, with why
    tainted = tainted + [{"flag": TOPOLOGY, "expression": f"{TOPOLOGY} {value}",
                          "source": _raw(got.source), "why": why} for value, why in refused]
    where = _shown(path, got.source) if got.source else None
    at = str(where) if where else "?"
    shown = {"argv": got.argv, "source": at,
             "launch": {"index": got.index, "of": of, "command": got.command, "source": at},
             "cluster": cluster.as_dict(), "probes": got.probes, "servers": got.servers,
             "assumed": got.assumed,
             "others": [{"kind": o.kind, "command": o.command,
                         "source": f"{o.source[0]}:{o.source[1]}" if o.source else None}
                        for o in got.others],
             "notes": got.notes}
    # a YAML written in the sandbox is gone: its findings point at the line passing it
    args = [Arg(f, val, _shown(path, got.spelled[f]) if f in got.spelled else where)
            if val in got.files else Arg(f, val, where_w[k]) for (f, val), k in zip(pairs, at_w)]
    return Launch(
        path, got.launcher, got.entry, argv, args,
        _environ(got, env), [os.path.dirname(os.path.abspath(path)), os.getcwd()],
        unresolved=tainted, topology_file=parse_flags(argv).topology or "?", gap=gap,
        gap_why=f"the model shape may come from {tainted[-1]['expression']}"
        if gap is not None else "",
        vague=gap is not None or any(val is None for _, val in pairs)
        or any("$" in w for w in argv) or any(p["answer"] is None for p in got.probes),
        imports=_imports(path), site=where, head=_lines(got, of, at, cluster),
        shown=shown, sized_by_cluster=True, written=got.files,
        at={f: _shown(path, got.spelled[f]) for f in got.spelled},
        problems=[Problem("launcher-note", n, _note_fix(n), (),
                          location=where or Location(path, 0)) for n in got.notes])


def _note_fix(note: str) -> str:
    """What a launcher note asks of the user, if anything."""
    if "not installed here" in note:
        return "install it (or put it on PYTHONPATH) for the values it really gives"
    return "none needed: the launch recorded is the one checked"


def _raw(source) -> Location | str:
    return Location(source[0], source[1]) if source else "?"


def _environ(got: PythonLaunch, env):
    """The environment the entry gets: a ray job's runtime env alone (known in part when it
    is not given literally); else what the command sets over --env, the rest known only at
    run time."""
    if not got.env_known:
        return PartialEnv(got.env, why=UNKNOWN_ENV)
    if got.launcher == "ray job submit":
        return dict(got.env)
    return PartialEnv({**(env or {}), **got.env}, why=AT_RUN_TIME, defaults=True)


def _lines(got: PythonLaunch, of: int, at: str, cluster: ClusterModel) -> list[str]:
    """The report's first lines: which launch and where, the sandbox's notes, the cluster,
    the probes and servers answered, what was assumed."""
    which = "launch: "
    if of > 1 or got.command:
        which = f"launch {got.index + 1} of {of}" if of > 1 else "launch"
        which += f" (command `{got.command}`)" if got.command else ""
        which += ": "
    lines = [f"{which}{got.launcher} {got.entry}  <- {at} (run in a sandbox in "
             f"{got.seconds:.2f} s; {len(got.others)} other action(s) recorded, not run)"]
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
    return lines


def _shown(path: str, source) -> Location:
    """A location in the launcher as the user named it, in another file relative to here
    (with the column where the locator knows it: pylaunch/locate.py)."""
    same = os.path.realpath(source[0]) == os.path.realpath(path)
    return Location(path if same else os.path.relpath(source[0]), source[1],
                    source[2] if len(source) > 2 else None)


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
