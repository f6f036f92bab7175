"""``output_type``: a validated object back, a retry when it does not validate, forks included."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from forkagent import Agent, ForkParams, OutputError
from forkagent.messages import JsonValue, ToolResultBlock, ToolUseBlock
from forkagent.requests import ModelRequest
from forkagent.testing import FunctionModel, ScriptedModel, reply, tool_call


class Review(BaseModel):
    verdict: str
    score: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Summary(TypedDict):
    title: str
    lines: int


async def test_the_answer_comes_back_as_the_output_type() -> None:
    model = ScriptedModel(
        [reply("Here it is.", tool_call("final_result", verdict="ship it", score=9))]
    )
    agent = Agent(model=model, output_type=Review, subagents=False, builtin_tools=False)
    result = await agent.run("Review the change")
    assert result.output == Review(verdict="ship it", score=9)
    assert result.status == "completed"
    assert result.text == "Here it is."
    [tool] = model.requests[0].tools
    assert tool.name == "final_result"
    assert tool.input_schema["required"] == ["verdict", "score"]
    model.assert_all_used()


async def test_an_invalid_answer_goes_back_with_the_errors_and_is_retried() -> None:
    model = ScriptedModel(
        [
            reply(tool_call("final_result", verdict="ship it", score="ten")),
            reply(tool_call("final_result", verdict="ship it", score=10)),
        ]
    )
    agent = Agent(model=model, output_type=Review, subagents=False, builtin_tools=False)
    result = await agent.run("Review the change")
    assert result.output.score == 10
    feedback = model.requests[1].messages[-1].content[0]
    assert isinstance(feedback, ToolResultBlock)
    assert feedback.is_error
    assert "score" in feedback.text
    assert "final_result again" in feedback.text


async def test_the_run_fails_once_the_retries_are_spent() -> None:
    bad = reply(tool_call("final_result", verdict="x", score="many"))
    model = ScriptedModel([bad, bad, bad])
    agent = Agent(
        model=model, output_type=Review, output_retries=2, subagents=False, builtin_tools=False
    )
    with pytest.raises(OutputError, match="without a valid Review") as raised:
        await agent.run("Review")
    assert raised.value.status == "failed"
    model.assert_all_used()


async def test_ending_the_turn_without_the_tool_is_a_retry_too() -> None:
    model = ScriptedModel(
        [reply("I think it is fine."), reply(tool_call("final_result", verdict="ok", score=7))]
    )
    agent = Agent(model=model, output_type=Review, subagents=False, builtin_tools=False)
    result = await agent.run("Review")
    assert result.output.verdict == "ok"
    assert "without calling final_result" in model.requests[1].messages[-1].text


@pytest.mark.parametrize(
    ("output_type", "arguments", "expected"),
    [
        (Point, {"x": 1, "y": 2}, Point(1, 2)),
        (Summary, {"title": "t", "lines": 3}, {"title": "t", "lines": 3}),
        (list[int], {"result": [1, 2, 3]}, [1, 2, 3]),
    ],
    ids=["dataclass", "typeddict", "non-object, wrapped"],
)
async def test_dataclasses_typeddicts_and_plain_types_work(
    output_type: type[object], arguments: dict[str, JsonValue], expected: object
) -> None:
    model = ScriptedModel([reply(ToolUseBlock(id="final", name="final_result", input=arguments))])
    agent = Agent(model=model, output_type=output_type, subagents=False, builtin_tools=False)
    assert (await agent.run("go")).output == expected


def test_a_type_pydantic_cannot_validate_is_refused_when_the_agent_is_made() -> None:
    from forkagent import ConfigurationError

    class Opaque:
        pass

    with pytest.raises(ConfigurationError, match="output_type"):
        Agent(model="test:echo", output_type=Opaque)


async def test_a_fork_gets_its_schema_in_the_directive_and_keeps_the_parent_tool_array() -> None:
    """The fork's requests carry the parent's exact tool array; the schema goes after the prefix."""

    def answer(request: ModelRequest) -> str:
        if "JSON schema" in request.messages[-1].text:
            return json.dumps({"verdict": "fine", "score": 8})
        return "Read everything."

    model = FunctionModel(answer)
    agent = Agent(model=model, subagents=True, builtin_tools=False)
    async with agent.session() as session:
        await session.send("Read the code")
        parent_request = model.requests[-1]
        [child] = await session.fork([ForkParams("Review it", output_type=Review)])
        result = await child.wait()
    assert result.value == Review(verdict="fine", score=8)
    assert result.status == "completed"
    fork_request = model.requests[-1]
    assert fork_request.tools == parent_request.tools
    assert fork_request.system == parent_request.system
    assert list(fork_request.messages[: len(parent_request.messages)]) == list(
        parent_request.messages
    )


async def test_a_fork_whose_json_does_not_validate_is_asked_again() -> None:
    replies = iter(['{"verdict": "fine"}', '```json\n{"verdict": "fine", "score": 5}\n```'])

    def answer(request: ModelRequest) -> str:
        if request.messages[-1].text == "Read the code":
            return "Read."
        return next(replies)

    model = FunctionModel(answer)
    async with Agent(model=model, builtin_tools=False).session() as session:
        await session.send("Read the code")
        [child] = await session.fork([ForkParams("Review it", output_type=Review)])
        result = await child.wait()
    assert result.value == Review(verdict="fine", score=5)
    assert "score: Field required" in model.requests[-1].messages[-1].text
