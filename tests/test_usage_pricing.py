"""Usage arithmetic and prices: cache reads and writes apart, an unknown price stays unknown."""

from __future__ import annotations

import pytest

from forkagent.pricing import PRICES, cost, price_for
from forkagent.usage import Usage


def test_addition_sums_every_counter() -> None:
    a = Usage(
        input_tokens=1,
        output_tokens=2,
        cache_read_tokens=3,
        cache_write_5m_tokens=4,
        cache_write_1h_tokens=5,
        requests=1,
    )
    b = Usage(
        input_tokens=10,
        output_tokens=20,
        cache_read_tokens=30,
        cache_write_5m_tokens=40,
        cache_write_1h_tokens=50,
        requests=2,
    )
    assert a + b == Usage(
        input_tokens=11,
        output_tokens=22,
        cache_read_tokens=33,
        cache_write_5m_tokens=44,
        cache_write_1h_tokens=55,
        requests=3,
    )
    assert a + Usage() == a
    assert sum((a, b), Usage()) == a + b


def test_totals_and_cache_ratio() -> None:
    usage = Usage(
        input_tokens=10,
        cache_read_tokens=80,
        cache_write_5m_tokens=6,
        cache_write_1h_tokens=4,
        output_tokens=7,
    )
    assert usage.cache_write_tokens == 10
    assert usage.prompt_tokens == 100
    assert usage.total_tokens == 107
    assert usage.cache_hit_ratio == pytest.approx(0.8)


def test_cache_ratio_is_none_before_any_prompt() -> None:
    assert Usage().cache_hit_ratio is None
    assert Usage(output_tokens=5).cache_hit_ratio is None
    assert Usage(input_tokens=5).cache_hit_ratio == 0.0


def test_usage_is_immutable() -> None:
    with pytest.raises(ValueError, match="frozen"):
        Usage().input_tokens = 1  # type: ignore[misc]


def test_unknown_model_cost_is_none_never_zero() -> None:
    assert price_for("test:echo") is None
    assert cost("test:echo", Usage(input_tokens=1000)) is None
    assert cost("no-such-model", Usage()) is None  # not 0.0, even for no tokens


def test_known_model_cost() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_tokens=1_000_000,
        cache_write_5m_tokens=1_000_000,
        cache_write_1h_tokens=1_000_000,
    )
    # Sonnet 4.5: $3 in, $15 out, read 0.1x, write 1.25x (5m) and 2x (1h).
    assert cost("claude-sonnet-4-6", usage) == pytest.approx(3 + 15 + 0.3 + 3.75 + 6)
    assert cost("claude-sonnet-4-6", Usage()) == 0.0


@pytest.mark.parametrize(
    "model",
    [
        "claude-sonnet-4-6",
        "claude-sonnet-4-6-20250929",
        "anthropic:claude-sonnet-4-6",
        "anthropic:claude-sonnet-4-6-20250929",
        "emulator:claude-sonnet-4-6",
    ],
)
def test_provider_prefix_and_date_suffix_resolve(model: str) -> None:
    assert price_for(model) == PRICES["claude-sonnet-4-6"]


def test_a_date_suffix_does_not_match_a_different_model() -> None:
    assert price_for("claude-sonnet-4-6-2025") is None
    assert price_for("claude-sonnet-4") is None


def test_cache_reads_are_cheaper_than_writes() -> None:
    # OpenAI, Gemini and DeepSeek bill writes as plain input; DashScope has one TTL.
    for price in PRICES.values():
        assert price.cache_read < price.input <= price.cache_write_5m <= price.cache_write_1h


def test_input_equivalents() -> None:
    price = PRICES["claude-haiku-4-5"]
    assert price.input_equivalents(Usage(input_tokens=10, cache_read_tokens=100)) == pytest.approx(
        20
    )
