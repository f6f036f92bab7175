"""How an adapter's wire dicts reach a server: the official SDK, or the emulator in process.

Adapters speak in plain JSON dicts (rendered by their pure functions); a
transport carries one dict out and brings the provider's reply back as a dict
or a stream of event dicts. Every failure leaves a transport as a typed
``ProviderError``, so retries and messages are the same on every path.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar
from urllib.parse import urlsplit

from .._spec import split_base_url
from ..errors import ConfigurationError, MissingCredentialsError, ProviderError
from ..messages import JsonValue
from ._retry import connection_error, provider_error

if TYPE_CHECKING:
    import httpx2

Body = dict[str, JsonValue]

DEFAULT_TIMEOUT = 600.0


class ClientOptions(TypedDict, total=False):
    """How an adapter's SDK client reaches the provider (unused when a transport is given).

    ``api_key`` and ``base_url`` default to the provider's environment variables,
    ``timeout`` (seconds) to ``DEFAULT_TIMEOUT``; ``http_client`` replaces the
    SDK's own connection pool.
    """

    api_key: str | None
    base_url: str | None
    timeout: float
    http_client: httpx2.AsyncClient | None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a provider's API key and base URL come from when the caller gives none."""

    label: str
    """The provider as error messages name it."""
    key_variables: tuple[str, ...]
    """First set wins."""
    base_url_variable: str
    default_base_url: str | None = None
    """None: the SDK's own default."""
    key_required: bool = True
    """Local engines run without a key unless started with one."""

    @property
    def key_hint(self) -> str:
        """Where a refused key came from, for the error message."""
        return " or ".join(self.key_variables) or "api_key"

    def key(self, given: str | None) -> str:
        """The API key; a missing required one raises before any request."""
        found = given or next(filter(None, map(os.environ.get, self.key_variables)), None)
        if found:
            return found
        if self.key_required:
            raise MissingCredentialsError(self.label, " or ".join(self.key_variables))
        return "unused"

    def base_url(self, given: str | None) -> str | None:
        """The server's URL; one holding credentials is refused, as model strings record it."""
        url = given or os.environ.get(self.base_url_variable) or self.default_base_url
        if url is None:
            return None
        try:
            parts = urlsplit(url)
        except ValueError as error:
            raise ConfigurationError(f"{self.label} base URL {url!r}: {error}") from None
        if "@" in parts.netloc:
            raise ConfigurationError(
                f"the {self.label} base URL for host {parts.hostname!r} holds credentials "
                f"(user:password@), which would be written into transcripts with the model "
                f"string; give the key in {self.key_hint} instead"
            )
        return url

    def custom_url(self, given: str | None) -> str | None:
        """The base URL when it is not the default: what a model string must name to reach it."""
        url = self.base_url(given)
        return None if url == self.default_base_url else url


ModelT = TypeVar("ModelT")


def from_spec(model_class: Callable[..., ModelT]) -> Callable[[str], ModelT]:
    """The registry's factory for ``provider:<model>[@<base url>]`` strings of one adapter."""

    def make(name: str) -> ModelT:
        model, url = split_base_url(name)
        return model_class(model, base_url=url)

    return make


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
    """Which exceptions of an SDK mean what, and where they keep the status and body."""

    provider: str
    key_hint: str
    status_error: type[BaseException]
    """Raised for an error status; ``status_field`` and ``body_field`` name its attributes."""
    connection_errors: tuple[type[BaseException], ...]
    stream_errors: tuple[type[BaseException], ...] = ()
    """Raised bare (no status) for an error event in the middle of a stream."""
    status_field: str = "status_code"
    body_field: str = "body"

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
                getattr(error, self.status_field, None),
                getattr(error, self.body_field, None),
                headers,
                key_variable=self.key_hint,
            ) from error
        except self.connection_errors as error:
            raise connection_error(self.provider, error) from error
        except self.stream_errors as error:
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


def stainless_transport(
    provider: str, package: str, method: str, endpoint: Endpoint, options: ClientOptions
) -> Transport:
    """An ``SdkTransport`` over ``method`` of a Stainless-generated SDK (``anthropic``, ``openai``).

    Both name their client options and exception classes alike; the SDK's own
    retries are off, so ``_retry`` decides for every provider.
    """
    key = endpoint.key(options.get("api_key"))
    try:
        sdk = importlib.import_module(package)
        import httpx2
    except ImportError as error:
        raise missing_sdk(package, package) from error

    # An explicit timeout also keeps the SDK from refusing long non-streamed requests.
    client = sdk.AsyncClient(
        api_key=key,
        base_url=endpoint.base_url(options.get("base_url")),
        max_retries=0,
        timeout=options.get("timeout", DEFAULT_TIMEOUT),
        http_client=options.get("http_client"),
    )
    errors = SdkErrors(
        provider=provider,
        key_hint=endpoint.key_hint,
        status_error=sdk.APIStatusError,
        connection_errors=(sdk.APIConnectionError, httpx2.TransportError),
        stream_errors=(sdk.APIError,),
    )
    return SdkTransport(attrgetter(method)(client), errors, client.close)


def _as_dict(model: Any) -> Body:
    """An SDK model as the JSON the server sent (API names, unset fields left out)."""
    data = model.to_dict(mode="json")
    assert isinstance(data, dict)
    return data


def missing_sdk(package: str, extra: str) -> ConfigurationError:
    return ConfigurationError(
        f"the {package!r} package is needed for this model: pip install 'forkagent[{extra}]'"
    )
