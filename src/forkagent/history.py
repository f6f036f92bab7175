"""Persistent histories: a fork shares its parent's messages instead of copying them.

A ``HistoryView`` is an immutable sequence stored as frozen tuple chunks. Views
made from one another share those chunks, so a child's history costs its own
messages plus O(log n) references, however long the part it shares is. A
``History`` is one running agent's mutable history: a view plus a list tail that
appends go to; ``snapshot()`` freezes the tail into the view and returns it.

Each chunk is kept at least twice the size of the next, so a view has at most
log2(n) + 1 chunks (indexing is a bisection) and, whenever chunks merge, every
message copied lands in a chunk at least 1.5 times the size of the one it left:
a message is copied O(log n) times over a history's life, however often the
history is snapshotted.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from itertools import chain
from types import MemberDescriptorType
from typing import Generic, TypeVar, cast, overload

T = TypeVar("T")


class HistoryView(Sequence[T]):
    """An immutable sequence that behaves like a tuple and shares its storage.

    It equals a tuple (or a view) with the same items and hashes like one;
    indexing and slicing work as on a tuple (a slice is a tuple). ``prefix``
    and ``extended`` make new views that share every chunk they can.
    """

    __slots__ = ("_chunks", "_ends")

    _chunks: tuple[tuple[T, ...], ...]
    _ends: tuple[int, ...]
    """Running item counts: chunk ``k`` holds items ``_ends[k-1]`` to ``_ends[k]``.

    A chunk may be longer than the part a view uses (a prefix view keeps its
    last chunk whole instead of copying part of it)."""

    def __init__(self, items: Iterable[T] = ()) -> None:
        chunk = tuple(items)
        self._chunks = (chunk,) if chunk else ()
        self._ends = (len(chunk),) if chunk else ()

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            return self._items(start, stop) if step == 1 else self._items(0, len(self))[index]
        # Inlined (the adapters and the cache monitor index requests' messages often).
        ends = self._ends
        size = ends[-1] if ends else 0
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            raise IndexError("history index out of range")
        chunk = bisect_right(ends, position)
        return self._chunks[chunk][position - ends[chunk - 1] if chunk else position]

    def __iter__(self) -> Iterator[T]:
        return chain.from_iterable(self._pieces(0, len(self)))

    def __reversed__(self) -> Iterator[T]:
        return reversed(self._items(0, len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HistoryView):
            other = other._items(0, len(other))
        if not isinstance(other, tuple):
            return NotImplemented
        return len(self) == len(other) and self._items(0, len(self)) == other

    def __hash__(self) -> int:
        return hash(self._items(0, len(self)))

    def __repr__(self) -> str:
        return f"HistoryView({list(self)!r})"

    def __reduce__(self) -> tuple[type[HistoryView[T]], tuple[tuple[T, ...]]]:
        """Pickled as its items alone: no chunk's unused part, no layout."""
        return (HistoryView, (self._items(0, len(self)),))

    def common_length(self, other: HistoryView[T]) -> int:
        """How many leading items the two views have in common.

        Chunks both views hold (the same tuple at the same place) are skipped whole, so
        a view against one extended from it costs O(log n) plus the chunks the extension
        merged, not O(n).
        """
        size = min(len(self), len(other))
        start = 0
        for mine, theirs, end, their_end in zip(
            self._chunks, other._chunks, self._ends, other._ends, strict=False
        ):
            if mine is not theirs or end != their_end:
                break
            start = end
        if start >= size:
            return size
        for offset, (a, b) in enumerate(
            zip(self._items(start, size), other._items(start, size), strict=True)
        ):
            if a is not b and a != b:
                return start + offset
        return size

    def prefix(self, length: int) -> HistoryView[T]:
        """The first ``length`` items, sharing this view's chunks: O(log n)."""
        if length >= len(self):
            return self
        if length <= 0:
            return HistoryView()
        chunk = bisect_left(self._ends, length)
        return _view(self._chunks[: chunk + 1], (*self._ends[:chunk], length))

    def extended(self, items: Iterable[T]) -> HistoryView[T]:
        """This view followed by ``items``, sharing all but its last few chunks.

        The new items become one chunk, merged with the trailing chunks that are
        less than twice its size, so chunk sizes stay geometric.
        """
        new = tuple(items)
        if not new:
            return self
        keep, size = len(self._chunks), len(new)
        while keep and self._size(keep - 1) < 2 * size:
            keep -= 1
            size += self._size(keep)
        start = self._start(keep)
        if keep < len(self._chunks):
            new = self._items(start, len(self)) + new
        return _view((*self._chunks[:keep], new), (*self._ends[:keep], start + len(new)))

    def _start(self, chunk: int) -> int:
        return self._ends[chunk - 1] if chunk else 0

    def _size(self, chunk: int) -> int:
        return self._ends[chunk] - self._start(chunk)

    def _items(self, start: int, stop: int) -> tuple[T, ...]:
        """Items ``start`` to ``stop`` as one tuple: a chunk itself when one holds them all."""
        if start >= stop:
            return ()
        ends = self._ends
        chunk = bisect_right(ends, start)
        if stop <= ends[chunk]:  # one chunk holds them: the usual case
            begin = ends[chunk - 1] if chunk else 0
            return self._chunks[chunk][start - begin : stop - begin]
        joined: list[T] = []
        for piece in self._pieces(start, stop):
            joined += piece
        return tuple(joined)

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[T, ...]]:
        """Items ``start`` to ``stop`` as slices of the chunks holding them.

        A whole chunk is its own slice (CPython returns the tuple itself).
        """
        chunk = bisect_right(self._ends, start)
        begin = self._start(chunk)
        while begin < stop and chunk < len(self._chunks):
            end = self._ends[chunk]
            yield self._chunks[chunk][max(start - begin, 0) : min(stop, end) - begin]
            begin, chunk = end, chunk + 1


def _view(chunks: tuple[tuple[T, ...], ...], ends: tuple[int, ...]) -> HistoryView[T]:
    view: HistoryView[T] = HistoryView.__new__(HistoryView)
    view._chunks, view._ends = chunks, ends
    return view


def _position(index: int, size: int, error: str) -> int:
    position = index + size if index < 0 else index
    if not 0 <= position < size:
        raise IndexError(error)
    return position


def freeze(items: Iterable[T]) -> HistoryView[T]:
    """``items`` as a view: a view itself, a history's snapshot, anything else copied once."""
    if isinstance(items, HistoryView):
        return items
    if isinstance(items, History):
        return items.snapshot()
    return HistoryView(items)


class History(MutableSequence[T]):
    """One running agent's history: behaves like a list, shares its frozen part.

    It equals a list (or a history) with the same items, and a slice is a list.
    Appends go to a list tail; ``snapshot()`` freezes the tail and returns the
    whole history as a view that requests and forks share. Changing or
    removing a frozen item first moves the items from there on into the tail,
    so the views already handed out never change.

    An empty tail is the empty tuple until something is added (``_thaw``): a history
    waiting on its request, as every agent's does while the request is out, keeps no list.
    """

    __slots__ = ("_frozen", "_tail")

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._frozen: HistoryView[T] = freeze(items)
        self._tail: list[T] | tuple[()] = ()

    def snapshot(self) -> HistoryView[T]:
        """The history as an immutable view: O(log n) plus the items appended since the last."""
        if self._tail:
            self._frozen = self._frozen.extended(self._tail)
            self._tail = ()
        return self._frozen

    def extends(self, view: HistoryView[T]) -> bool:
        """Whether this history is ``view`` followed by what was appended since, known in
        O(1): ``view`` is still the frozen part (a change before the tail makes a new one).

        A transcript writer asks on every change instead of comparing the two histories.
        """
        return self._frozen is view

    def since(self, view: HistoryView[T]) -> tuple[T, ...] | None:
        """The items after ``view`` if this history ``extends`` it, else None: O(1) plus
        those items, and the tail stays a tail (a transcript writer records a reply this way
        without the snapshot that freezing it would cost, which nothing else may need)."""
        return tuple(self._tail) if self._frozen is view else None

    def __len__(self) -> int:
        ends = self._frozen._ends  # the view's length, without a call: asked on every turn
        return (ends[-1] if ends else 0) + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        ends = self._frozen._ends  # the view's length, without a call, as in ``__len__``
        frozen = ends[-1] if ends else 0
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return list(self)[index]
            head = self._frozen[start : min(stop, frozen)]
            return [*head, *self._tail[max(start - frozen, 0) : max(stop - frozen, 0)]]
        size = frozen + len(self._tail)  # not len(self): the view's length is known already
        position = _position(index, size, "history index out of range")
        return self._tail[position - frozen] if position >= frozen else self._frozen[position]

    @overload
    def __setitem__(self, index: int, value: T) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[T]) -> None: ...

    def __setitem__(self, index: int | slice, value: T | Iterable[T]) -> None:
        if not isinstance(index, slice):
            position = _position(index, len(self), "history assignment index out of range")
            self._thaw(position)[position - len(self._frozen)] = cast(T, value)  # per the overloads
            return
        values = cast(Iterable[T], value)  # per the overloads
        span = range(*index.indices(len(self)))
        if span.step == 1:
            self._thaw(span.start)[self._own(span)] = values
            return
        items = list(values)
        if len(items) != len(span):
            raise ValueError(
                f"attempt to assign a sequence of size {len(items)} "
                f"to an extended slice of size {len(span)}"
            )
        tail = self._thaw(min(span, default=len(self)))
        for position, item in zip(span, items, strict=True):
            tail[position - len(self._frozen)] = item

    def __delitem__(self, index: int | slice) -> None:
        if not isinstance(index, slice):
            position = _position(index, len(self), "history assignment index out of range")
            del self._thaw(position)[position - len(self._frozen)]
            return
        span = range(*index.indices(len(self)))
        if span.step == 1:
            del self._thaw(span.start)[self._own(span)]
            return
        tail = self._thaw(min(span, default=len(self)))
        for position in sorted(span, reverse=True):
            del tail[position - len(self._frozen)]

    def insert(self, index: int, value: T) -> None:
        position = min(max(index + len(self) if index < 0 else index, 0), len(self))
        self._thaw(position).insert(position - len(self._frozen), value)

    def append(self, value: T) -> None:
        self._open_tail().append(value)

    def extend(self, values: Iterable[T]) -> None:
        self._open_tail().extend(list(values) if values is self else values)

    def clear(self) -> None:
        self._frozen, self._tail = HistoryView(), ()

    def __iter__(self) -> Iterator[T]:
        return chain(self._frozen, self._tail)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History | list):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"History({list(self)!r})"

    def __reduce__(self) -> tuple[type[History[T]], tuple[list[T]]]:
        return (History, (list(self),))

    def _thaw(self, index: int) -> list[T]:
        """The tail as a list to change, holding the items from ``index`` on: the frozen ones
        from there moved into it, where they may change."""
        frozen, tail = self._frozen, self._open_tail()
        if index < len(frozen):
            tail[:0] = frozen[index:]
            self._frozen = frozen.prefix(index)
        return tail

    def _open_tail(self) -> list[T]:
        """The tail as a list, made on the first item added since the last snapshot."""
        tail = self._tail
        if not isinstance(tail, list):
            tail = self._tail = []
        return tail

    def _own(self, span: range) -> slice:
        """A step-1 span (already thawed) as a slice of the tail; empty spans keep their start."""
        offset = len(self._frozen)
        return slice(span.start - offset, max(span.stop, span.start) - offset)


class HistoryField(Generic[T]):
    """A slotted dataclass's field holding a ``History``: any iterable assigned to it becomes one.

    ``run.messages = [...]`` keeps working (the items are copied once); a view
    or another history assigned is shared, not copied. The field's default is
    an empty history.

    A slotted dataclass turns each field into a plain slot, this one too, so the class puts
    the field back over its slot once it is made (``over_slot``): the history lives in the
    slot, and an instance needs no ``__dict__``, one object fewer for the collector.
    """

    _slot: MemberDescriptorType
    """Where the history is kept: the slot the dataclass made for the field."""

    @classmethod
    def over_slot(cls, owner: type, name: str) -> None:
        """Make ``owner``'s slot ``name`` a history field again (call it after ``@dataclass``)."""
        field: HistoryField[T] = cls()
        field._slot = owner.__dict__[name]
        setattr(owner, name, field)

    @overload
    def __get__(self, instance: None, owner: type) -> tuple[()]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> History[T]: ...

    def __get__(self, instance: object | None, owner: type) -> History[T] | tuple[()]:
        if instance is None:
            return ()  # the default dataclasses read from the class: an empty history
        history: History[T] = self._slot.__get__(instance, owner)
        return history

    def __set__(self, instance: object, value: Iterable[T]) -> None:
        self._slot.__set__(instance, History(value))
