"""A local emulator of the providers' wire formats and prompt-cache rules.

``Emulator`` serves the Anthropic Messages, OpenAI Chat Completions (with the
DashScope and DeepSeek cache profiles) and Gemini ``generateContent`` APIs,
in process (``dispatch``) or over HTTP (``serve``), with each provider's
documented cache rules (``docs/emulator.md``). The HTTP server (the ``server``
extra: starlette and uvicorn) is imported when first used.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .core import Emulator, EmulatorReply, default_emulator, use_emulator
from .errors import EmulatedDisconnect
from .faults import Fault, FaultPlan
from .log import BreakpointOutcome, LogEntry, RequestLog
from .policies import (
    Contract,
    EmulatedRequest,
    Policy,
    Reply,
    ToolCall,
    default_policy,
    tool_choosing_policy,
)
from .profiles import CacheSettings
from .timing import Latency, VirtualClock, loop_clock

if TYPE_CHECKING:
    from .server import RunningServer, serve

__getattr__, __dir__ = lazy_exports(__name__, {".server": ("RunningServer", "serve")})

__all__ = [
    "BreakpointOutcome",
    "CacheSettings",
    "Contract",
    "EmulatedDisconnect",
    "EmulatedRequest",
    "Emulator",
    "EmulatorReply",
    "Fault",
    "FaultPlan",
    "Latency",
    "LogEntry",
    "Policy",
    "Reply",
    "RequestLog",
    "RunningServer",
    "ToolCall",
    "VirtualClock",
    "default_emulator",
    "default_policy",
    "loop_clock",
    "serve",
    "tool_choosing_policy",
    "use_emulator",
]
