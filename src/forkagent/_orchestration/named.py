"""Building a named agent's run: its own prompt, tool pool, model and limits."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..agents import AgentCatalog, AgentDefinition, assemble_tool_pool, resolve_agent_model
from ..hooks import CommandHook, Hooks
from ..mcp import McpConnection, McpPool
from ..messages import user
from ..models import resolve_model
from ..permissions import PermissionMode, PermissionPolicy
from ..requests import ModelSettings
from ..tools.base import Tool
from ..tools.spawn import SpawnRequest
from .loop import AgentRun
from .prompt import render_system_prompt
from .runtime import PreparedChild, Runtime


@dataclass(frozen=True, slots=True)
class NamedAgents:
    """What a runtime needs to start named agents: definitions and the tool registry."""

    catalog: AgentCatalog
    available_tools: tuple[Tool, ...]
    untrusted_dir: Path | None = None
    """A project directory the user has not trusted: hooks of agent files from it do not run."""
    mcp: McpPool | None = None
    """The session's MCP servers: a definition's ``mcpServers`` start (or join) them here."""

    def build(
        self, runtime: Runtime, parent: AgentRun, agent_type: str, request: SpawnRequest
    ) -> PreparedChild:
        definition = self.catalog.get(agent_type)
        spec = resolve_agent_model(definition.model, request.model, parent.model.spec)
        model = parent.model
        if spec != parent.model.spec:
            model = resolve_model(spec)
            runtime.owned_models.append(model)
        tools = tuple(assemble_tool_pool(definition, self.available_tools))
        prompt = "\n\n".join(p for p in (definition.initial_prompt, request.prompt) if p)
        limits = runtime.options.child_limits
        if definition.max_turns is not None:
            limits = replace(limits, max_turns=definition.max_turns)
        run = AgentRun(
            id=runtime.new_id(_slug(definition.name)),
            model=model,
            system=render_system_prompt(definition.system_prompt, parent.cwd),
            tools=tools,
            tool_specs=tuple(t.spec() for t in tools),
            settings=_child_settings(parent.settings, definition.name),
            cwd=parent.cwd,
            budget=runtime.tree_budget.child(limits),
            messages=[user(prompt)],
            kind="named",
            label=request.description or definition.name,
            parent_id=parent.id,
            depth=parent.depth + 1,
            gates=parent.gates,
            redact=parent.redact,
            hooks=_agent_hooks(parent, self._runnable_hooks(definition)),
            policy=_agent_policy(parent.policy, definition.permission_mode),
            timeout=parent.timeout,
        )
        child = PreparedChild(
            runtime.adopt(run),
            background_default=definition.background,
            isolation=definition.isolation,
        )
        if definition.mcp_servers and self.mcp is not None:
            self._with_servers(child, definition, self.mcp)
        return child

    def _with_servers(
        self, child: PreparedChild, definition: AgentDefinition, pool: McpPool
    ) -> None:
        """Start (or join) the servers the definition names before the child's first request,
        with their tools in its own tool array; let go of them when it ends."""
        servers = pool.resolve(definition.mcp_servers, definition.source)
        held: list[McpConnection] = []

        async def setup() -> None:
            held.extend(await pool.acquire(servers))
            tools = [t for c in held for t in c.tools if definition.allows_tool(t.name)]
            child.run.add_tools(tools)

        async def teardown() -> None:
            await pool.release(held)

        child.setup, child.teardown = setup, teardown

    def _runnable_hooks(self, definition: AgentDefinition) -> tuple[CommandHook, ...]:
        """A definition's hooks, unless its file comes from a directory the user has not trusted."""
        if self.untrusted_dir is None or not definition.hooks:
            return definition.hooks
        source = Path(definition.source)
        if source.is_absolute() and self.untrusted_dir in source.resolve().parents:
            return ()
        return definition.hooks


def _agent_policy(
    parent: PermissionPolicy | None, mode: PermissionMode | None
) -> PermissionPolicy | None:
    """The definition's mode, never with more latitude than the parent's policy."""
    if parent is not None:
        return parent.for_child(mode=mode)
    return PermissionPolicy(mode=mode) if mode is not None else None


def _agent_hooks(parent: AgentRun, own: tuple[CommandHook, ...]) -> Hooks | None:
    """The parent's hooks plus the definition's own."""
    if not own:
        return parent.hooks
    mine = Hooks.from_commands(own)
    return parent.hooks.merged(mine) if parent.hooks else mine


def _child_settings(parent: ModelSettings, agent_name: str) -> ModelSettings:
    """Fresh settings that keep the parent's output cap and a related routing key."""
    key = f"{parent.cache_key}/{agent_name}" if parent.cache_key else None
    return ModelSettings(max_tokens=parent.max_tokens, cache_key=key, cache_ttl=parent.cache_ttl)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "agent"
