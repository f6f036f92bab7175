"""``forkagent chat`` driven through prompt_toolkit's pipe input, on the in-process
emulator: the keys a user presses, the lines the chat shows, what the records say."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput
from typer.testing import CliRunner

from forkagent.cli import app
from forkagent.cli.chat import open_chat
from forkagent.cli.chat.app import ChatApp
from forkagent.cli.chat.start import ChatStart
from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator
from forkagent.emulator.policies import EmulatedRequest, default_policy
from forkagent.errors import ConfigurationError
from forkagent.messages import TextBlock, UserMessage
from forkagent.state.registry import Registry

CTRL_B, CTRL_C, CTRL_D, ENTER, UP = "\x02", "\x03", "\x04", "\r", "\x1b[A"


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    with use_emulator(Emulator()) as emu:
        yield emu


class Chat:
    """Keys in, shown lines out."""

    def __init__(self, app: ChatApp, keys: PipeInput) -> None:
        self.app, self.keys = app, keys

    def send(self, text: str) -> None:
        self.keys.send_text(text)

    def shown(self, text: str) -> bool:
        return any(text in line for line in self.app.view.lines)

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        for _ in range(3000):
            if condition():
                return
            await asyncio.sleep(0.01)
        screen = "\n".join(self.app.view.lines)
        raise AssertionError(f"the chat never showed {what}; it showed:\n{screen}")

    async def until_shown(self, text: str) -> None:
        await self.until(lambda: self.shown(text), repr(text))

    async def until_idle(self) -> None:
        await self.until(lambda: not self.app.busy, "the end of the turn")


@asynccontextmanager
async def chatting(start: ChatStart) -> AsyncIterator[Chat]:
    with create_pipe_input() as keys:
        app = open_chat(start, input=keys, output=DummyOutput())
        async with app.session:
            running = asyncio.create_task(app.run())
            try:
                yield Chat(app, keys)
            finally:
                if not running.done():
                    keys.send_text(CTRL_D)
                await running


def agent_call(prompt: str, label: str, *, background: bool = False) -> ToolCall:
    args: dict[str, object] = {"prompt": prompt, "description": label, "fork": True}
    if background:
        args["run_in_background"] = True
    return ToolCall("Agent", args)


def held_forks(emulator: Emulator, held: dict[str, asyncio.Event]) -> None:
    """Forks answer at once, except those labelled with a key of ``held``: they look
    around first (a tool call), then answer when its event is set (a child at work)."""

    async def policy(request: EmulatedRequest) -> Reply:
        if request.agent is None or request.agent.kind != "fork":
            return default_policy(request)
        label = request.agent.label
        if label not in held:
            return Reply(text=f"{label}: all right")
        if request.agent.turn == 1:
            return Reply(tool_calls=(ToolCall("Glob", {"pattern": "*"}),))
        await held[label].wait()
        return Reply(text=f"{label}: done")

    emulator.set_policy(policy)


async def test_forks_ctrl_b_a_report_while_idle_cost_and_continue_with_a_cache_hit(
    tmp_path: Path, emulator: Emulator
) -> None:
    release = asyncio.Event()
    held_forks(emulator, {"stock": release})
    emulator.script(
        Reply(
            text="Forking two children.",
            tool_calls=(
                agent_call("check the rounding", "rounding", background=True),
                agent_call("fix the stock bug", "stock"),
            ),
        ),
        Reply(text="The stock fix goes on in the background."),
        Reply(text="Both children reported: the shop is fixed."),
        agent="main",
    )
    async with chatting(ChatStart(cwd=tmp_path)) as chat:
        chat.send(f"Review the shop{ENTER}")
        await chat.until(lambda: bool(chat.app.view.sync_children()), "a sync child running")
        [stock] = chat.app.view.sync_children()
        [rounding] = [line for line in chat.app.view.children() if line.label == "rounding"]
        await chat.until(lambda: rounding.status == "completed", "the background child done")
        assert chat.shown("Forking two children.")
        assert chat.app.busy  # the main agent waits for it

        chat.send(CTRL_B)
        await chat.until_shown("The stock fix goes on in the background.")
        await chat.until_idle()
        assert chat.shown(f"⇣ {stock.id} now runs in the background")
        assert stock.status == "running"  # its work goes on

        release.set()  # the child ends while the user is idle: its report wakes the agent
        await chat.until_shown("Both children reported: the shop is fixed.")
        assert chat.shown(f"↩ {stock.id} reported back")
        await chat.until_idle()

        chat.send(f"/cost{ENTER}")
        await chat.until_shown("with children:")
        assert sum(chat.shown(f"{label} [fork]") for label in ("rounding", "stock")) == 2
        main_id = chat.app.session.id
        forks = [line for line in chat.app.view.children() if line.kind == "fork"]
    assert {line.status for line in forks} == {"completed"}
    assert all(line.usage.cache_read_tokens > 0 for line in forks)  # the parent's prefix
    record = Registry().get(stock.id)
    assert (record.status, record.background) == ("completed", True)

    async with chatting(ChatStart(cwd=tmp_path, continue_last=True)) as chat:
        assert chat.app.session.id == main_id
        assert chat.shown(f"resumed {main_id}")
        chat.send(f"Anything left?{ENTER}")
        await chat.until_shown("Understood: Anything left?")
        await chat.until_idle()
        main = chat.app.view.board.lines[main_id]
        assert main.cache[0][1].status == "hit"
        assert main.usage.cache_read_tokens > 0


async def test_a_permission_question_is_answered_with_one_key(
    tmp_path: Path, emulator: Emulator
) -> None:
    notes = ToolCall("Write", {"file_path": "notes.txt", "content": "open at nine"})
    hours = ToolCall("Write", {"file_path": "hours.txt", "content": "9-18"})
    emulator.script(
        Reply(tool_calls=(notes,)), Reply(tool_calls=(hours,)), Reply(text="Written."), agent="main"
    )
    async with chatting(ChatStart(cwd=tmp_path)) as chat:
        chat.send(f"Note the hours{ENTER}")
        await chat.until(lambda: chat.app.questions.pending is not None, "a question")
        assert "wants to use Write: file: notes.txt" in chat.app.questions.text()
        assert not (tmp_path / "notes.txt").exists()

        chat.send("a")  # always: the second Write is not asked about
        await chat.until_shown("Written.")
        assert chat.shown("? Write file: notes.txt → always (for the rest of this session)")
        assert not chat.shown("? Write file: hours.txt")
        chat.send(f"/permissions{ENTER}")
        await chat.until_shown("allowed always (this session): Write")
    assert (tmp_path / "notes.txt").read_text() == "open at nine"
    assert (tmp_path / "hours.txt").read_text() == "9-18"


async def test_ctrl_c_interrupts_the_turn_spares_background_children_then_twice_leaves(
    tmp_path: Path, emulator: Emulator
) -> None:
    held = {"stock": asyncio.Event(), "tests": asyncio.Event()}
    held_forks(emulator, held)
    emulator.script(
        Reply(
            tool_calls=(
                agent_call("write the tests", "tests", background=True),
                agent_call("fix the stock bug", "stock"),
            )
        ),
        agent="main",
    )
    async with chatting(ChatStart(cwd=tmp_path)) as chat:
        chat.send(f"Go{ENTER}")
        await chat.until(lambda: bool(chat.app.view.sync_children()), "a sync child running")
        lines = {line.label: line for line in chat.app.view.children()}

        chat.send(CTRL_C)
        await chat.until_shown("interrupted: the turn stopped")
        await chat.until(lambda: lines["stock"].status == "cancelled", "the sync child cancelled")
        assert lines["tests"].status == "running"
        assert chat.shown(f"still running in the background: {lines['tests'].id} 'tests'")

        chat.send(CTRL_C)
        await chat.until_shown("press Ctrl+C again to leave")
        chat.send(CTRL_C)
        await chat.until_shown("leaving stops them")
        assert chat.shown(f"  {lines['tests'].id} 'tests' (running)")
        main_id = chat.app.session.id
    assert Registry().get(lines["tests"].id).status == "cancelled"
    assert Registry().get(main_id).status == "interrupted"


async def test_slash_commands_answer_mid_session(tmp_path: Path, emulator: Emulator) -> None:
    async with chatting(ChatStart(cwd=tmp_path, permission_mode="plan")) as chat:
        chat.send(f"Hello{ENTER}")
        await chat.until_shown("Understood: Hello")
        await chat.until_idle()
        for command in ("/help", "/tasks", "/agents", "/permissions", "/model", "/explain"):
            chat.send(f"{command}{ENTER}")
        chat.send(f"/stop nobody{ENTER}")
        chat.send(f"/nonsense{ENTER}")
        await chat.until_shown("unknown command /nonsense")
        assert chat.shown("Ctrl+B           move the sync child")
        assert chat.shown("no children yet")
        assert chat.shown("Explore")  # a built-in agent of the catalog
        assert chat.shown("mode: plan")
        assert chat.shown("main agent: emulator:claude-sonnet-4-6")
        await chat.until_shown(f"main agent {chat.app.session.id}")  # /explain's first line
        assert chat.shown("no single child matches 'nobody'")

        chat.send(f"/compact{ENTER}")
        await chat.until_shown("compacted 2 messages into")
        assert chat.shown("(summary by fork-")  # a fork wrote it, from the cached prefix


def typed(chat: Chat) -> list[str]:
    """What the user's messages say."""
    return [
        block.text
        for message in chat.app.session.messages
        if isinstance(message, UserMessage)
        for block in message.content
        if isinstance(block, TextBlock)
    ]


async def test_a_message_spans_lines_and_history_outlives_the_session(
    tmp_path: Path, emulator: Emulator
) -> None:
    async with chatting(ChatStart(cwd=tmp_path)) as chat:
        chat.send(f"Plan the week\\{ENTER}then the month{ENTER}")
        await chat.until_shown("Understood: Plan the week then the month")
        assert typed(chat) == ["Plan the week\nthen the month"]
        await chat.until_idle()
    async with chatting(ChatStart(cwd=tmp_path)) as chat:  # a new session
        chat.send(f"{UP}{ENTER}")
        await chat.until_shown("Understood: Plan the week then the month")
        assert typed(chat) == ["Plan the week\nthen the month"]


def test_chat_needs_a_terminal(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["chat", "--cwd", str(tmp_path)])  # stdin is a pipe
    assert out.exit_code == 2
    assert "forkagent chat needs a terminal; without one use: forkagent run PROMPT" in out.output


def test_continue_without_an_earlier_session_or_with_another_model_is_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigurationError, match="no earlier session in"):
        open_chat(ChatStart(cwd=tmp_path, continue_last=True))
    with pytest.raises(ConfigurationError, match="a resumed session keeps its model"):
        open_chat(ChatStart(cwd=tmp_path, continue_last=True, model="test:echo"))


async def test_limits_come_from_the_config_files_and_the_flags(
    tmp_path: Path, emulator: Emulator
) -> None:
    (tmp_path / ".forkagent").mkdir()
    (tmp_path / ".forkagent" / "config.toml").write_text("max_turns = 5\nmax_cost = 0.0001\n")
    look = ToolCall("Glob", {"pattern": "*"})
    emulator.script(Reply(tool_calls=(look,)), agent="main")
    # The flag's turn limit (1) wins over the file's (5): no second request.
    async with chatting(ChatStart(cwd=tmp_path, limits={"max_turns": 1})) as chat:
        chat.send(f"What is here?{ENTER}")
        await chat.until_shown("the turn ended budget_exceeded: reached the limit of 1 turns")
        await chat.until_idle()
    # Without the flag, the file's cost cap stops the first turn.
    emulator.script(Reply(tool_calls=(look,)), Reply(text="Nothing here."), agent="main")
    async with chatting(ChatStart(cwd=tmp_path)) as chat:
        chat.send(f"What is here?{ENTER}")
        await chat.until_shown("the turn ended budget_exceeded: spent $")
        await chat.until_idle()
        assert not chat.shown("Nothing here.")
