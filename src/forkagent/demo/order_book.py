"""The demo shop's order book as an MCP server (stdio): ``python -m forkagent.demo.order_book``.

The demo's main agent and its stock fork call it as ``mcp__orders__*``; the fork
reaches it through its parent's connection and tool array, read from the cache.
"""

from __future__ import annotations

import json

ORDERS = {
    "o-1041": {"sku": "jam-02", "quantity": 3, "state": "shipped"},
    "o-1042": {"sku": "tea-07", "quantity": 12, "state": "picking: only 5 on the shelf"},
    "o-1043": {"sku": "jam-02", "quantity": 1, "state": "paid"},
}


def main() -> None:
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("orders")
    read_only = ToolAnnotations(read_only_hint=True)

    @server.tool(annotations=read_only)
    def recent_orders() -> str:
        """The shop's latest orders, one per line: id, SKU, quantity, state."""
        return "\n".join(
            f"{order_id} {o['sku']} x{o['quantity']} ({o['state']})"
            for order_id, o in ORDERS.items()
        )

    @server.tool(annotations=read_only)
    def find_order(order_id: str) -> str:
        """One order, as JSON."""
        order = ORDERS.get(order_id)
        return json.dumps(order, sort_keys=True) if order else f"no order {order_id}"

    server.run()


if __name__ == "__main__":
    main()
