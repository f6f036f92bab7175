"""Structured output: the final answer as a validated object, and what to say when it is not.

An agent with its own tool array (the main agent, a named agent) hands its
answer in by calling the ``final_result`` tool, whose input schema is the
output type's JSON schema: providers constrain tool arguments better than
prose. Its spec is part of the agent's tool array from the first request, so
it never moves a cached prefix. A fork cannot add a tool (its tool array is
its parent's, byte for byte, or the cache is lost), so a fork asked for an
output type gets the schema in its directive, the per-child part after the
shared prefix, and answers with a JSON object as its final text. Either way
an answer that does not validate goes back to the model with the errors,
``retries`` times, before the agent fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from ..messages import JsonValue
from ..requests import ToolSpec

OUTPUT_TOOL = "final_result"
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class OutputInvalid(Exception):
    """The model's answer did not match the output type; the message says how, for the model."""


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """How one agent's final answer is checked."""

    output_type: Any
    adapter: TypeAdapter[Any]
    schema: dict[str, JsonValue]
    wrapped: bool
    """A schema that is not an object is sent as ``{"result": <schema>}``: tool inputs are objects."""
    mode: Literal["tool", "text"]
    retries: int

    @classmethod
    def of(cls, output_type: Any, *, mode: Literal["tool", "text"], retries: int) -> OutputSpec:
        if retries < 0:
            raise ValueError("output_retries cannot be negative")
        adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        schema: dict[str, JsonValue] = adapter.json_schema()
        wrapped = schema.get("type") != "object"
        if wrapped:
            schema = {
                "type": "object",
                "properties": {"result": schema},
                "required": ["result"],
            }
        return cls(output_type, adapter, schema, wrapped, mode, retries)

    def tool_spec(self) -> ToolSpec:
        return ToolSpec(
            name=OUTPUT_TOOL,
            description=(
                "Hand in your final answer. Call this once, when the work is done, with "
                "arguments that match the schema; the run ends when the answer is valid."
            ),
            input_schema=self.schema,
        )

    def instructions(self) -> str:
        """What a fork's directive adds: answer with one JSON object of this schema."""
        return (
            "When you are done, reply with only a JSON object (no prose, no code fence) "
            f"that matches this JSON schema:\n{json.dumps(self.schema, sort_keys=True)}"
        )

    def from_arguments(self, arguments: Mapping[str, JsonValue]) -> object:
        """The validated answer from ``final_result``'s arguments."""
        data: object = arguments.get("result") if self.wrapped else dict(arguments)
        return self._validate(data)

    def from_text(self, text: str) -> object:
        """The validated answer from a final text that should be one JSON object."""
        body = text.strip()
        if fenced := _FENCE.match(body):
            body = fenced.group(1)
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            raise OutputInvalid(f"the reply is not JSON ({exc.msg} at char {exc.pos})") from None
        if self.wrapped and isinstance(data, dict) and set(data) == {"result"}:
            data = data["result"]
        return self._validate(data)

    def retry_prompt(self, problem: str) -> str:
        """The user message that asks again."""
        how = (
            f"Call {OUTPUT_TOOL} again with corrected arguments."
            if self.mode == "tool"
            else "Reply again with only the corrected JSON object."
        )
        return f"Your final answer was not valid: {problem}\n{how}"

    def missing_prompt(self) -> str:
        """The user message when a tool-mode agent ended its turn without handing in its answer."""
        return f"You ended your turn without calling {OUTPUT_TOOL}. Call it with your answer."

    def _validate(self, data: object) -> object:
        try:
            return self.adapter.validate_python(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'value'}: {error['msg']}"
                for error in exc.errors(include_url=False)
            )
            raise OutputInvalid(problems) from None
