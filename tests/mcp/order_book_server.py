"""A small MCP server (stdio) for the tests: the shop's order book.

It writes its pid to ``$ORDER_BOOK_PIDS`` (one line per start) so tests can count
server processes and check that none outlives the run.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("orders")
ORDERS = {"A-1": "2 shelves, paid", "A-2": "1 lamp, awaiting payment"}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_order(order_id: str) -> str:
    """Look an order up by its id."""
    return ORDERS.get(order_id, f"no order {order_id}")


@server.tool()
def cancel_order(order_id: str) -> str:
    """Cancel an order."""
    raise ValueError(f"order {order_id} has shipped and cannot be cancelled")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def big_report() -> str:
    """Everything, at length."""
    return "x" * 150_000


def register_sale(sku: str) -> str:
    """Record a sale at the till."""
    return f"sold {sku}"


@server.tool()
async def open_register(ctx: Context) -> str:
    """Open the till: a register_sale tool appears."""
    server.add_tool(register_sale)
    await ctx.notify_tools_changed()
    return "the register is open"


@server.tool()
async def wait_for_the_courier() -> str:
    """Blocks for a long time (to interrupt)."""
    import anyio

    await anyio.sleep(60)
    return "the courier came"


def serve_http(fd: int) -> None:
    """Streamable HTTP on the socket the test already listens on, inherited as ``fd``: no
    other process can take its port between the test choosing it and the server binding it."""
    import socket

    import uvicorn

    listening = socket.socket(fileno=fd)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    uvicorn.Server(config).run(sockets=[listening])


if __name__ == "__main__":
    if pids := os.environ.get("ORDER_BOOK_PIDS"):
        with open(pids, "a") as out:
            out.write(f"{os.getpid()}\n")
    if sys.argv[1:2] == ["http"]:  # streamable HTTP: order_book_server.py http LISTENING-FD
        serve_http(int(sys.argv[2]))
    else:
        server.run()
