"""What a run's forks cost, next to fresh sub-agents and the physical lower bound.

``EconomicsRecorder`` listens to a tree's events and ``comparison()`` prices
the run three ways, all in billed input-token equivalents (full-price input
tokens; output is excluded, since it is the same whichever way the context
reaches a child), each agent at its own model's prices:

- **this run**: what every response's usage actually billed.
- **fresh sub-agents**: the same run, except that each fork child's first
  request pays its whole prompt at the full input price. A fresh agent has to
  be handed that context in its own prompt and shares no cache entry with its
  parent or its siblings.
- **lower bound**: the same run, except that each fork family's first
  requests pay the physical minimum. A family is the forks started from one
  parent state (same parent, no parent response in between). Each child's
  first prompt splits into the shared prefix ``S_i`` (up to the request's
  ``shared_prefix_end``, the last block siblings share) and its own part
  ``D_i``. Every child reads its prefix at the read price ``R``; the part of
  the prefix the parent had not cached already, ``S - C`` (``S`` the largest
  ``S_i``, ``C`` the cache read plus write of the parent's last response
  before the family), is written once, its write premium ``W - R`` paid once;
  each own part costs the full price:
  ``sum_i(R*S_i + D_i) + (W - R) * max(0, S - C)``.

Every other request (the parent's, a child's later turns, named agents)
counts as billed in all three, so the figures differ only where forking
changes the bill.

Providers report a prompt's cache read, write and uncached tokens, not where
the shared prefix ends (adapters also put a breakpoint on the last block, so a
child's directive is usually written too). ``D_i`` is therefore counted from
the request: the blocks after ``shared_prefix_end`` (the directive, perhaps a
worktree notice) through the emulator's offline ``o200k`` tokenizer, exact on
the emulator and close elsewhere for a part that is usually a few dozen
tokens; ``S_i`` is the rest of the prompt.

A model without a known price is counted at its own token counts with every
multiplier 1 (read, write and input alike), and named in
``Comparison.unpriced_models``: never silently 0. A pre-warm request
(``fanout="prewarm"``) is billed in this run as part of its fork's first turn,
so the other two figures leave it out: neither needs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..events import AgentStarted, Event, RequestSent, ResponseReceived
from ..messages import JsonValue, TextBlock
from ..pricing import price_for
from ..requests import CacheTTL, ModelRequest
from ..usage import Usage


@dataclass(frozen=True, slots=True)
class Comparison:
    """A run priced three ways, in billed input-token equivalents."""

    this_run: float
    fresh_subagents: float
    lower_bound: float
    forks: int = 0
    """Fork children whose first response was seen."""
    unpriced_models: tuple[str, ...] = ()
    """Models without a known price, counted at multipliers 1/1/1."""

    def to_bound(self, billed: float) -> float | None:
        """``billed`` as a multiple of the lower bound; None when nothing was billed."""
        return billed / self.lower_bound if self.lower_bound else None

    @property
    def this_run_ratio(self) -> float | None:
        return self.to_bound(self.this_run)

    @property
    def fresh_subagents_ratio(self) -> float | None:
        return self.to_bound(self.fresh_subagents)

    def to_dict(self) -> dict[str, JsonValue]:
        """Token figures to 0.1 and ratios to 0.0001: the sums carry float noise below that."""
        return {
            "this_run": round(self.this_run, 1),
            "fresh_subagents": round(self.fresh_subagents, 1),
            "lower_bound": round(self.lower_bound, 1),
            "this_run_ratio": _rounded(self.this_run_ratio, 4),
            "fresh_subagents_ratio": _rounded(self.fresh_subagents_ratio, 4),
            "forks": self.forks,
            "unpriced_models": list(self.unpriced_models),
        }


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


class _Rates(NamedTuple):
    """Prices relative to the full input price; ``known`` is false for 1/1/1 stand-ins."""

    read: float
    write_5m: float
    write_1h: float
    known: bool

    @classmethod
    def of(cls, model: str) -> _Rates:
        price = price_for(model)
        if price is None:
            return cls(1.0, 1.0, 1.0, known=False)
        unit = price.input
        return cls(
            price.cache_read / unit, price.cache_write_5m / unit, price.cache_write_1h / unit, True
        )

    def billed(self, usage: Usage) -> float:
        return (
            usage.input_tokens
            + usage.cache_read_tokens * self.read
            + usage.cache_write_5m_tokens * self.write_5m
            + usage.cache_write_1h_tokens * self.write_1h
        )

    def write(self, ttl: CacheTTL) -> float:
        return self.write_5m if ttl == "5m" else self.write_1h


@dataclass(frozen=True, slots=True)
class _FirstTurn:
    """A fork child's first response: its prompt split, what it billed (with its pre-warm), its prices."""

    shared: int
    own: int
    billed: float
    rates: _Rates
    ttl: CacheTTL


@dataclass(eq=False, slots=True)
class _Family:
    parent_cached: int
    """C: what the parent's last response before the family read or wrote in the cache."""
    firsts: list[_FirstTurn] = field(default_factory=list)

    def lower_bound(self) -> float:
        """Every child reads its shared prefix; what the parent had not cached is written once."""
        lead = self.firsts[0]
        reads = sum(f.rates.read * f.shared + f.own for f in self.firsts)
        uncached = max(0, max(f.shared for f in self.firsts) - self.parent_cached)
        return reads + (lead.rates.write(lead.ttl) - lead.rates.read) * uncached


class EconomicsRecorder:
    """An event listener that prices the run three ways; see the module docstring."""

    def __init__(self) -> None:
        self._billed = 0.0
        self._unpriced: dict[str, None] = {}
        self._responses: dict[str, int] = {}
        self._cached: dict[str, int] = {}
        """Per agent, the cache read plus write of its last response."""
        self._models: dict[str, str] = {}
        self._families: dict[tuple[str, int], _Family] = {}
        self._awaiting: dict[str, _Family] = {}
        """Fork children whose first response has not arrived yet."""
        self._first_requests: dict[str, ModelRequest] = {}
        self._prewarms: dict[str, float] = {}
        """What awaiting fork children's pre-warm requests billed."""

    def __call__(self, event: Event) -> None:
        if isinstance(event, AgentStarted) and event.kind == "fork" and event.parent_id:
            parent = event.parent_id
            key = (parent, self._responses.get(parent, 0))
            family = self._families.get(key)
            if family is None:
                family = self._families[key] = _Family(self._cached.get(parent, 0))
            self._awaiting[event.agent_id] = family
        elif isinstance(event, RequestSent):
            self._models[event.agent_id] = event.request.model
            if event.agent_id in self._awaiting and event.agent_id not in self._first_requests:
                self._first_requests[event.agent_id] = event.request
        elif isinstance(event, ResponseReceived):
            self._response(event)

    def _response(self, event: ResponseReceived) -> None:
        agent, usage = event.agent_id, event.response.usage
        model = self._models.get(agent) or event.response.model
        rates = _Rates.of(model)
        if not rates.known:
            self._unpriced[model] = None
        billed = rates.billed(usage)
        self._billed += billed
        if event.prewarm:
            if agent in self._awaiting:
                self._prewarms[agent] = self._prewarms.get(agent, 0.0) + billed
            return
        self._responses[agent] = self._responses.get(agent, 0) + 1
        self._cached[agent] = usage.cache_read_tokens + usage.cache_write_tokens
        family = self._awaiting.pop(agent, None)
        request = self._first_requests.pop(agent, None)
        if family is not None and request is not None:
            own = _own_tokens(request, usage)
            billed += self._prewarms.pop(agent, 0.0)
            family.firsts.append(
                _FirstTurn(
                    usage.prompt_tokens - own, own, billed, rates, request.settings.cache_ttl
                )
            )

    def comparison(self) -> Comparison:
        """The run so far, priced as billed, with fresh sub-agents and at the lower bound."""
        families = [f for f in self._families.values() if f.firsts]
        firsts = [first for family in families for first in family.firsts]
        others = self._billed - sum(first.billed for first in firsts)
        return Comparison(
            this_run=self._billed,
            fresh_subagents=others + sum(first.shared + first.own for first in firsts),
            lower_bound=others + sum(family.lower_bound() for family in families),
            forks=len(firsts),
            unpriced_models=tuple(self._unpriced),
        )


def _own_tokens(request: ModelRequest, usage: Usage) -> int:
    """Tokens of a fork's first prompt after its shared prefix, by the offline tokenizer.

    Without a ``shared_prefix_end``, the uncached input is all that is known to be its own.
    """
    from ..emulator import tokens

    end = request.shared_prefix_end
    if end is None:
        return usage.input_tokens
    own = [
        *request.messages[end.message].content[end.block + 1 :],
        *(block for message in request.messages[end.message + 1 :] for block in message.content),
    ]
    counted = sum(
        tokens.count(b.text if isinstance(b, TextBlock) else b.model_dump_json()) for b in own
    )
    return min(counted, usage.prompt_tokens)
