"""Stand-in typer, for where typer is not installed (the checker's own environment: the wheel
and its dependencies). Unlike ray or torch, typer decides the values a launcher builds its
flags from, so this one is not a recorder: it parses the launcher's arguments as typer (over
click) does, for what miles' launchers use (scripts/run_*.py through
miles/utils/typer_utils.py `dataclass_cli`: one option per dataclass field, bound to
``MILES_SCRIPT_<FIELD>``): options ``--name-with-dashes``, ``--x/--no-x`` for bools, ``envvar``
bindings, Enum and Literal choices, Optional, Path, list options, defaults cast by the type,
positional arguments, ``typer.run``, ``Typer()`` apps with commands and a callback
(``typer.Context.invoked_subcommand``). tests/pylaunch/test_typer_standin.py compares it with
the real typer. A usage error exits 2 with click's message, ``--help`` exits 0.
"""

from __future__ import annotations

import enum
import inspect
import os
import pathlib
import sys
import typing

_EMPTY = inspect.Parameter.empty
_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


class ParameterInfo:
    def __init__(self, default=..., *param_decls, envvar=None, **kwargs):
        self.default, self.param_decls, self.envvar = default, param_decls, envvar
        self.is_flag = kwargs.get("is_flag")
        self.case_sensitive = kwargs.get("case_sensitive", True)
        self.help = kwargs.get("help")


class OptionInfo(ParameterInfo):
    pass


class ArgumentInfo(ParameterInfo):
    def __init__(self, default=..., *, envvar=None, **kwargs):
        super().__init__(default, envvar=envvar, **kwargs)


def Option(default=..., *param_decls, **kwargs) -> OptionInfo:  # noqa: N802 - typer's name
    return OptionInfo(default, *param_decls, **kwargs)


def Argument(default=..., **kwargs) -> ArgumentInfo:  # noqa: N802
    return ArgumentInfo(default, **kwargs)


class Exit(Exception):  # noqa: N818 - typer's name
    def __init__(self, code: int = 0):
        super().__init__(code)
        self.exit_code = code


class Abort(Exception):  # noqa: N818
    pass


class BadParameter(Exception):  # noqa: N818
    exit_code = 2

    def __init__(self, message: str = "", ctx=None, param=None, param_hint=None):
        super().__init__(message)
        self.message = message


UsageError = BadParameter


class Context:
    def __init__(self, params=None, invoked_subcommand=None):
        self.params = params or {}
        self.invoked_subcommand = invoked_subcommand
        self.obj = None
        self.args: list[str] = []

    def exit(self, code: int = 0):
        raise Exit(code)

    def abort(self):
        raise Abort()


def echo(message=None, file=None, nl=True, err=False, **_):
    print("" if message is None else message, end="\n" if nl else "",
          file=file or (sys.stderr if err else sys.stdout))


def secho(message=None, file=None, nl=True, err=False, **_):
    echo(message, file, nl, err)


def style(text, **_):
    return text


# ---------------------------------------------------------------- one parameter


def _unwrap(annotation):
    """(type, ParameterInfo or None) of an annotation: Annotated's info, Optional's type."""
    info = None
    if typing.get_origin(annotation) is typing.Annotated:
        annotation, *meta = typing.get_args(annotation)
        info = next((m for m in meta if isinstance(m, ParameterInfo)), None)
    args = typing.get_args(annotation)
    if args and type(None) in args and typing.get_origin(annotation) is not typing.Literal:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            annotation = rest[0]
    return annotation, info


class _Param:
    def __init__(self, name: str, annotation, default):
        annotation, info = _unwrap(annotation)
        if isinstance(default, ParameterInfo):  # x: int = typer.Option(3)
            info, default = default, default.default
        elif info is not None and info.default is not ... and isinstance(info, OptionInfo):
            info.param_decls = (info.default, *info.param_decls)  # Annotated: decls
        self.name, self.info = name, info
        self.context = annotation is Context or getattr(annotation, "__name__", "") == \
            "Context" and "click" in getattr(annotation, "__module__", "")
        self.default = ... if default is _EMPTY else default
        self.argument = isinstance(info, ArgumentInfo) or (info is None and default is _EMPTY)
        if annotation is _EMPTY:
            annotation = str
        origin = typing.get_origin(annotation)
        self.multiple = origin in (list, tuple, set, typing.List, typing.Tuple)  # noqa: UP006
        self.type = (typing.get_args(annotation) or (str,))[0] if self.multiple else annotation
        if self.multiple:
            self.type = _unwrap(self.type)[0]
        self.bool = self.type is bool
        decls = [d for d in (info.param_decls if info else ()) if isinstance(d, str)]
        self.envvar = info.envvar if info else None
        self.case_sensitive = info.case_sensitive if info else True
        dashed = "--" + name.replace("_", "-")
        self.on, self.off = [], []
        for d in decls or ([f"{dashed}/--no-{name.replace('_', '-')}"] if self.bool
                           and not (info and info.is_flag) else [dashed]):
            for part in d.split("/"):
                part = part.strip()
                if part:
                    (self.off if "/" in d and d.split("/")[1].strip() == part
                     else self.on).append(part)
        self.required = self.default is ... and not self.bool

    @property
    def shown(self) -> str:
        return self.name.upper() if self.argument else self.on[0]

    def convert(self, value, from_text: bool):
        """`value` as this parameter's type (click casts the default too)."""
        if value is None:
            return None
        if self.multiple:
            items = value.split() if isinstance(value, str) else list(value)
            return [self._one(v, from_text) for v in items]
        return self._one(value, from_text)

    def _one(self, value, from_text: bool):
        t = self.type
        if typing.get_origin(t) is typing.Literal or (isinstance(t, type) and
                                                      issubclass(t, enum.Enum)):
            return self._choice(value)
        if t is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise BadParameter(f"'{value}' is not a valid boolean.")
        if t is int or t is float:
            if isinstance(value, t) and not isinstance(value, bool):
                return value
            try:
                return t(value if not isinstance(value, str) else value.strip())
            except (TypeError, ValueError):
                kind = "integer" if t is int else "float"
                raise BadParameter(f"'{value}' is not a valid {kind}.") from None
        if isinstance(t, type) and issubclass(t, pathlib.PurePath):
            return t(value)
        if t is str or t is typing.Any or not isinstance(t, type):
            return value if isinstance(value, str) else str(value)
        return t(value) if from_text else value

    def _choice(self, value):
        t = self.type
        members = list(t) if isinstance(t, type) else list(typing.get_args(t))
        if isinstance(value, enum.Enum) and value in members or value in members and not \
                isinstance(t, type):
            return value
        shown = [str(m.value if isinstance(m, enum.Enum) else m) for m in members]
        for m, text in zip(members, shown):
            same = text == str(value) if self.case_sensitive else \
                text.lower() == str(value).lower()
            if same:
                return m
        choices = ", ".join(f"'{s}'" for s in shown)
        raise BadParameter(f"'{value}' is not one of {choices}.")


def _params(func) -> list[_Param]:
    sig = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # noqa: BLE001 - an annotation it cannot resolve: the written one
        hints = {}
    return [_Param(p.name, hints.get(p.name, p.annotation), p.default)
            for p in sig.parameters.values()]


# ---------------------------------------------------------------- parsing


class _Help(Exception):  # noqa: N818
    pass


def _parse(params: list[_Param], words: list[str], stop_at_command: bool = False):
    """(values given on the command line by name, the words left) for a command; with
    `stop_at_command` (a group's callback) parsing stops at the first positional word."""
    by = {}
    for p in params:
        for d in p.on:
            by[d] = (p, True)
        for d in p.off:
            by[d] = (p, False)
    given: dict[str, object] = {}
    positional: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            positional += words[i + 1:]
            break
        if w == "--help":
            raise _Help()
        if w.startswith("-") and len(w) > 1:
            name, eq, value = w.partition("=")
            if name not in by:
                raise BadParameter(f"No such option: {name}")
            p, on = by[name]
            if p.bool and not eq:
                given[p.name] = on
            else:
                if not eq:
                    if i + 1 >= len(words):
                        raise BadParameter(f"Option '{name}' requires an argument.")
                    i += 1
                    value = words[i]
                try:
                    got = p.convert(value, True)
                except BadParameter as e:
                    raise BadParameter(f"Invalid value for '{name}': {e.message}") from None
                if p.multiple:
                    given.setdefault(p.name, []).extend(got)
                else:
                    given[p.name] = got
            i += 1
            continue
        if stop_at_command:
            return given, words[i:]
        positional.append(w)
        i += 1
    return given, positional


def _values(params: list[_Param], given: dict, positional: list[str], ctx: Context) -> dict:
    out: dict[str, object] = {}
    args = [p for p in params if p.argument and not p.context]
    for p in args:
        if positional:
            if p.multiple:
                given[p.name], positional = [p._one(v, True) for v in positional], []
            else:
                given[p.name] = p.convert(positional.pop(0), True)
    if positional:
        raise BadParameter(f"Got unexpected extra argument{'s' if len(positional) > 1 else ''}"
                           f" ({' '.join(positional)})")
    for p in params:
        if p.context:
            out[p.name] = ctx
            continue
        if p.name in given:
            out[p.name] = given[p.name]
            continue
        env = os.environ.get(p.envvar) if isinstance(p.envvar, str) else None
        if env:
            try:
                out[p.name] = p.convert(env, True)
            except BadParameter as e:
                raise BadParameter(f"Invalid value for '{p.shown}': {e.message}") from None
            continue
        if p.default is ...:
            if p.bool:
                out[p.name] = False
                continue
            what = "argument" if p.argument else "option"
            raise BadParameter(f"Missing {what} '{p.shown}'.")
        try:
            out[p.name] = p.convert(p.default, False)
        except BadParameter:
            out[p.name] = p.default
    ctx.params = out
    return out


# ---------------------------------------------------------------- apps


class Typer:
    def __init__(self, *args, name=None, invoke_without_command=False, callback=None, **kw):
        self.name = name
        self.commands: list[tuple[str, object]] = []
        self.groups: list[tuple[str, Typer]] = []
        self._callback = callback
        self._without = invoke_without_command

    def command(self, name=None, **kw):
        def register(f):
            self.commands.append((name or f.__name__.lower().replace("_", "-"), f))
            return f
        return register

    def callback(self, name=None, invoke_without_command=False, **kw):
        def register(f):
            self._callback, self._without = f, invoke_without_command
            return f
        return register

    def add_typer(self, app: Typer, name=None, **kw):
        self.groups.append((name or app.name or "", app))

    def __call__(self, *args, **kwargs):
        words = list(kwargs.get("args") or (args[0] if args else sys.argv[1:]))
        try:
            self._run(words)
        except _Help:
            print(f"Usage: {os.path.basename(sys.argv[0])} [OPTIONS]")
            code = 0
        except Exit as e:
            code = e.exit_code
        except Abort:
            print("Aborted!", file=sys.stderr)
            code = 1
        except BadParameter as e:
            prog = os.path.basename(sys.argv[0])
            print(f"Usage: {prog} [OPTIONS]\nTry '{prog} --help' for help.\n\n"
                  f"Error: {e.message}", file=sys.stderr)
            code = 2
        else:
            code = 0
        raise SystemExit(code)

    def _run(self, words: list[str]) -> None:
        if self._callback is None and len(self.commands) == 1 and not self.groups:
            _invoke(self.commands[0][1], words, Context())
            return
        given, rest = {}, list(words)
        params = _params(self._callback) if self._callback else []
        if params:
            given, rest = _parse(params, rest, stop_at_command=True)
        elif rest and rest[0] == "--help":
            raise _Help()
        name = rest[0] if rest else None
        ctx = Context(invoked_subcommand=name)
        if name is None and not self._without:
            raise BadParameter("Missing command.")
        target = next((x for n, x in [*self.commands, *self.groups] if n == name), None)
        if name is not None and target is None:  # click resolves it before the callback
            raise BadParameter(f"No such command '{name}'.")
        if self._callback is not None:
            self._callback(**_values(params, given, [], ctx))
        if isinstance(target, Typer):
            target._run(rest[1:])
        elif target is not None:
            _invoke(target, rest[1:], Context())


def _invoke(func, words: list[str], ctx: Context):
    params = _params(func)
    given, positional = _parse(params, words)
    return func(**_values(params, given, positional, ctx))


def run(function) -> None:
    app = Typer()
    app.command()(function)
    app()


ATTRS = {"typer": {name: globals()[name] for name in (
    "Typer", "run", "Option", "Argument", "Exit", "Abort", "BadParameter", "Context", "echo",
    "secho", "style")}}
ATTRS["typer"]["__version__"] = "0 (miles-topology stand-in)"
ATTRS["typer.models"] = {"OptionInfo": OptionInfo, "ArgumentInfo": ArgumentInfo,
                         "ParameterInfo": ParameterInfo}
ATTRS["typer.main"] = {"run": run, "Typer": Typer}
