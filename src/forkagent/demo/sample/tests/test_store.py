from decimal import Decimal

import pytest

from shelf import Item, Store, UnknownItem


def tea() -> Item:
    return Item("tea-01", "Green tea", Decimal("3.40"), category="food")


def test_added_stock_adds_up() -> None:
    store = Store()
    store.add(tea(), quantity=2)
    store.add(tea(), quantity=3)
    assert store.quantity("tea-01") == 5


def test_removing_an_unknown_item_fails() -> None:
    with pytest.raises(UnknownItem):
        Store().remove("nope")
