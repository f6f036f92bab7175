"""Provider-neutral conversation model.

Messages are immutable values: a forked child holds the very same message
objects as its parent, so nothing can drift between the parent's request and
the child's. Every adapter renders from these types and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

if TYPE_CHECKING:
    JsonValue: TypeAlias = (
        Mapping[str, "JsonValue"] | Sequence["JsonValue"] | str | int | float | bool | None
    )
    """A JSON value. Read-only containers, so a ``dict[str, list[str]]`` or a list of
    bodies is one without a copy; code that reads one narrows it with ``isinstance``."""
else:
    # At run time pydantic's recursive alias validates the same values (into dicts and lists).
    from pydantic import JsonValue


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextBlock(_Frozen):
    type: Literal["text"] = "text"
    text: str


class ImageBlock(_Frozen):
    """An image, inline (base64 ``data``) or by ``url``."""

    type: Literal["image"] = "image"
    media_type: str = "image/png"
    data: str | None = None
    url: str | None = None


class ThinkingBlock(_Frozen):
    """Model reasoning. ``signature`` (or ``redacted`` data) is sent back verbatim."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None
    redacted: bool = False


class ToolUseBlock(_Frozen):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, JsonValue] = Field(default_factory=dict)
    raw_arguments: str | None = None
    """The argument text exactly as the model produced it, when it was not valid JSON."""


ToolResultContent: TypeAlias = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(_Frozen):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: tuple[ToolResultContent, ...] = ()
    is_error: bool = False

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


ContentBlock: TypeAlias = Annotated[
    TextBlock | ImageBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock,
    Field(discriminator="type"),
]

UserOrigin: TypeAlias = Literal["user", "tool", "fork", "notification", "hook", "system"]
"""Who wrote a user-role message. Never rendered on the wire; guards read it."""


class UserMessage(_Frozen):
    role: Literal["user"] = "user"
    content: tuple[ContentBlock, ...]
    origin: UserOrigin = "user"

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolResultBlock))


class AssistantMessage(_Frozen):
    role: Literal["assistant"] = "assistant"
    content: tuple[ContentBlock, ...]

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))


Message: TypeAlias = Annotated[UserMessage | AssistantMessage, Field(discriminator="role")]

_MESSAGES = TypeAdapter(tuple[Message, ...])
_MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)


def user(*parts: str | ContentBlock, origin: UserOrigin = "user") -> UserMessage:
    """Build a user message from strings and blocks."""
    return UserMessage(content=_blocks(parts), origin=origin)


def assistant(*parts: str | ContentBlock) -> AssistantMessage:
    """Build an assistant message from strings and blocks."""
    return AssistantMessage(content=_blocks(parts))


def tool_result(tool_use_id: str, text: str, *, is_error: bool = False) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=tool_use_id, content=(TextBlock(text=text),), is_error=is_error
    )


def _blocks(parts: Iterable[str | ContentBlock]) -> tuple[ContentBlock, ...]:
    return tuple(TextBlock(text=p) if isinstance(p, str) else p for p in parts)


def dump_message(message: UserMessage | AssistantMessage) -> dict[str, JsonValue]:
    return message.model_dump(mode="json")


def load_message(data: JsonValue) -> UserMessage | AssistantMessage:
    return _MESSAGE.validate_python(data)


def messages_to_json(messages: Sequence[UserMessage | AssistantMessage]) -> bytes:
    """Lossless JSON of a history (the transcript format)."""
    return _MESSAGES.dump_json(tuple(messages))


def messages_from_json(data: bytes | str) -> tuple[UserMessage | AssistantMessage, ...]:
    return _MESSAGES.validate_json(data)


def pending_tool_uses(
    messages: Sequence[UserMessage | AssistantMessage],
) -> tuple[ToolUseBlock, ...]:
    """Tool calls of the last assistant message that no later message answers."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            uses = message.tool_uses
            if not uses:
                return ()  # the usual end of a turn: no need to copy what follows it
            answered = {
                r.tool_use_id
                for later in messages[index + 1 :]
                if isinstance(later, UserMessage)
                for r in later.tool_results
            }
            return tuple(u for u in uses if u.id not in answered)
    return ()
