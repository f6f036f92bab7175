"""The persistent history: a view behaves like a tuple, a history like a list, and
neither ever shows another's changes, however they share storage."""

from __future__ import annotations

import copy
import math
import pickle
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from forkagent.history import History, HistoryView, freeze

ITEMS = list(range(10))


def chunked(*parts: list[int]) -> HistoryView[int]:
    """A view made of several chunks, as a history snapshotted now and then makes it."""
    view: HistoryView[int] = HistoryView()
    for part in parts:
        view = view.extended(part)
    return view


VIEWS = [
    HistoryView(ITEMS),
    chunked([0, 1, 2, 3, 4, 5, 6], [7, 8], [9]),
    chunked([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [12]).prefix(10),
]


@pytest.mark.parametrize("view", VIEWS)
def test_a_view_indexes_slices_and_iterates_like_a_tuple(view: HistoryView[int]) -> None:
    items = tuple(ITEMS)
    assert len(view) == len(items)
    assert [view[i] for i in range(-10, 10)] == [items[i] for i in range(-10, 10)]
    bounds = (None, *range(-12, 13))
    cuts = [slice(a, b) for a in bounds for b in bounds]  # within a chunk, across, empty
    for cut in (*cuts, slice(None, None, -2), slice(1, None, 3)):
        assert view[cut] == items[cut], cut
        assert type(view[cut]) is tuple
    assert list(view) == list(items)
    assert list(reversed(view)) == list(reversed(items))
    assert (7 in view, 10 in view) == (True, False)
    assert (view.index(7), view.count(7)) == (7, 1)
    for index in (10, -11):
        with pytest.raises(IndexError):
            view[index]


@pytest.mark.parametrize("view", VIEWS)
def test_a_view_equals_and_hashes_like_the_tuple_it_holds(view: HistoryView[int]) -> None:
    items = tuple(ITEMS)
    assert view == items
    assert items == view
    assert view == HistoryView(items)
    assert hash(view) == hash(items)
    assert view != (*items, 10)
    assert view != items[:-1]
    assert view != list(items)  # a tuple never equals a list
    assert pickle.loads(pickle.dumps(view)) == items
    assert copy.deepcopy(view) == items


def test_a_prefix_and_an_extension_leave_the_original_as_it_was() -> None:
    view = chunked([0, 1, 2, 3], [4, 5])
    shorter = view.prefix(3)
    longer = shorter.extended([30, 31])
    assert view == (0, 1, 2, 3, 4, 5)
    assert shorter == (0, 1, 2)
    assert longer == (0, 1, 2, 30, 31)
    assert view.prefix(0) == ()
    assert view.prefix(100) is view
    assert view.extended([]) is view


def allocated(make: Callable[[], object]) -> int:
    """Bytes still allocated by what ``make`` returns (its garbage is not counted)."""
    tracemalloc.start()
    try:
        kept = make()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return size


@pytest.mark.parametrize("length", [1_000, 100_000])
def test_extending_or_cutting_a_long_view_costs_the_same_as_a_short_one(length: int) -> None:
    """What a fork pays: its own items, not a copy of the history it shares."""
    view = History(range(length)).snapshot()
    assert allocated(lambda: view.extended([-1])) < 1_000
    assert allocated(lambda: view.prefix(length - 1)) < 1_000


def test_a_history_snapshotted_after_every_append_keeps_few_chunks() -> None:
    """Chunks merge geometrically: log2(n) + 1 at most, so a view stays cheap to index."""
    history: History[int] = History()
    for item in range(5_000):
        history.append(item)
        view = history.snapshot()
        assert len(view._chunks) <= math.log2(len(view)) + 1
    assert view == tuple(range(5_000))


def test_a_history_behaves_like_a_list() -> None:
    items = list(ITEMS)
    history = History(items)
    history.snapshot()
    assert history == items
    assert items == history
    assert history != tuple(ITEMS)
    assert history[2:5] == [2, 3, 4]
    assert type(history[2:5]) is list
    history[0] = 100
    history.insert(0, -1)
    del history[-1]
    history += [20, 21]
    history.extend(history)
    assert history.pop() == 21
    assert history == [-1, 100, *range(1, 9), 20, 21, -1, 100, *range(1, 9), 20]
    history[:] = [1, 2]
    assert history == [1, 2]
    assert repr(history) == "History([1, 2])"
    assert pickle.loads(pickle.dumps(history)) == [1, 2]
    with pytest.raises(IndexError):
        history[2] = 0
    with pytest.raises(ValueError, match="extended slice of size 1"):
        history[::2] = [1, 2]
    with pytest.raises(TypeError):
        hash(history)


def test_freeze_shares_a_view_and_a_historys_snapshot() -> None:
    view = HistoryView(ITEMS)
    history = History(view)
    history.append(10)
    assert freeze(view) is view
    assert freeze(history) is history.snapshot()
    assert freeze(history) == (*ITEMS, 10)


def test_changing_a_frozen_item_never_changes_a_snapshot_handed_out() -> None:
    history = History(ITEMS)
    before = history.snapshot()
    history[3] = 30
    del history[0]
    history.append(11)
    assert before == tuple(ITEMS)
    assert history.snapshot() == (1, 2, 30, 4, 5, 6, 7, 8, 9, 11)


# -- the property: any mix of operations on histories that share storage ------------------


def test_common_length_never_compares_what_two_views_share() -> None:
    """A view against its own extension or prefix: shared items are not compared with ``==``."""

    class Loud(int):
        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared")

        __hash__ = int.__hash__

    base = chunked([Loud(n) for n in range(64)], [Loud(64)])
    longer = base.extended([1, 2])
    assert base.common_length(longer) == 65
    assert longer.common_length(base.prefix(40)) == 40
    assert base.common_length(HistoryView([Loud(0)])) == 1  # identical items: not compared


class SharedHistories(RuleBasedStateMachine):
    """Histories forked from one another's snapshots, each checked against a plain list.

    Every snapshot ever taken is kept with the tuple it equalled then: no later
    change to any history may alter it.
    """

    histories = Bundle("histories")

    def __init__(self) -> None:
        super().__init__()
        self.models: dict[int, tuple[History[int], list[int]]] = {}
        self.snapshots: list[tuple[HistoryView[int], tuple[int, ...]]] = []

    def _add(self, history: History[int], model: list[int]) -> int:
        key = len(self.models)
        self.models[key] = (history, model)
        return key

    @rule(target=histories, items=st.lists(st.integers(), max_size=8))
    def new(self, items: list[int]) -> int:
        return self._add(History(items), list(items))

    @rule(target=histories, source=histories)
    def fork(self, source: int) -> int:
        history, model = self.models[source]
        return self._add(History(history.snapshot()), list(model))

    @rule(target=histories, source=histories)
    def assign(self, source: int) -> int:
        """``run.messages = other``: a copy, sharing the frozen part."""
        history, model = self.models[source]
        return self._add(History(history), list(model))

    @rule(key=histories, items=st.lists(st.integers(), max_size=20))
    def append(self, key: int, items: list[int]) -> None:
        history, model = self.models[key]
        for item in items:
            history.append(item)
        model.extend(items)

    @rule(key=histories, items=st.lists(st.integers(), max_size=6), itself=st.booleans())
    def extend(self, key: int, items: list[int], itself: bool) -> None:
        history, model = self.models[key]
        if itself:
            history.extend(history)
            model.extend(model)
        else:
            history.extend(items)
            model.extend(items)

    @rule(key=histories)
    def clear(self, key: int) -> None:
        history, model = self.models[key]
        history.clear()
        model.clear()

    @rule(key=histories)
    def snapshot(self, key: int) -> None:
        history, model = self.models[key]
        self.snapshots.append((history.snapshot(), tuple(model)))

    @precondition(lambda self: any(model for _, model in self.models.values()))
    @rule(key=histories, data=st.data())
    def set_item(self, key: int, data: st.DataObject) -> None:
        history, model = self.models[key]
        if model:
            index = data.draw(st.integers(-len(model), len(model) - 1))
            history[index] = model[index] = data.draw(st.integers())

    @rule(key=histories, start=st.integers(-12, 12), stop=st.integers(-12, 12), data=st.data())
    def set_slice(self, key: int, start: int, stop: int, data: st.DataObject) -> None:
        history, model = self.models[key]
        step = data.draw(st.sampled_from([1, 1, 2, -1, -3]))
        cut = slice(start, stop, step)
        size = len(range(*cut.indices(len(model))))
        values: list[int] = [0] * size  # an extended slice takes as many as it spans
        if step == 1:
            values = data.draw(st.lists(st.integers(), max_size=6))
        history[cut] = values
        model[cut] = values

    @rule(key=histories, start=st.integers(-12, 12), stop=st.integers(-12, 12), data=st.data())
    def delete(self, key: int, start: int, stop: int, data: st.DataObject) -> None:
        history, model = self.models[key]
        cut = slice(start, stop, data.draw(st.sampled_from([1, 2, -1])))
        del history[cut]
        del model[cut]
        also_one = data.draw(st.booleans())
        if model and also_one:
            index = data.draw(st.integers(-len(model), len(model) - 1))
            del history[index]
            del model[index]

    @rule(key=histories, index=st.integers(-15, 15), item=st.integers())
    def insert(self, key: int, index: int, item: int) -> None:
        history, model = self.models[key]
        history.insert(index, item)
        model.insert(index, item)

    @rule(key=histories, start=st.integers(-12, 12), stop=st.integers(-12, 12))
    def read(self, key: int, start: int, stop: int) -> None:
        history, model = self.models[key]
        assert history[start:stop] == model[start:stop]
        view = history.snapshot()
        assert view[start:stop] == tuple(model)[start:stop]
        if model:
            assert (
                history[start % len(model)] == view[start % len(model)] == model[start % len(model)]
            )

    @precondition(lambda self: len(self.snapshots) >= 2)
    @rule(data=st.data())
    def common_length(self, data: st.DataObject) -> None:
        """Two snapshots' common start, as a transcript writer finds what it recorded."""
        (first, items), (second, others) = (
            data.draw(st.sampled_from(self.snapshots)) for _ in "ab"
        )
        naive = next(
            (n for n, (a, b) in enumerate(zip(items, others, strict=False)) if a != b),
            min(len(items), len(others)),
        )
        assert first.common_length(second) == second.common_length(first) == naive

    @invariant()
    def every_history_matches_its_model(self) -> None:
        for history, model in self.models.values():
            assert len(history) == len(model)
            assert history == model

    @invariant()
    def no_snapshot_ever_changes(self) -> None:
        for view, items in self.snapshots:
            assert view == items
            assert len(view) == len(items)
            assert list(reversed(view)) == list(reversed(items))


SharedHistories.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_shared_histories = SharedHistories.TestCase


def test_since_gives_the_appends_after_the_frozen_view_without_freezing_them() -> None:
    history = History([1, 2, 3])
    view = history.snapshot()
    assert history.since(view) == ()
    history.extend([4, 5])
    history[-1] = 6  # still a tail
    assert history.since(view) == (4, 6)
    assert history.extends(view)  # nothing frozen
    assert history.since(HistoryView([1, 2, 3])) is None  # equal, but not its frozen part
    history[0] = 9
    assert history.since(view) is None


def test_a_history_extends_its_snapshot_until_something_before_its_appends_changes() -> None:
    history = History([1, 2, 3])
    view = history.snapshot()
    assert history.extends(view)
    assert not history.extends(HistoryView([1, 2, 3]))  # equal, but not its snapshot
    history.append(4)
    history[-1] = 5  # appended since the snapshot: the snapshot is still its start
    assert history.extends(view)
    view = history.snapshot()
    history[1] = 9  # before the appends: a new frozen part
    assert not history.extends(view)
    view = history.snapshot()
    del history[2:]
    assert not history.extends(view)
    assert list(history) == [1, 9]


def _has_list(history: History[int]) -> bool:
    return isinstance(history._tail, list)


def test_a_history_keeps_no_list_while_nothing_was_added_since_its_snapshot() -> None:
    """As every agent's history while its request is out: one object fewer for the collector."""
    history = History([1, 2])
    assert not _has_list(history)
    history.append(3)
    assert _has_list(history)
    assert history.snapshot() == (1, 2, 3)
    assert not _has_list(history)
    assert history.since(history.snapshot()) == ()
    history.append(4)
    history.insert(0, 0)
    assert history == [0, 1, 2, 3, 4]
