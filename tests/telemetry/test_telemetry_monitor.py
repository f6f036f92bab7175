"""The cache monitor over crafted event streams: previous requests, fork parents, siblings."""

from __future__ import annotations

import logging
import weakref

import pytest

from forkagent._orchestration.fork import fork_base, fork_from
from forkagent.events import AgentStarted, Event, RequestSent, ResponseReceived
from forkagent.history import HistoryView
from forkagent.messages import Message, TextBlock, ToolUseBlock, assistant, tool_result, user
from forkagent.models.base import ModelProfile, ModelResponse
from forkagent.requests import BlockPosition, ModelRequest, request_blocks
from forkagent.telemetry import CacheMonitor, CacheReported
from forkagent.telemetry.cache import VIEW_MIN, CacheReport, block_sizes, explain
from forkagent.telemetry.monitor import shared_part
from forkagent.usage import Usage

MODEL = "claude-sonnet-4-6"
SYSTEM = "You review code and plan refactors. " * 40
PROFILES = {MODEL: ModelProfile(provider="anthropic", warmup="first_response_starts")}
CALL = ToolUseBlock(id="call_1", name="Agent", input={"fork": True})
PARENT_HISTORY: tuple[Message, ...] = (user("Review the three modules. " * 30),)
RULES = "You are a forked child. Follow the directive below. " * 40


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def request(
    *messages: Message, system: str = SYSTEM, end: BlockPosition | None = None
) -> ModelRequest:
    return ModelRequest(model=MODEL, system=system, messages=messages, shared_prefix_end=end)


def fork_request(directive: str, *, system: str = SYSTEM) -> ModelRequest:
    """A child as the fork builder makes it: parent history, its call, placeholder, rules, directive."""
    last = user(tool_result(CALL.id, "Forked."), TextBlock(text=RULES), f"Directive: {directive}")
    messages = (*PARENT_HISTORY, assistant(CALL), last)
    return request(*messages, system=system, end=BlockPosition(message=2, block=1))


def response(usage: Usage, **fields: object) -> ModelResponse:
    return ModelResponse.model_validate({"message": assistant("ok"), "usage": usage, **fields})


def usage(*, read: int = 0, write: int = 0, fresh: int = 30) -> Usage:
    return Usage(
        input_tokens=fresh,
        cache_read_tokens=read,
        cache_write_5m_tokens=write,
        output_tokens=5,
        requests=1,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def monitor(clock: Clock) -> CacheMonitor:
    return CacheMonitor(profiles=PROFILES, clock=clock)


def run_parent(monitor: CacheMonitor, clock: Clock) -> None:
    """The main agent's one request, answered, cold: it writes the cache its forks read."""
    monitor(AgentStarted("main", None, "main", "main", False))
    monitor(RequestSent("main", 0, request(*PARENT_HISTORY)))
    clock.now += 2.0
    monitor(ResponseReceived("main", 1, response(usage(write=2000)), 2.0))


def turn(
    monitor: CacheMonitor, agent_id: str, req: ModelRequest, spent: Usage, number: int = 1
) -> None:
    monitor(RequestSent(agent_id, number - 1, req))
    monitor(ResponseReceived(agent_id, number, response(spent), 1.0))


def start_fork(monitor: CacheMonitor, agent_id: str) -> None:
    monitor(AgentStarted(agent_id, "main", "fork", agent_id, True))


def test_each_turn_is_compared_with_the_agents_previous_request(
    monitor: CacheMonitor, clock: Clock
) -> None:
    run_parent(monitor, clock)
    second = request(*PARENT_HISTORY, assistant("Plan ready."), user("Go on."))
    turn(monitor, "main", second, usage(read=2000), number=2)

    first, latest = monitor.reports("main")
    assert first.report.status == "cold"
    assert latest.turn == 2
    assert latest.report.status == "hit"
    assert latest.report.compared_with == "the agent's previous request"
    assert monitor.misses() == []


def test_a_forks_first_request_is_compared_with_its_parents_last(
    monitor: CacheMonitor, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    run_parent(monitor, clock)
    start_fork(monitor, "fork-1")

    turn(monitor, "fork-1", fork_request("check module A"), usage(read=1000, write=1000))

    (explained,) = monitor.reports("fork-1")
    assert explained.report.status == "hit"
    assert explained.report.compared_with == "parent main's last request"
    assert not caplog.records


def test_a_fork_whose_first_turn_breaks_the_cache_is_a_warning(
    monitor: CacheMonitor, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    run_parent(monitor, clock)
    start_fork(monitor, "fork-1")

    with caplog.at_level(logging.WARNING, logger="forkagent.cache"):
        turn(monitor, "fork-1", fork_request("A", system=SYSTEM + "Now."), usage(write=2900))

    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.name == "forkagent.cache"
    assert "fork fork-1 read 0% of its first prompt" in record.getMessage()
    assert "system[0] changed" in record.getMessage()
    assert monitor.misses()[0].report.reasons == ("system_changed",)


def test_a_sibling_sent_before_the_first_siblings_response_was_launched_too_early(
    monitor: CacheMonitor, clock: Clock
) -> None:
    run_parent(monitor, clock)
    start_fork(monitor, "fork-1")
    start_fork(monitor, "fork-2")
    monitor(RequestSent("fork-1", 0, fork_request("A")))
    monitor(RequestSent("fork-2", 0, fork_request("B")))
    clock.now += 1.0
    # fork-2 read only the parent's part and wrote the shared part again.
    monitor(ResponseReceived("fork-2", 1, response(usage(read=1000, write=1000)), 1.0))
    monitor(ResponseReceived("fork-1", 1, response(usage(read=1000, write=1000)), 1.0))

    second = monitor.reports("fork-2")[0].report
    assert second.compared_with == "fork fork-1's shared prefix"
    assert second.reasons == ("launched_before_cache",)
    assert "response has begun" in second.findings[0].message


def test_a_sibling_sent_after_the_first_response_reads_the_shared_prefix(
    monitor: CacheMonitor, clock: Clock
) -> None:
    run_parent(monitor, clock)
    start_fork(monitor, "fork-1")
    start_fork(monitor, "fork-2")
    turn(monitor, "fork-1", fork_request("A"), usage(read=1000, write=1000))
    clock.now += 1.0
    turn(monitor, "fork-2", fork_request("B"), usage(read=2000))

    assert monitor.reports("fork-2")[0].report.status == "hit"
    assert monitor.misses() == []


@pytest.mark.parametrize("spent", [usage(read=2500, write=100), usage(read=100, write=2500)])
def test_sizes_kept_by_reference_give_the_reports_of_a_full_comparison(
    monitor: CacheMonitor, clock: Clock, spent: Usage
) -> None:
    """A request that extends the one before keeps only the sizes of the blocks it adds (its
    earlier request's are referenced, not copied). A family forked after the parent's second
    turn measures its shared part from that chain, and a leader answered after its sibling is
    measured from the shared part but compared with the parent's request (all sizes, joined):
    each report must be what comparing the two requests in full gives."""
    run_parent(monitor, clock)
    history = (*PARENT_HISTORY, assistant("Plan ready."), user("Now fork."))
    parent = request(*history)
    parent_usage = usage(read=2000, write=50)
    turn(monitor, "main", parent, parent_usage, number=2)
    start_fork(monitor, "fork-1")
    start_fork(monitor, "fork-2")
    end = BlockPosition(message=4, block=1)
    leader = request(*history, assistant(CALL), fork_request("A").messages[-1], end=end)
    sibling = request(*history, assistant(CALL), fork_request("B").messages[-1], end=end)
    monitor(RequestSent("fork-1", 0, leader))
    monitor(RequestSent("fork-2", 0, sibling))
    clock.now += 1.0
    monitor(ResponseReceived("fork-2", 1, response(spent), 1.0))
    monitor(ResponseReceived("fork-1", 1, response(spent), 1.0))

    anthropic = PROFILES[MODEL]
    first_sibling = explain(
        shared_part(leader),
        sibling,
        spent,
        profile=anthropic,
        elapsed=0.0,
        cache_ready=False,  # sent before the leader's response
        compared_with="fork fork-1's shared prefix",
    )
    then_leader = explain(
        parent,
        leader,
        spent,
        profile=anthropic,
        elapsed=0.0,
        compared_with="parent main's last request",
        previous_tokens=parent_usage.prompt_tokens,
    )
    assert [e.report for e in monitor.reports()[2:]] == [first_sibling, then_leader]


def test_a_long_conversation_keeps_no_earlier_request_and_its_forks_are_measured(
    monitor: CacheMonitor, clock: Clock
) -> None:
    """Each turn's sizes reference the turn before's, never its request: after 1,500 turns
    only the last request is kept. Forks of it, the leader answered after its sibling (so its
    sizes are joined in full, through every turn: a loop, not a recursion), report what
    comparing the requests in full gives."""
    run_parent(monitor, clock)
    history = HistoryView(PARENT_HISTORY)
    first: weakref.ref[ModelRequest] | None = None
    for n in range(1500):
        history = history.extended((assistant(f"Done {n}."), user(f"Next {n}.")))
        sent = request().model_copy(update={"messages": history})
        first = first or weakref.ref(sent)
        turn(monitor, "main", sent, usage(read=2000, write=20), number=n + 2)
    assert first is not None
    assert first() is None
    start_fork(monitor, "fork-1")
    start_fork(monitor, "fork-2")
    end = BlockPosition(message=len(history) + 1, block=1)
    leader, sibling = (
        request(end=end).model_copy(
            update={"messages": history.extended((assistant(CALL), fork_request(d).messages[-1]))}
        )
        for d in ("A", "B")
    )
    monitor(RequestSent("fork-1", 0, leader))
    monitor(RequestSent("fork-2", 0, sibling))
    monitor(ResponseReceived("fork-2", 1, response(usage(read=2000, write=900)), 1.0))
    monitor(ResponseReceived("fork-1", 1, response(usage(read=2000, write=900)), 1.0))

    reports = [e.report for e in monitor.reports()[-2:]]
    assert [r.compared_with for r in reports] == [
        "fork fork-1's shared prefix",
        "parent main's last request",
    ]
    assert reports[1] == explain(
        sent,
        leader,
        usage(read=2000, write=900),
        profile=PROFILES[MODEL],
        elapsed=0.0,
        compared_with="parent main's last request",
        previous_tokens=usage(read=2000, write=20).prompt_tokens,
    )


def test_reports_reach_the_callback_and_carry_the_providers_diagnosis(clock: Clock) -> None:
    seen: list[CacheReported] = []
    monitor = CacheMonitor(profiles=PROFILES, clock=clock, on_report=seen.append)
    run_parent(monitor, clock)
    diagnosis = {"type": "system_changed", "cache_missed_input_tokens": 2000}
    monitor(RequestSent("main", 1, request(*PARENT_HISTORY, assistant("x"), user("y"))))
    monitor(
        ResponseReceived("main", 2, response(usage(write=2100), cache_diagnosis=diagnosis), 1.0)
    )

    assert [e.turn for e in seen] == [1, 2]
    assert "provider_reported" in seen[-1].report.reasons
    assert seen[-1] in monitor.misses()


def test_a_listener_added_mid_run_treats_unknown_agents_as_roots(monitor: CacheMonitor) -> None:
    events: list[Event] = [
        ResponseReceived("ghost", 3, response(usage()), 1.0),  # no request seen: ignored
        RequestSent("ghost", 3, request(*PARENT_HISTORY)),
        ResponseReceived("ghost", 4, response(usage(read=10)), 1.0),
    ]
    for event in events:
        monitor(event)

    assert [e.report.status for e in monitor.reports()] == ["cold"]


def test_the_shared_part_ends_at_the_marked_block() -> None:
    child = fork_request("check module A")

    shared = shared_part(child)

    assert len(shared.messages) == 3
    assert [type(b).__name__ for b in shared.messages[-1].content] == [
        "ToolResultBlock",
        "TextBlock",
    ]
    assert shared.shared_prefix_end is None
    assert shared_part(request(*PARENT_HISTORY, user("x"))).messages == PARENT_HISTORY


def test_siblings_are_measured_from_their_familys_shared_part() -> None:
    """The shared part ends in a cut message: a sibling's sizes add only the blocks after
    the cut, and equal what ``request_blocks`` renders; a request that leaves the shared
    part is measured whole."""
    shared = shared_part(fork_request("check module A"))
    known = (shared, block_sizes(shared))

    for child in (
        fork_request("check module B"),
        fork_request("check module C"),
        request(*shared.messages),
        fork_request("check module D", system="Another system prompt."),
    ):
        assert block_sizes(child, known) == [len(b.data) for b in request_blocks(child)]


def _long_family_reports(*, views: bool) -> list[CacheReport]:
    """A parent past ``VIEW_MIN`` messages and four forks of it, one with an edited history;
    the requests' messages as shared views (as the runtime sends them) or as tuples."""
    history = HistoryView(
        m for n in range(VIEW_MIN) for m in (user(f"Step {n}."), assistant(f"Done {n}."))
    )
    parent = (*history, user("Now fork."), assistant(CALL))
    base = fork_base(HistoryView(parent))
    forks = [fork_from(base, directive) for directive in ("A", "B", "C", "D")]
    edited = (
        forks[3]
        .messages.prefix(0)
        .extended((*history[:10], user("Step 5, edited."), *forks[3].messages[11:]))
    )
    clock = Clock()
    monitor = CacheMonitor(profiles=PROFILES, clock=clock)
    monitor(AgentStarted("main", None, "main", "main", False))
    turn(monitor, "main", request(*parent[:-1]), usage(write=9000))
    for n, (forked, messages) in enumerate(
        [(f, f.messages) for f in forks[:3]] + [(forks[3], edited)], start=1
    ):
        start_fork(monitor, f"fork-{n}")
        sent = messages if views else tuple(messages)
        child = ModelRequest(model=MODEL, system=SYSTEM, shared_prefix_end=forked.shared_prefix_end)
        clock.now += 1.0
        spent = usage(read=9000, write=300) if n < 4 else usage(read=20, write=9300)
        turn(monitor, f"fork-{n}", child.model_copy(update={"messages": sent}), spent)
    return [explained.report for explained in monitor.reports()]


def test_a_long_family_compared_by_shared_views_reports_what_tuples_do() -> None:
    """Past ``VIEW_MIN`` messages, a family's shared part is a view sharing the siblings'
    chunks, and their prefixes are compared by those chunks, unread: every report must be
    the one the same requests as tuples (compared item by item) give."""
    forked = fork_from(fork_base(HistoryView(user(f"{n}") for n in range(VIEW_MIN + 2))), "A")
    child = request(end=forked.shared_prefix_end).model_copy(update={"messages": forked.messages})
    assert isinstance(shared_part(child).messages, HistoryView)  # the path under test

    by_views = _long_family_reports(views=True)

    assert by_views == _long_family_reports(views=False)
    assert [r.status for r in by_views] == ["cold", "hit", "hit", "hit", "miss"]
    assert by_views[-1].reasons == ("messages_changed",)
