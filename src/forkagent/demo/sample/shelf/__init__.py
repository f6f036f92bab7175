"""shelf: stock keeping for a small shop."""

from .models import Item
from .pricing import order_total, vat
from .report import stock_report
from .store import OutOfStock, Store, UnknownItem

__all__ = ["Item", "OutOfStock", "Store", "UnknownItem", "order_total", "stock_report", "vat"]
