"""What the third-party tests share: the prompt, the emulated model, and the skip rule.

Each framework keeps its default model configuration (both default to the OpenAI
Responses API for ``gpt-5``); ``OPENAI_BASE_URL`` and a dummy ``OPENAI_API_KEY``
are all that points it at the emulator, as the README tells users to do.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from forkagent.emulator import EmulatedRequest, Reply, ToolCall

INSTRUCTIONS = "You look tickets up for the support team and answer in one line. " * 120
"""About 1,700 tokens: above OpenAI's 1,024-token cache minimum."""
QUESTION = "What is the state of ticket A?"
ANSWER = "Ticket A is open."


def need(module: str) -> None:
    """Skip without the ``thirdparty`` group, but fail under CI, which must run these."""
    try:
        __import__(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {module}: scripts/test installs the thirdparty group")
        pytest.skip(
            f"{module} is not installed: uv sync --group thirdparty", allow_module_level=True
        )


class LookupPolicy:
    """The emulated model: it thinks and calls ``lookup(key="A")``, then answers from the
    result. It keeps every request body, so a test sees what the framework sent back."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: EmulatedRequest) -> Reply:
        self.bodies.append(dict(request.body))
        last = request.body.get("input", [])[-1:] or [{}]
        if isinstance(last[0], dict) and last[0].get("type") == "function_call_output":
            return Reply(text=ANSWER)
        return Reply(thinking="I need ticket A.", tool_calls=(ToolCall("lookup", {"key": "A"}),))

    def tool_outputs(self) -> list[str]:
        """The ``function_call_output`` items received, in order."""
        return [str(item["output"]) for item in self._items("function_call_output")]

    def reasoning_sent_back(self) -> list[dict[str, Any]]:
        """Reasoning items the framework sent back (by id, or with their encrypted content)."""
        return self._items("reasoning")

    def _items(self, kind: str) -> list[dict[str, Any]]:
        return [
            item
            for body in self.bodies
            for item in body.get("input", [])
            if isinstance(item, dict) and item.get("type") == kind
        ]
