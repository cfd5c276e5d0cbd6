"""Reading bash launch scripts statically: syntax (tree-sitter-bash), values and expansion,
the interpreter, launch finding, and provenance (spans) for migrations.

Importing this package does not import tree_sitter; the parser is built on first use.
"""

from .model import (
    FlagValue,
    LaunchSite,
    Note,
    ScriptRead,
    ScriptReadError,
    Source,
    Span,
    Unresolved,
    is_switch,
)
from .read import read_script, require_launch

__all__ = ["FlagValue", "LaunchSite", "Note", "ScriptRead", "ScriptReadError", "Source", "Span",
           "Unresolved", "is_switch", "read_script", "require_launch"]
