"""Per-provider cache parameters, chosen by model id.

The numbers come from the providers' documentation of their caches; where they do
not publish one (TTLs of best-effort caches, unit sizes), the value here is
the emulator's choice and is documented in ``docs/emulator.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

ChatProfile: TypeAlias = Literal["openai", "dashscope", "deepseek"]

ANTHROPIC_DEFAULT_MIN_TOKENS = 4096
"""For ids the table does not know (the 5.x families and later): the newest
documented families (Opus 4.5+, Haiku 4.5) need 4096, and assuming the highest
minimum never promises a cache hit the provider would not give."""

_ANTHROPIC_MIN_TOKENS: dict[tuple[str, int, int], int] = {
    ("sonnet", 4, 5): 1024,
    ("opus", 4, 0): 1024,
    ("opus", 4, 1): 1024,
    ("sonnet", 4, 0): 1024,
    ("sonnet", 3, 7): 1024,
    ("sonnet", 4, 6): 2048,
    ("haiku", 3, 5): 2048,
    ("haiku", 4, 5): 4096,
}
_NEW_STYLE = re.compile(r"^claude-(opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?$")
_OLD_STYLE = re.compile(r"^claude-(\d+)-(\d+)-(opus|sonnet|haiku)$")
_DATED = re.compile(r"-(\d{8}|latest)$")


ANTHROPIC_FRAMING_TOKENS = 7
"""Tokens the Messages API adds around every request (the turn markers and the opening of
the reply), after the last block so never cached. Anthropic's token-counting example
(system "You are a scientist", user "Hello, Claude": 14 input tokens) leaves 7 beyond the
text."""
_TOOL_PROMPT_TOKENS: dict[tuple[str, int, int], tuple[int, int]] = {
    ("opus", 3, 0): (530, 281),
    ("sonnet", 3, 0): (159, 235),
    ("haiku", 3, 0): (264, 340),
    ("haiku", 3, 5): (264, 340),
}
_TOOL_PROMPT_DEFAULT = (346, 313)
"""Claude 4 and later, Sonnet 3.7 and 3.5: Anthropic's tool-use pricing table."""


def _anthropic_family(model: str) -> tuple[str, int, int] | None:
    name = _DATED.sub("", model)
    if match := _NEW_STYLE.match(name):
        return (match[1], int(match[2]), int(match[3] or 0))
    if match := _OLD_STYLE.match(name):
        return (match[3], int(match[1]), int(match[2]))
    return None


def anthropic_tool_prompt_tokens(model: str, *, forced: bool) -> int:
    """The tool-use system prompt the API adds when a request has tools, by model and by
    tool choice (``auto``/``none``, or a forced ``any``/``tool``)."""
    family = _anthropic_family(model)
    free, forcing = (
        _TOOL_PROMPT_TOKENS.get(family, _TOOL_PROMPT_DEFAULT) if family else _TOOL_PROMPT_DEFAULT
    )
    return forcing if forced else free


def anthropic_min_tokens(model: str) -> int:
    """Minimum cacheable prefix for a Claude model id (dated and ``-latest`` ids too)."""
    family = _anthropic_family(model)
    if family is None:
        return ANTHROPIC_DEFAULT_MIN_TOKENS
    if family[0] == "opus" and (family[1], family[2]) >= (4, 5):
        return 4096
    return _ANTHROPIC_MIN_TOKENS.get(family, ANTHROPIC_DEFAULT_MIN_TOKENS)


def chat_profile(model: str) -> ChatProfile:
    """Which OpenAI-compatible provider's cache rules apply to a model id."""
    if model.startswith("qwen"):
        return "dashscope"
    if model.startswith("deepseek"):
        return "deepseek"
    return "openai"


def gemini_min_tokens(model: str) -> int:
    """Gemini's implicit/explicit cache minimum: 4096 for Pro, 1024 otherwise.

    Google's current table says 4096 for 2.5 Pro and 3 Pro, 1024 for the Flash
    models; older pages said 2048 for Pro.
    """
    return 4096 if "pro" in model.removeprefix("models/") else 1024


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """Knobs of the best-effort caches whose exact values providers do not publish."""

    openai_ttl: float = 600.0
    """In-memory retention: entries live 10 minutes past their last use."""
    openai_extended_ttl: float = 24 * 3600.0
    """``prompt_cache_retention: "24h"``."""
    openai_requests_per_minute: int | None = 15
    """Requests per minute one routing key (``prompt_cache_key`` + first 256 tokens)
    keeps on one cache machine; more overflow to cold machines. ``None``: never."""
    deepseek_ttl: float = 6 * 3600.0
    deepseek_build_delay: float = 2.0
    """Seconds after a response ends before DeepSeek's disk cache serves its prefix."""
    dashscope_implicit_ttl: float = 300.0
    gemini_implicit_ttl: float = 300.0
    gemini_explicit_ttl: float = 3600.0
    """Default lifetime of a ``cachedContents`` entry without ``ttl``/``expireTime``."""
