"""Agent-tool routing: seed 002's decision table, the fork gate, the trimmed schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkagent._orchestration.routing import GENERAL_PURPOSE, ForkGate, decide_route
from forkagent._orchestration.runtime import RuntimeOptions
from forkagent.agents import AgentDefinition
from forkagent.messages import AssistantMessage, JsonValue
from forkagent.requests import ModelRequest
from forkagent.testing import reply, tool_call, wire
from forkagent.tools.agent_tool import AgentTool

from ._support import Events, make_agent, results_by_id, tree_model

OPEN = ForkGate()
CLOSED = ForkGate(enabled=False)
FORK = "fork"

# fork, subagent_type, gate, implicit -> route ("fork" or the named agent that runs)
DECISION_TABLE = [
    # Seed 002: an explicit fork: true wins when forking is available...
    (True, "Explore", OPEN, False, FORK),
    (True, None, OPEN, False, FORK),
    # ...and is dropped silently when it is not.
    (True, "Explore", CLOSED, False, "Explore"),
    (True, None, CLOSED, False, GENERAL_PURPOSE),
    # Without fork: true, the old behaviour whatever the gate says.
    (False, "Explore", OPEN, False, "Explore"),
    (False, None, OPEN, False, GENERAL_PURPOSE),
    (False, "Explore", CLOSED, False, "Explore"),
    (False, None, CLOSED, False, GENERAL_PURPOSE),
    (None, "Explore", OPEN, False, "Explore"),
    (None, None, OPEN, False, GENERAL_PURPOSE),
    (None, "Explore", CLOSED, False, "Explore"),
    (None, None, CLOSED, False, GENERAL_PURPOSE),
    # The implicit mode of seeds 000/001: an omitted subagent_type forks (gate permitting).
    (True, "Explore", OPEN, True, FORK),
    (True, None, OPEN, True, FORK),
    (True, "Explore", CLOSED, True, "Explore"),
    (True, None, CLOSED, True, GENERAL_PURPOSE),
    (False, "Explore", OPEN, True, "Explore"),
    (False, None, OPEN, True, GENERAL_PURPOSE),  # an explicit false is respected
    (False, "Explore", CLOSED, True, "Explore"),
    (False, None, CLOSED, True, GENERAL_PURPOSE),
    (None, "Explore", OPEN, True, "Explore"),
    (None, None, OPEN, True, FORK),
    (None, "Explore", CLOSED, True, "Explore"),
    (None, None, CLOSED, True, GENERAL_PURPOSE),
]


@pytest.mark.parametrize(("fork", "subagent_type", "gate", "implicit", "expected"), DECISION_TABLE)
def test_decision_table(
    fork: bool | None, subagent_type: str | None, gate: ForkGate, implicit: bool, expected: str
) -> None:
    route = decide_route(fork=fork, subagent_type=subagent_type, gate=gate, implicit=implicit)
    if expected == FORK:
        assert (route.kind, route.agent_type) == ("fork", None)
    else:
        assert (route.kind, route.agent_type) == ("named", expected)


def test_notes_tell_the_model_when_its_request_was_rerouted() -> None:
    ignored = decide_route(fork=True, subagent_type="Explore", gate=OPEN)
    assert ignored.note is not None
    assert "Explore" in ignored.note
    assert "ignored" in ignored.note
    unavailable = decide_route(fork=True, subagent_type=None, gate=CLOSED)
    assert unavailable.note == "forking is not available in this session; ran as general-purpose"
    named = decide_route(fork=True, subagent_type="Explore", gate=CLOSED)
    assert named.note == "forking is not available in this session; ran as Explore"
    assert decide_route(fork=False, subagent_type=None, gate=CLOSED).note is None
    assert decide_route(fork=True, subagent_type=None, gate=OPEN).note is None
    assert decide_route(fork=None, subagent_type="Plan", gate=OPEN).note is None


@pytest.mark.parametrize(
    ("enabled", "coordinator", "interactive", "is_open"),
    [
        (True, False, True, True),
        (False, False, True, False),
        (True, True, True, False),
        (True, False, False, False),
        (False, True, False, False),
    ],
)
def test_the_gate(enabled: bool, coordinator: bool, interactive: bool, is_open: bool) -> None:
    assert ForkGate(enabled, coordinator, interactive).open is is_open


def _agent_spec(request: ModelRequest) -> dict[str, JsonValue]:
    [spec] = [t for t in request.tools if t.name == "Agent"]
    return spec.input_schema


@pytest.mark.parametrize(
    ("options", "has_fork"),
    [
        ({}, True),
        ({"forking": False}, False),
        ({"coordinator": True}, False),
        ({"interactive": False}, False),
    ],
)
async def test_the_fork_field_exists_only_where_forking_is_available(
    tmp_path: Path, options: dict[str, bool], has_fork: bool
) -> None:
    model = tree_model(["hello"])
    await make_agent(model, tmp_path, subagents=True, **options).run("hi")
    schema = _agent_spec(model.requests[0])
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert ("fork" in properties) is has_fork
    for name in (
        "prompt",
        "description",
        "subagent_type",
        "run_in_background",
        "name",
        "model",
        "isolation",
    ):
        assert name in properties
    description = next(t.description for t in model.requests[0].tools if t.name == "Agent")
    assert ("fork: true" in description) is has_fork


def test_agent_tool_schema_trimming_is_fixed_at_construction() -> None:
    with_fork = AgentTool(fork_available=True)
    without = AgentTool(fork_available=False)
    assert "fork" in wire(with_fork.input_schema)["properties"]
    assert "fork" not in wire(without.input_schema)["properties"]
    assert with_fork.input_schema["required"] == ["prompt"]
    assert with_fork.spec() == AgentTool(fork_available=True).spec()  # same bytes every time


async def test_fork_true_forks_and_ignores_subagent_type(tmp_path: Path) -> None:
    events = Events()
    call = tool_call("Agent", id="a1", prompt="check x", fork=True, subagent_type="Explore")
    model = tree_model([reply(call)])
    result = await make_agent(model, tmp_path, subagents=True, listeners=[events]).run("go")
    [started] = [e for e in events.started if e.parent_id is not None]
    assert started.kind == "fork"
    text = results_by_id(result.messages)["a1"].text
    assert "Scope: fork done." in text
    assert "ignored" in text  # the model learns its subagent_type was not used


@pytest.mark.parametrize(
    "options", [{"forking": False}, {"coordinator": True}, {"interactive": False}]
)
async def test_fork_true_with_the_gate_closed_runs_a_named_agent(
    tmp_path: Path, options: dict[str, bool]
) -> None:
    events = Events()
    model = tree_model([reply(tool_call("Agent", id="a1", prompt="check x", fork=True))])
    result = await make_agent(model, tmp_path, subagents=True, listeners=[events], **options).run(
        "go"
    )
    [started] = [e for e in events.started if e.parent_id is not None]
    assert started.kind == "named"
    text = results_by_id(result.messages)["a1"].text
    assert "named done" in text
    assert "[forking is not available in this session; ran as general-purpose" in text
    named_request = next(r for r in model.requests if "started by another agent" in r.system_text)
    assert named_request.messages[0].text == "check x"


async def test_implicit_mode_forks_without_subagent_type(tmp_path: Path) -> None:
    events = Events()
    model = tree_model([reply(tool_call("Agent", id="a1", prompt="check x"))])
    await make_agent(model, tmp_path, subagents=True, implicit_fork=True, listeners=[events]).run(
        "go"
    )
    assert [e.kind for e in events.started if e.parent_id is not None] == ["fork"]


async def test_default_mode_runs_general_purpose_without_subagent_type(tmp_path: Path) -> None:
    events = Events()
    model = tree_model([reply(tool_call("Agent", id="a1", prompt="check x"))])
    await make_agent(model, tmp_path, subagents=True, listeners=[events]).run("go")
    [started] = [e for e in events.started if e.parent_id is not None]
    assert started.kind == "named"
    assert started.label == GENERAL_PURPOSE


async def test_a_named_agent_from_code_runs_with_its_own_prompt(tmp_path: Path) -> None:
    reviewer = AgentDefinition(
        name="reviewer", description="Reviews code.", system_prompt="You review code strictly."
    )
    model = tree_model(
        [reply(tool_call("Agent", id="a1", prompt="review x.py", subagent_type="reviewer"))],
        named=lambda r: f"reviewed under: {r.system_text.splitlines()[0]}",
    )
    result = await make_agent(model, tmp_path, subagents=True, agents=[reviewer]).run("go")
    assert "reviewed under: You review code strictly." in results_by_id(result.messages)["a1"].text
    listing = next(t.description for t in model.requests[0].tools if t.name == "Agent")
    assert "- reviewer: Reviews code." in listing


async def test_an_unknown_subagent_type_is_an_error_listing_what_exists(tmp_path: Path) -> None:
    events = Events()
    reviewer = AgentDefinition(name="reviewer", description="Reviews.", system_prompt="Review.")
    model = tree_model(
        [
            reply(tool_call("Agent", id="a1", prompt="x", subagent_type="reviewr")),
            reply(tool_call("Agent", id="a2", prompt="x", subagent_type="reviewer")),
        ]
    )
    result = await make_agent(
        model, tmp_path, subagents=True, agents=[reviewer], listeners=[events]
    ).run("go")
    error = results_by_id(result.messages)["a1"]
    assert error.is_error
    assert "'reviewr'" in error.text
    for name in ("general-purpose", "Explore", "Plan", "reviewer"):
        assert name in error.text
    # Nothing was started for the bad call; the corrected call works.
    assert [e.label for e in events.started if e.parent_id is not None] == ["reviewer"]
    assert not results_by_id(result.messages)["a2"].is_error
    assert result.status == "completed"
    assert isinstance(result.messages[-1], AssistantMessage)


@pytest.mark.parametrize(("policy", "kind"), [("always", "fork"), ("never", "named")])
async def test_the_fork_policy_decides_fork_or_fresh(
    tmp_path: Path, policy: str, kind: str
) -> None:
    events = Events()
    model = tree_model([reply(tool_call("Agent", id="a1", prompt="check x", fork=True))])
    options = RuntimeOptions(fork_policy=policy)  # type: ignore[arg-type]
    result = await make_agent(
        model, tmp_path, subagents=True, listeners=[events], options=options
    ).run("go")
    [started] = [e for e in events.started if e.parent_id is not None]
    assert started.kind == kind
    text = results_by_id(result.messages)["a1"].text
    # Neither policy needs the estimate, so none is computed or shown.
    assert "fork ~" not in text
    if kind == "named":
        assert "fork policy 'never' chose a fresh agent" in text
