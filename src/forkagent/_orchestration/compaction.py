"""Compaction: near its model's window, a fork summarises the conversation and the agent
goes on from that summary and its latest turns.

The summary is written by a fork, not a fresh agent: the fork's request is the
conversation itself, so it reads all of it from the prompt cache and pays the
full price only for its directive and the summary it writes (about a tenth of
what a fresh agent handed the transcript pays). The new history starts with the
summary, says what must survive (background children still running, files the
dropped part edited, that a fork may start no agents), and keeps the latest
turns that fit whole, so every kept tool result still has its call.

The agent's next request has a new prefix, so it misses the cache once; the
cache monitor reports that as a change of the messages, which it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ForkagentError
from ..events import Compacted
from ..messages import Message, TextBlock, ToolUseBlock, UserMessage
from ..models.function import rough_tokens
from ..permissions.filters import DenyTools
from .loop import AgentRun

SUMMARY_DIRECTIVE = """Summarise the conversation above so that you can continue from the \
summary alone, because everything above is about to be replaced by it. Keep: what the user \
asked for and every constraint they gave; decisions made and why; files read, created or \
changed, with their paths; what is done, what is in progress and what remains; open \
questions; ids of agents you started. Be complete but brief. Do not use any tool: reply with \
the summary only."""

EDIT_TOOLS = ("Write", "Edit")


class CompactionError(ForkagentError):
    """The summary could not be written; the conversation was left as it was."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    summary: str
    summary_agent: str
    messages_before: int
    messages_after: int
    tokens_before: int
    """The prompt size that was compacted, as estimated from the last reported usage."""


def threshold(window: int | None, compact_at: float | None) -> int | None:
    """``compact_at`` as tokens: up to 1 a fraction of the window, above 1 a count."""
    if compact_at is None:
        return None
    if compact_at > 1:
        return int(compact_at)
    return int(window * compact_at) if window else None


def prompt_size(run: AgentRun) -> int:
    """About how many tokens the next request holds: the last one's, plus what came since."""
    usage, sent = run.last_usage, run.last_request
    if usage is None or sent is None:
        return 0
    since = run.messages[len(sent.messages) :]
    return usage.prompt_tokens + sum(rough_tokens(len(m.model_dump_json())) for m in since)


async def compact(run: AgentRun, *, keep_tokens: int) -> CompactionResult:
    """Summarise ``run``'s conversation through a fork and replace its history.

    ``keep_tokens`` bounds the latest turns kept after the summary (the turn in
    progress is always kept).
    """
    from .runtime import ForkParams, Runtime

    runtime = run.runtime
    if not isinstance(runtime, Runtime) or run.last_request is None:
        raise CompactionError("nothing to compact: the agent has not sent a request yet")
    before, tokens = len(run.messages), prompt_size(run)
    params = ForkParams(
        SUMMARY_DIRECTIVE,
        label="compaction",
        max_turns=2,
        tool_filter=DenyTools(tool.name for tool in run.tools),
    )
    child = runtime.build_fork(run, params.directive, params.label, params)
    task = runtime.start(child, background=False)
    result = await task.wait()
    if result.status != "completed" or not result.output.strip():
        raise CompactionError(
            f"the summary fork {task.id} ended {result.status}"
            + (f": {result.error}" if result.error else " without a summary")
            + "; the conversation is unchanged"
        )
    kept = recent_turns(run.messages, keep_tokens)
    dropped = run.messages[: len(run.messages) - len(kept)]
    head = _summary_blocks(result.output, _survivors(run, dropped))
    first = kept[0] if kept else None
    if isinstance(first, UserMessage):
        kept = [UserMessage(content=head + first.content, origin=first.origin), *kept[1:]]
    else:
        kept = [UserMessage(content=head, origin="system"), *kept]
    run.messages[:] = kept
    run.shared_prefix_end = None  # a fork's inherited prefix is gone with the summary
    run.last_usage = None  # the next response says how big the new history is
    run.changed()
    outcome = CompactionResult(result.output, task.id, before, len(kept), tokens)
    run.emit(Compacted(run.id, task.id, before, len(kept), tokens))
    return outcome


def recent_turns(messages: Sequence[Message], keep_tokens: int) -> list[Message]:
    """The longest tail that starts a turn (a user message with no tool results) and fits.

    The turn in progress is kept even when it alone is over ``keep_tokens``:
    the agent could not continue without it.
    """
    starts = [
        i for i, m in enumerate(messages) if isinstance(m, UserMessage) and not m.tool_results
    ]
    if not starts:
        return []
    total, chosen = 0, starts[-1]
    sizes = [rough_tokens(len(m.model_dump_json())) for m in messages]
    for start in reversed(starts):
        total = sum(sizes[start:])
        if total > keep_tokens:
            break
        chosen = start
    return list(messages[chosen:])


def _survivors(run: AgentRun, dropped: Sequence[Message]) -> list[str]:
    from .runtime import Runtime

    lines: list[str] = []
    runtime = run.runtime
    if isinstance(runtime, Runtime):
        running = runtime.open_children(run)
        if running:
            lines.append(
                "Agents you started that are still running (their results will arrive as "
                "notifications): " + ", ".join(f"{t.id} ({t.label})" for t in running)
            )
    edited = sorted(
        {
            str(block.input["file_path"])
            for message in dropped
            for block in message.content
            if isinstance(block, ToolUseBlock)
            and block.name in EDIT_TOOLS
            and "file_path" in block.input
        }
    )
    if edited:
        lines.append("Files changed in the summarised part: " + ", ".join(edited))
    if run.is_fork:
        lines.append("You are a forked child: you may not start agents of any kind.")
    return lines


def _summary_blocks(summary: str, survivors: list[str]) -> tuple[TextBlock, ...]:
    text = (
        "<compacted-history>\nThe conversation so far was summarised to fit the context "
        f"window. Summary:\n{summary.strip()}\n"
        + "".join(f"\n{line}" for line in survivors)
        + "\n</compacted-history>"
    )
    return (TextBlock(text=text),)
