"""forkagent: agents whose sub-agents fork the parent's context and share its prompt cache."""

from ._orchestration.budget import Limits
from ._orchestration.routing import ForkGate
from ._orchestration.runtime import RuntimeOptions
from ._orchestration.tasks import AgentTask, TaskResult
from .agent import Agent, AgentSummary, RunResult, Session
from .agents import AgentDefinition
from .errors import (
    AgentLimitError,
    AgentSpawnError,
    BudgetExceededError,
    ConfigurationError,
    ForkagentError,
    ModelError,
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

__all__ = [
    "Agent",
    "AgentDefinition",
    "AgentLimitError",
    "AgentSpawnError",
    "AgentSummary",
    "AgentTask",
    "AssistantMessage",
    "BudgetExceededError",
    "ConfigurationError",
    "ForkGate",
    "ForkagentError",
    "ImageBlock",
    "Limits",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
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
