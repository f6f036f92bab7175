"""The offline demo: a forking multi-agent session over a sample repository.

Everything but the model is real: the runtime, routing, forks and fan-out,
background children and their notifications, tools on real files,
transcripts and telemetry. The model is the emulator playing ``DemoBrain``.
"""

from .brain import DemoBrain
from .runner import DEMO_MODEL, FAST_LATENCY, LIVE_LATENCY, DemoReport, run_demo

__all__ = ["DEMO_MODEL", "FAST_LATENCY", "LIVE_LATENCY", "DemoBrain", "DemoReport", "run_demo"]
