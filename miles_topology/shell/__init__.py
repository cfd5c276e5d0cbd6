"""Reading bash launch scripts statically: syntax (tree-sitter-bash), values and expansion,
the interpreter, launch finding, and provenance (spans) for migrations.

Importing this package does not import tree_sitter; the parser is built on first use.
"""

from .read import read_script, require_launch
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
           "Unresolved", "is_switch", "read_script", "require_launch"]
