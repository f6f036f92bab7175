"""Tools the model can call: the protocol, ``@tool`` and the built-ins."""

from .base import ArgsTool, FunctionTool, Tool, ToolContext, ToolOutput, as_tool, tool

__all__ = ["ArgsTool", "FunctionTool", "Tool", "ToolContext", "ToolOutput", "as_tool", "tool"]
