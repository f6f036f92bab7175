"""Every request body forkagent's adapters render passes the strict emulator.

The richest request the helpers build (system blocks, two tools, tool calls and
results with images, thinking and redacted thinking, stop sequences, breakpoints)
is rendered by each adapter (OpenAI's on both Chat Completions and the Responses API)
for each family, streaming and not, with the settings that family takes, and sent to a
strict emulator.
"""

from __future__ import annotations

from typing import Any

import pytest

from forkagent.emulator import Emulator, Latency
from forkagent.models import anthropic, gemini, openai, openai_responses
from forkagent.models.compat import DASHSCOPE, DEEPSEEK
from forkagent.requests import ModelRequest

from ._helpers import THINKING, rich_request

Render = tuple[str, dict[str, Any]]


def _anthropic(request: ModelRequest, stream: bool) -> Render:
    return "/v1/messages", anthropic.render_request(request, stream=stream)


def _chat(dialect: openai.ChatDialect) -> Any:
    def render(request: ModelRequest, stream: bool) -> Render:
        return "/v1/chat/completions", openai.render_request(request, dialect, stream=stream)

    return render


def _responses(*, chain: bool) -> Any:
    def render(request: ModelRequest, stream: bool) -> Render:
        body = openai_responses.render_request(request, stream=stream, chain=chain)
        return "/v1/responses", body

    return render


def _gemini(request: ModelRequest, stream: bool) -> Render:
    verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/v1beta/models/{request.model}:{verb}", gemini.render_request(request)


CASES = [
    ("claude-opus-4-1", {}, _anthropic),
    (
        "claude-sonnet-4-6",
        {"thinking": THINKING, "max_tokens": 4096, "temperature": None, "tool_choice": None},
        _anthropic,
    ),
    ("claude-haiku-4-5", {"tool_choice": "lookup", "temperature": None}, _anthropic),
    ("gpt-4.1", {}, _chat(openai.OPENAI)),
    (
        "gpt-5",
        {"temperature": None, "stop_sequences": (), "tool_choice": "any"},
        _chat(openai.OPENAI),
    ),
    ("qwen-plus", {}, _chat(DASHSCOPE)),
    ("deepseek-chat", {}, _chat(DEEPSEEK)),
    ("gpt-4o", {"stop_sequences": ()}, _responses(chain=False)),
    (
        "gpt-5-mini",
        {"thinking": THINKING, "temperature": None, "stop_sequences": (), "tool_choice": "any"},
        _responses(chain=False),
    ),
    (
        "o4-mini",
        {"temperature": None, "stop_sequences": (), "tool_choice": "lookup"},
        _responses(chain=True),
    ),
    ("gemini-2.5-flash", {}, _gemini),
    ("gemini-2.5-pro", {"thinking": THINKING}, _gemini),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("model", "settings", "render"), CASES, ids=[c[0] for c in CASES])
async def test_adapter_requests_pass_strict_validation(
    model: str, settings: dict[str, Any], render: Any, stream: bool
) -> None:
    emulator = Emulator(latency=Latency(0, 1e6))
    path, body = render(rich_request(model, **settings), stream)
    reply = await emulator.dispatch("POST", path, body)
    assert reply.status == 200, reply.body
