"""Writes every agent of a tree to its transcript and to the registry.

An event listener plus the runs' change hook: each history change is one
appended line, so a transcript survives a kill -9 up to its last complete
line. The lines are written by the transcripts' helper process
(``state._appends``), in order, so that the event loop never waits on the disk.
``skip_transcript`` leaves the files out; the registry row still tells
``forkagent ps`` the agent exists. Registry writes go through a
``RegistryWriter``, off the event loop too.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..events import (
    AgentFinished,
    AgentMovedToBackground,
    AgentStarted,
    CacheReported,
    Compacted,
    Event,
    ResponseReceived,
)
from ..messages import JsonValue
from ..permissions.record import policy_record
from ..pricing import cost
from ..state.registry import Registry, RegistryWriter
from ..state.transcript import (
    HeaderTemplate,
    HistoryReference,
    TranscriptError,
    TranscriptHeader,
    TranscriptWriter,
    at_turn_end,
    check_written,
    flush_transcripts,
    make_state_dir,
    running_loop,
    shared_length,
    state_dir,
    transcript_name,
    tree_folder,
)
from .loop import AgentRun

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Recorder:
    runs: dict[str, AgentRun]
    root_id: str
    registry: Registry | None
    transcripts: bool = True
    trusted: bool | None = None
    """Whether the project's hooks could run: recorded so that a resume keeps the decision."""
    writers: dict[str, TranscriptWriter] = field(default_factory=dict)
    """The transcripts of the agents that can still write."""
    ended: list[str] = field(default_factory=list)
    """The files of children that finished: ``close`` waits for their lines, raises a loss."""
    registry_writes: RegistryWriter | None = field(init=False, default=None)
    state: Path = field(init=False, default_factory=state_dir)
    """The state directory as the tree started: all of its transcripts go to one folder."""
    lost: list[TranscriptError] = field(init=False, default_factory=list)
    """Transcripts that lost a line and end there; ``close`` raises the first."""
    _folder: str = field(init=False)
    """The tree's transcripts' folder (a string: each fork's path is joined to it)."""
    _found: set[str] | None = field(init=False, default=None)
    """The files in the tree's folder when its first agent started (a resumed tree's)."""
    _template: tuple[tuple[object, ...], HeaderTemplate] | None = field(init=False, default=None)
    """The last header written, by what it was made from: a fork's siblings share it."""
    _held: tuple[str, TranscriptWriter] | None = field(init=False, default=None)
    """The agent whose lines are held, and its writer (``_hold``)."""
    _releasing: asyncio.AbstractEventLoop | None = field(init=False, default=None)
    """The loop whose turn's end releases what is held (not another loop's, which may have
    closed before its turn ended)."""
    _on_change: Callable[[AgentRun], None] = field(init=False, repr=False)
    """``_sync`` bound once, every recorded run's ``on_change``: not a bound method per run."""

    def __post_init__(self) -> None:
        self._folder = str(tree_folder(self.root_id, base=self.state))
        self._on_change = self._sync
        if self.registry is not None:
            self.registry_writes = RegistryWriter(self.registry)

    def __call__(self, event: Event) -> None:
        if (record := _RECORD.get(type(event))) is None:
            return  # one look-up: a fork's requests and stream events are most of them
        if (run := self.runs.get(event.agent_id)) is not None:
            record(self, run, event)

    def _line(self, run: AgentRun, event: Event) -> TranscriptWriter | None:
        """The event's line in ``run``'s transcript, held with its others; the writer it was
        given to (None: the transcript is not written)."""
        if (writer := self.writers.get(run.id)) is not None:
            self._hold(run.id, writer)
            try:
                writer.on_event(event)
            except TranscriptError as exc:
                self._stop_recording(run.id, exc)
        return writer

    def _response(self, run: AgentRun, event: ResponseReceived) -> None:
        self._line(run, event)
        if (writes := self.registry_writes) is not None:
            usage = run.usage
            # The run's first response's usage is its total (``_charge`` shares it), which the
            # event's cost prices at the run's model, the name its request was sent with.
            total = event.cost if usage is event.response.usage else cost(run.model.name, usage)
            writes.record_usage(run.id, usage, turns=run.turns, cost=total)

    def _background(self, run: AgentRun, event: AgentMovedToBackground) -> None:
        self._line(run, event)
        if (writes := self.registry_writes) is not None:
            writes.update(run.id, background=True)

    def _finished(self, run: AgentRun, event: AgentFinished) -> None:
        if self._line(run, event) is not None:
            self._release()
            if run.parent_id is not None and run.id in self.writers:
                self._end(run.id)
        if (writes := self.registry_writes) is not None:
            writes.finish(run.id, event.status, output=event.output, error=event.error)

    def _end(self, agent_id: str) -> None:
        """A child ended: its writer goes (a tree of thousands of finished agents would keep
        them all until the session closes, and the garbage collector would walk them);
        ``close`` still checks its lines. Starting it again attaches a new writer."""
        self.ended.append(self.writers.pop(agent_id).end())

    def _sync(self, run: AgentRun) -> None:
        """The run's history changed: record it, if its transcript is still written."""
        if (writer := self.writers.get(run.id)) is not None:
            self._hold(run.id, writer)
            try:
                writer.sync(run.messages)
            except TranscriptError as exc:
                self._stop_recording(run.id, exc)

    def _hold(self, agent_id: str, writer: TranscriptWriter) -> None:
        """Hold ``agent_id``'s lines until its agent finishes, another agent's line comes, or
        the loop's turn ends (what it held then goes before the turn's lines leave): a fork's
        usage, cache report, reply and status, one after another, are one append.

        One writer at a time, so that the lines leave in the order they were given: a line
        may refer to another transcript's (a fork's header, a shared message). Its own
        writer's lines already held stay held.
        """
        if (held := self._held) is not None:
            if held[1] is writer:
                return
            self._release()
        if (loop := running_loop()) is None or not writer.hold():
            return  # off a loop each line goes at once; in a ``together`` block, with it
        self._held = (agent_id, writer)
        if self._releasing is not loop:
            self._releasing = loop
            at_turn_end(loop, self._turn_ended)

    def _release(self) -> None:
        """Hand the held lines over, in one append; a loss stops that transcript there."""
        if (held := self._held) is not None:
            self._held = None
            try:
                held[1].release()
            except TranscriptError as exc:
                self._stop_recording(held[0], exc)

    def _turn_ended(self) -> None:
        self._releasing = None
        self._release()

    def _stop_recording(self, agent_id: str, error: TranscriptError) -> None:
        """A transcript lost a line: it ends there (no hole), the agent runs on, close raises."""
        logger.error("the transcript of %s stops here: %s", agent_id, error)
        self.lost.append(error)
        writer = self.writers.pop(agent_id)
        if self._held is not None and self._held[1] is writer:
            self._held = None  # its held lines come after the loss
        with suppress(TranscriptError):  # already reported
            writer.close()

    def _attach(self, run: AgentRun, started: AgentStarted) -> None:
        if self._held is not None:  # first: a fork's header refers to the lines its parent wrote
            self._release()
        background = started.background
        keep = self.transcripts and run.keep_transcript
        path: str | None = None
        if keep:
            name = transcript_name(run.id)
            path = f"{self._folder}{os.sep}{name}"  # no ``Path`` made per fork
            new = self._new_file(name)
            writer = TranscriptWriter(path, background=True, new=new, folder=self._folder)
            self.writers[run.id] = writer
            try:
                if writer.header_written:
                    with writer.together():  # history and status: one write
                        writer.sync(run.messages)
                        writer.on_event(started)
                else:
                    self._header(writer, run, background)  # with its status line
            except TranscriptError as exc:
                self._stop_recording(run.id, exc)
            run.on_change = self._on_change
        if (writes := self.registry_writes) is not None:
            writes.register_started(
                run.id,
                root_id=self.root_id,
                model=run.model.spec,
                kind=run.kind,
                parent_id=run.parent_id,
                label=run.label,
                background=background,
                cwd=str(run.cwd),
                transcript=path,
            )

    def _new_file(self, name: str) -> bool:
        """Whether no transcript named ``name`` is in the tree's folder, known without a
        system call per agent.

        One process runs a tree (``state.lease``) and every agent id it makes is new,
        so a file not in the folder when the tree started is not there: a fork need
        not look for one (a system call per fork on the event loop).
        """
        if self._found is None:
            make_state_dir(self._folder)  # once: every writer of the tree gets it made
            try:
                self._found = set(os.listdir(self._folder))
            except FileNotFoundError:
                self._found = set()
        new = name not in self._found
        self._found.add(name)  # from now on it is there (an agent started again)
        return new

    def _header(self, writer: TranscriptWriter, run: AgentRun, background: bool) -> None:
        """A new transcript's header, history and "running" status, in one append; a fork's
        refers to the history its parent recorded."""
        parent = self.writers.get(run.parent_id or "") if run.is_fork else None
        above = parent.written_header if parent is not None else None
        messages = run.messages.snapshot()  # a ``History``: ``freeze`` would ask for a view first
        recorded = parent.history if parent is not None else ()
        shared = shared_length(recorded, messages) if parent is not None else 0
        reference = None
        if parent is not None and above is not None and shared:
            same = above.system == run.system and above.tools == run.tool_specs
            reference = (above.agent_id, shared, parent.lines, same)
        template = self._template_for(run, background, reference)
        # The parent's recorded history when the fork shares all of it (its siblings, each a
        # new view of the same items, need no view made per fork).
        inherited = recorded if shared == len(recorded) else messages.prefix(shared)
        writer.header_from(template, run.id, run.label, inherited, messages, status="running")

    def _template_for(
        self, run: AgentRun, background: bool, reference: tuple[str, int, int, bool] | None
    ) -> HeaderTemplate:
        """The header ``run`` shares with its siblings: the last one made, when made from the
        same values (each sibling of a ``fork`` call after the first). The key holds every
        value ``header_for`` reads but the id and label (``trusted`` is the recorder's), compared
        by identity first."""
        key = (
            run.parent_id,
            run.kind,
            run.model.spec,
            run.system,
            run.tool_specs,
            run.settings,
            run.cwd,
            run.shared_prefix_end,
            background,
            reference,
            run.policy,  # its record is made only for a new header
        )
        if self._template is None or self._template[0] != key:
            history_from = None
            if reference is not None:
                agent_id, messages, lines, prompt = reference
                history_from = HistoryReference(
                    agent_id=agent_id, messages=messages, lines=lines, prompt=prompt
                )
            header = header_for(
                run,
                root_id=self.root_id,
                background=background,
                history_from=history_from,
                extra={"permissions": policy_record(run.policy, self.trusted)},
            )
            self._template = (key, HeaderTemplate(header))
        return self._template[1]

    @property
    def has_records(self) -> bool:
        """Whether ``close`` has anything to wait for or to raise."""
        return bool(self.writers or self.ended or self.lost) or self.registry_writes is not None

    def close(self) -> None:
        """Close the transcripts and the registry's writer, which ends meanwhile.

        Raises the first ``TranscriptError`` of a transcript that lost lines, once every
        writer is closed and the registry written: the agents ran on, their records did not.
        """
        self._release()
        if self.registry_writes is not None:
            self.registry_writes.close(wait=False)
        for writer in self.writers.values():
            try:
                writer.close()
            except TranscriptError as exc:
                self.lost.append(exc)
        flush_transcripts()
        for file in self.ended:
            try:
                check_written(file)
            except TranscriptError as exc:
                self.lost.append(exc)
        if self.registry_writes is not None:
            self.registry_writes.close()
        if self.lost:
            raise self.lost[0]


_RECORD: dict[type[Event], Callable[[Recorder, AgentRun, Any], object]] = {
    AgentStarted: Recorder._attach,
    ResponseReceived: Recorder._response,
    CacheReported: Recorder._line,
    AgentMovedToBackground: Recorder._background,
    AgentFinished: Recorder._finished,
    Compacted: Recorder._line,
}
"""What the recorder does with each event type it records (``TranscriptWriter.RECORDED_EVENTS``),
by exact type: one look-up, then straight to its lines and rows. ``Any``: each takes the type
it is kept under."""


def header_for(
    run: AgentRun,
    *,
    root_id: str,
    background: bool = False,
    history_from: HistoryReference | None = None,
    extra: dict[str, JsonValue] | None = None,
) -> TranscriptHeader:
    """The header of a live run, taken from what its requests are built from.

    A header whose ``history_from`` takes the prompt from the parent leaves its system
    prompt and tools out: they are kept once, in the parent's header.
    """
    inherited = history_from is not None and history_from.prompt
    return TranscriptHeader(
        agent_id=run.id,
        parent_id=run.parent_id,
        root_id=root_id,
        kind=run.kind,
        label=run.label,
        model=run.model.spec,
        system="" if inherited else run.system,
        tools=() if inherited else run.tool_specs,
        settings=run.settings,
        cwd=str(run.cwd),
        shared_prefix_end=run.shared_prefix_end,
        background=background,
        history_from=history_from,
        extra=extra or {},
    )
