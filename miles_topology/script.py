"""The launch-script reader's public names; the reader lives in `miles_topology.shell`."""

from .shell import (
    FlagValue,
    LaunchSite,
    Note,
    ScriptRead,
    ScriptReadError,
    Source,
    Span,
    Unresolved,
    is_switch,
    read_script,
)

__all__ = ["FlagValue", "LaunchSite", "Note", "ScriptRead", "ScriptReadError", "Source", "Span",
           "Unresolved", "is_switch", "read_script"]
