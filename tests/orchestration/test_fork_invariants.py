"""The one invariant, proven on random histories, plus a golden fingerprint.

For every fork child, what the provider hashes for its prompt cache (tools,
system, messages up to the per-child directive) is identical to its
siblings' and to the parent's last request extended by the parent's last
assistant message: in the neutral request and in every adapter's wire body.

The parents here are real: a session's loop sends the random history, the
model answers with the random last assistant message, and the children are
started the way users start them (the Agent tool mid-dispatch, or
``session.fork`` after the turn). The requests compared are the ones the
recording model actually received.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forkagent._orchestration.fork import FORK_RULES, directive_text, is_fork_history
from forkagent._orchestration.loop import run_loop
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
from forkagent.models.base import HistoryStyle, ModelProfile
from forkagent.requests import (
    ModelRequest,
    ModelSettings,
    ThinkingConfig,
    canonical_json,
    first_difference,
    prefix_fingerprints,
    request_blocks,
)
from forkagent.testing import FunctionModel
from forkagent.tools import tool

from ._support import make_agent

Ending = Literal["tool_calls", "no_tool_calls", "trailing_user"]
Body = dict[str, Any]

# -- random histories ---------------------------------------------------------------------------

texts = st.text(min_size=1, max_size=30)
images = st.builds(
    ImageBlock,
    media_type=st.sampled_from(["image/png", "image/jpeg"]),
    data=st.text(alphabet="ABCDEFGHabcdefgh0123456789+/", min_size=4, max_size=16),
) | st.builds(ImageBlock, url=st.just("https://example.com/cat.png"))
signed_thinking = st.one_of(
    st.builds(ThinkingBlock, thinking=texts, signature=texts),
    st.builds(ThinkingBlock, thinking=st.just(""), signature=texts, redacted=st.just(True)),
    st.builds(ThinkingBlock, thinking=st.just(""), signature=texts),  # a bare signature (Gemini)
    st.builds(ThinkingBlock, thinking=texts),  # unsigned, from another provider
)
json_leaf = st.none() | st.booleans() | st.integers(-1000, 1000) | texts
json_inputs = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.recursive(
        json_leaf,
        lambda v: st.lists(v, max_size=3) | st.dictionaries(texts, v, max_size=2),
        max_leaves=5,
    ),
    max_size=4,
)
OTHER_TOOLS = ["Read", "lookup", "Grep", "über_tool"]


@dataclass(frozen=True)
class Scenario:
    history: tuple[Message, ...]
    """What the parent's last request sends; ends with a user message."""
    last: AssistantMessage
    """The parent's last assistant message: the model's answer to ``history``."""
    trailing: UserMessage | None
    ending: Ending
    directives: tuple[str, ...]
    style: HistoryStyle
    thinking: bool


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    ids = iter(f"toolu_{i:03d}" for i in range(1000))
    thinking = draw(st.booleans())

    def assistant_turn(min_calls: int, max_calls: int) -> AssistantMessage:
        blocks: list[ContentBlock] = []
        if thinking and draw(st.booleans()):
            blocks.append(draw(signed_thinking))
        calls = draw(st.integers(min_calls, max_calls))
        if draw(st.booleans()) or calls == 0:
            blocks.append(TextBlock(text=draw(texts)))
        for _ in range(calls):
            blocks.append(
                ToolUseBlock(
                    id=next(ids), name=draw(st.sampled_from(OTHER_TOOLS)), input=draw(json_inputs)
                )
            )
        return AssistantMessage(content=tuple(blocks))

    def user_turn(answering: AssistantMessage | None) -> UserMessage:
        blocks: list[ContentBlock] = []
        for use in answering.tool_uses if answering else ():
            content = draw(st.lists(st.builds(TextBlock, text=texts) | images, max_size=2))
            blocks.append(
                ToolResultBlock(
                    tool_use_id=use.id, content=tuple(content), is_error=draw(st.booleans())
                )
            )
        own = draw(
            st.lists(
                st.builds(TextBlock, text=texts) | images, min_size=0 if blocks else 1, max_size=3
            )
        )
        return UserMessage(content=(*blocks, *own), origin="tool" if blocks and not own else "user")

    history: list[Message] = [user_turn(None)]
    for _ in range(draw(st.integers(0, 3))):
        answer = assistant_turn(0, 3)
        history += [answer, user_turn(answer)]

    ending: Ending = draw(st.sampled_from(["tool_calls", "no_tool_calls", "trailing_user"]))
    n = draw(st.integers(1, 4))
    directives = tuple(draw(st.lists(texts, min_size=n, max_size=n, unique=True)))
    if ending == "tool_calls":
        # The children are started by Agent calls in the last message, next to other
        # parallel calls and an incomplete one: every call is still pending at fork time.
        base = assistant_turn(0, 2)
        calls: list[ContentBlock] = []
        for d in directives:
            arguments = draw(
                st.permutations([("prompt", d), ("fork", True), ("description", "part")])
            )
            calls.append(ToolUseBlock(id=next(ids), name="Agent", input=dict(arguments)))
        if draw(st.booleans()):
            calls.append(
                ToolUseBlock(
                    id=next(ids), name="Grep", input={}, raw_arguments='{"pattern": "unterminat'
                )
            )
        order = draw(st.permutations(range(len(calls))))
        last = AssistantMessage(content=(*base.content, *(calls[i] for i in order)))
    else:
        last = assistant_turn(0, 0)
    trailing = user_turn(None) if ending == "trailing_user" else None
    style: HistoryStyle = draw(st.sampled_from(["tool_result", "alternating"]))
    return Scenario(tuple(history), last, trailing, ending, directives, style, thinking)


# -- running a real parent ----------------------------------------------------------------------


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"


@dataclass
class Outcome:
    parent_last: ModelRequest
    children: list[ModelRequest]
    """The first request of each child, in directive order."""


async def run_scenario(scenario: Scenario, cwd: Path) -> Outcome:
    def answer(request: ModelRequest) -> AssistantMessage | str:
        if is_fork_history(request.messages):
            return "Scope: done."
        if len(request.messages) == len(scenario.history):
            return scenario.last
        return "all children reported"

    model = FunctionModel(answer, name="claude-sonnet-4-5")
    model.profile = ModelProfile(provider="test", history_style=scenario.style)
    settings = ModelSettings(
        max_tokens=2048,
        thinking=ThinkingConfig(type="enabled", budget_tokens=1024) if scenario.thinking else None,
    )
    agent = make_agent(
        model,
        cwd,
        tools=[noop],
        subagents=True,
        settings=settings,
        registry=False,
        skip_transcript=True,
    )
    async with agent.session() as session:
        session.root.messages[:] = scenario.history
        await run_loop(session.root)
        if scenario.ending != "tool_calls":
            if scenario.trailing is not None:
                session.root.append(scenario.trailing)
            tasks = await session.fork(list(scenario.directives))
            assert all(t.status == "completed" for t in tasks)
        assert len(session._runtime.tasks) == len(scenario.directives)
    parent_last = model.requests[0]
    assert parent_last.messages == scenario.history
    children = [r for r in model.requests if is_fork_history(r.messages)]
    by_directive = {_directive_of(r): r for r in children}
    assert len(children) == len(by_directive) == len(scenario.directives)
    return Outcome(parent_last, [by_directive[d] for d in scenario.directives])


def _directive_of(request: ModelRequest) -> str:
    block = request.messages[-1].content[-1]
    assert isinstance(block, TextBlock)
    return block.text.removeprefix(directive_text(""))


def extended(request: ModelRequest, message: AssistantMessage) -> ModelRequest:
    return request.model_copy(update={"messages": (*request.messages, message)})


# -- wire formats -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wire:
    name: str
    render: Callable[[ModelRequest], Body]
    messages_key: str
    directive_part: Callable[[Body], list[Any]]
    """The list whose last element is the per-child directive."""


def _wires() -> tuple[list[Wire], list[str]]:
    """Every adapter's pure wire mapping that exists; the names of those that do not."""
    found: list[Wire] = []
    missing: list[str] = []
    try:
        from forkagent.models import anthropic
    except ImportError:  # pragma: no cover - adapters are optional while they are written
        missing.append("anthropic")
    else:
        found.append(
            Wire(
                "anthropic",
                anthropic.render_request,
                "messages",
                lambda b: b["messages"][-1]["content"],
            )
        )
    try:
        from forkagent.models import compat, openai
    except ImportError:  # pragma: no cover
        missing.append("openai")
    else:
        for dialect in (openai.OPENAI, compat.DASHSCOPE, compat.DEEPSEEK):
            found.append(
                Wire(
                    f"openai/{dialect.provider}",
                    functools.partial(openai.render_request, dialect=dialect),
                    "messages",
                    lambda b: b["messages"][-1]["content"],
                )
            )
    try:
        from forkagent.models import gemini
    except ImportError:  # pragma: no cover
        missing.append("gemini")
    else:
        found.append(
            Wire("gemini", gemini.render_request, "contents", lambda b: b["contents"][-1]["parts"])
        )
    return found, missing


WIRES, MISSING_WIRES = _wires()


def without_markers(value: Any) -> Any:
    """The body with every cache marker removed (markers are not content)."""
    if isinstance(value, dict):
        return {k: without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_markers(v) for v in value]
    return value


def without_directive(wire: Wire, body: Body) -> tuple[Body, Any]:
    copy = json.loads(json.dumps(body))
    parts = wire.directive_part(copy)
    assert isinstance(parts, list), f"{wire.name}: the last message should hold several parts"
    return copy, parts.pop()


def _bytes(value: Any) -> bytes:
    return canonical_json(value)


# -- the invariant ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("invariants")


PROPERTY = settings(
    max_examples=int(os.environ.get("FORKAGENT_INVARIANT_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _check_neutral(scenario: Scenario, outcome: Outcome) -> None:
    parent = extended(outcome.parent_last, scenario.last)
    parent_blocks = request_blocks(parent)
    first = outcome.children[0]
    for child, directive in zip(outcome.children, scenario.directives, strict=True):
        # Equal to the parent's last request extended by its last assistant message.
        assert first_difference(parent, child) is None
        assert request_blocks(child)[: len(parent_blocks)] == parent_blocks
        assert child.tools is outcome.parent_last.tools  # the very same tool array
        assert (child.model, child.system, child.settings) == (
            outcome.parent_last.model,
            outcome.parent_last.system,
            outcome.parent_last.settings,
        )
        # Identical to every sibling up to its directive, which comes last.
        assert request_blocks(child)[:-1] == request_blocks(first)[:-1]
        assert prefix_fingerprints(child)[:-1] == prefix_fingerprints(first)[:-1]
        assert child.messages[-1].content[-1] == TextBlock(text=directive_text(directive))
        # The breakpoint sits on the rules block, right before the directive.
        end = child.shared_prefix_end
        assert end is not None
        assert end == first.shared_prefix_end
        assert child.messages[end.message].content[end.block] == TextBlock(text=FORK_RULES)
        assert (end.message, end.block + 1) == (
            len(child.messages) - 1,
            len(child.messages[-1].content) - 1,
        )


def _check_wire(wire: Wire, scenario: Scenario, outcome: Outcome) -> None:
    parent = without_markers(wire.render(extended(outcome.parent_last, scenario.last)))
    stripped = []
    for child, directive in zip(outcome.children, scenario.directives, strict=True):
        body = wire.render(child)
        rest, part = without_directive(wire, body)
        assert part["text"] == directive_text(directive)
        stripped.append(_bytes(rest))
        # The parent's wire body, markers aside, is a prefix of the child's.
        plain = without_markers(body)
        assert {k: v for k, v in plain.items() if k != wire.messages_key} == {
            k: v for k, v in parent.items() if k != wire.messages_key
        }
        assert list(plain) == list(parent)  # same keys in the same order
        ours, theirs = plain[wire.messages_key], parent[wire.messages_key]
        assert [_bytes(m) for m in ours[: len(theirs)]] == [_bytes(m) for m in theirs]
        assert len(ours) > len(theirs)
    # Siblings: byte-identical bodies, cache markers included, once the directive is removed.
    assert len(set(stripped)) == 1, f"{wire.name}: siblings differ before their directives"


@PROPERTY
@given(scenario=scenarios())
def test_siblings_share_the_parent_prefix(workdir: Path, scenario: Scenario) -> None:
    """Neutral request and every adapter's wire body, for each scenario (one run, all checks)."""
    outcome = asyncio.run(run_scenario(scenario, workdir))
    _check_neutral(scenario, outcome)
    for wire in WIRES:
        try:
            _check_wire(wire, scenario, outcome)
        except AssertionError as exc:
            raise AssertionError(f"wire format {wire.name}: {exc}") from exc


@pytest.mark.parametrize("name", ["anthropic", "openai", "gemini"])
def test_every_adapter_is_checked(name: str) -> None:
    if name in MISSING_WIRES:
        pytest.skip(f"forkagent.models.{name} is missing: its wire format is not checked")
    assert any(w.name.split("/")[0] == name for w in WIRES)


def test_anthropic_breakpoint_sits_right_before_the_directive(workdir: Path) -> None:
    anthropic = pytest.importorskip("forkagent.models.anthropic")
    scenario = Scenario(
        history=(UserMessage(content=(TextBlock(text="start"),)),),
        last=AssistantMessage(content=(TextBlock(text="ok"),)),
        trailing=None,
        ending="no_tool_calls",
        directives=("one", "two"),
        style="tool_result",
        thinking=False,
    )
    outcome = asyncio.run(run_scenario(scenario, workdir))
    for child in outcome.children:
        last = anthropic.render_request(child)["messages"][-1]["content"]
        assert last[-2]["text"] == FORK_RULES
        assert "cache_control" in last[-2]


def test_gemini_explicit_cache_is_shared_by_siblings(workdir: Path) -> None:
    gemini = pytest.importorskip("forkagent.models.gemini")
    scenario = Scenario(
        history=(UserMessage(content=(TextBlock(text="start"),)),),
        last=AssistantMessage(
            content=(
                TextBlock(text="splitting"),
                ToolUseBlock(id="a1", name="Agent", input={"prompt": "one", "fork": True}),
                ToolUseBlock(id="a2", name="Agent", input={"prompt": "two", "fork": True}),
            )
        ),
        trailing=None,
        ending="tool_calls",
        directives=("one", "two"),
        style="alternating",
        thinking=False,
    )
    outcome = asyncio.run(run_scenario(scenario, workdir))
    counts = {gemini.shared_contents(c) for c in outcome.children}
    assert len(counts) == 1
    [count] = counts
    assert count > 0
    caches = {_bytes(gemini.render_cache(c, count)) for c in outcome.children}
    assert len(caches) == 1


# -- the golden fingerprint ---------------------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden" / "fork_prefix.json"
UPDATE_GOLDEN = "FORKAGENT_UPDATE_GOLDEN"


@tool
def lookup(ticket: str, verbose: bool = False) -> str:
    """Look a ticket up.

    Args:
        ticket: The ticket id.
        verbose: Include the comments.
    """
    return f"{ticket}: open"


async def _golden_children(cwd: Path) -> list[ModelRequest]:
    """A fixed scenario: a parent forks two children in the middle of a tool-calling turn."""
    holder: dict[str, Any] = {}

    @tool
    async def split(parts: list[str]) -> str:
        """Fork one child per part."""
        tasks = await holder["session"].fork(parts)
        return "\n".join(t.result.output for t in tasks if t.result)

    script: list[AssistantMessage | str] = [
        AssistantMessage(
            content=(
                ThinkingBlock(thinking="Look at the ticket first.", signature="c2lnbmF0dXJlLTE="),
                TextBlock(text="Reading the ticket."),
                ToolUseBlock(
                    id="toolu_01", name="lookup", input={"ticket": "FA-1", "verbose": True}
                ),
            )
        ),
        AssistantMessage(
            content=(
                TextBlock(text="Splitting the work in two. Ça marche 🚀"),
                ToolUseBlock(
                    id="toolu_02",
                    name="split",
                    input={"parts": ["migrate the schema", "rewrite the tests"]},
                ),
                ToolUseBlock(id="toolu_03", name="lookup", input={"ticket": "FA-2"}),
            )
        ),
        "Both parts are done.",
    ]

    def answer(request: ModelRequest) -> AssistantMessage | str:
        if is_fork_history(request.messages):
            return "Scope: done."
        return script[sum(isinstance(m, AssistantMessage) for m in request.messages)]

    model = FunctionModel(answer, name="claude-sonnet-4-5")
    agent = make_agent(
        model,
        cwd,
        tools=[lookup, split],
        settings=ModelSettings(max_tokens=8192, cache_key="golden-scenario", cache_ttl="1h"),
        registry=False,
        skip_transcript=True,
    )
    async with agent.session() as session:
        holder["session"] = session
        # The rendered prompt carries today's date and the cwd; the scenario needs fixed bytes.
        session.root.system = "You are the golden-scenario agent.\n\nWork carefully."
        result = await session.send(
            "Migrate FA-1 and rewrite its tests. Here is the diagram:",
        )
        assert result.output == "Both parts are done."
    return [r for r in model.requests if is_fork_history(r.messages)]


def _golden_record(children: Sequence[ModelRequest]) -> dict[str, Any]:
    first = children[0]
    shared = len(request_blocks(first)) - 1
    return {
        "scenario": "a parent forks two children in the middle of a tool-calling turn",
        "regenerate": f"{UPDATE_GOLDEN}=1 pytest tests/orchestration/{Path(__file__).name} -k golden",
        "blocks": [
            {"label": block.label, "fingerprint": fingerprint}
            for block, fingerprint in zip(
                request_blocks(first)[:shared], prefix_fingerprints(first)[:shared], strict=True
            )
        ],
        "prefix_sha256": hashlib.sha256(
            b"".join(block.data for block in request_blocks(first)[:shared])
        ).hexdigest(),
    }


def test_golden_fork_prefix(tmp_path: Path) -> None:
    """The cached prefix of a recorded fork scenario has not moved.

    This fails when any change (the fork builder's rules or placeholder text,
    message or tool serialization, settings, canonical JSON) changes the bytes
    a provider caches for the children: such a change costs every user a cold
    cache once. When the move is intended, regenerate the golden file with
    ``FORKAGENT_UPDATE_GOLDEN=1 pytest tests/orchestration/test_fork_invariants.py -k golden``
    and commit it together with the change.
    """
    children = asyncio.run(_golden_children(tmp_path))
    assert len(children) == 2
    record = _golden_record(children)
    # Both children share the whole recorded prefix.
    second = prefix_fingerprints(children[1])[: len(record["blocks"])]
    assert second == [b["fingerprint"] for b in record["blocks"]]
    if os.environ.get(UPDATE_GOLDEN) == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    expected = json.loads(GOLDEN.read_text())
    moved = next(
        (
            (i, want["label"])
            for i, (want, got) in enumerate(zip(expected["blocks"], record["blocks"], strict=False))
            if want != got
        ),
        None,
    )
    assert moved is None, (
        f"the cached fork prefix moved at block {moved[1]} (index {moved[0]}); "
        f"if this is intended, regenerate with {UPDATE_GOLDEN}=1"
    )
    assert len(record["blocks"]) == len(expected["blocks"]), "the shared prefix changed length"
    assert record == expected
