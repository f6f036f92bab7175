"""Budgets: turn, token, cost and wall-time limits for one agent and for a tree."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import BudgetExceededError, ConfigurationError
from ..pricing import price_for
from ..usage import Usage


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps for one agent, or (as a tree budget) for an agent and all its descendants.

    ``max_tokens`` counts every prompt and output token (cached ones too: the
    cap is about work done, not money); ``max_cost`` is in USD and needs a
    model whose price is known (``require_price``).
    """

    max_turns: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tokens", "max_cost", "max_seconds"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(
                    f"{name} is {value}, a negative limit: give 0 or more, or None for no limit"
                )


class Budget:
    """Counters checked before every model request; charges flow up to the parent budget.

    Its limits are fixed when it is made: which budgets of the tree can stop its agent,
    and its earliest wall-time limit, are worked out then, not on every request.
    """

    def __init__(self, limits: Limits = Limits(), parent: Budget | None = None) -> None:
        self.limits = limits
        self.parent = parent
        self.started = time.monotonic()
        self.tokens = 0
        self.cost = 0.0
        self.turns = 0
        capped = parent._capped if parent is not None else ()
        deadline: tuple[float, float] | None = parent._deadline if parent is not None else None
        if (seconds := limits.max_seconds) is not None:
            own = (self.started + seconds, seconds)
            deadline = own if deadline is None or own < deadline else deadline
        self._capped: tuple[Budget, ...] = (self, *capped) if _capping(limits) else capped
        """This budget and its ancestors that have a limit, nearest first: what ``check`` reads."""
        self._deadline: tuple[float, float] | None = deadline
        self._uncapped: Budget | None = None
        """The one child budget of every agent without limits of its own (``child``)."""

    @property
    def unlimited(self) -> bool:
        """No limit here or on an ancestor: ``check`` can never stop this budget's agent."""
        return not self._capped

    def child(self, limits: Limits = Limits()) -> Budget:
        """A budget under this one. Agents without limits of their own share one: nothing
        reads its counters (``check`` reads capped budgets only, and its deadline is this
        one's), so it passes their charges up as a budget each would, without an object
        per fork (its counters are those agents' together)."""
        if _capping(limits):
            return Budget(limits, parent=self)
        if self._uncapped is None:
            self._uncapped = Budget(limits, parent=self)
        return self._uncapped

    def all_limits(self) -> list[Limits]:
        """This budget's limits and its ancestors': every cap its agent runs under."""
        budget: Budget | None = self
        found = []
        while budget is not None:
            found.append(budget.limits)
            budget = budget.parent
        return found

    def deadline(self) -> tuple[float, float] | None:
        """The earliest wall-time limit of this budget and its ancestors: (monotonic time, seconds).

        The runtime cancels whatever runs at that moment, a model request included.
        """
        return self._deadline

    def charge(self, usage: Usage, cost: float | None, *, turn: bool = True) -> None:
        """Add one response here and to every ancestor; a pre-warm (``turn=False``) is no turn."""
        tokens = usage.total_tokens
        budget: Budget | None = self
        while budget is not None:
            budget.tokens += tokens
            budget.cost += cost or 0.0
            budget.turns += turn
            budget = budget.parent

    def check(self, agent_turns: int) -> None:
        """Raise ``BudgetExceededError`` if this agent or any ancestor budget is spent."""
        if self.limits.max_turns is not None and agent_turns >= self.limits.max_turns:
            raise BudgetExceededError(
                "max_turns", f"reached the limit of {self.limits.max_turns} turns"
            )
        for budget in self._capped:  # without a limit anywhere, nothing to check
            budget._check_shared()

    def _check_shared(self) -> None:
        limits = self.limits
        if limits.max_turns is not None and self.turns >= limits.max_turns:
            raise BudgetExceededError(
                "max_turns", f"took {self.turns} turns of a {limits.max_turns}-turn budget"
            )
        if limits.max_tokens is not None and self.tokens >= limits.max_tokens:
            raise BudgetExceededError(
                "max_tokens", f"used {self.tokens} tokens of a {limits.max_tokens} budget"
            )
        if limits.max_cost is not None and self.cost >= limits.max_cost:
            raise BudgetExceededError(
                "max_cost", f"spent ${self.cost:.4f} of a ${limits.max_cost:.4f} budget"
            )
        if limits.max_seconds is None:
            return  # no clock to read
        elapsed = time.monotonic() - self.started
        if elapsed >= limits.max_seconds:
            raise BudgetExceededError(
                "max_seconds", f"ran {elapsed:.1f}s of a {limits.max_seconds:.1f}s limit"
            )


def _capping(limits: Limits) -> bool:
    """Whether ``limits`` has a limit: a budget with them can stop its agent itself."""
    return (
        limits.max_turns is not None
        or limits.max_tokens is not None
        or limits.max_cost is not None
        or limits.max_seconds is not None
    )


def require_price(model: str, *limits: Limits) -> None:
    """Refuse a ``max_cost`` that could never trigger: the model's price is unknown.

    Cost is only counted for priced models, so the cap would silently mean
    "unlimited"; a ``ConfigurationError`` says so instead.
    """
    if price_for(model) is None and any(limit.max_cost is not None for limit in limits):
        raise ConfigurationError(
            f"max_cost is set but model {model!r} has no known price, so its cost cannot be "
            "counted: add its price to forkagent.pricing.PRICES, or cap max_tokens instead"
        )
