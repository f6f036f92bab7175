"""Prices per model, and cost of a usage. An unknown price is ``None``, never 0."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ._spec import split_base_url
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


def cached_read_price(input: float, output: float, cache_read: float) -> Price:
    """Providers without a write premium: written tokens cost what input costs."""
    return Price(input, output, cache_read, input, input)


def dashscope_price(input: float, output: float) -> Price:
    """DashScope's explicit cache: write 1.25x, read 0.1x; it has no 1-hour TTL."""
    return Price(input, output, input * 0.1, input * 1.25, input * 1.25)


PRICE_SOURCES: dict[str, str] = {
    "anthropic": "https://docs.anthropic.com/en/docs/about-claude/pricing",
    "openai": "https://platform.openai.com/docs/pricing (standard tier)",
    "gemini": "https://ai.google.dev/gemini-api/docs/pricing (paid tier, prompts up to 200k tokens; "
    "explicit-cache storage per hour is not included)",
    "deepseek": "https://api-docs.deepseek.com/quick_start/pricing",
    "dashscope": "https://www.alibabacloud.com/help/en/model-studio/models (international, "
    "lowest input tier)",
}
"""Where each group of rows below comes from."""

PRICES: dict[str, Price] = {
    # Anthropic
    "claude-opus-4-6": anthropic_price(5, 25),
    "claude-opus-4-5": anthropic_price(5, 25),
    "claude-opus-4-1": anthropic_price(15, 75),
    "claude-opus-4-0": anthropic_price(15, 75),
    "claude-sonnet-4-6": anthropic_price(3, 15),
    "claude-sonnet-4-5": anthropic_price(3, 15),
    "claude-sonnet-4-0": anthropic_price(3, 15),
    "claude-3-7-sonnet": anthropic_price(3, 15),
    "claude-haiku-4-5": anthropic_price(1, 5),
    "claude-3-5-haiku": anthropic_price(0.8, 4),
    # OpenAI (cache writes carry no premium on these models)
    "gpt-5.1": cached_read_price(1.25, 10, 0.125),
    "gpt-5": cached_read_price(1.25, 10, 0.125),
    "gpt-5-mini": cached_read_price(0.25, 2, 0.025),
    "gpt-5-nano": cached_read_price(0.05, 0.4, 0.005),
    "gpt-4.1": cached_read_price(2, 8, 0.5),
    "gpt-4.1-mini": cached_read_price(0.4, 1.6, 0.1),
    "gpt-4.1-nano": cached_read_price(0.1, 0.4, 0.025),
    "gpt-4o": cached_read_price(2.5, 10, 1.25),
    "gpt-4o-mini": cached_read_price(0.15, 0.6, 0.075),
    "o3": cached_read_price(2, 8, 0.5),
    "o4-mini": cached_read_price(1.1, 4.4, 0.275),
    # Google Gemini 2.5
    "gemini-2.5-pro": cached_read_price(1.25, 10, 0.125),
    "gemini-2.5-flash": cached_read_price(0.3, 2.5, 0.03),
    "gemini-2.5-flash-lite": cached_read_price(0.1, 0.4, 0.01),
    # DeepSeek (V3.2 behind both names)
    "deepseek-chat": cached_read_price(0.28, 0.42, 0.028),
    "deepseek-reasoner": cached_read_price(0.28, 0.42, 0.028),
    # Alibaba Qwen on DashScope
    "qwen-max": dashscope_price(1.6, 6.4),
    "qwen-plus": dashscope_price(0.4, 1.2),
    "qwen-turbo": dashscope_price(0.05, 0.2),
}


def price_for(model: str) -> Price | None:
    """Price of a model id, with or without a ``provider:`` prefix, server or date suffix.

    ``PRICES`` first (our overrides, and DashScope, which genai-prices lacks), then the
    genai-prices package's bundled snapshot (never its network update), so new model
    families are priced without a release of ours. An unknown model is None, never 0.
    """
    name = _price_name(model)
    return PRICES.get(name) or _from_genai_prices(name)


@lru_cache(maxsize=256)
def _price_name(model: str) -> str:
    """The id prices are kept under; cached, as every response is priced (``PRICES`` is not)."""
    return _DATE_SUFFIX.sub("", split_base_url(model.split(":", 1)[-1])[0])


_GENAI_PROVIDERS = (("claude-", "anthropic"), ("gemini-", "google"), ("deepseek-", "deepseek"))


@lru_cache(maxsize=256)
def _from_genai_prices(name: str) -> Price | None:
    provider = next((p for prefix, p in _GENAI_PROVIDERS if name.startswith(prefix)), None)
    if provider is None and re.match(r"(gpt-|o\d)", name):
        provider = "openai"
    if provider is None:
        return None
    try:
        import genai_prices

        calculation = genai_prices.calc_price(
            genai_prices.Usage(input_tokens=0), model_ref=name, provider_id=provider
        )
    except (ImportError, LookupError):
        return None
    if calculation.model.id != name:
        return None  # its fuzzy match (``claude-sonnet-4`` -> 4.0): a price for another model
    found = calculation.model_price
    if found.input_mtok is None or found.output_mtok is None:
        return None
    base = _base(found.input_mtok)
    read = _base(found.cache_read_mtok) if found.cache_read_mtok is not None else base
    write = _base(found.cache_write_mtok) if found.cache_write_mtok is not None else base
    write_1h = _base(found.cache_write_1h_mtok) if found.cache_write_1h_mtok is not None else write
    return Price(base, _base(found.output_mtok), read, write, write_1h)


def _base(value: object) -> float:
    """A price, or the first tier of tiered prices (prompts under the tier boundary)."""
    return float(getattr(value, "base", value))  # type: ignore[arg-type]


def suggest_model(model: str) -> str | None:
    """The priced model id closest to ``model``'s (a typo like ``claude-sonet-4-5``), if any."""
    import difflib

    provider, _, name = model.rpartition(":")
    found = difflib.get_close_matches(name, PRICES, n=1, cutoff=0.8)
    if not found:
        return None
    return f"{provider}:{found[0]}" if provider else found[0]


def cost(model: str, usage: Usage) -> float | None:
    price = price_for(model)
    return None if price is None else price.cost(usage)
