"""The model a named agent runs on: override order, aliases per provider, the parent's server."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkagent import Agent
from forkagent.agents import PROVIDER_TIERS, AgentDefinition, resolve_agent_model
from forkagent.emulator import Emulator, Latency, Reply, ToolCall, serve
from forkagent.errors import ConfigurationError

SONNET = "anthropic:claude-sonnet-4-6"

ORDER = [
    # env, call, definition, parent, expected
    (None, None, None, SONNET, SONNET),
    (None, None, "inherit", SONNET, SONNET),
    (None, None, "haiku", SONNET, "anthropic:claude-haiku-4-5"),
    (None, "opus", "haiku", SONNET, "anthropic:claude-opus-4-6"),
    ("haiku", "opus", "sonnet", "anthropic:claude-opus-4-6", "anthropic:claude-haiku-4-5"),
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
    ("mini", "anthropic:claude-opus-4-6", "anthropic:claude-haiku-4-5"),
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


GPU = "http://10.0.0.5:8000/v1"


@pytest.mark.parametrize(
    ("choice", "parent", "expected"),
    [
        ("qwen2.5:7b", f"vllm:llama-3-70b@{GPU}", f"vllm:qwen2.5:7b@{GPU}"),
        ("inherit", f"vllm:llama-3-70b@{GPU}", f"vllm:llama-3-70b@{GPU}"),
        ("haiku", f"vllm:llama-3-70b@{GPU}", f"vllm:llama-3-70b@{GPU}"),
        (
            "mini",
            "openai:gpt-5@https://proxy.internal/v1",
            "openai:gpt-5-mini@https://proxy.internal/v1",
        ),
        ("small@http://10.0.0.6:8000/v1", f"vllm:big@{GPU}", "vllm:small@http://10.0.0.6:8000/v1"),
        ("vllm:small", f"vllm:big@{GPU}", "vllm:small"),
        (
            "claude@20240620",
            "anthropic:claude-opus-4-6@https://p",
            "anthropic:claude@20240620@https://p",
        ),
    ],
)
def test_a_bare_id_or_alias_stays_on_the_parents_server(
    choice: str, parent: str, expected: str
) -> None:
    assert resolve_agent_model(choice, None, parent, env={}) == expected


async def test_a_named_child_reaches_the_parents_server(tmp_path: Path) -> None:
    """A parent on a Chat Completions server named in its model string spawns a named agent
    whose definition names only a model id: the child's requests go to that server too."""
    checker = AgentDefinition(
        name="checker", description="Checks.", system_prompt="Check.", model="gpt-4.1-mini"
    )
    emulator = Emulator(latency=Latency(ttft=0.001, tokens_per_second=1e6))
    spawn = ToolCall("Agent", {"prompt": "check the build", "subagent_type": "checker"})
    emulator.script(Reply(tool_calls=(spawn,)), match="Go")
    with serve(emulator) as server:
        agent = Agent(
            model=f"vllm:gpt-4.1@{server.url}/v1",
            cwd=tmp_path,
            agents=[checker],
            builtin_tools=False,
            load_agent_files=False,
        )
        result = await agent.run("Go")

    [child] = [a for a in result.agents if a.kind == "named"]
    assert child.model == f"vllm:gpt-4.1-mini@{server.url}/v1"
    assert child.status == "completed"
    served = [(entry.model, entry.status) for entry in emulator.log]
    assert ("gpt-4.1-mini", 200) in served
