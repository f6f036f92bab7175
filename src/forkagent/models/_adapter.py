"""What every provider adapter shares: its name, profile, retry policy and transport."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Generic, Protocol, TypeVar

from ..messages import JsonValue
from ._retry import RetryPolicy, StreamAccumulator, stream_with_retries, with_retries
from ._transport import Body
from .base import Model, ModelProfile, StreamEvent


class _Closable(Protocol):
    async def aclose(self) -> None: ...


TransportT = TypeVar("TransportT", bound=_Closable)


class AdapterModel(Model, Generic[TransportT]):
    """A model whose requests go out through ``transport`` under one retry policy.

    The transport is the vendor's SDK or, for ``emulator:`` models, the
    emulator in process; the subclass renders requests and parses replies.
    ``base_url`` is the server the SDK calls when it is not the provider's
    default; ``spec`` names it so that the model string reaches the same server.
    """

    def __init__(
        self,
        name: str,
        profile: ModelProfile,
        retry: RetryPolicy,
        transport: TransportT,
        base_url: str | None = None,
    ) -> None:
        self._name = name
        self.profile = profile
        self._retry = retry
        self._transport = transport
        self.base_url = base_url

    @property
    def name(self) -> str:
        return self._name

    @property
    def spec(self) -> str:
        """``provider:model``, then ``@<base url>`` when the server is not the default."""
        return f"{super().spec}@{self.base_url}" if self.base_url else super().spec

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def _send(self, call: Callable[[], Awaitable[Body]]) -> Body:
        """``call``'s reply, retried as the policy says."""
        return await with_retries(self._retry, call)

    def _stream(
        self,
        open_stream: Callable[[], AsyncGenerator[Mapping[str, JsonValue], None]],
        accumulator: Callable[[], StreamAccumulator],
    ) -> AsyncIterator[StreamEvent]:
        """The stream ``open_stream`` opens, folded by ``accumulator``, retried until it shows."""
        return stream_with_retries(self._retry, open_stream, accumulator)
