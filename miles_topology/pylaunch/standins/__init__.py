"""Recording stand-ins for the heavy modules a launcher imports only to execute things.

A launcher imports ray (miles' ``exec_command_multi_node`` runs a command on every node), torch
(``torch.cuda.device_count()``), sglang, transformers, wandb... None of that decides the flags
it builds, and importing them costs seconds and loads CUDA libraries. `Finder` serves these
names from here: by default even when they are installed (``--real-imports`` keeps the
installed ones, with the probes of ray and torch answered from the modelled cluster), and
always when they are missing.

What a stand-in cannot answer from the cluster model is an `Unknown`: any attribute, call,
item or arithmetic on it is another Unknown, and formatting it (an f-string building a flag)
gives a marker word, ``__unknown_N__``, recorded with what it stands for. The parent finds
the markers in the recorded argv and reports those flags unresolved (`MARK`, `unknowns_in`)
instead of guessing a value. Only the standard library is imported here: the sandbox's child
loads this package too.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import itertools
import re
import sys
import types

MARK = re.compile(r"__unknown_(\d+)__")
# stand-ins by default, installed or not (they only execute things or reach the network)
ALWAYS = frozenset({
    "ray", "torch", "torchvision", "torchaudio", "sglang", "sgl_kernel", "vllm", "transformers",
    "tokenizers", "wandb", "tensorboard", "tensorboardX", "swanlab", "megatron", "deepspeed",
    "flash_attn", "flashinfer", "triton", "transformer_engine", "apex", "deep_ep", "deep_gemm",
    "mooncake", "accelerate", "datasets", "huggingface_hub", "safetensors", "peft", "pynvml",
    "nvidia", "cupy", "tensorrt_llm", "httpx", "requests", "aiohttp", "uvicorn", "fastapi",
    "openai", "mbridge", "torch_memory_saver", "sympy", "math_verify", "liger_kernel"})
# stand-ins only when missing: light, and a launcher may compute with them
FALLBACK = ALWAYS | {"numpy", "pandas", "pyarrow", "scipy", "yaml", "omegaconf", "pydantic",
                     "hydra", "tqdm", "rich", "typer"}  # typer's stand-in parses as typer
# installed modules whose probes are answered from the model under --real-imports
OVERLAY = frozenset({"ray", "torch"})

EMIT = None  # set by the child: writes one record
WHERE = None  # set by the child: the launcher's own file:line of the current call
OWN = None  # set by the child: whether a file is the launcher's own
CLUSTER = None  # set by the child: the modelled cluster (cluster.ClusterModel)
_ids = itertools.count(1)


class UnknownValueError(TypeError):
    """An Unknown was needed as a plain number (int(), len(), an index): it has none."""


def _emit(rec: dict) -> None:
    if EMIT is not None:
        rec.setdefault("source", WHERE() if WHERE else None)
        EMIT(rec)


def _is_decorated(args, kwargs) -> bool:
    return len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type))


class Unknown:
    """A value a stand-in returned that the model does not answer. See the module text."""

    __slots__ = ("_what", "_id")

    def __init__(self, what: str):
        object.__setattr__(self, "_what", what)
        object.__setattr__(self, "_id", 0)

    def _mark(self) -> str:
        if not self._id:  # recorded the first time it reaches text
            object.__setattr__(self, "_id", next(_ids))
            _emit({"unknown": self._id, "what": self._what})
        return f"__unknown_{self._id}__"

    __str__ = __repr__ = _mark

    def __format__(self, spec):
        return self._mark()

    def __fspath__(self):
        return self._mark()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Unknown(f"{self._what}.{name}")

    def __setattr__(self, name, value):
        pass

    def __call__(self, *args, **kwargs):
        if _is_decorated(args, kwargs):  # @torch.no_grad(), @torch.compile: the function
            return args[0]
        caller = sys._getframe(1).f_code.co_filename
        if OWN is not None and OWN(caller):
            recorded_call(self._what, args, kwargs)
        return Unknown(f"{self._what}(...)")

    def __getitem__(self, key):
        return Unknown(f"{self._what}[{key!r}]")

    def __setitem__(self, key, value):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        _emit({"assumed": f"iterating over {self._what}", "as": "empty"})
        return iter(())

    def __bool__(self):
        _emit({"assumed": f"the truth of {self._what}", "as": "true"})
        return True

    def __contains__(self, item):
        _emit({"assumed": f"{item!r} in {self._what}", "as": "false"})
        return False

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return Unknown(f"({self._what} == {other!r})")

    def __ne__(self, other):
        return Unknown(f"({self._what} != {other!r})")

    def __mro_entries__(self, bases):  # class Model(torch.nn.Module): a plain class
        return (object,)

    def _plain(self, *a):
        raise UnknownValueError(f"{self._what} is not known to the check (a stand-in module's "
                                "value); run with --real-imports, or give it through the "
                                "launcher's arguments")

    __int__ = __float__ = __index__ = __len__ = __complex__ = _plain


def _binary(op: str):
    def left(self, other):
        return Unknown(f"({self._what} {op} {other!r})")

    def right(self, other):
        return Unknown(f"({other!r} {op} {self._what})")

    return left, right


for _name, _op in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"),
                   ("floordiv", "//"), ("mod", "%"), ("pow", "**"), ("and", "&"), ("or", "|"),
                   ("xor", "^"), ("lshift", "<<"), ("rshift", ">>"), ("matmul", "@")):
    _l, _r = _binary(_op)
    setattr(Unknown, f"__{_name}__", _l)
    setattr(Unknown, f"__r{_name}__", _r)
for _name, _op in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    setattr(Unknown, f"__{_name}__", _binary(_op)[0])
Unknown.__neg__ = lambda self: Unknown(f"-{self._what}")
Unknown.__abs__ = lambda self: Unknown(f"abs({self._what})")
Unknown.__round__ = lambda self, n=None: Unknown(f"round({self._what})")


def unknowns_in(text: str) -> list[int]:
    """The ids of the Unknowns formatted into `text` (a word of a recorded command)."""
    return [int(m) for m in MARK.findall(text)]


def missing_file(path: str, binary: bool):
    """What reading a file that does not exist here gives: its contents are an Unknown (a
    launcher reading /root/models/X/config.json to build flags builds unresolved ones)."""
    import io

    u = Unknown(f"the contents of {path} (no such file here)")
    _FILES[u._mark()] = u
    text = u._mark()
    return io.BytesIO(text.encode()) if binary else io.StringIO(text)


_FILES: dict[str, Unknown] = {}


def parsed(text) -> Unknown | None:
    """json.loads of a missing file's contents: the Unknown they stand for."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode(errors="replace")
    return _FILES.get(text.strip()) if isinstance(text, str) else None


# ---------------------------------------------------------------- modules


class StandinModule(types.ModuleType):
    """A stand-in module: the names its `impl` defines, an Unknown for every other one."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name != "__version__":
            raise AttributeError(name)
        value = Unknown(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _impl(top: str):
    try:
        return importlib.import_module(f"{__name__}.{top}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{top}":
            return None
        raise


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        module = StandinModule(spec.name)
        module.__path__ = []  # a package: `import ray.util.scheduling_strategies` works
        module.__standin__ = True
        impl = _impl(spec.name.split(".")[0])
        if impl is not None:
            for name, value in impl.ATTRS.get(spec.name, {}).items():
                setattr(module, name, value)
        return module

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)
        impl = _impl(module.__name__.split(".")[0])
        for name in getattr(impl, "CHILDREN", {}).get(module.__name__, ()):
            importlib.import_module(name)  # torch.cuda is there after `import torch`


class _Overlay(importlib.abc.Loader):
    """The installed module, then the modelled probes over it (--real-imports)."""

    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        impl = _impl(module.__name__)
        if impl is not None and hasattr(impl, "overlay"):
            impl.overlay(module)


class Finder(importlib.abc.MetaPathFinder):
    """Serve `names` (top-level) as stand-ins. `first`: put ahead of the installed modules;
    else after them (a module that is missing). `overlay`: wrap these installed ones."""

    def __init__(self, names=frozenset(), overlay=frozenset()):
        self.names, self.overlay = frozenset(names), frozenset(overlay)

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if fullname in self.overlay:
            for finder in sys.meta_path:
                if finder is self or isinstance(finder, Finder):
                    continue
                spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _Overlay(spec.loader)
                    return spec
            return None
        if top not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


class Absent(importlib.abc.MetaPathFinder):
    """Last on the path: a module the launcher's own code imports that is not installed here
    (polars, setproctitle, a plugin package) is a stand-in too, and recorded as missing. An
    installed library's optional import (``try: import ujson``) still fails as it would."""

    def __init__(self):
        self.served: set[str] = set()

        self.loader = _Loader()

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top not in self.served:
            if "." in fullname or USER is None or not USER(sys._getframe(1), imports=True):
                return None
            self.served.add(top)
            _emit({"missing_module": top})
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)


USER = None  # set by the child: whether a frame is the user's code (not a library's)


def install(real_imports: bool) -> None:
    """Put the finders in place (the child calls this before the launcher runs)."""
    if real_imports:
        sys.meta_path.insert(0, Finder(overlay=OVERLAY))
        sys.meta_path.append(Finder(FALLBACK))
    else:
        sys.meta_path.insert(0, Finder(ALWAYS))
        sys.meta_path.append(Finder(FALLBACK - ALWAYS))
    sys.meta_path.append(Absent())


def record_launch(shell: str) -> None:
    """A launch made through a stand-in's API (Ray's JobSubmissionClient), as a command."""
    _emit({"kind": "subprocess", "argv": None, "shell": shell, "env": None,
           "env_changes": {}, "via": "stand-in"})


def recorded_call(what: str, args, kwargs) -> None:
    """Record a call the launcher made into a stand-in (wandb.init, requests.post...)."""
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    _emit({"kind": "stand-in call", "argv": None, "shell": f"{what}({', '.join(shown)})"})


_DEPTH = [0]


def run_python(args: list[str]) -> tuple[str, int] | None:
    """A python program the launcher runs for its output (``python3 -c CODE``, ``python3
    FILE``, ``python3 -m MODULE``, with its arguments), run here, in the sandbox, with the
    same stand-ins: a probe of the cluster through Ray or torch prints what the model says
    (p2p-weight-transfer's run.py waits until ``ray.cluster_resources()['GPU']`` shows every
    node). (stdout, exit status); None when it cannot be run here (no program, stdin)."""
    import contextlib
    import io
    import os
    import runpy

    words = list(args)
    while words and words[0].startswith("-") and words[0] not in ("-c", "-m"):
        words.pop(0)  # -u, -B, -E...: nothing the output depends on
    if not words or (words[0] in ("-c", "-m") and len(words) < 2) or _DEPTH[0] >= 3:
        return None
    if words[0] not in ("-c", "-m") and not os.path.isfile(words[0]):
        return None
    out, status = io.StringIO(), 0
    argv, path = sys.argv, list(sys.path)
    sys.argv = ["-c" if words[0] == "-c" else words[0 if words[0] != "-m" else 1],
                *words[2 if words[0] in ("-c", "-m") else 1:]]
    _DEPTH[0] += 1
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            if words[0] == "-c":
                exec(compile(words[1], "<string>", "exec"), {"__name__": "__main__"})
            elif words[0] == "-m":
                runpy.run_module(words[1], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(words[0], run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except Exception:  # noqa: BLE001 - it fails as the program would: status 1
        status = 1
    finally:
        _DEPTH[0] -= 1
        sys.argv, sys.path[:] = argv, path
    return out.getvalue(), status
