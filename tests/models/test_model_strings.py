"""``provider:model`` strings, credentials and base URLs from the environment."""

from __future__ import annotations

import pytest

from forkagent.emulator import Emulator, RunningServer
from forkagent.errors import ConfigurationError, MissingCredentialsError
from forkagent.messages import user
from forkagent.models import Model, resolve_model, split_base_url
from forkagent.models.anthropic import AnthropicModel
from forkagent.models.emulator import EmulatorModel
from forkagent.models.gemini import GeminiModel
from forkagent.models.openai import OpenAIModel
from forkagent.models.openai_responses import OpenAIResponsesModel
from forkagent.requests import ModelRequest


@pytest.mark.parametrize(
    ("spec", "kind", "provider"),
    [
        ("anthropic:claude-opus-4-1", AnthropicModel, "anthropic"),
        ("openai:gpt-4.1", OpenAIResponsesModel, "openai"),
        ("openai:gpt-3.5-turbo", OpenAIModel, "openai"),
        ("dashscope:qwen-plus", OpenAIModel, "dashscope"),
        ("deepseek:deepseek-chat", OpenAIModel, "deepseek"),
        ("vllm:Qwen/Qwen3-8B", OpenAIModel, "vllm"),
        ("sglang:Qwen/Qwen3-8B@http://10.0.0.5:30000/v1", OpenAIModel, "sglang"),
        ("llamacpp:local", OpenAIModel, "llamacpp"),
        ("openai-compat:m@https://llm.example/v1", OpenAIModel, "openai-compat"),
        ("gemini:gemini-2.5-flash", GeminiModel, "gemini"),
        ("emulator:claude-sonnet-4-6", EmulatorModel, "emulator"),
    ],
)
async def test_each_prefix_resolves(
    spec: str, kind: type[Model], provider: str, closing: list[Model]
) -> None:
    model = resolve_model(spec)
    closing.append(model)
    assert isinstance(model, kind)
    assert model.profile.provider == provider
    assert model.name == split_base_url(spec.partition(":")[2])[0]


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("anthropic:claude-opus-4-1", "ANTHROPIC_API_KEY"),
        ("openai:gpt-4.1", "OPENAI_API_KEY"),
        ("dashscope:qwen-plus", "DASHSCOPE_API_KEY"),
        ("deepseek:deepseek-chat", "DEEPSEEK_API_KEY"),
        ("gemini:gemini-2.5-flash", "GEMINI_API_KEY"),
    ],
)
def test_a_missing_key_fails_at_resolution_naming_the_variable(
    spec: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(variable)
    with pytest.raises(MissingCredentialsError, match=variable) as caught:
        resolve_model(spec)
    assert variable in caught.value.variable


def test_split_base_url() -> None:
    assert split_base_url("m@http://h:1/v1") == ("m", "http://h:1/v1")
    assert split_base_url("org/model@v2") == ("org/model@v2", None)
    assert split_base_url("llama3:8b") == ("llama3:8b", None)


def test_a_generic_server_needs_a_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="OPENAI_COMPAT_BASE_URL"):
        resolve_model("openai-compat:m")
    monkeypatch.setenv("OPENAI_COMPAT_BASE_URL", "http://127.0.0.1:9/v1")
    assert resolve_model("openai-compat:m").name == "m"


@pytest.mark.parametrize(
    ("spec", "variable", "suffix"),
    [
        ("anthropic:claude-opus-4-1", "ANTHROPIC_BASE_URL", ""),
        ("openai:gpt-4.1", "OPENAI_BASE_URL", "/v1"),
        ("dashscope:qwen-plus", "DASHSCOPE_BASE_URL", "/v1"),
        ("deepseek:deepseek-chat", "DEEPSEEK_BASE_URL", "/v1"),
        ("gemini:gemini-2.5-flash", "GOOGLE_GEMINI_BASE_URL", ""),
    ],
)
async def test_base_urls_come_from_the_environment(
    spec: str,
    variable: str,
    suffix: str,
    emulator: Emulator,
    server: RunningServer,
    monkeypatch: pytest.MonkeyPatch,
    closing: list[Model],
) -> None:
    monkeypatch.setenv(variable, server.url + suffix)
    model = resolve_model(spec)
    closing.append(model)
    reply = await model.request(ModelRequest(model=model.name, messages=(user("hi"),)))
    assert reply.message.text == "Understood: hi"


async def test_a_base_url_in_the_model_string(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    model = resolve_model(f"vllm:gpt-4.1@{server.url}/v1")
    closing.append(model)
    reply = await model.request(ModelRequest(model=model.name, messages=(user("hi"),)))
    assert reply.message.text == "Understood: hi"
