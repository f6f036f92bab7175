"""The one value type: an item on the shelf."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Item:
    """An item the shop sells. Prices are per unit, in euros, VAT excluded."""

    sku: str
    name: str
    unit_price: Decimal
    category: str = "general"

    def __post_init__(self) -> None:
        if not self.sku:
            raise ValueError("an item needs a SKU")
        if self.unit_price < 0:
            raise ValueError(f"{self.sku}: a price cannot be negative")

    def label(self) -> str:
        """What the shelf label shows."""
        return f"{self.name} ({self.sku}) - EUR {self.unit_price:.2f}"
