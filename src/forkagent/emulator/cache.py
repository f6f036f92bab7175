"""Prompt-cache engines: block breakpoints (Anthropic, DashScope explicit) and
automatic token prefixes (OpenAI, DeepSeek, DashScope implicit, Gemini).

Both keep their entries in an ``EntryStore``. A request that writes an entry
reserves it *pending*; the entry becomes readable only when the caller
publishes it, at the moment the provider's rule says (the response begins,
the response ends, or some time after). A request that dies before that
abandons its pending entries. Lifetimes are measured from the start of the
request that wrote or last read an entry.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from array import array
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import add
from typing import Literal, TypeAlias, overload

from .log import BreakpointOutcome, MissReason
from .memo import Memo

Layer: TypeAlias = Literal["tools", "system", "messages"]
Probe: TypeAlias = Literal["hit", "pending", "expired", "absent"]

LAYERS: tuple[Layer, ...] = ("tools", "system", "messages")
TTL_SECONDS: Mapping[str, float] = {"5m": 300.0, "30m": 1800.0, "1h": 3600.0, "12h": 43200.0}
PREFIX_WRITE = "default"
"""The TTL name under which automatic prefix caches report what they wrote."""


def digest(*parts: bytes) -> bytes:
    """16-byte BLAKE2b of the parts run together (one C call: this runs once per block)."""
    return hashlib.blake2b(b"".join(parts), digest_size=16).digest()


@dataclass(slots=True)
class _Entry:
    ttl: float
    expires_at: float
    visible_at: float | None
    writers: set[int]


class EntryStore:
    """Cache entries by key, with pending writes and TTLs; thread-safe."""

    _PURGE_EVERY = 4096

    def __init__(self) -> None:
        self._entries: dict[bytes, _Entry] = {}
        self._pending: dict[int, list[bytes]] = {}
        self._lock = threading.RLock()
        self._writes = 0

    def probe(self, key: bytes, now: float) -> Probe:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return "absent"
            if now >= entry.expires_at:
                return "expired"
            if entry.visible_at is None or entry.visible_at > now:
                return "pending"
            return "hit"

    def read(self, key: bytes, now: float, ttl: float) -> None:
        """Refresh an entry's lifetime from ``now`` (reads are free refreshes)."""
        with self._lock:
            entry = self._entries[key]
            entry.ttl = max(entry.ttl, ttl)
            entry.expires_at = max(entry.expires_at, now + entry.ttl)

    def write(self, key: bytes, now: float, ttl: float, writer: int) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or now >= entry.expires_at:
                self._entries[key] = _Entry(ttl, now + ttl, None, {writer})
            else:
                entry.writers.add(writer)
                entry.ttl = max(entry.ttl, ttl)
                entry.expires_at = max(entry.expires_at, now + ttl)
            self._pending.setdefault(writer, []).append(key)
            self._writes += 1
            if self._writes % self._PURGE_EVERY == 0:
                self._purge(now)

    def publish(self, writer: int, at: float) -> None:
        """Make ``writer``'s entries readable from time ``at`` on."""
        with self._lock:
            for _, entry in self._release(writer):
                if entry.visible_at is None or entry.visible_at > at:
                    entry.visible_at = at

    def abandon(self, writer: int) -> None:
        """Drop ``writer``'s pending entries that nobody else is writing."""
        with self._lock:
            for key, entry in self._release(writer):
                if entry.visible_at is None and not entry.writers:
                    del self._entries[key]

    def _release(self, writer: int) -> Iterator[tuple[bytes, _Entry]]:
        """``writer``'s pending entries that still exist, ``writer`` no longer among their writers.

        Call with the lock held.
        """
        for key in self._pending.pop(writer, ()):
            entry = self._entries.get(key)
            if entry is not None:
                entry.writers.discard(writer)
                yield key, entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._pending.clear()

    def _purge(self, now: float) -> None:
        expired = [k for k, e in self._entries.items() if now >= e.expires_at and not e.writers]
        for key in expired:
            del self._entries[key]


class _SeenIndex:
    """Every prefix key any request of a namespace has sent: explains misses."""

    def __init__(self) -> None:
        self._keys: set[bytes] = set()
        self._namespaces: set[bytes] = set()
        self._chains: weakref.WeakSet[_Chain] = weakref.WeakSet()
        """Known stretches whose keys are all in ``_keys`` already."""
        self._lock = threading.Lock()

    def first_unseen(self, keys: Sequence[bytes], upto: int) -> int | None:
        """The first of ``keys[:upto + 1]`` no request sent, found by bisection.

        Each key is a running hash of the whole prompt up to it, and a request adds all
        its keys, so a key seen means every key before it was seen too.
        """
        low, high = 0, upto + 1
        with self._lock:
            while low < high:
                middle = (low + high) // 2
                if keys[middle] in self._keys:
                    low = middle + 1
                else:
                    high = middle
        return low if low <= upto else None

    def is_cold(self, namespace: bytes) -> bool:
        with self._lock:
            return namespace not in self._namespaces

    def add(self, prefixes: _Prefixes) -> None:
        """Note every key of ``prefixes``; a known stretch's keys only the first time, so a
        child of a reply with N tool calls adds its own few keys, not the family's 2N."""
        with self._lock:
            self._namespaces.add(prefixes.namespace)
            keys, done = prefixes.keys, 0
            for start, chain in prefixes.chains:
                self._keys.update(keys[done:start])
                if chain not in self._chains:
                    self._keys.update(chain.keys)
                    self._chains.add(chain)
                done = start + len(chain.keys)
            self._keys.update(keys[done:] if done else keys)

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()
            self._namespaces.clear()
            self._chains.clear()


@dataclass(frozen=True, slots=True)
class _Prefixes:
    """Running keys of a prompt at its candidate positions, with their labels."""

    namespace: bytes
    keys: Sequence[bytes]
    tokens: Sequence[int]
    """Prefix tokens up to and including each position."""
    labels: Sequence[str]
    chains: Sequence[tuple[int, _Chain]] = ()
    """Where ``keys`` holds the keys of a known stretch, taken from the memo."""


@dataclass(frozen=True, slots=True)
class CacheResult:
    """What the cache did for one request."""

    total_tokens: int
    read_tokens: int = 0
    written: Mapping[str, int] = field(default_factory=dict)
    """Tokens written, by TTL name."""
    cached_prefix_tokens: int = 0
    """Tokens up to the last breakpoint that could be cached (Anthropic's ``input_tokens`` boundary)."""
    outcomes: tuple[BreakpointOutcome, ...] = ()

    @property
    def written_tokens(self) -> int:
        return sum(self.written.values())

    @property
    def uncached_tokens(self) -> int:
        return self.total_tokens - self.read_tokens - self.written_tokens


class _Engine:
    def __init__(self) -> None:
        self.store = EntryStore()
        self.seen = _SeenIndex()

    def clear(self) -> None:
        self.store.clear()
        self.seen.clear()

    def _reason(
        self,
        prefixes: _Prefixes,
        window: range,
        position: int,
        read: int,
        now: float,
    ) -> tuple[MissReason | None, str | None]:
        """Why position ``position`` was read only up to ``read`` (-1: nothing)."""
        above = [p for p in window if p > read]
        probes = {self.store.probe(prefixes.keys[p], now) for p in above}
        if "pending" in probes:
            return "not_yet_visible", None
        if "expired" in probes:
            return "expired", None
        below = range(read + 1, window.start)
        if any(self.store.probe(prefixes.keys[p], now) == "hit" for p in below):
            return "beyond_lookback", None
        if self.seen.is_cold(prefixes.namespace):
            return "cold", None
        unseen = self.seen.first_unseen(prefixes.keys, position)
        if unseen is None:
            return "not_written", None
        if unseen == read + 1 and unseen > 0:
            return None, None
        return "prefix_changed", prefixes.labels[unseen]


@dataclass(frozen=True, slots=True)
class Block:
    """One cacheable block of a prompt, as its provider hashes it."""

    layer: Layer
    label: str
    content: bytes
    """Canonical bytes of the block without its ``cache_control`` marker."""
    tokens: int
    ttl: str | None = None
    """The TTL name of the breakpoint on this block, if it carries one."""


@dataclass(frozen=True, slots=True)
class Run:
    """Blocks ``start`` to ``stop`` of a prompt, all of one layer, known by ``key``: the
    content they were made from (a long message's head)."""

    start: int
    stop: int
    key: Hashable


@dataclass(frozen=True, slots=True)
class BlockRules:
    min_tokens: int
    lookback: int = 20
    max_breakpoints: int = 4
    """Only the last this many breakpoints count (callers reject more where the API does)."""


class BlockCache(_Engine):
    """Explicit breakpoints over a running hash of blocks (Anthropic's model).

    ``seeds`` are mixed into the running hash on entering a layer, so a
    change in them invalidates that layer and everything after it (Anthropic:
    ``tool_choice``, thinking and images at the messages level).
    """

    def evaluate(
        self,
        namespace: str,
        blocks: Sequence[Block],
        seeds: Mapping[Layer, bytes],
        rules: BlockRules,
        *,
        now: float,
        writer: int,
        extra_tokens: int = 0,
        marks: Sequence[int] | None = None,
        runs: Sequence[Run] = (),
    ) -> CacheResult:
        """``marks``: the blocks with a TTL, if the caller knows them; ``runs``: stretches of
        blocks whose running keys are taken from an earlier prompt with the same stretch."""
        prefixes = self._prefixes(namespace, blocks, seeds, runs)
        total = (prefixes.tokens[-1] if blocks else 0) + extra_tokens
        if marks is None:
            marks = [i for i, b in enumerate(blocks) if b.ttl is not None]
        marks = marks[-rules.max_breakpoints :]
        hits = {i: self._lookup(prefixes, i, rules, now) for i in marks}
        read = max(hits.values(), default=-1)
        outcomes: list[BreakpointOutcome] = []
        written: dict[str, int] = {}
        covered = prefixes.tokens[read] if read >= 0 else 0
        cached_end = 0
        writes: list[tuple[bytes, float]] = []
        for i in marks:
            ttl_name = blocks[i].ttl or "5m"
            prefix = prefixes.tokens[i]
            window = range(max(0, i - rules.lookback + 1), i + 1)
            outcome_read, wrote = min(prefix, covered), 0
            reason: MissReason | None = None
            changed: str | None = None
            if prefix < rules.min_tokens:
                outcome_read, reason = 0, "below_minimum"
            else:
                cached_end = prefix
                if hits[i] >= 0:
                    self.store.read(prefixes.keys[hits[i]], now, TTL_SECONDS[ttl_name])
                if i > read:
                    wrote = prefix - covered - sum(written.values())
                    written[ttl_name] = written.get(ttl_name, 0) + wrote
                    writes.append((prefixes.keys[i], TTL_SECONDS[ttl_name]))
                    reason, changed = self._reason(prefixes, window, i, read, now)
            outcomes.append(
                BreakpointOutcome(
                    position=i,
                    label=blocks[i].label,
                    layer=blocks[i].layer,
                    ttl=ttl_name,
                    prefix_tokens=prefix,
                    read_tokens=outcome_read,
                    written_tokens=wrote,
                    reason=reason,
                    changed_at=changed,
                )
            )
        for key, ttl in writes:
            self.store.write(key, now, ttl, writer)
        self.seen.add(prefixes)
        return CacheResult(
            total_tokens=total,
            read_tokens=covered,
            written=written,
            cached_prefix_tokens=cached_end,
            outcomes=tuple(outcomes),
        )

    def layer_keys(
        self, namespace: str, blocks: Sequence[Block], seeds: Mapping[Layer, bytes]
    ) -> Sequence[bytes]:
        return self._prefixes(namespace, blocks, seeds).keys

    def _lookup(self, prefixes: _Prefixes, position: int, rules: BlockRules, now: float) -> int:
        """The latest hit within the lookback window of a breakpoint, or -1."""
        if prefixes.tokens[position] < rules.min_tokens:
            return -1
        stop = max(-1, position - rules.lookback)
        for p in range(position, stop, -1):
            if self.store.probe(prefixes.keys[p], now) == "hit":
                return p
        return -1

    @staticmethod
    def _prefixes(
        namespace: str,
        blocks: Sequence[Block],
        seeds: Mapping[Layer, bytes],
        runs: Sequence[Run] = (),
    ) -> _Prefixes:
        ns = digest(b"blocks\0", namespace.encode())
        running, level, layer = ns, -1, None
        keys: list[bytes] = []
        tokens: list[int] = []
        chains: list[tuple[int, _Chain]] = []
        total = 0
        blake2b = hashlib.blake2b
        known = {run.start: run for run in runs}
        position = 0
        while position < len(blocks):
            block = blocks[position]
            run = known.get(position)
            if run is not None and block.layer == layer:
                # A known stretch inside a layer: its keys from the memo, O(1) Python work.
                chain = _chain(running, blocks, run)
                chains.append((len(keys), chain))
                keys += chain.keys
                tokens += chain.tokens_after(total)
                running, total, position = chain.keys[-1], total + chain.tokens[-1], run.stop
                continue
            if block.layer != layer:
                # Entering a later layer mixes in the seeds of every layer up to it.
                layer = block.layer
                entering = LAYERS.index(layer)
                mixed = b"".join(seeds.get(LAYERS[n], b"") for n in range(level + 1, entering + 1))
                level = max(level, entering)
                running = blake2b(running + mixed + block.content, digest_size=16).digest()
            else:
                running = blake2b(running + block.content, digest_size=16).digest()
            total += block.tokens
            keys.append(running)
            tokens.append(total)
            position += 1
        return _Prefixes(ns, keys, tokens, _Labels(blocks), chains)


def chained(start: bytes, blocks: Sequence[Block], first: int, runs: Sequence[Run]) -> bytes:
    """The running key of ``blocks[first:]`` from ``start``, without layers or seeds: the
    known ``runs`` that fit take their keys from the memo, so the cost is O(other blocks)."""
    known = {run.start: run for run in runs if run.stop <= len(blocks)}
    running, position = start, first
    while position < len(blocks):
        run = known.get(position)
        if run is not None:
            running, position = _chain(running, blocks, run).keys[-1], run.stop
        else:
            running = hashlib.blake2b(running + blocks[position].content, digest_size=16).digest()
            position += 1
    return running


@dataclass(slots=True, eq=False, weakref_slot=True)
class _Chain:
    keys: tuple[bytes, ...]
    """The running key after each block of the stretch."""
    tokens: tuple[int, ...]
    """The stretch's tokens up to and including each block."""
    _shifted: tuple[int, tuple[int, ...]] | None = None
    """The last ``total`` asked for and its counts: siblings start the stretch alike."""

    def tokens_after(self, total: int) -> tuple[int, ...]:
        """The prompt's tokens up to each block, when ``total`` tokens come before the stretch."""
        shifted = self._shifted
        if shifted is None or shifted[0] != total:
            shifted = self._shifted = (total, tuple(map(add, self.tokens, repeat(total))))
        return shifted[1]


_CHAINS: Memo[_Chain] = Memo()
"""Running keys of a known stretch of blocks, by the key before it and the stretch's content:
the N children of a reply with N tool calls share the parent's reply and N placeholder results,
so each child hashes only its own blocks (the hashes are the same as block by block)."""


def _chain(before: bytes, blocks: Sequence[Block], run: Run) -> _Chain:
    found = _CHAINS.find((before, run.key))
    if found is not None:
        return found
    keys: list[bytes] = []
    tokens: list[int] = []
    running, total = before, 0
    for block in blocks[run.start : run.stop]:
        running = hashlib.blake2b(running + block.content, digest_size=16).digest()
        total += block.tokens
        keys.append(running)
        tokens.append(total)
    chain = _Chain(tuple(keys), tuple(tokens))
    _CHAINS.keep((before, run.key), _CHAIN_BYTES * len(keys), chain)
    return chain


_CHAIN_BYTES = 160
"""What a stretch's chain holds per block, about: a key, a count, and its share of the
stretch's content key (its pickle)."""


class _Labels(Sequence[str]):
    """The blocks' labels, read only for the few positions a miss is explained at."""

    def __init__(self, blocks: Sequence[Block]) -> None:
        self._blocks = blocks

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [b.label for b in self._blocks[index]]
        return self._blocks[index].label

    def __len__(self) -> int:
        return len(self._blocks)


@dataclass(frozen=True, slots=True)
class PrefixRules:
    """Automatic caching of token prefixes in fixed units, from ``min_tokens`` on."""

    min_tokens: int
    unit: int
    ttl: float


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of the prompt's tokens with a label for the log (``messages[2]``)."""

    label: str
    layer: str
    tokens: tuple[int, ...]


class PrefixCache(_Engine):
    """Automatic prefix caching: every unit boundary of a prompt is an entry."""

    def evaluate(
        self,
        namespace: str,
        segments: Sequence[Segment],
        rules: PrefixRules,
        *,
        now: float,
        writer: int,
    ) -> CacheResult:
        prefixes = self._prefixes(namespace, segments, rules)
        total = sum(len(s.tokens) for s in segments)
        if not prefixes.keys:
            outcome = BreakpointOutcome(
                position=total,
                label="prefix",
                layer=None,
                ttl=None,
                prefix_tokens=total,
                read_tokens=0,
                written_tokens=0,
                reason="below_minimum",
            )
            return CacheResult(total_tokens=total, outcomes=(outcome,))
        last = len(prefixes.keys) - 1
        read = next(
            (p for p in range(last, -1, -1) if self.store.probe(prefixes.keys[p], now) == "hit"),
            -1,
        )
        for p in range(read + 1):
            self.store.read(prefixes.keys[p], now, rules.ttl)
        reason, changed = (None, None)
        if read < last:
            reason, changed = self._reason(prefixes, range(last + 1), last, read, now)
        for p in range(read + 1, last + 1):
            self.store.write(prefixes.keys[p], now, rules.ttl, writer)
        read_tokens = prefixes.tokens[read] if read >= 0 else 0
        written = prefixes.tokens[last] - read_tokens
        self.seen.add(prefixes)
        outcome = BreakpointOutcome(
            position=total,
            label="prefix",
            layer=None,
            ttl=None,
            prefix_tokens=prefixes.tokens[last],
            read_tokens=read_tokens,
            written_tokens=written,
            reason=reason,
            changed_at=changed,
        )
        return CacheResult(
            total_tokens=total,
            read_tokens=read_tokens,
            written={PREFIX_WRITE: written} if written else {},
            cached_prefix_tokens=prefixes.tokens[last],
            outcomes=(outcome,),
        )

    @staticmethod
    def _prefixes(namespace: str, segments: Sequence[Segment], rules: PrefixRules) -> _Prefixes:
        ns = digest(b"prefix\0", namespace.encode())
        flat: list[int] = []
        owners: list[int] = []
        for index, segment in enumerate(segments):
            flat.extend(segment.tokens)
            owners.extend([index] * len(segment.tokens))
        data = array("I", flat).tobytes()
        running = hashlib.blake2b(ns, digest_size=16)
        first = -(-rules.min_tokens // rules.unit) * rules.unit
        keys: list[bytes] = []
        ends: list[int] = []
        start = 0
        for end in range(max(first, rules.unit), len(flat) + 1, rules.unit):
            running.update(data[start * 4 : end * 4])
            keys.append(running.copy().digest())
            ends.append(end)
            start = end
        owner = [segments[owners[end - 1]] for end in ends]
        return _Prefixes(
            namespace=ns,
            keys=keys,
            tokens=ends,
            labels=[f"{s.label} (token {end})" for s, end in zip(owner, ends, strict=True)],
        )
