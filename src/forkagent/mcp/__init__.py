"""MCP tool servers: configuration (``.mcp.json``, code) and the client that turns them into tools."""

from .client import McpConnection, McpTool, start_servers
from .config import McpServer, load_project_servers, parse_servers

__all__ = [
    "McpConnection",
    "McpServer",
    "McpTool",
    "load_project_servers",
    "parse_servers",
    "start_servers",
]
