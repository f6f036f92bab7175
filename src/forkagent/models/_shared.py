"""Rendered messages shared between requests: a fork family renders its prefix once.

Siblings (and an agent's successive turns) send the same message objects; the
wire form of a message without a cache marker depends on nothing else, so
each is rendered once and every request's body refers to that one rendering.
An in-flight child of a 2,000-message parent then holds a list of references
instead of its own copy of the conversation. The same holds for blocks: the N
children of a reply with N tool calls each end with the same N placeholder
result objects, rendered once. Bodies are never changed after rendering, so
sharing their parts is safe.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
"""A frozen message or block: its rendering depends on nothing else."""
T = TypeVar("T")


class _Kept(weakref.ref[K], Generic[K, T]):
    """A weak reference to a rendered object that also carries its id and its rendering: one
    object per entry for the collector to walk, where a ``KeyedRef`` in a tuple is two."""

    __slots__ = ("key", "rendered")
    key: int
    rendered: T

    def __new__(
        cls, item: K, callback: Callable[[_Kept[K, T]], object], key: int, rendered: T
    ) -> _Kept[K, T]:
        kept = super().__new__(cls, item, callback)
        kept.key = key
        kept.rendered = rendered
        return kept

    def __init__(
        self, item: K, callback: Callable[[_Kept[K, T]], object], key: int, rendered: T
    ) -> None:
        super().__init__(item, callback)  # type: ignore[call-arg]  # typeshed gives ref no __init__


class SharedRenderings(Generic[K, T]):
    """One rendering per live (frozen) object, dropped when the object is."""

    def __init__(self) -> None:
        self._by_id: dict[int, _Kept[K, T]] = {}
        # One callback for every entry; the key rides on its reference (a closure per entry
        # would be four more objects kept, for the collector to walk, per rendered object).
        self._drop = self._forget

    def get(self, item: K, render: Callable[[K], T]) -> T:
        key = id(item)
        found = self._by_id.get(key)
        if found is not None and found() is item:
            return found.rendered
        rendered = render(item)
        self._by_id[key] = _Kept(item, self._drop, key, rendered)
        return rendered

    def __len__(self) -> int:
        return len(self._by_id)

    def _forget(self, gone: _Kept[K, T]) -> None:
        if self._by_id.get(gone.key) is gone:  # not a newer object with the same id
            del self._by_id[gone.key]


HEAD_MIN = 8
"""Tuples this long or shorter are cheap to handle item by item: no head is kept for them."""


class SharedHeads(Generic[K, T]):
    """What was derived from a long tuple's items but its last, for every tuple that starts
    with the same items.

    The N children of a reply with N tool calls each end with a new message whose blocks
    are the family's N placeholder results and the rules (the same objects), then the
    child's own directive. Found through its first and last objects and its length, a head
    is checked against the tuple by one comparison in C (identical items at once), so a
    child costs O(1) Python work, not O(N). The last ``limit`` heads are kept (strongly:
    their ids stay theirs while kept).
    """

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._heads: OrderedDict[tuple[int, int, int], tuple[tuple[K, ...], T]] = OrderedDict()
        self._lock = threading.Lock()

    def find(self, items: tuple[K, ...]) -> T | None:
        """What was kept for the head of ``items``, if that head is known."""
        if len(items) <= HEAD_MIN:
            return None
        key = (len(items) - 1, id(items[0]), id(items[-2]))
        found = self._heads.get(key)
        if found is None or found[0] != items[:-1]:
            return None
        return found[1]

    def keep(self, items: tuple[K, ...], value: T) -> None:
        """Keep ``value``, derived from the head of ``items``."""
        if len(items) <= HEAD_MIN:
            return
        head = items[:-1]
        with self._lock:
            self._heads[(len(head), id(head[0]), id(head[-1]))] = (head, value)
            while len(self._heads) > self._limit:
                self._heads.popitem(last=False)

    def render(
        self,
        items: tuple[K, ...],
        render: Callable[[tuple[K, ...]], T],
        join: Callable[[T, T], T],
        fits: Callable[[T], bool] | None = None,
    ) -> T:
        """``render(items)``, a long tuple's head rendered once for every tuple that starts
        with it and joined to its last item's (O(1) Python work in its length).

        ``fits``: whether a kept head still serves (its rendering may depend on more
        than its items)."""
        if len(items) <= HEAD_MIN:
            return render(items)
        head = self.find(items)
        if head is None or (fits is not None and not fits(head)):
            head = render(items[:-1])
            self.keep(items, head)
        return join(head, render(items[-1:]))

    def __len__(self) -> int:
        return len(self._heads)
