"""Tools the model can call: the protocol, ``@tool``, the built-ins' environment policy."""

from .base import ArgsTool, FunctionTool, Tool, ToolContext, ToolOutput, as_tool, tool
from .environment import EnvironmentPolicy

__all__ = [
    "ArgsTool",
    "EnvironmentPolicy",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "as_tool",
    "tool",
]
