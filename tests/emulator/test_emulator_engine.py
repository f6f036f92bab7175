"""Unit tests of the cache engines, the tokenizer and the model tables, in process."""

from __future__ import annotations

import pytest

from forkagent.emulator import tokens
from forkagent.emulator.cache import (
    Block,
    BlockCache,
    BlockRules,
    PrefixCache,
    PrefixRules,
    Segment,
    _Chain,
)
from forkagent.emulator.profiles import anthropic_min_tokens, chat_profile, gemini_min_tokens

RULES = BlockRules(min_tokens=100)


def blocks(*sizes: int, marks: tuple[int, ...] = (), tag: str = "") -> list[Block]:
    layers = ["system"] + ["messages"] * (len(sizes) - 1)
    return [
        Block(layers[i], f"b{i}", f"{tag}{i}:{n}".encode(), n, "5m" if i in marks else None)  # type: ignore[arg-type]
        for i, n in enumerate(sizes)
    ]


def test_write_then_read_after_publish() -> None:
    cache = BlockCache()
    first = cache.evaluate("m", blocks(150, 10, marks=(1,)), {}, RULES, now=0, writer=1)
    assert (first.read_tokens, first.written_tokens, first.outcomes[0].reason) == (0, 160, "cold")
    pending = cache.evaluate("m", blocks(150, 10, marks=(1,)), {}, RULES, now=0, writer=2)
    assert pending.outcomes[0].reason == "not_yet_visible"
    cache.store.publish(1, at=0)
    cache.store.publish(2, at=0)
    hit = cache.evaluate("m", blocks(150, 10, marks=(1,)), {}, RULES, now=1, writer=3)
    assert (hit.read_tokens, hit.written_tokens, hit.outcomes[0].status) == (160, 0, "read")


def test_abandoned_writes_vanish() -> None:
    cache = BlockCache()
    cache.evaluate("m", blocks(150, marks=(0,)), {}, RULES, now=0, writer=1)
    cache.store.abandon(1)
    again = cache.evaluate("m", blocks(150, marks=(0,)), {}, RULES, now=0, writer=2)
    assert again.read_tokens == 0


def test_prefix_changed_names_the_block() -> None:
    cache = BlockCache()
    cache.evaluate("m", blocks(150, 10, 10, marks=(2,)), {}, RULES, now=0, writer=1)
    cache.store.publish(1, at=0)
    changed = [*blocks(150, 10), Block("messages", "b2", b"other", 10, "5m")]
    result = cache.evaluate("m", changed, {}, RULES, now=1, writer=2)
    assert (result.outcomes[0].reason, result.outcomes[0].changed_at) == ("prefix_changed", "b2")


def test_seeds_invalidate_from_their_layer_on() -> None:
    cache = BlockCache()
    cache.evaluate("m", blocks(150, 10, marks=(0, 1)), {"messages": b"a"}, RULES, now=0, writer=1)
    cache.store.publish(1, at=0)
    result = cache.evaluate(
        "m", blocks(150, 10, marks=(0, 1)), {"messages": b"b"}, RULES, now=1, writer=2
    )
    assert (result.read_tokens, result.written_tokens) == (150, 10)


def test_multiple_breakpoints_split_writes_by_ttl() -> None:
    cache = BlockCache()
    parts = blocks(150, 40, 10, marks=(0, 2))
    parts[0] = Block("system", "b0", b"0", 150, "1h")
    result = cache.evaluate("m", parts, {}, RULES, now=0, writer=1)
    assert dict(result.written) == {"1h": 150, "5m": 50}
    assert result.cached_prefix_tokens == 200


def test_only_the_last_breakpoints_count() -> None:
    cache = BlockCache()
    result = cache.evaluate(
        "m", blocks(150, 1, 1, 1, 1, marks=(0, 1, 2, 3, 4)), {}, RULES, now=0, writer=1
    )
    assert [o.position for o in result.outcomes] == [1, 2, 3, 4]


def test_prefix_cache_units_and_minimum() -> None:
    cache = PrefixCache()
    rules = PrefixRules(min_tokens=128, unit=64, ttl=60)
    prompt = [Segment("s", "system", tuple(range(300)))]
    first = cache.evaluate("n", prompt, rules, now=0, writer=1)
    assert (first.read_tokens, first.written_tokens) == (0, 256)
    cache.store.publish(1, at=0)
    longer = [Segment("s", "system", tuple(range(300))), Segment("u", "messages", (7,) * 100)]
    second = cache.evaluate("n", longer, rules, now=1, writer=2)
    assert second.read_tokens == 256
    assert (
        cache.evaluate("n", [Segment("s", "system", (1,) * 100)], rules, now=1, writer=3)
        .outcomes[0]
        .reason
        == "below_minimum"
    )
    assert cache.evaluate("n", prompt, rules, now=100, writer=4).outcomes[0].reason == "expired"


def test_tokenizer_is_o200k() -> None:
    assert tokens.encode("hello world") == (24912, 2375)
    assert tokens.count("") == 0
    assert "".join(tokens.pieces("one two  three\nfour ")) == "one two  three\nfour "
    assert tokens.count(tokens.truncate("a b c d e f", 3)) == 3


@pytest.mark.parametrize(
    ("model", "minimum"),
    [
        ("claude-sonnet-4-5", 1024),
        ("claude-sonnet-4-5-20250929", 1024),
        ("claude-opus-4-1", 1024),
        ("claude-opus-4-20250514", 1024),
        ("claude-sonnet-4-0", 1024),
        ("claude-3-7-sonnet-latest", 1024),
        ("claude-sonnet-4-6", 2048),
        ("claude-3-5-haiku-20241022", 2048),
        ("claude-opus-4-6", 4096),
        ("claude-opus-4-8", 4096),
        ("claude-haiku-4-5-20251001", 4096),
        ("claude-sonnet-5-5", 4096),
        ("claude-mythos-5", 4096),
    ],
)
def test_anthropic_minimum_table(model: str, minimum: int) -> None:
    """Rule: minimum cacheable prefix by model id, with a documented default for unknown ones."""
    assert anthropic_min_tokens(model) == minimum


def test_profiles_by_model_id() -> None:
    assert [chat_profile(m) for m in ("gpt-5", "qwen-plus", "deepseek-chat", "o3")] == [
        "openai",
        "dashscope",
        "deepseek",
        "openai",
    ]
    assert (gemini_min_tokens("gemini-2.5-flash"), gemini_min_tokens("models/gemini-2.5-pro")) == (
        1024,
        4096,
    )


def test_a_chains_counts_follow_what_comes_before_it() -> None:
    """A family's stretch keeps its counts shifted once; another start shifts them again."""
    chain = _Chain(keys=(b"a", b"b", b"c"), tokens=(2, 5, 9))
    assert chain.tokens_after(100) == (102, 105, 109)
    assert chain.tokens_after(100) is chain.tokens_after(100)  # kept for the siblings
    assert chain.tokens_after(0) == (2, 5, 9)
    assert chain.tokens_after(100) == (102, 105, 109)
