"""The stock report printed at closing time."""

from __future__ import annotations

from .store import Store

LOW_STOCK = 3


def stock_report(store: Store) -> str:
    """One line per item, low stock flagged, with the shelf value at the end."""
    lines = []
    value = 0
    for item, quantity in store:
        flag = "  LOW" if quantity < LOW_STOCK else ""
        lines.append(f"{item.sku:<10} {item.name:<24} {quantity:>5}{flag}")
        value += item.unit_price * quantity
    lines.append(f"{'shelf value':<35} EUR {value:.2f}")
    return "\n".join(lines)


# TODO: a CSV export for the accountant.
