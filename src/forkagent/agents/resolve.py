"""Which model and which tools a named agent gets.

Model: ``FORKAGENT_SUBAGENT_MODEL`` > the call's ``model`` > the definition's
``model`` > the parent's model. The first of these that is set decides;
``inherit`` means the parent's exact model string. An alias names a tier
(fast, balanced, strong) that is looked up for the *parent's* provider, so
``haiku`` under an OpenAI parent is OpenAI's fast model, not a Claude. An
alias or a bare model id also stays on the parent's server (the ``@<base url>``
of its string); a full ``provider:model`` string is taken as written.

A fork never comes through here: it reuses the parent's model and tool array
byte for byte, or it would lose the parent's prompt cache.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, TypeAlias

from ..errors import ConfigurationError
from ..models import known_providers, split_base_url
from ..permissions.filters import tool_named
from ..tools.base import Tool
from .definition import INHERIT, AgentDefinition

SUBAGENT_MODEL_ENV = "FORKAGENT_SUBAGENT_MODEL"

Tier: TypeAlias = Literal["fast", "balanced", "strong"]

MODEL_ALIASES: dict[str, Tier] = {
    "fast": "fast",
    "balanced": "balanced",
    "strong": "strong",
    # Anthropic families
    "haiku": "fast",
    "sonnet": "balanced",
    "opus": "strong",
    # OpenAI, Gemini and Qwen families
    "nano": "fast",
    "mini": "fast",
    "flash": "fast",
    "turbo": "fast",
    "plus": "balanced",
    "pro": "strong",
    "max": "strong",
}
"""Alias (case-insensitive) -> tier."""

_CLAUDE_TIERS: dict[Tier, str] = {
    "fast": "claude-haiku-4-5",
    "balanced": "claude-sonnet-4-6",
    "strong": "claude-opus-4-6",
}

PROVIDER_TIERS: dict[str, dict[Tier, str]] = {
    "anthropic": _CLAUDE_TIERS,
    "emulator": _CLAUDE_TIERS,
    "openai": {"fast": "gpt-5-mini", "balanced": "gpt-5", "strong": "gpt-5.1"},
    "gemini": {
        "fast": "gemini-2.5-flash",
        "balanced": "gemini-2.5-pro",
        "strong": "gemini-2.5-pro",
    },
    "deepseek": {
        "fast": "deepseek-chat",
        "balanced": "deepseek-chat",
        "strong": "deepseek-reasoner",
    },
    "dashscope": {"fast": "qwen-flash", "balanced": "qwen-plus", "strong": "qwen-max"},
}
"""Provider -> tier -> model id. A provider missing here (``test``, a local
server, one you registered) keeps the parent's model for every alias."""

log = logging.getLogger("forkagent.agents")


def resolve_agent_model(
    definition_model: str | None,
    call_model: str | None,
    parent_model: str,
    env: Mapping[str, str] = os.environ,
) -> str:
    """The full ``provider:model`` string a named agent runs on."""
    for choice in (env.get(SUBAGENT_MODEL_ENV), call_model, definition_model):
        if choice and choice.strip():
            return _resolve_one(choice.strip(), parent_model)
    return parent_model


def _resolve_one(choice: str, parent_model: str) -> str:
    provider, sep, _ = parent_model.partition(":")
    if not sep:
        raise ConfigurationError(
            f"the parent's model {parent_model!r} is not of the form 'provider:model'"
        )
    if choice.lower() == INHERIT:
        return parent_model
    tier = MODEL_ALIASES.get(choice.lower())
    if tier is not None:
        tiers = PROVIDER_TIERS.get(provider)
        return _on_parents_server(tiers[tier], parent_model) if tiers else parent_model
    prefix, sep, _ = choice.partition(":")
    if sep and (prefix in PROVIDER_TIERS or prefix in known_providers()):
        return choice
    return _on_parents_server(choice, parent_model)


def _on_parents_server(model_id: str, parent_model: str) -> str:
    """``model_id`` at the parent's provider and, unless it names its own, the parent's server."""
    provider, _, parent_id = parent_model.partition(":")
    _, parent_url = split_base_url(parent_id)
    _, url = split_base_url(model_id)
    server = f"@{parent_url}" if parent_url and not url else ""
    return f"{provider}:{model_id}{server}"


class ToolPool(list[Tool]):
    """The tools a named agent may use, plus the listed names nothing provides."""

    def __init__(self, tools: Iterable[Tool], unknown: Iterable[str] = ()) -> None:
        super().__init__(tools)
        self.unknown = tuple(unknown)


def assemble_tool_pool(definition: AgentDefinition, available: Sequence[Tool]) -> ToolPool:
    """The ``available`` tools the definition allows, in ``available``'s order.

    A listed name that no available tool has is left out and reported in
    ``ToolPool.unknown`` (and logged): a definition written for Claude Code may
    list tools this agent lacks, and the agent should still start.
    """
    pool = ToolPool(
        (t for t in available if definition.allows_tool(t.name)),
        unknown=_unknown_names(definition.tools or (), available),
    )
    if pool.unknown:
        log.warning(
            "agent %r lists tools that are not available: %s",
            definition.name,
            ", ".join(pool.unknown),
        )
    return pool


def _unknown_names(listed: Iterable[str], available: Sequence[Tool]) -> list[str]:
    names = [t.name for t in available]
    return [n for n in listed if not any(tool_named(name, (n,)) for name in names)]
