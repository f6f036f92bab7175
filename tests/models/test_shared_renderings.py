"""Shared renderings: one per live object, gone with the object, never a newer object's."""

from __future__ import annotations

import gc
import weakref

from forkagent.messages import TextBlock
from forkagent.models._shared import SharedRenderings, _Kept


def test_an_object_is_rendered_once_while_it_lives_and_forgotten_when_it_dies() -> None:
    renderings: SharedRenderings[TextBlock, str] = SharedRenderings()
    calls: list[str] = []

    def render(block: TextBlock) -> str:
        calls.append(block.text)
        return block.text.upper()

    block = TextBlock(text="hi")
    assert renderings.get(block, render) == renderings.get(block, render) == "HI"
    assert calls == ["hi"]
    assert len(renderings) == 1
    del block
    gc.collect()
    assert len(renderings) == 0


def test_a_dead_objects_callback_leaves_a_newer_entry_under_the_same_id() -> None:
    renderings: SharedRenderings[TextBlock, str] = SharedRenderings()
    block = TextBlock(text="new")
    renderings.get(block, lambda b: b.text)
    gone = TextBlock(text="old")
    stale = _Kept(gone, lambda ref: None, id(block), "old")  # as if ``block`` reused its id
    del gone
    renderings._forget(stale)
    assert len(renderings) == 1
    assert renderings.get(block, lambda b: "rendered again") == "new"


class _Wire(dict[str, str]):
    """A rendering that can be referred to weakly."""


def test_a_rendering_lives_as_long_as_its_object() -> None:
    renderings: SharedRenderings[TextBlock, _Wire] = SharedRenderings()
    block = TextBlock(text="hi")
    rendered = renderings.get(block, lambda b: _Wire(text=b.text))
    watch = weakref.ref(rendered)
    del rendered
    gc.collect()
    assert renderings.get(block, lambda b: _Wire(text="again")) is watch()
    del block
    gc.collect()
    assert watch() is None
    assert len(renderings) == 0
