"""A small declarative request schema and its checker, shared by the three wires.

Each wire module describes its request body with these specs (after the
official SDK's request types) and turns the first ``SchemaError`` into its
provider's own error shape. Only the structure is checked here: field names,
required fields, JSON types, ranges and enumerations; the rules that relate
fields to each other live with each wire.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .memo import HEAD_MIN_ITEMS, Memo, content_key, head_key

Path: TypeAlias = tuple[str | int, ...]
Json: TypeAlias = dict[str, Any]
Problem: TypeAlias = Literal[
    "unknown_field", "missing", "type", "tag", "enum", "below_min", "above_max", "too_short"
]
JsonKind: TypeAlias = Literal["string", "integer", "number", "boolean", "object", "array", "null"]


class SchemaError(Exception):
    """The first place a body breaks its schema."""

    def __init__(
        self, path: Path, problem: Problem, message: str, value: Any = None, bound: Any = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.problem = problem
        self.message = message
        """Pydantic-style, as Anthropic words it; the other wires reword it from the fields."""
        self.value = value
        self.bound = bound
        """The limit, the allowed values, or the expected JSON kinds."""


@dataclass(frozen=True, slots=True)
class Value:
    """A JSON scalar (or any JSON value of the given kinds), optionally bounded."""

    kinds: tuple[JsonKind, ...]
    choices: tuple[object, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None


@dataclass(frozen=True, slots=True)
class Obj:
    """An object with known fields; ``open`` objects take any other field too."""

    fields: Mapping[str, Spec]
    required: frozenset[str] = frozenset()
    open: bool = False


@dataclass(frozen=True, slots=True)
class Tagged:
    """A union told apart by one field (``type`` on most wires)."""

    variants: Mapping[str, Spec]
    tag: str = "type"
    default: str | None = None
    """The variant of an object without the tag, if the API has one."""


@dataclass(frozen=True, slots=True)
class OneOf:
    """Either of a few specs, picked by the JSON kind of the value."""

    options: tuple[Spec, ...]


@dataclass(frozen=True, slots=True)
class ListOf:
    item: Spec
    min_items: int = 0
    max_items: int | None = None


@dataclass(frozen=True, slots=True)
class MapOf:
    """An object whose keys are the caller's own (``metadata``, ``logit_bias``)."""

    value: Spec


Spec: TypeAlias = Value | Obj | Tagged | OneOf | ListOf | MapOf

ANY = Value(("string", "integer", "number", "boolean", "object", "array", "null"))
STRING = Value(("string",))
INTEGER = Value(("integer",))
NUMBER = Value(("number",))
BOOLEAN = Value(("boolean",))
OBJECT = Value(("object",))
"""Any object, kept as the caller's own (a JSON schema, a tool's input)."""


def number(minimum: float | None = None, maximum: float | None = None) -> Value:
    return Value(("number",), minimum=minimum, maximum=maximum)


def integer(minimum: float | None = None, maximum: float | None = None) -> Value:
    return Value(("integer",), minimum=minimum, maximum=maximum)


def enum(*choices: str) -> Value:
    return Value(("string",), choices=choices)


def obj(required: str = "", *, open: bool = False, **fields: Spec) -> Obj:
    """An object spec; ``required`` names its required fields, space separated."""
    return Obj(fields, frozenset(required.split()), open)


def nullable(spec: Spec) -> OneOf:
    return OneOf((spec, Value(("null",))))


def json_kind(value: Any) -> JsonKind:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def check_or(value: Any, spec: Spec, reword: Callable[[SchemaError], Exception]) -> None:
    """``check``, raising the wire's own error for a ``SchemaError``."""
    try:
        check(value, spec)
    except SchemaError as error:
        raise reword(error) from None


def check(value: Any, spec: Spec) -> None:
    """Raise ``SchemaError`` at the first part of ``value`` that ``spec`` does not allow.

    The error's path is built as it unwinds, so a valid body (nearly every one) allocates
    no path at all: long conversations are checked at a few microseconds a block.
    """
    if isinstance(spec, Value):
        _check_value(value, spec)
    elif isinstance(spec, Obj):
        _check_object(value, spec)
    elif isinstance(spec, Tagged):
        _check_tagged(value, spec)
    elif isinstance(spec, OneOf):
        _check_one_of(value, spec)
    elif isinstance(spec, ListOf):
        _check_list(value, spec)
    else:
        _expect(value, "object")
        for key, item in value.items():
            _check_at(key, item, spec.value)


def _check_at(key: str | int, value: Any, spec: Spec) -> None:
    """``check`` of a member: a failure's path gains ``key`` in front."""
    try:
        check(value, spec)
    except SchemaError as error:
        error.path = (key, *error.path)
        raise


def _expect(value: Any, kind: JsonKind) -> None:
    if not _is(value, kind):
        raise SchemaError((), "type", f"Input should be a valid {_NAMES[kind]}", value, (kind,))


def _is(value: Any, kind: JsonKind) -> bool:
    actual = json_kind(value)
    return actual == kind or (kind == "number" and actual == "integer")


_NAMES: Mapping[JsonKind, str] = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "object": "dictionary",
    "array": "list",
    "null": "null",
}


def _check_value(value: Any, spec: Value) -> None:
    kind = json_kind(value)
    if kind not in spec.kinds and not (kind == "integer" and "number" in spec.kinds):
        names = " or ".join(_NAMES[k] for k in spec.kinds)
        raise SchemaError((), "type", f"Input should be a valid {names}", value, spec.kinds)
    if spec.choices and value not in spec.choices:
        listed = ", ".join(repr(c) for c in spec.choices)
        raise SchemaError((), "enum", f"Input should be {listed}", value, spec.choices)
    if spec.minimum is not None and value < spec.minimum:
        message = f"Input should be greater than or equal to {spec.minimum:g}"
        raise SchemaError((), "below_min", message, value, spec.minimum)
    if spec.maximum is not None and value > spec.maximum:
        message = f"Input should be less than or equal to {spec.maximum:g}"
        raise SchemaError((), "above_max", message, value, spec.maximum)
    if spec.min_length is not None and len(value) < spec.min_length:
        message = f"String should have at least {spec.min_length} character(s)"
        raise SchemaError((), "too_short", message, value, spec.min_length)


def _check_object(value: Any, spec: Obj, tag: str | None = None) -> None:
    """``tag``: the discriminator a ``Tagged`` union already read, allowed as a string."""
    _expect(value, "object")
    for key in spec.required - value.keys():
        raise SchemaError((key,), "missing", "Field required")
    fields = spec.fields
    for key, item in value.items():
        inner = fields.get(key)
        if inner is None:
            if key == tag:
                inner = STRING
            elif spec.open:
                continue
            else:
                message = "Extra inputs are not permitted"
                raise SchemaError((key,), "unknown_field", message, item)
        _check_at(key, item, inner)


def _check_tagged(value: Any, spec: Tagged) -> None:
    _expect(value, "object")
    tag = value.get(spec.tag, spec.default)
    if tag is None:
        message = f"Unable to extract tag using discriminator '{spec.tag}'"
        raise SchemaError((spec.tag,), "missing", message)
    variant = spec.variants.get(tag) if isinstance(tag, str) else None
    if variant is None:
        expected = ", ".join(f"'{t}'" for t in spec.variants)
        raise SchemaError(
            (spec.tag,),
            "tag",
            f"Input tag '{tag}' found using '{spec.tag}' does not match any of the expected "
            f"tags: {expected}",
            tag,
            tuple(spec.variants),
        )
    if isinstance(variant, Obj):
        _check_object(value, variant, spec.tag)
    else:
        check(value, variant)


def _check_one_of(value: Any, spec: OneOf) -> None:
    for option in spec.options:
        if _accepts_kind(option, json_kind(value)):
            check(value, option)
            return
    names = sorted({_NAMES[k] for option in spec.options for k in _kinds(option)})
    kinds = tuple(k for option in spec.options for k in _kinds(option))
    raise SchemaError((), "type", f"Input should be a valid {' or '.join(names)}", value, kinds)


def _kinds(spec: Spec) -> tuple[JsonKind, ...]:
    if isinstance(spec, Value):
        return spec.kinds
    if isinstance(spec, ListOf):
        return ("array",)
    if isinstance(spec, OneOf):
        return tuple(k for option in spec.options for k in _kinds(option))
    return ("object",)


def _accepts_kind(spec: Spec, kind: JsonKind) -> bool:
    kinds = _kinds(spec)
    return kind in kinds or (kind == "integer" and "number" in kinds)


def _check_list(value: Any, spec: ListOf) -> None:
    """A list longer than ``HEAD_MIN_ITEMS`` is checked from its last item when the items
    before it were found valid together before: a conversation's history, a child's
    placeholders."""
    _expect(value, "array")
    if len(value) < spec.min_items:
        message = f"List should have at least {spec.min_items} item(s)"
        raise SchemaError((), "too_short", message, value, spec.min_items)
    if spec.max_items is not None and len(value) > spec.max_items:
        message = f"List should have at most {spec.max_items} item(s)"
        raise SchemaError((), "above_max", message, len(value), spec.max_items)
    item_spec = spec.item
    head = (id(item_spec), "head", head_key(value)) if len(value) > HEAD_MIN_ITEMS else None
    start = 0 if head is None or _VALID.find(head) is None else len(value) - 1
    for i in range(start, len(value)):
        item = value[i]
        if type(item) is dict:
            _check_object_item(i, item, item_spec)
        else:
            _check_at(i, item, item_spec)
    if head is not None and start == 0:
        _VALID.keep(head, len(head[2]), item_spec)


_VALID: Memo[Spec] = Memo()
"""Objects already found valid, by spec and content: a long conversation's blocks, and the
messages a fork family repeats, are checked once, not on every request that repeats them.
Holding the spec keeps its id from being reused."""


def _check_object_item(index: int, item: Json, spec: Spec) -> None:
    """``_check_at`` of an object in a list, skipped for content already found valid.

    An object holding a long list (a message of many blocks) is checked field by field
    instead: its list is remembered by its head, and keying the whole object would cost
    one more pass over all of it.
    """
    if any(type(v) is list and len(v) > HEAD_MIN_ITEMS for v in item.values()):
        _check_at(index, item, spec)
        return
    text = content_key(item)
    if _VALID.find((id(spec), text)) is None:
        _check_at(index, item, spec)
        _VALID.keep((id(spec), text), len(text), spec)
