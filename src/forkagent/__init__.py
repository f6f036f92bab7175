"""forkagent: agents whose sub-agents fork the parent's context and share its prompt cache.

Names load on first use, so ``import forkagent`` stays cheap; ``from forkagent
import Agent`` imports what ``Agent`` needs.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from ._lazy import lazy_exports

try:
    __version__ = version("forkagent")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from ._orchestration.budget import Limits
    from ._orchestration.compaction import CompactionError, CompactionResult
    from ._orchestration.executor import Executor, InProcessExecutor, Placement
    from ._orchestration.fanout import FanoutMode
    from ._orchestration.routing import ForkGate
    from ._orchestration.runtime import ForkParams, RuntimeOptions
    from ._orchestration.tasks import AgentTask, TaskResult
    from .agent import Agent, AgentSummary, ForkHandle, RunResult, Session
    from .agents import AgentDefinition
    from .errors import (
        AgentLimitError,
        AgentSpawnError,
        BudgetExceededError,
        ConfigurationError,
        ForkagentError,
        ModelError,
        OutputError,
        ProviderError,
        ToolError,
    )
    from .messages import (
        AssistantMessage,
        ImageBlock,
        TextBlock,
        ThinkingBlock,
        ToolResultBlock,
        ToolUseBlock,
        UserMessage,
    )
    from .models import Model, ModelResponse, resolve_model
    from .requests import ModelRequest, ModelSettings
    from .tools import Tool, ToolContext, tool
    from .usage import Usage

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._orchestration.budget": ("Limits",),
        "._orchestration.compaction": ("CompactionError", "CompactionResult"),
        "._orchestration.executor": ("Executor", "InProcessExecutor", "Placement"),
        "._orchestration.fanout": ("FanoutMode",),
        "._orchestration.routing": ("ForkGate",),
        "._orchestration.runtime": ("ForkParams", "RuntimeOptions"),
        "._orchestration.tasks": (
            "AgentTask",
            "TaskResult",
        ),
        ".agent": (
            "Agent",
            "AgentSummary",
            "ForkHandle",
            "RunResult",
            "Session",
        ),
        ".agents": ("AgentDefinition",),
        ".errors": (
            "AgentLimitError",
            "AgentSpawnError",
            "BudgetExceededError",
            "ConfigurationError",
            "ForkagentError",
            "ModelError",
            "OutputError",
            "ProviderError",
            "ToolError",
        ),
        ".messages": (
            "AssistantMessage",
            "ImageBlock",
            "TextBlock",
            "ThinkingBlock",
            "ToolResultBlock",
            "ToolUseBlock",
            "UserMessage",
        ),
        ".models": (
            "Model",
            "ModelResponse",
            "resolve_model",
        ),
        ".requests": (
            "ModelRequest",
            "ModelSettings",
        ),
        ".tools": (
            "Tool",
            "ToolContext",
            "tool",
        ),
        ".usage": ("Usage",),
    },
)

__all__ = [
    "Agent",
    "AgentDefinition",
    "AgentLimitError",
    "AgentSpawnError",
    "AgentSummary",
    "AgentTask",
    "AssistantMessage",
    "BudgetExceededError",
    "CompactionError",
    "CompactionResult",
    "ConfigurationError",
    "Executor",
    "FanoutMode",
    "ForkGate",
    "ForkHandle",
    "ForkParams",
    "ForkagentError",
    "ImageBlock",
    "InProcessExecutor",
    "Limits",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OutputError",
    "Placement",
    "ProviderError",
    "RunResult",
    "RuntimeOptions",
    "Session",
    "TaskResult",
    "TextBlock",
    "ThinkingBlock",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "UserMessage",
    "resolve_model",
    "tool",
]
