"""The monitor's cheaper paths give what the general ones do.

Events are dispatched by exact type, with subclasses handled as their base; a report reads
``Usage``'s counts once; the extension's proof reads a request's fields once and returns the
rest of a cut message. Each test fails if a path drifts from the general one.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkagent.events import AgentFinished, AgentStarted, Event, RequestSent, ResponseReceived
from forkagent.messages import Message, TextBlock, ToolUseBlock, UserMessage, assistant, user
from forkagent.models.base import ModelProfile, ModelResponse
from forkagent.requests import (
    ModelRequest,
    ModelSettings,
    ToolSpec,
    canonical_block,
    request_blocks,
)
from forkagent.telemetry import CacheMonitor
from forkagent.telemetry.cache import (
    CacheReport,
    added_sizes,
    block_size,
    explain,
    explain_extension,
    extends,
)
from forkagent.usage import Usage

MODEL = "claude-sonnet-4-6"
PROFILE = ModelProfile(provider="anthropic", warmup="none", min_cache_tokens=0)
RULES = TextBlock(text="You are a forked child. Follow the directive below. " * 20)
HISTORY: tuple[Message, ...] = (user("Plan the work. " * 40), assistant("Planned."))


def request(*messages: Message, **changes: object) -> ModelRequest:
    fields: dict[str, object] = {"model": MODEL, "system": "Be brief. " * 30, "messages": messages}
    return ModelRequest.model_validate({**fields, **changes})


def fork(directive: str) -> ModelRequest:
    last = UserMessage(content=(RULES, TextBlock(text=f"Directive: {directive}")))
    return request(*HISTORY, last, shared_prefix_end={"message": 2, "block": 0})


def answer(read: int, write: int) -> ModelResponse:
    spent = Usage(input_tokens=9, cache_read_tokens=read, cache_write_5m_tokens=write)
    return ModelResponse(message=assistant("ok"), usage=spent)


@dataclass(frozen=True, slots=True)
class _Started(AgentStarted):
    pass


@dataclass(frozen=True, slots=True)
class _Sent(RequestSent):
    pass


@dataclass(frozen=True, slots=True)
class _Received(ResponseReceived):
    pass


def _family(*, subclassed: bool) -> list[Event]:
    """A parent's turn, then three forks of it, each sent and answered in turn."""
    started, sent, received = (
        (_Started, _Sent, _Received)
        if subclassed
        else (
            AgentStarted,
            RequestSent,
            ResponseReceived,
        )
    )
    events: list[Event] = [
        started("main", None, "main", "main", False),
        sent("main", 0, request(*HISTORY)),
        received("main", 1, answer(0, 900), 1.0),
        AgentFinished("main", "completed", "done"),
    ]
    for n in range(3):
        events.append(started(f"fork-{n}", "main", "fork", f"fork-{n}", True))
    for n, (read, write) in enumerate([(900, 40), (940, 5), (0, 945)]):
        events += [
            sent(f"fork-{n}", 0, fork(f"task {n}")),
            received(f"fork-{n}", 1, answer(read, write), 1.0),
        ]
    return events


def _reports(events: list[Event]) -> list[tuple[str, int, CacheReport]]:
    monitor = CacheMonitor(profiles={MODEL: PROFILE})
    for event in events:
        monitor(event)
    return [(e.agent_id, e.turn, e.report) for e in monitor.reports()]


def test_subclassed_events_are_handled_as_their_base_types() -> None:
    expected = _reports(_family(subclassed=False))
    assert [status for _, _, status in ((a, t, r.status) for a, t, r in expected)] == [
        "cold",
        "hit",
        "hit",
        "miss",
    ]
    assert _reports(_family(subclassed=True)) == expected


_COUNTS = st.integers(0, 10**6)


@given(_COUNTS, _COUNTS, _COUNTS, _COUNTS)
def test_a_reports_counts_are_the_usages(fresh: int, read: int, five: int, hour: int) -> None:
    """``_Report`` reads the counts once and sums ``prompt_tokens`` from its parts."""
    spent = Usage(
        input_tokens=fresh,
        cache_read_tokens=read,
        cache_write_5m_tokens=five,
        cache_write_1h_tokens=hour,
    )
    previous, current = request(*HISTORY), request(*HISTORY, user("Go on."))
    for report in (
        explain(None, current, spent, profile=PROFILE),
        explain(previous, current, spent, profile=PROFILE),
        explain_extension(previous, spent, shared_bytes=100, total_bytes=120, profile=PROFILE),
    ):
        assert report.prompt_tokens == spent.prompt_tokens
        assert report.read_tokens == spent.cache_read_tokens
        assert report.write_tokens == spent.cache_write_tokens


@pytest.mark.parametrize(
    "changes",
    [
        {"model": "claude-opus-4-1"},
        {"settings": ModelSettings(temperature=0.5)},
        {"tools": (ToolSpec(name="read", description="Read.", input_schema={"type": "object"}),)},
        {"system": "Something else."},
    ],
)
def test_a_changed_header_is_no_extension(changes: dict[str, object]) -> None:
    previous = request(*HISTORY)
    changed = request(*HISTORY, user("Go on."), **changes)
    assert not extends(previous, changed)
    assert added_sizes(changed, previous) is None
    assert extends(previous, request(*HISTORY, user("Go on.")))


def _rendered(request: ModelRequest) -> list[int]:
    return [len(block.data) for block in request_blocks(request)]


def test_a_cut_messages_rest_is_measured_whether_its_blocks_are_the_same_objects_or_equal() -> None:
    """The shared part ends in a cut copy of the last message: what follows the cut is
    measured, and an equal copy of the cut message adds nothing."""
    shared = request(*HISTORY, UserMessage(content=(RULES,)))
    copied = UserMessage(content=(TextBlock(text=RULES.text), TextBlock(text="Directive: x")))
    for child in (fork("task"), request(*HISTORY, copied), request(*shared.messages)):
        added = added_sizes(child, shared)
        assert added is not None
        assert [*_rendered(shared), *added] == _rendered(child)

    other_role = request(*HISTORY, assistant(RULES.text, "more"))
    assert added_sizes(other_role, shared) is None
    other_start = request(*HISTORY, user("Another rule.", RULES.text))
    assert added_sizes(other_start, shared) is None


def test_a_fork_started_again_as_a_root_is_not_compared_with_its_family() -> None:
    events = _family(subclassed=False)[:5]
    events.append(AgentStarted("fork-0", None, "main", "fork-0", False))
    events += [RequestSent("fork-0", 0, fork("x")), ResponseReceived("fork-0", 1, answer(0, 9), 1)]
    (agent_id, _, report) = _reports(events)[-1]
    assert (agent_id, report.status, report.compared_with) == ("fork-0", "cold", None)


@given(st.sampled_from(["user", "assistant"]), st.text(max_size=40))
def test_a_text_blocks_size_is_its_rendered_length(role: str, text: str) -> None:
    """``block_size`` measures a text block (every sibling's directive) without rendering it:
    quotes, escapes, control and non-ASCII characters included."""
    block = TextBlock(text=text)
    assert block_size(role, block) == len(canonical_block(role, block))


def test_other_blocks_are_sized_by_their_rendering() -> None:
    block = ToolUseBlock(id="t1", name="read", input={"path": "é\\n"})
    assert block_size("assistant", block) == len(canonical_block("assistant", block))


@given(st.text(max_size=20))
def test_a_siblings_directive_is_measured_as_rendered(directive: str) -> None:
    """A child adding one block to its family's shared part (``added_sizes``'s first branch)."""
    shared = request(*HISTORY, UserMessage(content=(RULES,)))
    child = fork(directive)
    assert added_sizes(child, shared) == _rendered(child)[len(_rendered(shared)) :]
