"""Fork or fresh? What each would cost, before spawning (LESSONS 6).

A fork re-sends the parent's whole prefix: cheap when the cache holds it,
expensive when cold. A fresh agent sends only its own prompt, tools and task.
Costs are in input-token equivalents at the model's prices (an unknown price
falls back to Anthropic's multipliers, which the estimate says). Both send
the same directive, so it is left out of both.

The prefix size and the cache state come from what the provider reported for
the parent's last request, not from rendering it again: its prompt plus its
reply is what a child re-sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..models.base import ModelProfile
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
    fresh_prompt_tokens: int,
    profile: ModelProfile,
) -> ForkEstimate:
    """Compare one fork child's shared prefix with a fresh agent's prompt."""
    found = price_for(snapshot.model) if snapshot else None
    price: Price = found or _FALLBACK_PRICE
    prefix = _prefix_tokens(snapshot, last_usage)
    warm = cache_warm(last_usage, price, profile)
    per_token = (price.cache_read if warm else price.cache_write_5m) / price.input
    fresh_cost = float(fresh_prompt_tokens)
    return ForkEstimate(prefix, warm, prefix * per_token, fresh_cost, found is not None)


def _prefix_tokens(snapshot: ModelRequest | None, usage: Usage | None) -> int:
    """The parent's last prompt and reply as the provider counted them; else from its bytes."""
    if usage is not None and usage.prompt_tokens:
        return usage.prompt_tokens + usage.output_tokens
    return estimate_tokens(len(snapshot.canonical_bytes())) if snapshot else 0


def cache_warm(usage: Usage | None, price: Price, profile: ModelProfile) -> bool:
    """Whether the parent's last request left its prompt in the cache.

    Providers with a write premium (Anthropic, DashScope's explicit cache)
    report what they wrote, so read plus written must reach the minimum.
    The others (OpenAI, Gemini, DeepSeek) cache every long enough prompt on
    their own and report no writes: a prompt at or above the minimum is warm.
    """
    if usage is None or not profile.caches:
        return False
    if price.cache_write_5m > price.input:
        cached = usage.cache_read_tokens + usage.cache_write_tokens
        return cached > 0 and cached >= profile.min_cache_tokens
    return usage.prompt_tokens >= max(profile.min_cache_tokens, 1)


def allows_fork(policy: ForkPolicy, estimate: ForkEstimate | None) -> bool:
    """``always`` forks, ``never`` does not, ``when_cheaper`` follows ``estimate``."""
    if policy == "when_cheaper":
        return estimate is not None and estimate.fork_is_cheaper
    return policy == "always"
