"""Shared requests, conversations and golden files for the adapter tests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from forkagent.emulator import EmulatedRequest, Emulator, Reply, ToolCall
from forkagent.messages import (
    ImageBlock,
    JsonValue,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    assistant,
    tool_result,
    user,
)
from forkagent.models import Model, ModelResponse, ResponseComplete
from forkagent.models._retry import RetryPolicy
from forkagent.requests import BlockPosition, ModelRequest, ModelSettings, ThinkingConfig, ToolSpec

GOLDEN = Path(__file__).parent / "golden"
FAST = RetryPolicy(initial_delay=0.001, max_delay=0.002)
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

LONG_SYSTEM = "You are a careful assistant who answers briefly and checks each fact. " * 400
"""About 5,600 tokens: above every provider's minimum cacheable prefix."""

LOOKUP = ToolSpec(
    name="lookup",
    description="Look a ticket up by its key.",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
)


def rich_request(model: str, **settings: object) -> ModelRequest:
    """A history with everything an adapter must map: thinking, parallel calls, images, errors."""
    history: tuple[Message, ...] = (
        user("Compare tickets A and B.", ImageBlock(media_type="image/png", data=PNG)),
        assistant(
            ThinkingBlock(thinking="Both tickets are needed.", signature="sig-1"),
            "Looking both up.",
            ToolUseBlock(id="call_a", name="lookup", input={"key": "A", "deep": True}),
            ToolUseBlock(id="call_b", name="lookup", input={}, raw_arguments='{"key": "B"'),
        ),
        UserMessage(
            content=(
                tool_result("call_a", "A: open, owner Kim"),
                ToolResultBlock(
                    tool_use_id="call_b",
                    content=(TextBlock(text="bad arguments"), ImageBlock(url="https://x/e.png")),
                    is_error=True,
                ),
                TextBlock(text="Now summarise."),
            ),
            origin="tool",
        ),
        assistant(
            ThinkingBlock(thinking="", signature="opaque-redacted", redacted=True),
            "A is open; B could not be read.",
        ),
        user("Write the report."),
    )
    return ModelRequest(
        model=model,
        system=(TextBlock(text="You review tickets."), TextBlock(text="Be exact.")),
        tools=(
            LOOKUP,
            ToolSpec(name="close", description="Close a ticket.", input_schema={"type": "object"}),
        ),
        messages=history,
        settings=ModelSettings(
            max_tokens=1024,
            temperature=0.2,
            stop_sequences=("END",),
            tool_choice="auto",
            cache_key="family-1",
        ).model_copy(update=settings),
        shared_prefix_end=BlockPosition(message=2, block=1),
    )


THINKING = ThinkingConfig(type="enabled", budget_tokens=2048)


def assert_golden(name: str, value: JsonValue) -> None:
    """Compare with ``golden/<name>.json`` as text, so key order counts.

    ``FORKAGENT_UPDATE_GOLDEN=1`` rewrites the file instead.
    """
    path = GOLDEN / f"{name}.json"
    text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("FORKAGENT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} changed; FORKAGENT_UPDATE_GOLDEN=1 to accept"


def capture_bodies(emulator: Emulator) -> list[dict[str, Any]]:
    """The request bodies the emulator receives from now on; each is answered "done"."""
    bodies: list[dict[str, Any]] = []

    def capture(request: EmulatedRequest) -> Reply:
        bodies.append(dict(request.body))
        return Reply(text="done")

    emulator.set_policy(capture)
    return bodies


def script_tool_turn(emulator: Emulator) -> None:
    """Turn 1 asks for two lookups at once; turn 2 answers; later turns use the policy."""
    emulator.script(
        Reply(
            text="Checking both.",
            tool_calls=(ToolCall("lookup", {"key": "A"}), ToolCall("lookup", {"key": "B"})),
        ),
        Reply(text="A is open, B is closed."),
    )


async def complete(model: Model, request: ModelRequest, *, stream: bool) -> ModelResponse:
    if not stream:
        return await model.request(request)
    last = None
    async for event in model.stream(request):
        last = event
    assert isinstance(last, ResponseComplete)
    return last.response


async def converse(model: Model, *, stream: bool = False) -> list[ModelResponse]:
    """Three turns: parallel tool calls, their results, then a follow-up question."""
    history: list[Message] = [user("Look up tickets A and B.")]
    responses: list[ModelResponse] = []
    follow_ups = ["Thanks. Anything else?"]
    while True:
        request = ModelRequest(
            model=model.name, system=LONG_SYSTEM, tools=(LOOKUP,), messages=tuple(history)
        )
        response = await complete(model, request, stream=stream)
        responses.append(response)
        history.append(response.message)
        if uses := response.message.tool_uses:
            results = tuple(tool_result(u.id, f"{u.input.get('key')}: open") for u in uses)
            history.append(UserMessage(content=results, origin="tool"))
        elif follow_ups:
            history.append(user(follow_ups.pop()))
        else:
            return responses


def check_conversation(responses: list[ModelResponse]) -> None:
    """What every adapter must get right in ``converse`` against the scripted emulator."""
    first, second, third = responses
    calls = first.message.tool_uses
    assert first.stop_reason == "tool_use"
    assert [c.input for c in calls] == [{"key": "A"}, {"key": "B"}]
    assert len({c.id for c in calls}) == 2
    assert second.message.text == "A is open, B is closed."
    assert second.stop_reason == "end_turn"
    assert third.message.text
    assert first.usage.requests == 1
    assert first.usage.prompt_tokens > 5000
    assert second.usage.cache_read_tokens > 0, "turn 2 reads what turn 1 cached"
    assert third.usage.cache_read_tokens >= second.usage.cache_read_tokens
