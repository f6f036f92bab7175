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

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
"""A frozen message or block: its rendering depends on nothing else."""
T = TypeVar("T")


class SharedRenderings(Generic[K, T]):
    """One rendering per live (frozen) object, dropped when the object is."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref[K], T]] = {}

    def get(self, item: K, render: Callable[[K], T]) -> T:
        key = id(item)
        found = self._by_id.get(key)
        if found is not None and found[0]() is item:
            return found[1]
        rendered = render(item)
        self._by_id[key] = (weakref.ref(item, self._forget(key)), rendered)
        return rendered

    def __len__(self) -> int:
        return len(self._by_id)

    def _forget(self, key: int) -> Callable[[weakref.ref[K]], None]:
        def forget(gone: weakref.ref[K]) -> None:
            found = self._by_id.get(key)
            if found is not None and found[0] is gone:  # not a newer object with the same id
                del self._by_id[key]

        return forget
