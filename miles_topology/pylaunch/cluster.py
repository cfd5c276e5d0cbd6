"""The modelled cluster a Python launcher is checked on: nodes, GPUs per node, GPU, NVLink.

Launchers probe the machine they start on (miles' ``command_utils.check_has_nvlink()`` runs
``nvidia-smi topo -m 2>/dev/null | grep -o 'NV[0-9][0-9]*' | wc -l`` and does ``int(...)``;
others count ``nvidia-smi -L`` lines, read ``--query-gpu=name``, ask ``torch.cuda`` or
``ray.nodes()``). The check runs nowhere near that machine, so it answers from this model: the
text the probes would print (the shapes of ``nvidia-smi`` 5xx and ``rocm-smi`` 6.x output), run
through the text filters that follow them (miles_topology/textfilters, nothing is executed).
Defaults are what miles' own launchers assume (``NUM_GPUS_OF_HARDWARE`` in
miles/utils/external_utils/command_utils.py: 8 GPUs a node; one node; NVLink); a report says
which values were assumed rather than given.

This file is loaded by the sandbox's child too, so it imports only the standard library,
the GPU table (model/gpus.py), commandline and textfilters.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from ..model.gpus import DEFAULTS, GPUS, PER_NODE
from ..reading.commandline import _PY
from ..reading.pysource import parse
from ..reading.textfilters import Ran, run_pipeline

Python = Callable[[list], "tuple[str, int] | None"]  # a python probe's runner: ClusterModel.answer


@dataclass
class ClusterModel:
    nodes: int = 1
    gpus_per_node: int = 8
    gpu: str = "H100"
    nvlink: bool = True
    assumed: tuple[str, ...] = ()  # the fields not given (defaults), for the report
    current: int = field(default=0, compare=False)  # the node a probe runs on (ray inline)
    remote: bool = field(default=False, compare=False)  # inside a stand-in Ray task

    @classmethod
    def of(cls, given: dict) -> ClusterModel:
        """From the values given (CLI flags over the config table); the rest are defaults."""
        values = {k: given[k] for k in DEFAULTS if given.get(k) is not None}
        if "gpus_per_node" not in values and values.get("gpu", "").upper() in PER_NODE:
            values["gpus_per_node"] = PER_NODE[values["gpu"].upper()]
        assumed = tuple(k for k in DEFAULTS if k not in values)
        return cls(**{**DEFAULTS, **values}, assumed=assumed)

    def as_dict(self) -> dict:
        return {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "gpu": self.gpu,
                "nvlink": self.nvlink, "assumed": list(self.assumed)}

    def line(self) -> str:
        """One report line; the assumed values are marked as such."""
        def a(key: str) -> str:
            return " (assumed)" if key in self.assumed else ""

        return (f"modelled cluster: {self.nodes} node(s){a('nodes')}, {self.gpus_per_node}"
                f"{a('gpus_per_node')} x {self.name}{a('gpu')} a node, "
                f"{'NVLink' if self.links else 'no NVLink'}{a('nvlink')} -- probes are answered "
                "from this model, not measured")

    # ------------------------------------------------------------ facts

    @property
    def spec(self) -> tuple[str, int, int, str]:
        key = self.gpu.upper()
        if key in GPUS:
            return GPUS[key]
        amd = key.startswith("MI")
        return (self.gpu if amd or key.startswith("NVIDIA") else f"NVIDIA {self.gpu}", 81920,
                0 if amd else 18, "amd" if amd else "nvidia")

    @property
    def name(self) -> str:
        return self.spec[0]

    @property
    def vendor(self) -> str:
        return self.spec[3]

    @property
    def links(self) -> int:
        """NVLink links between two GPUs of a node (0: PCIe only, or AMD's xGMI)."""
        return self.spec[2] if self.nvlink and self.vendor == "nvidia" else 0

    def ip(self, node: int) -> str:
        return f"10.0.0.{node + 1}"

    def hostname(self, node: int) -> str:
        return f"node-{node}"

    def uuid(self, node: int, gpu: int) -> str:
        return f"GPU-{node:08x}-0000-0000-0000-{gpu:012x}"

    # ------------------------------------------------------------ what the probes print

    def nvidia_smi(self, args: list[str]) -> Ran | None:
        if self.vendor != "nvidia":
            return Ran("", 127)  # bash: nvidia-smi: command not found
        ids = list(range(self.gpus_per_node))
        rest = []
        i = 0
        while i < len(args):  # -i / --id select GPUs for every query
            a = args[i]
            if a in ("-i", "--id") and i + 1 < len(args):
                ids, i = _ids(args[i + 1], ids), i + 2
                continue
            if a.startswith("--id="):
                ids = _ids(a[5:], ids)
            else:
                rest.append(a)
            i += 1
        if ids is None:
            return None
        if rest in (["-L"], ["--list-gpus"]):
            return Ran("".join(f"GPU {g}: {self.name} (UUID: {self.uuid(self.current, g)})\n"
                               for g in ids), 0)
        if rest[:1] == ["topo"] and rest[1:] in (["-m"], ["--matrix"]):
            return Ran(self._topo(), 0)
        if rest[:1] == ["nvlink"] and rest[1:] in (["-s"], ["--status"]):
            per = "".join(f"\t Link {k}: 26.562 GB/s\n" for k in range(self.links))
            return Ran("".join(f"GPU {g}: {self.name} (UUID: {self.uuid(self.current, g)})\n"
                               + per for g in ids), 0)
        query = [a for a in rest if a.startswith("--query-gpu=")]
        fmt = [a for a in rest if a.startswith("--format=")]
        if len(query) == 1 and len(fmt) == 1 and len(rest) == 2:
            return self._query(query[0].split("=", 1)[1].split(","),
                               fmt[0].split("=", 1)[1].split(","), ids)
        return None

    def _query(self, fields: list[str], fmt: list[str], ids: list[int]) -> Ran | None:
        if "csv" not in fmt or set(fmt) - {"csv", "noheader", "nounits"}:
            return None
        units = "nounits" not in fmt
        mem = self.spec[1]
        values = {
            "index": lambda g: str(g), "name": lambda g: self.name, "gpu_name": lambda g:
            self.name, "uuid": lambda g: self.uuid(self.current, g), "gpu_uuid": lambda g:
            self.uuid(self.current, g), "count": lambda g: str(self.gpus_per_node),
            "memory.total": lambda g: f"{mem} MiB" if units else str(mem),
            "memory.used": lambda g: "0 MiB" if units else "0",
            "memory.free": lambda g: f"{mem} MiB" if units else str(mem),
            "pci.bus_id": lambda g: f"00000000:{0x18 + 0x10 * g:02X}:00.0",
        }
        fields = [f.strip() for f in fields]
        if any(f not in values for f in fields):
            return None
        head = "" if "noheader" in fmt else ", ".join(
            f + (" [MiB]" if units and f.startswith("memory.") else "") for f in fields) + "\n"
        return Ran(head + "".join(", ".join(values[f](g) for f in fields) + "\n" for g in ids),
                   0)

    def _topo(self) -> str:
        n = self.gpus_per_node
        half = max(1, n // 2)

        def link(a: int, b: int) -> str:
            if a == b:
                return " X "
            if self.links:
                return f"NV{self.links}"
            return "NODE" if a // half == b // half else "SYS"

        rows = ["\t" + "\t".join(f"GPU{g}" for g in range(n)) +
                "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
        rows += [f"GPU{a}\t" + "\t".join(link(a, b) for b in range(n)) +
                 f"\tN/A\t{a // half}\t\tN/A" for a in range(n)]
        legend = ["", "Legend:", "", "  X    = Self",
                  "  SYS  = Connection traversing PCIe and the SMP interconnect between NUMA "
                  "nodes",
                  "  NODE = Connection traversing PCIe and the interconnect between PCIe host "
                  "bridges within a NUMA node",
                  "  PHB  = Connection traversing PCIe and a PCIe host bridge",
                  "  PXB  = Connection traversing several PCIe bridges",
                  "  PIX  = Connection traversing at most one PCIe bridge",
                  "  NV#  = Connection traversing a bonded set of # NVLinks"]
        return "\n".join(rows + legend) + "\n"

    def rocm_smi(self, args: list[str]) -> Ran | None:
        if self.vendor != "amd":
            return Ran("", 127)
        top = "=" * 30 + " ROCm System Management Interface " + "=" * 30 + "\n"
        end = "=" * 35 + " End of ROCm SMI Log " + "=" * 35 + "\n"
        gpus = range(self.gpus_per_node)
        if args == ["--showproductname"]:
            body = "".join(f"GPU[{g}]\t\t: Card Series: \t\t{self.name}\n"
                           f"GPU[{g}]\t\t: Card Vendor: \t\tAdvanced Micro Devices, Inc. "
                           "[AMD/ATI]\n" for g in gpus)
            return Ran(top + body + end, 0)
        if args in (["--showid"], ["-i"]):
            body = "".join(f"GPU[{g}]\t\t: Device ID: \t\t0x74a1\n" for g in gpus)
            return Ran(top + body + end, 0)
        if args == []:
            head = "Device  Node  Temp    Power  SCLK    MCLK     Fan  Perf  VRAM%  GPU%\n"
            body = "".join(f"{g:<8}{g + 2:<6}35.0C   140.0W 132Mhz  900Mhz   0%   auto  0%     "
                           "0%\n" for g in gpus)
            return Ran(top + head + body + end, 0)
        return None

    # ------------------------------------------------------------ a command line

    def ray_status(self, rest: list[list[str]]) -> Ran | None:
        """``ray status``'s resources section as ray prints it (ray/autoscaler/_private/
        util.py, format_info_string / get_usage_report: `` USED/TOTAL NAME``), GPUs only:
        the model knows no CPU count or memory, so only a pipeline that greps the GPU line
        is answered (``ray status | grep GPU | ...``), anything else stays unknown."""
        grep = rest[0] if rest else []
        if grep[:1] != ["grep"] or not any("GPU" in a for a in grep[1:] if a[:1] != "-"):
            return None
        total = float(self.nodes * self.gpus_per_node)
        return Ran(f"Resources\n{'-' * 63}\nTotal Usage:\n 0.0/{total} GPU\n", 0)

    def answer(self, argv: list[str] | None, shell: str | None, python: Python | None = None
               ) -> tuple[Ran | None, bool]:
        """(what the command prints and its status, whether it probed the cluster); None when
        any part of it is not modelled (the caller answers as it always did). `python` runs
        a ``python3 -c CODE`` / ``python3 FILE`` probe with the stand-ins that answer from
        this model (the sandbox's child gives it; p2p-weight-transfer's run.py asks Ray's
        ``cluster_resources()`` in one): (stdout, status), or None when it cannot."""
        if argv and shell is None:
            base = argv[0].rsplit("/", 1)[-1]
            if base in ("bash", "sh") and len(argv) == 3 and argv[1] in ("-c", "-lc"):
                shell = argv[2]
            else:
                return self._pipeline([list(argv)], python)
        if shell is None:
            return None, False
        return self._script(shell, python)

    def _script(self, text: str, python: Python | None = None) -> tuple[Ran | None, bool]:
        parts = _split(text)
        if parts is None:
            return None, False
        out, status, probed, op = "", 0, False, ";"
        for pipeline, nxt in parts:
            if (op == "&&" and status != 0) or (op == "||" and status == 0):
                op = nxt
                continue
            got, p = self._pipeline(pipeline, python)
            if got is None:
                return None, False
            out, status, probed, op = out + got.stdout, got.status, probed or p, nxt
        return Ran(out, status), probed

    def _pipeline(self, commands: list[list[str]], python: Python | None = None
                  ) -> tuple[Ran | None, bool]:
        first, rest = commands[0], commands[1:]
        name = first[0].rsplit("/", 1)[-1] if first else ""
        source: Ran | None
        if name == "nvidia-smi":
            source = self.nvidia_smi(first[1:])
        elif name == "rocm-smi":
            source = self.rocm_smi(first[1:])
        elif name == "ray" and first[1:] == ["status"]:
            source = self.ray_status(rest)
        elif name == "scontrol" and first[1:] == ["show", "hostnames"]:
            source = Ran("".join(self.hostname(i) + "\n" for i in range(self.nodes)), 0)
        elif name == "hostname":
            source = {(): Ran(self.hostname(self.current) + "\n", 0),
                      ("-I",): Ran(self.ip(self.current) + " \n", 0),
                      ("-i",): Ran(self.ip(self.current) + "\n", 0)}.get(tuple(first[1:]))
        elif python is not None and _PY.match(name):
            got = python(first[1:])
            source = Ran(*got) if got is not None else None
        elif name in ("true", ":", "unset", "export") and not rest:
            return Ran("", 0), False
        else:
            return run_pipeline(commands), False
        if source is None:
            return None, False
        if not rest:
            return source, True
        got = run_pipeline(rest, source.stdout)
        return got, got is not None


def cluster_for(launcher: str, given: dict) -> ClusterModel:
    """The cluster `check LAUNCHER.py` models: the flags given, over the keys `nodes`,
    `gpus-per-node`, `gpu`, `nvlink` of the ``[tool.miles-topology]`` table (the closest
    pyproject.toml from the launcher up, else from the current folder; reading/settings.py
    reads it; none with `isolated` given, as --isolated), over the defaults. Raises InputError on
    a bad value."""
    from ..model.errors import InputError
    from ..reading.settings import CLUSTER_KEYS, TABLE, find_pyproject, read_toml

    found = None if given.get("isolated") else \
        find_pyproject(launcher) or find_pyproject(os.getcwd())
    table = read_toml(found)["tool"][TABLE] if found else {}
    values = {k.replace("-", "_"): table[k] for k in CLUSTER_KEYS if k in table}
    origin = {k: f" in {found}" for k in values}
    for k, v in given.items():
        if v is not None and k != "isolated":
            values[k], origin[k] = v, ""
    for key in ("nodes", "gpus_per_node"):
        v = values.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise InputError(f"{key.replace('_', '-')} = {v!r}{origin[key]}: expected a whole "
                             "number of at least 1 (e.g. --nodes 2 --gpus-per-node 8)")
    if values.get("nvlink") is not None and not isinstance(values["nvlink"], bool):
        raise InputError(f"nvlink = {values['nvlink']!r}{origin['nvlink']}: expected true or "
                         "false")
    if values.get("gpu") is not None and not str(values["gpu"]).strip():
        raise InputError("--gpu: expected a GPU name, e.g. H100, B200, MI300X")
    return ClusterModel.of(values)


def _ids(spec: str, ids: list[int]) -> list[int] | None:
    try:
        out = [int(x) for x in spec.split(",")]
    except ValueError:
        return None
    return out if all(x in ids for x in out) else None


def _plain(text: str) -> bool:
    """Whether a shell string has no expansion, subshell, group or input redirection outside
    single quotes (inside double quotes only $, ` and \\ are special): python code quoted
    for ``-c`` is plain."""
    quote = ""
    for c in text:
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c in "$`\\":
            return False
        elif quote == '"':
            quote = "" if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c in "(){}<":
            return False
    return not quote


def _split(text: str) -> list[tuple[list[list[str]], str]] | None:
    """A shell string as [(pipeline, the operator after it)], each pipeline a list of argv;
    redirections to /dev/null or of stderr are dropped. None for anything else (expansions,
    subshells, loops, redirections to files)."""
    if not _plain(text):
        return None
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|<>\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError:
        return None
    out: list[tuple[list[list[str]], str]] = []
    pipeline: list[list[str]] = [[]]
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in (">", ">>", ">&", "&>") and i + 1 < len(tokens):
            target = tokens[i + 1]
            if pipeline[-1] and pipeline[-1][-1] in ("1", "2"):
                fd = pipeline[-1].pop()
            else:
                fd = "1"
            if target == "/dev/null" and fd == "2" or target == "1" and t == ">&":
                i += 2
                continue
            return None  # stdout to a file: what the launcher captures is not this
        if t == "|":
            pipeline.append([])
        elif t in (";", "&&", "||", "\n"):
            if any(pipeline):
                if not all(pipeline):
                    return None
                out.append((pipeline, t))
            pipeline = [[]]
        elif set(t) <= set(";&|<>"):  # a punctuation token (a quoted word may hold these)
            return None  # a background job, |&, <<
        else:
            pipeline[-1].append(t)
        i += 1
    if any(pipeline):
        if not all(pipeline):
            return None
        out.append((pipeline, ";"))
    return out or None


# an option naming a cluster size: num_nodes, train_num_nodes, nnodes, num_gpus_per_node,
# gpus_per_node, actor_num_gpus_per_node, world_size...
_SIZE = ("node", "gpu", "world_size")


def sizes_asserted(exc: BaseException) -> list[dict]:
    """The launcher's own options a failed ``assert`` reads, when they size the cluster:
    [{"option", "flag", "value"}]. A launcher that expects a cluster checks its options
    (miles' run-glm47-flash-agentic-async.py: ``assert rollout_num_nodes > 0,
    f"train_num_nodes ({args.train_num_nodes}) must be less than num_nodes ..."``; the
    GLM-5.2 Daytona launcher's ``__post_init__``: ``self.num_nodes >= 10 and
    self.num_gpus_per_node == 4``): the user must pass those options. An option is an
    attribute of the launcher's options object (a dataclass, argparse's Namespace) read in
    the assert statement, its test or its message. Run in the sandbox's child."""
    import ast
    import dataclasses
    import linecache

    if not isinstance(exc, AssertionError) or exc.__traceback__ is None:
        return []
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame, line, filename = tb.tb_frame, tb.tb_lineno, tb.tb_frame.f_code.co_filename
    text = "".join(linecache.getlines(filename))
    try:
        tree = parse(text)
    except (SyntaxError, ValueError):
        return []
    asserts = [n for n in ast.walk(tree) if isinstance(n, ast.Assert) and
               n.lineno <= line <= (n.end_lineno or n.lineno)]
    out: dict[str, dict] = {}
    for node in ast.walk(asserts[0]) if asserts else ():
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        name = node.attr
        if not any(w in name for w in _SIZE) or name in out:
            continue
        owner = frame.f_locals.get(node.value.id, frame.f_globals.get(node.value.id))
        if not ((dataclasses.is_dataclass(owner) and not isinstance(owner, type)) or
                type(owner).__name__ == "Namespace"):
            continue
        value = getattr(owner, name, None)
        flag = f"--{name}" if f"--{name}" in text else f"--{name.replace('_', '-')}"
        out[name] = {"option": name, "flag": flag,
                     "value": value if isinstance(value, (int, float, str, type(None)))
                     else repr(value)}
    return list(out.values())
