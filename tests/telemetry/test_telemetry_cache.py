"""Each cache-miss reason, produced by a crafted pair of requests."""

from __future__ import annotations

import json
from typing import TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkagent._orchestration.fork import fork_base, fork_from
from forkagent.messages import (
    AssistantMessage,
    JsonValue,
    Message,
    TextBlock,
    ToolUseBlock,
    UserMessage,
    assistant,
    user,
)
from forkagent.models.base import ModelProfile
from forkagent.requests import ModelRequest, ModelSettings, ToolSpec, request_blocks
from forkagent.telemetry.cache import (
    added_sizes,
    block_sizes,
    explain,
    explain_extension,
    extension_sizes,
)
from forkagent.usage import Usage

MODEL = "claude-sonnet-4-6"
TOOLS = (
    ToolSpec(name="read", description="Read a file.", input_schema={"type": "object"}),
    ToolSpec(name="grep", description="Search files.", input_schema={"type": "object"}),
)
SYSTEM = "You are a careful engineer working on a large code base. " * 30
HISTORY: tuple[Message, ...] = (
    user("Where is the capital configured? " * 20),
    assistant("The capital is Paris. It is set in config/geo.py."),
)
ANTHROPIC = ModelProfile(provider="anthropic", warmup="first_response_starts")


def request(*messages: Message, **changes: object) -> ModelRequest:
    fields: dict[str, object] = {"model": MODEL, "system": SYSTEM, "tools": TOOLS}
    fields.update(changes)
    return ModelRequest.model_validate({**fields, "messages": messages})


PREVIOUS = request(*HISTORY)
NEXT = request(*HISTORY, user("Now change it to Lyon."))
WARM = Usage(input_tokens=20, cache_read_tokens=1500, output_tokens=40, requests=1)
COLD = Usage(input_tokens=20, cache_write_5m_tokens=1500, output_tokens=40, requests=1)


def test_a_request_that_extends_the_previous_one_and_reads_it_is_a_hit() -> None:
    report = explain(PREVIOUS, NEXT, WARM, profile=ANTHROPIC, elapsed=10.0)

    assert report.status == "hit"
    assert report.findings == ()
    assert 0.8 * report.expected_tokens <= report.read_tokens <= report.prompt_tokens
    assert report.summary.startswith("cache hit: read 1,500 of ~")


def test_equal_copies_of_the_messages_extend_the_previous_request_too() -> None:
    copies = request(*(m.model_copy() for m in HISTORY), user("Now change it to Lyon."))

    report = explain(PREVIOUS, copies, WARM, profile=ANTHROPIC)

    assert report.status == "hit"
    assert report.difference is None


def test_a_first_request_is_cold() -> None:
    report = explain(None, PREVIOUS, COLD, profile=ANTHROPIC)

    assert report.status == "cold"
    assert report.expected_tokens == 0
    assert report.findings == ()


def test_model_change() -> None:
    report = explain(
        PREVIOUS, request(*NEXT.messages, model="claude-opus-4-6"), COLD, profile=ANTHROPIC
    )

    assert report.status == "miss"
    assert report.reasons == ("model_changed",)
    assert "'claude-sonnet-4-6' -> 'claude-opus-4-6'" in report.findings[0].message
    assert report.expected_tokens == 0


def test_settings_change_names_the_field() -> None:
    changed = request(*NEXT.messages, settings=ModelSettings(temperature=0.2))

    report = explain(PREVIOUS, changed, COLD, profile=ANTHROPIC)

    assert report.reasons == ("settings_changed",)
    assert "temperature" in report.findings[0].message
    assert report.difference is not None
    assert report.difference.layer == "settings"
    assert report.expected_tokens > 0  # judged as if the provider ignored them


def test_a_setting_the_provider_does_not_key_on_still_reads_as_a_hit() -> None:
    changed = request(*NEXT.messages, settings=ModelSettings(temperature=0.2))

    report = explain(PREVIOUS, changed, WARM, profile=ANTHROPIC)

    assert report.status == "hit"
    assert report.findings == ()


def test_a_changed_setting_does_not_hide_an_expired_entry() -> None:
    changed = request(*NEXT.messages, settings=ModelSettings(temperature=0.2))

    report = explain(PREVIOUS, changed, COLD, profile=ANTHROPIC, elapsed=400.0)

    assert report.reasons == ("ttl_expired",)


def test_tool_change_is_found_in_the_tools_layer() -> None:
    renamed = (TOOLS[0], TOOLS[1].model_copy(update={"description": "Search every file."}))

    report = explain(PREVIOUS, request(*NEXT.messages, tools=renamed), COLD, profile=ANTHROPIC)

    assert report.reasons == ("tools_changed",)
    assert report.difference is not None
    assert report.difference.label == "tools[1]"
    assert report.expected_tokens > 0  # tools[0] is still shared


def test_system_change() -> None:
    edited = SYSTEM.replace("large", "huge", 1)

    report = explain(PREVIOUS, request(*NEXT.messages, system=edited), COLD, profile=ANTHROPIC)

    assert report.reasons == ("system_changed",)
    assert report.difference is not None
    assert report.difference.label == "system[0]"
    message = report.findings[0].message
    assert "working on a large code" in message
    assert "working on a huge code" in message


def test_an_edited_message_gives_the_first_differing_block_and_byte() -> None:
    edited = (HISTORY[0], assistant("The capital is Lyon. It is set in config/geo.py."))

    report = explain(PREVIOUS, request(*edited, user("Go on.")), COLD, profile=ANTHROPIC)

    assert report.reasons == ("messages_changed",)
    difference = report.difference
    assert difference is not None
    assert difference.label == "messages[1].content[0]"
    assert difference.block_index == 4  # after two tools, the system block, the first message
    header = len(b'{"role":"assistant","type":"text","text":"')
    assert difference.byte_offset == header + len("The capital is ")
    assert f"byte {difference.byte_offset}" in report.findings[0].message


def test_a_trimmed_history_is_a_messages_change() -> None:
    report = explain(NEXT, request(HISTORY[0]), COLD, profile=ANTHROPIC)

    assert report.reasons == ("messages_changed",)
    assert "history trimmed" in report.findings[0].message


def test_ttl_expiry() -> None:
    report = explain(PREVIOUS, NEXT, COLD, profile=ANTHROPIC, elapsed=301.0)

    assert report.status == "miss"
    assert report.reasons == ("ttl_expired",)
    assert "301s passed" in report.findings[0].message
    assert "a 5m cache entry lives 300s" in report.findings[0].message


def test_a_one_hour_entry_is_not_expired_after_five_minutes() -> None:
    hour = ModelSettings(cache_ttl="1h")
    previous, current = request(*HISTORY, settings=hour), request(*NEXT.messages, settings=hour)

    report = explain(previous, current, COLD, profile=ANTHROPIC, elapsed=301.0)

    assert report.reasons == ("unexplained",)


def test_a_prefix_below_the_minimum() -> None:
    small = Usage(input_tokens=600, output_tokens=10, requests=1)
    profile = ModelProfile(provider="anthropic", min_cache_tokens=1024)

    report = explain(PREVIOUS, NEXT, small, profile=profile, elapsed=3.0)

    assert report.reasons == ("below_minimum",)
    assert "1,024" in report.findings[0].message
    assert report.expected_tokens < 1024


def test_a_prefix_below_the_minimum_overrules_timing() -> None:
    small = Usage(input_tokens=600, output_tokens=10, requests=1)
    profile = ModelProfile(
        provider="anthropic", warmup="first_response_ends", min_cache_tokens=1024
    )

    report = explain(PREVIOUS, NEXT, small, profile=profile, elapsed=900.0, cache_ready=False)

    assert report.reasons == ("below_minimum",)


def test_a_cold_prompt_below_the_minimum_says_it_will_not_be_cached() -> None:
    profile = ModelProfile(provider="anthropic", min_cache_tokens=4096)

    report = explain(None, PREVIOUS, COLD, profile=profile)

    assert report.status == "cold"
    assert report.reasons == ("below_minimum",)


@pytest.mark.parametrize(
    ("warmup", "word"), [("first_response_starts", "begun"), ("first_response_ends", "ended")]
)
def test_a_launch_before_the_cache_existed(warmup: str, word: str) -> None:
    profile = ModelProfile(provider="anthropic", warmup=warmup)  # type: ignore[arg-type]

    report = explain(PREVIOUS, NEXT, COLD, profile=profile, elapsed=0.0, cache_ready=False)

    assert report.reasons == ("launched_before_cache",)
    assert f"has {word}" in report.findings[0].message


def test_the_providers_own_diagnosis_is_surfaced() -> None:
    diagnosis: dict[str, JsonValue] = {
        "type": "messages_changed",
        "cache_missed_input_tokens": 1200,
    }

    report = explain(PREVIOUS, NEXT, WARM, profile=ANTHROPIC, diagnosis=diagnosis)

    assert report.reasons == ("provider_reported",)
    assert report.findings[0].message == (
        "the provider says messages changed (1,200 input tokens missed the cache)"
    )
    assert report.provider_diagnosis == diagnosis


def test_a_miss_with_no_visible_cause_is_called_unexplained() -> None:
    report = explain(PREVIOUS, NEXT, COLD, profile=ANTHROPIC, elapsed=5.0)

    assert report.reasons == ("unexplained",)


def test_without_a_prompt_size_nothing_is_judged() -> None:
    report = explain(PREVIOUS, NEXT, Usage(), profile=ANTHROPIC)

    assert report.status == "unmeasured"
    assert report.expected_tokens > 0  # estimated at ~4 bytes a token


def test_the_report_is_json() -> None:
    edited = request(*NEXT.messages, system="Other.")
    report = explain(PREVIOUS, edited, COLD, profile=ANTHROPIC, compared_with="previous")

    data = json.loads(json.dumps(report.to_dict()))

    assert data["status"] == "miss"
    assert data["difference"]["label"] == "system[0]"
    assert data["findings"][0]["reason"] == "system_changed"
    assert data["compared_with"] == "previous"


def test_block_sizes_render_only_what_an_extending_request_adds() -> None:
    known = (PREVIOUS, block_sizes(PREVIOUS))
    edited = request(user("Somewhere else entirely."), *NEXT.messages[1:])

    for current in (NEXT, edited):
        assert block_sizes(current, known) == [len(b.data) for b in request_blocks(current)]


def test_reading_the_whole_previous_prompt_is_a_hit_whatever_the_size_estimate() -> None:
    """The new part tokenizes densely, so a per-byte estimate of the shared part is too high."""
    dense = request(*HISTORY, user("東京大阪名古屋札幌福岡" * 40))
    usage = Usage(input_tokens=1400, cache_read_tokens=1500, output_tokens=40, requests=1)

    estimated = explain(PREVIOUS, dense, usage, profile=ANTHROPIC)
    counted = explain(PREVIOUS, dense, usage, profile=ANTHROPIC, previous_tokens=1500)

    assert estimated.status == "miss"  # what the estimate alone claimed
    assert counted.status == "hit"
    assert counted.expected_tokens == 1500


def test_block_sizes_of_one_block_object_follow_its_message_role() -> None:
    """Sizes are kept per block object and role: a block the user and the model both send
    (or siblings' shared placeholders) is measured as ``request_blocks`` renders it each time."""
    shared = TextBlock(text="the same block object, twice")
    current = request(
        *HISTORY, UserMessage(content=(shared,)), AssistantMessage(content=(shared, shared))
    )
    known = (PREVIOUS, block_sizes(PREVIOUS))

    for _ in range(2):  # measured, then remembered
        assert block_sizes(current, known) == [len(b.data) for b in request_blocks(current)]


def test_block_sizes_of_siblings_with_a_long_shared_head() -> None:
    """Siblings of a reply with many tool calls: the head's sizes come from the family's cache,
    and equal what ``request_blocks`` renders, for every sibling."""
    calls = tuple(ToolUseBlock(id=f"toolu_{n}", name="Agent", input={"n": n}) for n in range(12))
    parent = request(*HISTORY, AssistantMessage(content=calls))
    base = fork_base(parent.messages)
    known = (parent, block_sizes(parent))

    for directive in ("first", "second", "third"):
        forked = fork_from(base, directive)
        child = request(*forked.messages)
        assert block_sizes(child, known) == [len(b.data) for b in request_blocks(child)]


@pytest.mark.parametrize("usage", [WARM, COLD])
def test_a_prefix_proven_by_extension_sizes_gives_the_same_report(usage: Usage) -> None:
    """The monitor passes ``prefix_blocks`` when it measured a request from the one it
    compares with: the report is the one a full comparison gives."""
    known = (PREVIOUS, block_sizes(PREVIOUS))
    sizes = extension_sizes(NEXT, known)
    assert sizes == [len(b.data) for b in request_blocks(NEXT)]

    proven = explain(
        PREVIOUS, NEXT, usage, profile=ANTHROPIC, sizes=sizes, prefix_blocks=len(known[1])
    )

    assert proven == explain(PREVIOUS, NEXT, usage, profile=ANTHROPIC)
    assert extension_sizes(request(user("Somewhere else entirely.")), known) is None


class _Options(TypedDict, total=False):
    profile: ModelProfile
    elapsed: float
    cache_ready: bool
    diagnosis: dict[str, JsonValue]
    compared_with: str
    previous_tokens: int


EXTENSION_CASES: dict[str, tuple[_Options, Usage]] = {
    "hit": ({}, WARM),
    "hit by the previous prompt's count": ({"previous_tokens": 1500}, WARM),
    "cold write": ({}, COLD),
    "expired": ({"elapsed": 400.0}, COLD),
    "launched before the cache": ({"cache_ready": False}, COLD),
    "below the minimum": ({"profile": ModelProfile(provider="x", min_cache_tokens=10**6)}, COLD),
    "unexplained, with the provider's diagnosis": (
        {"diagnosis": {"type": "unavailable"}, "compared_with": "the agent's previous request"},
        COLD,
    ),
    "unmeasured": ({}, Usage(output_tokens=3, requests=1)),
}


@pytest.mark.parametrize("case", list(EXTENSION_CASES))
def test_explain_extension_gives_explains_report(case: str) -> None:
    """The monitor's path for a proven extension (sizes summed once, nothing compared)
    must report exactly what the full comparison does, whatever the outcome."""
    changes, usage = EXTENSION_CASES[case]
    options: _Options = {"profile": ANTHROPIC, **changes}
    before = block_sizes(PREVIOUS)
    added = added_sizes(NEXT, PREVIOUS)
    assert added is not None
    assert [*before, *added] == [len(b.data) for b in request_blocks(NEXT)]

    fast = explain_extension(
        PREVIOUS, usage, shared_bytes=sum(before), total_bytes=sum(before) + sum(added), **options
    )

    assert fast == explain(PREVIOUS, NEXT, usage, **options)
    assert added_sizes(request(user("Somewhere else entirely.")), PREVIOUS) is None


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_a_reports_token_counts_are_its_usages_whichever_cache_writes_it_holds(
    fresh: int, read: int, five_minutes: int, one_hour: int
) -> None:
    """The report reads a usage's counts from its fields, restating ``Usage``'s sums (a call
    fewer per response): they must stay the same sums, for both kinds of cache write."""
    usage = Usage(
        input_tokens=fresh,
        cache_read_tokens=read,
        cache_write_5m_tokens=five_minutes,
        cache_write_1h_tokens=one_hour,
    )
    for report in (
        explain(PREVIOUS, NEXT, usage, profile=ANTHROPIC),
        explain_extension(PREVIOUS, usage, shared_bytes=100, total_bytes=200, profile=ANTHROPIC),
    ):
        assert (report.prompt_tokens, report.read_tokens, report.write_tokens) == (
            usage.prompt_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        )
