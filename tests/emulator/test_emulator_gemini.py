"""Conformance: the Gemini rules of CACHING.md through google-genai over loopback HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from _emu_helpers import text
from google import genai
from google.genai import errors, types

from forkagent.emulator import Emulator, Reply, ToolCall, VirtualClock

FLASH, PRO = "gemini-2.5-flash", "gemini-2.5-pro"


def ask(
    client: genai.Client,
    contents: str | list[types.Content],
    *,
    model: str = FLASH,
    **config: object,
) -> types.GenerateContentResponse:
    return client.models.generate_content(
        model=model, contents=contents, config=types.GenerateContentConfig(**config)
    )


def cached(response: types.GenerateContentResponse) -> int:
    assert response.usage_metadata is not None
    return response.usage_metadata.cached_content_token_count or 0


def test_rule_gemini_implicit_caching(gemini: genai.Client) -> None:
    """Rule (Gemini): implicit caching; prompt_token_count includes cached_content_token_count."""
    prompt = text(1500) + " question"
    first = ask(gemini, prompt, system_instruction="be brief")
    second = ask(gemini, prompt, system_instruction="be brief")
    assert cached(first) == 0
    assert 1024 <= cached(second) <= 1500
    assert second.usage_metadata is not None
    assert second.usage_metadata.prompt_token_count == first.usage_metadata.prompt_token_count  # type: ignore[union-attr]
    assert second.text is not None
    assert second.text.startswith("Understood:")


def test_rule_gemini_minimum_by_model(gemini: genai.Client) -> None:
    """Rule (Gemini): the minimum depends on the model (Flash 1024, Pro 4096)."""
    prompt = text(2000)
    ask(gemini, prompt, model=PRO)
    assert cached(ask(gemini, prompt, model=PRO)) == 0
    ask(gemini, prompt, model=FLASH)
    assert cached(ask(gemini, prompt, model=FLASH)) > 1024


def test_rule_gemini_turns_must_alternate(gemini: genai.Client) -> None:
    """Rule (Gemini): consecutive same-role turns are an error."""
    turns = [
        types.Content(role="user", parts=[types.Part(text="a")]),
        types.Content(role="user", parts=[types.Part(text="b")]),
    ]
    with pytest.raises(errors.ClientError) as caught:
        ask(gemini, turns)
    assert caught.value.code == 400
    assert caught.value.status == "INVALID_ARGUMENT"


def test_rule_gemini_function_call_needs_a_function_response(gemini: genai.Client) -> None:
    """Rule (Gemini): a function call must be answered by a function response."""
    call = types.Part(function_call=types.FunctionCall(name="lookup", args={"t": "1"}))
    unanswered = [
        types.Content(role="user", parts=[types.Part(text="look it up")]),
        types.Content(role="model", parts=[call]),
        types.Content(role="user", parts=[types.Part(text="and?")]),
    ]
    with pytest.raises(errors.ClientError, match="function response"):
        ask(gemini, unanswered)
    answer = types.Part(function_response=types.FunctionResponse(name="lookup", response={"ok": 1}))
    answered = [*unanswered[:2], types.Content(role="user", parts=[answer])]
    assert ask(gemini, answered).text


def test_rule_gemini_explicit_cached_content(gemini: genai.Client, clock: VirtualClock) -> None:
    """Rule (Gemini): caches.create makes a named CachedContent used via cached_content; default TTL 1 h."""
    cache = gemini.caches.create(
        model=FLASH,
        config=types.CreateCachedContentConfig(contents=[text(1500)], system_instruction="sys"),
    )
    assert cache.name is not None
    reply = ask(gemini, "question", cached_content=cache.name)
    assert reply.usage_metadata is not None
    assert cache.usage_metadata is not None
    assert cached(reply) == cache.usage_metadata.total_token_count
    assert reply.usage_metadata.prompt_token_count > cached(reply)  # type: ignore[operator]
    clock.advance(3601)
    with pytest.raises(errors.ClientError):
        ask(gemini, "question", cached_content=cache.name)


@pytest.mark.parametrize(
    "again",
    [
        {"system_instruction": "again"},
        {"tools": [types.Tool(function_declarations=[types.FunctionDeclaration(name="f")])]},
    ],
)
def test_rule_gemini_cached_content_forbids_system_and_tools(
    gemini: genai.Client, again: dict[str, object]
) -> None:
    """Rule (Gemini): a request using cached_content must not set system_instruction/tools/tool_config (400)."""
    cache = gemini.caches.create(
        model=FLASH, config=types.CreateCachedContentConfig(contents=[text(1500)], ttl="600s")
    )
    with pytest.raises(errors.ClientError) as caught:
        gemini.models.generate_content(
            model=FLASH,
            contents="question",
            config=types.GenerateContentConfig(cached_content=cache.name, **again),
        )
    assert caught.value.code == 400


def test_gemini_cache_lifecycle(gemini: genai.Client) -> None:
    """caches.get / list / delete work, and a too small cache is refused."""
    cache = gemini.caches.create(
        model=FLASH, config=types.CreateCachedContentConfig(contents=[text(1100)])
    )
    assert cache.name is not None
    usage = gemini.caches.get(name=cache.name).usage_metadata
    assert usage is not None
    assert (usage.total_token_count or 0) > 1100
    assert [c.name for c in gemini.caches.list()] == [cache.name]
    gemini.caches.delete(name=cache.name)
    with pytest.raises(errors.ClientError):
        gemini.caches.get(name=cache.name)
    with pytest.raises(errors.ClientError, match="too small"):
        gemini.caches.create(model=FLASH, config=types.CreateCachedContentConfig(contents=["tiny"]))


def test_gemini_streaming_and_function_calls(gemini: genai.Client, emu: Emulator) -> None:
    """Streamed chunks carry the text; the last one the usage; scripted calls become functionCall parts."""
    prompt = text(1500)
    ask(gemini, prompt)
    chunks = list(gemini.models.generate_content_stream(model=FLASH, contents=prompt))
    assert "".join(c.text or "" for c in chunks).startswith("Understood:")
    assert cached(chunks[-1]) > 1024
    emu.script(Reply(tool_calls=(ToolCall("lookup", {"t": "1"}),)))
    reply = ask(gemini, "call it")
    assert reply.function_calls is not None
    assert (reply.function_calls[0].name, reply.function_calls[0].args) == ("lookup", {"t": "1"})


def test_gemini_reads_the_snake_case_fields_the_sdk_sends(
    gemini: genai.Client, emu: Emulator
) -> None:
    """google-genai sends thinkingConfig as include_thoughts/thinking_budget: thoughts come back."""
    emu.script(Reply(text="The answer.", thinking="Working it out first."))
    thinking = types.ThinkingConfig(include_thoughts=True, thinking_budget=-1)
    reply = ask(gemini, "think, then answer", thinking_config=thinking)
    assert reply.candidates is not None
    assert reply.candidates[0].content is not None
    parts = reply.candidates[0].content.parts or []
    assert [(p.thought, p.text) for p in parts] == [
        (True, "Working it out first."),
        (None, "The answer."),
    ]
    assert reply.usage_metadata is not None
    assert reply.usage_metadata.thoughts_token_count


def _sdk_body(prompt: str) -> dict[str, Any]:
    """A generateContent body exactly as google-genai 3.x puts it on the wire (captured over
    loopback): top-level fields in camelCase, some nested ones in snake_case."""
    return {
        "contents": [
            {
                "parts": [
                    {"text": prompt},
                    {"inlineData": {"data": "YWJj", "mime_type": "image/png"}},
                ],
                "role": "user",
            }
        ],
        "systemInstruction": {"parts": [{"text": "be brief"}], "role": "user"},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "description": "Look a ticket up.",
                        "name": "lookup",
                        "parameters_json_schema": {
                            "type": "object",
                            "properties": {"ticket_key": {"type": "string"}},
                        },
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {
            "maxOutputTokens": 3,
            "thinkingConfig": {"include_thoughts": True, "thinking_budget": -1},
        },
    }


def _camel_body(prompt: str) -> dict[str, Any]:
    """The same request with every field under its JSON (camelCase) name, as REST clients send it."""
    body = _sdk_body(prompt)
    body["contents"][0]["parts"][1] = {"inlineData": {"data": "YWJj", "mimeType": "image/png"}}
    declaration = body["tools"][0]["functionDeclarations"][0]
    declaration["parametersJsonSchema"] = declaration.pop("parameters_json_schema")
    body["generationConfig"]["thinkingConfig"] = {"includeThoughts": True, "thinkingBudget": -1}
    return body


async def test_gemini_takes_either_spelling_of_a_field_as_the_same_request(emu: Emulator) -> None:
    """Rule (Gemini, proto3 JSON): a field is read under its camelCase or its snake_case name;
    the SDK's body and its camelCase twin are one prompt, so the second reads the first's cache."""
    path = f"/v1beta/models/{FLASH}:generateContent"
    prompt = text(1500)
    emu.script(Reply(text="A long answer that does not fit.", thinking="Some thought."))
    first = (await emu.dispatch("POST", path, _sdk_body(prompt))).body
    second = (await emu.dispatch("POST", path, _camel_body(prompt))).body
    assert first["candidates"][0]["content"]["parts"][0]["thought"] is True
    assert first["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert first["usageMetadata"]["promptTokenCount"] == second["usageMetadata"]["promptTokenCount"]
    assert "cachedContentTokenCount" not in first["usageMetadata"]
    assert second["usageMetadata"]["cachedContentTokenCount"] > 1024
