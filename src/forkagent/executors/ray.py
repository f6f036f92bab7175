"""``RayExecutor``: children's model requests and tool calls on a Ray cluster.

The driver (this process) keeps each child's turn loop and every decision
about it: routing, permission checks and hooks, budgets, notifications,
transcripts, the usage tree. What the child *does* runs on a pool of
``ChildWorker`` actors: each request goes out from a worker through the same
adapter, so its bytes are the in-process executor's, and each tool call runs
in a worker process, where its subprocesses run too.

A fork family's shared snapshot (system prompt, tool array, the parent's
messages) is put into the object store once and passed by reference; each
request carries only the child's own messages. The warm-up order of a family
is kept on the driver: the leader's reply streams back from its worker
through Ray, and its siblings are sent the moment its first event arrives.

Tools bound to this process stay here: the Agent tool (it starts agents
through the runtime) and MCP tools (their connection is the driver's).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from .._orchestration.executor import Placement
from .._orchestration.loop import AgentRun
from ..errors import ConfigurationError, ToolError
from ..messages import JsonValue, Message
from ..models.base import CALLER, Model, ModelResponse, StreamEvent
from ..models.emulator import EmulatorModel
from ..requests import ModelRequest, ToolSpec
from ..state.worktrees import Worktree
from ..tools.agent_tool import AgentTool
from ..tools.base import Tool, ToolContext, ToolOutput
from ..usage import Usage
from ._shipping import Changes, PathMap, Seed, pack, replay, state
from ._worker import SNAPSHOTS_KEPT, ChildWorker, ModelRecipe, Outgoing, Snapshot

try:
    import ray
    from ray.exceptions import RayTaskError
except ImportError as missing:  # an extra: nothing else in forkagent needs Ray
    raise ConfigurationError(
        f"the Ray executor needs {missing.name}: pip install 'forkagent[ray]'"
    ) from missing

if TYPE_CHECKING:
    from ray import ObjectRef, ObjectRefGenerator

    from ..emulator.server import LoopServer

T = TypeVar("T")
SEEDS_KEPT = 4
"""Shipped worktree seeds kept in the object store for more children (a bundle holds the
repository's history: a few, not one per family ever seen)."""
logger = logging.getLogger(__name__)


class RayExecutor:
    """Run children's work on Ray: ``Agent(executor=RayExecutor(address=...))``.

    ``address``: a running cluster (``ray://host:10001``, ``auto``); None starts a
    local instance with ``local_cpus`` CPUs, unless this process already called
    ``ray.init``. ``workers`` actors (``worker_cpus`` each) serve every child,
    spread over the cluster's nodes. ``env_keys`` names the environment variables
    (provider keys) passed to the workers through Ray's runtime environment:
    none by default, and provider keys a worker inherits otherwise are removed.
    ``runtime_env`` is Ray's own (``working_dir``, ``pip``, ...). A worker that
    dies is restarted and the calls it was running are sent again, up to
    ``max_retries`` times. ``emulator_host`` is the address workers reach the
    driver's emulator at (``emulator:`` models), on a cluster the driver's IP.
    ``ship_worktrees``: whether a child with worktree isolation gets a copy of its
    worktree on its worker, shipped through the object store (``True``), works in the
    driver's (``False``: a shared file system), or the first when its worker cannot
    see the driver's (``"auto"``).
    Use it in one event loop, and ``aclose`` it there (or ``async with``).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        workers: int = 2,
        worker_cpus: float = 1.0,
        env_keys: Sequence[str] = (),
        runtime_env: Mapping[str, Any] | None = None,
        max_retries: int = 3,
        local_cpus: int | None = None,
        emulator_host: str = "127.0.0.1",
        ship_worktrees: bool | Literal["auto"] = "auto",
    ) -> None:
        if workers < 1:
            raise ConfigurationError(f"RayExecutor(workers={workers}): give 1 or more")
        missing = [key for key in env_keys if key not in os.environ]
        if missing:
            raise ConfigurationError(
                f"RayExecutor(env_keys=...) names {', '.join(missing)}, not set here: "
                "set them in this process's environment first"
            )
        self.address = address
        self.workers = workers
        self.worker_cpus = worker_cpus
        self.env_keys = frozenset(env_keys)
        self.runtime_env = {
            **(runtime_env or {}),
            "env_vars": {
                **dict((runtime_env or {}).get("env_vars", {})),
                **{key: os.environ[key] for key in self.env_keys},
            },
        }
        self.max_retries = max_retries
        self.local_cpus = local_cpus
        self.emulator_host = emulator_host
        self.ship_worktrees = ship_worktrees
        self.snapshots_put = 0
        """How many family snapshots went into the object store (one per family)."""
        self.seeds_put = 0
        """How many worktree seeds went into the object store (one per family's commit)."""
        self._pool: list[_Worker] = []
        self._turn = 0
        self._started_ray = False
        self._starting = asyncio.Lock()
        self._placing = asyncio.Lock()
        self._packing = asyncio.Lock()
        self._snapshots: dict[tuple[str, int], _Shared] = {}
        self._toolsets: dict[int, _Toolset] = {}
        self._servers: dict[int, LoopServer] = {}
        self._seeds: dict[tuple[str, str], ObjectRef[Seed]] = {}
        self._copies: dict[str, _Copy] = {}

    async def __aenter__(self) -> RayExecutor:
        await self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- the Executor protocol ------------------------------------------------

    async def place(self, run: AgentRun, worktree: Worktree | None = None) -> Placement:
        """Bind ``run`` to one worker of the pool: its model and portable tools go there,
        with a copy of its worktree when the worker cannot see it.

        One child at a time, in the order they started: siblings then send their first
        requests in the same order as in process, so the same one leads its family. Copies
        of worktrees are made after that, side by side (a clone takes a while): those
        children start as their copies are ready.
        """
        await self.start()
        async with self._placing:
            worker = self._pool[self._turn % len(self._pool)]
            self._turn += 1
            local = run.model.local if isinstance(run.model, RemoteModel) else run.model
            recipe = await self._recipe(local)
            run.model = RemoteModel(local, recipe, worker, self._snapshot(run))
        paths = await self._ship(run.id, worktree, worker) if worktree else None
        run.rebind_tools(self._remote_tools(run.tools, worker, paths))
        return Placement(self.name, worker.started_pid)

    async def release(self, run: AgentRun) -> None:
        """Bring a shipped child's work back into its worktree, all of it or none."""
        copy = self._copies.pop(run.id, None)
        if copy is None:
            return
        name = copy.worktree.path.name
        changes: Changes = await _remote(copy.worker.collect_copy(name, copy.start))
        try:
            await replay(copy.worktree.path, copy.start, changes)
        except Exception:
            logger.warning("%s: its work stays on its worker, in %s", run.id, copy.path)
            raise
        copy.worker.drop_copy(name)

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        """Connect to (or start) Ray and start the worker pool; later calls do nothing.

        Connecting blocks this event loop (``ray.init`` must run in the main thread to
        install its signal handlers): start the executor before the session
        (``async with``), not at its first child.
        """
        async with self._starting:
            if self._pool:
                return
            if not ray.is_initialized():
                self._init_ray()
            actor = ray.remote(ChildWorker).options(
                num_cpus=self.worker_cpus,
                max_concurrency=10_000,
                max_restarts=self.max_retries,
                max_task_retries=self.max_retries,
                runtime_env=self.runtime_env,
                scheduling_strategy="SPREAD",
            )
            handles: list[Any] = [actor.remote(self.env_keys) for _ in range(self.workers)]
            pids = await asyncio.gather(*(_remote(h.pid.remote()) for h in handles))
            self._pool = [_Worker(h, pid) for h, pid in zip(handles, pids, strict=True)]

    def _init_ray(self) -> None:
        ray.init(
            address=self.address,
            num_cpus=self.local_cpus if self.address is None else None,
            include_dashboard=False,
            log_to_driver=False,
        )
        self._started_ray = True

    async def aclose(self) -> None:
        """Stop the workers and the emulator servers (and Ray, if this executor started it)."""
        for worker in self._pool:
            worker.kill()
        self._pool.clear()
        self._snapshots.clear()
        self._toolsets.clear()
        self._seeds.clear()
        self._copies.clear()
        for server in self._servers.values():
            await server.stop()
        self._servers.clear()
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    # -- what a placed child is given -----------------------------------------

    async def _recipe(self, model: Model) -> ModelRecipe:
        """How workers build ``model``: the driver's emulator over HTTP, else from its spec."""
        if not isinstance(model, EmulatorModel):
            return ModelRecipe(model.spec)
        url = model.url
        if model.emulator is not None:
            from ..emulator.server import LoopServer

            server = self._servers.get(id(model.emulator))
            if server is None:
                server = LoopServer(model.emulator, self.emulator_host)
                self._servers[id(model.emulator)] = await server.start()
            url = server.url
        return ModelRecipe(model.spec, url, model.options)

    def _snapshot(self, run: AgentRun) -> _Shared | None:
        """A fork's family snapshot, put in the object store by its first child only."""
        if not run.is_fork or run.shared_prefix_end is None or run.parent_id is None:
            return None
        head = tuple(run.messages[: run.shared_prefix_end.message])
        key = (run.parent_id, len(head))
        known = self._snapshots.get(key)
        if known is not None and _same(known[0], run, head):
            return known
        snapshot = Snapshot(run.system, run.tool_specs, head)
        if len(self._snapshots) >= SNAPSHOTS_KEPT:  # running children hold their own refs
            del self._snapshots[next(iter(self._snapshots))]
        known = self._snapshots[key] = (snapshot, ray.put(snapshot))
        self.snapshots_put += 1
        return known

    async def _ship(self, run_id: str, worktree: Worktree, worker: _Worker) -> PathMap | None:
        """A copy of ``worktree`` on ``worker`` when it needs one: where tools then run."""
        if self.ship_worktrees is False:
            return None
        if self.ship_worktrees == "auto":
            marker = (worktree.path / ".git").read_text(encoding="utf-8")
            if await _remote(worker.sees(str(worktree.path), marker)):
                return None
        head, patch = await state(worktree.path)
        seed = await self._seed(worktree.path, head, patch)
        path = await _remote(worker.open_copy(seed, worktree.branch, worktree.path.name))
        self._copies[run_id] = _Copy(worker, worktree, head, path)
        return PathMap(str(worktree.path), path)

    async def _seed(self, path: Path, head: str, patch: bytes) -> ObjectRef[Seed]:
        """The worktree's seed in the object store: put once for the siblings that share it."""
        key = (head, hashlib.sha256(patch).hexdigest())
        async with self._packing:
            known = self._seeds.get(key)
            if known is None:
                if len(self._seeds) >= SEEDS_KEPT:  # children with their copy need no ref
                    del self._seeds[next(iter(self._seeds))]
                known = self._seeds[key] = ray.put(await pack(path, head, patch))
                self.seeds_put += 1
            return known

    def _remote_tools(
        self, tools: tuple[Tool, ...], actor: _Worker, paths: PathMap | None
    ) -> tuple[Tool, ...]:
        """The tools with the portable ones run by ``actor``; one object-store copy per set."""
        local = tuple(t.local if isinstance(t, RemoteTool) else t for t in tools)
        known = self._toolsets.get(id(tools))
        if known is None or known[0] is not tools:
            portable = tuple(t for t in local if _portable(t))
            known = (tools, ray.put(portable), frozenset(t.name for t in portable))
            self._toolsets[id(tools)] = known
        _, ref, names = known
        return tuple(RemoteTool(t, actor, ref, paths) if t.name in names else t for t in local)


_Shared = tuple[Snapshot, "ObjectRef[Snapshot]"]
"""A family snapshot and its object-store reference."""
_Toolset = tuple[tuple[Tool, ...], "ObjectRef[tuple[Tool, ...]]", frozenset[str]]
"""A tool tuple, its portable tools in the object store, and their names."""


class _Copy(NamedTuple):
    """A child's copy of its worktree on a worker, made from the worktree at ``start``."""

    worker: _Worker
    worktree: Worktree
    start: str
    path: str


class _Worker:
    """Typed calls to one ``ChildWorker`` actor (Ray types its handles loosely)."""

    def __init__(self, handle: Any, pid: int) -> None:
        self._handle = handle
        self.started_pid = pid
        """Its process when the pool started (a restarted worker runs in a new one)."""

    def request(
        self, recipe: ModelRecipe, shared: list[ObjectRef[Snapshot]], outgoing: Outgoing
    ) -> ObjectRef[ModelResponse]:
        ref: ObjectRef[ModelResponse] = self._handle.request.remote(
            recipe, shared, outgoing, CALLER.get()
        )
        return ref

    def stream(
        self, recipe: ModelRecipe, shared: list[ObjectRef[Snapshot]], outgoing: Outgoing
    ) -> ObjectRefGenerator:
        events: ObjectRefGenerator = self._handle.stream.remote(
            recipe, shared, outgoing, CALLER.get()
        )
        return events

    def prewarm(
        self, recipe: ModelRecipe, shared: list[ObjectRef[Snapshot]], outgoing: Outgoing
    ) -> ObjectRef[Usage | None]:
        ref: ObjectRef[Usage | None] = self._handle.prewarm.remote(
            recipe, shared, outgoing, CALLER.get()
        )
        return ref

    def call_tool(
        self,
        toolset: ObjectRef[tuple[Tool, ...]],
        name: str,
        args: dict[str, JsonValue],
        cwd: str,
        ctx: ToolContext,
    ) -> ObjectRef[ToolOutput]:
        ref: ObjectRef[ToolOutput] = self._handle.call_tool.remote(
            [toolset], name, args, cwd, ctx.agent_id, ctx.tool_use_id
        )
        return ref

    def sees(self, path: str, marker: str) -> ObjectRef[bool]:
        ref: ObjectRef[bool] = self._handle.sees.remote(path, marker)
        return ref

    def open_copy(self, seed: ObjectRef[Seed], branch: str, name: str) -> ObjectRef[str]:
        ref: ObjectRef[str] = self._handle.open_copy.remote([seed], branch, name)
        return ref

    def collect_copy(self, name: str, start: str) -> ObjectRef[Changes]:
        ref: ObjectRef[Changes] = self._handle.collect_copy.remote(name, start)
        return ref

    def drop_copy(self, name: str) -> None:
        """Fire and forget: a copy left behind only takes disk on the worker's node."""
        self._handle.drop_copy.remote(name)

    def kill(self) -> None:
        ray.kill(self._handle)


class RemoteModel(Model):
    """A child's model whose requests a worker sends; everything else is the local model's."""

    def __init__(
        self,
        local: Model,
        recipe: ModelRecipe,
        actor: _Worker,
        shared: _Shared | None,
    ) -> None:
        self.local = local
        self.profile = local.profile
        self._recipe = recipe
        self._actor = actor
        self._shared = shared

    @property
    def name(self) -> str:
        return self.local.name

    @property
    def context_window(self) -> int | None:
        return self.local.context_window

    def can_prewarm(self, request: ModelRequest) -> bool:
        return self.local.can_prewarm(request)

    async def request(self, request: ModelRequest) -> ModelResponse:
        refs, outgoing = self._outgoing(request)
        return await _remote(self._actor.request(self._recipe, refs, outgoing))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        refs, outgoing = self._outgoing(request)
        events = self._actor.stream(self._recipe, refs, outgoing)
        ended = False
        try:
            async for ref in events:
                yield await _remote(ref)
            ended = True
        finally:
            if not ended:  # abandoned (the reply is complete, or its reader was cancelled)
                ray.cancel(events)

    async def prewarm(self, request: ModelRequest) -> Usage | None:
        refs, outgoing = self._outgoing(request)
        return await _remote(self._actor.prewarm(self._recipe, refs, outgoing))

    def _outgoing(self, request: ModelRequest) -> tuple[list[ObjectRef[Snapshot]], Outgoing]:
        """The request less its family snapshot, when it still starts with it."""
        whole = Outgoing(
            request.model,
            request.settings,
            request.shared_prefix_end,
            tuple(request.messages),
            request.system,
            request.tools,
        )
        if self._shared is None or not _starts_with(request, self._shared[0]):
            return [], whole
        snapshot, ref = self._shared
        tail = tuple(request.messages[len(snapshot.messages) :])
        return [ref], Outgoing(request.model, request.settings, request.shared_prefix_end, tail)


class RemoteTool(Tool):
    """A tool whose calls a worker runs; its name, schema and spec are the local tool's."""

    def __init__(
        self,
        local: Tool,
        actor: _Worker,
        toolset: ObjectRef[tuple[Tool, ...]],
        paths: PathMap | None = None,
    ) -> None:
        self.local = local
        self.name = local.name
        self.description = local.description
        self.read_only = local.read_only
        self._actor = actor
        self._toolset = toolset
        self._paths = paths

    @property
    def input_schema(self) -> dict[str, JsonValue]:
        return self.local.input_schema

    def spec(self) -> ToolSpec:
        return self.local.spec()

    async def call(self, args: dict[str, JsonValue], ctx: ToolContext) -> ToolOutput:
        """Run on the worker; in a shipped copy, with its paths swapped for the driver's
        worktree both ways, so the model reads what a local call would give it."""
        paths = self._paths
        if paths is None:
            return await _remote(
                self._actor.call_tool(self._toolset, self.name, args, str(ctx.cwd), ctx)
            )
        moved = {key: paths.to_worker(value) for key, value in args.items()}
        cwd = paths.worker_text(str(ctx.cwd))
        try:
            output = await _remote(self._actor.call_tool(self._toolset, self.name, moved, cwd, ctx))
        except ToolError as error:
            raise paths.error(error) from None
        return paths.to_driver(output)


def _portable(tool: Tool) -> bool:
    """Whether ``tool`` can run on a worker: not bound to this process, and picklable."""
    from ..mcp.client import McpTool

    if isinstance(tool, AgentTool | McpTool):
        return False
    dumps: Callable[[object], bytes] = ray.cloudpickle.dumps
    try:
        dumps(tool)
    except Exception as exc:
        logger.info("tool %s stays in the driver: it cannot be pickled (%s)", tool.name, exc)
        return False
    return True


def _same(known: Snapshot, run: AgentRun, head: tuple[Message, ...]) -> bool:
    """Whether ``run`` shares exactly ``known``'s objects (the family's, not a look-alike)."""
    return (
        known.system is run.system
        and known.tools is run.tool_specs
        and len(known.messages) == len(head)
        and all(a is b for a, b in zip(known.messages, head, strict=True))
    )


def _starts_with(request: ModelRequest, shared: Snapshot) -> bool:
    count = len(shared.messages)
    return (
        request.system is shared.system
        and request.tools is shared.tools
        and len(request.messages) > count
        and all(a is b for a, b in zip(request.messages[:count], shared.messages, strict=True))
    )


async def _remote(ref: ObjectRef[T]) -> T:
    """A remote call's result; a cancelled wait cancels the call (and what it started) on its
    worker, and a failure there is raised here as the exception it was."""
    try:
        return await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise
    except RayTaskError as failed:
        cause = failed.cause
        if isinstance(cause, Exception):
            raise cause from None
        raise
