"""A deterministic example value for a JSON schema: what a forced tool call or a
structured-output reply of the emulator contains.

It covers what the providers' structured-output and tool schemas use: types
(lower case, or Gemini's upper-case OpenAPI names), ``properties`` and
``required``, ``items`` with ``minItems``, ``enum``/``const``, ``anyOf``/``oneOf``/
``allOf``, local ``$ref`` (``#/$defs/...``, ``#/definitions/...``), ``nullable``,
bounds of numbers and lengths of strings, and the usual string ``format``\\s.
A ``pattern`` is not solved: the value then only meets the other constraints.
Every property is filled, as strict mode requires them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MAX_DEPTH = 6
"""Recursive schemas stop here: deeper objects get their required properties only."""
_FORMATS = {
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00Z",
    "email": "someone@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
    "hostname": "example.com",
}


def sample(schema: Mapping[str, Any]) -> Any:
    """A value valid against ``schema`` (patterns aside)."""
    return _Sampler(schema).value(schema, "value", 0)


def sample_object(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's input: an object even for an empty or non-object schema."""
    value = sample(schema)
    return value if isinstance(value, dict) else {}


class _Sampler:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self._root = root

    def value(self, schema: Any, name: str, depth: int) -> Any:
        if not isinstance(schema, Mapping):
            return name
        schema = self._resolved(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if options := schema.get(key):
                usable = [o for o in options if _kind(self._resolved(o)) != "null"] or options
                return self.value({**_without(schema, key), **usable[0]}, name, depth)
        if parts := schema.get("allOf"):
            merged = dict(_without(schema, "allOf"))
            for part in parts:
                merged = _merge(merged, self._resolved(part))
            return self.value(merged, name, depth)
        return self._typed(schema, _kind(schema), name, depth)

    def _typed(self, schema: Mapping[str, Any], kind: str | None, name: str, depth: int) -> Any:
        if kind == "object" or (kind is None and "properties" in schema):
            return self._object(schema, depth)
        if kind == "array" or (kind is None and "items" in schema):
            return self._array(schema, name, depth)
        if kind in ("integer", "number"):
            return _number(schema, integer=kind == "integer")
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        return _string(schema, name)

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        keep = [k for k in properties if depth < _MAX_DEPTH or k in required]
        return {k: self.value(properties[k], k, depth + 1) for k in keep}

    def _array(self, schema: Mapping[str, Any], name: str, depth: int) -> list[Any]:
        wanted = int(schema.get("minItems") or 0)
        if depth < _MAX_DEPTH and schema.get("maxItems", 1) >= 1:
            wanted = max(wanted, 1)
        item = schema.get("items") or {}
        return [self.value(item, name, depth + 1) for _ in range(wanted)]

    def _resolved(self, schema: Any) -> Mapping[str, Any]:
        """The schema a local ``$ref`` points at (with the referring schema's other keys)."""
        resolved: Mapping[str, Any] = schema if isinstance(schema, Mapping) else {}
        seen: set[str] = set()
        while isinstance(ref := resolved.get("$ref"), str) and ref not in seen:
            seen.add(ref)
            target: Any = self._root
            for part in ref.removeprefix("#/").split("/") if ref != "#" else []:
                target = target.get(part, {}) if isinstance(target, Mapping) else {}
            found = target if isinstance(target, Mapping) else {}
            resolved = {**_without(resolved, "$ref"), **found}
        return resolved


def _kind(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [str(k).lower() for k in kind]
        kind = next((k for k in kinds if k != "null"), kinds[0] if kinds else None)
    return str(kind).lower() if kind is not None else None


def _without(schema: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def _merge(left: Mapping[str, Any], right: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**left, **right}
    if "properties" in left and "properties" in right:
        merged["properties"] = {**left["properties"], **right["properties"]}
    if "required" in left and "required" in right:
        merged["required"] = [*left["required"], *right["required"]]
    return merged


def _number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    low = schema.get("minimum")
    if (above := schema.get("exclusiveMinimum")) is not None and not isinstance(above, bool):
        low = above + (1 if integer else 0.5)
    high = schema.get("maximum")
    if (below := schema.get("exclusiveMaximum")) is not None and not isinstance(below, bool):
        high = below - (1 if integer else 0.5)
    value = low if low is not None else min(1, high) if high is not None else 1
    if step := schema.get("multipleOf"):
        value = -(-value // step) * step
    return int(value) if integer else float(value)


def _string(schema: Mapping[str, Any], name: str) -> str:
    if (fixed := _FORMATS.get(str(schema.get("format")))) is not None:
        return fixed
    text = name
    shortest, longest = schema.get("minLength"), schema.get("maxLength")
    if shortest is not None and len(text) < shortest:
        text = (text + "x" * shortest)[:shortest]
    if longest is not None:
        text = text[:longest]
    return text
