"""Cache reports for every response of a running agent tree.

``CacheMonitor`` listens to the tree's events and explains each response
against the request it should have read its cache from: the agent's previous
request; for a fork's first request, the first sibling's shared prefix (the
siblings' common cache entry) or else the parent's last request. A fork whose
first turn reads under half its prompt from the cache is logged as a warning:
it usually means the fork's prefix no longer matches its parent's.

Every agent tree runs one (``Runtime.cache_monitor``) and emits its reports
as ``CacheReported`` events; a listener of your own is only needed to watch
events recorded elsewhere, or with another clock.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, get_args

from .._construct import slot_setters
from ..events import (
    AgentKind,
    AgentStarted,
    CacheReported,
    Event,
    RequestSent,
    ResponseReceived,
)
from ..history import HistoryView
from ..messages import JsonValue, Message
from ..models.base import ModelProfile
from ..requests import ModelRequest
from ..usage import Usage
from .cache import (
    VIEW_MIN,
    CacheReport,
    added_sizes,
    block_sizes,
    explain,
    explain_extension,
)

logger = logging.getLogger("forkagent.cache")

_IGNORED: frozenset[type] = frozenset(get_args(Event)) - {
    AgentStarted,
    RequestSent,
    ResponseReceived,
}
"""The event types the monitor has nothing to do with."""

CACHE_BREAK_RATIO = 0.5
"""A fork's first turn reading less than this share of its prompt from the cache is a break."""
UNKNOWN_PROFILE = ModelProfile(provider="unknown")
"""For models the monitor has no profile for: no minimum, no warm-up rule."""


@dataclass(eq=False, slots=True)
class _Sent:
    request: ModelRequest
    sent_at: float
    order: int
    """Position in the event stream: orders requests the clock sees as simultaneous."""
    prewarm: bool = False
    answered_at: float | None = None
    usage: Usage | None = None
    """What its response reported (None until answered)."""
    sizes: _Sizes | None = None
    """Its block sizes, once explained."""
    resumed: bool = False
    """Sent before the agent was resumed: known from its transcript, not seen here."""


@dataclass(eq=False, slots=True)
class _Sizes:
    """The canonical size of each block of a request, and their sum.

    Kept as a reference to the sizes of a request it extends plus those of the blocks it
    adds: a fork sibling would otherwise copy its family's whole list, and each turn of an
    agent its whole history's. No request is kept with them.
    """

    earlier: _Sizes | None
    added: list[int]
    """The sizes of the blocks after ``earlier``'s (all of them without it)."""
    total: int

    def flat(self) -> list[int]:
        """All the sizes in order, joined once on first use: most requests never need them."""
        if self.earlier is None:
            return self.added
        parts, link = [self.added], self.earlier
        while link.earlier is not None:  # a loop, not recursion: an agent may have many turns
            parts.append(link.added)
            link = link.earlier
        joined = list(link.added)
        for part in reversed(parts):
            joined += part
        self.earlier, self.added = None, joined
        return joined


_Known = tuple[ModelRequest, _Sizes]
"""A request that later ones may extend, with its sizes."""


class _Source(NamedTuple):
    sent: _Sent
    request: ModelRequest
    label: str
    previous_tokens: int | None
    """The prompt size ``sent``'s response reported, when ``request`` is ``sent``'s whole
    request (not a family's shared part): a request extending it and reading that much hits."""


@dataclass(slots=True)
class _Family:
    """Forks started from the same parent state."""

    leader: tuple[str, _Sent] | None = None
    """The sibling whose first request went out first, and that request: it writes the
    entry the others read."""
    source: _Source | None = None
    """What every sibling after the leader is compared with: the leader's request cut to what
    siblings share (``shared_part``), made once."""
    known: _Known | None = None
    """The shared part and its block sizes, measured with ``source``: a sibling measures only
    what it adds."""


@dataclass(slots=True)
class _Agent:
    kind: AgentKind
    parent_id: str | None
    base: _Sent | None = None
    """For a fork: its parent's last answered request when it started."""
    first: _Sent | None = None
    last: _Sent | None = None
    """The last answered request."""
    pending: _Sent | None = None
    family: _Family | None = None
    """For a fork: the agents forked from the same parent state."""


_AGENT_ID, _TURN, _REPORT = slot_setters(CacheReported)


def _reported(agent_id: str, turn: int, report: CacheReport) -> CacheReported:
    """``CacheReported(agent_id, turn, report)``, set through its slots: made for every response."""
    event: CacheReported = object.__new__(CacheReported)
    _AGENT_ID(event, agent_id)
    _TURN(event, turn)
    _REPORT(event, report)
    return event


class CacheMonitor:
    """An event listener that explains every response's cache use.

    ``profiles`` maps model names (as sent in requests) to their profiles,
    which carry the minimum cacheable prefix and the warm-up rule; unknown
    models get ``default_profile``; ``set_profile`` adds one later. ``on_report``
    is called with each ``CacheReported``, for a live view.
    """

    def __init__(
        self,
        *,
        profiles: Mapping[str, ModelProfile] | None = None,
        default_profile: ModelProfile = UNKNOWN_PROFILE,
        on_report: Callable[[CacheReported], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._profiles = dict(profiles or {})
        self._default = default_profile
        self._on_report = on_report
        self._clock = clock
        self._agents: dict[str, _Agent] = {}
        self._families: dict[tuple[str | None, _Sent | None], _Family] = {}
        self._explained: list[CacheReported] = []
        self._order = itertools.count()

    def __call__(self, event: Event) -> None:
        # By exact type first: ``type(event) is`` is a few bytecodes, where each ``isinstance``
        # tried is a call, and most events (finished agents, tool calls) match none.
        if type(event) is ResponseReceived:
            self._answered(event)
        elif type(event) is RequestSent:
            self._sent(event)
        elif type(event) is AgentStarted:
            self._started(event)
        elif type(event) not in _IGNORED:
            self._subclassed(event)

    def _subclassed(self, event: Event) -> None:
        """An instance of an event type's subclass: handled as its base."""
        if isinstance(event, ResponseReceived):
            self._answered(event)
        elif isinstance(event, RequestSent):
            self._sent(event)
        elif isinstance(event, AgentStarted):
            self._started(event)

    def set_profile(self, model: str, profile: ModelProfile) -> None:
        """Use ``profile`` for requests to ``model`` from now on."""
        self._profiles[model] = profile

    def seed(self, agent_id: str, request: ModelRequest, *, age: float) -> None:
        """Take ``request``, answered ``age`` seconds ago, as ``agent_id``'s last request.

        For an agent resumed from its transcript: its first new request is then
        explained against the one it sent before the resume (a pause past the
        cache's lifetime included) rather than reported ``cold``. A negative
        ``age`` (clocks that disagree) counts as none.
        """
        at = self._clock() - max(age, 0.0)
        self._agent(agent_id).last = _Sent(
            request, at, next(self._order), answered_at=at, resumed=True
        )

    def reports(self, agent_id: str | None = None) -> list[CacheReported]:
        """Every report so far, in order; only ``agent_id``'s when given."""
        return [e for e in self._explained if agent_id in (None, e.agent_id)]

    def misses(self) -> list[CacheReported]:
        return [e for e in self._explained if e.report.status == "miss"]

    def _agent(
        self, agent_id: str, kind: AgentKind = "main", parent_id: str | None = None
    ) -> _Agent:
        """The agent's state, made as ``kind`` under ``parent_id`` if new; one never announced
        (a listener added late) counts as a root."""
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = _Agent(kind, parent_id)
        return agent

    def _sent(self, event: RequestSent) -> None:
        agent = self._agents.get(event.agent_id) or self._agent(event.agent_id)
        sent = agent.pending = _Sent(event.request, self._clock(), next(self._order), event.prewarm)
        if agent.first is None:
            agent.first = sent
            family = agent.family
            if family is not None and family.leader is None:
                family.leader = (event.agent_id, sent)

    def _started(self, event: AgentStarted) -> None:
        agent_id, kind, parent_id = event.agent_id, event.kind, event.parent_id
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = _Agent(kind, parent_id)
        else:  # an agent started again
            agent.kind, agent.parent_id = kind, parent_id
        if kind != "fork":
            return
        parent = self._agents.get(parent_id or "")
        base = agent.base = parent.last if parent else None
        key = (parent_id, base)
        agent.family = self._families.get(key) or self._families.setdefault(key, _Family())

    def _answered(self, event: ResponseReceived) -> None:
        agent = self._agents.get(event.agent_id) or self._agent(event.agent_id)
        sent = agent.pending
        if sent is None:
            return
        sent.answered_at, agent.pending = self._clock(), None
        # A pydantic model's fields read from its dict: each attribute read is a slow look-up.
        response = event.response.__dict__
        usage: Usage = response["usage"]
        diagnosis: Mapping[str, JsonValue] | None = response["cache_diagnosis"]
        sent.usage = usage
        profile = self._profiles.get(sent.request.__dict__["model"], self._default)
        first_turn = agent.last is None
        report = self._explain(agent, sent, usage, diagnosis, profile)
        agent.last = sent
        explained = _reported(event.agent_id, event.turn, report)
        self._explained.append(explained)
        if report.status == "miss":  # the usual hit has nothing to log
            if agent.kind == "fork" and first_turn and profile.caches:
                self._check_break(event.agent_id, usage, report)
            elif logger.isEnabledFor(logging.INFO):
                # The summary is formatted only for a logger that shows it.
                logger.info("agent %s turn %d: %s", event.agent_id, event.turn, report.summary)
        if self._on_report is not None:
            self._on_report(explained)

    def _explain(
        self,
        agent: _Agent,
        sent: _Sent,
        usage: Usage,
        diagnosis: Mapping[str, JsonValue] | None,
        profile: ModelProfile,
    ) -> CacheReport:
        source, known = self._basis(agent, sent)
        sizes = sent.sizes = _measure(sent.request, known)
        if source is None:
            return explain(
                None,
                sent.request,
                usage,
                profile=profile,
                diagnosis=diagnosis,
                sizes=sizes.flat(),
            )
        elapsed = sent.sent_at - source.sent.sent_at
        ready = _ready(source.sent, sent, profile)
        previous_tokens = source.previous_tokens
        if known is not None and sizes.earlier is known[1] and source.request is known[0]:
            # Measured from the source itself: the prefix is proven and its size known.
            return explain_extension(
                source.request,
                usage,
                shared_bytes=known[1].total,
                total_bytes=sizes.total,
                profile=profile,
                elapsed=elapsed,
                cache_ready=ready,
                diagnosis=diagnosis,
                compared_with=source.label,
                previous_tokens=previous_tokens,
            )
        return explain(
            source.request,
            sent.request,
            usage,
            profile=profile,
            elapsed=elapsed,
            cache_ready=ready,
            diagnosis=diagnosis,
            compared_with=source.label,
            sizes=sizes.flat(),
            previous_tokens=previous_tokens,
        )

    def _basis(self, agent: _Agent, sent: _Sent) -> tuple[_Source | None, _Known | None]:
        """The request whose cache entry ``sent`` should have read, and an earlier request
        ``sent`` likely extends, with its block sizes.

        The agent's last request, for both; for a fork's first, its family's shared part for
        both once a sibling went first (the same for every sibling, measured once), or else its
        parent's last request.
        """
        last = agent.last
        if last is not None:
            source = _Source(last, last.request, _previous_label(last), _prompt_tokens(last))
            return source, _sized(last)
        family = agent.family
        if agent.kind == "fork" and family is not None:
            leader = family.leader
            if leader is not None and leader[1].order < sent.order:
                if family.source is None:  # every sibling compares with the same cut copy
                    self._cut(family, leader, agent.base)
                return family.source, family.known
        base = agent.base
        # The leader's own first request may extend the shared part made meanwhile.
        known = family.known if family is not None and family.known is not None else _sized(base)
        if agent.kind != "fork" or base is None:
            return None, known
        label = f"parent {agent.parent_id}'s last request"
        return _Source(base, base.request, label, _prompt_tokens(base)), known

    @staticmethod
    def _cut(family: _Family, leader: tuple[str, _Sent], base: _Sent | None) -> None:
        """Make the family's shared part, its source and its sizes, once."""
        sibling, first = leader
        shared = shared_part(first.request)
        family.source = _Source(first, shared, f"fork {sibling}'s shared prefix", None)
        family.known = (shared, _measure(shared, _sized(base)))

    def _check_break(self, agent_id: str, usage: Usage, report: CacheReport) -> None:
        if report.status != "miss":  # the usual case, settled before the ratio is summed
            return
        ratio = usage.cache_hit_ratio
        if ratio is not None and ratio < CACHE_BREAK_RATIO and logger.isEnabledFor(logging.WARNING):
            # As above: the summary only for a logger that shows it.
            logger.warning(
                "cache break: fork %s read %.0f%% of its first prompt from the cache; %s",
                agent_id,
                ratio * 100,
                report.summary,
            )


def _measure(request: ModelRequest, known: _Known | None) -> _Sizes:
    """``request``'s block sizes; when it extends ``known``, only the blocks it adds are measured."""
    added = None if known is None else added_sizes(request, known[0])
    if known is None or added is None:
        sizes = block_sizes(request)
        return _Sizes(None, sizes, sum(sizes))
    return _Sizes(known[1], added, known[1].total + sum(added))


def _sized(sent: _Sent | None) -> _Known | None:
    """``sent``'s request with its block sizes, once it has been explained."""
    return None if sent is None or sent.sizes is None else (sent.request, sent.sizes)


def _prompt_tokens(sent: _Sent) -> int | None:
    """The prompt size ``sent``'s response reported, if any."""
    return None if sent.usage is None else sent.usage.prompt_tokens or None


def _previous_label(sent: _Sent) -> str:
    if sent.resumed:
        return "the agent's request before the resume"
    return f"the agent's {'pre-warm' if sent.prewarm else 'previous'} request"


def _ready(source: _Sent, sent: _Sent, profile: ModelProfile) -> bool:
    """Whether ``source``'s cache entry could be read when ``sent`` went out.

    Only the end of a response is seen, so for providers whose entry appears
    when the response begins, an answer still in flight counts as not ready;
    where it appears some time after the end (DeepSeek), that time must have passed.
    """
    if profile.warmup == "none":
        return True
    answered = source.answered_at
    return answered is not None and answered + profile.cache_visible_after <= sent.sent_at


def shared_part(request: ModelRequest) -> ModelRequest:
    """``request`` cut after its shared prefix: what siblings have in common.

    Without a marked ``shared_prefix_end``, the last message (the per-child
    part) is dropped.
    """
    end = request.shared_prefix_end
    messages = request.messages
    if end is None:
        return request.model_copy(update={"messages": messages[:-1], "shared_prefix_end": None})
    last = messages[end.message]
    cut = last.model_copy(update={"content": last.content[: end.block + 1]})
    if end.message > VIEW_MIN and isinstance(messages, HistoryView):
        # A view sharing the request's chunks: a long prefix is then compared in O(log n).
        shared: Sequence[Message] = messages.prefix(end.message).extended((cut,))
    else:
        shared = (*messages[: end.message], cut)
    return request.model_copy(update={"messages": shared, "shared_prefix_end": None})
