"""The ``forkagent chat`` screen on prompt_toolkit: the prompt stays open while the
agents work, so keys and slash commands reach them mid-turn.

One worker runs the main agent's turns in order (the user's messages, the
background reports that arrive while it is idle, ``/compact``); everything
else (Ctrl+B, ``/stop``, ``/tasks``...) acts at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import History
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output
from prompt_toolkit.shortcuts import print_formatted_text

from ...agent import RunResult, Session
from ...permissions.prompt import CHOICES
from . import commands
from .ask import InlineQuestions, answer_line
from .commands import Job
from .view import ChatView

HINTS = (
    "Enter send · \\ Enter new line · Ctrl+B background · Ctrl+C interrupt, twice: leave · /help"
)


class ChatApp:
    """One chat on one session; ``run`` returns when the user leaves."""

    def __init__(
        self,
        session: Session[Any],
        view: ChatView,
        questions: InlineQuestions,
        *,
        cwd: Path,
        history: History | None = None,
        input: Input | None = None,
        output: Output | None = None,
    ) -> None:
        self.session, self.view, self.questions, self.cwd = session, view, questions, cwd
        self._jobs: asyncio.Queue[Job] = asyncio.Queue()
        self._turn: asyncio.Task[object] | None = None
        self._exit_armed = False
        self.prompt: PromptSession[str] = PromptSession(
            message=self._message,
            multiline=True,
            prompt_continuation="  ",
            history=history,
            bottom_toolbar=lambda: f"{view.panel(busy=self.busy)}\n{HINTS}",
            key_bindings=self._bindings(),
            refresh_interval=0.5,
            input=input,
            output=output,
        )
        self.prompt.default_buffer.on_text_changed += lambda _: self._disarm()
        view.main_id = session.id
        view.write = self.write
        view.changed = questions.changed = self.prompt.app.invalidate
        view.on_report = lambda task_id: self.enqueue(session.answer_notifications)
        questions.answered = lambda request, key: view.say(answer_line(request, key))

    @property
    def busy(self) -> bool:
        """Whether a turn (or ``/compact``) is running."""
        return self._turn is not None

    def write(self, text: str) -> None:
        """Print above the prompt (the view's output)."""
        print_formatted_text(text, output=self.prompt.output)

    async def run(self) -> None:
        self.session.streaming = True
        worker = asyncio.create_task(self._work())
        try:
            while True:
                try:
                    text = await self.prompt.prompt_async()
                except EOFError:
                    break
                self.submit(text)
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
            self.view.say(self.leaving())

    def submit(self, text: str) -> None:
        """A line the user entered: a slash command acts now, a message waits its turn."""
        self._disarm()
        text = text.strip()
        if not text:
            return
        self.view.echo(text)
        if text.startswith("/"):
            commands.run(self, text)
            return
        if self.busy:
            self.view.say("(queued: it goes to the agent when the current turn ends)")
        self.enqueue(lambda: self.session.send(text))

    def enqueue(self, job: Job) -> None:
        self._jobs.put_nowait(job)

    async def _work(self) -> None:
        """Run the jobs one at a time; a failure is shown and the chat goes on."""
        while True:
            job = await self._jobs.get()
            self._turn = turn = asyncio.create_task(job())
            self.prompt.app.invalidate()
            try:
                outcome = await turn
                if isinstance(outcome, RunResult) and outcome.status != "completed":
                    self.view.say(ended_early(outcome))
            except asyncio.CancelledError:
                if not turn.cancelled() or _cancelling():
                    raise
                self.view.say(self._interrupted())
            except Exception as exc:  # the chat outlives a failed turn; the record says failed
                self.view.say(f"error: {type(exc).__name__}: {exc}")
            finally:
                self._turn = None
                self.view.end_stream()
                self.prompt.app.invalidate()

    # -- keys --------------------------------------------------------------------

    def _bindings(self) -> KeyBindings:
        keys = KeyBindings()
        asking = Condition(lambda: self.questions.pending is not None)

        @keys.add("enter", filter=~asking)
        def _send(event: KeyPressEvent) -> None:
            buffer = event.current_buffer
            if buffer.document.text_before_cursor.endswith("\\"):
                buffer.delete_before_cursor()
                buffer.insert_text("\n")
            else:
                buffer.validate_and_handle()

        @keys.add("escape", "enter")
        @keys.add("c-j")
        def _new_line(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        for key in CHOICES:

            @keys.add(key, filter=asking, eager=True)
            def _answer(event: KeyPressEvent, key: str = key) -> None:
                self.questions.answer(key)

        @keys.add("c-b")
        def _background(event: KeyPressEvent) -> None:
            self.to_background()

        @keys.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            self.interrupt(event)

        @keys.add("c-d", filter=Condition(lambda: not self.prompt.default_buffer.text))
        def _leave(event: KeyPressEvent) -> None:
            event.app.exit(exception=EOFError)

        return keys

    def to_background(self) -> None:
        """Ctrl+B and ``/bg``: the children the main agent waits for go on in the background."""
        waiting = self.view.sync_children()
        if not waiting:
            self.view.say("no sync child is running")
        for line in waiting:
            self.session.move_to_background(line.id)

    def interrupt(self, event: KeyPressEvent) -> None:
        """Ctrl+C: stop the turn; else clear the line; else, pressed twice, leave."""
        buffer = event.current_buffer
        if self._turn is not None:
            self._turn.cancel()
        elif buffer.text:
            buffer.reset()
        elif self._exit_armed:
            event.app.exit(exception=EOFError)
        else:
            self.view.say("press Ctrl+C again to leave")
            self._exit_armed = True

    def _disarm(self) -> None:
        self._exit_armed = False

    # -- what is said ------------------------------------------------------------

    def _message(self) -> str:
        streaming = f"{self.view.partial}\n" if self.view.partial else ""
        return streaming + self.questions.text() + ("… " if self.busy else "› ")

    def _interrupted(self) -> str:
        running = [f"{line.id} {line.label!r}" for line in self.view.children(running=True)]
        kept = f"; still running in the background: {', '.join(running)}" if running else ""
        return f"interrupted: the turn stopped{kept}"

    def leaving(self) -> str:
        """Which children still run and what leaving does to them, and how to come back."""
        back = f"continue later with: forkagent chat --continue (or --resume {self.session.id})"
        running = self.view.children(running=True)
        if not running:
            return back
        names = "\n".join(f"  {line.id} {line.label!r} ({line.status})" for line in running)
        return (
            f"still running:\n{names}\nleaving stops them (recorded cancelled); when you "
            f"continue, the main agent learns they did not finish and can start them again.\n"
            + back
        )


def _cancelling() -> bool:
    """Whether the current task itself is being cancelled (not just what it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def ended_early(result: RunResult[Any]) -> str:
    """Why a turn stopped short (a limit, a cut reply, an error): the chat says so."""
    reason = result.error or result.stop_reason or "no reason given"
    return f"the turn ended {result.status}: {reason}"
