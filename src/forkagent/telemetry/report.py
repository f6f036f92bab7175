"""A run as one self-contained HTML page: the agent tree on a timeline, and what it cost.

Everything comes from the run's transcripts, so a report can be written for
any run, finished or not, by any process: one lane per agent, each request a
bar from when it was sent to its last byte, split into cache read, cache
write, uncached input and output tokens; the wait between an agent's start
and its first request (a fork sibling waiting for its family's leader); an
arrow from a background child to its parent where its notification arrived;
the ``explain`` data of each request on click; the usage tree and the
three-way cost comparison. Scripts and styles are inlined and nothing is
fetched, so the file works from ``file://`` and can be mailed around.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib.resources import files

from ..events import NOTIFICATION_TAG, AgentStarted, Event, RequestSent, ResponseReceived
from ..messages import AssistantMessage, JsonValue, Message, UserMessage
from ..models.base import ModelResponse
from ..requests import ModelRequest
from ..state.transcript import CacheEntry, MessageEntry, Transcript, TruncateEntry, UsageEntry
from ..usage import Usage
from .economics import Comparison, EconomicsRecorder
from .usage_tree import AgentUsage, UsageNode, build_usage_tree

_NOTIFIED = re.compile(rf"<{NOTIFICATION_TAG}>\s*task: (\S+)")
_Since = Callable[[datetime], float]


@dataclass(frozen=True, slots=True)
class RunView:
    """What a report shows, as plain JSON-ready values."""

    title: str
    agents: list[dict[str, JsonValue]]
    requests: list[dict[str, JsonValue]]
    notifications: list[dict[str, JsonValue]]
    usage: UsageNode
    comparison: Comparison | None

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "title": self.title,
            "agents": list(self.agents),
            "requests": list(self.requests),
            "notifications": list(self.notifications),
            "usage": self.usage.to_dict(),
            "usage_text": self.usage.to_text(),
            "comparison": None if self.comparison is None else self.comparison.to_dict(),
        }


def run_view(transcripts: Sequence[Transcript], *, comparison: Comparison | None = None) -> RunView:
    """The report's data for a tree of transcripts (``read_tree``), the root first.

    ``comparison`` defaults to one replayed from the transcripts themselves.
    """
    if not transcripts:
        raise ValueError("a report needs at least one transcript")
    origin = min(t.header.at for t in transcripts)
    root = transcripts[0].header

    def since(at: datetime) -> float:
        return round((at - origin).total_seconds(), 4)

    agents: list[dict[str, JsonValue]] = []
    requests: list[dict[str, JsonValue]] = []
    notifications: list[dict[str, JsonValue]] = []
    for transcript in transcripts:
        agents.append(_agent(transcript, since))
        requests += _requests(transcript, since)
        notifications += _notifications(transcript, since)
    return RunView(
        title=f"forkagent run {root.root_id}",
        agents=agents,
        requests=requests,
        notifications=notifications,
        usage=usage_tree(transcripts),
        comparison=comparison if comparison is not None else replay_comparison(transcripts),
    )


def render_html(view: RunView) -> str:
    """The page: the template with the view's data inlined as JSON."""
    template = files(__package__).joinpath("report.html").read_text(encoding="utf-8")
    data = json.dumps(view.to_dict(), separators=(",", ":"))
    # "</" could end the script element early; JSON allows the escaped form.
    data = data.replace("</", "<\\/")
    return template.replace("__TITLE__", html.escape(view.title)).replace("__DATA__", data)


def usage_tree(transcripts: Sequence[Transcript]) -> UsageNode:
    """Per agent and per model, from each transcript's usage lines."""
    records: list[AgentUsage] = []
    for transcript in transcripts:
        header = transcript.header
        by_model: dict[str, list[UsageEntry]] = {}
        for entry in transcript.entries:
            if isinstance(entry, UsageEntry):
                by_model.setdefault(entry.model, []).append(entry)
        if not by_model:
            by_model[header.model] = []
        for model, entries in by_model.items():
            total = sum((e.usage for e in entries), Usage())
            records.append(
                AgentUsage(
                    header.agent_id, header.parent_id, header.kind, header.label, model, total
                )
            )
    return build_usage_tree(records)


def replay_comparison(transcripts: Sequence[Transcript]) -> Comparison:
    """The three-way comparison, by feeding the transcripts' story to ``EconomicsRecorder``.

    The recorder needs, in time order, each agent's start (forks are grouped
    into families by the parent responses before them), each fork's first
    request (for the part after its shared prefix) and every response's usage.
    """
    recorder = EconomicsRecorder()
    story: list[tuple[datetime, int, Event]] = []
    for transcript in transcripts:
        header = transcript.header
        story.append(
            (
                header.at,
                0,
                AgentStarted(header.agent_id, header.parent_id, header.kind, header.label, False),
            )
        )
        for entry, messages in _usage_with_history(transcript):
            request = ModelRequest(
                model=entry.model,
                system=header.system,
                tools=header.tools,
                messages=messages,
                settings=header.settings,
                shared_prefix_end=header.shared_prefix_end,
            )
            turn = entry.turn or 0
            response = ModelResponse(
                message=AssistantMessage(content=()), usage=entry.usage, model=entry.model
            )
            seconds = entry.seconds or 0.0
            story.append((entry.at, 1, RequestSent(header.agent_id, turn, request, entry.prewarm)))
            story.append(
                (
                    entry.at,
                    2,
                    ResponseReceived(header.agent_id, turn, response, seconds, entry.prewarm),
                )
            )
    for _, _, event in sorted(story, key=lambda item: (item[0], item[1])):
        recorder(event)
    return recorder.comparison()


def _usage_with_history(transcript: Transcript) -> list[tuple[UsageEntry, tuple[Message, ...]]]:
    """Each usage line with the history its request sent.

    A response's usage is recorded before its message is appended, so the
    history replayed up to a usage line is what that request sent (a fork's starts
    with what it inherited from its parent's transcript).
    """
    history: list[Message] = list(transcript.inherited)
    out: list[tuple[UsageEntry, tuple[Message, ...]]] = []
    for entry in transcript.entries:
        if isinstance(entry, MessageEntry):
            del history[entry.index :]
            history.append(entry.message)
        elif isinstance(entry, TruncateEntry):
            del history[entry.length :]
        elif isinstance(entry, UsageEntry):
            out.append((entry, tuple(history)))
    return out


def _agent(transcript: Transcript, since: _Since) -> dict[str, JsonValue]:
    header, status = transcript.header, transcript.status
    end = status.at if status is not None and status.final else None
    return {
        "id": header.agent_id,
        "parent": header.parent_id,
        "kind": header.kind,
        "label": header.label,
        "model": header.model,
        "status": status.status if status is not None else "unknown",
        "start": since(header.at),
        "end": None if end is None else since(end),
        "background": header.background,
        "cost": transcript.cost,
    }


def _requests(transcript: Transcript, since: _Since) -> list[dict[str, JsonValue]]:
    reports = {e.turn: e for e in transcript.entries if isinstance(e, CacheEntry)}
    out: list[dict[str, JsonValue]] = []
    for entry in transcript.entries:
        if not isinstance(entry, UsageEntry):
            continue
        usage, end = entry.usage, since(entry.at)
        cache = reports.get(entry.turn) if entry.turn is not None and not entry.prewarm else None
        out.append(
            {
                "agent": transcript.header.agent_id,
                "turn": entry.turn,
                "prewarm": entry.prewarm,
                "start": round(end - (entry.seconds or 0.0), 4),
                "end": end,
                "model": entry.model,
                "cache_read": usage.cache_read_tokens,
                "cache_write": usage.cache_write_tokens,
                "uncached": usage.input_tokens,
                "output": usage.output_tokens,
                "cost": entry.cost,
                "cache": None if cache is None else _explain(cache),
            }
        )
    return out


def _explain(entry: CacheEntry) -> dict[str, JsonValue]:
    report = entry.cache_report()
    if report is None:
        return {"status": "unreadable", "summary": "written by a newer forkagent"}
    difference = report.difference
    return {
        "status": report.status,
        "summary": report.summary,
        "reasons": list(report.reasons),
        "expected": report.expected_tokens,
        "difference": None if difference is None else difference.detail,
    }


def _notifications(transcript: Transcript, since: _Since) -> list[dict[str, JsonValue]]:
    """Each child's notification, where it entered this agent's conversation (once per child)."""
    seen: set[str] = set()
    out: list[dict[str, JsonValue]] = []
    for entry in transcript.entries:
        if not isinstance(entry, MessageEntry) or not isinstance(entry.message, UserMessage):
            continue
        for child in _NOTIFIED.findall(entry.message.text):
            if child not in seen:
                seen.add(child)
                out.append(
                    {"child": child, "parent": transcript.header.agent_id, "at": since(entry.at)}
                )
    return out
