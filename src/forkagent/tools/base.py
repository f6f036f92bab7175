"""The tool protocol, the per-call context and the ``@tool`` decorator."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, ParamSpec, TypeAlias, TypeVar, get_args, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import to_json

from ..errors import ToolError
from ..messages import ImageBlock, JsonValue, TextBlock
from ..requests import ToolSpec
from .spawn import AgentRuntime

P = ParamSpec("P")
R = TypeVar("R")

ToolOutput: TypeAlias = str | Sequence[TextBlock | ImageBlock]


@dataclass(slots=True)
class ToolContext:
    """What a tool call may know about the agent that makes it."""

    cwd: Path
    agent_id: str = "main"
    tool_use_id: str = ""
    runtime: AgentRuntime | None = None
    """The runtime running the call; the Agent tool starts children through it."""
    extra: dict[str, Any] = field(default_factory=dict)

    def resolve(self, path: str) -> Path:
        """A path argument made absolute against the agent's cwd."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.cwd / p


class Tool(ABC):
    """A capability the model can call."""

    name: str
    description: str
    read_only: bool = False
    """True when calling it never changes anything (used by filters and plan mode)."""

    @property
    @abstractmethod
    def input_schema(self) -> dict[str, JsonValue]: ...

    @abstractmethod
    async def call(self, args: dict[str, JsonValue], ctx: ToolContext) -> ToolOutput:
        """Run the tool. Raise ``ToolError`` for an error the model should see."""

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name, description=self.description, input_schema=self.input_schema
        )


class ArgsTool(Tool):
    """A tool whose arguments are a pydantic model, validated before ``run``."""

    Args: type[BaseModel]

    @property
    def input_schema(self) -> dict[str, JsonValue]:
        return clean_schema(self.Args.model_json_schema())

    async def call(self, args: dict[str, JsonValue], ctx: ToolContext) -> ToolOutput:
        return await self.run(validate_args(self.Args, args), ctx)

    @abstractmethod
    async def run(self, args: Any, ctx: ToolContext) -> ToolOutput: ...


def validate_args(model: type[BaseModel], args: dict[str, JsonValue]) -> Any:
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
        )
        raise ToolError(f"invalid arguments: {problems}") from None


def clean_schema(schema: dict[str, Any]) -> dict[str, JsonValue]:
    """Drop pydantic's ``title`` noise; keep everything a model needs."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: walk(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))
            }
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, JsonValue] = walk(schema)
    out.setdefault("properties", {})
    return out


class FunctionTool(Tool, Generic[P, R]):
    """A tool made from a plain (sync or async) function by ``@tool``.

    It stays callable as the function it wraps, with the same signature for a
    type checker, so decorated functions can still be called (and tested) directly.
    """

    def __init__(
        self,
        function: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
    ) -> None:
        self.function = function
        self.name = name or function.__name__
        self.read_only = read_only
        doc = docstring_parser.parse(inspect.getdoc(function) or "")
        self.description = description or _summary(doc) or self.name
        self._takes_ctx, self._args = _args_model(function, doc)

    @property
    def input_schema(self) -> dict[str, JsonValue]:
        return clean_schema(self._args.model_json_schema())

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    async def call(self, args: dict[str, JsonValue], ctx: ToolContext) -> ToolOutput:
        parsed = validate_args(self._args, args)
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        if self._takes_ctx:
            kwargs["ctx"] = ctx
        # By keyword, from validated arguments: beyond what a ParamSpec can express.
        untyped: Callable[..., Any] = self.function
        result = untyped(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return _as_output(result)


def _as_output(result: Any) -> ToolOutput:
    """Text and content blocks pass through; any other value becomes its JSON text."""
    if isinstance(result, str):
        return result
    if isinstance(result, list | tuple) and all(
        isinstance(b, TextBlock | ImageBlock) for b in result
    ):
        return result
    return to_json(result, fallback=str).decode()


def _summary(doc: docstring_parser.Docstring) -> str:
    return "\n\n".join(p for p in (doc.short_description, doc.long_description) if p)


def _args_model(
    function: Callable[..., Any], doc: docstring_parser.Docstring
) -> tuple[bool, type[BaseModel]]:
    hints = get_type_hints(function)
    described = {p.arg_name: p.description for p in doc.params}
    fields: dict[str, Any] = {}
    takes_ctx = False
    for param in inspect.signature(function).parameters.values():
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext or ToolContext in get_args(annotation):
            takes_ctx = True
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (
            annotation,
            _field(default, described.get(param.name)),
        )
    model = create_model(
        f"{function.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields
    )
    return takes_ctx, model


def _field(default: Any, description: str | None) -> Any:
    from pydantic import Field

    return Field(default, description=description) if description else Field(default)


@overload
def tool(function: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, read_only: bool = False
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    function: Callable[P, R] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a tool from a function: schema from type hints, description from the docstring.

    A parameter annotated ``ToolContext`` receives the call context and is not
    shown to the model. Use bare (``@tool``) or with options (``@tool(read_only=True)``).
    The result keeps the function's type: ``mypy --strict`` sees its signature.
    """

    def wrap(fn: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(fn, name=name, description=description, read_only=read_only)

    return wrap(function) if function is not None else wrap


ToolLike: TypeAlias = Tool | Callable[..., Any] | Callable[..., Awaitable[Any]]


def as_tool(value: ToolLike) -> Tool:
    return value if isinstance(value, Tool) else FunctionTool(value)
