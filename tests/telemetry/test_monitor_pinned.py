"""The cache monitor's reports pinned, byte for byte, over varied real sessions.

Each scenario runs an agent tree against the in-process emulator on virtual time
(a ``looptime`` loop: the emulator's latency and cache clock are stepped, not slept, so
concurrent siblings interleave the same way on any machine at any load) and keeps its
event stream; the stream is then replayed into a ``CacheMonitor`` on a stepping
clock (so timing is the same on every run), and every report's ``to_dict()`` is
compared with ``monitor_reports.json``. The monitor's shortcuts (sizes kept
per family, prefixes proven by identity) must never change a report: any
divergence fails here. ``python tests/telemetry/test_monitor_pinned.py`` rewrites
the file, for a deliberate change of the reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, get_args

import looptime
import pytest

from forkagent import RuntimeOptions
from forkagent.agent import Agent, Session
from forkagent.emulator import Emulator, Latency, Reply, ToolCall, loop_clock
from forkagent.emulator.profiles import CacheSettings
from forkagent.events import AgentStarted, CacheReported, Event, RequestSent, ResponseReceived
from forkagent.messages import JsonValue, user
from forkagent.models.base import ModelProfile
from forkagent.models.emulator import EmulatorModel
from forkagent.telemetry import CacheMonitor
from forkagent.telemetry.cache import CacheReason
from forkagent.usage import Usage

PINNED = Path(__file__).with_name("monitor_reports.json")
PLAN = "Read the code and plan the review."
CODE = "def f(x):\n    return x * 2\n" * 300
STEP = 0.75
"""Seconds the replay clock moves at each reading: DeepSeek's 2 s delay spans a few events."""
DEEPSEEK_DELAY = 2.0
LONG_PLAN = "Plan: " + "check every function, one by one. " * 400
"""The main agent's reply: most of what its forks share is new, written by the first fork."""

READERS = ("fork-2-", "fork-5-")
"""The second sibling of each family, by id (ids count up from the main agent's 0)."""
Play = Callable[[Session, Path], Awaitable[None]]
Listener = Callable[[Event], None]
Params = ParamSpec("Params")
Result = TypeVar("Result")


async def _tree(session: Session, cwd: Path) -> None:
    """Turns, and two fork families from two parent states; a sibling (not the first) of
    each family reads a file first, so its request has turns after the first."""
    (cwd / "notes.txt").write_text("the notes\n" * 50)
    await session.send(f"{PLAN}\n\n{CODE}")
    await session.send("Continue.")
    await session.fork(["review module A", "review module B", "review module C"])
    await session.send("And now?")
    await session.fork(["summarize", "read the notes", "list the risks", "name the owner"])
    await session.send("Wrap up.")


async def _forks(session: Session, cwd: Path) -> None:
    await session.send(f"{PLAN}\n\n{CODE}")
    await session.fork(["one", "two", "three"])


async def _edited(session: Session, cwd: Path) -> None:
    """Header edits one after another, then a message edited in place."""
    await session.send(f"{PLAN}\n\n{CODE}")
    run = session.root
    run.settings = run.settings.model_copy(update={"tool_choice": "none"})
    await session.send("Continue.")
    first = run.tool_specs[0]
    edited = first.model_copy(update={"description": first.description + " Mind the cache."})
    run.tool_specs = (edited, *run.tool_specs[1:])
    await session.send("Again.")
    assert isinstance(run.system, str)
    run.system += "\nAnswer briefly."
    await session.send("Once more.")
    run.messages[0] = user(f"Read the code and plan the reviews.\n\n{CODE}")
    await session.send("Last.")


async def _short(session: Session, cwd: Path) -> None:
    await session.send("Hello.")
    await session.send("Again.")
    await session.fork(["one", "two"])


def _model(name: str, **emulator: Any) -> Callable[[], EmulatorModel]:
    def make() -> EmulatorModel:
        # Anthropic's own diagnosis (a beta) rides along where the model has it.
        # The cache clock is the loop's, so cache lifetimes run on the same virtual time.
        emu = Emulator(clock=loop_clock, **emulator)
        return EmulatorModel(name, emu, diagnostics=name.startswith("claude"))

    return make


def _read_reply(path: str) -> Reply:
    return Reply(tool_calls=(ToolCall("Read", {"file_path": path}),))


SCENARIOS: dict[str, tuple[Callable[[], EmulatorModel], Play, RuntimeOptions]] = {
    "anthropic_tree": (_model("claude-sonnet-4-6"), _tree, RuntimeOptions()),
    "anthropic_together": (
        _model("claude-sonnet-4-6", latency=Latency(ttft=0.02, tokens_per_second=1_000_000)),
        _forks,
        RuntimeOptions(fanout="off"),
    ),
    "anthropic_prewarm": (_model("claude-sonnet-4-6"), _forks, RuntimeOptions(fanout="prewarm")),
    "anthropic_edited": (_model("claude-sonnet-4-6"), _edited, RuntimeOptions()),
    "haiku_below_minimum": (_model("claude-haiku-4-5"), _short, RuntimeOptions()),
    "openai_tree": (_model("gpt-4.1"), _tree, RuntimeOptions()),
    "gemini_tree": (_model("gemini-2.5-flash"), _tree, RuntimeOptions()),
    "deepseek_forks": (
        _model("deepseek-chat", settings=CacheSettings(deepseek_build_delay=DEEPSEEK_DELAY)),
        _forks,
        RuntimeOptions(fanout="off"),
    ),
}


def _record(name: str, *listeners: Listener) -> tuple[list[Event], ModelProfile]:
    """Run the scenario on a loop of its own whose time moves only when every task waits.

    ``listeners``: more listeners on the run's events, after the one that keeps them.
    """
    # A fixed folder: its path is in the system prompt, and so in every token count (so not
    # under ``TMPDIR``, which differs from machine to machine).
    cwd = Path("/tmp/forkagent-monitor-pinned") / name
    cwd.mkdir(parents=True, exist_ok=True)
    threads = _CountedThreads()
    with _only_session(cwd), asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        runner.get_loop().set_default_executor(threads)
        recorded = runner.run(_record_in(name, cwd, listeners))
    assert not threads.used, f"{name} waited on a thread: its order would follow real time"
    return recorded


class _CountedThreads(ThreadPoolExecutor):
    """The recording loop's default executor, which notes any use: looptime steps virtual
    time while a thread runs, so the scenarios stay deterministic only while they use none."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.used = False

    def submit(
        self, fn: Callable[Params, Result], /, *args: Params.args, **kwargs: Params.kwargs
    ) -> Future[Result]:
        self.used = True
        return super().submit(fn, *args, **kwargs)


@contextlib.contextmanager
def _only_session(cwd: Path) -> Iterator[None]:
    """Holds the fixed folder for one test session at a time: two suites run at once on one
    machine would otherwise rewrite each other's files while their agents read them."""
    with (cwd.parent / f"{cwd.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


async def _record_in(
    name: str, cwd: Path, listeners: tuple[Listener, ...]
) -> tuple[list[Event], ModelProfile]:
    make, play, options = SCENARIOS[name]
    model = make()
    events: list[Event] = []
    emulator = model.emulator
    assert emulator is not None
    emulator.script(LONG_PLAN, match="plan")
    for reader in READERS if name.endswith("_tree") else ():
        emulator.script(_read_reply(str(cwd / "notes.txt")), agent=reader)
    runner = Agent(
        model=model,
        listeners=[events.append, *listeners],
        cwd=cwd,
        registry=False,
        skip_transcript=True,
        load_agent_files=False,
        options=options,
    )
    async with runner.session() as session:
        await play(session, cwd)
    await model.aclose()
    profile = model.profile
    if model.family == "deepseek":  # DeepSeek's real delay, against the replay's clock
        profile = dataclasses.replace(profile, cache_visible_after=DEEPSEEK_DELAY)
    return [e for e in events if not isinstance(e, CacheReported)], profile


class _SteppingClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += STEP
        return self.now


def _replay(
    events: list[Event],
    profile: ModelProfile,
    *,
    resumed_age: float | None = None,
    unmeasured_every: int = 0,
    pause_before_turn: int | None = None,
) -> list[CacheReported]:
    """Feed ``events`` to a fresh monitor.

    ``resumed_age``: the main agent's first turn is seeded (as a resumed agent's
    transcript would) instead of seen. ``unmeasured_every``: every n-th response reports
    no prompt size. ``pause_before_turn``: 400 s pass before the main agent's request of
    that turn (past a 5-minute cache's lifetime), and its response reads nothing.
    """
    clock = _SteppingClock()
    monitor = CacheMonitor(clock=clock)
    main = events[0].agent_id
    responses = 0
    for event in events:
        if isinstance(event, (RequestSent, ResponseReceived)):
            monitor.set_profile(_model_of(event, events), profile)
        if resumed_age is not None and event.agent_id == main and _turn_of(event) == 0:
            if isinstance(event, ResponseReceived):
                sent = next(e for e in events if isinstance(e, RequestSent))
                monitor.seed(main, sent.request, age=resumed_age)
            continue
        paused = event.agent_id == main and _turn_of(event) == pause_before_turn
        if isinstance(event, RequestSent) and paused:
            clock.now += 400.0
        if isinstance(event, ResponseReceived):
            responses += 1
            spent = event.response.usage
            if unmeasured_every and responses % unmeasured_every == 0:
                event = _with_usage(event, Usage(output_tokens=spent.output_tokens, requests=1))
            elif paused:  # the entry expired: the whole prompt is written anew
                fresh = spent.input_tokens + spent.cache_read_tokens
                event = _with_usage(
                    event, spent.model_copy(update={"input_tokens": fresh, "cache_read_tokens": 0})
                )
        monitor(event)
    return monitor.reports()


def _with_usage(event: ResponseReceived, usage: Usage) -> ResponseReceived:
    return dataclasses.replace(event, response=event.response.model_copy(update={"usage": usage}))


def _turn_of(event: Event) -> int | None:
    if isinstance(event, RequestSent):
        return event.turn
    if isinstance(event, ResponseReceived):
        return event.turn - 1
    return None


def _model_of(event: RequestSent | ResponseReceived, events: list[Event]) -> str:
    if isinstance(event, RequestSent):
        return event.request.model
    sent = [e for e in events if isinstance(e, RequestSent) and e.agent_id == event.agent_id]
    return sent[-1].request.model


def _pinned_form(events: list[Event], reports: list[CacheReported]) -> list[dict[str, JsonValue]]:
    """Each report as JSON, by agent and turn (siblings' tool turns may interleave either
    way), agent ids (random) renamed in the order the agents started."""
    names = {
        e.agent_id: f"agent{i}"
        for i, e in enumerate(e for e in events if isinstance(e, AgentStarted))
    }
    ids = re.compile("|".join(map(re.escape, names)))
    ordered = sorted(reports, key=lambda e: (int(names[e.agent_id][5:]), e.turn))
    text = json.dumps(
        [{"agent": e.agent_id, "turn": e.turn, **e.report.to_dict()} for e in ordered]
    )
    data: list[dict[str, JsonValue]] = json.loads(ids.sub(lambda m: names[m.group(0)], text))
    return data


VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "resumed": {"resumed_age": 30.0},
    "resumed_late": {"resumed_age": 900.0},
    "unmeasured": {"unmeasured_every": 3},
    "paused": {"pause_before_turn": 1},
}


def _cases() -> Iterator[tuple[str, str]]:
    for scenario in SCENARIOS:
        for variant in VARIANTS:
            if variant == "plain" or scenario in {"anthropic_tree", "openai_tree"}:
                yield scenario, variant


def _reports_of(
    scenario: str, events: list[Event], profile: ModelProfile
) -> dict[str, list[dict[str, JsonValue]]]:
    """The pinned form of every variant of one scenario's recording, by ``scenario/variant``."""
    return {
        f"{scenario}/{variant}": _pinned_form(events, _replay(events, profile, **VARIANTS[variant]))
        for name, variant in _cases()
        if name == scenario
    }


def _all_reports() -> dict[str, list[dict[str, JsonValue]]]:
    return {key: form for s in SCENARIOS for key, form in _reports_of(s, *_record(s)).items()}


def _pinned_of(scenario: str) -> dict[str, list[dict[str, JsonValue]]]:
    pinned: dict[str, list[dict[str, JsonValue]]] = json.loads(PINNED.read_text())
    return {key: form for key, form in pinned.items() if key.startswith(f"{scenario}/")}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_reports_are_the_pinned_ones(scenario: str) -> None:
    assert _reports_of(scenario, *_record(scenario)) == _pinned_of(scenario)


def _stall(seconds: float) -> Listener:
    """A listener that blocks the loop for ``seconds`` of real time at every other request."""
    sent = itertools.count()

    def listen(event: Event) -> None:
        if isinstance(event, RequestSent) and next(sent) % 2:
            time.sleep(seconds)

    return listen


@pytest.mark.parametrize("scenario", ["anthropic_tree", "openai_tree"])
def test_real_time_spent_does_not_change_the_reports(scenario: str) -> None:
    """A loaded machine spends real time between the run's steps. On virtual time that time
    does not count: 30 ms (more than the emulator's 20 ms to the first token) at every other
    request leaves every report as pinned. (On real time, this reorders the siblings.)"""
    assert _reports_of(scenario, *_record(scenario, _stall(0.03))) == _pinned_of(scenario)


def test_the_pinned_reports_cover_every_status_and_reason() -> None:
    """The pinned set is only a guard if it reaches every branch of ``explain``."""
    pinned = json.loads(PINNED.read_text())
    reports = [r for rs in pinned.values() for r in rs]
    assert {r["status"] for r in reports} == {"hit", "miss", "cold", "unmeasured"}
    reasons = {f["reason"] for r in reports for f in r["findings"]}
    # Every reason but a model change (no session here switches models) and "unexplained".
    assert reasons >= set(get_args(CacheReason)) - {"model_changed", "unexplained"}
    labels = {r["compared_with"] for r in reports}
    assert any(str(label).endswith("'s shared prefix") for label in labels)
    assert any(str(label).startswith("parent ") for label in labels)
    assert {"the agent's request before the resume", "the agent's pre-warm request"} <= labels


if __name__ == "__main__":
    PINNED.write_text(json.dumps(_all_reports(), indent=1, sort_keys=True) + "\n")
