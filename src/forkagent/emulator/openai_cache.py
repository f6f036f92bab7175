"""OpenAI's prompt-cache rules, shared by Chat Completions and the Responses API.

Both APIs lay their prompt out as ``Part``s (tools, system, conversation) and
account for it here: OpenAI's automatic prefix cache (1024 tokens, then
128-token steps, routed by ``prompt_cache_key`` and the first 256 tokens) or
its explicit ``prompt_cache_breakpoint`` parts, DashScope for ``qwen*``
(explicit ``cache_control`` blocks or the implicit cache), DeepSeek for
``deepseek*`` (64-token units from token 0).
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from dataclasses import dataclass

from . import tokens
from .cache import (
    Block,
    BlockCache,
    BlockRules,
    CacheResult,
    Layer,
    PrefixCache,
    PrefixRules,
    Segment,
)
from .profiles import CacheSettings, ChatProfile
from .wire import Json, Turn, canonical

OPENAI_RULES = (1024, 128)
OPENAI_EXPLICIT = BlockRules(min_tokens=1024, lookback=1 << 30, max_breakpoints=4)
"""``prompt_cache_breakpoint``: no block lookback limit, at most 4 writes a request."""
DASHSCOPE_EXPLICIT = BlockRules(min_tokens=1024, lookback=20, max_breakpoints=4)
DASHSCOPE_IMPLICIT = (256, 64)
DEEPSEEK_UNIT = 64
ROUTING_TOKENS = 256


@dataclass(frozen=True, slots=True)
class Part:
    """One cacheable content part with its tokens (both engines see the same ones)."""

    layer: Layer
    label: str
    content: bytes
    tokens: tuple[int, ...]
    ttl: str | None


def cache_part(layer: Layer, label: str, payload: Json, text: str, ttl: str | None) -> Part:
    """A part hashed as ``payload`` (block engines) and counted as ``text`` (prefix engines)."""
    return Part(layer, label, canonical(payload), tokens.encode(text), ttl)


class OpenAICaches:
    """The cache engines of the OpenAI-style routes and OpenAI's request routing."""

    def __init__(self, blocks: BlockCache, prefixes: PrefixCache, settings: CacheSettings) -> None:
        self.blocks = blocks
        self.prefixes = prefixes
        self.settings = settings
        self._routes: dict[bytes, deque[float]] = {}
        self._lock = threading.Lock()

    def replica(self, route: bytes, now: float) -> int:
        """Which cache machine a route lands on: overflow past N requests a minute."""
        limit = self.settings.openai_requests_per_minute
        if limit is None:
            return 0
        with self._lock:
            recent = self._routes.setdefault(route, deque())
            while recent and recent[0] <= now - 60.0:
                recent.popleft()
            recent.append(now)
            return (len(recent) - 1) // limit

    def clear(self) -> None:
        with self._lock:
            self._routes.clear()


class OpenAICacheTurn(Turn):
    """A request whose prompt is ``_parts``, accounted by OpenAI's (or a compatible) rules.

    Subclasses set ``_caches``, ``_body``, ``_parts``, ``profile``, ``model``,
    the cache mode and TTL (``_mode``, ``_ttl``) and whether it is explicit.
    """

    profile: ChatProfile
    _caches: OpenAICaches
    _body: Json
    _parts: list[Part]
    _mode: str
    _ttl: str
    _explicit: bool

    def account(self, now: float, writer: int, message_id: str) -> CacheResult:
        if self._explicit and self.profile == "dashscope":
            blocks = [Block(p.layer, p.label, p.content, len(p.tokens), p.ttl) for p in self._parts]
            namespace = f"dashscope\0{self.model}"
            return self._caches.blocks.evaluate(
                namespace, blocks, {}, DASHSCOPE_EXPLICIT, now=now, writer=writer
            )
        segments = [Segment(p.label, p.layer, p.tokens) for p in self._parts]
        if self._explicit:
            namespace = f"openai-explicit\0{self._route(segments, now)}"
            return self._caches.blocks.evaluate(
                namespace, self._breakpoints(), {}, OPENAI_EXPLICIT, now=now, writer=writer
            )
        namespace, rules = self._prefix_rules(segments, now)
        return self._caches.prefixes.evaluate(namespace, segments, rules, now=now, writer=writer)

    def _breakpoints(self) -> list[Block]:
        """OpenAI's blocks: explicit mode writes the latest 4 breakpoints; implicit mode the
        latest 3 and its own at the end of the prompt."""
        ttls = [p.ttl for p in self._parts]
        if self._mode == "implicit":
            explicit = [i for i, ttl in enumerate(ttls) if ttl is not None][-3:]
            ttls = [ttl if i in explicit else None for i, ttl in enumerate(ttls)]
            ttls[-1] = ttls[-1] or self._ttl
        return [
            Block(p.layer, p.label, p.content, len(p.tokens), ttl)
            for p, ttl in zip(self._parts, ttls, strict=True)
        ]

    def _prefix_rules(self, segments: list[Segment], now: float) -> tuple[str, PrefixRules]:
        settings = self._caches.settings
        if self.profile == "deepseek":
            rules = PrefixRules(DEEPSEEK_UNIT, DEEPSEEK_UNIT, settings.deepseek_ttl)
            return f"deepseek\0{self.model}", rules
        if self.profile == "dashscope":
            minimum, unit = DASHSCOPE_IMPLICIT
            return f"dashscope-implicit\0{self.model}", PrefixRules(
                minimum, unit, settings.dashscope_implicit_ttl
            )
        minimum, unit = OPENAI_RULES
        return f"openai\0{self._route(segments, now)}", PrefixRules(
            minimum, unit, self._openai_ttl()
        )

    def _route(self, segments: list[Segment], now: float) -> str:
        """OpenAI's cache machine: model, ``prompt_cache_key`` and the first 256 tokens."""
        head = [t for s in segments for t in s.tokens][:ROUTING_TOKENS]
        key = str(self._body.get("prompt_cache_key") or "")
        route = hashlib.sha256(canonical([self.model, key, head])).digest()
        return f"{self.model}\0{route.hex()}\0{self._caches.replica(route, now)}"

    def _openai_ttl(self) -> float:
        settings = self._caches.settings
        if self._body.get("prompt_cache_retention") == "24h":
            return settings.openai_extended_ttl
        options = self._body.get("prompt_cache_options") or {}
        if isinstance(options, dict) and options.get("ttl") == "30m":
            return max(settings.openai_ttl, 1800.0)
        return settings.openai_ttl
