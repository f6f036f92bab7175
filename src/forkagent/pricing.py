"""Prices per model, and cost of a usage. An unknown price is ``None``, never 0."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .usage import Usage

_DATE_SUFFIX = re.compile(r"-\d{8}$")

PRICES_AS_OF = "2026-11-01"
PRICES_SOURCE = "the providers' public pricing pages, USD per million tokens"


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write_5m: float
    cache_write_1h: float

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_5m_tokens * self.cache_write_5m
            + usage.cache_write_1h_tokens * self.cache_write_1h
        ) / 1_000_000

    def input_equivalents(self, usage: Usage) -> float:
        """Usage as a count of full-price input tokens (output excluded)."""
        return (
            usage.input_tokens * self.input
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_5m_tokens * self.cache_write_5m
            + usage.cache_write_1h_tokens * self.cache_write_1h
        ) / self.input


def anthropic_price(input: float, output: float) -> Price:
    """Anthropic's multipliers: write 5m 1.25x, write 1h 2x, read 0.1x."""
    return Price(input, output, input * 0.1, input * 1.25, input * 2)


PRICES: dict[str, Price] = {
    "claude-opus-4-5": anthropic_price(5, 25),
    "claude-opus-4-1": anthropic_price(15, 75),
    "claude-sonnet-4-5": anthropic_price(3, 15),
    "claude-sonnet-4-6": anthropic_price(3, 15),
    "claude-haiku-4-5": anthropic_price(1, 5),
}


def price_for(model: str) -> Price | None:
    """Price of a model id, with or without a ``provider:`` prefix or a date suffix."""
    name = _DATE_SUFFIX.sub("", model.split(":", 1)[-1])
    return PRICES.get(name)


def cost(model: str, usage: Usage) -> float | None:
    price = price_for(model)
    return None if price is None else price.cost(usage)
