"""A fork family's requests: the N tool calls and N placeholder results every child sends
are read once per family, and the answers are the ones a block-by-block reading gives.

A long message's head (its blocks but the last) is known by its content: its cache keys,
its turn-rule shape and its text come from memos. What the API answers (usage, errors,
diagnostics) must not depend on whether a memo served them.
"""

from __future__ import annotations

from typing import Any

import pytest
from _emu_helpers import OPUS_41, text

from forkagent.emulator import Emulator
from forkagent.emulator.cache import Block, BlockCache, BlockRules, Run
from forkagent.emulator.timing import NO_LATENCY

Body = dict[str, Any]
CHILDREN = 12
PLACEHOLDER = "Forked: this call's work continues in a child agent."


def _calls(children: int = CHILDREN) -> list[Body]:
    return [
        {"type": "tool_use", "id": f"toolu_{n:02d}", "name": "Agent", "input": {"part": n}}
        for n in range(children)
    ]


def _results(children: int = CHILDREN) -> list[Body]:
    return [
        {
            "type": "tool_result",
            "tool_use_id": f"toolu_{n:02d}",
            "content": [{"type": "text", "text": PLACEHOLDER}],
        }
        for n in range(children)
    ]


def _child(directive: str, *, calls: list[Body] | None = None, **extra: Any) -> Body:
    """A child's request: the parent's prompt and reply, the placeholders, rules, directive."""
    rules = {"type": "text", "text": text(1500, "rules"), "cache_control": {"type": "ephemeral"}}
    last = [*_results(), rules, {"type": "text", "text": directive}]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": text(1200, "prompt")}]},
        {"role": "assistant", "content": calls if calls is not None else _calls()},
        {"role": "user", "content": last},
    ]
    return {"model": OPUS_41, "max_tokens": 32, "messages": messages, **extra}


async def _send(emulator: Emulator, body: Body) -> Body:
    reply = await emulator.dispatch("POST", "/v1/messages", body)
    assert reply.status == 200, reply.body
    answer: Body = reply.body
    return answer


async def test_every_sibling_reads_the_shared_prefix_and_writes_its_directive() -> None:
    emulator = Emulator(latency=NO_LATENCY)
    usages = [(await _send(emulator, _child(f"Part {n}.")))["usage"] for n in range(4)]
    first, *others = usages
    assert first["cache_read_input_tokens"] == 0
    for usage in others:
        assert usage["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
        assert usage["cache_creation_input_tokens"] == 0  # the last block is not marked
        assert usage["input_tokens"] == first["input_tokens"]


def _family_prompt(directive: bytes, changed_at: int | None = None) -> list[Block]:
    """System, then 30 shared message blocks (rules marked), then the child's directive."""
    shared = [
        Block("messages", f"messages[1].content[{n}]", b"x" if n == changed_at else b"%d" % n, 10)
        for n in range(30)
    ]
    shared[-1] = Block("messages", shared[-1].label, shared[-1].content, 10, "5m")
    return [
        Block("system", "system[0]", b"system", 200),
        *shared,
        Block("messages", "messages[1].content[30]", directive, 5, "5m"),
    ]


def test_a_known_stretch_gives_the_keys_and_accounting_of_a_block_by_block_reading() -> None:
    with_runs, plain = BlockCache(), BlockCache()
    rules = BlockRules(min_tokens=100)
    run = Run(start=1, stop=31, key="the family's head")
    for writer, directive in enumerate([b"one", b"two", b"three"]):
        prompt = _family_prompt(directive)
        fast = with_runs.evaluate("m", prompt, {}, rules, now=writer, writer=writer, runs=[run])
        slow = plain.evaluate("m", prompt, {}, rules, now=writer, writer=writer)
        assert fast == slow
        assert with_runs.layer_keys("m", prompt, {}) == plain.layer_keys("m", prompt, {})
        with_runs.store.publish(writer, at=writer)
        plain.store.publish(writer, at=writer)


def test_a_change_inside_a_long_stretch_is_named_where_it_happened() -> None:
    cache = BlockCache()
    rules = BlockRules(min_tokens=100)
    cache.evaluate("m", _family_prompt(b"one"), {}, rules, now=0, writer=1)
    cache.store.publish(1, at=0)
    changed = cache.evaluate("m", _family_prompt(b"one", changed_at=17), {}, rules, now=1, writer=2)
    outcome = changed.outcomes[-1]
    assert (outcome.reason, outcome.changed_at) == ("prefix_changed", "messages[1].content[17]")


async def _error(emulator: Emulator, body: Body) -> str:
    reply = await emulator.dispatch("POST", "/v1/messages", body)
    assert reply.status == 400, reply.body
    message: str = reply.body["error"]["message"]
    return message


@pytest.mark.parametrize("known", [False, True], ids=["first time", "after valid siblings"])
async def test_a_broken_turn_rule_in_a_long_message_is_the_apis_error(known: bool) -> None:
    emulator = Emulator(latency=NO_LATENCY)
    if known:  # the family's shapes are in the memo
        for n in range(3):
            await _send(emulator, _child(f"Part {n}."))

    unknown = _child("Part x.")
    stray = {**_results()[0], "tool_use_id": "toolu_99"}
    unknown["messages"][2]["content"].insert(5, stray)
    assert await _error(emulator, unknown) == (
        "messages.2.content.5: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_99. Each `tool_result` block must have a corresponding `tool_use` block in the "
        "previous message."
    )

    late = _child("Part x.")
    content = late["messages"][2]["content"]
    content[0], content[-2] = content[-2], content[0]  # the rules before a result
    assert await _error(emulator, late) == (
        "messages.2: `tool_result` blocks must come first in the content of a user message, "
        "before any other block."
    )

    missing = _child("Part x.", calls=[*_calls(), {**_calls()[0], "id": "toolu_extra"}])
    assert await _error(emulator, missing) == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_extra. Each `tool_use` block must have a corresponding `tool_result` block in "
        "the next message."
    )

    empty = _child("Part x.")
    empty["messages"][2]["content"][-1]["text"] = ""
    assert await _error(emulator, empty) == (
        f"messages.2.content.{CHILDREN + 1}.text: text content blocks must be non-empty"
    )


async def test_diagnostics_compare_long_messages_as_before() -> None:
    emulator = Emulator(latency=NO_LATENCY)
    first = await _send(emulator, _child("Part 0."))
    previous = {"previous_message_id": first["id"]}

    same = await _send(emulator, _child("Part 0.", diagnostics=previous))
    assert same["diagnostics"] is None

    settings = await _send(
        emulator, _child("Part 0.", diagnostics=previous, tool_choice={"type": "none"})
    )
    assert settings["diagnostics"]["cache_miss_reason"]["type"] == "unavailable"

    changed = _child("Part 0.", diagnostics=previous)
    changed["messages"][1]["content"][7]["input"] = {"part": "seven"}
    reply = await _send(emulator, changed)
    assert reply["diagnostics"]["cache_miss_reason"]["type"] == "messages_changed"
