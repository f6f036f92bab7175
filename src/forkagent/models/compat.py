"""OpenAI-compatible servers: DashScope (Qwen), DeepSeek, vLLM, SGLang, llama.cpp, any base URL.

Each is a ``ChatDialect`` of the Chat Completions adapter. Model strings take
an optional base URL after ``@``: ``vllm:Qwen/Qwen3-8B@http://10.0.0.5:8000/v1``.
Without one, the dialect's ``*_BASE_URL`` variable, then its default, is used;
``openai-compat:`` has no default and needs one of the two. A model's ``spec``
names its server whenever it is not the default, so it resolves back to it.

Settings in ``ModelSettings.extra`` go into the request body unchanged, which
is how the engines' own cache controls are reached: vLLM ``cache_salt``,
llama.cpp ``id_slot`` and ``cache_prompt``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .._spec import split_base_url
from ..errors import ConfigurationError
from .openai import ChatDialect, OpenAIModel

DASHSCOPE = ChatDialect(
    provider="dashscope",
    default_base_url="https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
    cache_markers=True,
    warmup="first_response_ends",
    min_cache_tokens=1024,
)
"""Explicit cache: markers at the same places as Anthropic's; readable once the writer's reply ends."""

DEEPSEEK_CACHE_DELAY = 2.0
"""Seconds after a reply ends before DeepSeek's disk cache serves its prefix: DeepSeek says the
cache takes "a few seconds" to build; the emulator models the same delay (``deepseek_build_delay``)."""

DEEPSEEK = ChatDialect(
    provider="deepseek",
    default_base_url="https://api.deepseek.com",
    reasoning_field="reasoning_content",
    warmup="first_response_ends",
    cache_visible_after=DEEPSEEK_CACHE_DELAY,
    min_cache_tokens=64,
)
"""Automatic disk cache in 64-token units, built after the reply; thinking goes back in tool loops."""

VLLM = ChatDialect(
    provider="vllm",
    key_required=False,
    default_base_url="http://localhost:8000/v1",
    min_cache_tokens=16,
)
"""Automatic prefix caching over full KV blocks (16 tokens by default), shared within a batch."""

SGLANG = ChatDialect(
    provider="sglang",
    key_required=False,
    default_base_url="http://localhost:30000/v1",
    min_cache_tokens=1,
)
"""Radix-tree prefix cache at token granularity, shared within a batch."""

LLAMACPP = ChatDialect(
    provider="llamacpp",
    key_required=False,
    default_base_url="http://localhost:8080/v1",
    warmup="first_response_ends",
)
"""A slot reuses its KV for the common prefix, once its previous request has finished."""

OPENAI_COMPAT = ChatDialect(
    provider="openai-compat",
    key_required=False,
    warmup="first_response_ends",
)
"""Any other Chat Completions server; assumes nothing about its cache."""


def _factory(dialect: ChatDialect) -> Callable[[str], OpenAIModel]:
    def make(name: str) -> OpenAIModel:
        model, url = split_base_url(name)
        if url is None and dialect.default_base_url is None:
            variable = dialect.endpoint.base_url_variable
            if not os.environ.get(variable):
                raise ConfigurationError(
                    f"{dialect.provider}:{name} needs a base URL: write "
                    f"'{dialect.provider}:{model}@http://host:port/v1' or set {variable}"
                )
        return OpenAIModel(model, dialect=dialect, base_url=url)

    make.__doc__ = f"``{dialect.provider}:<model>[@<base url>]``."
    return make


dashscope_model = _factory(DASHSCOPE)
deepseek_model = _factory(DEEPSEEK)
vllm_model = _factory(VLLM)
sglang_model = _factory(SGLANG)
llamacpp_model = _factory(LLAMACPP)
openai_compat_model = _factory(OPENAI_COMPAT)

__all__ = [
    "DASHSCOPE",
    "DEEPSEEK",
    "LLAMACPP",
    "OPENAI_COMPAT",
    "SGLANG",
    "VLLM",
]
