"""OpenTelemetry spans and metrics for an agent tree, after the GenAI semantic conventions.

OpenTelemetry is optional (``pip install 'forkagent[otel]'``). Without it,
``otel_listener()`` returns None and nothing else changes. With it, each
agent is an ``invoke_agent`` span, each model call a ``chat {model}`` span
and each tool call an ``execute_tool {name}`` span below its agent's, and the
token and duration histograms are recorded. Attribute names are the
conventions' own (checked against ``opentelemetry-semantic-conventions`` in
the tests); fork facts go under ``forkagent.fork.*``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..events import (
    AgentFinished,
    AgentMovedToBackground,
    AgentStarted,
    Event,
    NotificationDelivered,
    RequestSent,
    ResponseReceived,
    ToolCalled,
    ToolFinished,
)
from ..models.base import ModelProfile
from ..pricing import cost

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ImportError:
    OTEL_AVAILABLE = False
else:
    OTEL_AVAILABLE = True

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from opentelemetry.util.types import AttributeValue

# GenAI semantic-convention names.
OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
AGENT_ID = "gen_ai.agent.id"
AGENT_NAME = "gen_ai.agent.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"
TOKEN_USAGE_METRIC = "gen_ai.client.token.usage"
DURATION_METRIC = "gen_ai.client.operation.duration"

# forkagent's own names.
AGENT_KIND = "forkagent.agent.kind"
AGENT_PARENT = "forkagent.agent.parent"
AGENT_BACKGROUND = "forkagent.agent.background"
AGENT_STATUS = "forkagent.agent.status"
FORK_RUN_ID = "forkagent.fork.run_id"
FORK_PARENT = "forkagent.fork.parent"
FORK_LABEL = "forkagent.fork.label"
FORK_MODE = "forkagent.fork.mode"
FORK_CACHE_KEY_HASH = "forkagent.fork.cache_key_hash"
TURN = "forkagent.turn"
PREWARM = "forkagent.prewarm"
COST_USD = "forkagent.cost.usd"
TASK_ID = "forkagent.task.id"

TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))
"""The conventions' advised boundaries: 1, 4, 16, ... 67,108,864 tokens."""
DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))
"""The conventions' advised boundaries: 0.01 s doubling to 81.92 s."""

_PROVIDER_NAMES = {"gemini": "gcp.gemini"}
"""forkagent provider ids whose convention name differs."""
_FAILED = frozenset({"failed", "timed_out", "budget_exceeded", "truncated"})


def otel_listener(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    profiles: Mapping[str, ModelProfile] | None = None,
) -> OtelListener | None:
    """A listener that reports the tree to OpenTelemetry, or None without the dependency.

    The global providers are used unless given. ``profiles`` maps model names
    to profiles, for ``gen_ai.provider.name`` (left out for unknown models).
    """
    if not OTEL_AVAILABLE:
        return None
    return OtelListener(
        tracer_provider=tracer_provider, meter_provider=meter_provider, profiles=profiles
    )


@dataclass(slots=True)
class _Chat:
    span: Span
    model: str
    started: float
    attributes: dict[str, AttributeValue]
    """The low-cardinality attributes the metrics are recorded with."""


class OtelListener:
    """Turns events into spans and metrics; build it with ``otel_listener()``."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        profiles: Mapping[str, ModelProfile] | None = None,
    ) -> None:
        self._tracer = trace.get_tracer("forkagent", tracer_provider=tracer_provider)
        meter = metrics.get_meter("forkagent", meter_provider=meter_provider)
        self._tokens = meter.create_histogram(
            TOKEN_USAGE_METRIC,
            unit="{token}",
            description="Tokens per model call, by gen_ai.token.type.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            DURATION_METRIC,
            unit="s",
            description="Duration of model calls.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._profiles = dict(profiles or {})
        self._agents: dict[str, Span] = {}
        self._forks: set[str] = set()
        self._chats: dict[str, _Chat] = {}
        self._tools: dict[tuple[str, str], Span] = {}

    def __call__(self, event: Event) -> None:
        match event:
            case AgentStarted():
                self._agent_started(event)
            case RequestSent():
                self._request_sent(event)
            case ResponseReceived():
                self._response_received(event)
            case ToolCalled():
                self._tool_called(event)
            case ToolFinished():
                self._tool_finished(event)
            case AgentMovedToBackground():
                self._moved_to_background(event)
            case NotificationDelivered():
                self._annotate(event.agent_id, "notification_delivered", {TASK_ID: event.task_id})
            case AgentFinished():
                self._agent_finished(event)

    # -- agents -----------------------------------------------------------------

    def _agent_started(self, event: AgentStarted) -> None:
        attributes: dict[str, AttributeValue] = {
            OPERATION_NAME: "invoke_agent",
            AGENT_ID: event.agent_id,
            AGENT_NAME: event.label,
            AGENT_KIND: event.kind,
            AGENT_BACKGROUND: event.background,
        }
        if event.parent_id is not None:
            attributes[AGENT_PARENT] = event.parent_id
        if event.kind == "fork":
            attributes.update(_fork_attributes(event))
            self._forks.add(event.agent_id)
        self._agents[event.agent_id] = self._tracer.start_span(
            f"invoke_agent {event.label}",
            context=self._context(event.parent_id),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )

    def _moved_to_background(self, event: AgentMovedToBackground) -> None:
        span = self._agents.get(event.agent_id)
        if span is None:
            return
        span.set_attribute(AGENT_BACKGROUND, True)
        if event.agent_id in self._forks:
            span.set_attribute(FORK_MODE, "background")
        span.add_event("moved_to_background")

    def _annotate(self, agent_id: str, name: str, attributes: dict[str, AttributeValue]) -> None:
        span = self._agents.get(agent_id)
        if span is not None:
            span.add_event(name, attributes)

    def _agent_finished(self, event: AgentFinished) -> None:
        chat = self._chats.pop(event.agent_id, None)
        if chat is not None:
            self._end_chat_failed(chat, f"agent {event.status} during the call")
        for key in [k for k in self._tools if k[0] == event.agent_id]:
            tool = self._tools.pop(key)
            _fail(tool, "unfinished", "the agent ended before the tool finished")
            tool.end()
        self._forks.discard(event.agent_id)
        span = self._agents.pop(event.agent_id, None)
        if span is None:
            return
        span.set_attribute(AGENT_STATUS, event.status)
        if event.status in _FAILED:
            _fail(span, event.status, event.error or event.status)
        span.end()

    def _context(self, agent_id: str | None) -> Context | None:
        """The context whose span is ``agent_id``'s; None (the current one) for roots."""
        span = self._agents.get(agent_id or "")
        return None if span is None else trace.set_span_in_context(span)

    # -- model calls ------------------------------------------------------------

    def _request_sent(self, event: RequestSent) -> None:
        stale = self._chats.pop(event.agent_id, None)
        if stale is not None:
            self._end_chat_failed(stale, "no response")
        request, settings = event.request, event.request.settings
        metric_attributes: dict[str, AttributeValue] = {
            OPERATION_NAME: "chat",
            REQUEST_MODEL: request.model,
        }
        profile = self._profiles.get(request.model)
        if profile is not None:
            metric_attributes[PROVIDER_NAME] = _PROVIDER_NAMES.get(
                profile.provider, profile.provider
            )
        attributes = {
            **metric_attributes,
            REQUEST_MAX_TOKENS: 0 if event.prewarm else settings.max_tokens,
            TURN: event.turn,
        }
        if event.prewarm:
            attributes[PREWARM] = True
        if settings.temperature is not None:
            attributes[REQUEST_TEMPERATURE] = settings.temperature
        if settings.top_p is not None:
            attributes[REQUEST_TOP_P] = settings.top_p
        if settings.stop_sequences:
            attributes[REQUEST_STOP_SEQUENCES] = list(settings.stop_sequences)
        span = self._tracer.start_span(
            f"chat {request.model}",
            context=self._context(event.agent_id),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        self._chats[event.agent_id] = _Chat(
            span, request.model, time.monotonic(), metric_attributes
        )

    def _response_received(self, event: ResponseReceived) -> None:
        chat = self._chats.pop(event.agent_id, None)
        if chat is None:
            return
        response, usage = event.response, event.response.usage
        metric_attributes = dict(chat.attributes)
        if response.model:
            metric_attributes[RESPONSE_MODEL] = response.model
        span = chat.span
        span.set_attributes(
            {
                **metric_attributes,
                RESPONSE_FINISH_REASONS: [response.stop_reason],
                # The conventions count cached tokens in input_tokens.
                USAGE_INPUT_TOKENS: usage.prompt_tokens,
                USAGE_OUTPUT_TOKENS: usage.output_tokens,
                USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_tokens,
                USAGE_CACHE_CREATION_INPUT_TOKENS: usage.cache_write_tokens,
            }
        )
        if response.response_id:
            span.set_attribute(RESPONSE_ID, response.response_id)
        price = cost(chat.model, usage)
        if price is not None:
            span.set_attribute(COST_USD, price)
        if response.stop_reason == "error":
            _fail(span, "error", "the model reported an error")
        span.end()
        for token_type, count in (
            ("input", usage.prompt_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_creation", usage.cache_write_tokens),
        ):
            self._tokens.record(count, {**metric_attributes, TOKEN_TYPE: token_type})
        self._duration.record(event.seconds, metric_attributes)

    def _end_chat_failed(self, chat: _Chat, reason: str) -> None:
        _fail(chat.span, "incomplete", reason)
        chat.span.end()
        self._duration.record(
            time.monotonic() - chat.started, {**chat.attributes, ERROR_TYPE: "incomplete"}
        )

    # -- tools ------------------------------------------------------------------

    def _tool_called(self, event: ToolCalled) -> None:
        self._tools[(event.agent_id, event.tool_use_id)] = self._tracer.start_span(
            f"execute_tool {event.name}",
            context=self._context(event.agent_id),
            kind=SpanKind.INTERNAL,
            attributes={
                OPERATION_NAME: "execute_tool",
                TOOL_NAME: event.name,
                TOOL_CALL_ID: event.tool_use_id,
                TOOL_TYPE: "function",
            },
        )

    def _tool_finished(self, event: ToolFinished) -> None:
        span = self._tools.pop((event.agent_id, event.tool_use_id), None)
        if span is None:
            return
        if event.is_error:
            _fail(span, "tool_error", "the tool returned an error")  # its text may be private
        span.end()


def _fork_attributes(event: AgentStarted) -> dict[str, AttributeValue]:
    """Fork facts from the event; the runtime adds the mode and cache-key hash in details."""
    mode = event.details.get("mode")
    attributes: dict[str, AttributeValue] = {
        FORK_RUN_ID: event.agent_id,
        FORK_PARENT: event.parent_id or "",
        FORK_LABEL: event.label,
        FORK_MODE: mode
        if isinstance(mode, str)
        else ("background" if event.background else "sync"),
    }
    key = event.details.get("cache_key_hash")
    if isinstance(key, str):
        attributes[FORK_CACHE_KEY_HASH] = key
    return attributes


def _fail(span: Span, error_type: str, description: str) -> None:
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, description))
