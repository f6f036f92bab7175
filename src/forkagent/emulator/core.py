"""The emulator: routing, the generation pipeline, faults, timing and the log.

``Emulator.dispatch`` and the HTTP app run the very same ``_handle``; HTTP
only adds (de)serialisation. A generation request goes: fault draw ->
parse and validate -> cache accounting at the request's start -> reply ->
time to first token (Anthropic/OpenAI entries become visible) -> output at
the simulated speed (DashScope/DeepSeek/Gemini entries become visible at the
end, DeepSeek some seconds later).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias
from urllib.parse import parse_qsl, urlsplit

from . import anthropic_api, chat_api, gemini_api
from .anthropic_api import AnthropicApi
from .cache import BlockCache, CacheResult, PrefixCache
from .catalog import Catalog
from .chat_api import ChatApi
from .errors import ApiError, EmulatedDisconnect
from .faults import Fault, FaultPlan
from .gemini_api import GeminiApi
from .log import LogEntry, RequestLog
from .policies import CallingAgent, Policy, Reply, Script, ask, default_policy
from .profiles import CacheSettings
from .responses_api import ResponsesApi
from .timing import Clock, Latency, wall_clock
from .wire import Call, Json, Output, SseEvent, Turn, shape_output

Wire: TypeAlias = Literal["anthropic", "openai", "gemini"]
Handler: TypeAlias = Callable[[Call], Awaitable["Exchange"]]


@dataclass(frozen=True, slots=True)
class EmulatorReply:
    """A complete response: what the HTTP route would send, as JSON.

    For a streaming request ``body`` is ``{"events": [{"event", "data"}, ...]}``.
    """

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Generation:
    """A generation request once parsed, accounted and answered, before it is sent back."""

    turn: Turn
    number: int
    message_id: str
    result: CacheResult
    output: Output
    fault: Fault | None


@dataclass(frozen=True, slots=True)
class Exchange:
    """A response before serialisation: a JSON body or a stream of events."""

    status: int
    headers: dict[str, str]
    body: Json | None = None
    events: AsyncIterator[SseEvent] | None = None


class Emulator:
    """A local stand-in for the Anthropic, OpenAI(-compatible) and Gemini APIs."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        latency: Latency | None = None,
        policy: Policy = default_policy,
        faults: FaultPlan | None = None,
        seed: int = 0,
        settings: CacheSettings | None = None,
        require_key: bool = False,
        lenient: bool = False,
    ) -> None:
        self.clock: Clock = clock or wall_clock
        self.latency = latency or Latency()
        self.faults = faults or FaultPlan(seed=seed)
        self.settings = settings or CacheSettings()
        self.require_key = require_key
        self.seed = seed
        self.log = RequestLog()
        self._policy = policy
        self._script = Script()
        self._blocks = BlockCache()
        self._prefixes = PrefixCache()
        self.catalog = Catalog(lenient=lenient)
        self._anthropic = AnthropicApi(self._blocks, self.catalog)
        self._chat = ChatApi(self._blocks, self._prefixes, self.settings, self.catalog)
        self._responses = ResponsesApi(self._chat, self.catalog)
        self._gemini = GeminiApi(self._prefixes, self.settings, self.clock, self.catalog)
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._routes = self._route_table()

    # -- public API -------------------------------------------------------------

    async def dispatch(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        frozen: bool = False,
        agent: CallingAgent | None = None,
    ) -> EmulatorReply:
        """Serve one request in process, exactly as the HTTP route would.

        ``frozen``: the caller promises never to change the body, or any list or dict
        in it, after this call (forkagent's models never do: their renderings are
        shared between requests). The emulator may then know a long list again by
        the objects in it rather than by reading their content: a child of a reply
        with N tool calls costs O(1) instead of O(N). Without it, an object changed
        in place is read again, as over HTTP. Injected connection faults raise
        ``EmulatedDisconnect``.

        ``agent``: the forkagent agent calling, handed over instead of an ``AGENT_HEADER``
        to write and parse again (policies see the same ``EmulatedRequest.agent``).
        """
        exchange = await self.handle(
            method, path, dict(body or {}), headers or {}, frozen=frozen, agent=agent
        )
        if exchange.events is None:
            return EmulatorReply(exchange.status, exchange.body or {}, exchange.headers)
        events: list[Json] = []
        try:
            async for event in exchange.events:
                events.append(event.to_json())
        except EmulatedDisconnect as cut:
            cut.events = events
            raise
        return EmulatorReply(exchange.status, {"events": events}, exchange.headers)

    def script(
        self,
        *replies: Reply | str,
        conversation: str | None = None,
        match: str | None = None,
        agent: str | None = None,
        turn: int | None = None,
    ) -> None:
        """Queue replies served before the policy (see ``Script.add``).

        ``agent`` and ``turn`` aim them at one agent of a forkagent tree (by id,
        label, named agent type or kind) from one of its turns on.
        """
        self._script.add(replies, conversation=conversation, match=match, agent=agent, turn=turn)

    def pending_script(self) -> int:
        """Scripted replies not served yet (a test can check its script was used up)."""
        return self._script.pending()

    def register_model(self, *model_ids: str) -> None:
        """Serve these model ids on every wire (a fine-tune, a local model's name)."""
        self.catalog.register(*model_ids)

    def set_policy(self, policy: Policy) -> None:
        self._policy = policy

    def reset(self) -> None:
        """Forget caches, log, scripts and counters; keep policy, latency, fault settings and
        registered model ids (configuration, not state)."""
        with self._lock:
            self._numbers = itertools.count(1)
        parts = (self._blocks, self._prefixes, self._anthropic, self._chat, self._responses)
        for part in (*parts, self._gemini):
            part.clear()
        self._script.clear()
        self.log.clear()
        self.faults = dataclasses.replace(self.faults)

    # -- routing ----------------------------------------------------------------

    async def handle(
        self,
        method: str,
        path: str,
        body: Json,
        headers: Mapping[str, str],
        *,
        frozen: bool = False,
        agent: CallingAgent | None = None,
    ) -> Exchange:
        """Route a request; the one entry point of both ``dispatch`` and HTTP."""
        url = urlsplit(path)
        lowered = {k.lower(): v for k, v in headers.items()}
        query = dict(parse_qsl(url.query))
        wire = wire_for(url.path, lowered, query)
        for verb, pattern, handler in self._routes:
            match = pattern.fullmatch(url.path)
            if match and verb == method.upper():
                call = Call(
                    method, url.path, query, body, lowered, match.groupdict(), frozen, agent
                )
                if (
                    self.require_key
                    and not url.path.startswith("/_emulator")
                    and not _has_key(wire, call)
                ):
                    return self.error(
                        wire, ApiError("authentication", "invalid x-api-key"), "req_emu"
                    )
                try:
                    return await handler(call)
                except ApiError as error:
                    return self.error(wire, error, "req_emu")
        return self.error(
            wire, ApiError("not_found", f"No route for {method} {url.path}"), "req_emu"
        )

    def error(self, wire: Wire, error: ApiError, request_id: str) -> Exchange:
        """An error response in the provider's own shape."""
        headers = {"retry-after": f"{error.retry_after:g}"} if error.retry_after is not None else {}
        if wire == "anthropic":
            headers["request-id"] = request_id
            return Exchange(error.status, headers, anthropic_api.error_body(error, request_id))
        if wire == "gemini":
            return Exchange(gemini_api.error_status(error), headers, gemini_api.error_body(error))
        headers["x-request-id"] = request_id
        return Exchange(chat_api.error_status(error), headers, chat_api.error_body(error))

    def _route_table(self) -> list[tuple[str, re.Pattern[str], Handler]]:
        model = r"/v1(?:beta)?/models/(?P<model>[^:/]+)"
        cache = r"/v1(?:beta)?/(?P<name>cachedContents/[^/]+)"
        response = r"/v1/responses/(?P<id>[^/]+)"
        table: list[tuple[str, str, Handler]] = [
            ("POST", "/v1/messages", self._messages),
            ("POST", "/v1/messages/count_tokens", self._json(self._anthropic.count_tokens)),
            ("POST", "/v1/chat/completions", self._chat_completions),
            ("POST", "/v1/responses", self._responses_create),
            ("POST", "/v1/responses/input_tokens", self._json(self._responses.input_tokens)),
            ("GET", response, self._json(lambda call: self._responses.retrieve(call.params["id"]))),
            (
                "DELETE",
                response,
                self._json(lambda call: self._responses.delete(call.params["id"])),
            ),
            ("GET", "/v1/models", self._json(self._list_models)),
            ("GET", model, self._json(self._get_model)),
            ("POST", model + ":generateContent", self._gemini_generate),
            ("POST", model + ":streamGenerateContent", self._gemini_stream),
            ("POST", model + ":countTokens", self._json(self._gemini.count_tokens)),
            ("GET", "/v1beta/models", self._json(self._list_models)),
            ("POST", "/v1(?:beta)?/cachedContents", self._json(self._gemini.create_cache)),
            (
                "GET",
                "/v1(?:beta)?/cachedContents",
                self._json(lambda call: self._gemini.list_caches()),
            ),
            ("GET", cache, self._json(lambda call: self._gemini.get_cache(call.params["name"]))),
            (
                "DELETE",
                cache,
                self._json(lambda call: self._gemini.delete_cache(call.params["name"])),
            ),
            ("GET", "/_emulator/log", self._json(lambda call: {"entries": self.log.to_json()})),
            ("POST", "/_emulator/script", self._json(self._admin_script)),
            ("POST", "/_emulator/faults", self._json(self._admin_faults)),
            ("POST", "/_emulator/reset", self._json(self._admin_reset)),
        ]
        return [(verb, re.compile(path), handler) for verb, path, handler in table]

    @staticmethod
    def _json(produce: Callable[[Call], Json]) -> Handler:
        async def handler(call: Call) -> Exchange:
            return Exchange(200, {}, produce(call))

        return handler

    async def _messages(self, call: Call) -> Exchange:
        return await self._generate("anthropic", call, lambda: self._anthropic.parse(call))

    async def _chat_completions(self, call: Call) -> Exchange:
        return await self._generate("openai", call, lambda: self._chat.parse(call))

    async def _responses_create(self, call: Call) -> Exchange:
        return await self._generate("openai", call, lambda: self._responses.parse(call))

    async def _gemini_generate(self, call: Call) -> Exchange:
        return await self._generate("gemini", call, lambda: self._gemini.parse(call, stream=False))

    async def _gemini_stream(self, call: Call) -> Exchange:
        return await self._generate("gemini", call, lambda: self._gemini.parse(call, stream=True))

    def _list_models(self, call: Call) -> Json:
        return self.catalog.listing(wire_for(call.path, call.headers, call.query))

    def _get_model(self, call: Call) -> Json:
        wire = wire_for(call.path, call.headers, call.query)
        return self.catalog.info(wire, call.params["model"])

    def _admin_script(self, call: Call) -> Json:
        replies = call.body.get("replies")
        if not isinstance(replies, list):
            raise ApiError("invalid_request", "replies: a list of {text, tool_calls, thinking}")
        turn = call.body.get("turn")
        self._script.add(
            [Reply.from_json(r) for r in replies],
            conversation=call.body.get("conversation"),
            match=call.body.get("match"),
            agent=call.body.get("agent"),
            turn=int(turn) if turn is not None else None,
        )
        return {"pending": self._script.pending()}

    def _admin_faults(self, call: Call) -> Json:
        body = call.body
        try:
            schedule = {int(n): Fault.from_json(f) for n, f in (body.get("schedule") or {}).items()}
            plan = FaultPlan(
                probabilities=body.get("probabilities") or {},
                schedule=schedule,
                seed=int(body.get("seed", self.seed)),
            )
            for fault in body.get("inject") or []:
                plan.inject(Fault.from_json(fault))
        except (ValueError, TypeError, AttributeError) as exc:
            raise ApiError("invalid_request", f"bad fault plan: {exc}") from None
        self.faults = plan
        return {"ok": True}

    def _admin_reset(self, call: Call) -> Json:
        self.reset()
        return {"ok": True}

    # -- generation ---------------------------------------------------------------

    async def _generate(self, wire: Wire, call: Call, parse: Callable[[], Turn]) -> Exchange:
        with self._lock:
            number = next(self._numbers)
        started = self.clock()
        request_id = f"req_emu{number:012d}"
        fault = self.faults.draw(number)
        entry = LogEntry(
            number,
            call.path,
            wire,
            str(call.body.get("model") or call.params.get("model", "")),
            started,
            200,
            fault=fault.kind if fault else None,
        )
        if fault is not None and (error := fault.error()) is not None:
            return self._failed(wire, entry, error, request_id)
        if fault is not None and fault.kind == "delay":
            await asyncio.sleep(fault.seconds)
        try:
            turn = parse()
            message_id = f"{turn.id_prefix}{number:012d}"
            result = turn.account(started, number, message_id)
        except ApiError as error:
            return self._failed(wire, entry, error, request_id)
        try:
            reply = self._script.take(turn.request) or await ask(self._policy, turn.request)
        except Exception as exc:
            self._abandon(number)
            failure = ApiError("server", f"the emulator's reply policy failed: {exc!r}")
            return self._failed(wire, entry, failure, request_id)
        output = shape_output(
            reply,
            max_tokens=turn.max_tokens,
            call_id=f"{turn.call_prefix}{number:06d}_",
            with_thinking=turn.with_thinking,
            stop_sequences=turn.stop_sequences,
        )
        self.log.append(
            dataclasses.replace(
                entry,
                profile=turn.profile,
                model=turn.model,
                stream=turn.stream,
                message_id=message_id,
                usage=turn.usage(result, output),
                breakpoints=result.outcomes,
            )
        )
        headers = {"request-id": request_id, "x-request-id": request_id}
        generation = _Generation(turn, number, message_id, result, output, fault)
        if turn.stream:
            events = self._stream(generation)
            return Exchange(200, headers | {"content-type": "text/event-stream"}, events=events)
        return Exchange(200, headers, await self._complete(generation))

    def _failed(self, wire: Wire, entry: LogEntry, error: ApiError, request_id: str) -> Exchange:
        exchange = self.error(wire, error, request_id)
        self.log.append(dataclasses.replace(entry, status=exchange.status, error=error.message))
        return exchange

    async def _complete(self, generation: _Generation) -> Json:
        turn, number, fault = generation.turn, generation.number, generation.fault
        try:
            await self._begin(generation)
            if fault is not None and fault.kind == "cut_stream":
                raise EmulatedDisconnect("emulated fault: response cut off")
            await asyncio.sleep(self.latency.generation(generation.output.output_tokens))
            self._end(turn, number)
            return turn.render(generation.message_id, generation.result, generation.output)
        finally:
            self._abandon(number)

    async def _stream(self, generation: _Generation) -> AsyncIterator[SseEvent]:
        turn, number, fault = generation.turn, generation.number, generation.fault
        try:
            await self._begin(generation)
            cut = fault.after_events if fault is not None and fault.kind == "cut_stream" else None
            events = turn.events(generation.message_id, generation.result, generation.output)
            for index, event in enumerate(events):
                if index == cut:
                    raise EmulatedDisconnect("emulated fault: stream cut off")
                if event.tokens:
                    await asyncio.sleep(self.latency.generation(event.tokens))
                yield event
            self._end(turn, number)
        finally:
            self._abandon(number)

    async def _begin(self, generation: _Generation) -> None:
        """Time to first token; then the response has begun (unless a fault drops it first)."""
        if generation.fault is not None and generation.fault.kind == "drop":
            raise EmulatedDisconnect("emulated fault: connection dropped")
        await asyncio.sleep(self.latency.ttft)
        if generation.turn.visibility == "start":
            self._publish(generation.number, 0.0)

    def _end(self, turn: Turn, number: int) -> None:
        if turn.visibility == "end":
            self._publish(number, turn.visible_delay)

    def _publish(self, number: int, delay: float) -> None:
        at = self.clock() + delay
        self._blocks.store.publish(number, at)
        self._prefixes.store.publish(number, at)

    def _abandon(self, number: int) -> None:
        self._blocks.store.abandon(number)
        self._prefixes.store.abandon(number)


_GEMINI_PATH = re.compile(r"/v1beta/|/v1/models/[^/]+:|/v1/cachedContents")


def wire_for(path: str, headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> Wire:
    """Whose request this is, hence whose formats it gets (also for unknown routes).

    ``/v1/models`` is on all three wires: google-genai sends its key in
    ``x-goog-api-key`` (or the ``key`` query parameter), Anthropic's SDK sends
    ``anthropic-version``.
    """
    if _GEMINI_PATH.match(path) or "x-goog-api-key" in headers or "key" in (query or {}):
        return "gemini"
    if path.startswith("/v1/messages") or "anthropic-version" in headers:
        return "anthropic"
    return "openai"


def _has_key(wire: Wire, call: Call) -> bool:
    headers = call.headers
    if wire == "anthropic":
        return bool(headers.get("x-api-key") or headers.get("authorization"))
    if wire == "gemini":
        return bool(headers.get("x-goog-api-key") or call.query.get("key"))
    return bool(headers.get("authorization", "").removeprefix("Bearer").strip())


_default: Emulator | None = None
_default_lock = threading.Lock()


_scoped: ContextVar[Emulator | None] = ContextVar("forkagent_emulator", default=None)


def default_emulator() -> Emulator:
    """The emulator ``emulator:<model>`` models talk to, so that they share one cache.

    Inside ``use_emulator(emu)`` that is ``emu``; elsewhere one per process.
    """
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    global _default
    with _default_lock:
        if _default is None:
            _default = Emulator()
        return _default


@contextmanager
def use_emulator(emulator: Emulator) -> Iterator[Emulator]:
    """Make ``emulator`` the one ``emulator:`` models resolve to, in this context.

    A context variable, so tasks started inside inherit it (a named agent's
    model is resolved deep inside the runtime) and concurrent runs with
    different emulators do not see each other's.
    """
    token = _scoped.set(emulator)
    try:
        yield emulator
    finally:
        _scoped.reset(token)
