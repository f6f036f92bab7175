"""A model's ``spec`` resolves back to the same model: provider, model id and server, never a key.

Transcripts and the registry keep ``model.spec``, and ``resume`` resolves it,
so a spec that dropped its ``@<base url>`` sent a resumed agent to the
default server instead of the one it ran on.
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from forkagent import Agent, Session
from forkagent.agent import DEFAULT_MODEL
from forkagent.emulator import Emulator, RunningServer
from forkagent.errors import ConfigurationError
from forkagent.models import anthropic, gemini, known_providers, resolve_model
from forkagent.models._adapter import AdapterModel
from forkagent.models._transport import Endpoint
from forkagent.models.compat import DASHSCOPE, DEEPSEEK, LLAMACPP, OPENAI_COMPAT, SGLANG, VLLM
from forkagent.models.openai import OPENAI, OpenAIModel
from forkagent.pricing import price_for
from forkagent.state.registry import Registry
from forkagent.state.transcript import read_transcript

SECRET = "sk-secret-never-in-a-spec"

ENDPOINTS: dict[str, Endpoint] = {
    "anthropic": anthropic.ENDPOINT,
    "gemini": gemini.ENDPOINT,
    **{d.provider: d.endpoint for d in (OPENAI, DASHSCOPE, DEEPSEEK, VLLM, SGLANG, LLAMACPP)},
    OPENAI_COMPAT.provider: OPENAI_COMPAT.endpoint,
}
"""Every provider whose models reach a server through an SDK."""

MODEL_IDS = st.text(string.ascii_letters + string.digits + "-._/:@", min_size=1, max_size=24)
SERVERS = st.builds(
    "{}://{}:{}{}".format,
    st.sampled_from(["http", "https"]),
    st.sampled_from(["10.0.0.5", "gpu-3.internal", "localhost"]),
    st.sampled_from([8000, 8080, 30000, 443]),
    st.sampled_from(["", "/v1", "/api/v1"]),
)
DEFAULTS = st.sampled_from([e.default_base_url for e in ENDPOINTS.values() if e.default_base_url])
URLS = st.none() | SERVERS | DEFAULTS


def set_endpoint(env: pytest.MonkeyPatch, endpoint: Endpoint, base_url: str | None) -> None:
    """A key in the provider's variable, and its base URL variable set or cleared."""
    env.setenv(endpoint.key_variables[0], SECRET)
    if base_url:
        env.setenv(endpoint.base_url_variable, base_url)
    else:
        env.delenv(endpoint.base_url_variable, raising=False)


# Each model builds an SDK client (about 30 ms, its TLS context): few examples, the key ones fixed.
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example("vllm", "Qwen/Qwen3-8B", "http://10.0.0.5:8000/v1", None)
@example("openai-compat", "m", None, "https://llm.internal/v1")
@example("llamacpp", "local", "http://localhost:8080/v1", "http://10.0.0.5:8080/v1")
@example("anthropic", "claude-3-5-sonnet@20240620", "https://proxy.internal", None)
@given(
    provider=st.sampled_from(sorted(ENDPOINTS)),
    model_id=MODEL_IDS.filter(lambda s: "@http" not in s),
    in_string=URLS,
    in_env=URLS,
)
async def test_a_spec_resolves_to_the_same_model_in_another_shell(
    provider: str, model_id: str, in_string: str | None, in_env: str | None
) -> None:
    """Made from a string with or without ``@url``, under ``*_BASE_URL`` or not, then resolved
    from its spec where no base URL variable is set (a resume elsewhere)."""
    endpoint = ENDPOINTS[provider]
    model_string = f"{provider}:{model_id}" + (f"@{in_string}" if in_string else "")
    with pytest.MonkeyPatch.context() as env:
        set_endpoint(env, endpoint, in_env)
        if provider == "openai-compat" and not (in_string or in_env):
            with pytest.raises(ConfigurationError, match="needs a base URL"):
                resolve_model(model_string)
            return
        first = resolve_model(model_string)
    with pytest.MonkeyPatch.context() as env:
        set_endpoint(env, endpoint, None)
        again = resolve_model(first.spec)
    await first.aclose()
    await again.aclose()

    server = in_string or in_env
    assert isinstance(first, AdapterModel)
    assert isinstance(again, AdapterModel)
    assert first.name == model_id
    assert first.base_url == (None if server == endpoint.default_base_url else server)
    assert SECRET not in first.spec
    assert (type(again), again.profile, again.name, again.base_url, again.spec) == (
        type(first),
        first.profile,
        first.name,
        first.base_url,
        first.spec,
    )


OTHER_PROVIDERS = ["emulator:claude-sonnet-4-6", "emulator:gpt-4.1", "test:echo"]


@pytest.mark.parametrize("model_string", OTHER_PROVIDERS)
async def test_models_without_a_server_keep_their_string(model_string: str) -> None:
    model = resolve_model(model_string)
    again = resolve_model(model.spec)
    await model.aclose()
    await again.aclose()
    assert model.spec == model_string
    assert (type(again), again.profile, again.name) == (type(model), model.profile, model.name)


def test_every_provider_is_covered() -> None:
    covered = {*ENDPOINTS, *(s.partition(":")[0] for s in OTHER_PROVIDERS)}
    assert covered == set(known_providers())


async def test_a_constructed_model_names_its_server_but_not_its_key() -> None:
    model = OpenAIModel("Qwen/Qwen3-8B", dialect=VLLM, api_key=SECRET, base_url="http://gpu:1/v1")
    await model.aclose()
    assert model.spec == "vllm:Qwen/Qwen3-8B@http://gpu:1/v1"


@pytest.mark.parametrize(
    "model_string",
    ["vllm:m@http://user:pw@gpu-3:8000/v1", "anthropic:claude-opus-4-6@https://me:pw@proxy"],
)
def test_a_base_url_holding_credentials_is_refused(model_string: str) -> None:
    with pytest.raises(ConfigurationError, match="credentials") as caught:
        resolve_model(model_string)
    assert "pw" not in str(caught.value)


def test_a_malformed_base_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="Invalid IPv6 URL"):
        resolve_model("vllm:m@http://[::1/v1")


def test_credentials_in_a_base_url_variable_are_refused_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_BASE_URL", "http://user:pw@gpu-3:8000/v1")
    with pytest.raises(ConfigurationError, match="VLLM_API_KEY"):
        resolve_model("vllm:m")


def test_a_spec_with_a_server_is_priced_as_its_model() -> None:
    assert price_for("openai:gpt-4.1@https://proxy.internal/v1") == price_for("gpt-4.1")
    assert price_for("gpt-4.1") is not None


def plain_agent(cwd: Path, model: str = DEFAULT_MODEL) -> Agent:
    return Agent(model=model, cwd=cwd, load_agent_files=False, builtin_tools=False, subagents=False)


async def test_a_resumed_agent_calls_the_server_it_ran_on(
    emulator: Emulator,
    server: RunningServer,
    tmp_path: Path,
    sleeps: list[float],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run on a Chat Completions server named in the model string; resume from the transcript
    with an agent that names no model: the turn goes to that server again. The key the
    server was given is in neither the transcript nor the registry."""
    monkeypatch.setenv("VLLM_API_KEY", SECRET)
    spec = f"vllm:gpt-4.1@{server.url}/v1"
    first = await plain_agent(tmp_path, model=spec).run("Check the build")
    record = Registry().get(first.agents[0].id)
    assert record.transcript is not None
    assert (record.model, read_transcript(record.transcript).header.model) == (spec, spec)
    assert SECRET not in record.transcript.read_text()
    sent_before = len(emulator.log)

    resumed = Session.resume(plain_agent(tmp_path), record.transcript)
    async with resumed as session:
        reply = await session.send("And the tests?")

    assert reply.output == "Understood: And the tests?"
    assert len(emulator.log) == sent_before + 1
    assert emulator.log.last.model == "gpt-4.1"
    assert not sleeps, "nothing was retried"
