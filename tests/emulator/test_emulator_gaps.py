"""Counts and small gaps, through the official SDKs over HTTP: Anthropic's tool-use system
prompt and request framing, models.retrieve/list on each wire, OpenAI's ``n``, stop
sequences."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from _emu_helpers import OPUS_41, TOOL, http
from google import genai
from google.genai import types

from forkagent.emulator import Emulator, RunningServer, tokens
from forkagent.emulator.profiles import ANTHROPIC_FRAMING_TOKENS
from forkagent.emulator.wire import dumps

HELLO: list[Any] = [{"role": "user", "content": "hello"}]
TOOLS: Any = [TOOL]


def _count(claude: anthropic.Anthropic, model: str, **params: Any) -> int:
    return claude.messages.count_tokens(model=model, messages=HELLO, **params).input_tokens


@pytest.mark.parametrize(
    ("model", "free", "forced"),
    [("claude-sonnet-4-6", 346, 313), ("claude-3-5-haiku-20241022", 264, 340)],
)
def test_count_tokens_adds_the_tool_use_system_prompt(
    claude: anthropic.Anthropic, model: str, free: int, forced: int
) -> None:
    bare = _count(claude, model)
    assert bare == tokens.count("hello") + ANTHROPIC_FRAMING_TOKENS
    tool = tokens.count(dumps(TOOL))
    assert _count(claude, model, tools=TOOLS) == bare + tool + free
    assert _count(claude, model, tools=TOOLS, tool_choice={"type": "any"}) == bare + tool + forced


def test_billed_input_matches_count_tokens(claude: anthropic.Anthropic) -> None:
    counted = _count(claude, OPUS_41, tools=TOOLS)
    usage = claude.messages.create(model=OPUS_41, max_tokens=64, messages=HELLO, tools=TOOLS).usage
    billed = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    assert billed == counted


def test_the_tool_use_system_prompt_counts_toward_the_cache_minimum(
    claude: anthropic.Anthropic,
) -> None:
    """A tool of 800 tokens alone is below Opus 4.1's 1024; with the 346-token prompt it is not."""
    big = {**TOOL, "description": tokens.filler(790), "cache_control": {"type": "ephemeral"}}
    tools: Any = [big]
    first = claude.messages.create(model=OPUS_41, max_tokens=64, messages=HELLO, tools=tools)
    second = claude.messages.create(model=OPUS_41, max_tokens=64, messages=HELLO, tools=tools)
    written = first.usage.cache_creation_input_tokens or 0
    assert (
        written == tokens.count(dumps({k: v for k, v in big.items() if k != "cache_control"})) + 346
    )
    assert second.usage.cache_read_input_tokens == written


def test_models_retrieve_and_list_in_each_wire_format(
    server: RunningServer, claude: anthropic.Anthropic, oai: openai.OpenAI, emu: Emulator
) -> None:
    assert claude.models.retrieve("claude-sonnet-4-6").type == "model"
    assert "claude-sonnet-4-6" in [m.id for m in claude.models.list()]
    with pytest.raises(anthropic.NotFoundError):
        claude.models.retrieve("invalid-model-name")
    assert oai.models.retrieve("gpt-4.1").object == "model"
    assert "gpt-4.1" in [m.id for m in oai.models.list()]
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("invalid-model-name")
    emu.register_model("house-model")
    assert "house-model" in [m.id for m in oai.models.list()]
    assert oai.models.retrieve("house-model").id == "house-model"


def test_gemini_models_get_and_list_on_v1beta_and_v1(
    server: RunningServer, gemini: genai.Client
) -> None:
    model = gemini.models.get(model="gemini-2.5-flash")
    assert model.name == "models/gemini-2.5-flash"
    assert "generateContent" in (model.supported_actions or [])
    assert "models/gemini-2.5-pro" in [m.name for m in gemini.models.list()]
    v1 = genai.Client(
        api_key="test-key", http_options=types.HttpOptions(base_url=server.url, api_version="v1")
    )
    with v1:
        assert "models/gemini-2.5-pro" in [m.name for m in v1.models.list()]
    # one path, three wires: the caller's headers say whose list it is
    _, _, google = http(server, "GET", "/v1/models", headers={"x-goog-api-key": "k"})
    _, _, claude = http(server, "GET", "/v1/models", headers={"anthropic-version": "2023-06-01"})
    _, _, gpt = http(server, "GET", "/v1/models", headers={"authorization": "Bearer k"})
    assert set(google) == {"models"}
    assert claude["data"][0]["type"] == "model"
    assert gpt["object"] == "list"


def test_openai_n_returns_n_choices_billed_n_times(oai: openai.OpenAI) -> None:
    one = oai.chat.completions.create(model="gpt-4.1", messages=HELLO)
    three = oai.chat.completions.create(model="gpt-4.1", messages=HELLO, n=3)
    assert [c.index for c in three.choices] == [0, 1, 2]
    assert {c.message.content for c in three.choices} == {one.choices[0].message.content}
    assert one.usage is not None
    assert three.usage is not None
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    streamed: dict[int, str] = {}
    for chunk in oai.chat.completions.create(model="gpt-4.1", messages=HELLO, n=2, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + (choice.delta.content or "")
    assert streamed == {0: one.choices[0].message.content, 1: one.choices[0].message.content}


def test_stop_sequences_end_the_text_on_each_wire(
    claude: anthropic.Anthropic, oai: openai.OpenAI, gemini: genai.Client, emu: Emulator
) -> None:
    emu.script("alpha STOP beta", "alpha STOP beta", "alpha STOP beta", "alpha STOP beta")
    message = claude.messages.create(
        model=OPUS_41, max_tokens=64, messages=HELLO, stop_sequences=["STOP", "beta"]
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "alpha "
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "STOP")
    with claude.messages.stream(
        model=OPUS_41, max_tokens=64, messages=HELLO, stop_sequences=["STOP"]
    ) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "STOP")
    completion = oai.chat.completions.create(model="gpt-4.1", messages=HELLO, stop="STOP")
    assert completion.choices[0].message.content == "alpha "
    assert completion.choices[0].finish_reason == "stop"
    reply = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents="hello",
        config=types.GenerateContentConfig(stop_sequences=["STOP"]),
    )
    assert reply.text == "alpha "


def test_gemini_candidate_count_returns_that_many_candidates(gemini: genai.Client) -> None:
    def ask(count: int | None) -> types.GenerateContentResponse:
        config = types.GenerateContentConfig(candidate_count=count)
        return gemini.models.generate_content(
            model="gemini-2.5-flash", contents="hi", config=config
        )

    one, three = ask(None), ask(3)
    assert [c.index for c in three.candidates or []] == [0, 1, 2]
    assert one.usage_metadata is not None
    assert three.usage_metadata is not None
    single = one.usage_metadata.candidates_token_count or 0
    assert three.usage_metadata.candidates_token_count == 3 * single
