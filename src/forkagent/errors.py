"""Typed errors. Each message says what happened and what to do about it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

_Handle = TypeVar("_Handle")


class ForkagentError(Exception):
    """Base of every error this library raises on purpose."""


class ConfigurationError(ForkagentError):
    """The library was set up in a way that cannot work (bad model string, missing key...)."""


class UnknownModelError(ConfigurationError):
    pass


class MissingCredentialsError(ConfigurationError):
    def __init__(self, provider: str, variable: str) -> None:
        super().__init__(
            f"{provider} needs an API key: set the {variable} environment variable "
            f"or pass api_key=... to the model."
        )
        self.provider = provider
        self.variable = variable


class ModelError(ForkagentError):
    """A model call failed."""


class ProviderError(ModelError):
    """The provider answered with an error (after any retries)."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


class RateLimitError(ProviderError):
    pass


class OverloadedError(ProviderError):
    pass


class AuthenticationError(ProviderError):
    pass


class InvalidRequestError(ProviderError):
    pass


class StreamInterruptedError(ProviderError):
    """A streamed reply was cut off; nothing of it was added to the history."""


class ScriptExhaustedError(ModelError):
    """A scripted test model received more requests than it has replies."""


class ToolError(ForkagentError):
    """Raise from a tool to give the model an error result with this message."""


class BudgetExceededError(ForkagentError):
    """A turn, token, cost or time budget ran out."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


class OutputError(ForkagentError):
    """A run asked for an ``output_type`` ended without an answer that validates."""

    def __init__(self, message: str, *, status: str, text: str) -> None:
        super().__init__(message)
        self.status = status
        """How the main agent ended (``failed`` once the retries are spent)."""
        self.text = text
        """Its last text, for a look at what it said instead."""


class AgentSpawnError(ForkagentError):
    """An agent could not be started (guard, unknown type, bad definition...)."""


class AgentLimitError(AgentSpawnError, Generic[_Handle]):
    """``Session.fork`` was given more directives than the tree's ``max_agents`` leaves.

    The first ones, up to the limit, were started: their handles are in
    ``started`` (already finished if the fork was not in the background).
    The handle type is a parameter so that this base module needs nothing from
    the runtime: ``Session.fork`` raises ``AgentLimitError[AgentTask]``.
    """

    def __init__(self, message: str, *, started: Sequence[_Handle], refused: Sequence[str]) -> None:
        super().__init__(message)
        self.started = list(started)
        self.refused = list(refused)
        """The directives that got no agent, in the order given."""
