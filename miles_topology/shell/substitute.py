"""Command substitution (``$(...)``, `` `...` ``, ``< <(...)``), the collaborator word
expansion holds (Oils runs it from word_eval through cmd_eval): only what is known without
running the script's commands. The idioms that locate files (``dirname``, ``cd && pwd``,
``realpath``) and print (``echo``, ``printf``), text filters over known text
(textfilters.py), GPU probes answered from the modelled cluster, ``miles-topology flags``,
and Python helpers run in the launcher sandbox. Anything else is an unknown value that says
why and where."""

from __future__ import annotations

import os
import re
import shlex

from ..model.errors import InputError
from ..reading import gate
from ..reading.textfilters import FILTERS, run_pipeline
from ..reading.yamlflags import COMMAND, env_names
from ..reading.yamlflags import text as flags_text
from . import syntax
from .syntax import Lit, Sub
from .values import MAX_VALUE, Field, Unk, Var, dirname, printf


class Substitutions:
    """The command substitutions of one read, over the words (`w`: expand, join, unknown,
    file_key) and the shell state they read. `cluster` answers GPU probes
    (pylaunch.cluster.Cluster.answer), if given; `filter_status` is the exit status of the
    last text pipeline evaluated; `helpers` caches the Python helpers run."""

    def __init__(self, w):
        self.w, self.sh, self.at, self.found = w, w.sh, w.at, w.found
        self.helpers: dict[tuple, object] = {}  # Python helpers run, by argv, env and cwd
        self.filter_status = 0  # exit status of the last text pipeline evaluated
        self.cluster = None  # answers GPU probes (pylaunch.cluster.Cluster.answer), if given

    def substitute(self, sub: Sub) -> Field:
        """Only the idioms that locate files (dirname, basename, cd && pwd, realpath) and
        echo/printf, after ``IFS=...`` (the substitution is a subshell: it stays there)."""
        saved = self.sh.vars.get("IFS")
        try:
            return self._substitute(sub)
        finally:
            if saved is None:
                self.sh.vars.pop("IFS", None)
            else:
                self.sh.vars["IFS"] = saved

    def _substitute(self, sub: Sub) -> Field:
        probe = _gpu_probe(sub)
        if probe is not None:
            return self.gpus(sub, probe)
        body = sub.body
        if len(body) == 1 and (type(body[0]) is syntax.Pipe and not body[0].neg or
                               _filter(body[0])):
            got = self.filtered(body[0].cmds if type(body[0]) is syntax.Pipe else body, sub)
            if got.unk is None:
                got.value = got.value.rstrip("\n")
            return got
        if len(body) == 1 and _python(body[0]):
            return self.helper(body[0], sub)
        return self.commands(sub)

    def commands(self, sub: Sub) -> Field:
        """A list of idioms joined by ``;`` or ``&&`` (``cd "$(dirname "$0")" && pwd``):
        what they print, each after the directory the ones before it changed to."""
        cwd, out = None, []
        ifs = False
        for node in _sequence(sub.body):
            if type(node) is syntax.Simple and node.assigns and not node.words:
                got = self.set_ifs(node, sub)
                if type(got) is Field:
                    return got
                ifs = ifs or got
                continue
            args = self.args(node, sub, ifs)
            if type(args) is Field:
                return args
            if not args:  # the words expanded to nothing: no command runs
                continue
            got = self.idiom(sub, args, cwd, out)
            if type(got) is Field:
                return got
            cwd = got
        return Field("\n".join(out).rstrip("\n"), self.at.src(sub.line), text=sub.text)

    def set_ifs(self, node: syntax.Simple, sub: Sub) -> Field | bool:
        """``IFS=...`` alone in the substitution: set there; whether it was, or an unknown
        Field when its value is not known."""
        ifs = False
        for a in node.assigns:
            if a.name != "IFS":
                continue
            got = self.w.join(a.value) if a.array is None and a.index is None else \
                self.w.unknown(sub, "IFS is set to an array")
            if got.unk:
                return Field(None, got.src, got.unk, sub.text)
            self.sh.vars["IFS"] = Var([Field(got.value, got.src, text=a.text)], False)
            ifs = True
        return ifs

    def args(self, node, sub: Sub, ifs: bool) -> list[str] | Field:
        """The words of one simple command of the substitution, or an unknown Field."""
        if type(node) is not syntax.Simple or node.assigns or not node.words:
            first = node.cmds[0] if type(node) is syntax.Pipe else node
            what = first.words[0].text if type(first) is syntax.Simple and first.words \
                else "commands"
            return self.w.unknown(sub, f"command substitution runs '{what}' (in a pipeline "
                                       "or compound command) when the script runs")
        if ifs and any(type(p) is not Lit and not p.quoted for w in node.words
                       for p in w.parts):
            return self.w.unknown(sub, "IFS is changed, which changes how the unquoted "
                                       "words are split")
        args = []
        for w in node.words:
            args.extend(self.w.expand(w))
        for f in args:
            if f.unk:
                return Field(None, f.src, f.unk, sub.text)
            if f.cond:
                return Field(None, f.cond.src, Unk(sub.text, f.cond.src, "it includes a "
                                                   f"value added {f.cond.why}"), sub.text)
        return [f.value for f in args]

    def idiom(self, sub: Sub, vals: list[str], cwd: str | None, out: list[str]):
        """One command of a substitution that locates files or prints: its output goes to
        `out`; the directory after it (``cd``) is returned, or an unknown Field."""
        name, rest = vals[0], [v for v in vals[1:] if not v.startswith("-")]
        if name == "cd" and len(rest) == 1:
            return self.cd(sub, rest[0], cwd)
        if name in ("realpath", "readlink") and len(rest) == 1 and (
                name == "realpath" or any(v in ("-f", "-e", "-m") for v in vals)):
            got = self.resolved(sub, name, rest[0], cwd)
        else:
            got = self.printed(sub, name, vals, rest, cwd)
        if type(got) is Field:
            return got
        out.extend(got)
        return cwd

    def cd(self, sub: Sub, target: str, cwd: str | None):
        if not target.startswith("/"):
            if cwd is None:
                return self.w.unknown(sub, "relative 'cd' depends on where the script is "
                                           "run from")
            target = os.path.join(cwd, target)
        return os.path.normpath(target)

    def resolved(self, sub: Sub, name: str, p: str, cwd: str | None) -> list[str] | Field:
        """``realpath P``, ``readlink -f P``."""
        if not p.startswith("/"):
            if cwd is None:
                return self.w.unknown(sub, f"'{name}' of a relative path depends on where "
                                           "the script is run from")
            p = os.path.join(cwd, p)
        return [os.path.normpath(p)]

    def printed(self, sub: Sub, name: str, vals: list[str], rest: list[str],
                cwd: str | None) -> list[str] | Field:
        """What ``pwd``, ``dirname``, ``basename``, ``echo``, ``printf``, ``true`` and
        ``miles-topology flags`` print; unknown for any other command."""
        if name == "pwd" and cwd is not None:
            return [cwd]
        if name == "dirname" and rest:
            return [dirname(v) for v in rest]
        if name == "basename" and rest:
            return [os.path.basename(rest[0].rstrip("/")).removesuffix(
                rest[1] if len(rest) > 1 else "\0")]
        if name == "echo":
            while vals[1:] and vals[1] in ("-n", "-e", "-E"):
                vals.pop(1)
            return [" ".join(vals[1:])]
        if name == "printf" and len(vals) > 1 and vals[1] != "-v":
            got = printf(vals[1], vals[2:])
            if got is None:
                return self.w.unknown(sub, "printf with a format not modelled")
            return [got]
        if name in ("true", ":"):
            return []
        if tuple(vals[:2]) == COMMAND and len(vals) == 3:  # our own, see yamlflags.py
            got, why = self.topology_flags(vals[2], cwd)
            if got is None:  # visible: the eval of it would otherwise drop it quietly
                self.found.unknown(sub.text, self.at.src(sub.line), why)
                return self.w.unknown(sub, why)
            return [got]
        got = self.w.unknown(sub, f"command substitution runs '{name}' when the script "
                                  "runs")
        if (vals[:2] == ["command", "-v"] and len(vals) == 3 or name == "which" and
                len(vals) == 2) and _plain_name(vals[-1]):
            got.tail = "/" + vals[-1]  # where PATH finds it: a folder known at run time
        return got

    def topology_flags(self, path: str, cwd: str | None) -> tuple[str | None, str]:
        """``$(miles-topology flags FILE.yaml)``: the YAML's flags, read with the variables
        exported here (what that command sees); None and why when that is not known."""
        sh = self.sh
        if not path.startswith("/"):
            if (cwd or sh.cwd) is None:
                return None, "a relative topology path depends on where the script is run"
            path = os.path.join(cwd or sh.cwd, path)
        env = {}
        for k, v in sh.vars.items():
            if (k in sh.exported or k in sh.inherited or sh.allexport) and not v.array:
                f = v.items[0] if v.items else None
                env[k] = None if f is None or f.unk or f.cond else f.value
        try:  # a file the script names: through the gate
            path = str(gate.find(path, self.at.roots, os.path.dirname(self.at.main_abs),
                                 limit=gate.AST_LIMIT))
        except gate.Refused as e:
            return None, str(e)
        except OSError:
            pass  # not there: `flags` says so
        unknown = [k for k in env_names(path) if k in env and env[k] is None]
        if unknown:
            return None, f"{path} reads {', '.join(unknown)}, known only at run time"
        try:
            return flags_text(path, {k: v for k, v in env.items() if v is not None},
                              check=False, sep=" "), ""
        except InputError as e:
            return None, f"miles-topology flags {path} fails: {str(e).splitlines()[0]}"

    def gpus(self, sub: Sub, cmds: list) -> Field:
        """``$(nvidia-smi -L | wc -l)``, ``$(nvidia-smi --query-gpu=name ...)``, ``$(ray
        status | grep GPU ...)``, ``$(scontrol show hostnames "$SLURM_JOB_NODELIST")``:
        answered from the modelled cluster (the one Python launchers' probes get), else
        unknown."""
        argvs = []
        for c in cmds:
            words = c.words[:3] if c is cmds[0] and c.words[0].literal() == "scontrol" else \
                c.words  # scontrol show hostnames $SLURM_JOB_NODELIST: the modelled nodes
            args = [f for w in words for f in self.w.expand(w)]
            bad = _blocked(args, sub.text)
            if bad is not None:
                return bad
            argvs.append([f.value for f in args])
        name = os.path.basename(argvs[0][0])
        if self.cluster is None:
            return self.w.unknown(sub, f"'{name}' asks the machine the script runs on; pass "
                                       "--nodes N --gpus-per-node N (and --gpu) to answer it "
                                       "from the modelled cluster")
        ran, _ = self.cluster.answer(None, " | ".join(shlex.join(a) for a in argvs))
        if ran is None:
            return self.w.unknown(sub, f"this use of '{name}' is not modelled; what it prints "
                                       "is only known when the script runs")
        self.filter_status = ran.status
        return Field(ran.stdout.rstrip("\n"), self.at.src(sub.line), text=sub.text)

    def filtered(self, cmds: list, at) -> Field:
        """What a pipeline of text filters prints over known text (textfilters.py: echo,
        printf, tr, wc, cut, grep ...; ``cat FILE`` of a file the script wrote), never run;
        unknown when a command is not such a filter or a word is not known."""
        argvs: list[list[str]] = []
        text = ""
        for k, c in enumerate(cmds):
            if type(c) is not syntax.Simple or c.assigns or c.prefix or not c.words or \
                    (k and c.stdin is not None):
                return self.w.unknown(at, "command substitution runs a pipeline with more than "
                                          "text filters when the script runs")
            args = [f for w in c.words for f in self.w.expand(w)]
            bad = _blocked(args, at.text)
            if bad is not None:
                return bad
            argv = [f.value for f in args]
            if k == 0 and c.stdin is not None:
                got = self.stdin(c, argv[0] if argv else "")
                if got.unk:
                    return Field(None, got.src, got.unk, at.text)
                text = got.value
            if k == 0 and argv and argv[0] == "cat" and len(argv) > 1:
                files = [self.written_text(a) for a in argv[1:]]
                if any(f is None for f in files):
                    return self.w.unknown(at, f"'{' '.join(argv)}' reads a file only known when "
                                              "the script runs")
                text, argv = "".join(files), ["cat"]
            argvs.append(argv)
        ran = run_pipeline(argvs, text)
        if ran is None:
            names = " | ".join(a[0] for a in argvs if a)
            return self.w.unknown(at, f"'{names}' is not a text filter modelled here; its "
                                      "output is only known when the script runs")
        self.filter_status = ran.status
        return Field(ran.stdout, self.at.src(at.line), text=at.text)

    def stdin(self, n: syntax.Simple, what: str) -> Field:
        """The text a command reads: a here-string's word (plus a newline), the output of
        ``< <(...)`` when it is known, a here-document's text, else unknown."""
        src = self.at.src(n.line)
        got = n.stdin
        if type(got) is syntax.Word:
            f = self.w.join(got)
            return f if f.unk else Field(f.value + "\n", f.src, text=got.text)
        if type(got) is syntax.Sub:
            f = self.substitute(got)
            return f if f.unk else Field(f.value + "\n", f.src, text=got.text)
        if type(got) is syntax.Heredoc:  # quoted delimiter: as written; else expanded first
            f = self.w.join(got.word) if got.word is not None else Field(got.text, src,
                                                                        text=got.text)
            return f if f.unk or f.cond else Field(f.value, src, text=what)
        why = "standard input, only known when the script runs" if got is None else \
            "a file, only known when the script runs"
        return Field(None, src, Unk(what, src, f"{what} reads {why}"), what)

    def helper(self, node, sub: Sub) -> Field:
        """``$(python3 .../model_args_utils.py NAME)``, ``$(python3 -c ...)``: a Python
        program run in the launcher sandbox (pylaunch.run_program), with the variables this
        shell exports and its own ``NAME=VALUE`` prefix (miles' geo3k example passes
        ``MODEL_ARGS_ROTARY_BASE=5000000``); what it prints is known text. One that fails
        leaves the value unknown with its error."""
        got = self.helper_call(node, sub)
        if type(got) is Field:
            return got
        argv, env, cwd = got
        refused = self.refused(argv, cwd, sub)
        if refused is not None:
            return refused
        probe = _probe(argv, cwd, self.at.roots)
        if probe and self.cluster is None:  # here it would answer for this machine
            return self.w.unknown(sub, f"the helper probes the machine it runs on ('{probe}'); "
                                       "pass --nodes N --gpus-per-node N (and --gpu) to "
                                       "answer it from the modelled cluster")
        # a probe runs with the stand-ins Python launchers get (torch, ray, nvidia-smi
        # answered from the model); any other helper with what is installed
        cluster = self.cluster if probe else None
        key = (tuple(argv), tuple(sorted(env.items())), cwd, cluster and cluster.line())
        shown = _shown(["python3", *argv])
        got = self.helpers.get(key)
        if got is None:
            from ..pylaunch import run_program  # the sandbox: only when a script needs it
            from ..reading import deadline

            if deadline.left() == 0:  # every helper after it too: at once, not one by one
                return self.w.unknown(sub, f"the helper '{shown}' was {deadline.spent_why()}")
            got = self.helpers[key] = run_program(argv, env=env, cwd=cwd, cluster=cluster,
                                                  confine=self.at.roots)
        if got.status != 0 or got.error:
            why = got.error or f"exited with status {got.status}"
            return self.w.unknown(sub, f"the helper '{shown}' gave no output: {why}")
        if len(got.stdout) > MAX_VALUE:
            return self.w.unknown(sub, f"the helper '{shown}' printed more than "
                                       f"{MAX_VALUE >> 20} MB")
        return Field(got.stdout.rstrip("\n"), self.at.src(sub.line), text=sub.text)

    def helper_call(self, node, sub: Sub) -> tuple[list[str], dict, str] | Field:
        """The helper's arguments, environment and working folder; an unknown Field when
        a word, its prefix or its here-document code is not known."""
        args = [f for w in node.words for f in self.w.expand(w)]
        given = [(a.name, self.w.join(a.value)) for a in node.prefix if a.array is None and
                 a.index is None and a.value is not None]
        bad = _blocked(args + [g for _, g in given], sub.text)
        if bad is not None:
            return bad
        argv = [f.value for f in args[1:]]
        if node.stdin is not None:  # python - <<PY ... PY: the here-document is the code
            code = self.stdin(node, "python3")
            if code.unk or code.cond:
                return self.w.unknown(sub, "the code python reads from its standard input "
                                           "is only known when the script runs")
            argv = ["-c", code.value]  # (tree-sitter-bash drops the '-' before <<)
        env = self.exports() | {name: f.value for name, f in given}
        return argv, env, self.sh.cwd or os.path.dirname(self.at.main_abs)

    def refused(self, argv: list[str], cwd: str, sub: Sub) -> Field | None:
        """The helper's program file, one the script names, goes through the gate."""
        words = list(argv)
        while words and words[0].startswith("-") and words[0] not in ("-c", "-m", "-"):
            words.pop(0)  # -u, -B: as run_program skips them
        program = words[0] if words and not words[0].startswith("-") else None
        if program is not None:
            try:
                gate.admit(os.path.join(cwd, program), self.at.roots)
            except gate.Refused as e:
                return self.w.unknown(sub, f"the helper is not run: {e}")
            except OSError:
                pass  # not there: run_program says so
        return None

    def exports(self) -> dict[str, str]:
        """The known variables a child process gets (export, declare -x, set -a, --env)."""
        names = self.sh.child_names()
        out = {}
        for name in names:
            var = self.sh.vars.get(name)
            if var is not None and not var.array and var.items and var.items[0].value \
                    is not None and var.items[0].cond is None:
                out[name] = var.items[0].value
        return out

    def written_text(self, path: str) -> str | None:
        """The text of a file this script wrote (``cat > F <<EOF``, ``echo ... > F``)."""
        return self.sh.written.get(self.w.file_key(path))


def _shown(argv: list[str]) -> str:
    """A command line as a message quotes it: at most 120 characters."""
    shown = " ".join(argv)
    return shown if len(shown) <= 120 else shown[:117] + "..."


def _sequence(body: list) -> list:
    """The commands of a substitution's list, ``a && b`` as ``a; b``."""
    cmds = []
    for node in body:
        if type(node) is syntax.AndOr and all(op in (None, "&&") for op, _ in node.items):
            cmds.extend(c for _, c in node.items)
        else:
            cmds.append(node)
    return cmds


def _blocked(fields: list[Field], text: str) -> Field | None:
    """An unknown Field for `text` when one of `fields` is unknown or only conditional."""
    bad = next((f for f in fields if f.unk or f.cond), None)
    if bad is None:
        return None
    unk = bad.unk or Unk(text, bad.cond.src, f"it includes a value added {bad.cond.why}")
    return Field(None, unk.src, unk, text)


_PROBES = re.compile(r"\b(torch|cuda|ray|nvidia[-_]smi|pynvml|GPUtil|psutil|subprocess|popen|"
                     r"gethostname|cpu_count|platform|socket|os\.system|sched_getaffinity)\b")


def _probe(argv: list[str], cwd: str, roots=None) -> str | None:
    """What in a helper's code (``-c CODE``, or the FILE itself) asks the machine about its
    GPUs, CPUs or name; None when it asks nothing (its imports are not read)."""
    words = [a for a in argv if not (a.startswith("-") and a not in ("-c", "-m"))]
    if words[:1] == ["-c"] and len(words) > 1:
        text = words[1]
    elif words[:1] == ["-m"]:
        text = words[1] if len(words) > 1 else ""
    elif words:
        path = words[0] if os.path.isabs(words[0]) else os.path.join(cwd, words[0])
        try:
            text = gate.read_text(path, roots)[:1 << 20]
        except (OSError, gate.Refused):
            return None  # not there or refused: `helper` says so
    else:
        return None
    m = _PROBES.search(text)
    return m.group() if m else None


def _plain_name(v: str) -> bool:
    """A command name PATH resolves (``python3``), not a path or an option."""
    return bool(v) and "/" not in v and not v.startswith("-") and re.fullmatch(r"[\w.+-]+", v)


def _gpu_probe(sub: Sub) -> list | None:
    """The commands of ``$(nvidia-smi ... [| filters])`` / ``$(rocm-smi ...)``, else None."""
    if sub.body is None or len(sub.body) != 1:
        return None
    node = sub.body[0]
    cmds = node.cmds if type(node) is syntax.Pipe and not node.neg else [node]
    if not all(type(c) is syntax.Simple and c.words and not c.assigns and c.stdin is None
               for c in cmds):
        return None
    words = [w.literal() for w in cmds[0].words]
    head = os.path.basename(words[0] or "")
    if head == "scontrol" and words[1:3] == ["show", "hostnames"]:
        # the job's nodes: its own list (bash reads $SLURM_JOB_NODELIST; so does scontrol
        # with no list given) is the modelled cluster's
        rest = [w.text.strip('"{}$') for w in cmds[0].words[3:]]
        return cmds if rest in ([], ["SLURM_JOB_NODELIST"], ["SLURM_NODELIST"]) else None
    return cmds if head in ("nvidia-smi", "rocm-smi") or words[:2] == ["ray", "status"] \
        else None


def _python(node) -> bool:
    """``python3 ...`` / ``python ...`` alone in a command substitution."""
    if type(node) is not syntax.Simple or node.assigns or not node.words or \
            any(a.array is not None or a.index is not None for a in node.prefix):
        return False
    head = node.words[0].literal() or ""
    if node.stdin is not None:  # python - <<PY: the code is the here-document
        return type(node.stdin) is syntax.Heredoc and os.path.basename(head) in \
            ("python3", "python") and [w.literal() for w in node.words[1:]] in ([], ["-"])
    return os.path.basename(head) in ("python3", "python") and len(node.words) > 1


def _filter(node) -> bool:
    """A lone command of textfilters' (not echo/printf: their output is read above)."""
    return type(node) is syntax.Simple and bool(node.words) and \
        node.words[0].literal() in FILTERS and node.words[0].literal() not in ("echo", "printf")
