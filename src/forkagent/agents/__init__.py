"""Named agents: definitions (built-in and from markdown files), model resolution, tool pools.

The loader (and YAML with it) is imported when first used.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .builtin import BUILTIN_AGENTS, DEFAULT_AGENT, EXPLORE, GENERAL_PURPOSE, PLAN
from .definition import (
    AGENT_TOOL,
    INHERIT,
    AgentDefinition,
    Isolation,
    PermissionMode,
    canonical_tool_name,
)
from .registry import AgentCatalog, LoadError
from .resolve import (
    MODEL_ALIASES,
    PROVIDER_TIERS,
    SUBAGENT_MODEL_ENV,
    ToolPool,
    assemble_tool_pool,
    resolve_agent_model,
)

if TYPE_CHECKING:
    from .loader import load_agent_file, load_agents, project_agent_dirs, user_agent_dirs

__getattr__, __dir__ = lazy_exports(
    __name__,
    {".loader": ("load_agent_file", "load_agents", "project_agent_dirs", "user_agent_dirs")},
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
