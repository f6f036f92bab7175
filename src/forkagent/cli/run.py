"""``forkagent run``: one prompt, with the agent tree shown live and the answer streamed."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast, get_args

import typer
from rich.console import Console

from .config import load_defaults
from .errors import fail, warn
from .executors import ExecutorOption, RayAddressOption, closing, executor_for
from .trust import decide_trust

if TYPE_CHECKING:
    from .. import Limits
    from ..agent import Agent, RunResult
    from ..events import Event
    from ..permissions import PermissionMode
    from .live import AgentBoard

PERMISSION_ALIASES = {"acceptEdits": "accept_edits", "bypassPermissions": "bypass"}
"""Claude Code's spellings of the modes."""

ModelOption = Annotated[
    str | None,
    typer.Option(
        help="provider:model, e.g. anthropic:claude-sonnet-4-6 or test:echo "
        "[default: $FORKAGENT_MODEL, the config files, or emulator:claude-sonnet-4-6]",
        show_default=False,
    ),
]
CwdOption = Annotated[
    Path,
    typer.Option(help="Working directory for the agent's tools.", exists=True, file_okay=False),
]


MaxTurnsOption = Annotated[int | None, typer.Option(min=1, help="Turn limit for the main agent.")]
MaxTokensOption = Annotated[int | None, typer.Option(min=1, help="Token limit for the whole tree.")]
MaxCostOption = Annotated[
    float | None, typer.Option(min=0, help="Cost limit in USD for the whole tree.")
]


def run_command(
    prompt: Annotated[
        str, typer.Argument(metavar="PROMPT", help="What the agent should do; - reads stdin.")
    ],
    model: ModelOption = None,
    cwd: CwdOption = Path(),
    max_turns: MaxTurnsOption = None,
    max_tokens: MaxTokensOption = None,
    max_cost: MaxCostOption = None,
    system_prompt: Annotated[
        str | None, typer.Option(help="Replace the main agent's system prompt.")
    ] = None,
    agent_name: Annotated[
        str | None,
        typer.Option("--agent", help="Run as this named agent: its prompt, tools, model and mode."),
    ] = None,
    allowed_tools: Annotated[
        str | None,
        typer.Option(help="Comma-separated tools the agents may call (others are refused)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object at the end.")
    ] = False,
    permission_mode: Annotated[
        str | None,
        typer.Option(
            help="default (ask for anything not read-only), accept_edits (acceptEdits), "
            "plan, bypass [default: your config file, else default]",
            show_default=False,
        ),
    ] = None,
    add_dir: Annotated[
        list[Path] | None,
        typer.Option(help="Another directory the agents may read (repeatable).", file_okay=False),
    ] = None,
    trust_flag: Annotated[
        bool,
        typer.Option("--trust", help="Trust this repository for this run: its own hooks may run."),
    ] = False,
    executor_name: ExecutorOption = "in-process",
    ray_address: RayAddressOption = None,
) -> None:
    """Run an agent on PROMPT, show its tree of sub-agents and stream its answer.

    Exit status: 0 completed, 1 failed, 3 budget exceeded, 4 turn limit, 5 timed out,
    6 reply cut at max_tokens, 7 stopped (forkagent stop), 128+N ended by signal N
    (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP); after any but 0 it prints how to resume.
    """
    from ..errors import ForkagentError
    from ._outcome import Interrupted, exit_code, resume_hint, run_until_signal
    from .live import AgentBoard, LiveSwitch, watch

    board, switch = AgentBoard(), LiveSwitch()
    try:
        if prompt == "-":
            prompt = sys.stdin.read().strip()
            if not prompt:
                fail("the prompt read from stdin is empty", as_json=as_json, exit_code=2)
        defaults = load_defaults(cwd)
        console = Console(stderr=as_json)
        echo = _TextEcho(streaming=not as_json)
        refused = _Refusals()
        agent = _agent(
            model or defaults.model,
            cwd,
            permission_mode_named(permission_mode or defaults.permission_mode, as_json),
            {
                **defaults.limits,
                **given_limits(max_turns=max_turns, max_tokens=max_tokens, max_cost=max_cost),
            },
            system_prompt=system_prompt,
            agent_name=agent_name,
            allowed_tools=allowed_tools,
            listeners=[board, echo, refused],
            switch=switch,
            add_dirs=tuple(add_dir or ()),
            trusted=decide_trust(cwd, flag=trust_flag, interactive=sys.stdin.isatty()),
        )
        say_what_answers(str(agent.model))
        agent.executor = executor = executor_for(executor_name, ray_address, as_json=as_json)
        result = run_until_signal(
            lambda: watch(
                lambda: closing(executor, lambda: agent.run(prompt)),
                board,
                console,
                live=console.is_terminal and not as_json,
                switch=switch,
            )
        )
    except ForkagentError as exc:
        _hint(board.main_id)
        fail(str(exc), as_json=as_json, kind=type(exc).__name__)
    except Interrupted as exc:
        warn(f"interrupted by {exc}; {resume_hint(board.main_id)}")
        raise typer.Exit(exc.exit_code) from None
    board.finish_main(result.status)
    code = exit_code(result)
    if as_json:
        sys.stdout.write(json.dumps(_result_json(result, board), indent=2) + "\n")
        raise typer.Exit(code)
    echo.end()
    if not console.is_terminal:
        board.plain(console)
    if not echo.streamed:
        console.print(result.output, markup=False, highlight=False)
    refused.show()
    if result.error:
        warn(f"{result.status}: {result.error}")
    if code:
        _hint(board.main_id)
    raise typer.Exit(code)


def _hint(main_id: str | None) -> None:
    from ._outcome import resume_hint

    if main_id:
        sys.stderr.write(resume_hint(main_id) + "\n")


def _agent(
    model: str,
    cwd: Path,
    mode: str,
    limits: dict[str, Any],
    *,
    system_prompt: str | None,
    agent_name: str | None,
    allowed_tools: str | None,
    listeners: list[Any],
    switch: Any,
    add_dirs: tuple[Path, ...] = (),
    trusted: bool | None = None,
) -> Agent:
    from ..agent import Agent
    from ..permissions import AllowTools, PermissionMode, PermissionPolicy
    from ..permissions.prompt import terminal_handler

    main, tree = split_limits(limits)
    tool_filter = AllowTools(t.strip() for t in allowed_tools.split(",")) if allowed_tools else None
    settings: dict[str, Any] = {}
    if agent_name is not None:
        settings, mode, tool_filter = _as_named(agent_name, cwd, model, mode, tool_filter)
    if system_prompt is not None:
        settings["system_prompt"] = system_prompt
    handler = terminal_handler(pause=switch.paused)
    policy = PermissionPolicy(
        mode=cast(PermissionMode, mode), handler=handler, filter=tool_filter, add_dirs=add_dirs
    )
    return Agent(
        model=settings.pop("model", model),
        cwd=cwd,
        limits=main,
        tree_limits=tree,
        listeners=listeners,
        permissions=policy,
        load_user_agents=True,
        trust_project=trusted,
        # Forks bubble their questions up to someone: without a terminal there is no one,
        # so the gate closes and `fork: true` runs a general-purpose agent (seed 002).
        interactive=sys.stdin.isatty(),
        **settings,
    )


def _as_named(
    name: str, cwd: Path, model: str, mode: str, tool_filter: Any
) -> tuple[dict[str, Any], str, Any]:
    """A named agent's prompt, model, tools and mode for the main agent; never a looser mode."""
    from ..agents.loader import load_agents
    from ..agents.resolve import resolve_agent_model
    from ..errors import ConfigurationError
    from ..permissions import AllowTools, all_of
    from ..permissions.modes import tighter_mode

    catalog = load_agents(cwd)
    definition = catalog.find(name)
    if definition is None:
        known = ", ".join(sorted(d.name for d in catalog))
        raise ConfigurationError(f"no agent named {name!r}; known: {known}")
    settings: dict[str, Any] = {"model": resolve_agent_model(definition.model, None, model)}
    if definition.system_prompt:
        settings["system_prompt"] = definition.system_prompt
    if definition.tools is not None:
        own = AllowTools(definition.tools)
        tool_filter = own if tool_filter is None else all_of(tool_filter, own)
    if definition.permission_mode is not None:
        mode = tighter_mode(mode, definition.permission_mode)
    return settings, mode, tool_filter


def permission_mode_named(given: str, as_json: bool) -> PermissionMode:
    """A mode from the command line (Claude Code's spellings too); a bad one exits 2."""
    from ..permissions import modes

    mode = PERMISSION_ALIASES.get(given, given)
    valid = [m for m in get_args(modes.PermissionMode) if m != "bubble"]
    if mode not in valid:
        fail(
            f"unknown permission mode {given!r}; use one of: {', '.join(valid)}",
            as_json=as_json,
            exit_code=2,
        )
    return cast("PermissionMode", mode)


def given_limits(**limits: float | None) -> dict[str, float]:
    """The limits given on the command line (they override the config files')."""
    return {name: value for name, value in limits.items() if value is not None}


def split_limits(limits: Mapping[str, float]) -> tuple[Limits, Limits]:
    """The main agent's own limits (turns, seconds) and the whole tree's (tokens, cost)."""
    from .. import Limits

    main = Limits(max_turns=_as_int(limits.get("max_turns")), max_seconds=limits.get("max_seconds"))
    tree = Limits(max_tokens=_as_int(limits.get("max_tokens")), max_cost=limits.get("max_cost"))
    return main, tree


def _as_int(value: float | None) -> int | None:
    return None if value is None else int(value)


def say_what_answers(spec: str) -> None:
    """Say once that an emulator's replies are scripted; warn when a model's price is unknown."""
    from ..pricing import price_for, suggest_model

    if spec.startswith("emulator:"):
        warn(
            f"{spec} is the offline emulator: the caching is the provider's, but the replies "
            "are scripted, not a model's (use anthropic:/openai:/gemini: with a key for real ones)"
        )
    if not spec.startswith("test:") and price_for(spec) is None:
        hint = suggest_model(spec)
        warn(
            f"no price or cache rules are known for {spec}: costs show as unknown"
            + (f" (did you mean {hint}?)" if hint else "")
        )


class _TextEcho:
    """Writes the main agent's text to stdout as it streams in."""

    def __init__(self, *, streaming: bool) -> None:
        self.streaming = streaming
        self.streamed = False
        self._open = False

    def __call__(self, event: Event) -> None:
        from ..events import OutputDelta, RequestSent

        if not self.streaming:
            return
        if (
            isinstance(event, OutputDelta)
            and not event.thinking
            and event.agent_id.startswith("main")
        ):
            sys.stdout.write(event.text)
            sys.stdout.flush()
            self.streamed = self._open = True
        elif isinstance(event, RequestSent) and self._open:
            self.end()

    def end(self) -> None:
        if self._open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._open = False


class _Refusals:
    """Tool calls the permission policy refused, listed at the end (there was no one to ask)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, event: Event) -> None:
        from ..events import ToolFinished

        if isinstance(event, ToolFinished) and event.preview.startswith("not allowed"):
            self.calls.append(f"{event.agent_id} {event.name}: {event.preview}")

    def show(self) -> None:
        if self.calls:
            warn(
                f"{len(self.calls)} tool call(s) were refused (run in a terminal to be asked, "
                "or pass --permission-mode):\n  " + "\n  ".join(self.calls)
            )


def _result_json(result: RunResult, board: AgentBoard) -> dict[str, object]:
    return {
        "status": result.status,
        "output": result.output,
        "error": result.error,
        "agents": [{**a.to_dict(), "cache": board.cache_json(a.id)} for a in result.agents],
    }
