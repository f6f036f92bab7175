"""The public test models: FunctionModel and ScriptedModel."""

from __future__ import annotations

import pytest

from forkagent.errors import ScriptExhaustedError
from forkagent.messages import AssistantMessage, TextBlock, user
from forkagent.models import ModelResponse, ResponseComplete, resolve_model
from forkagent.requests import ModelRequest
from forkagent.testing import FunctionModel, ScriptedModel, reply, tool_call
from forkagent.usage import Usage


def _req(text: str) -> ModelRequest:
    return ModelRequest(model="x", messages=(user(text),))


async def test_function_model_replies_from_the_request_and_records_it() -> None:
    model = FunctionModel(lambda r: f"echo {r.messages[-1].text}")
    first, second = _req("a"), _req("b")
    assert (await model.request(first)).message.text == "echo a"
    assert (await model.request(second)).message.text == "echo b"
    assert model.requests == [first, second]
    assert model.requests[0] is first


async def test_function_model_accepts_async_functions_and_full_responses() -> None:
    async def write(request: ModelRequest) -> ModelResponse:
        return ModelResponse(
            message=reply("hi"), stop_reason="max_tokens", usage=Usage(input_tokens=7)
        )

    response = await FunctionModel(write).request(_req("x"))
    assert response.stop_reason == "max_tokens"
    assert response.usage == Usage(input_tokens=7)


async def test_replies_get_a_stop_reason_and_usage() -> None:
    model = FunctionModel(lambda r: reply("calling", tool_call("Read", file_path="a")))
    response = await model.request(_req("x"))
    assert response.stop_reason == "tool_use"
    assert response.usage.input_tokens > 0
    assert response.usage.requests == 1
    assert (await FunctionModel(lambda r: "done").request(_req("x"))).stop_reason == "end_turn"


async def test_scripted_model_replies_in_order_and_records() -> None:
    model = ScriptedModel(["one", reply("two"), lambda r: f"three:{r.messages[-1].text}"])
    texts = [(await model.request(_req(str(i)))).message.text for i in range(3)]
    assert texts == ["one", "two", "three:2"]
    assert [r.messages[-1].text for r in model.requests] == ["0", "1", "2"]
    assert model.remaining == 0
    model.assert_all_used()


async def test_scripted_model_fails_loudly_when_it_runs_out() -> None:
    model = ScriptedModel(["only"])
    await model.request(_req("a"))
    with pytest.raises(
        ScriptExhaustedError, match=r"no reply left for request 2 \(it was scripted with 1\)"
    ):
        await model.request(_req("b"))
    assert len(model.requests) == 2  # the failing request is still recorded


def test_assert_all_used_fails_when_replies_remain() -> None:
    model = ScriptedModel(["a", "b"])
    with pytest.raises(AssertionError, match="2 of 2 scripted replies were not used"):
        model.assert_all_used()


async def test_add_extends_the_script() -> None:
    model = ScriptedModel([])
    model.add("late")
    assert (await model.request(_req("a"))).message.text == "late"
    model.assert_all_used()


async def test_exceptions_in_the_script_are_raised() -> None:
    model = ScriptedModel([RuntimeError("provider down"), "recovered"])
    with pytest.raises(RuntimeError, match="provider down"):
        await model.request(_req("a"))
    assert (await model.request(_req("b"))).message.text == "recovered"


async def test_streaming_ends_with_the_complete_response() -> None:
    model = ScriptedModel(["streamed"])
    events = [e async for e in model.stream(_req("a"))]
    assert isinstance(events[-1], ResponseComplete)
    assert events[-1].response.message == AssistantMessage(content=(TextBlock(text="streamed"),))
    assert len(model.requests) == 1


def test_reply_and_tool_call_helpers() -> None:
    call = tool_call("Grep", pattern="x", glob="*.py")
    assert call.name == "Grep"
    assert call.input == {"pattern": "x", "glob": "*.py"}
    assert call.id != tool_call("Grep").id  # unique ids
    assert tool_call("Read", id="fixed").id == "fixed"
    message = reply("text", call)
    assert message.text == "text"
    assert message.tool_uses == (call,)


async def test_test_provider_resolves_to_an_echo_model() -> None:
    model = resolve_model("test:echo")
    assert model.spec == "test:echo"
    assert (await model.request(_req("ping"))).message.text == "[echo] ping"
