"""Work done once per distinct piece of a request, not once per request.

Long conversations and fork families send the same blocks again and again: a
child of a reply with N tool calls sends the parent's N calls and N identical
placeholder results. What the emulator derives from a block (its canonical
bytes, its token count, that it passes the schema) depends only on the block's
content, so it is kept here under a key that is that content.
"""

from __future__ import annotations

import marshal
import pickle
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import is_
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Scope:
    """Keys made during one request, by the id of the object (held with its key)."""

    frozen: bool
    """The body is never changed afterwards: a long list may be known by its objects."""
    keys: dict[int, tuple[object, str]] = field(default_factory=dict)
    heads: dict[int, tuple[object, bytes]] = field(default_factory=dict)


_SCOPE: ContextVar[_Scope | None] = ContextVar("_SCOPE", default=None)


@contextmanager
def one_request(*, frozen: bool = False) -> Iterator[None]:
    """While one request is parsed, the key of each of its objects is made once.

    Validation and parsing both ask for a block's key; inside this block the
    body is neither changed nor freed, and the scope holds every object it keys,
    so an object's ``id`` names it for the scope's whole life. ``frozen``: the
    body's objects are never changed, in this request or after it
    (``Emulator.dispatch``).
    """
    token = _SCOPE.set(_Scope(frozen))
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
    found = scope.keys.get(id(value))
    if found is not None:
        return found[1]
    key = repr(value)
    scope.keys[id(value)] = (value, key)
    return key


HEAD_MIN_ITEMS = 8
"""Lists this long or shorter are cheap to handle item by item: no head is kept for them."""


def head_key(items: list[Any]) -> bytes:
    """A key of all but the last item: what a list shares with the same list before its last
    item was added (a conversation before its new turn, the N placeholder results and rules
    every child of one reply sends before its own directive).

    The list's ``marshal`` bytes: like ``repr`` it tells every JSON value apart (they read
    back as the value they were made of, types and key order included), and they are made
    several times faster than ``repr`` and 1.0 to 1.4 times as fast as a pickle on a fork
    family's lists, which matters as it is the one pass over a long list a request still
    makes. The same content with different
    objects shared (one string object twice, an interned string) makes a different key: a
    memo miss, never a wrong hit. A value ``marshal`` cannot write is pickled instead.
    In a ``frozen`` request (``one_request``), a head that starts like a recent one is
    known again by its objects (``_KnownHeads``) and not encoded.
    """
    scope = _SCOPE.get()
    if scope is None:
        return _encoded(items[:-1])
    found = scope.heads.get(id(items))
    if found is not None:
        return found[1]
    key = _KNOWN_HEADS.key(items) if scope.frozen and len(items) > 1 else _encoded(items[:-1])
    scope.heads[id(items)] = (items, key)
    return key


class _KnownHeads:
    """The keys of recent long lists' heads, found again without encoding them.

    A fork family's children each send a new list that starts with the same objects
    (the family's placeholder results and rules, rendered once by the adapter), save a
    few made per child (a cache marker). Found by its length and first object, a kept
    head is compared with the new one object by object in C; only the objects that
    differ are encoded, and compared with the kept ones by content. Heads are kept
    strongly, so their ids stay theirs; an identical object is taken to be unchanged
    (a sent body is not changed afterwards, see ``Emulator.dispatch``).
    """

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._heads: OrderedDict[tuple[int, int], tuple[list[Any], bytes, list[Any]]] = (
            OrderedDict()
        )
        """By length and first object: the head, its key, and the list it was made from
        (a reply's list of calls comes again whole: the same object, unchanged)."""
        self._lock = threading.Lock()

    def key(self, items: list[Any]) -> bytes:
        where = (len(items) - 1, id(items[0]))
        found = self._heads.get(where)
        if found is not None and (found[2] is items or _same_content(found[0], items)):
            return found[1]
        head = items[:-1]
        key = _encoded(head)
        with self._lock:
            self._heads[where] = (head, key, items)
            while len(self._heads) > self._limit:
                self._heads.popitem(last=False)
        return key

    def clear(self) -> None:
        with self._lock:
            self._heads.clear()


class ByIdentity(Generic[T]):
    """What was derived from a few objects that never change, found again by their identity.

    For values whose derivation is a C-level pass over a long container (a subset test of
    two sets of N tool ids, a type check of a list of N blocks) that the N children of one
    reply would each repeat on the very same objects. The objects are kept (strongly, so
    their ids stay theirs) with the value; the last ``limit`` are kept.
    """

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._values: OrderedDict[tuple[int, ...], tuple[tuple[object, ...], T]] = OrderedDict()
        self._lock = threading.Lock()
        _OTHER_CACHES.append(self.clear)

    def get(self, objects: tuple[object, ...], derive: Callable[[], T]) -> T:
        """The value kept for ``objects`` (the very same ones), else ``derive()``, kept."""
        key = tuple(map(id, objects))
        found = self._values.get(key)
        if found is not None and all(map(is_, found[0], objects)):
            return found[1]
        value = derive()
        with self._lock:
            self._values[key] = (objects, value)
            while len(self._values) > self._limit:
                self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


class HeadCheck:
    """A check of a list that holds when it holds for the list's head and for its last item.

    Inside a request, a long list's head is checked once for every list that starts with
    the same content (``head_key``, which parsing the request makes anyway): the N children
    of one reply check their N placeholder results once, not N times.
    """

    def __init__(self, check: Callable[[list[Any]], bool]) -> None:
        self._check = check
        self._heads: Memo[bool] = Memo()

    def __call__(self, items: list[Any]) -> bool:
        if len(items) <= HEAD_MIN_ITEMS or _SCOPE.get() is None:
            return self._check(items)
        return self._heads.head(items, self._check) and self._check(items[-1:])


_MOST_DIFFERENT = 8
"""A head with more objects not shared than this is encoded whole (a body parsed afresh)."""


def _same_content(kept: list[Any], items: list[Any]) -> bool:
    """``items`` starts with ``kept``'s content: the same objects, or equal encodings."""
    if all(map(is_, kept, items)):  # siblings' heads: one pass, nothing to encode
        return True
    same = list(map(is_, kept, items))
    at = -1
    for _ in range(_MOST_DIFFERENT + 1):
        try:
            at = same.index(False, at + 1)
        except ValueError:
            return True
        if _encoded([kept[at]]) != _encoded([items[at]]):
            return False
    return False


_KNOWN_HEADS = _KnownHeads()


def _encoded(items: list[Any]) -> bytes:
    try:
        return _MARSHALLED + marshal.dumps(items, 4)
    except ValueError:  # not a JSON value (an in-process caller's own object)
        return pickle.dumps(items, pickle.HIGHEST_PROTOCOL)


_MARSHALLED = b"m"
"""Marks marshal bytes, which never start a pickle (protocol 2 and later start with 0x80)."""


class Memo(Generic[T]):
    """A bounded map from a content key to what was derived from that content.

    Bounded by the total length of its keys (a key is about as long as the content
    it stands for), oldest entries first out; content bigger than a quarter of that
    is not kept. The caller derives a value, then keeps it. With ``second_sight`` a
    value is kept only when its content comes again (the first time only the key is
    noted), for contents most of which come once, such as the start of a
    conversation's last message, whose values would crowd the memory and the
    collector. Reads take no lock: a dict lookup is atomic.
    """

    def __init__(self, max_chars: int = 32_000_000, *, second_sight: bool = False) -> None:
        self._entries: dict[Hashable, tuple[T, int] | int] = {}
        """A value and its key's size, or only the size of a key seen once."""
        self._chars = 0
        self._max_chars = max_chars
        self._second_sight = second_sight
        self._lock = threading.Lock()
        _MEMOS.add(self)

    def find(self, key: Hashable) -> T | None:
        """The value kept for ``key``, if any."""
        found = self._entries.get(key)
        return found[0] if isinstance(found, tuple) else None

    def keep(self, key: Hashable, size: int, value: T) -> None:
        """Keep ``value`` (derived from valid content only) under ``key``, ``size`` characters."""
        if size > self._max_chars // 4:
            return  # it would push out most of what is kept
        seen = self._entries.get(key) is not None
        self._keep(key, size if self._second_sight and not seen else (value, size))

    def _keep(self, key: Hashable, entry: tuple[T, int] | int) -> None:
        with self._lock:
            previous = self._entries.get(key)
            if isinstance(previous, tuple):
                return
            self._entries[key] = entry
            if previous is None:
                self._chars += _size(entry)
            while self._chars > self._max_chars and self._entries:
                self._chars -= _size(self._entries.pop(next(iter(self._entries))))

    def __len__(self) -> int:
        return len(self._entries)

    def head(self, items: list[Any], derive: Callable[[list[Any]], T]) -> T:
        """``derive(items[:-1])``, kept by that content (``head_key``): what a long list
        shares with the lists its siblings send, derived once for all of them."""
        key = head_key(items)
        found = self.find(key)
        if found is None:
            found = derive(items[:-1])
            self.keep(key, len(key), found)
        return found

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0


_MEMOS: weakref.WeakSet[Memo[Any]] = weakref.WeakSet()
_OTHER_CACHES: list[Callable[[], None]] = [_KNOWN_HEADS.clear]


def remember_cache(clear: Callable[[], None]) -> None:
    """Have ``forget_everything`` call ``clear`` too (a cache kept outside a ``Memo``)."""
    _OTHER_CACHES.append(clear)


def forget_everything() -> None:
    """Empty every memo of the process, as in a fresh one.

    For benchmarks that compare two runs of the same requests: without it, the
    second starts with what the first left, and reads as faster than it is.
    """
    for memo in list(_MEMOS):
        memo.clear()
    for clear in _OTHER_CACHES:
        clear()


def _size(entry: tuple[object, int] | int) -> int:
    return entry if isinstance(entry, int) else entry[1]
