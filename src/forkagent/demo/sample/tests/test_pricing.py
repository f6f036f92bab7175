from decimal import Decimal

from shelf import Item, order_total


def test_food_pays_the_reduced_rate() -> None:
    bread = Item("bread-1", "Sourdough", Decimal("4.00"), category="food")
    assert order_total([(bread, 1)]) == Decimal("4.36")
