"""Texts the parent model reads about its children: launches and notifications.

LESSONS 1: a background launch must tell the model that the result arrives by
itself, and every background child must end with exactly one notification.
"""

from __future__ import annotations

from ..events import NOTIFICATION_TAG
from ..usage import Usage


def background_launch_text(task_id: str, label: str) -> str:
    return (
        f"Started agent {task_id} ({label}) in the background. Its result will be added "
        f"to this conversation automatically as a <{NOTIFICATION_TAG}> when it finishes. "
        "Do not poll for it, wait for it or start it again; continue with other work, "
        "or end your turn if there is none."
    )


def moved_to_background_text(task_id: str, label: str) -> str:
    return (
        f"Agent {task_id} ({label}) was moved to the background and keeps running "
        f"where it was. Its result will arrive automatically as a <{NOTIFICATION_TAG}>; "
        "do not start it again."
    )


def usage_line(usage: Usage, turns: int, seconds: float) -> str:
    return (
        f"{turns} turns, {seconds:.1f}s, input {usage.input_tokens}, "
        f"cache read {usage.cache_read_tokens}, cache write {usage.cache_write_tokens}, "
        f"output {usage.output_tokens} tokens"
    )


def notification_text(
    *,
    task_id: str,
    status: str,
    label: str,
    result: str,
    usage: Usage,
    turns: int,
    seconds: float,
    error: str | None = None,
    worktree: str | None = None,
) -> str:
    lines = [
        f"<{NOTIFICATION_TAG}>",
        f"task: {task_id}",
        f"status: {status}",
        f"summary: {label}",
        f"usage: {usage_line(usage, turns, seconds)}",
    ]
    if worktree:
        lines.append(f"worktree: {worktree}")
    if error:
        lines.append(f"error: {error}")
    lines += ["result:", result or "(no output)", f"</{NOTIFICATION_TAG}>"]
    return "\n".join(lines)
