"""The turn loop's error paths: each failure is a result the model can recover from."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from forkagent.errors import ModelError, ToolError
from forkagent.events import ToolCalled, ToolFinished
from forkagent.messages import AssistantMessage, ToolUseBlock, UserMessage
from forkagent.requests import ModelRequest
from forkagent.testing import FunctionModel, ScriptedModel, reply, tool_call
from forkagent.tools import tool

from ._support import Events, assert_consistent, last_text, make_agent, results_by_id


@tool
def echo(text: str) -> str:
    """Repeat the text."""
    return f"echo: {text}"


@tool
def explode(reason: str) -> str:
    """Fail on purpose."""
    raise RuntimeError(reason)


@tool
def refuse() -> str:
    """Fail the way a tool reports an error to the model."""
    raise ToolError("nothing to do here; try echo")


async def test_a_plain_answer_ends_the_run(tmp_path: Path) -> None:
    model = ScriptedModel(["hello"])
    result = await make_agent(model, tmp_path).run("hi")
    assert (result.status, result.output) == ("completed", "hello")
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert result.usage.requests == 1
    model.assert_all_used()


async def test_tool_results_go_back_to_the_model(tmp_path: Path) -> None:
    model = ScriptedModel([reply(tool_call("echo", id="c1", text="x")), "done"])
    result = await make_agent(model, tmp_path, tools=[echo]).run("go")
    assert result.output == "done"
    assert results_by_id(result.messages)["c1"].text == "echo: x"
    assert last_text(model.requests[1]) == "echo: x"
    assert not results_by_id(result.messages)["c1"].is_error


async def test_unparsable_arguments_become_an_error_and_the_model_recovers(tmp_path: Path) -> None:
    broken = ToolUseBlock(id="c1", name="echo", input={}, raw_arguments='{"text": "hi"')
    model = ScriptedModel([reply(broken), reply(tool_call("echo", id="c2", text="hi")), "done"])
    result = await make_agent(model, tmp_path, tools=[echo]).run("go")
    error = results_by_id(result.messages)["c1"]
    assert error.is_error
    assert "not valid JSON" in error.text
    assert '{"text": "hi"' in error.text  # the model sees what it sent
    assert results_by_id(result.messages)["c2"].text == "echo: hi"
    assert (result.status, result.output) == ("completed", "done")
    assert_consistent(result.messages)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [({"txt": "hi"}, "text: Field required"), ({"text": ["not", "a", "string"]}, "text:")],
)
async def test_arguments_that_miss_the_schema_become_an_error(
    tmp_path: Path, args: dict[str, object], fragment: str
) -> None:
    bad = ToolUseBlock(id="c1", name="echo", input=args)
    model = ScriptedModel([reply(bad), reply(tool_call("echo", id="c2", text="ok")), "done"])
    result = await make_agent(model, tmp_path, tools=[echo]).run("go")
    error = results_by_id(result.messages)["c1"]
    assert error.is_error
    assert "invalid arguments" in error.text
    assert fragment in error.text
    assert results_by_id(result.messages)["c2"].text == "echo: ok"
    assert result.output == "done"


async def test_an_unknown_tool_names_the_available_ones(tmp_path: Path) -> None:
    model = ScriptedModel([reply(tool_call("ech0", id="c1", text="x")), "done"])
    result = await make_agent(model, tmp_path, tools=[echo, explode]).run("go")
    error = results_by_id(result.messages)["c1"]
    assert error.is_error
    assert "'ech0'" in error.text
    assert "echo" in error.text
    assert "explode" in error.text
    assert result.output == "done"


async def test_a_raising_tool_becomes_an_error_result(tmp_path: Path) -> None:
    events = Events()
    model = ScriptedModel(
        [
            reply(
                tool_call("explode", id="c1", reason="disk on fire"), tool_call("refuse", id="c2")
            ),
            "recovered",
        ]
    )
    result = await make_agent(model, tmp_path, tools=[explode, refuse], listeners=[events]).run(
        "go"
    )
    crashed, refused = results_by_id(result.messages)["c1"], results_by_id(result.messages)["c2"]
    assert crashed.is_error
    assert refused.is_error
    assert "explode" in crashed.text
    assert "RuntimeError" in crashed.text
    assert "disk on fire" in crashed.text
    assert refused.text == "nothing to do here; try echo"
    assert (result.status, result.output) == ("completed", "recovered")
    finished = {e.tool_use_id: e.is_error for e in events.of(ToolFinished)}
    assert finished == {"c1": True, "c2": True}


async def test_cancellation_mid_tool_is_prompt_and_leaves_a_consistent_history(
    tmp_path: Path,
) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        """Take forever."""
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    model = ScriptedModel(
        [reply("working", tool_call("echo", id="fast", text="a"), tool_call("slow", id="slow"))]
    )
    session = make_agent(model, tmp_path, tools=[echo, slow]).session()
    turn = asyncio.create_task(session.send("go"))
    await asyncio.wait_for(started.wait(), 5)
    turn.cancel()
    async with asyncio.timeout(5):  # prompt: the hour-long tool does not hold it up
        with pytest.raises(asyncio.CancelledError):
            await turn
    assert cancelled.is_set()
    messages = session.messages
    assert_consistent(messages)
    results = results_by_id(messages)
    assert results["fast"].text == "echo: a"  # finished work is kept
    assert results["slow"].is_error
    assert "Cancelled" in results["slow"].text

    # The conversation goes on from the consistent history.
    model.add("resumed")
    result = await session.send("again")
    assert result.output == "resumed"
    assert_consistent(model.requests[-1].messages)
    await session.aclose()


async def test_cancellation_during_the_model_request(tmp_path: Path) -> None:
    waiting = asyncio.Event()

    async def hang(request: ModelRequest) -> str:
        waiting.set()
        await asyncio.sleep(3600)
        return "never"

    session = make_agent(FunctionModel(hang), tmp_path).session()
    turn = asyncio.create_task(session.send("go"))
    await asyncio.wait_for(waiting.wait(), 5)
    turn.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await turn
    assert [m.role for m in session.messages] == ["user"]
    await session.aclose()


async def test_parallel_tool_calls_run_concurrently(tmp_path: Path) -> None:
    barrier = asyncio.Barrier(3)

    @tool
    async def meet(who: str) -> str:
        """Wait until all callers arrive: deadlocks if calls run one after another."""
        async with asyncio.timeout(5):
            await barrier.wait()
        return f"{who} met"

    calls = [tool_call("meet", id=f"m{i}", who=str(i)) for i in range(3)]
    model = ScriptedModel([reply(*calls), "all met"])
    result = await make_agent(model, tmp_path, tools=[meet]).run("go")
    results = results_by_id(result.messages)
    assert [results[f"m{i}"].text for i in range(3)] == ["0 met", "1 met", "2 met"]
    assert not any(r.is_error for r in results.values())


async def test_results_keep_call_order_whatever_finishes_first(tmp_path: Path) -> None:
    @tool
    async def wait(seconds: float) -> str:
        """Sleep."""
        await asyncio.sleep(seconds)
        return str(seconds)

    model = ScriptedModel(
        [reply(tool_call("wait", id="a", seconds=0.05), tool_call("wait", id="b", seconds=0)), "ok"]
    )
    result = await make_agent(model, tmp_path, tools=[wait]).run("go")
    results_message = result.messages[2]
    assert isinstance(results_message, UserMessage)
    assert [r.tool_use_id for r in results_message.tool_results] == ["a", "b"]
    assert results_message.origin == "tool"


async def test_events_report_each_call(tmp_path: Path) -> None:
    events = Events()
    model = ScriptedModel([reply(tool_call("echo", id="c1", text="x")), "done"])
    await make_agent(model, tmp_path, tools=[echo], listeners=[events]).run("go")
    called = events.of(ToolCalled)
    assert [(e.tool_use_id, e.name, e.args) for e in called] == [("c1", "echo", {"text": "x"})]


async def test_a_model_failure_surfaces_for_the_main_agent(tmp_path: Path) -> None:
    model = ScriptedModel([RuntimeError("provider is down")])
    with pytest.raises(RuntimeError, match="provider is down"):
        await make_agent(model, tmp_path).run("go")


async def test_history_objects_are_shared_not_copied(tmp_path: Path) -> None:
    model = ScriptedModel([reply(tool_call("echo", id="c1", text="x")), "done"])
    await make_agent(model, tmp_path, tools=[echo]).run("go")
    first, second = model.requests
    assert second.messages[0] is first.messages[0]  # appended, never re-rendered
    assert isinstance(second.messages[1], AssistantMessage)


def test_run_sync(tmp_path: Path) -> None:
    model = ScriptedModel([reply(tool_call("echo", id="c1", text="x")), "done"])
    result = make_agent(model, tmp_path, tools=[echo]).run_sync("go")
    assert (result.status, result.output) == ("completed", "done")
    model.assert_all_used()


async def test_a_hung_model_request_fails_with_a_clear_error(tmp_path: Path) -> None:
    """The per-request timeout is not the wall-time budget, and says what happened."""

    async def hang(request: ModelRequest) -> str:
        await asyncio.sleep(3600)
        return "never"

    agent = make_agent(FunctionModel(hang, name="slowpoke"), tmp_path, request_timeout=0.05)
    async with asyncio.timeout(5):
        with pytest.raises(ModelError, match=r"did not answer within 0\.05s"):
            await agent.run("go")
