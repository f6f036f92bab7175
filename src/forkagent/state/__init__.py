"""What a run leaves behind, readable without the runtime: transcripts, the agent registry, worktrees.

The CLI, the telemetry and users' own tools read these; the private
orchestration package writes them. Each module is imported when one of its
names is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .lease import AgentBusyError, Lease
    from .registry import AgentRecord, Registry, RegistryError, RegistryWriter, StopResult
    from .transcript import (
        CacheEntry,
        CompactionEntry,
        MessageEntry,
        StateDirError,
        StatusEntry,
        Transcript,
        TranscriptError,
        TranscriptHeader,
        TranscriptTail,
        TranscriptWriter,
        UsageEntry,
        flush_transcripts,
        read_transcript,
        read_tree,
        state_dir,
        transcript_path,
    )
    from .worktrees import (
        LeftWorktree,
        Worktree,
        WorktreeError,
        WorktreeResult,
        create_worktree,
        finish_worktree,
        left_worktree,
        sweep_worktrees,
        worktree_notice,
    )

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".lease": ("AgentBusyError", "Lease"),
        ".registry": ("AgentRecord", "Registry", "RegistryError", "RegistryWriter", "StopResult"),
        ".transcript": (
            "CacheEntry",
            "CompactionEntry",
            "MessageEntry",
            "StateDirError",
            "StatusEntry",
            "Transcript",
            "TranscriptError",
            "TranscriptHeader",
            "TranscriptTail",
            "TranscriptWriter",
            "UsageEntry",
            "flush_transcripts",
            "read_transcript",
            "read_tree",
            "state_dir",
            "transcript_path",
        ),
        ".worktrees": (
            "Worktree",
            "WorktreeError",
            "WorktreeResult",
            "LeftWorktree",
            "create_worktree",
            "finish_worktree",
            "left_worktree",
            "sweep_worktrees",
            "worktree_notice",
        ),
    },
)

__all__ = [
    "AgentBusyError",
    "AgentRecord",
    "CacheEntry",
    "CompactionEntry",
    "Lease",
    "LeftWorktree",
    "MessageEntry",
    "Registry",
    "RegistryError",
    "RegistryWriter",
    "StateDirError",
    "StatusEntry",
    "StopResult",
    "Transcript",
    "TranscriptError",
    "TranscriptHeader",
    "TranscriptTail",
    "TranscriptWriter",
    "UsageEntry",
    "Worktree",
    "WorktreeError",
    "WorktreeResult",
    "create_worktree",
    "finish_worktree",
    "flush_transcripts",
    "left_worktree",
    "read_transcript",
    "read_tree",
    "state_dir",
    "sweep_worktrees",
    "transcript_path",
    "worktree_notice",
]
