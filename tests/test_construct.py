"""Models the runtime makes without validating: the same objects pydantic's own ways make."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, PrivateAttr

from forkagent._construct import trusted
from forkagent._orchestration.budget import Budget
from forkagent._orchestration.fork import directive_text, fork_base, fork_from
from forkagent._orchestration.loop import AgentRun
from forkagent.messages import Message, TextBlock, ToolUseBlock, assistant, user
from forkagent.models.function import FunctionModel
from forkagent.requests import BlockPosition, ModelRequest, ModelSettings, ToolSpec


def _state(model: BaseModel) -> dict[str, object]:
    """Everything pydantic keeps on an instance (its four slots)."""
    return {name: getattr(model, name) for name in BaseModel.__slots__}


def test_a_built_request_is_what_model_construct_makes() -> None:
    run = AgentRun(
        id="a",
        model=FunctionModel(lambda request: assistant("ok")),
        system="You help.",
        tools=(),
        tool_specs=(ToolSpec(name="Read", description="reads", input_schema={}),),
        settings=ModelSettings(max_tokens=100),
        cwd=Path("."),
        budget=Budget(),
        messages=[user("hi"), assistant("hello"), user("more")],
        shared_prefix_end=BlockPosition(message=0, block=0),
    )
    built = run.build_request()
    constructed = ModelRequest.model_construct(
        model=run.model.name,
        system=run.system,
        tools=run.tool_specs,
        messages=built.messages,
        settings=run.settings,
        shared_prefix_end=run.shared_prefix_end,
    )
    assert _state(built) == _state(constructed)
    assert list(built.__dict__) == list(constructed.__dict__)  # the dump's field order
    assert built.model_dump_json() == constructed.model_dump_json()
    # Requests share one fields set (frozen: nothing adds to it); a copy gets its own.
    other = run.build_request()
    changed = other.model_copy(update={"model": "other"})
    assert changed.model_fields_set is not other.model_fields_set
    with pytest.raises(ValueError, match="frozen"):
        other.model = "other"  # type: ignore[misc]  # refused before any fields set grows
    assert built.model_fields_set == other.model_fields_set == set(ModelRequest.model_fields)


@pytest.mark.parametrize(
    "history",
    [
        [user("plan"), assistant("done")],
        [user("plan"), assistant(ToolUseBlock(id="t1", name="Read", input={}))],
        [user("plan"), assistant("done"), user("and this")],
    ],
)
def test_a_forks_last_message_is_the_familys_model_copy(history: list[Message]) -> None:
    base = fork_base(history)
    last = fork_from(base, "Do it.").messages[-1]
    copied = base.last.model_copy(update={"content": last.content})
    assert _state(last) == _state(copied)
    assert list(last.__dict__) == list(copied.__dict__)
    assert last.model_dump_json() == copied.model_dump_json()


@pytest.mark.parametrize("directive", ["Do it.", "", "Two\nlines ü"])
def test_a_forks_directive_block_is_the_validated_one(directive: str) -> None:
    block = fork_from(fork_base([user("plan"), assistant("done")]), directive).messages[-1]
    made = block.content[-1]
    validated = TextBlock(text=directive_text(directive))
    assert _state(made) == _state(validated)
    assert list(made.__dict__) == list(validated.__dict__)
    assert made.model_dump_json() == validated.model_dump_json()


class _Private(BaseModel):
    model_config = ConfigDict(frozen=True)
    _seen: int = PrivateAttr(default=0)


class _Extra(BaseModel):
    model_config = ConfigDict(extra="allow")


class _PostInit(BaseModel):
    def model_post_init(self, context: object) -> None:
        pass


@pytest.mark.parametrize("cls", [_Private, _Extra, _PostInit])
def test_a_model_that_needs_more_than_four_attributes_is_refused(cls: type[BaseModel]) -> None:
    with pytest.raises(TypeError, match="model_construct"):
        trusted(cls)
