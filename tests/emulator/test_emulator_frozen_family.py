"""A frozen fork family costs the emulator O(1) per child, and reads as if read afresh.

The N children of a reply with N tool calls each send that reply's list of calls (the
same object, frozen) and a new last message starting with the family's N placeholder
results. What the emulator derives from those long lists once (their type check, the
turn rules' id sets, the cache keys it notes as seen) is reused; these tests
hold the outcome of every request equal to the same requests read by content, in a
process whose memos start empty, so a reuse that went stale would show.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Any

from _emu_helpers import OPUS_41, text

from forkagent.emulator import EmulatedRequest, Emulator, Reply
from forkagent.emulator.anthropic_api import _Prompt
from forkagent.emulator.memo import forget_everything
from forkagent.emulator.timing import NO_LATENCY, Latency

Body = dict[str, Any]
CALLS = 12


def _calls() -> list[Body]:
    return [
        {"type": "tool_use", "id": f"toolu_{n}", "name": "Agent", "input": {"n": n}}
        for n in range(CALLS)
    ]


def _results(ids: list[str]) -> list[Body]:
    return [{"type": "tool_result", "tool_use_id": i, "content": "Forked."} for i in ids]


def _child(reply: list[Any], head: list[Any], n: int) -> Body:
    last = [
        *head,
        {"type": "text", "text": f"Take part {n}.", "cache_control": {"type": "ephemeral"}},
    ]
    return {
        "model": OPUS_41,
        "max_tokens": 32,
        "messages": [
            {"role": "user", "content": "Split the work."},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": last},
        ],
    }


async def _outcomes(
    bodies: list[Body], *, frozen: bool, lenient: bool = False
) -> list[tuple[int, object]]:
    """Each reply's status and body (its usage, or its error), memos empty at the start."""
    forget_everything()
    emulator = Emulator(latency=NO_LATENCY, lenient=lenient)
    found: list[tuple[int, object]] = []
    for body in bodies:
        reply = await emulator.dispatch("POST", "/v1/messages", body, frozen=frozen)
        found.append((reply.status, reply.body.get("usage") or reply.body.get("error")))
    return found


async def test_a_family_breaking_the_turn_rules_is_told_apart_from_its_valid_siblings() -> None:
    """The reply's id set and the placeholders' are tested once per pair of sets; a child
    whose results are another set (one missing, one unknown) is tested again."""
    reply = _calls()
    ids = [c["id"] for c in reply]
    placeholders = _results(ids)
    rules = {"type": "text", "text": text(1500, "rules")}
    heads = [
        [*placeholders, rules],
        [*placeholders, rules],
        [*placeholders[:-1], rules],  # a call without its result
        [*placeholders, *_results(["toolu_unknown"]), rules],  # a result without its call
        [*placeholders, rules],
    ]
    bodies = [_child(reply, head, n) for n, head in enumerate(heads)]
    frozen = await _outcomes(bodies, frozen=True)
    assert frozen == await _outcomes(bodies, frozen=False)
    assert [status for status, _ in frozen] == [200, 200, 400, 400, 200]
    assert "without `tool_result` blocks" in str(frozen[2])
    assert "unexpected `tool_use_id`" in str(frozen[3])


async def test_a_new_list_with_an_item_that_is_no_block_is_rejected_after_known_ones() -> None:
    """Without the schema (lenient), the type check of a message's blocks rejects it: a
    list whose head or last item is no block, after lists that start alike were valid."""
    reply = _calls()
    placeholders = _results([c["id"] for c in reply])
    broken: list[Any] = [*placeholders[:-1], "not a block"]
    bodies = [
        _child(reply, placeholders, 0),
        _child(reply, placeholders, 1),
        _child(reply, broken, 2),
        _child([*reply[:-1], "not a block"], placeholders, 3),
    ]
    frozen = await _outcomes(bodies, frozen=True, lenient=True)
    assert frozen == await _outcomes(bodies, frozen=False, lenient=True)
    assert [status for status, _ in frozen] == [200, 200, 400, 400]
    assert all("a list of content blocks" in str(error) for _, error in frozen[2:])


async def test_a_miss_after_a_stretch_known_from_another_emulator_is_placed_where_it_is() -> None:
    """Each emulator notes every key it was sent, those of a stretch another emulator hashed
    first (the running keys of a frozen stretch are kept process-wide) included: a change
    after the stretch is explained at the changed block, as in a process that never saw it."""
    blocks = [{"type": "text", "text": text(200, f"part {n}")} for n in range(30)]

    def body(last: str) -> Body:
        content = [*blocks, {"type": "text", "text": last, "cache_control": {"type": "ephemeral"}}]
        return {
            "model": OPUS_41,
            "max_tokens": 32,
            "messages": [
                {"role": "user", "content": "Read the parts."},
                {"role": "assistant", "content": "Send them."},
                {"role": "user", "content": content},  # a stretch inside the messages' layer
            ],
        }

    async def explained(warm_elsewhere: bool) -> list[object]:
        forget_everything()
        if warm_elsewhere:
            first = Emulator(latency=NO_LATENCY)
            await first.dispatch("POST", "/v1/messages", body("First."), frozen=True)
        emulator = Emulator(latency=NO_LATENCY)
        for last in ("First.", "Second."):
            reply = await emulator.dispatch("POST", "/v1/messages", body(last), frozen=True)
            assert reply.status == 200, reply.body
        return [(b.reason, b.changed_at) for entry in emulator.log for b in entry.breakpoints]

    warm = await explained(warm_elsewhere=True)
    assert warm == await explained(warm_elsewhere=False)
    assert warm[-1] == ("prefix_changed", "messages[2].content[30]")


async def test_a_request_holds_no_parsed_prompt_while_its_response_is_on_its_way() -> None:
    """The blocks are let go once the cache is accounted: N children of one reply waiting
    for their responses do not each hold O(N) of them."""
    accounted = asyncio.Event()

    def policy(request: EmulatedRequest) -> Reply:
        accounted.set()
        return Reply(text="Done.")

    emulator = Emulator(latency=Latency(ttft=30.0), policy=policy)
    reply = _calls()
    body = _child(reply, _results([c["id"] for c in reply]), 0)
    gc.collect()
    before = _prompts()  # another test's, still referenced, are not this request's (and kept
    # here, no new prompt can take one of their ids)
    sent = asyncio.create_task(emulator.dispatch("POST", "/v1/messages", body))
    await accounted.wait()  # the request is now waiting out its time to first token
    gc.collect()  # only what is still referenced stays
    assert {id(p) for p in _prompts()} <= {id(p) for p in before}
    sent.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sent


def _prompts() -> list[object]:
    return [o for o in gc.get_objects() if type(o) is _Prompt]
