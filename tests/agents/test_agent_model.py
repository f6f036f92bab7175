"""The model a named agent runs on: override order and provider-relative aliases."""

from __future__ import annotations

import pytest

from forkagent.agents import PROVIDER_TIERS, resolve_agent_model
from forkagent.errors import ConfigurationError

SONNET = "anthropic:claude-sonnet-4-6"

ORDER = [
    # env, call, definition, parent, expected
    (None, None, None, SONNET, SONNET),
    (None, None, "inherit", SONNET, SONNET),
    (None, None, "haiku", SONNET, "anthropic:claude-haiku-4-5"),
    (None, "opus", "haiku", SONNET, "anthropic:claude-opus-4-5"),
    ("haiku", "opus", "sonnet", "anthropic:claude-opus-4-5", "anthropic:claude-haiku-4-5"),
    ("inherit", "opus", "haiku", SONNET, SONNET),
    (None, "inherit", "haiku", SONNET, SONNET),
    ("", None, "haiku", SONNET, "anthropic:claude-haiku-4-5"),
    (None, "  ", "haiku", SONNET, "anthropic:claude-haiku-4-5"),
    ("openai:gpt-5", "opus", "haiku", SONNET, "openai:gpt-5"),
]


@pytest.mark.parametrize(("env", "call", "definition", "parent", "expected"), ORDER)
def test_override_order(
    env: str | None, call: str | None, definition: str | None, parent: str, expected: str
) -> None:
    environ = {} if env is None else {"FORKAGENT_SUBAGENT_MODEL": env}
    assert resolve_agent_model(definition, call, parent, env=environ) == expected


ALIASES = [
    ("haiku", "openai:gpt-5", "openai:gpt-5-mini"),
    ("Sonnet", "openai:gpt-5-mini", "openai:gpt-5"),
    ("flash", "gemini:gemini-2.5-pro", "gemini:gemini-2.5-flash"),
    ("pro", "gemini:gemini-2.5-flash", "gemini:gemini-2.5-pro"),
    ("opus", "deepseek:deepseek-chat", "deepseek:deepseek-reasoner"),
    ("sonnet", "dashscope:qwen-max", "dashscope:qwen-plus"),
    ("mini", "anthropic:claude-opus-4-5", "anthropic:claude-haiku-4-5"),
    ("haiku", "emulator:claude-sonnet-4-6", "emulator:claude-haiku-4-5"),
    ("haiku", "test:scripted", "test:scripted"),
    ("haiku", "vllm:llama-3-70b", "vllm:llama-3-70b"),
]


@pytest.mark.parametrize(("alias", "parent", "expected"), ALIASES)
def test_aliases_resolve_for_the_parents_provider(alias: str, parent: str, expected: str) -> None:
    assert resolve_agent_model(alias, None, parent, env={}) == expected


@pytest.mark.parametrize(
    ("choice", "parent", "expected"),
    [
        ("claude-opus-4-1", "emulator:claude-sonnet-4-6", "emulator:claude-opus-4-1"),
        ("gemini:gemini-2.5-pro", SONNET, "gemini:gemini-2.5-pro"),
        ("test:other", SONNET, "test:other"),
        ("qwen2.5:7b", "vllm:llama-3-70b", "vllm:qwen2.5:7b"),
    ],
)
def test_full_and_bare_ids(choice: str, parent: str, expected: str) -> None:
    assert resolve_agent_model(choice, None, parent, env={}) == expected


def test_every_provider_table_has_every_tier() -> None:
    for provider, tiers in PROVIDER_TIERS.items():
        assert set(tiers) == {"fast", "balanced", "strong"}, provider


def test_environment_is_read_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKAGENT_SUBAGENT_MODEL", "haiku")
    assert resolve_agent_model("opus", "opus", SONNET) == "anthropic:claude-haiku-4-5"


def test_parent_without_provider_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="provider:model"):
        resolve_agent_model("haiku", None, "claude-sonnet-4-6", env={})
