"""OpenAI Responses API: ``POST /v1/responses`` (JSON and SSE), stored responses and
``previous_response_id``, ``POST /v1/responses/input_tokens``.

The prompt is laid out as tools, the text format's schema, ``instructions`` and
then the input items, and accounted by OpenAI's cache rules (``openai_cache``),
the very engine Chat Completions uses. An item is counted by what it says, not
by its JSON spelling: an assistant message sent back as ``{"role":
"assistant", "content": "hi"}`` is the same tokens as the stored output item
it came from. A stored response keeps its whole context (its input, expanded
through its own ``previous_response_id`` chain, then its output), so a request
that continues it is the same token stream as one that sends everything: the
cache cannot tell the two apart. ``instructions`` are never carried over.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from . import responses_rules, tokens
from .cache import CacheResult, Layer
from .catalog import Catalog
from .chat_api import breakpoint_ttl, cache_options
from .errors import ApiError
from .memo import one_request
from .openai_cache import OpenAICaches, OpenAICacheTurn, Part, cache_part
from .policies import EmulatedRequest
from .wire import (
    Call,
    Json,
    Output,
    SseEvent,
    canonical,
    conversation_key,
    dumps,
    optional,
    require,
)

ENCRYPTED_REASONING = "reasoning.encrypted_content"
_ROLES = ("user", "assistant", "system", "developer")
_MARKER = "prompt_cache_breakpoint"
_SEAL_KEY = b"forkagent-emulator-reasoning"
_STORED = 50_000


def _param_error(message: str, param: str, code: str | None = None) -> ApiError:
    return ApiError("invalid_request", message, param=param, code=code)


@dataclass(frozen=True, slots=True)
class _Stored:
    """A stored response: what it was asked (its whole context) and what it answered."""

    context: tuple[Json, ...]
    output: tuple[Json, ...]
    body: Json


class ResponsesApi:
    """Stored responses (and their items) of the Responses routes, over OpenAI's caches."""

    def __init__(self, caches: OpenAICaches, catalog: Catalog) -> None:
        self.caches = caches
        self.catalog = catalog
        self._responses: OrderedDict[str, _Stored] = OrderedDict()
        self._items: dict[str, Json] = {}
        self._lock = threading.Lock()

    def parse(self, call: Call) -> ResponsesTurn:
        return ResponsesTurn(self, call)

    def input_tokens(self, call: Call) -> Json:
        """``POST /v1/responses/input_tokens``: what the request's prompt would count."""
        if not self.catalog.lenient:
            responses_rules.check_count(call.body, self.catalog)
        prompt = _Prompt(self, call.body, counting=True)
        return {"object": "response.input_tokens", "input_tokens": prompt.tokens}

    def retrieve(self, response_id: str) -> Json:
        """``GET /v1/responses/{id}``."""
        return self._known(response_id).body

    def delete(self, response_id: str) -> Json:
        """``DELETE /v1/responses/{id}``."""
        self._known(response_id)
        with self._lock:
            if (dropped := self._responses.pop(response_id, None)) is not None:
                self._forget(dropped)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    def stored(self, response_id: str) -> _Stored | None:
        with self._lock:
            return self._responses.get(response_id)

    def _known(self, response_id: str) -> _Stored:
        found = self.stored(response_id)
        if found is None:
            message = f"Response with id '{response_id}' not found."
            raise ApiError("not_found", message, param="response_id")
        return found

    def item(self, item_id: str) -> Json:
        """A stored output item, for ``item_reference`` and reasoning items sent by id."""
        with self._lock:
            found = self._items.get(item_id)
        if found is None:
            raise ApiError(
                "not_found",
                f"Item with id '{item_id}' not found. Items are not persisted when `store` "
                "is set to false. Try again with `store` set to true, or remove this item "
                "from your input.",
                param="input",
            )
        return found

    def store(self, response_id: str, stored: _Stored) -> None:
        with self._lock:
            self._responses[response_id] = stored
            for item in stored.output:
                self._items[str(item["id"])] = item
            while len(self._responses) > _STORED:
                self._forget(self._responses.popitem(last=False)[1])

    def _forget(self, stored: _Stored) -> None:
        """Drop a response's items from the item table (call with the lock held)."""
        for item in stored.output:
            self._items.pop(str(item["id"]), None)

    def clear(self) -> None:
        with self._lock:
            self._responses.clear()
            self._items.clear()


# --- reasoning items: encrypted content --------------------------------------------------------


def seal(thinking: str) -> str:
    """Reasoning as ``encrypted_content``: opaque, and refused if changed (it is signed)."""
    payload = base64.urlsafe_b64encode(thinking.encode()).decode()
    return f"emu1.{payload}.{_signature(payload)}"


def _unseal(sealed: str, item_id: str) -> str:
    version, _, rest = sealed.partition(".")
    payload, _, signature = rest.partition(".")
    if version != "emu1" or not hmac.compare_digest(signature, _signature(payload)):
        raise _param_error(
            f"The encrypted content for item {item_id} could not be verified.",
            "input",
            "invalid_encrypted_content",
        )
    return base64.urlsafe_b64decode(payload).decode()


def _signature(payload: str) -> str:
    return hmac.new(_SEAL_KEY, payload.encode(), hashlib.sha256).hexdigest()[:32]


# --- the prompt --------------------------------------------------------------------------------


class _Prompt:
    """A Responses request laid out as the cache sees it: its context items and parts."""

    def __init__(self, api: ResponsesApi, body: Json, *, counting: bool = False) -> None:
        self._api = api
        self.previous = optional(body, "previous_response_id", str)
        earlier = self._earlier(self.previous)
        self.context = [*earlier, *(self._resolve(item) for item in _input_items(body))]
        if not self.context and not counting:
            raise _param_error(
                "Missing required parameter: 'input'.", "input", "missing_required_parameter"
            )
        _check_calls(self.context, answered=not api.catalog.lenient)
        self.tools = optional(body, "tools", list) or []
        self.instructions = optional(body, "instructions", (str, list))
        self.mode, self.ttl = cache_options(body)
        self.parts = self._tool_parts(body) + self._instruction_parts()
        for index, item in enumerate(self.context):
            self.parts += _item_parts(index, item, self.ttl)

    @property
    def tokens(self) -> int:
        return sum(len(p.tokens) for p in self.parts)

    def _earlier(self, previous: str | None) -> list[Json]:
        if previous is None:
            return []
        stored = self._api.stored(previous)
        if stored is None:
            raise _param_error(
                f"Previous response with id '{previous}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
        return [*stored.context, *stored.output]

    def _resolve(self, item: Json) -> Json:
        """Items by reference become the stored item; reasoning must be readable."""
        if item.get("type") == "item_reference":
            return self._api.item(str(require(item, "id", str)))
        if item.get("type") == "reasoning" and item.get("encrypted_content") is None:
            stored = self._api.item(str(require(item, "id", str)))
            return {**item, "encrypted_content": stored["encrypted_content"]}
        return item

    def _tool_parts(self, body: Json) -> list[Part]:
        parts = [
            cache_part("tools", f"tools[{i}]", {"tool": tool}, f"<|tool|>{dumps(tool)}", None)
            for i, tool in enumerate(self.tools)
        ]
        text = optional(body, "text", dict) or {}
        schema = text.get("format")
        if isinstance(schema, dict) and schema.get("type") != "text":
            parts.append(
                cache_part("tools", "text.format", {"format": schema}, dumps(schema), None)
            )
        return parts

    def _instruction_parts(self) -> list[Part]:
        if isinstance(self.instructions, str):
            payload = {"role": "developer", "text": self.instructions}
            text = f"<|developer|>{self.instructions}"
            return [cache_part("system", "instructions", payload, text, None)]
        return [
            part
            for index, item in enumerate(self.instructions or [])
            for part in _item_parts(index, _as_item(item), None, label="instructions")
        ]


def _input_items(body: Json) -> list[Json]:
    value = body.get("input")
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        raise _param_error("input: Input should be a string or a list of items.", "input")
    return [_as_item(item) for item in value]


def _as_item(item: Any) -> Json:
    if not isinstance(item, dict):
        raise _param_error("input: each item must be an object.", "input")
    kind = item.get("type", "message")
    if kind == "message" and item.get("role") not in _ROLES:
        raise _param_error(
            f"Invalid value: '{item.get('role')}'. Supported values are: "
            + ", ".join(f"'{r}'" for r in _ROLES)
            + ".",
            "input",
            "invalid_value",
        )
    return {"type": kind, **item}


def _check_calls(items: list[Json], *, answered: bool) -> None:
    """Every ``function_call_output`` answers a ``function_call`` before it; ``answered``:
    and every call is answered (strict mode; the API says both with ``code`` null)."""
    called: dict[str, bool] = {}
    for item in items:
        if item["type"] == "function_call":
            called[str(require(item, "call_id", str))] = False
        elif item["type"] == "function_call_output":
            call_id = require(item, "call_id", str)
            if call_id not in called:
                raise _param_error(
                    f"No tool call found for function call output with call_id {call_id}.",
                    "input",
                )
            called[call_id] = True
    unanswered = [call_id for call_id, done in called.items() if not done]
    if answered and unanswered:
        raise _param_error(f"No tool output found for function call {unanswered[0]}.", "input")


def _item_parts(index: int, item: Json, ttl: str | None, *, label: str = "input") -> list[Part]:
    """An item's parts, counted by what it says (so its JSON spelling does not matter)."""
    kind = item["type"]
    where = f"{label}[{index}]"
    if kind == "message":
        return _message_parts(where, item, ttl)
    if kind == "function_call":
        payload = {k: item.get(k) for k in ("type", "call_id", "name", "arguments")}
        text = f"<|function_call|>{payload['call_id']} {payload['name']}{payload['arguments']}"
        return [cache_part("messages", where, payload, text, None)]
    if kind == "function_call_output":
        output = item.get("output")
        said = output if isinstance(output, str) else "".join(map(_content_text, _parts(output)))
        payload = {"type": kind, "call_id": item["call_id"], "output": output}
        text = f"<|function_call_output|>{item['call_id']}\n{said}"
        return [cache_part("messages", where, payload, text, None)]
    if kind == "reasoning":
        thinking = _unseal(str(item.get("encrypted_content") or ""), str(item.get("id")))
        payload = {"type": kind, "thinking": thinking}
        return [cache_part("messages", where, payload, f"<|reasoning|>{thinking}", None)]
    bare = {k: v for k, v in item.items() if k not in ("id", "status")}
    return [cache_part("messages", where, bare, _opaque(bare), None)]


def _message_parts(where: str, item: Json, ttl: str | None) -> list[Part]:
    role = item["role"]
    layer: Layer = "system" if role in ("system", "developer") else "messages"
    content = item.get("content")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    out: list[Part] = []
    for j, part in enumerate(_parts(parts)):
        label = f"{where}.content[{j}]"
        said = _content_text(part)
        text = (f"<|{role}|>" if j == 0 else "") + said
        mark = breakpoint_ttl(part, _MARKER, label, ttl) if ttl else None
        out.append(cache_part(layer, label, {"role": role, "said": said}, text, mark))
    if not out:
        out.append(cache_part(layer, where, {"role": role}, f"<|{role}|>", None))
    return out


def _parts(value: Any) -> list[Json]:
    """Content parts (a message's content, a tool output), checked to be a list of objects."""
    if not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
        raise _param_error("input: content must be a string or a list of content parts.", "input")
    return value


def _content_text(part: Json) -> str:
    """A content part's words; other parts (images, files) by a digest of their JSON."""
    if part.get("type") in ("input_text", "output_text", "text", "summary_text"):
        return str(part.get("text", ""))
    if part.get("type") == "refusal":
        return str(part.get("refusal", ""))
    return _opaque({k: v for k, v in part.items() if k != _MARKER})


def _opaque(value: Json) -> str:
    return f"<{value.get('type')} {hashlib.sha256(canonical(value)).hexdigest()[:16]}>"


# --- one response ------------------------------------------------------------------------------


class ResponsesTurn(OpenAICacheTurn):
    """One ``POST /v1/responses``."""

    route = "/v1/responses"
    id_prefix = "resp_emu"
    call_prefix = "call_emu"

    def __init__(self, api: ResponsesApi, call: Call) -> None:
        body = call.body
        self._api = api
        self._caches = api.caches
        self._body = body
        if not api.catalog.lenient:
            with one_request(frozen=call.frozen):
                responses_rules.check_create(body, api.catalog)
        self.model = require(body, "model", str)
        self.profile = "openai"
        self.max_tokens = optional(body, "max_output_tokens", int)
        self.stream = bool(body.get("stream", False))
        self._store = body.get("store") is not False
        reasoning = optional(body, "reasoning", dict) or {}
        self._effort = reasoning.get("effort")
        self._contract = responses_rules.contract(body)
        self.with_thinking = self._contract.thinking
        self._summary = reasoning.get("summary") or reasoning.get("generate_summary")
        self._sealed = ENCRYPTED_REASONING in (optional(body, "include", list) or [])
        self._prompt = _Prompt(api, body)
        self._parts = self._prompt.parts
        self._mode, self._ttl = self._prompt.mode, self._prompt.ttl
        self._explicit = self._mode == "explicit" or any(p.ttl for p in self._parts)
        self._created = int(time.time())
        self.request = self._view(call)

    def _view(self, call: Call) -> EmulatedRequest:
        context = self._prompt.context
        system = "".join(_said(i) for i in context if i.get("role") in ("system", "developer"))
        if isinstance(self._prompt.instructions, str):
            system = self._prompt.instructions + system
        first_user = next((i for i in context if i.get("role") == "user"), {})
        last = context[-1]
        functions = (t for t in self._prompt.tools if isinstance(t, dict))
        return EmulatedRequest(
            provider="openai",
            model=self.model,
            system=system,
            last_user_text=_said(last) if last.get("role") == "user" else "",
            tool_names=tuple(
                str(t.get("name", "")) for t in functions if t.get("type") == "function"
            ),
            message_count=len(context),
            conversation=conversation_key(call.headers, self.model, system, _said(first_user)),
            body=call.body,
            agent=call.calling_agent(),
            contract=self._contract,
        )

    # -- output ------------------------------------------------------------------------------

    def _items(self, message_id: str, output: Output) -> list[Json]:
        """The output items: reasoning (always sealed: the stored copy needs it), then the
        message, then function calls."""
        suffix = message_id.removeprefix("resp_")
        items: list[Json] = []
        if output.thinking:
            summary = [{"type": "summary_text", "text": output.thinking}] if self._summary else []
            sealed = seal(output.thinking)
            items.append(
                {
                    "id": f"rs_{suffix}",
                    "type": "reasoning",
                    "summary": summary,
                    "encrypted_content": sealed,
                }
            )
        if output.text:
            text = {"type": "output_text", "text": output.text, "annotations": [], "logprobs": []}
            items.append(
                {
                    "id": f"msg_{suffix}",
                    "type": "message",
                    "status": self._status(output),
                    "role": "assistant",
                    "content": [text],
                }
            )
        for index, c in enumerate(output.tool_calls):
            items.append(
                {
                    "id": f"fc_{suffix}_{index:02d}",
                    "type": "function_call",
                    "status": "completed",
                    "arguments": c.arguments,
                    "call_id": c.id,
                    "name": c.name,
                }
            )
        return items

    def _shown(self, item: Json) -> Json:
        """What the client sees of an item: encrypted reasoning only when it asked for it."""
        if item["type"] != "reasoning" or self._sealed:
            return item
        return {k: v for k, v in item.items() if k != "encrypted_content"}

    @staticmethod
    def _status(output: Output) -> str:
        return "incomplete" if output.stop == "max_tokens" else "completed"

    def _usage_json(self, result: CacheResult, output: Output) -> Json:
        written = result.written_tokens if self._explicit else 0
        return {
            "input_tokens": result.total_tokens,
            "input_tokens_details": {
                "cached_tokens": result.read_tokens,
                "cache_write_tokens": written,
            },
            "output_tokens": output.output_tokens,
            "output_tokens_details": {"reasoning_tokens": output.thinking_tokens},
            "total_tokens": result.total_tokens + output.output_tokens,
        }

    def _response(
        self, message_id: str, status: str, items: list[Json], usage: Json | None
    ) -> Json:
        body = self._body
        done = status in ("completed", "incomplete")
        return {
            "id": message_id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "background": False,
            "completed_at": int(time.time()) if done else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": self.max_tokens,
            "max_tool_calls": body.get("max_tool_calls"),
            "model": self.model,
            "output": items,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": self._prompt.previous,
            "prompt_cache_key": body.get("prompt_cache_key"),
            "prompt_cache_retention": body.get("prompt_cache_retention"),
            "reasoning": {"effort": self._effort, "summary": self._summary},
            "safety_identifier": body.get("safety_identifier"),
            "service_tier": "default",
            "store": self._store,
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": self._prompt.tools,
            "top_logprobs": body.get("top_logprobs", 0),
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage,
            "user": body.get("user"),
            "metadata": body.get("metadata") or {},
        }

    def _finish(self, message_id: str, result: CacheResult, output: Output) -> Json:
        """The complete response, stored (unless ``store: false``) for later requests."""
        items = self._items(message_id, output)
        shown = [self._shown(item) for item in items]
        status = self._status(output)
        response = self._response(message_id, status, shown, self._usage_json(result, output))
        if self._store:
            stored = _Stored(tuple(self._prompt.context), tuple(items), response)
            self._api.store(message_id, stored)
        return response

    def render(self, message_id: str, result: CacheResult, output: Output) -> Json:
        return self._finish(message_id, result, output)

    def events(self, message_id: str, result: CacheResult, output: Output) -> list[SseEvent]:
        final = self._finish(message_id, result, output)
        opening = self._response(message_id, "in_progress", [], None)
        stream = _EventStream()
        stream.add("response.created", 0, response=opening)
        stream.add("response.in_progress", 0, response=opening)
        for index, item in enumerate(final["output"]):
            stream.item(index, item)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        stream.add(kind, 0, response=final)
        return stream.events


class _EventStream:
    """Builds a response's events in the API's order, numbering them."""

    def __init__(self) -> None:
        self.events: list[SseEvent] = []

    def add(self, kind: str, weight: int, **data: Any) -> None:
        payload = {"type": kind, "sequence_number": len(self.events), **data}
        self.events.append(SseEvent(payload, event=kind, tokens=weight))

    def item(self, index: int, item: Json) -> None:
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            self.add(
                "response.output_item.added",
                0,
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            for j, part in enumerate(item["content"]):
                self._text(where | {"content_index": j}, part)
        elif item["type"] == "function_call":
            self.add(
                "response.output_item.added",
                0,
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            arguments = item["arguments"]
            self.add(
                "response.function_call_arguments.delta",
                tokens.count(arguments),
                **where,
                delta=arguments,
            )
            self.add("response.function_call_arguments.done", 0, **where, arguments=arguments)
        else:
            self.add(
                "response.output_item.added", 0, output_index=index, item={**item, "summary": []}
            )
            for j, summary in enumerate(item["summary"]):
                self._summary(where | {"summary_index": j}, summary["text"])
        self.add("response.output_item.done", 0, output_index=index, item=item)

    def _text(self, where: Json, part: Json) -> None:
        self.add("response.content_part.added", 0, **where, part={**part, "text": ""})
        for piece in tokens.pieces(part["text"]):
            self.add(
                "response.output_text.delta", tokens.count(piece), **where, delta=piece, logprobs=[]
            )
        self.add("response.output_text.done", 0, **where, text=part["text"], logprobs=[])
        self.add("response.content_part.done", 0, **where, part=part)

    def _summary(self, where: Json, text: str) -> None:
        empty = {"type": "summary_text", "text": ""}
        self.add("response.reasoning_summary_part.added", 0, **where, part=empty)
        for piece in tokens.pieces(text):
            self.add(
                "response.reasoning_summary_text.delta", tokens.count(piece), **where, delta=piece
            )
        self.add("response.reasoning_summary_text.done", 0, **where, text=text)
        self.add("response.reasoning_summary_part.done", 0, **where, part={**empty, "text": text})


def _said(item: Json) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_content_text(p) for p in content if isinstance(p, dict))
    return ""
