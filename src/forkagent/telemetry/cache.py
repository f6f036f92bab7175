"""Why a request read less from the prompt cache than it could have.

A request can only read what an earlier request wrote, so ``explain`` compares
a request with the one it extends (the agent's previous request, or for a
fork's first request its parent's last one) the way a provider's cache sees
them: model and settings first, then tools, system and messages block by
block. Token figures are estimates: the shared bytes are scaled by the
request's own prompt size as the provider counted it, which tracks the
provider's tokenizer better than any local one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring
from operator import attrgetter
from typing import Literal, TypeAlias

from pydantic import TypeAdapter

from .._construct import slot_setters
from ..history import HistoryView
from ..messages import ContentBlock, JsonValue, Message, TextBlock
from ..models._shared import HEAD_MIN, SharedHeads, SharedRenderings
from ..models.base import ModelProfile
from ..requests import (
    CacheTTL,
    Difference,
    ModelRequest,
    canonical_block,
    first_difference,
    request_blocks,
)
from ..usage import Usage

CacheReason: TypeAlias = Literal[
    "model_changed",
    "settings_changed",
    "tools_changed",
    "system_changed",
    "messages_changed",
    "ttl_expired",
    "below_minimum",
    "launched_before_cache",
    "provider_reported",
    "unexplained",
]
CacheStatus: TypeAlias = Literal["hit", "miss", "cold", "unmeasured"]
"""``cold``: nothing earlier to read from; ``unmeasured``: the provider reported no prompt size."""

HIT_FRACTION = 0.8
"""A request that read at least this share of the expected prefix counts as a hit.

The expected figure is an estimate; the margin keeps estimation noise from
reading as a miss."""
BYTES_PER_TOKEN = 4.0
"""Fallback scale when the provider reported no prompt size."""
TTL_SECONDS: dict[CacheTTL, float] = {"5m": 300.0, "1h": 3600.0}

_LAYER_REASONS: dict[str, CacheReason] = {
    "model": "model_changed",
    "tools": "tools_changed",
    "system": "system_changed",
    "messages": "messages_changed",
}
_PROVIDER_TYPES = {
    "previous_message_not_found": "it could not find the previous request to compare with",
    "unavailable": "it has no diagnosis for this request",
}
_EXCERPT = 24
VIEW_MIN = 256
"""Message prefixes at most this long compare faster as tuples (in C) than as shared views."""


@dataclass(frozen=True, slots=True)
class CacheFinding:
    """One cause of a shortfall, as a machine-readable reason and a sentence for people."""

    reason: CacheReason
    message: str


@dataclass(frozen=True, slots=True)
class CacheReport:
    """How one request used the cache, and why it read less than it could have."""

    status: CacheStatus
    prompt_tokens: int
    read_tokens: int
    write_tokens: int
    expected_tokens: int
    """Estimated tokens of the prefix shared with the request compared against."""
    findings: tuple[CacheFinding, ...] = ()
    difference: Difference | None = None
    compared_with: str | None = None
    provider_diagnosis: Mapping[str, JsonValue] | None = None

    @property
    def reasons(self) -> tuple[CacheReason, ...]:
        return tuple(f.reason for f in self.findings)

    @property
    def summary(self) -> str:
        """One line for logs and live views."""
        head = f"cache {self.status}: read {self.read_tokens:,} of ~{self.expected_tokens:,}"
        head += f" expected tokens, wrote {self.write_tokens:,}"
        if self.compared_with:
            head += f" (against {self.compared_with})"
        return "; ".join([head, *(f.message for f in self.findings)])

    @property
    def short(self) -> str:
        """The status and the first reason, with where the prefixes part: for narrow views."""
        if not self.findings:
            return self.status
        text = f"{self.status}: {self.findings[0].reason}"
        if self.difference is not None:
            text += f" ({self.difference.detail})"
        return text

    def to_dict(self) -> dict[str, JsonValue]:
        """The JSON form, as transcripts keep it."""
        data: dict[str, JsonValue] = _JSON.dump_python(self, mode="json")
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> CacheReport:
        """Read ``to_dict``'s output back; raises ``ValueError`` for anything else."""
        return _JSON.validate_python(data)


_JSON: TypeAdapter[CacheReport] = TypeAdapter(CacheReport)


(_STATUS, _PROMPT, _READ, _WRITE, _EXPECTED, _FINDINGS, _DIFFERENCE, _COMPARED, _DIAGNOSIS) = (
    slot_setters(CacheReport)
)


def new_report(
    *,
    status: CacheStatus,
    prompt_tokens: int,
    read_tokens: int,
    write_tokens: int,
    expected_tokens: int,
    findings: tuple[CacheFinding, ...],
    difference: Difference | None,
    compared_with: str | None,
    provider_diagnosis: Mapping[str, JsonValue] | None,
) -> CacheReport:
    """``CacheReport(...)`` with every field given, set through the slots (``slot_setters``).

    Keyword-only, as four of the nine fields are ints: a swap by position would type-check.
    """
    report: CacheReport = object.__new__(CacheReport)
    _STATUS(report, status)
    _PROMPT(report, prompt_tokens)
    _READ(report, read_tokens)
    _WRITE(report, write_tokens)
    _EXPECTED(report, expected_tokens)
    _FINDINGS(report, findings)
    _DIFFERENCE(report, difference)
    _COMPARED(report, compared_with)
    _DIAGNOSIS(report, provider_diagnosis)
    return report


def explain(
    previous: ModelRequest | None,
    current: ModelRequest,
    usage: Usage,
    *,
    profile: ModelProfile,
    elapsed: float | None = None,
    cache_ready: bool = True,
    diagnosis: Mapping[str, JsonValue] | None = None,
    compared_with: str | None = None,
    hit_fraction: float = HIT_FRACTION,
    sizes: Sequence[int] | None = None,
    previous_tokens: int | None = None,
    prefix_blocks: int | None = None,
) -> CacheReport:
    """Explain how ``current`` used the cache that ``previous`` should have left.

    ``elapsed`` is the time in seconds from ``previous``'s start to
    ``current``'s (cache lifetimes count from the start of the request that
    wrote or last read an entry). ``cache_ready`` says whether ``previous``'s
    cache entry could exist when ``current`` was sent, by the provider's
    warm-up rule. ``diagnosis`` is the provider's own explanation
    (``ModelResponse.cache_diagnosis``). ``sizes``, the canonical size of
    each of ``current``'s blocks (``block_sizes``), saves rendering them again.
    ``previous_tokens``, the prompt size ``previous``'s response reported: when
    ``current`` extends it and read at least that much, it is a hit by count,
    not by an estimate from sizes. ``prefix_blocks``, when the caller has found
    that ``current`` extends ``previous`` (``extension_sizes`` with ``previous``
    as the known request), is ``previous``'s block count: the prefix is not
    compared again.
    """
    sizes = block_sizes(current) if sizes is None else sizes
    report = _Report(usage, compared_with, diagnosis)
    total = sum(sizes)
    if previous is None:
        prompt = report.prompt or report.expected(total, total)
        return report.build("cold", 0, _minimum_findings(prompt, profile, "the prompt"))
    compared, settings = _settings_change(previous, current)
    if prefix_blocks is not None and settings is None:
        shared = sum(sizes[:prefix_blocks])
    else:
        difference = None if extends(compared, current) else first_difference(compared, current)
        shared = sum(sizes[: _shared_blocks(compared, difference)])
        if difference is not None:
            expected = report.expected(shared, total)
            finding = _change_finding(difference, compared, current, expected)
            return report.build("miss", expected, [finding], difference)
    return report.judge(
        shared,
        total,
        previous,
        previous_tokens,
        settings,
        profile,
        elapsed,
        cache_ready,
        hit_fraction,
    )


def explain_extension(
    previous: ModelRequest,
    usage: Usage,
    *,
    shared_bytes: int,
    total_bytes: int,
    profile: ModelProfile,
    elapsed: float | None = None,
    cache_ready: bool = True,
    diagnosis: Mapping[str, JsonValue] | None = None,
    compared_with: str | None = None,
    hit_fraction: float = HIT_FRACTION,
    previous_tokens: int | None = None,
) -> CacheReport:
    """``explain`` for a request proven to extend ``previous`` (``added_sizes``), from sizes alone.

    ``shared_bytes`` is the canonical size of ``previous``'s blocks, ``total_bytes`` that of the
    current request's: nothing is compared or summed again, so a fork sibling measured from its
    family's shared part costs only what it adds. The report is the one ``explain`` gives.
    """
    report = _Report(usage, compared_with, diagnosis)
    return report.judge(
        shared_bytes,
        total_bytes,
        previous,
        previous_tokens,
        None,
        profile,
        elapsed,
        cache_ready,
        hit_fraction,
    )


def _settings_change(
    previous: ModelRequest, current: ModelRequest
) -> tuple[ModelRequest, Difference | None]:
    """``previous`` with ``current``'s settings, and what changed in them.

    Providers differ in which settings they key their cache on (Anthropic:
    tool_choice and thinking, and only from the messages on; temperature not
    at all), so a changed setting is judged by what was read, not assumed
    to have emptied the cache.
    """
    if previous.settings is current.settings or previous.settings == current.settings:
        return previous, None
    change = first_difference(previous.model_copy(update={"model": current.model}), current)
    return previous.model_copy(update={"settings": current.settings}), change


@dataclass(slots=True, init=False)
class _Report:
    """What every report of one request shares, whatever its status."""

    prompt: int
    """``usage.prompt_tokens``."""
    read: int
    write: int
    compared_with: str | None
    diagnosis: Mapping[str, JsonValue] | None

    def __init__(
        self, usage: Usage, compared_with: str | None, diagnosis: Mapping[str, JsonValue] | None
    ) -> None:
        # Each count read once from the fields' dict: a pydantic attribute read is a slow
        # look-up and ``Usage``'s sums are properties, each a call: their formulas, restated.
        counts = usage.__dict__
        read = counts["cache_read_tokens"]
        write = counts["cache_write_5m_tokens"] + counts["cache_write_1h_tokens"]
        self.prompt = counts["input_tokens"] + read + write
        self.read, self.write = read, write
        self.compared_with, self.diagnosis = compared_with, diagnosis

    def expected(self, shared_bytes: int, total_bytes: int) -> int:
        """The tokens of the shared bytes, scaled by the prompt size the provider counted."""
        prompt = self.prompt
        per_byte = prompt / total_bytes if prompt and total_bytes else 1 / BYTES_PER_TOKEN
        return round(shared_bytes * per_byte)

    def judge(
        self,
        shared_bytes: int,
        total_bytes: int,
        previous: ModelRequest,
        previous_tokens: int | None,
        settings: Difference | None,
        profile: ModelProfile,
        elapsed: float | None,
        cache_ready: bool,
        hit_fraction: float,
    ) -> CacheReport:
        """The report of a request that extends ``previous`` but for a ``settings`` change.

        Taken by position: every response's report passes here, and each keyword is a search."""
        expected = self.expected(shared_bytes, total_bytes)
        read = self.read
        if previous_tokens and read >= previous_tokens:
            return self.build("hit", previous_tokens)
        if read >= hit_fraction * expected:
            return self.build("hit", expected)
        findings = _shortfall_findings(expected, profile, previous, elapsed, cache_ready)
        if settings is not None and findings[0].reason == "unexplained":
            return self.build("miss", expected, [_settings_finding(settings)], settings)
        return self.build("miss", expected, findings)

    def build(
        self,
        status: CacheStatus,
        expected: int,
        findings: Sequence[CacheFinding] = (),
        difference: Difference | None = None,
    ) -> CacheReport:
        """The report; without a prompt size from the provider the status is ``unmeasured``."""
        diagnosis = self.diagnosis
        return new_report(
            status=status if self.prompt else "unmeasured",
            prompt_tokens=self.prompt,
            read_tokens=self.read,
            write_tokens=self.write,
            expected_tokens=expected,
            findings=(*findings, *_provider_findings(diagnosis)) if diagnosis else tuple(findings),
            difference=difference,
            compared_with=self.compared_with,
            provider_diagnosis=diagnosis,
        )


def block_sizes(
    request: ModelRequest, known: tuple[ModelRequest, Sequence[int]] | None = None
) -> list[int]:
    """The canonical JSON size of each block of ``request``, in ``request_blocks`` order.

    ``known`` is an earlier request and its sizes: when ``request`` extends it,
    only the blocks it adds are rendered (``extension_sizes``).
    """
    sizes = None if known is None else extension_sizes(request, known)
    return [len(block.data) for block in request_blocks(request)] if sizes is None else sizes


def extension_sizes(
    request: ModelRequest, known: tuple[ModelRequest, Sequence[int]]
) -> list[int] | None:
    """``block_sizes`` of ``request`` from ``known`` (an earlier request and its sizes),
    rendering only the blocks it adds; None when ``request`` does not extend it (``extends``:
    its last message may be cut, as a family's shared part is)."""
    earlier, sizes = known
    added = added_sizes(request, earlier)
    return None if added is None else [*sizes, *added]


def added_sizes(request: ModelRequest, earlier: ModelRequest) -> list[int] | None:
    """``block_sizes`` of the blocks ``request`` adds to ``earlier``, or None when it does not
    extend it (``extends``)."""
    extension = _extension(earlier, request)
    if extension is None:
        return None
    messages, total, count, joint, rest = extension
    if count == total and len(rest) == 1 and joint is not None:
        # A fork sibling's directive, the one block it adds: measured, not kept (it comes once).
        return [block_size(joint.role, rest[0])]
    out: list[int] = []
    if joint is not None and rest:  # the rest of a cut last message: what a sibling adds
        out += _sizes(joint.role, rest, keep_last=count < total)
    if count < total:
        added = messages[count:]
        for message in added[:-1]:
            out += _MESSAGE_SIZES.get(message, _message_sizes)
        # The request's own new message: measured, not kept (it comes once).
        out += _sizes(added[-1].role, added[-1].content, keep_last=False)
    return out


_MESSAGE_SIZES: SharedRenderings[Message, list[int]] = SharedRenderings()
_BLOCK_SIZES: dict[str, SharedRenderings[ContentBlock, int]] = {
    "user": SharedRenderings(),
    "assistant": SharedRenderings(),
}
"""Sizes by (frozen) message and block object, by role: siblings forked from a reply with N
tool calls add the same N calls and N placeholder results, measured once for the family."""
_HEAD_SIZES: SharedHeads[ContentBlock, tuple[str, list[int]]] = SharedHeads()
"""A long message's sizes but its last block's, with its role: each of those children's last
message is new, but starts with the family's placeholders and rules (the same objects)."""


def _message_sizes(message: Message) -> list[int]:
    return _sizes(message.role, message.content)


def _sizes(role: str, blocks: tuple[ContentBlock, ...], *, keep_last: bool = True) -> list[int]:
    """``keep_last=False``: the last block is measured without being kept."""
    if len(blocks) == 1:  # a sibling's directive: no head to measure
        return _last_size(role, blocks, keep_last)
    if len(blocks) <= HEAD_MIN:  # no head is kept for short ones
        return _measured(role, blocks[:-1]) + _last_size(role, blocks, keep_last)
    head = _HEAD_SIZES.find(blocks)
    if head is None or head[0] != role:
        head = (role, _measured(role, blocks[:-1]))
        _HEAD_SIZES.keep(blocks, head)
    return head[1] + _last_size(role, blocks, keep_last)


def _last_size(role: str, blocks: tuple[ContentBlock, ...], keep: bool) -> list[int]:
    if not blocks:
        return []
    return _measured(role, blocks[-1:]) if keep else [block_size(role, blocks[-1])]


def _measured(role: str, blocks: tuple[ContentBlock, ...]) -> list[int]:
    if not blocks:  # a one-block message's head: nothing to look up
        return []

    def measure(block: ContentBlock) -> int:
        return block_size(role, block)

    by_block = _BLOCK_SIZES[role]
    return [by_block.get(block, measure) for block in blocks]


_TEXT_FRAMES: dict[str, int] = {
    role: len(canonical_block(role, TextBlock(text=""))) - len('""') for role in _BLOCK_SIZES
}
"""A text block's canonical size by role, but for its text's JSON string."""


def block_size(role: str, block: ContentBlock) -> int:
    """``len(canonical_block(role, block))``; a text block's without rendering it.

    Every fork sibling's directive is measured: its size is its role's frame plus its text
    as the canonical encoder writes a string (UTF-8, not ASCII-escaped)."""
    frame = _TEXT_FRAMES.get(role)
    if frame is None or type(block) is not TextBlock:
        return len(canonical_block(role, block))
    text = encode_basestring(block.__dict__["text"])
    return frame + (len(text) if text.isascii() else len(text.encode()))


def extends(previous: ModelRequest, current: ModelRequest) -> bool:
    """Cheap proof that ``current`` extends ``previous``: same header, same message objects.

    Agents share message objects by reference, so this settles the common case
    without rendering every block twice; anything else goes to ``first_difference``.
    ``previous`` may end in a cut copy of a message (a family's shared part, see
    ``shared_part``): its blocks must then be the first blocks of ``current``'s.
    """
    return _extension(previous, current) is not None


def _extension(
    previous: ModelRequest, current: ModelRequest
) -> tuple[Sequence[Message], int, int, Message | None, tuple[ContentBlock, ...]] | None:
    """``extends``'s proof, keeping what ``added_sizes`` reads next: ``current``'s messages,
    their count, ``previous``'s count, ``current``'s message at ``previous``'s last position
    (None when ``previous`` has none) and that message's blocks after ``previous``'s (a cut
    copy's rest). None when it does not extend it. Each index of a history view is a Python
    call, and each pydantic field read a slow look-up: each is read once."""
    mine, theirs = previous.__dict__, current.__dict__  # a pydantic model's fields, one look-up
    if not (
        mine["model"] == theirs["model"]
        and (mine["settings"] is theirs["settings"] or mine["settings"] == theirs["settings"])
        and mine["tools"] == theirs["tools"]
        and mine["system"] == theirs["system"]
    ):
        return None
    before, after = mine["messages"], theirs["messages"]
    count, total = len(before), len(after)
    if count > total:
        return None
    if not count:
        return after, total, 0, None, ()
    last = count - 1
    joint = after[last]
    if _same_messages(before, after, last):
        rest = _rest(before[last], joint)
        if rest is not None:
            return after, total, count, joint, rest
    return None


def _same_messages(before: Sequence[Message], after: Sequence[Message], count: int) -> bool:
    """Whether the first ``count`` messages are the same (identical or equal: equal ones render
    alike). Two long views skip the chunks they share unread (a fork's history and its family's
    shared part share all but their last few), so this costs O(log n), not O(n)."""
    if count > VIEW_MIN and isinstance(before, HistoryView) and isinstance(after, HistoryView):
        return before.prefix(count).common_length(after) == count
    # Tuples compare item by item in C, each identical item at once.
    return before[:count] == after[:count]


def _rest(cut: Message, whole: Message) -> tuple[ContentBlock, ...] | None:
    """``whole``'s blocks after ``cut``'s when ``whole`` is ``cut``, or has the same role and
    begins with ``cut``'s blocks; None otherwise."""
    if cut is whole:
        return ()
    # Read from the fields' dicts (a pydantic attribute read is a slow look-up); the blocks
    # compared in C, identical ones at once (equal ones render alike).
    mine, theirs = cut.__dict__, whole.__dict__
    blocks, content = mine["content"], theirs["content"]
    if mine["role"] == theirs["role"] and content[: len(blocks)] == blocks:
        rest: tuple[ContentBlock, ...] = content[len(blocks) :]
        return rest
    return None


def _shared_blocks(previous: ModelRequest, difference: Difference | None) -> int:
    """How many leading blocks of the current request the previous one also had."""
    if difference is not None:
        return difference.block_index or 0
    # Counted the way ``request_blocks`` lays them out, without rendering them.
    if isinstance(previous.system, str):
        system = int(bool(previous.system))
    else:
        system = sum(1 for block in previous.system if block.text)
    contents = map(attrgetter("content"), previous.messages)
    return len(previous.tools) + system + sum(map(len, contents))


def _change_finding(
    difference: Difference, previous: ModelRequest, current: ModelRequest, shared: int
) -> CacheFinding:
    reason = _LAYER_REASONS[difference.layer]
    if difference.layer == "model":
        return CacheFinding(
            reason,
            f"the model changed ({difference.detail}); a cache entry belongs to one model, "
            "so nothing is shared",
        )
    where = f"{difference.label} changed at byte {difference.byte_offset} of its canonical JSON"
    if difference.detail == "request is shorter":
        where = f"the request ends before {difference.label} (history trimmed)"
    excerpt = _excerpt(previous, current, difference)
    return CacheFinding(
        reason,
        f"{where}{excerpt}; only the ~{shared:,} tokens before it can be reused, "
        "and only if an earlier request put a cache breakpoint there",
    )


def _excerpt(previous: ModelRequest, current: ModelRequest, difference: Difference) -> str:
    """Both sides around the first differing byte, for a person to recognize the edit."""
    index = difference.block_index
    old, new = request_blocks(previous), request_blocks(current)
    if index is None or index >= len(old) or index >= len(new):
        return ""
    start = max(difference.byte_offset - _EXCERPT, 0)
    end = difference.byte_offset + _EXCERPT

    def cut(data: bytes) -> str:
        return data[start:end].decode(errors="replace")

    return f" ({cut(old[index].data)!r} -> {cut(new[index].data)!r})"


def _settings_finding(change: Difference) -> CacheFinding:
    return CacheFinding(
        "settings_changed",
        f"request settings {change.detail}, and the unchanged prefix was not read: "
        "the provider keys its cache on them (Anthropic: tool_choice and thinking, "
        "from the messages on)",
    )


def _shortfall_findings(
    expected: int,
    profile: ModelProfile,
    previous: ModelRequest,
    elapsed: float | None,
    cache_ready: bool,
) -> list[CacheFinding]:
    """Why an unchanged prefix was not read.

    A prefix below the minimum settles it: nothing was ever cached, so timing
    cannot have mattered.
    """
    below = _minimum_findings(expected, profile, "the shared prefix")
    if below:
        return below
    findings = [
        finding
        for finding in (_launch_finding(profile, cache_ready), _ttl_finding(previous, elapsed))
        if finding is not None
    ]
    if not findings:
        findings.append(
            CacheFinding(
                "unexplained",
                f"the prefix matched, so ~{expected:,} tokens could have been read: the "
                "provider's cache is best effort (eviction, another replica or routing key, "
                "or a breakpoint placed before the end of the shared prefix)",
            )
        )
    return findings


def _launch_finding(profile: ModelProfile, cache_ready: bool) -> CacheFinding | None:
    if cache_ready:
        return None
    event = "ended" if profile.warmup == "first_response_ends" else "begun"
    return CacheFinding(
        "launched_before_cache",
        f"sent while the request it shares a prefix with was still in flight: "
        f"{profile.provider} makes a cache entry readable only once the first "
        f"response has {event}, so it most likely did not exist yet "
        "(release siblings after the first response, or pre-warm)",
    )


def _ttl_finding(previous: ModelRequest, elapsed: float | None) -> CacheFinding | None:
    ttl = TTL_SECONDS[previous.settings.cache_ttl]
    if elapsed is None or elapsed <= ttl:
        return None
    return CacheFinding(
        "ttl_expired",
        f"{elapsed:,.0f}s passed since the request it extends started; "
        f"a {previous.settings.cache_ttl} cache entry lives {ttl:,.0f}s, so it had expired",
    )


def _minimum_findings(tokens: int, profile: ModelProfile, what: str) -> list[CacheFinding]:
    if tokens >= profile.min_cache_tokens:
        return []
    return [
        CacheFinding(
            "below_minimum",
            f"{what} is ~{tokens:,} tokens, below the minimum of {profile.min_cache_tokens:,} "
            f"this model caches ({profile.provider}): nothing is cached, and no error says so",
        )
    ]


def _provider_findings(diagnosis: Mapping[str, JsonValue] | None) -> list[CacheFinding]:
    if not diagnosis:
        return []
    kind = diagnosis.get("type")
    if not isinstance(kind, str):
        return [CacheFinding("provider_reported", f"the provider reports: {dict(diagnosis)}")]
    text = _PROVIDER_TYPES.get(kind, kind.replace("_", " "))
    missed = diagnosis.get("cache_missed_input_tokens")
    if isinstance(missed, int):
        text += f" ({missed:,} input tokens missed the cache)"
    return [CacheFinding("provider_reported", f"the provider says {text}")]
