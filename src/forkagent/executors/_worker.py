"""What runs inside a Ray worker process: a child's model requests and tool calls.

The driver decides; the worker does. One ``ChildWorker`` actor serves many
children at once (an async actor): it builds each model once from its
recipe, fetches each family's shared snapshot once from the object store,
and runs tool calls in the child's working directory. Nothing here holds a
child's state, so a restarted worker can take any call again.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ToolError
from ..messages import JsonValue, Message, TextBlock
from ..models import resolve_model
from ..models.base import CALLER, Caller, Model, ModelResponse, StreamEvent
from ..models.emulator import EmulatorModel, EmulatorOptions
from ..requests import BlockPosition, ModelRequest, ModelSettings, ToolSpec
from ..state.worktrees import WorktreeError
from ..tools.base import Tool, ToolContext, ToolOutput
from ..tools.environment import PROVIDER_KEYS
from ..usage import Usage
from ._shipping import Changes, Seed, collect, copy_dir, unpack

if TYPE_CHECKING:
    from ray import ObjectRef

SNAPSHOTS_KEPT = 64
"""Family snapshots kept at hand (deserialized on a worker, referenced by the executor);
an older one is fetched again, or put again, if a child still needs it."""


@dataclass(frozen=True, slots=True)
class ModelRecipe:
    """How a worker builds the child's model: from its spec, or the driver's emulator URL."""

    spec: str
    emulator_url: str | None = None
    emulator_options: EmulatorOptions | None = None

    def build(self) -> Model:
        if self.emulator_url is None:
            return resolve_model(self.spec)
        options = self.emulator_options or EmulatorOptions()
        return EmulatorModel(
            self.spec.partition(":")[2],
            url=self.emulator_url,
            retry=options.retry,
            diagnostics=options.diagnostics,
            explicit_cache=options.explicit_cache,
            api=options.api,
            chain=options.chain,
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a fork family shares byte for byte: put in the object store once per family."""

    system: str | tuple[TextBlock, ...]
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One request less what its family's snapshot holds (``system``/``tools`` None: the
    snapshot's; ``messages``: those after the snapshot's)."""

    model: str
    settings: ModelSettings
    shared_prefix_end: BlockPosition | None
    messages: tuple[Message, ...]
    system: str | tuple[TextBlock, ...] | None = None
    tools: tuple[ToolSpec, ...] | None = None

    def request(self, snapshot: Snapshot | None) -> ModelRequest:
        if snapshot is None:
            assert self.system is not None, "no snapshot given"
            assert self.tools is not None, "no snapshot given"
            snapshot = Snapshot(self.system, self.tools, ())
        return ModelRequest.model_construct(
            model=self.model,
            system=snapshot.system if self.system is None else self.system,
            tools=snapshot.tools if self.tools is None else self.tools,
            messages=snapshot.messages + self.messages,
            settings=self.settings,
            shared_prefix_end=self.shared_prefix_end,
        )


class ChildWorker:
    """A Ray actor (made remote by the executor) serving children's requests and calls."""

    def __init__(self, keep_keys: frozenset[str]) -> None:
        # Provider keys reach a worker only when the user lists them (``env_keys``): a
        # local cluster's workers would otherwise inherit the driver's environment.
        for name in PROVIDER_KEYS - keep_keys:
            os.environ.pop(name, None)
        self._models: dict[ModelRecipe, Model] = {}
        self._snapshots: dict[str, Snapshot] = {}
        self._tools: dict[str, dict[str, Tool]] = {}

    def pid(self) -> int:
        return os.getpid()

    async def request(
        self,
        recipe: ModelRecipe,
        snapshot: list[ObjectRef[Snapshot]],
        outgoing: Outgoing,
        caller: Caller | None,
    ) -> ModelResponse:
        request = await self._request(snapshot, outgoing)
        with _calling_as(caller):
            return await self._model(recipe).request(request)

    async def stream(
        self,
        recipe: ModelRecipe,
        snapshot: list[ObjectRef[Snapshot]],
        outgoing: Outgoing,
        caller: Caller | None,
    ) -> AsyncIterator[StreamEvent]:
        request = await self._request(snapshot, outgoing)
        with _calling_as(caller):
            async for event in self._model(recipe).stream(request):
                yield event

    async def prewarm(
        self,
        recipe: ModelRecipe,
        snapshot: list[ObjectRef[Snapshot]],
        outgoing: Outgoing,
        caller: Caller | None,
    ) -> Usage | None:
        request = await self._request(snapshot, outgoing)
        with _calling_as(caller):
            return await self._model(recipe).prewarm(request)

    async def call_tool(
        self,
        tools: list[ObjectRef[tuple[Tool, ...]]],
        name: str,
        args: dict[str, JsonValue],
        cwd: str,
        agent_id: str,
        tool_use_id: str,
    ) -> ToolOutput:
        [ref] = tools
        key = ref.hex()
        if key not in self._tools:
            self._tools[key] = {t.name: t for t in await ref}
        ctx = ToolContext(cwd=Path(cwd), agent_id=agent_id, tool_use_id=tool_use_id)
        if not ctx.cwd.is_dir():
            raise ToolError(  # another node without the checkout, or a copy lost with its node
                "this agent's working directory does not exist on the Ray worker running its tools"
            )
        return await self._tools[key][name].call(args, ctx)

    # -- a child's copy of its worktree, when the driver's is out of reach ----------

    def sees(self, path: str, marker: str) -> bool:
        """Whether the driver's worktree at ``path`` is this one (its ``.git`` file names
        the worktree's own admin dir, which no other checkout shares)."""
        try:
            return (Path(path) / ".git").read_text(encoding="utf-8") == marker
        except OSError:
            return False

    async def open_copy(self, seed: list[ObjectRef[Seed]], branch: str, name: str) -> str:
        """Clone the shipped worktree (once: a retried call finds it) and say where it is."""
        [ref] = seed
        dest = copy_dir(name)
        await unpack(await ref, branch, dest)
        return str(dest)

    async def collect_copy(self, name: str, start: str) -> Changes:
        copy = copy_dir(name)
        if not copy.is_dir():
            raise WorktreeError(
                "its copy of the worktree is gone from its Ray worker (restarted on another node)"
            )
        return await collect(copy, start)

    def drop_copy(self, name: str) -> None:
        shutil.rmtree(copy_dir(name), ignore_errors=True)

    def _model(self, recipe: ModelRecipe) -> Model:
        if recipe not in self._models:
            self._models[recipe] = recipe.build()
        return self._models[recipe]

    async def _request(
        self, snapshot: list[ObjectRef[Snapshot]], outgoing: Outgoing
    ) -> ModelRequest:
        if not snapshot:
            return outgoing.request(None)
        [ref] = snapshot
        key = ref.hex()
        if key not in self._snapshots:
            if len(self._snapshots) >= SNAPSHOTS_KEPT:
                del self._snapshots[next(iter(self._snapshots))]
            self._snapshots[key] = await ref
        return outgoing.request(self._snapshots[key])


@contextmanager
def _calling_as(caller: Caller | None) -> Iterator[None]:
    """The driver's agent as the request's caller (the emulator's scripts aim at it)."""
    token = CALLER.set(caller)
    try:
        yield
    finally:
        CALLER.reset(token)
