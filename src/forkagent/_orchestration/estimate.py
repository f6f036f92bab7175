"""Fork or fresh? What each would cost, before spawning (LESSONS 6).

A fork re-sends the parent's whole prefix: cheap when the cache holds it,
expensive when cold. A fresh agent sends only its own prompt, tools and task.
Costs are in input-token equivalents at the model's prices (an unknown price
falls back to Anthropic's multipliers, which the estimate says).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..pricing import Price, anthropic_price, price_for
from ..requests import ModelRequest
from ..usage import Usage

ForkPolicy = Literal["always", "never", "when_cheaper"]

_FALLBACK_PRICE = anthropic_price(1, 1)


def estimate_tokens(n_bytes: int) -> int:
    """About four bytes a token, good enough to compare two options."""
    return (n_bytes + 3) // 4


@dataclass(frozen=True, slots=True)
class ForkEstimate:
    prefix_tokens: int
    cache_warm: bool
    fork_cost: float
    fresh_cost: float
    priced: bool
    """False when the model's price is unknown and default multipliers were used."""

    @property
    def fork_is_cheaper(self) -> bool:
        return self.fork_cost <= self.fresh_cost

    def summary(self) -> str:
        state = "warm" if self.cache_warm else "cold"
        basis = "" if self.priced else " (unknown price: default cache multipliers)"
        return (
            f"fork ~{self.fork_cost:,.0f} vs fresh agent ~{self.fresh_cost:,.0f} "
            f"input-token equivalents; shared prefix ~{self.prefix_tokens:,} tokens, "
            f"cache {state}{basis}"
        )


def estimate_fork(
    snapshot: ModelRequest | None,
    last_usage: Usage | None,
    *,
    directive_tokens: int,
    fresh_prompt_tokens: int,
    min_cache_tokens: int = 0,
) -> ForkEstimate:
    """Compare one fork child with one fresh agent doing the same directive.

    The cache is taken as warm when the parent's last request read or wrote
    at least as much as the model's minimum: the prefix sits in the cache.
    """
    prefix = estimate_tokens(len(snapshot.canonical_bytes())) if snapshot else 0
    found = price_for(snapshot.model) if snapshot else None
    price: Price = found or _FALLBACK_PRICE
    cached = (last_usage.cache_read_tokens + last_usage.cache_write_tokens) if last_usage else 0
    warm = cached > 0 and cached >= min_cache_tokens
    per_token = (price.cache_read if warm else price.cache_write_5m) / price.input
    fork_cost = prefix * per_token + directive_tokens
    fresh_cost = float(fresh_prompt_tokens + directive_tokens)
    return ForkEstimate(prefix, warm, fork_cost, fresh_cost, found is not None)


def allows_fork(policy: ForkPolicy, estimate: ForkEstimate) -> bool:
    return policy == "always" or (policy == "when_cheaper" and estimate.fork_is_cheaper)
