"""Reading bash launch scripts statically: syntax (tree-sitter-bash), values and expansion,
the interpreter, launch finding, and provenance (spans) for migrations.

Along Oils' seams: `interpret.Reader` runs commands (cmd_eval) with conditions
(conditions.py), loops (loops.py), assignments (assign.py), the files it enters (files.py)
and the built-ins (builtins.py) as collaborators; `expand.Words` expands words (word_eval)
with parameters (params.py) and command substitution (substitute.py) as its own.

Importing this package does not import tree_sitter; the parser is built on first use.
"""

from .read import read_script, read_sourced, require_launch
from .records import (
    FlagValue,
    LaunchSite,
    ScriptRead,
    ScriptReadError,
    Span,
    Unresolved,
    is_switch,
)

__all__ = ["FlagValue", "LaunchSite", "ScriptRead", "ScriptReadError", "Span",
           "Unresolved", "is_switch", "read_script", "read_sourced", "require_launch"]
