"""Usage as a tree: per agent, per child, per model, summed up to the root.

A sub-agent's usage is never folded away into its parent's: every node keeps
its own usage next to its subtree's, per model (a child on a cheaper model
keeps its own line), with cache reads and writes (5m and 1h) apart. Cost is
priced per model; when a model has no known price, the known part is shown
and the tree says that the rest is unknown. It never counts it as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from rich.text import Text
from rich.tree import Tree

from ..events import AgentKind, AgentStarted, Event, RequestSent, ResponseReceived
from ..messages import JsonValue
from ..pricing import cost
from ..usage import Usage


@dataclass(frozen=True, slots=True)
class AgentUsage:
    """One agent's usage on one model: the flat record a tree is built from."""

    agent_id: str
    parent_id: str | None
    kind: AgentKind
    label: str
    model: str
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class ModelCost:
    """A subtree's usage on one model, and its price (None when the price is unknown)."""

    model: str
    usage: Usage
    cost: float | None


@dataclass(frozen=True, slots=True)
class UsageNode:
    """One agent, its own usage per model, and its children.

    ``by_model`` (the subtree's usage per model) is computed from the
    children when the node is made, so every total is a sum of the nodes
    below and nothing is counted twice.
    """

    agent_id: str
    parent_id: str | None
    kind: AgentKind
    label: str
    models: Mapping[str, Usage]
    """This agent's own usage per model; normally a single entry."""
    children: tuple[UsageNode, ...] = ()
    by_model: Mapping[str, Usage] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        merged = dict(self.models)
        for child in self.children:
            for model, usage in child.by_model.items():
                merged[model] = merged.get(model, Usage()) + usage
        object.__setattr__(self, "by_model", merged)

    @property
    def model(self) -> str:
        """The agent's model (the first one, should it have used several)."""
        return next(iter(self.models), "")

    @property
    def usage(self) -> Usage:
        """This agent's own usage, children excluded."""
        return sum(self.models.values(), Usage())

    @property
    def cost(self) -> float | None:
        """This agent's own cost; None when any of it is unpriced."""
        costs = [_price(model, usage) for model, usage in self.models.items()]
        return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)

    @property
    def total(self) -> Usage:
        """The subtree's usage: this agent and every descendant."""
        return sum(self.by_model.values(), Usage())

    @property
    def model_costs(self) -> tuple[ModelCost, ...]:
        return tuple(ModelCost(m, u, _price(m, u)) for m, u in self.by_model.items())

    @property
    def cost_known(self) -> float:
        """The subtree's cost over the models with a known price."""
        return sum(line.cost for line in self.model_costs if line.cost is not None)

    @property
    def cost_complete(self) -> bool:
        """Whether ``cost_known`` covers the whole subtree."""
        return not self.unpriced_models

    @property
    def unpriced_models(self) -> tuple[str, ...]:
        return tuple(line.model or "?" for line in self.model_costs if line.cost is None)

    def walk(self) -> Iterator[UsageNode]:
        """This node and its descendants, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "agent_id": self.agent_id,
            "parent_id": self.parent_id,
            "kind": self.kind,
            "label": self.label,
            "model": self.model,
            "usage": usage_dict(self.usage),
            "cost": self.cost,
            "total": usage_dict(self.total),
            "by_model": {
                line.model: {"usage": usage_dict(line.usage), "cost": line.cost}
                for line in self.model_costs
            },
            "cost_known": self.cost_known,
            "cost_complete": self.cost_complete,
            "children": [child.to_dict() for child in self.children],
        }

    def to_text(self) -> str:
        """The tree as plain text, for logs and non-terminal output."""
        return "\n".join(_text_lines(_outline(self, root=True)))

    def to_rich(self) -> Tree:
        return _rich_tree(_outline(self, root=True))


def usage_dict(usage: Usage) -> dict[str, JsonValue]:
    """Usage with the key names the JSON outputs use."""
    return {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_write": usage.cache_write_tokens,
        "cache_write_5m": usage.cache_write_5m_tokens,
        "cache_write_1h": usage.cache_write_1h_tokens,
        "requests": usage.requests,
    }


def build_usage_tree(records: Iterable[AgentUsage]) -> UsageNode:
    """Assemble flat records (one or more per agent) into the tree under the single root.

    Raises ``ValueError`` when the records do not form one tree: a parent
    without a record, no root or several, or a cycle.
    """
    first: dict[str, AgentUsage] = {}
    models: dict[str, dict[str, Usage]] = {}
    for record in records:
        first.setdefault(record.agent_id, record)
        own = models.setdefault(record.agent_id, {})
        if record.model or record.usage.total_tokens:
            own[record.model] = own.get(record.model, Usage()) + record.usage
    children: dict[str | None, list[str]] = {}
    for agent_id, record in first.items():
        if record.parent_id is not None and record.parent_id not in first:
            raise ValueError(
                f"agent {agent_id!r} names parent {record.parent_id!r}, which has no record"
            )
        children.setdefault(record.parent_id, []).append(agent_id)
    roots = children.get(None, [])
    if len(roots) != 1:
        raise ValueError(f"a usage tree needs exactly one root agent, found {roots or 'none'}")

    def node(agent_id: str) -> UsageNode:
        record = first[agent_id]
        kids = tuple(node(child) for child in children.get(agent_id, []))
        return UsageNode(
            agent_id, record.parent_id, record.kind, record.label, models[agent_id], kids
        )

    root = node(roots[0])
    if sum(1 for _ in root.walk()) != len(first):
        raise ValueError("the records' parent links contain a cycle")
    return root


class UsageRecorder:
    """An event listener that keeps per-agent, per-model usage for ``tree()``.

    The model is the one the agent's requests named, the same id the prices
    are keyed on.
    """

    def __init__(self) -> None:
        self._started: dict[str, AgentStarted] = {}
        self._model: dict[str, str] = {}
        self._usage: dict[str, dict[str, Usage]] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, AgentStarted):
            self._started[event.agent_id] = event
        elif isinstance(event, RequestSent):
            self._model[event.agent_id] = event.request.model
        elif isinstance(event, ResponseReceived):
            model = self._model.get(event.agent_id) or event.response.model
            own = self._usage.setdefault(event.agent_id, {})
            own[model] = own.get(model, Usage()) + event.response.usage

    def records(self) -> list[AgentUsage]:
        """One record per agent and model; agents that made no request get an empty one."""
        out: list[AgentUsage] = []
        for agent_id in dict.fromkeys([*self._started, *self._usage]):
            started = self._started.get(agent_id)
            parent, kind, label = (
                (started.parent_id, started.kind, started.label)
                if started
                else (None, "main", agent_id)
            )
            own = self._usage.get(agent_id) or {self._model.get(agent_id, ""): Usage()}
            out += [AgentUsage(agent_id, parent, kind, label, m, u) for m, u in own.items()]
        return out

    def tree(self) -> UsageNode:
        return build_usage_tree(self.records())


def _price(model: str, usage: Usage) -> float | None:
    """Cost of one model's usage; no tokens cost nothing, priced or not."""
    return 0.0 if not usage.total_tokens else cost(model, usage)


# -- rendering ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Outline:
    """Renderer-neutral shape: a head line, detail lines, children."""

    head: str
    details: tuple[str, ...]
    children: tuple[_Outline, ...]


def _outline(node: UsageNode, *, root: bool = False) -> _Outline:
    own = [ModelCost(m, u, _price(m, u)) for m, u in node.models.items()]
    details = [f"own: {_usage_text(node.usage)} · {_cost_text(own)}"]
    if node.children:
        details.append(f"with children: {_usage_text(node.total)} · {_cost_text(node.model_costs)}")
    children = [_outline(child) for child in node.children]
    if root and len(node.by_model) > 1:
        children.append(_by_model_outline(node))
    head = f"{node.label} [{node.kind}] {node.model or 'model unknown'}"
    return _Outline(head, tuple(details), tuple(children))


def _by_model_outline(node: UsageNode) -> _Outline:
    lines = tuple(
        _Outline(
            line.model or "model unknown",
            (f"{_usage_text(line.usage)} · {_money(line.cost)}",),
            (),
        )
        for line in node.model_costs
    )
    return _Outline("by model", (), lines)


def _usage_text(usage: Usage) -> str:
    write = f"cache write {usage.cache_write_tokens:,}"
    if usage.cache_write_1h_tokens:
        write = (
            f"cache write {usage.cache_write_5m_tokens:,} 5m + {usage.cache_write_1h_tokens:,} 1h"
        )
    plural = "" if usage.requests == 1 else "s"
    return (
        f"in {usage.input_tokens:,} · out {usage.output_tokens:,} · "
        f"cache read {usage.cache_read_tokens:,} · {write} · {usage.requests} request{plural}"
    )


def _money(value: float | None) -> str:
    return "cost unknown" if value is None else f"${value:.4f}"


def _cost_text(lines: Sequence[ModelCost]) -> str:
    """Known cost, and which models it leaves out."""
    priced = [line.cost for line in lines if line.cost is not None]
    unpriced = [line.model or "an unknown model" for line in lines if line.cost is None]
    if not unpriced:
        return _money(sum(priced))
    missing = f"no price for {', '.join(unpriced)}"
    if not priced:
        return f"cost unknown ({missing})"
    return f"${sum(priced):.4f} + unknown ({missing})"


def _text_lines(outline: _Outline) -> list[str]:
    lines = [outline.head, *(f"  {d}" for d in outline.details)]
    for index, child in enumerate(outline.children):
        last = index == len(outline.children) - 1
        first, rest = ("└── ", "    ") if last else ("├── ", "│   ")
        child_lines = _text_lines(child)
        lines.append(first + child_lines[0])
        lines += [rest + line for line in child_lines[1:]]
    return lines


def _rich_tree(outline: _Outline, parent: Tree | None = None) -> Tree:
    label = Text(outline.head, style="bold")
    for detail in outline.details:
        label.append("\n" + detail, style="dim")
    tree = Tree(label) if parent is None else parent.add(label)
    for child in outline.children:
        _rich_tree(child, tree)
    return tree
