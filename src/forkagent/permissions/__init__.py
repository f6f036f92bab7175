"""Who may call which tool: tool filters, permission modes and the read-only shell check.

The interactive terminal handler lives in ``forkagent.permissions.prompt``. The
shell classifier (and tree-sitter with it) is imported when first used.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .filters import (
    EDIT_TOOLS,
    READ_TOOLS,
    SHELL_TOOL,
    AllowAll,
    AllowTools,
    DenyTools,
    FilterDecision,
    MemoryDirFilter,
    ReadOnlyFilter,
    ToolFilter,
    all_of,
    any_of,
)
from .modes import (
    PermissionDecision,
    PermissionHandler,
    PermissionMode,
    PermissionPolicy,
    PermissionRequest,
)

if TYPE_CHECKING:
    from .shell import ShellVerdict, classify_command, is_read_only_command

__getattr__, __dir__ = lazy_exports(
    __name__, {".shell": ("ShellVerdict", "classify_command", "is_read_only_command")}
)

__all__ = [
    "EDIT_TOOLS",
    "READ_TOOLS",
    "SHELL_TOOL",
    "AllowAll",
    "AllowTools",
    "DenyTools",
    "FilterDecision",
    "MemoryDirFilter",
    "PermissionDecision",
    "PermissionHandler",
    "PermissionMode",
    "PermissionPolicy",
    "PermissionRequest",
    "ReadOnlyFilter",
    "ShellVerdict",
    "ToolFilter",
    "all_of",
    "any_of",
    "classify_command",
    "is_read_only_command",
]
