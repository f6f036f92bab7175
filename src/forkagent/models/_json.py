"""Reading providers' JSON without trusting its shape, and writing tool arguments stably."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..messages import JsonValue


def as_dict(value: JsonValue) -> dict[str, JsonValue]:
    return value if isinstance(value, dict) else {}


def as_list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def as_int(value: JsonValue) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def as_str(value: JsonValue) -> str:
    return value if isinstance(value, str) else ""


def get_int(data: Mapping[str, JsonValue], *path: str) -> int:
    """An integer at ``data[path[0]][path[1]]...``; 0 when any step is missing."""
    value: JsonValue = data
    for key in path:
        value = as_dict(value).get(key)
    return as_int(value)


def compact(value: JsonValue) -> str:
    """Compact JSON that keeps key order: the stable text of tool arguments."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def parse_arguments(text: str) -> tuple[dict[str, JsonValue], str | None]:
    """Tool arguments as a dict (key order kept), plus the raw text when it is not a JSON object."""
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except ValueError:
        return {}, text
    return (value, None) if isinstance(value, dict) else ({}, text)
