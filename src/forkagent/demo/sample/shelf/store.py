"""The stock ledger: how many of each item the shop holds."""

from __future__ import annotations

from collections.abc import Iterator

from .models import Item


class UnknownItem(KeyError):
    """A SKU the store has never stocked."""


class OutOfStock(ValueError):
    """More units were asked for than the store holds."""


class Store:
    """Items by SKU, with the quantity on hand for each."""

    def __init__(self) -> None:
        self._items: dict[str, Item] = {}
        self._stock: dict[str, int] = {}

    def add(self, item: Item, quantity: int = 1) -> None:
        """Stock ``quantity`` more units of ``item``."""
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self._items[item.sku] = item
        self._stock[item.sku] = self._stock.get(item.sku, 0) + quantity

    def remove(self, sku: str, quantity: int = 1) -> None:
        """Take ``quantity`` units of ``sku`` off the shelf."""
        if sku not in self._stock:
            raise UnknownItem(sku)
        self._stock[sku] -= quantity

    def find(self, sku: str) -> Item:
        try:
            return self._items[sku]
        except KeyError:
            raise UnknownItem(sku) from None

    def quantity(self, sku: str) -> int:
        return self._stock.get(sku, 0)

    def __iter__(self) -> Iterator[tuple[Item, int]]:
        for sku, item in sorted(self._items.items()):
            yield item, self._stock[sku]

    # TODO: persist the ledger to disk so that stock survives a restart.
