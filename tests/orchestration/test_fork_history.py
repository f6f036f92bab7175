"""A fork shares its parent's history: the same message objects in the same storage,
never a copy, and never anyone else's later messages."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from forkagent import Agent, Session
from forkagent.emulator import Emulator, use_emulator
from forkagent.events import RequestSent
from forkagent.history import HistoryView
from forkagent.messages import Message, assistant, tool_result, user
from forkagent.requests import ModelRequest

from ._support import Events

MODEL = "emulator:claude-sonnet-4-6"


def make_agent(cwd: Path, events: Events) -> Agent:
    return Agent(
        model=MODEL,
        cwd=cwd,
        load_agent_files=False,
        registry=False,
        skip_transcript=True,
        listeners=[events],
    )


def history(messages: int) -> list[Message]:
    """A prompt, then a read per turn, then an answer."""
    out: list[Message] = [user("Read every module.")]
    for n in range((messages - 2) // 2):
        out.append(assistant(f"Reading module {n}."))
        out.append(user(tool_result(f"call_{n}", f"def f_{n}(): ...")))
    out.append(assistant("The design is layered."))
    return out


async def test_siblings_first_requests_share_the_parents_messages(tmp_path: Path) -> None:
    events = Events()
    with use_emulator(Emulator()):
        async with make_agent(tmp_path, events).session() as session:
            await session.send("Plan the review.")
            await session.send("And the tests?")
            parent = list(session.root.messages)
            tasks = await session.fork(["Check f.", "Check g."])
            for task in tasks:
                assert (await task.wait()).status == "completed"
    firsts = [first_request(events, task.id) for task in tasks]

    for request in firsts:
        assert len(request.messages) == len(parent) + 1
        assert all(a is b for a, b in zip(request.messages, parent, strict=False))
    # Serialized as before: exactly as the same request holding a tuple.
    for request in firsts:
        as_tuple = request.model_copy(update={"messages": tuple(request.messages)})
        assert request == as_tuple
        assert request.model_dump() == as_tuple.model_dump()
        assert request.model_dump_json() == as_tuple.model_dump_json()
        assert request.canonical_bytes() == as_tuple.canonical_bytes()
        assert ModelRequest.model_validate_json(request.model_dump_json()) == request


async def test_no_agent_sees_another_agents_later_messages(tmp_path: Path) -> None:
    """Children answer, and the parent goes on: each history and each request sent stays
    its own."""
    events = Events()
    with use_emulator(Emulator()):
        async with make_agent(tmp_path, events).session() as session:
            await session.send("Plan the review.")
            before = list(session.root.messages)
            tasks = await session.fork(["Check f.", "Check g."])
            for task in tasks:
                await task.wait()
            after_forks = list(session.root.messages)
            sent_then = [(e.request, tuple(e.request.messages)) for e in events.of(RequestSent)]
            await session.send("Now the docs.")
            children = [list(task.run.messages) for task in tasks]
            parent = list(session.root.messages)

    assert after_forks == before  # the children's messages never reached the parent
    assert parent[: len(before)] == before
    assert len(parent) == len(before) + 2
    for own, other in (children, children[::-1]):
        assert own[: len(before)] == before
        assert len(own) == len(before) + 2  # its directive, its report
        assert own[len(before)] not in other
        assert own[-1] is not other[-1]
        assert not {id(m) for m in own[len(before) :]} & {id(m) for m in parent[len(before) :]}
    for request, then in sent_then:
        assert request.messages == then  # nothing changed a request after it was sent


def first_request(events: Events, agent_id: str) -> ModelRequest:
    sent: list[RequestSent] = events.of(RequestSent)
    return next(e.request for e in sent if e.agent_id == agent_id)


async def parent_session(tmp_path: Path, messages: int) -> Session:
    session = make_agent(tmp_path, Events()).session()
    session.root.messages = history(messages)
    session.root.last_request = session.root.build_request()
    return session


async def test_changing_the_parents_history_leaves_its_forks_as_they_were(
    tmp_path: Path,
) -> None:
    """What the loop and compaction do to a parent (merge a notification into its last
    message, replace its whole history) never reaches a child built before."""
    session = await parent_session(tmp_path, 40)
    root, runtime = session.root, session._runtime
    child = runtime.build_fork(root, "Check f.")
    inherited = list(child.messages)
    request = child.build_request()

    root.messages[-1] = assistant("The design is flat.")
    root.messages[0] = user("Something else.")
    root.append(user("Go on."))
    root.messages[:] = root.messages[-3:]
    child.append(assistant("Scope: f."))

    assert list(child.messages) == [*inherited, assistant("Scope: f.")]
    assert request.messages == tuple(inherited)
    assert len(root.messages) == 3
    assert assistant("Scope: f.") not in root.messages
    await session.aclose()


def retained_per_fork(session: Session, forks: int = 20) -> float:
    """Bytes each fork's first request keeps alive (the fork itself included)."""
    root, runtime = session.root, session._runtime
    runtime.build_fork(root, "warm up: the family's shared base is made once")
    tracemalloc.start()
    try:
        kept = [runtime.build_fork(root, f"Check {n}.").build_request() for n in range(forks)]
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert all(isinstance(r.messages, HistoryView) for r in kept)
    return size / forks


async def test_a_forks_memory_does_not_grow_with_its_parents_history(tmp_path: Path) -> None:
    short = await parent_session(tmp_path / "short", 100)
    long = await parent_session(tmp_path / "long", 20_000)

    small, large = retained_per_fork(short), retained_per_fork(long)

    assert large < 8_000
    assert large - small < 1_000  # a copy would be 160 kB: 8 bytes a message, twice
    await short.aclose()
    await long.aclose()


def test_a_request_holding_a_view_dumps_like_the_tuple() -> None:
    messages = history(10)
    view = HistoryView(messages[:4]).extended(messages[4:])
    shared = ModelRequest(model="m").model_copy(update={"messages": view})
    plain = ModelRequest(model="m", messages=tuple(messages))

    assert shared.messages is view
    assert shared == plain
    assert plain == shared
    assert shared.model_dump_json() == plain.model_dump_json()
    assert shared.model_dump() == plain.model_dump()
    assert type(plain.messages) is tuple  # what a caller passes is validated into a tuple
    assert type(ModelRequest(model="m", messages=view).messages) is tuple
