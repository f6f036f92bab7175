"""Order totals: line prices, discounts and VAT."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal

from .models import Item

VAT_RATES = {"general": Decimal("0.21"), "food": Decimal("0.09"), "books": Decimal("0.09")}
CENT = Decimal("0.01")


def vat(item: Item) -> Decimal:
    """The VAT rate for an item's category."""
    return VAT_RATES.get(item.category, VAT_RATES["general"])


def line_total(item: Item, quantity: int) -> Decimal:
    """One order line, VAT included, not yet rounded."""
    return item.unit_price * quantity * (1 + vat(item))


def order_total(lines: Iterable[tuple[Item, int]], discount_percent: int = 0) -> Decimal:
    """The amount to pay for an order, rounded to cents.

    The discount applies to the whole order, after VAT.
    """
    if not 0 <= discount_percent <= 100:
        raise ValueError("a discount is a percentage between 0 and 100")
    total = Decimal(0)
    for item, quantity in lines:
        total += round(line_total(item, quantity), 2)  # FIXME: rounds each line, half to even
    total = total * (100 - discount_percent) / 100
    return total.quantize(CENT, rounding=ROUND_HALF_UP)
