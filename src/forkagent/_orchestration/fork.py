"""Fork construction: a child whose request prefix is its parent's, byte for byte.

A child is built only from what the parent actually sent (its last request,
the cache-safe snapshot) plus the parent's last assistant message. Every
message object is shared by reference; the only new content is one message
at the end: a constant placeholder result for each pending tool call, the
constant fork rules, then the per-child directive. The cache breakpoint goes
on the rules block, the last block every sibling shares.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from .._construct import trusted
from ..history import HistoryView, freeze
from ..messages import (
    AssistantMessage,
    ContentBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    UserMessage,
    pending_tool_uses,
)
from ..models.base import HistoryStyle
from ..requests import BlockPosition, ModelRequest, canonical_json, tool_json

FORK_PLACEHOLDER = "Forked: this call's work continues in a child agent."
"""The one result every child sees for every pending parent tool call."""

FORK_ACK = "Understood. The forked children are running."
"""Model turn inserted in the alternating style so roles keep alternating."""

FORK_TAG = "forkagent-fork"

FORK_RULES = f"""<{FORK_TAG}>
You are a forked child of the agent whose conversation appears above. Everything
above was the parent's work; from here on you act alone on the directive below.

Rules for you, the fork:
1. Instructions above about forking or delegating were meant for the parent. You
   are the fork: do not start agents of any kind, forked or named.
2. Do not chat. Use your tools directly, without narrating between calls.
3. Stay inside the directive's scope. If you notice other work, mention it
   under Issues instead of doing it.
4. Report once, at the end, then stop. Keep it short unless the directive asks
   for detail.
5. Begin your report with "Scope:".

Report format:
Scope: the directive in one line.
Result: what you found or did.
Key files: the files that matter, with paths.
Files changed: each file you changed, or "none".
Verification: how you checked the result (commands run, tests), or "not verified".
Issues: problems, risks or follow-ups, or "none".
</{FORK_TAG}>"""


def directive_text(directive: str) -> str:
    return f"Directive:\n{directive}"


@dataclass(frozen=True, slots=True)
class ForkedHistory:
    messages: HistoryView[Message]
    """The family's shared messages (the same chunks), then the child's last one."""
    shared_prefix_end: BlockPosition
    """The rules block: the last block identical across siblings."""


@dataclass(frozen=True, slots=True)
class ForkBase:
    """What every sibling forked from one parent state shares, built once for the family.

    Sharing the same objects (not equal copies) lets the cache monitor and the
    transcript writer recognise the common prefix by identity, without rendering it,
    and a persistent view of the parent's history makes each child's copy of it
    O(log n) references instead of n.
    """

    messages: HistoryView[Message]
    """The messages before the child's last one: the parent's chunks, shared."""
    head: tuple[ContentBlock, ...]
    """The last message's blocks before the directive; the rules block ends them."""
    position: BlockPosition
    """The rules block's place, the end of every sibling's shared prefix: one object for all."""
    last: UserMessage
    """The last message with ``head`` alone, validated once: each child's is a copy with its
    directive added, so a reply of N tool calls does not validate N placeholders per child."""


_RULES_BLOCK = TextBlock(text=FORK_RULES)
_new_user_message = trusted(UserMessage)
_new_text_block = trusted(TextBlock)
_TEXT_SET = {"text"}
"""The fields set of every directive block. Messages are frozen (pydantic refuses to set a
field before it would add to this set; a copy gets its own), so one set serves them all:
a collector-tracked object fewer per child for as long as its history lives."""


@functools.lru_cache(maxsize=4096)
def _placeholder(tool_use_id: str) -> ToolResultBlock:
    """One object per pending call, so siblings' placeholder results are identical objects."""
    return ToolResultBlock(tool_use_id=tool_use_id, content=(TextBlock(text=FORK_PLACEHOLDER),))


def fork_base(history: Sequence[Message], *, style: HistoryStyle = "tool_result") -> ForkBase:
    """The shared part of a child's history for each way the parent's history can end.

    - assistant with tool calls: placeholders answer every pending call, then
      rules and directive follow in the same user message (alternating style:
      placeholders alone, a constant model acknowledgement, then the rules);
    - assistant without tool calls: a new user message with rules and directive;
    - a trailing user message: rules and directive are appended to it, which
      keeps its earlier blocks (and so the cached prefix) unchanged.
    """
    shared = freeze(history)
    pending = pending_tool_uses(shared)
    head: tuple[ContentBlock, ...] = ()
    if shared and isinstance(last := shared[-1], UserMessage):
        head = last.content
        shared = shared.prefix(len(shared) - 1)
    placeholders = tuple(_placeholder(u.id) for u in pending)
    if placeholders and style == "alternating":
        ack = AssistantMessage(content=(TextBlock(text=FORK_ACK),))
        shared = shared.extended((UserMessage(content=head + placeholders, origin="fork"), ack))
        head = ()
    else:
        head += placeholders
    head += (_RULES_BLOCK,)
    position = BlockPosition(message=len(shared), block=len(head) - 1)
    return ForkBase(shared, head, position, UserMessage(content=head, origin="fork"))


def fork_from(base: ForkBase, directive: str) -> ForkedHistory:
    """One child's history: the family's shared part, then its directive."""
    return ForkedHistory(fork_messages(base, directive), base.position)


def fork_messages(base: ForkBase, directive: str) -> HistoryView[Message]:
    """``fork_from``'s messages alone: a sibling's shared prefix ends at ``base.position``.

    The last message is a copy of the family's, its blocks not validated again
    (they were, once): O(1) per child instead of O(placeholders). It is made as
    ``model_copy`` would make it, without pydantic's generic copy (about 1 us less).
    The directive's block is not validated either: its only field is the string
    ``directive_text`` formats (about 1 us less). Both share their fields set with their
    family (``_TEXT_SET``, the family's last message's): frozen, nothing adds to it.
    """
    text = _new_text_block({"type": "text", "text": directive_text(directive)}, _TEXT_SET)
    # One concatenation, not an unpacking (a list built, then copied to a tuple): the head
    # holds a reply's N placeholders, so this is a pass over N per child, not three.
    values = {**base.last.__dict__, "content": base.head + (text,)}  # noqa: RUF005
    last = _new_user_message(values, base.last.model_fields_set)
    return base.messages.extended((last,))


def build_forked_messages(
    history: Sequence[Message], directive: str, *, style: HistoryStyle = "tool_result"
) -> ForkedHistory:
    """A child's history from its parent's (``fork_base`` says how each ending is handled)."""
    return fork_from(fork_base(history, style=style), directive)


def is_fork_history(messages: Sequence[Message]) -> bool:
    """The fallback recursion guard: looks only at messages the fork builder made.

    A user who types the fork tag writes an ``origin="user"`` message, which
    this never inspects.
    """
    return any(
        isinstance(m, UserMessage)
        and m.origin == "fork"
        and any(isinstance(b, TextBlock) and b.text == FORK_RULES for b in m.content)
        for m in messages
    )


def cache_key_hash(request: ModelRequest) -> str:
    """A stable digest of what decides a request's cache namespace.

    Model, settings (thinking, tool choice, sampling, routing key), tools and
    system: siblings and their parent must agree on all of it.
    """
    digest = hashlib.sha256()
    digest.update(canonical_json({"model": request.model}))
    digest.update(canonical_json(request.settings.model_dump(mode="json")))
    for tool in request.tools:
        digest.update(tool_json(tool))
    system = (
        request.system
        if isinstance(request.system, str)
        else [b.model_dump(mode="json") for b in request.system]
    )
    digest.update(canonical_json(system))
    return digest.hexdigest()[:16]
