"""The Agent tool: how a model starts forks and named agents.

Its schema is fixed when the session starts (tool bytes are part of the
cached prefix): the ``fork`` field exists only where forking is available.
A ``fork`` sent anyway still reaches the router, whose note tells the model
that forking is not available.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ToolError
from ..messages import JsonValue
from .base import ArgsTool, ToolContext, ToolOutput
from .spawn import SpawnRequest


class AgentArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(description="The task for the agent: complete and self-contained.")
    description: str = Field(
        default="", description="A short (3-5 word) label for the task, shown in status views."
    )
    subagent_type: str | None = Field(
        default=None, description="Which named agent to run; general-purpose when omitted."
    )
    fork: bool | None = Field(
        default=None,
        description=(
            "Set true to fork: the child inherits this whole conversation, system prompt, "
            "tools and model (cheap through the prompt cache). subagent_type is then ignored."
        ),
    )
    run_in_background: bool | None = Field(
        default=None,
        description=(
            "Run without waiting. The result is added to the conversation automatically "
            "when the agent finishes; do not poll for it."
        ),
    )
    name: str | None = Field(default=None, description="An optional name for the agent.")
    model: str | None = Field(
        default=None, description="Model override for a named agent (e.g. haiku, sonnet)."
    )
    isolation: Literal["worktree"] | None = Field(
        default=None, description="'worktree' runs the agent in its own git worktree."
    )


_GUIDANCE = """Start a sub-agent to work on a task.

Use fork: true when the work benefits from everything in this conversation
(the same files read, the same plan): the child continues from here and pays
little for the shared context. For most self-contained tasks prefer a named
agent type suited to it. Several Agent calls in one reply run in parallel.
Set run_in_background when you have other work to do meanwhile; background
results arrive by themselves."""


class AgentTool(ArgsTool):
    name = "Agent"
    Args = AgentArgs
    read_only = True
    """Starting an agent changes nothing by itself, so it needs no approval: every call
    the child makes is checked under a policy with no more latitude than this one's."""

    def __init__(
        self, *, fork_available: bool, agent_types: Sequence[tuple[str, str]] = ()
    ) -> None:
        self.fork_available = fork_available
        listing = "\n".join(f"- {name}: {desc}" for name, desc in agent_types)
        guidance = _GUIDANCE if fork_available else _GUIDANCE.split("\n\nUse fork")[0]
        self.description = guidance + (f"\n\nAgent types:\n{listing}" if listing else "")

    @property
    def input_schema(self) -> dict[str, JsonValue]:
        schema = super().input_schema
        properties = schema.get("properties")
        if not self.fork_available and isinstance(properties, Mapping):
            kept = {name: spec for name, spec in properties.items() if name != "fork"}
            schema = {**schema, "properties": kept}
        return schema

    async def run(self, args: AgentArgs, ctx: ToolContext) -> ToolOutput:
        runtime = ctx.runtime
        if runtime is None or ctx.agent_id not in runtime.runs:
            raise ToolError("the Agent tool only works inside a forkagent run")
        return await runtime.spawn(
            runtime.runs[ctx.agent_id],
            SpawnRequest(
                prompt=args.prompt,
                description=args.description or args.name or "",
                subagent_type=args.subagent_type,
                fork=args.fork,
                run_in_background=args.run_in_background,
                model=args.model,
                isolation=args.isolation,
            ),
        )
