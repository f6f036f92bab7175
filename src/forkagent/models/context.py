"""How many tokens a model reads and writes at most: the limits compaction works against.

From the providers' model pages (2026-11). The longest matching prefix wins,
so a dated or server-suffixed id finds its family; an unknown model has no
known window and is never compacted on its own (``Session.compact()`` still works).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._spec import split_base_url


@dataclass(frozen=True, slots=True)
class ContextLimits:
    window: int
    """Prompt plus output tokens one request may hold."""
    max_output: int


_LIMITS: dict[str, ContextLimits] = {
    "claude-opus-4": ContextLimits(200_000, 32_000),
    "claude-sonnet-4": ContextLimits(200_000, 64_000),
    "claude-haiku-4": ContextLimits(200_000, 64_000),
    "claude-sonnet-5": ContextLimits(1_000_000, 128_000),
    "claude-haiku-5": ContextLimits(200_000, 64_000),
    "claude-3-7-sonnet": ContextLimits(200_000, 64_000),
    "claude-3-5-haiku": ContextLimits(200_000, 8_192),
    "gpt-5": ContextLimits(400_000, 128_000),
    "gpt-4.1": ContextLimits(1_047_576, 32_768),
    "gpt-4o": ContextLimits(128_000, 16_384),
    "o3": ContextLimits(200_000, 100_000),
    "o4-mini": ContextLimits(200_000, 100_000),
    "gemini-2.5": ContextLimits(1_048_576, 65_536),
    "gemini-3": ContextLimits(1_048_576, 65_536),
    "qwen3": ContextLimits(131_072, 16_384),
    "qwen-plus": ContextLimits(131_072, 16_384),
    "qwen-max": ContextLimits(32_768, 8_192),
    "deepseek-chat": ContextLimits(128_000, 8_192),
    "deepseek-reasoner": ContextLimits(128_000, 64_000),
}


def context_limits(model: str) -> ContextLimits | None:
    """The limits of a model id (with or without ``provider:`` and ``@server``), if known."""
    name = split_base_url(model.split(":", 1)[-1])[0]
    matches = [prefix for prefix in _LIMITS if name.startswith(prefix)]
    return _LIMITS[max(matches, key=len)] if matches else None
