"""The neutral conversation model: lossless JSON, value equality, immutability."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from forkagent.messages import (
    AssistantMessage,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    assistant,
    dump_message,
    load_message,
    messages_from_json,
    messages_to_json,
    pending_tool_uses,
    tool_result,
    user,
)
from forkagent.testing import wire

# -- strategies (shared in spirit with the fork-invariant suite) --------------------------------

texts = st.text(max_size=40)  # unicode, no lone surrogates
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)

text_blocks = st.builds(TextBlock, text=texts)
image_blocks = st.one_of(
    st.builds(
        ImageBlock,
        media_type=st.sampled_from(["image/png", "image/jpeg", "image/webp"]),
        data=st.text(alphabet="ABCDEFabcdef0123456789+/=", min_size=1, max_size=30),
    ),
    st.builds(ImageBlock, url=st.just("https://example.com/a.png"), data=st.none()),
)
thinking_blocks = st.one_of(
    st.builds(ThinkingBlock, thinking=texts, signature=st.none() | texts),
    st.builds(ThinkingBlock, thinking=st.just(""), signature=texts, redacted=st.just(True)),
)
tool_use_blocks = st.builds(
    ToolUseBlock,
    id=ids,
    name=ids,
    input=st.dictionaries(texts, json_values, max_size=4),
    raw_arguments=st.none() | texts,
)
tool_result_blocks = st.builds(
    ToolResultBlock,
    tool_use_id=ids,
    content=st.lists(text_blocks | image_blocks, max_size=3).map(tuple),
    is_error=st.booleans(),
)
user_messages = st.builds(
    UserMessage,
    content=st.lists(text_blocks | image_blocks | tool_result_blocks, max_size=4).map(tuple),
    origin=st.sampled_from(["user", "tool", "fork", "notification", "hook", "system"]),
)
assistant_messages = st.builds(
    AssistantMessage,
    content=st.lists(text_blocks | thinking_blocks | tool_use_blocks, max_size=4).map(tuple),
)
histories = st.lists(user_messages | assistant_messages, max_size=6)


@settings(max_examples=100, deadline=None)
@given(histories)
def test_json_round_trip_is_identity(history: list[UserMessage | AssistantMessage]) -> None:
    data = messages_to_json(history)
    back = messages_from_json(data)
    assert back == tuple(history)
    # Lossless means the bytes come back too: transcripts are re-read and re-written.
    assert messages_to_json(back) == data
    # Both input forms are accepted.
    assert messages_from_json(data.decode()) == tuple(history)


@settings(max_examples=50, deadline=None)
@given(user_messages | assistant_messages)
def test_single_message_round_trip(message: UserMessage | AssistantMessage) -> None:
    assert load_message(json.loads(json.dumps(dump_message(message)))) == message


def test_round_trip_keeps_signatures_key_order_and_raw_arguments() -> None:
    use = ToolUseBlock(
        id="t1", name="Edit", input={"z": 1, "a": {"y": [1, "ü"], "b": None}}, raw_arguments='{"z":'
    )
    history = (
        user("héllo 🌍", ImageBlock(data="AAAA")),
        assistant(ThinkingBlock(thinking="hmm", signature="sig=="), use),
        UserMessage(content=(tool_result("t1", "bad", is_error=True),), origin="tool"),
        assistant(ThinkingBlock(thinking="", signature="opaque", redacted=True), "ok"),
    )
    back = messages_from_json(messages_to_json(history))
    assert back == history
    restored = back[1].content[1]
    assert isinstance(restored, ToolUseBlock)
    assert list(restored.input) == ["z", "a"]  # providers hash key order
    assert list(wire(restored.input)["a"]) == ["y", "b"]
    assert restored.raw_arguments == '{"z":'
    assert back[1].content[0] == ThinkingBlock(thinking="hmm", signature="sig==")
    assert back[2].origin == "tool"
    assert back[2].tool_results[0].is_error


def test_value_equality() -> None:
    a = assistant("x", ToolUseBlock(id="1", name="Read", input={"file_path": "a"}))
    b = assistant("x", ToolUseBlock(id="1", name="Read", input={"file_path": "a"}))
    assert a == b
    assert a is not b
    assert a != assistant("x", ToolUseBlock(id="1", name="Read", input={"file_path": "b"}))
    assert user("x") != user("x", origin="fork")  # origin is part of the value
    reply: Message = assistant("x")
    assert user("x") != reply


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (user("x"), "content"),
        (user("x"), "origin"),
        (assistant("x"), "content"),
        (TextBlock(text="x"), "text"),
        (ThinkingBlock(thinking="t", signature="s"), "signature"),
        (ToolUseBlock(id="1", name="n"), "input"),
        (ToolResultBlock(tool_use_id="1"), "is_error"),
        (ImageBlock(data="AA"), "data"),
    ],
)
def test_assignment_raises(value: Any, field: str) -> None:
    with pytest.raises(ValidationError, match="frozen"):
        setattr(value, field, getattr(value, field))


def test_content_is_a_tuple() -> None:
    message = user("a", "b")
    assert isinstance(message.content, tuple)
    assert isinstance(UserMessage(content=[TextBlock(text="a")]).content, tuple)


def test_unknown_fields_and_block_types_are_rejected() -> None:
    with pytest.raises(ValidationError):
        load_message({"role": "user", "content": [{"type": "text", "text": "x", "extra": 1}]})
    with pytest.raises(ValidationError):
        load_message({"role": "user", "content": [{"type": "video", "url": "x"}]})
    with pytest.raises(ValidationError):
        load_message({"role": "system", "content": []})


def test_pending_tool_uses() -> None:
    a, b = ToolUseBlock(id="a", name="x"), ToolUseBlock(id="b", name="x")
    history: list[Message] = [user("go"), assistant("thinking", a, b)]
    assert pending_tool_uses(history) == (a, b)
    history.append(UserMessage(content=(tool_result("a", "done"),), origin="tool"))
    assert pending_tool_uses(history) == (b,)
    history.append(UserMessage(content=(tool_result("b", "done"),), origin="tool"))
    assert pending_tool_uses(history) == ()
    assert pending_tool_uses([user("x")]) == ()
    assert pending_tool_uses([]) == ()


def test_text_helpers() -> None:
    message = assistant("a", ToolUseBlock(id="1", name="n"), "b")
    assert message.text == "ab"
    assert [u.id for u in message.tool_uses] == ["1"]
    result = ToolResultBlock(
        tool_use_id="1", content=(TextBlock(text="x"), ImageBlock(data="A"), TextBlock(text="y"))
    )
    assert result.text == "xy"
