"""The opt-in policy that uses a tool under ``tool_choice: auto`` (``serve --call-tools``),
through the official SDKs over loopback HTTP: what their tool examples expect."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest
from _emu_helpers import TOOL, user
from typer.testing import CliRunner

from forkagent.cli import app
from forkagent.emulator import Emulator, default_policy, tool_choosing_policy

FUNCTION = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a ticket up.",
        "parameters": {
            "type": "object",
            "properties": {"ticket": {"type": "string"}},
            "required": ["ticket"],
        },
    },
}


@pytest.fixture(autouse=True)
def choosing(emu: Emulator) -> Iterator[None]:
    emu.set_policy(tool_choosing_policy)
    yield
    emu.set_policy(default_policy)


def test_anthropic_auto_calls_a_tool_then_answers_its_result(claude: anthropic.Anthropic) -> None:
    first = claude.messages.create(
        model="claude-sonnet-4-6", max_tokens=256, tools=[TOOL], messages=[user("Find T-1")]
    )
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "lookup"
    assert isinstance(call.input, dict)
    second = claude.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=256,
        tools=[TOOL],
        messages=[
            user("Find T-1"),
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "open"}],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["text"]


def test_anthropic_tool_choice_none_and_no_tools_answer_in_text(
    claude: anthropic.Anthropic,
) -> None:
    refused = claude.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=256,
        tools=[TOOL],
        tool_choice={"type": "none"},
        messages=[user("Find T-1")],
    )
    plain = claude.messages.create(
        model="claude-sonnet-4-6", max_tokens=256, messages=[user("Find T-1")]
    )
    assert refused.stop_reason == plain.stop_reason == "end_turn"


def test_chat_completions_auto_calls_the_function(oai: openai.OpenAI) -> None:
    reply = oai.chat.completions.create(
        model="gpt-4.1",
        messages=[{"role": "user", "content": "Find T-1"}],
        tools=[FUNCTION],  # type: ignore[list-item]
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name == "lookup"
    assert '"ticket"' in call.function.arguments  # the schema's required field


def test_responses_auto_calls_the_function(oai: openai.OpenAI) -> None:
    tool = {"type": "function", **FUNCTION["function"]}  # type: ignore[dict-item]
    reply = oai.responses.create(model="gpt-5", input="Find T-1", tools=[tool])  # type: ignore[list-item]
    assert [item.type for item in reply.output][-1] == "function_call"


def test_serve_takes_the_flag() -> None:
    result = CliRunner().invoke(app, ["emulator", "serve", "--help"])
    assert "--call-tools" in result.output
