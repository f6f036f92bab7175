"""Work done once per distinct piece of a request, not once per request.

Long conversations and fork families send the same blocks again and again: a
child of a reply with N tool calls sends the parent's N calls and N identical
placeholder results. What the emulator derives from a block (its canonical
bytes, its token count, that it passes the schema) depends only on the block's
content, so it is kept here under a key that is that content.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generic, TypeVar

T = TypeVar("T")


_SCOPE: ContextVar[dict[int, tuple[object, str]] | None] = ContextVar("_SCOPE", default=None)


@contextmanager
def one_request() -> Iterator[None]:
    """While one request is parsed, the key of each of its objects is made once.

    Validation and parsing both ask for a block's key; inside this block the
    body is neither changed nor freed, and the scope holds every object it keys,
    so an object's ``id`` names it for the scope's whole life.
    """
    token = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def content_key(value: object) -> str:
    """A key that stands for a JSON value's content, cheaper to make than its JSON text.

    For JSON values ``repr`` is one-to-one: it tells strings, integers, floats, booleans
    and null apart, and two objects print alike only with the same keys in the same order
    and equal values. (Key order matters to the providers too: they hash the JSON text.)
    """
    scope = _SCOPE.get()
    if scope is None:
        return repr(value)
    found = scope.get(id(value))
    if found is not None:
        return found[1]
    key = repr(value)
    scope[id(value)] = (value, key)
    return key


class Memo(Generic[T]):
    """A bounded map from a content key to what was derived from that content.

    Bounded by the total length of its keys (a key is about as long as the content it
    stands for), oldest entries first out. Reads take no lock: a dict lookup is atomic.
    """

    def __init__(self, max_chars: int = 32_000_000) -> None:
        self._entries: dict[Hashable, tuple[T, int]] = {}
        self._chars = 0
        self._max_chars = max_chars
        self._lock = threading.Lock()

    def get(self, key: Hashable, size: int, derive: Callable[[], T]) -> T:
        """The value kept for ``key``, or ``derive()`` kept under it (``size``: the key's length).

        An exception from ``derive`` leaves nothing behind, so bad content is checked every time.
        """
        found = self._entries.get(key)
        if found is not None:
            return found[0]
        value = derive()
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, size)
                self._chars += size
                while self._chars > self._max_chars and self._entries:
                    oldest = next(iter(self._entries))
                    self._chars -= self._entries.pop(oldest)[1]
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self._entries)
