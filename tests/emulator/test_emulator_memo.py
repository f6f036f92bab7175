"""Per-block work is remembered by content: repeats are cheap, and never stale.

The emulator keeps what it derives from a block (canonical bytes, tokens,
validity) under a key that is the block's content, so a request that repeats
a block reuses the work, and a block whose content changed, even in the same
dict object, is derived and checked again.
"""

from __future__ import annotations

import json
import marshal
from fractions import Fraction
from typing import Any

import pytest
from _emu_helpers import OPUS_41, text

from forkagent.emulator import Emulator, tokens
from forkagent.emulator import memo as memo_module
from forkagent.emulator.anthropic_api import _counted, _Prompt
from forkagent.emulator.memo import Memo, content_key, forget_everything, head_key, one_request
from forkagent.emulator.timing import NO_LATENCY

Body = dict[str, Any]


def _body(blocks: list[Body], question: str = "And?") -> Body:
    content = [*blocks, {"type": "text", "text": question, "cache_control": {"type": "ephemeral"}}]
    return {
        "model": OPUS_41,
        "max_tokens": 32,
        "messages": [{"role": "user", "content": content}],
    }


async def _usage(emulator: Emulator, body: Body) -> Body:
    reply = await emulator.dispatch("POST", "/v1/messages", body)
    assert reply.status == 200, reply.body
    usage: Body = reply.body["usage"]
    return usage


async def test_repeated_blocks_are_billed_as_the_first_time() -> None:
    blocks = [{"type": "text", "text": text(20, f"part {n}")} for n in range(100)]
    fresh = await _usage(Emulator(latency=NO_LATENCY), _body(blocks))
    emulator = Emulator(latency=NO_LATENCY)
    first = await _usage(emulator, _body(blocks))
    again = await _usage(emulator, _body([dict(b) for b in blocks]))  # equal copies
    assert first == fresh
    assert again["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert again["input_tokens"] == first["input_tokens"]


@pytest.mark.parametrize("blocks", [2, 20], ids=["short message", "long message"])
async def test_a_block_changed_in_place_is_counted_again(blocks: int) -> None:
    """Long messages are also remembered by all but their last block: a change there counts."""
    emulator = Emulator(latency=NO_LATENCY)
    content = [{"type": "text", "text": text(1200 // blocks, f"part {n}")} for n in range(blocks)]
    first = await _usage(emulator, _body(content))
    content[0]["text"] = text(1500 // blocks, "changed")  # same dict object, new content
    second = await _usage(emulator, _body(content))
    total = first["cache_creation_input_tokens"] + first["input_tokens"]
    grown = 1500 // blocks - 1200 // blocks
    assert second["cache_creation_input_tokens"] + second["input_tokens"] == total + grown
    assert second["cache_read_input_tokens"] == 0  # the changed block breaks the prefix


@pytest.mark.parametrize("blocks", [1, 20], ids=["short message", "long message"])
async def test_a_block_made_invalid_in_place_is_rejected(blocks: int) -> None:
    emulator = Emulator(latency=NO_LATENCY)
    content: list[Body] = [{"type": "text", "text": f"fine {n}"} for n in range(blocks)]
    for _ in range(3):  # seen again and again: remembered as valid
        await _usage(emulator, _body(content))
    content[0]["text"] = 7
    reply = await emulator.dispatch("POST", "/v1/messages", _body(content))
    assert reply.status == 400
    assert "messages.0.content.0.text: Input should be a valid string" in str(reply.body)


async def test_true_and_one_are_different_content() -> None:
    emulator = Emulator(latency=NO_LATENCY)
    call = {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"deep": True}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": text(1200)}
    history = [
        {"role": "user", "content": "Look."},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{**result, "cache_control": {"type": "ephemeral"}}]},
    ]
    body = {"model": OPUS_41, "max_tokens": 32, "messages": history}
    assert (await _usage(emulator, body))["cache_creation_input_tokens"] > 0
    call["input"] = {"deep": 1}
    assert (await _usage(emulator, body))["cache_read_input_tokens"] == 0


def test_content_key_tells_json_values_apart() -> None:
    values: list[Any] = [True, 1, 1.0, "1", None, [1], {"a": 1}, {"a": True}, {"a": "1"}]
    assert len({content_key(v) for v in values}) == len(values)
    assert content_key({"a": 1, "b": 2}) != content_key({"b": 2, "a": 1})  # order is content


def test_head_key_tells_json_values_apart_and_keeps_equal_heads_together() -> None:
    values: list[Any] = [True, 1, 1.0, "1", None, [1], {"a": 1}, {"a": True}, {"a": "1"}]
    heads = [[*[{"n": n} for n in range(9)], value, "last"] for value in values]
    assert len({head_key(head) for head in heads}) == len(values)
    assert head_key([{"a": 1}, 2, "x"]) == head_key([{"a": 1}, 2, "y"])  # the last is left out
    assert head_key([{"a": 1, "b": 2}, 0]) != head_key([{"b": 2, "a": 1}, 0])  # order is content


def test_head_key_of_a_value_that_is_not_json_still_tells_it_apart() -> None:
    """An in-process caller's own object: keyed another way, not an error."""
    assert head_key([Fraction(1, 2), 0]) != head_key([Fraction(1, 3), 0])
    assert head_key([Fraction(1, 2), 0]) == head_key([Fraction(1, 2), 1])


def _frozen_key(items: list[Any]) -> bytes:
    with one_request(frozen=True):
        return head_key(items)


def _content_of(key: bytes) -> str:
    """The JSON text of the head a (marshal) key stands for: types and key order included."""
    assert key.startswith(b"m")
    return json.dumps(marshal.loads(key[1:]))


def test_a_frozen_head_is_known_by_its_objects_and_told_apart_by_its_content() -> None:
    """A frozen request's long list that starts with the objects of a recent one gets that
    one's key without being encoded; an object that differs is compared by content."""
    forget_everything()
    items: list[Any] = [{"n": n, "text": f"part {n}"} for n in range(12)]
    variants: dict[str, list[Any]] = {
        "the same objects": items,
        "an equal copy of one": [*items[:4], dict(items[4]), *items[5:]],
        "an equal copy of each": [dict(item) for item in items],
        "true for 1": [*items[:4], {"n": True, "text": "part 4"}, *items[5:]],
        "keys reordered": [*items[:4], {"text": "part 4", "n": 4}, *items[5:]],
        "one more at the end": [*items, {"n": 12}],
    }
    first = _frozen_key([*items, "mine"])
    for name, head in variants.items():
        key = _frozen_key([*head, f"last of {name}"])
        assert _content_of(key) == json.dumps(head), name
        assert (key == first) == (json.dumps(head) == json.dumps(items)), name


async def test_a_frozen_fork_family_is_billed_as_when_read_afresh() -> None:
    """Children sharing the objects of a long reply and its placeholder results (as the
    models send them, frozen) get exactly the usage of the same bodies read by content."""
    calls = [
        {"type": "tool_use", "id": f"toolu_{n}", "name": "look", "input": {"n": n}}
        for n in range(12)
    ]
    results = [
        {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "Forked."}
        for n in range(12)
    ]
    rules = {"type": "text", "text": text(1500, "rules"), "cache_control": {"type": "ephemeral"}}
    changed_call = [*calls[:3], {**calls[3], "input": {"n": True}}, *calls[4:]]
    changed_result = [*results[:5], {**results[5], "content": "Changed."}, *results[6:]]
    children: list[tuple[list[Body], list[Body]]] = [
        (calls, [*results, rules]),
        (calls, [*results, rules]),
        (calls, [*results, dict(rules)]),  # a marker made per child: an equal copy
        (changed_call, [*results, rules]),
        (calls, [*changed_result, rules]),
        ([dict(c) for c in calls], [dict(r) for r in results] + [dict(rules)]),
    ]

    def body(n: int, reply: list[Body], head: list[Body]) -> Body:
        messages = [
            {"role": "user", "content": "Look at each part."},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": [*head, {"type": "text", "text": f"Take part {n}."}]},
        ]
        return {"model": OPUS_41, "max_tokens": 32, "messages": messages}

    async def usages(frozen: bool) -> list[Body]:
        forget_everything()
        emulator = Emulator(latency=NO_LATENCY)
        found = []
        for n, (reply, head) in enumerate(children):
            sent = await emulator.dispatch(
                "POST", "/v1/messages", body(n, reply, head), frozen=frozen
            )
            assert sent.status == 200, sent.body
            found.append(sent.body["usage"])
        return found

    frozen = await usages(frozen=True)
    assert frozen == await usages(frozen=False)
    assert frozen[1]["cache_read_input_tokens"] > 0  # the second child read the first's prefix
    assert frozen[3]["cache_read_input_tokens"] < frozen[1]["cache_read_input_tokens"]


@pytest.mark.parametrize(
    ("path", "model", "limit"),
    [
        ("/v1/messages", OPUS_41, "max_tokens"),
        ("/v1/chat/completions", "gpt-5", "max_completion_tokens"),
    ],
)
async def test_a_frozen_list_with_one_new_invalid_object_is_rejected(
    path: str, model: str, limit: str
) -> None:
    """Known by its objects, a list is still read where an object is not one of them."""
    emulator = Emulator(latency=NO_LATENCY)
    parts: list[Body] = [{"type": "text", "text": f"part {n}"} for n in range(12)]

    def body(content: list[Body]) -> Body:
        return {
            "model": model,
            limit: 32,
            "messages": [{"role": "user", "content": content}],
        }

    for _ in range(2):
        assert (
            await emulator.dispatch("POST", path, body([*parts, parts[0]]), frozen=True)
        ).status == 200
    broken = [*parts[:5], {"type": "text", "text": 7}, *parts[6:], parts[0]]
    assert (await emulator.dispatch("POST", path, body(broken), frozen=True)).status == 400


def test_memo_is_bounded_by_its_keys_size_oldest_out() -> None:
    memo: Memo[int] = Memo(max_chars=16)
    for n in range(6):
        memo.keep(f"key{n}", 4, n)
    assert len(memo) == 4  # 16 characters kept
    assert [memo.find(f"key{n}") for n in range(6)] == [None, None, 2, 3, 4, 5]
    memo.keep("huge", 5, 7)  # over a quarter of the budget: not kept
    assert memo.find("huge") is None
    assert memo.find("key2") == 2


def test_memo_with_second_sight_keeps_a_value_only_for_content_that_comes_again() -> None:
    memo: Memo[int] = Memo(second_sight=True)
    memo.keep("message", 7, 1)
    assert memo.find("message") is None  # only noted
    memo.keep("message", 7, 2)
    assert memo.find("message") == 2


async def test_forget_everything_leaves_the_process_as_fresh_and_usage_unchanged() -> None:
    """What the throughput bench calls between its two runs of the same requests."""
    blocks = [{"type": "text", "text": text(20, f"part {n}")} for n in range(20)]
    first = await _usage(Emulator(latency=NO_LATENCY), _body(blocks))
    assert tokens.encode.cache_info().currsize > 0
    assert any(len(memo) for memo in list(memo_module._MEMOS))
    forget_everything()
    assert tokens.encode.cache_info().currsize == 0
    assert all(len(memo) == 0 for memo in list(memo_module._MEMOS))
    assert await _usage(Emulator(latency=NO_LATENCY), _body(blocks)) == first


def test_a_long_messages_kept_head_and_last_block_lay_out_as_block_by_block() -> None:
    """The head path (kept blocks, then the last one's) gives the prompt the blocks and marks
    of the same message read block by block, in order."""
    forget_everything()
    shared = [{"type": "text", "text": f"part {n}"} for n in range(12)]
    for last in ("first", "second", "third"):  # the head is kept from its second sight on
        body = _body(shared, last)
        with one_request(frozen=True):
            prompt = _Prompt.parse(body)
        content = body["messages"][0]["content"]
        whole = _counted(0, "user", content, 0)
        assert list(prompt.blocks) == list(whole.blocks)
        assert prompt.marks == whole.marked == (len(content) - 1,)
        assert prompt.runs[0].stop == len(content) - 1
