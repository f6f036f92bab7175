"""Pydantic models made from values that are already valid, on the runtime's hot path.

Every fork makes one request and one last message out of parts that were validated
when they were first made. ``model_construct`` would skip validating them again, but
it still walks every field's aliases and defaults in Python on each call (about 2 us
for a request). A ``trusted`` constructor sets the four attributes ``model_construct``
sets, and nothing else, in a fraction of that. Its tests keep the two equal,
attribute for attribute. ``slot_setters`` does the same for the frozen slots dataclasses
made per fork and per response (events, cache reports, task results).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

# The four attributes' own setters (the models are frozen, so no ``setattr``): each skips the
# name's lookup through the class that ``object.__setattr__``, what pydantic uses, makes.
_SET_DICT, _SET_FIELDS_SET, _SET_EXTRA, _SET_PRIVATE = (
    BaseModel.__dict__[name].__set__
    for name in (
        "__dict__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    )
)


def trusted(cls: type[M]) -> Callable[[dict[str, object], set[str]], M]:
    """A constructor of ``cls`` from ``values`` (every field, in declaration order) and the
    names of the fields the caller set, validating nothing.

    Only for what ``model_construct`` builds with these four attributes alone: a model
    without extra fields, private attributes or a post-init hook (refused otherwise).
    """
    if (
        cls.model_config.get("extra") == "allow"
        or cls.__private_attributes__
        or cls.__pydantic_post_init__ is not None
        or cls.__pydantic_root_model__
    ):
        raise TypeError(f"{cls.__name__} needs pydantic's own model_construct")

    def construct(values: dict[str, object], fields_set: set[str]) -> M:
        model = cls.__new__(cls)
        _SET_DICT(model, values)
        _SET_FIELDS_SET(model, fields_set)
        _SET_EXTRA(model, None)
        _SET_PRIVATE(model, None)
        return model

    return construct


def slot_setters(cls: type) -> list[Callable[[Any, Any], None]]:
    """The slot setters of a frozen slots dataclass's fields, in field order.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; the
    slots' own setters cost under half as much, for the values made on every response and
    every fork (events, reports, results).
    """
    setters: list[Callable[[Any, Any], None]] = [cls.__dict__[f.name].__set__ for f in fields(cls)]
    return setters
