"""The fork builder: a child's history for each way a parent's history can end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from forkagent._orchestration.fork import (
    FORK_ACK,
    FORK_PLACEHOLDER,
    FORK_RULES,
    FORK_TAG,
    ForkedHistory,
    build_forked_messages,
    cache_key_hash,
    directive_text,
    fork_base,
    fork_messages,
    is_fork_history,
)
from forkagent.messages import (
    AssistantMessage,
    ImageBlock,
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
from forkagent.models.base import HistoryStyle
from forkagent.requests import ModelRequest, ModelSettings, ToolSpec
from forkagent.testing import ScriptedModel

from ._support import make_agent

STYLES: list[HistoryStyle] = ["tool_result", "alternating"]

CALL_A = ToolUseBlock(id="a", name="Read", input={"file_path": "x.py"})
CALL_B = ToolUseBlock(id="b", name="Agent", input={"prompt": "do it", "fork": True})
INCOMPLETE = ToolUseBlock(id="c", name="Grep", input={}, raw_arguments='{"pattern": "fo')


def _base() -> list[Message]:
    return [
        user("review the code 🌍", ImageBlock(data="iVBORw0KGgo=")),
        assistant(ThinkingBlock(thinking="plan", signature="sig-1"), "on it"),
        user("go ahead"),
    ]


def ends_with_tool_calls() -> list[Message]:
    return [*_base(), assistant("splitting", CALL_A, CALL_B, INCOMPLETE)]


def ends_without_tool_calls() -> list[Message]:
    return [*_base(), assistant("done with the first pass")]


def ends_with_user() -> list[Message]:
    return [
        *_base(),
        assistant("done"),
        user("now split the work", ImageBlock(url="https://x/y.png")),
    ]


def _texts(message: Message) -> list[str]:
    return [b.text for b in message.content if isinstance(b, TextBlock)]


def _shared_end(forked: ForkedHistory) -> tuple[Message, object]:
    end = forked.shared_prefix_end
    message = forked.messages[end.message]
    return message, message.content[end.block]


@pytest.mark.parametrize("style", STYLES)
def test_pending_tool_calls_get_placeholders_then_rules_then_directive(style: HistoryStyle) -> None:
    history = ends_with_tool_calls()
    forked = build_forked_messages(history, "check x.py", style=style)
    messages = forked.messages
    for original, shared in zip(history, messages, strict=False):
        assert shared is original  # shared by reference, never copied
    if style == "tool_result":
        assert len(messages) == len(history) + 1
        last = messages[-1]
        placeholders = last.content[:3]
        assert last.content[3:] == (
            TextBlock(text=FORK_RULES),
            TextBlock(text=directive_text("check x.py")),
        )
    else:
        # Gemini's strict alternation: results alone, a constant model turn, then the rules.
        assert len(messages) == len(history) + 3
        results, ack, last = messages[-3:]
        assert isinstance(results, UserMessage)
        assert results.origin == "fork"
        assert ack == AssistantMessage(content=(TextBlock(text=FORK_ACK),))
        placeholders = results.content
        assert last.content == (
            TextBlock(text=FORK_RULES),
            TextBlock(text=directive_text("check x.py")),
        )
    assert isinstance(last, UserMessage)
    assert last.origin == "fork"
    assert all(isinstance(p, ToolResultBlock) for p in placeholders)
    ids = [p.tool_use_id for p in placeholders if isinstance(p, ToolResultBlock)]
    assert ids == ["a", "b", "c"]  # every pending call, in order
    for p in placeholders:
        assert isinstance(p, ToolResultBlock)
        assert p.text == FORK_PLACEHOLDER
        assert not p.is_error
    assert history[-1].content[-1] is INCOMPLETE  # an incomplete tool use stays as it was
    assert messages[len(history) - 1].content[-1] is INCOMPLETE


@pytest.mark.parametrize("style", STYLES)
def test_assistant_without_tool_calls_gets_a_new_user_message(style: HistoryStyle) -> None:
    history = ends_without_tool_calls()
    forked = build_forked_messages(history, "write tests", style=style)
    assert forked.messages[:-1] == tuple(history)
    last = forked.messages[-1]
    assert isinstance(last, UserMessage)
    assert last.origin == "fork"
    assert _texts(last) == [FORK_RULES, directive_text("write tests")]
    assert not any(isinstance(b, ToolResultBlock) for b in last.content)


@pytest.mark.parametrize("style", STYLES)
def test_trailing_user_message_keeps_its_blocks_first(style: HistoryStyle) -> None:
    history = ends_with_user()
    trailing = history[-1]
    forked = build_forked_messages(history, "part one", style=style)
    assert forked.messages[:-1] == tuple(history[:-1])
    last = forked.messages[-1]
    assert last.content[: len(trailing.content)] == trailing.content
    assert last.content[len(trailing.content) :] == (
        TextBlock(text=FORK_RULES),
        TextBlock(text=directive_text("part one")),
    )
    assert isinstance(last, UserMessage)
    assert last.origin == "fork"


@pytest.mark.parametrize("style", STYLES)
def test_trailing_partial_results_get_placeholders_for_the_rest(style: HistoryStyle) -> None:
    history: list[Message] = [
        user("go"),
        assistant(CALL_A, CALL_B),
        UserMessage(content=(tool_result("a", "file text"),), origin="tool"),
    ]
    forked = build_forked_messages(history, "d", style=style)
    blocks = [b for m in forked.messages[2:] for b in m.content]
    results = [b for b in blocks if isinstance(b, ToolResultBlock)]
    assert [(r.tool_use_id, r.text) for r in results] == [
        ("a", "file text"),
        ("b", FORK_PLACEHOLDER),
    ]
    assert forked.messages[-1].content[-2:] == (
        TextBlock(text=FORK_RULES),
        TextBlock(text=directive_text("d")),
    )


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    "history", [ends_with_tool_calls, ends_without_tool_calls, ends_with_user, list]
)
def test_shared_prefix_end_points_at_the_rules_block(
    style: HistoryStyle, history: Callable[[], list[Message]]
) -> None:
    forked = build_forked_messages(history(), "x", style=style)
    end = forked.shared_prefix_end
    assert end.message == len(forked.messages) - 1
    message, block = _shared_end(forked)
    assert block == TextBlock(text=FORK_RULES)
    assert end.block == len(message.content) - 2  # right before the directive


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("history", [ends_with_tool_calls, ends_without_tool_calls, ends_with_user])
def test_siblings_differ_only_in_the_directive(
    style: HistoryStyle, history: Callable[[], list[Message]]
) -> None:
    h = history()
    one = build_forked_messages(h, "first directive", style=style)
    two = build_forked_messages(h, "second, longer directive ü", style=style)
    assert one.shared_prefix_end == two.shared_prefix_end
    assert one.messages[:-1] == two.messages[:-1]
    assert one.messages[-1].content[:-1] == two.messages[-1].content[:-1]
    assert one.messages[-1].content[-1] != two.messages[-1].content[-1]
    assert "second, longer directive ü" in _texts(two.messages[-1])[-1]


def test_empty_history() -> None:
    forked = build_forked_messages([], "alone")
    assert forked.messages == (
        UserMessage(
            content=(TextBlock(text=FORK_RULES), TextBlock(text=directive_text("alone"))),
            origin="fork",
        ),
    )


def test_the_input_history_is_not_changed() -> None:
    history = ends_with_user()
    before = list(history)
    build_forked_messages(history, "x")
    assert history == before


def test_rules_state_what_a_fork_may_do_and_how_to_report() -> None:
    assert FORK_RULES.startswith(f"<{FORK_TAG}>")
    assert FORK_RULES.rstrip().endswith(f"</{FORK_TAG}>")
    lowered = FORK_RULES.lower()
    assert "do not start agents" in lowered
    assert '"scope:"' in lowered
    for heading in (
        "Scope:",
        "Result:",
        "Key files:",
        "Files changed:",
        "Verification:",
        "Issues:",
    ):
        assert heading in FORK_RULES


def test_a_user_typing_the_fork_tag_is_not_a_fork() -> None:
    typed = user(f"what does <{FORK_TAG}> mean? here it is:\n{FORK_RULES}")
    assert not is_fork_history([typed, assistant("it is the fork boilerplate")])
    assert not is_fork_history([user(FORK_RULES)])  # even the exact rules, typed by a user
    assert not is_fork_history(
        [UserMessage(content=(TextBlock(text=FORK_RULES),), origin="notification")]
    )
    assert not is_fork_history([UserMessage(content=(TextBlock(text="x"),), origin="fork")])
    assert is_fork_history(build_forked_messages([typed], "d").messages)


def test_cache_key_hash_is_stable_and_covers_what_decides_the_cache() -> None:
    tools = (ToolSpec(name="t", description="d", input_schema={"type": "object"}),)
    parent = ModelRequest(model="m", system="s", tools=tools, messages=(user("a"),))
    child = parent.model_copy(update={"messages": (*parent.messages, assistant("b"), user("c"))})
    assert cache_key_hash(parent) == cache_key_hash(child)  # messages are not part of the key
    assert len(cache_key_hash(parent)) == 16
    for change in (
        {"model": "n"},
        {"system": "s2"},
        {"tools": ()},
        {"settings": ModelSettings(temperature=0.1)},
        {"settings": ModelSettings(cache_key="k")},
    ):
        assert cache_key_hash(parent.model_copy(update=change)) != cache_key_hash(parent)


async def test_a_fork_without_snapshot_says_it_shares_no_cache(tmp_path: Path) -> None:
    model = ScriptedModel(["child report"])
    session = make_agent(model, tmp_path).session()
    root = session.root
    assert root.last_request is None
    [task] = await session.fork(["look around"])
    child = task.run
    assert child.system == root.system
    assert child.tool_specs is root.tool_specs
    details = session._runtime.fork_details(child, root)
    assert details["shares_cache"] is False
    assert "not sent a request" in str(details["note"])
    assert task.result is not None
    assert task.result.output == "child report"
    await session.aclose()


async def test_a_fork_uses_the_snapshot_not_a_fresh_rendering(tmp_path: Path) -> None:
    model = ScriptedModel(["parent answer", "child report"])
    session = make_agent(model, tmp_path).session()
    await session.send("hello")
    snapshot = session.root.last_request
    assert snapshot is not None
    # Whatever changes on the parent afterwards, the child is built from what was sent.
    session.root.system = "a re-rendered prompt"
    [task] = await session.fork(["look around"])
    child_request = model.requests[-1]
    assert child_request.system == snapshot.system
    assert child_request.tools is snapshot.tools
    assert child_request.settings == snapshot.settings
    details = session._runtime.fork_details(task.run, session.root)
    assert details["shares_cache"] is True
    assert details["cache_key_hash"] == cache_key_hash(snapshot)
    await session.aclose()


@pytest.mark.parametrize("history", [ends_with_tool_calls, ends_without_tool_calls, ends_with_user])
def test_a_siblings_last_message_is_what_validation_makes_and_copies_apart(
    history: Callable[[], list[Message]],
) -> None:
    """Siblings' last messages and directives share their fields sets: each still equals
    its validated twin, and a copy with a field changed leaves its siblings' sets alone."""
    base = fork_base(history())
    one = fork_messages(base, "first")[-1]
    two = fork_messages(base, "second")[-1]
    assert isinstance(one, UserMessage)
    validated = UserMessage(content=one.content, origin="fork")
    assert one == validated
    assert one.model_fields_set == validated.model_fields_set == {"content", "origin"}
    directive = one.content[-1]
    assert directive == TextBlock(text=directive_text("first"))
    assert directive.model_fields_set == {"text"}
    changed = one.model_copy(update={"origin": "user"})
    edited = directive.model_copy(update={"type": "text"})
    assert changed.model_fields_set == {"content", "origin"}
    assert edited.model_fields_set == {"text", "type"}
    assert two.model_fields_set == {"content", "origin"}
    assert two.content[-1].model_fields_set == {"text"}
    with pytest.raises(ValueError, match="frozen"):
        directive.text = "changed"  # type: ignore[misc]  # frozen: refused before any set grows
    assert two.content[-1].model_fields_set == {"text"}
