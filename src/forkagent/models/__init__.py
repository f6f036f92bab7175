"""Models: the protocol, the provider registry and ``provider:model`` strings.

Adapters register a factory under a provider prefix; importing an adapter's
SDK happens only when a model of that provider is resolved.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable

from .._spec import split_base_url
from ..errors import UnknownModelError
from ._retry import RetryPolicy
from .base import (
    Model,
    ModelProfile,
    ModelResponse,
    ResponseComplete,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseStarted,
)

ModelFactory = Callable[[str], Model]

_factories: dict[str, ModelFactory] = {}
_lazy: dict[str, str] = {
    # prefix -> "module:function(model_name) -> Model"
    "test": "forkagent.models.function:test_model",
    "anthropic": "forkagent.models.anthropic:anthropic_model",
    "openai": "forkagent.models.openai_responses:openai_model",
    "dashscope": "forkagent.models.compat:dashscope_model",
    "deepseek": "forkagent.models.compat:deepseek_model",
    "vllm": "forkagent.models.compat:vllm_model",
    "sglang": "forkagent.models.compat:sglang_model",
    "llamacpp": "forkagent.models.compat:llamacpp_model",
    "openai-compat": "forkagent.models.compat:openai_compat_model",
    "gemini": "forkagent.models.gemini:gemini_model",
    "emulator": "forkagent.models.emulator:emulator_model",
}


def register_provider(prefix: str, factory: ModelFactory) -> None:
    """Make ``prefix:<model>`` strings resolve through ``factory``."""
    _factories[prefix] = factory


def register_lazy_provider(prefix: str, target: str) -> None:
    """Like ``register_provider`` but imports ``module:function`` on first use."""
    _lazy[prefix] = target


def known_providers() -> list[str]:
    return sorted({*_factories, *_lazy})


def resolve_model(model: str | Model) -> Model:
    """Turn ``provider:model`` into a model; a ``Model`` passes through.

    ``resolve_model(m.spec)`` rebuilds any model a string can make: same
    provider, model id and server (``@<base url>``). A spec never holds a key.
    """
    if isinstance(model, Model):
        return model
    prefix, sep, name = model.partition(":")
    if not sep or not name:
        raise UnknownModelError(
            f"model {model!r} is not of the form 'provider:model'; "
            f"known providers: {', '.join(known_providers())}"
        )
    return _factory(prefix, model)(name)


def _factory(prefix: str, model: str) -> ModelFactory:
    if prefix not in _factories and prefix in _lazy:
        module, _, attr = _lazy[prefix].partition(":")
        _factories[prefix] = getattr(importlib.import_module(module), attr)
    try:
        return _factories[prefix]
    except KeyError:
        close = difflib.get_close_matches(prefix, known_providers(), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UnknownModelError(
            f"unknown provider {prefix!r} in {model!r}; {hint}known: {', '.join(known_providers())}"
        ) from None


__all__ = [
    "Model",
    "ModelProfile",
    "ModelResponse",
    "ResponseComplete",
    "ResponseStarted",
    "RetryPolicy",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolUseStarted",
    "known_providers",
    "register_lazy_provider",
    "register_provider",
    "resolve_model",
    "split_base_url",
]
