"""The catalog of named agents: where the Agent tool looks a ``subagent_type`` up."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import AgentSpawnError
from .builtin import BUILTIN_AGENTS
from .definition import AgentDefinition


@dataclass(frozen=True, slots=True)
class LoadError:
    """Why one definition file was not loaded (or, as a warning, what in it was ignored)."""

    path: Path
    field: str | None
    reason: str

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        return f"{self.path}{where}: {self.reason}"


class AgentCatalog:
    """Agent definitions by name; a later definition replaces an earlier one of the same name.

    Immutable: ``with_agents`` returns a new catalog.
    """

    def __init__(
        self,
        definitions: Iterable[AgentDefinition] = BUILTIN_AGENTS,
        *,
        errors: Iterable[LoadError] = (),
        warnings: Iterable[LoadError] = (),
    ) -> None:
        self._agents = {d.name: d for d in definitions}
        self.errors = tuple(errors)
        """Files that failed to load; their agents are missing from the catalog."""
        self.warnings = tuple(warnings)
        """Fields that were ignored in files that did load."""

    def __iter__(self) -> Iterator[AgentDefinition]:
        return iter(self._agents.values())

    def __len__(self) -> int:
        return len(self._agents)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def names(self) -> list[str]:
        return list(self._agents)

    def find(self, name: str) -> AgentDefinition | None:
        """Exact name first, then a unique case-insensitive match."""
        if name in self._agents:
            return self._agents[name]
        folded = self._case_insensitive(name)
        return folded[0] if len(folded) == 1 else None

    def get(self, name: str) -> AgentDefinition:
        """Like ``find``, but a miss raises ``AgentSpawnError`` listing the known names."""
        definition = self.find(name)
        if definition is not None:
            return definition
        similar = [d.name for d in self._case_insensitive(name)]
        problem = (
            f"agent type {name!r} matches {', '.join(similar)}; use the exact name"
            if similar
            else f"unknown agent type {name!r}; available: {', '.join(self.names())}"
        )
        raise AgentSpawnError(
            f"{problem}. Run `forkagent agents` to see every agent and any file that failed to load."
        )

    def _case_insensitive(self, name: str) -> list[AgentDefinition]:
        return [d for n, d in self._agents.items() if n.casefold() == name.casefold()]

    def source_of(self, name: str) -> str:
        """The file the agent came from, or ``"built-in"``."""
        return self.get(name).source

    def with_agents(self, *definitions: AgentDefinition) -> AgentCatalog:
        """A catalog where ``definitions`` (for example given in code) replace same-named ones."""
        return AgentCatalog(
            [*self._agents.values(), *definitions], errors=self.errors, warnings=self.warnings
        )
