"""The commands of a launcher's typer app, read from its syntax tree, never from its run.

miles writes multi-step launchers as ``app = typer.Typer()`` with ``@app.command()``
functions (scripts/run_deepseek.py: prepare, train, full-train); run with no arguments they
print usage, so `check` runs the launcher once per command. Which commands there are is read
here from the source: a name the launcher printed or wrote into its record could make the
checker run it a thousand times.
"""

from __future__ import annotations

import ast

from ..reading.pysource import parse

MAX_COMMANDS = 32  # commands run, one run each, within one wall-clock budget
SOURCE_MAX = 4 << 20  # bytes of the launcher parsed


def commands(path: str) -> list[str] | None:
    """The command names of a typer app with several commands (or a callback), in source
    order, as typer names them (``full_train`` -> ``full-train``, or the name given); None
    when the launcher has no such app (it is run once, as it is)."""
    import os

    from ..reading import gate

    try:  # the launcher the user named: a bounded regular file
        source = gate.read_bytes(path, (gate.Path(os.path.realpath(path)),),
                                 limit=SOURCE_MAX + 1)
    except (OSError, gate.Refused):
        return None
    if len(source) > SOURCE_MAX or b"typer" not in source:
        return None
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    apps = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and _is_typer(node.value) for t in node.targets if isinstance(t, ast.Name)}
    names, callback = [], False
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for dec in node.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            attr = (call.func if call else dec)
            if not (isinstance(attr, ast.Attribute) and isinstance(attr.value, ast.Name)
                    and attr.value.id in apps):
                continue
            if attr.attr == "callback":
                callback = True
            elif attr.attr == "command":
                names.append(_name(call, node.name))
    names = list(dict.fromkeys(names))
    return names if len(names) > 1 or names and callback else None


def _is_typer(value) -> bool:
    if not isinstance(value, ast.Call):
        return False
    f = value.func
    return isinstance(f, ast.Attribute) and f.attr == "Typer" or \
        isinstance(f, ast.Name) and f.id == "Typer"


def _name(call: ast.Call | None, function: str) -> str:
    """typer's name of a command: the one given (first argument or name=), else the
    function's, lower case with dashes (typer.main.get_command_name)."""
    given = None
    if call is not None:
        if call.args and isinstance(call.args[0], ast.Constant):
            given = call.args[0].value
        for kw in call.keywords:
            if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                given = kw.value.value
    if isinstance(given, str) and given:
        return given
    return function.lower().replace("_", "-")
