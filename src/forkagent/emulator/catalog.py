"""Which model ids each emulated provider serves, and how each lists them.

The real APIs answer an unknown model id with a 404; so does the emulator,
for ids outside each provider's naming scheme, unless the user registers the
id (a fine-tune, a local model behind an OpenAI-compatible server). The
schemes are patterns, not lists, so that new releases of a known family work
without a change here.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Literal, TypeAlias

from .errors import ApiError

Wire: TypeAlias = Literal["anthropic", "openai", "gemini"]

_SCHEMES: Mapping[Wire, re.Pattern[str]] = {
    "anthropic": re.compile(
        r"claude-(?:(?:opus|sonnet|haiku)-\d+(?:-\d{1,2})?|\d-(?:\d-)?(?:opus|sonnet|haiku))"
        r"(?:-\d{8}|-latest)?"
    ),
    "openai": re.compile(
        r"(?:gpt-\d+(?:\.\d+)?o?|o\d|chatgpt-4o|codex)(?:-[a-z0-9.]+)*|ft:[\w:.-]+"
        r"|qwen[\w.-]*|qwq[\w.-]*|deepseek-[\w.-]+"
    ),
    "gemini": re.compile(
        r"gemini-(?:\d+(?:\.\d+)?-(?:pro|flash|flash-lite|flash-8b|ultra)(?:-[a-z0-9.]+)*"
        r"|(?:pro|flash|flash-lite)-latest)|gemma-[\w.-]+"
    ),
}
LISTED: Mapping[Wire, tuple[str, ...]] = {
    "anthropic": ("claude-opus-4-5", "claude-sonnet-4-5", "claude-sonnet-4-6", "claude-haiku-4-5"),
    "openai": ("gpt-5", "gpt-4.1", "gpt-4o", "qwen-plus", "qwen-max", "deepseek-chat"),
    "gemini": ("gemini-2.5-flash", "gemini-2.5-pro", "gemini-3-flash-preview"),
}
"""What ``models.list`` shows on each wire (before registered ids)."""
CREATED = 1_735_689_600
"""2025-01-01, the creation time every listed model reports."""


class Catalog:
    """The model ids an emulator accepts, and whether it checks requests at all.

    Strict (the default): each provider's scheme plus registered ids, and every
    request validated. Lenient: any id, and requests parsed as loosely as they
    can be (the emulator's behaviour before validation existed).
    """

    def __init__(self, *, lenient: bool = False) -> None:
        self.lenient = lenient
        self._registered: list[str] = []
        self._lock = threading.Lock()

    def register(self, *model_ids: str) -> None:
        with self._lock:
            self._registered += [m for m in model_ids if m not in self._registered]

    def knows(self, wire: Wire, model: str) -> bool:
        return self.lenient or self.registered(model) or self.in_scheme(wire, model)

    def registered(self, model: str) -> bool:
        with self._lock:
            return model in self._registered

    @staticmethod
    def in_scheme(wire: Wire, model: str) -> bool:
        """Whether the id follows the provider's own naming (hence its own rules)."""
        return _SCHEMES[wire].fullmatch(model) is not None

    def listed(self, wire: Wire) -> list[str]:
        with self._lock:
            return [*LISTED[wire], *(m for m in self._registered if m not in LISTED[wire])]

    def require(self, wire: Wire, model: str) -> None:
        """Raise the provider's 404 for an id it does not serve."""
        if not self.knows(wire, model):
            raise not_found(wire, model)

    def info(self, wire: Wire, model: str) -> dict[str, object]:
        """``models.retrieve`` in the wire's own format (404 if unknown)."""
        self.require(wire, model)
        return model_json(wire, model)

    def listing(self, wire: Wire) -> dict[str, object]:
        """``models.list`` in the wire's own format."""
        models = [model_json(wire, m) for m in self.listed(wire)]
        if wire == "gemini":
            return {"models": models}
        if wire == "openai":
            return {"object": "list", "data": models}
        return {
            "data": models,
            "has_more": False,
            "first_id": models[0]["id"] if models else None,
            "last_id": models[-1]["id"] if models else None,
        }


def not_found(wire: Wire, model: str) -> ApiError:
    if wire == "anthropic":
        return ApiError("not_found", f"model: {model}")
    if wire == "gemini":
        return ApiError(
            "not_found",
            f"models/{model} is not found for API version v1beta, or is not supported for "
            "generateContent. Call ListModels to see the list of available models and their "
            "supported methods.",
        )
    return ApiError(
        "not_found",
        f"The model `{model}` does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


def model_json(wire: Wire, model: str) -> dict[str, object]:
    if wire == "anthropic":
        return {
            "type": "model",
            "id": model,
            "display_name": model,
            "created_at": "2025-01-01T00:00:00Z",
        }
    if wire == "gemini":
        return {
            "name": f"models/{model}",
            "version": "001",
            "displayName": model,
            "description": "Served by the forkagent emulator.",
            "inputTokenLimit": 1_048_576,
            "outputTokenLimit": 65_536,
            "supportedGenerationMethods": [
                "generateContent",
                "countTokens",
                "createCachedContent",
            ],
            "thinking": True,
        }
    return {"id": model, "object": "model", "created": CREATED, "owned_by": "emulator"}
