"""MCP tool servers: configuration (``.mcp.json``, code) and the client that turns them into tools."""

from .client import McpConnection, McpPool, McpTool
from .config import McpServer, load_project_servers, parse_servers

__all__ = [
    "McpConnection",
    "McpPool",
    "McpServer",
    "McpTool",
    "load_project_servers",
    "parse_servers",
]
