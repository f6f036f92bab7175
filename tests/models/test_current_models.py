"""Defaults, aliases and documented model ids stay current; prices cover the current families."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forkagent.agent import DEFAULT_MODEL
from forkagent.agents.resolve import PROVIDER_TIERS
from forkagent.cli.config import FALLBACK_MODEL
from forkagent.demo import DEMO_MODEL
from forkagent.pricing import cost, price_for
from forkagent.usage import Usage

ROOT = Path(__file__).resolve().parents[2]


def deprecated() -> dict[str, str]:
    """The installed anthropic SDK's table of deprecated models and their end of life."""
    messages = pytest.importorskip("anthropic.resources.messages.messages")
    table: dict[str, str] = dict(getattr(messages, "DEPRECATED_MODELS", {}))
    return table


def model_id(spec: str) -> str:
    return spec.split(":", 1)[-1]


def test_defaults_and_alias_targets_are_not_deprecated() -> None:
    retired = deprecated()
    targets = {model_id(DEFAULT_MODEL), model_id(FALLBACK_MODEL), model_id(DEMO_MODEL)}
    targets |= {m for tiers in PROVIDER_TIERS.values() for m in tiers.values()}
    assert sorted(t for t in targets if t in retired) == []


def test_the_readme_and_docs_name_no_deprecated_model() -> None:
    retired = deprecated()
    named: dict[str, set[str]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for found in re.findall(r"claude-[a-z0-9.-]*[0-9]", path.read_text()):
            if found in retired:
                named.setdefault(found, set()).add(path.name)
    assert named == {}


@pytest.mark.parametrize(
    "model",
    [
        "anthropic:claude-opus-4-8",
        "anthropic:claude-sonnet-5-5",
        "anthropic:claude-haiku-5-5",
        "openai:gpt-5.2",
        "openai:gpt-5.4-mini",
        "gemini:gemini-2.5-pro",
        "dashscope:qwen-plus",
    ],
)
def test_current_families_are_priced(model: str) -> None:
    price = price_for(model)
    assert price is not None
    assert price.input > 0
    assert price.cache_read <= price.input


def test_an_unknown_model_costs_unknown_never_zero() -> None:
    assert price_for("anthropic:claude-nonexistent-9") is None
    assert cost("openai:not-a-model", Usage(input_tokens=1000)) is None
