"""OpenTelemetry export with the SDK's in-memory exporter and reader."""

from __future__ import annotations

import importlib
import sys

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import forkagent.telemetry
from forkagent.events import (
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
from forkagent.messages import JsonValue, assistant, user
from forkagent.models.base import ModelProfile, ModelResponse
from forkagent.pricing import cost
from forkagent.requests import ModelRequest, ModelSettings
from forkagent.telemetry import otel
from forkagent.usage import Usage

MODEL = "claude-sonnet-4-6"
REQUEST = ModelRequest(
    model=MODEL, messages=(user("hi"),), settings=ModelSettings(max_tokens=1024, temperature=0.5)
)
SPENT = Usage(
    input_tokens=100,
    output_tokens=40,
    cache_read_tokens=5000,
    cache_write_5m_tokens=700,
    requests=1,
)
RESPONSE = ModelResponse(
    message=assistant("done"),
    usage=SPENT,
    model=f"{MODEL}-20250929",
    response_id="msg_1",
    stop_reason="end_turn",
)
FORK_DETAILS: dict[str, JsonValue] = {
    "cache_key_hash": "ab12cd34ef56ab78",
    "mode": "sync",
    "shares_cache": True,
}


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        tracer_provider = TracerProvider(shutdown_on_exit=False)
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        meter_provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        listener = otel.otel_listener(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            profiles={MODEL: ModelProfile(provider="anthropic")},
        )
        assert listener is not None
        self.listener = listener

    def feed(self, *events: Event) -> None:
        for event in events:
            self.listener(event)

    def span(self, name: str) -> ReadableSpan:
        (span,) = [s for s in self.spans.get_finished_spans() if s.name == name]
        return span

    def points(self, metric: str) -> list[HistogramDataPoint]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
            if isinstance(point, HistogramDataPoint)
        ]


@pytest.fixture
def telemetry() -> Telemetry:
    telemetry = Telemetry()
    telemetry.feed(
        AgentStarted("main", None, "main", "main", False),
        RequestSent("main", 0, REQUEST),
        ResponseReceived("main", 1, RESPONSE, 1.5),
        ToolCalled("main", "call_1", "Read", {"path": "a.py"}),
        ToolFinished("main", "call_1", "Read", True, "no such file"),
        AgentStarted("fork-1", "main", "fork", "schema", False, FORK_DETAILS),
        AgentMovedToBackground("fork-1"),
        RequestSent("fork-1", 0, REQUEST),
        AgentFinished("fork-1", "failed", "", "boom"),
        NotificationDelivered("main", "fork-1"),
        AgentFinished("main", "completed", "all done"),
    )
    return telemetry


def test_agent_spans_nest_and_carry_the_fork_attributes(telemetry: Telemetry) -> None:
    main, fork = telemetry.span("invoke_agent main"), telemetry.span("invoke_agent schema")

    assert main.attributes is not None
    assert fork.attributes is not None
    assert main.parent is None
    assert fork.parent is not None
    assert fork.parent.span_id == main.context.span_id
    assert main.kind == SpanKind.INTERNAL
    assert dict(main.attributes) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": "main",
        "gen_ai.agent.name": "main",
        "forkagent.agent.kind": "main",
        "forkagent.agent.background": False,
        "forkagent.agent.status": "completed",
    }
    assert {k: v for k, v in fork.attributes.items() if k.startswith("forkagent.fork.")} == {
        "forkagent.fork.run_id": "fork-1",
        "forkagent.fork.parent": "main",
        "forkagent.fork.label": "schema",
        "forkagent.fork.mode": "background",  # moved after it started
        "forkagent.fork.cache_key_hash": "ab12cd34ef56ab78",
    }
    assert [e.name for e in fork.events] == ["moved_to_background"]
    assert [e.name for e in main.events] == ["notification_delivered"]
    assert fork.status.status_code == StatusCode.ERROR
    assert fork.attributes["error.type"] == "failed"


def test_a_model_call_is_a_chat_span_with_usage_including_the_cache(telemetry: Telemetry) -> None:
    chat = next(s for s in telemetry.spans.get_finished_spans() if s.name == f"chat {MODEL}")

    assert chat.kind == SpanKind.CLIENT
    assert chat.parent is not None
    assert chat.parent.span_id == telemetry.span("invoke_agent main").context.span_id
    assert chat.attributes is not None
    attributes = dict(chat.attributes)
    assert attributes["forkagent.cost.usd"] == pytest.approx(cost(MODEL, SPENT))
    del attributes["forkagent.cost.usd"]
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.max_tokens": 1024,
        "gen_ai.request.temperature": 0.5,
        "forkagent.turn": 0,
        "gen_ai.response.model": f"{MODEL}-20250929",
        "gen_ai.response.id": "msg_1",
        "gen_ai.response.finish_reasons": ("end_turn",),
        "gen_ai.usage.input_tokens": 5800,  # cached tokens included, per the conventions
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 5000,
        "gen_ai.usage.cache_creation.input_tokens": 700,
    }


def test_a_call_cut_short_by_its_agent_ends_as_an_error(telemetry: Telemetry) -> None:
    chats = [s for s in telemetry.spans.get_finished_spans() if s.name == f"chat {MODEL}"]

    cut = chats[1]
    assert cut.status.status_code == StatusCode.ERROR
    assert cut.attributes is not None
    assert cut.attributes["error.type"] == "incomplete"


def test_a_prewarm_is_a_chat_span_of_its_own_with_no_output_asked() -> None:
    telemetry = Telemetry()
    warmed = RESPONSE.model_copy(update={"message": assistant(), "stop_reason": "max_tokens"})
    telemetry.feed(
        AgentStarted("fork-1", "main", "fork", "schema", False, FORK_DETAILS),
        RequestSent("fork-1", 0, REQUEST, prewarm=True),
        ResponseReceived("fork-1", 1, warmed, 0.5, prewarm=True),
        RequestSent("fork-1", 0, REQUEST),
        ResponseReceived("fork-1", 1, RESPONSE, 1.5),
    )

    prewarm, turn = [s.attributes for s in telemetry.spans.get_finished_spans()]
    assert prewarm is not None
    assert turn is not None
    assert prewarm["gen_ai.request.max_tokens"] == 0
    assert prewarm["forkagent.prewarm"] is True
    assert prewarm["gen_ai.usage.cache_creation.input_tokens"] == 700
    assert turn["gen_ai.request.max_tokens"] == 1024
    assert "forkagent.prewarm" not in turn


def test_a_tool_call_is_an_execute_tool_span(telemetry: Telemetry) -> None:
    tool = telemetry.span("execute_tool Read")

    assert tool.attributes is not None
    assert tool.parent is not None
    assert tool.parent.span_id == telemetry.span("invoke_agent main").context.span_id
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "Read"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool.status.status_code == StatusCode.ERROR
    assert tool.status.description == "the tool returned an error"  # not the result text


def test_token_usage_is_recorded_by_token_type(telemetry: Telemetry) -> None:
    points = telemetry.points("gen_ai.client.token.usage")

    by_type = {p.attributes["gen_ai.token.type"]: p.sum for p in points if p.attributes}
    assert by_type == {"input": 5800, "output": 40, "cache_read": 5000, "cache_creation": 700}
    attributes = points[0].attributes
    assert attributes is not None
    assert attributes["gen_ai.request.model"] == MODEL
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.operation.name"] == "chat"


def test_operation_duration_is_recorded_and_failures_carry_an_error_type(
    telemetry: Telemetry,
) -> None:
    points = telemetry.points("gen_ai.client.operation.duration")

    ok = [p for p in points if p.attributes and "error.type" not in p.attributes]
    failed = [p for p in points if p.attributes and p.attributes.get("error.type") == "incomplete"]
    assert [p.sum for p in ok] == [1.5]
    assert len(failed) == 1


def test_attribute_names_match_the_semantic_conventions_package() -> None:
    semconv = pytest.importorskip("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
    metrics = pytest.importorskip("opentelemetry.semconv._incubating.metrics.gen_ai_metrics")

    pairs = {
        otel.OPERATION_NAME: semconv.GEN_AI_OPERATION_NAME,
        otel.PROVIDER_NAME: semconv.GEN_AI_PROVIDER_NAME,
        otel.AGENT_ID: semconv.GEN_AI_AGENT_ID,
        otel.AGENT_NAME: semconv.GEN_AI_AGENT_NAME,
        otel.REQUEST_MODEL: semconv.GEN_AI_REQUEST_MODEL,
        otel.REQUEST_MAX_TOKENS: semconv.GEN_AI_REQUEST_MAX_TOKENS,
        otel.REQUEST_TEMPERATURE: semconv.GEN_AI_REQUEST_TEMPERATURE,
        otel.REQUEST_TOP_P: semconv.GEN_AI_REQUEST_TOP_P,
        otel.REQUEST_STOP_SEQUENCES: semconv.GEN_AI_REQUEST_STOP_SEQUENCES,
        otel.RESPONSE_MODEL: semconv.GEN_AI_RESPONSE_MODEL,
        otel.RESPONSE_ID: semconv.GEN_AI_RESPONSE_ID,
        otel.RESPONSE_FINISH_REASONS: semconv.GEN_AI_RESPONSE_FINISH_REASONS,
        otel.USAGE_INPUT_TOKENS: semconv.GEN_AI_USAGE_INPUT_TOKENS,
        otel.USAGE_OUTPUT_TOKENS: semconv.GEN_AI_USAGE_OUTPUT_TOKENS,
        otel.USAGE_CACHE_READ_INPUT_TOKENS: semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        otel.USAGE_CACHE_CREATION_INPUT_TOKENS: semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        otel.TOOL_NAME: semconv.GEN_AI_TOOL_NAME,
        otel.TOOL_CALL_ID: semconv.GEN_AI_TOOL_CALL_ID,
        otel.TOOL_TYPE: semconv.GEN_AI_TOOL_TYPE,
        otel.TOKEN_TYPE: semconv.GEN_AI_TOKEN_TYPE,
        otel.TOKEN_USAGE_METRIC: metrics.GEN_AI_CLIENT_TOKEN_USAGE,
        otel.DURATION_METRIC: metrics.GEN_AI_CLIENT_OPERATION_DURATION,
    }
    assert [ours for ours, theirs in pairs.items() if ours != theirs] == []


def test_without_opentelemetry_the_listener_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)  # None makes the import fail
    monkeypatch.delitem(sys.modules, "forkagent.telemetry.otel")
    monkeypatch.setattr(forkagent.telemetry, "otel", otel)  # restored after the re-import

    reloaded = importlib.import_module("forkagent.telemetry.otel")

    assert reloaded is not otel
    assert not reloaded.OTEL_AVAILABLE
    assert reloaded.otel_listener() is None
