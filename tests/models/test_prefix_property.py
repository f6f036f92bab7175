"""The cache invariant at the wire: extending a history only ever appends to its wire form.

For random neutral histories, every adapter's wire form of a history is, block
by block, the start of the wire form of any extension of it (cache markers
aside, since they move with the end of the request), and rendering is
deterministic to the byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forkagent.messages import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from forkagent.models import anthropic, gemini, openai, openai_responses
from forkagent.models.compat import DASHSCOPE, DEEPSEEK
from forkagent.requests import BlockPosition, ModelRequest, ModelSettings, canonical_json

from ._helpers import LOOKUP

Render = Callable[[ModelRequest], dict[str, Any]]

RENDERERS: dict[str, Render] = {
    "anthropic": anthropic.render_request,
    "openai": lambda r: openai.render_request(r, openai.OPENAI),
    "openai-responses": openai_responses.render_request,
    "dashscope": lambda r: openai.render_request(r, DASHSCOPE),
    "deepseek": lambda r: openai.render_request(r, DEEPSEEK),
    "gemini": gemini.render_request,
}

text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 9) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
image = st.builds(ImageBlock, data=st.sampled_from(["aGVsbG8=", "d29ybGQ="])) | st.builds(
    ImageBlock, url=st.sampled_from(["https://a/1.png", "https://a/2.png"])
)
signature = text | st.just('{"type":"reasoning","id":"rs_1","summary":[]}')
"""Another provider's signature, or a Responses API reasoning item (which goes back verbatim)."""
user_part: st.SearchStrategy[TextBlock | ImageBlock] = st.builds(TextBlock, text=text) | image


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Alternating turns (sometimes two user messages in a row), tool calls answered in order."""
    messages: list[Message] = []
    pending: list[str] = []
    calls = 0
    for _ in range(draw(st.integers(1, 5))):
        results: list[ContentBlock] = [
            ToolResultBlock(
                tool_use_id=call,
                content=tuple(draw(st.lists(user_part, min_size=1, max_size=2))),
                is_error=draw(st.booleans()),
            )
            for call in pending
        ]
        own = draw(st.lists(user_part, min_size=0 if results else 1, max_size=2))
        messages.append(UserMessage(content=(*results, *own)))
        if draw(st.booleans()):
            messages.append(UserMessage(content=(TextBlock(text=draw(text)),)))
        blocks: list[ContentBlock] = []
        if draw(st.booleans()):
            blocks.append(ThinkingBlock(thinking=draw(text), signature=draw(signature)))
        if draw(st.booleans()):
            blocks.append(TextBlock(text=draw(text)))
        pending = []
        for _ in range(draw(st.integers(0 if blocks else 1, 3))):
            calls += 1
            pending.append(f"call_{calls}")
            arguments = draw(st.dictionaries(text, json_value, max_size=3))
            blocks.append(ToolUseBlock(id=pending[-1], name="lookup", input=arguments))
        messages.append(AssistantMessage(content=tuple(blocks)))
    return messages


def _request(messages: list[Message], shared_end: BlockPosition | None = None) -> ModelRequest:
    return ModelRequest(
        model="m",
        system="You help.",
        tools=(LOOKUP,),
        messages=tuple(messages),
        settings=ModelSettings(cache_key="k"),
        shared_prefix_end=shared_end,
    )


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _blocks(name: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the request's fixed part, its conversation as a list of blocks), each canonical JSON."""
    body = _unmarked(body)
    if name == "anthropic":
        items = [{"role": m["role"], **b} for m in body.pop("messages") for b in m["content"]]
    elif name == "gemini":
        items = [{"role": c["role"], **p} for c in body.pop("contents") for p in c["parts"]]
    elif name == "openai-responses":
        items = body.pop("input")
    else:
        items = body.pop("messages")
    fixed = [json.dumps([k, v]) for k, v in body.items()]
    return fixed, [json.dumps(item, ensure_ascii=False) for item in items]


@settings(max_examples=150, deadline=None)
@given(conversation=conversations(), data=st.data())
def test_extending_a_history_only_appends_to_its_wire_form(
    conversation: list[Message], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, len(conversation)), label="cut")
    history, extension = _request(conversation[:cut]), _request(conversation)
    for name, render in RENDERERS.items():
        short_fixed, short = _blocks(name, render(history))
        long_fixed, long = _blocks(name, render(extension))
        assert short_fixed == long_fixed, name
        assert long[: len(short)] == short, name
        assert canonical_json(render(extension)) == canonical_json(render(extension)), name


@settings(max_examples=60, deadline=None)
@given(conversation=conversations(), directives=st.lists(text, min_size=2, max_size=3))
def test_fork_siblings_share_every_block_before_their_directive(
    conversation: list[Message], directives: list[str]
) -> None:
    last = len(conversation) - 1
    end = BlockPosition(message=last, block=len(conversation[last].content) - 1)
    siblings = [
        _request([*conversation, UserMessage(content=(TextBlock(text=d),))], end)
        for d in directives
    ]
    parent = _request(conversation)
    for name, render in RENDERERS.items():
        _, shared = _blocks(name, render(parent))
        for sibling in siblings:
            _, blocks = _blocks(name, render(sibling))
            assert blocks[: len(shared)] == shared, name
