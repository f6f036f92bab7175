"""How an adapter's wire dicts reach a server: the official SDK, or the emulator in process.

Adapters speak in plain JSON dicts (rendered by their pure functions); a
transport carries one dict out and brings the provider's reply back as a dict
or a stream of event dicts. Every failure leaves a transport as a typed
``ProviderError``, so retries and messages are the same on every path.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import ConfigurationError, MissingCredentialsError, ProviderError
from ..messages import JsonValue
from ._retry import connection_error, provider_error

Body = dict[str, JsonValue]


class Transport(Protocol):
    """Sends one rendered request (Anthropic Messages or Chat Completions)."""

    async def send(self, body: Body) -> Body:
        """The complete reply body."""

    def stream(self, body: Body) -> AsyncGenerator[Body, None]:
        """The reply's stream events, in order."""

    async def aclose(self) -> None:
        """Release connections."""


@dataclass(frozen=True, slots=True)
class SdkErrors:
    """The exception classes of a Stainless-generated SDK (``anthropic``, ``openai``)."""

    provider: str
    key_variable: str
    api_error: type[BaseException]
    """Base class; raised bare for an error event in the middle of a stream."""
    status_error: type[BaseException]
    connection_error: type[BaseException]
    transport_error: type[BaseException]

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Re-raise the SDK's (and httpx2's) exceptions as typed ``ProviderError``s."""
        try:
            yield
        except ProviderError:
            raise
        except self.status_error as error:
            response = getattr(error, "response", None)
            headers: Mapping[str, str] = getattr(response, "headers", None) or {}
            raise provider_error(
                self.provider,
                getattr(error, "status_code", None),
                getattr(error, "body", None),
                headers,
                key_variable=self.key_variable,
            ) from error
        except (self.connection_error, self.transport_error) as error:
            raise connection_error(self.provider, error) from error
        except self.api_error as error:
            body = getattr(error, "body", None)
            wrapped = body if isinstance(body, dict) and "error" in body else {"error": body}
            raise provider_error(self.provider, None, wrapped) from error


class SdkTransport:
    """Sends through one SDK method (``messages.create``, ``chat.completions.create``).

    Fields the SDK's signature lacks travel in ``extra_body``, so a pass-through
    setting reaches the server unchanged whatever the SDK version knows about.
    """

    def __init__(
        self,
        create: Callable[..., Awaitable[Any]],
        errors: SdkErrors,
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self._create = create
        self._known = set(inspect.signature(create).parameters)
        self._errors = errors
        self._close = close

    async def send(self, body: Body) -> Body:
        with self._errors.translated():
            reply = await self._create(**self._arguments(body))
            return _as_dict(reply)

    async def stream(self, body: Body) -> AsyncGenerator[Body, None]:
        with self._errors.translated():
            events = await self._create(**self._arguments(body))
            async for event in events:
                yield _as_dict(event)

    async def aclose(self) -> None:
        await self._close()

    def _arguments(self, body: Body) -> Body:
        kwargs = {k: v for k, v in body.items() if k in self._known}
        extra = {k: v for k, v in body.items() if k not in self._known}
        return {**kwargs, "extra_body": extra} if extra else kwargs


def _as_dict(model: Any) -> Body:
    """An SDK model as the JSON the server sent (API names, unset fields left out)."""
    data = model.to_dict(mode="json")
    assert isinstance(data, dict)
    return data


def require_key(explicit: str | None, provider: str, *variables: str) -> str:
    """An API key given directly or by the first set variable; raised about before any request."""
    key = explicit or next((v for name in variables if (v := os.environ.get(name))), None)
    if not key:
        raise MissingCredentialsError(provider, " or ".join(variables))
    return key


def missing_sdk(package: str, extra: str) -> ConfigurationError:
    return ConfigurationError(
        f"the {package!r} package is needed for this model: pip install 'forkagent[{extra}]'"
    )
