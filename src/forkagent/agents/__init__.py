"""Named agents: definitions (built-in and from markdown files), model resolution, tool pools."""

from .builtin import BUILTIN_AGENTS, DEFAULT_AGENT, EXPLORE, GENERAL_PURPOSE, PLAN
from .definition import (
    AGENT_TOOL,
    INHERIT,
    AgentDefinition,
    Isolation,
    PermissionMode,
    canonical_tool_name,
)
from .loader import load_agent_file, load_agents, project_agent_dirs, user_agent_dirs
from .registry import AgentCatalog, LoadError
from .resolve import (
    MODEL_ALIASES,
    PROVIDER_TIERS,
    SUBAGENT_MODEL_ENV,
    ToolPool,
    assemble_tool_pool,
    resolve_agent_model,
)

__all__ = [
    "AGENT_TOOL",
    "BUILTIN_AGENTS",
    "DEFAULT_AGENT",
    "EXPLORE",
    "GENERAL_PURPOSE",
    "INHERIT",
    "MODEL_ALIASES",
    "PLAN",
    "PROVIDER_TIERS",
    "SUBAGENT_MODEL_ENV",
    "AgentCatalog",
    "AgentDefinition",
    "Isolation",
    "LoadError",
    "PermissionMode",
    "ToolPool",
    "assemble_tool_pool",
    "canonical_tool_name",
    "load_agent_file",
    "load_agents",
    "project_agent_dirs",
    "resolve_agent_model",
    "user_agent_dirs",
]
