"""What ``generateContent`` accepts: its request schema and the rules between fields.

The schema follows the REST ``GenerateContentRequest`` as google-genai sends
it (the ``_to_mldev`` converters in ``google/genai/models.py`` and the
``types`` they fill), in lowerCamelCase after ``gemini_api`` normalises names;
the rules follow the Gemini API docs (function calling modes, structured
output, thinking budgets). Errors read as Google's do: unknown fields as
"Invalid JSON payload received", values as "Invalid value at" or as a
field's violated constraint.
"""

from __future__ import annotations

import re

from .catalog import Catalog
from .errors import ApiError, invalid
from .policies import Contract
from .schema import (
    ANY,
    BOOLEAN,
    INTEGER,
    NUMBER,
    OBJECT,
    STRING,
    ListOf,
    MapOf,
    Obj,
    Path,
    SchemaError,
    Spec,
    check_or,
    enum,
    integer,
    number,
    obj,
)
from .wire import Json, as_dict, dicts

DATA_FIELDS = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
)
"""A part's ``data`` oneof: exactly one of these."""
_MIME_TYPES = ("text/plain", "application/json", "application/xml", "text/x.enum", "text/x-enum")
_JSON_TYPES = ("application/json", "text/x.enum", "text/x-enum")
_BLOB = obj("mimeType data", mimeType=STRING, data=STRING, displayName=STRING)
_PART = obj(
    text=STRING,
    inlineData=_BLOB,
    fileData=obj("fileUri", mimeType=STRING, fileUri=STRING, displayName=STRING),
    functionCall=obj(
        "name", id=STRING, name=STRING, args=OBJECT, partialArgs=ANY, willContinue=BOOLEAN
    ),
    functionResponse=obj(
        "name",
        id=STRING,
        name=STRING,
        response=OBJECT,
        parts=ListOf(OBJECT),
        willContinue=BOOLEAN,
        scheduling=STRING,
    ),
    executableCode=OBJECT,
    codeExecutionResult=OBJECT,
    toolCall=OBJECT,
    toolResponse=OBJECT,
    thought=BOOLEAN,
    thoughtSignature=STRING,
    videoMetadata=OBJECT,
    mediaResolution=ANY,
    partMetadata=OBJECT,
)
_CONTENT = obj(role=STRING, parts=ListOf(_PART))
_FUNCTION = obj(
    "name",
    name=STRING,
    description=STRING,
    parameters=OBJECT,
    parametersJsonSchema=ANY,
    response=OBJECT,
    responseJsonSchema=ANY,
    behavior=STRING,
)
_TOOL = Obj(
    {
        "functionDeclarations": ListOf(_FUNCTION),
        "mcpServers": ListOf(OBJECT),
        **dict.fromkeys(
            (
                "retrieval",
                "computerUse",
                "fileSearch",
                "googleSearch",
                "googleMaps",
                "codeExecution",
                "enterpriseWebSearch",
                "googleSearchRetrieval",
                "parallelAiSearch",
                "urlContext",
                "exaAiSearch",
            ),
            OBJECT,
        ),
    }
)
_GENERATION_CONFIG: dict[str, Spec] = {
    "temperature": number(0, 2),
    "topP": number(0, 1),
    "topK": NUMBER,
    "candidateCount": integer(1, 8),
    "maxOutputTokens": integer(minimum=1),
    "stopSequences": ListOf(STRING, max_items=5),
    "presencePenalty": NUMBER,
    "frequencyPenalty": NUMBER,
    "seed": INTEGER,
    "responseLogprobs": BOOLEAN,
    "logprobs": integer(0, 20),
    "responseMimeType": STRING,
    "responseSchema": OBJECT,
    "responseJsonSchema": ANY,
    "responseModalities": ListOf(enum("TEXT", "IMAGE", "AUDIO", "MODALITY_UNSPECIFIED")),
    "thinkingConfig": obj(
        includeThoughts=BOOLEAN,
        thinkingBudget=integer(minimum=-1),
        thinkingLevel=enum("THINKING_LEVEL_UNSPECIFIED", "MINIMAL", "LOW", "MEDIUM", "HIGH"),
    ),
    **dict.fromkeys(
        (
            "speechConfig",
            "imageConfig",
            "routingConfig",
            "modelSelectionConfig",
            "audioTranscriptionConfig",
        ),
        OBJECT,
    ),
    "mediaResolution": STRING,
    "enableEnhancedCivicAnswers": BOOLEAN,
    "audioTimestamp": BOOLEAN,
    "enableAffectiveDialog": BOOLEAN,
}
_FUNCTION_MODES = ("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED")
GENERATE = obj(
    "contents",
    contents=ListOf(_CONTENT),
    systemInstruction=_CONTENT,
    tools=ListOf(_TOOL),
    toolConfig=obj(
        functionCallingConfig=obj(
            mode=enum(*_FUNCTION_MODES),
            allowedFunctionNames=ListOf(STRING),
            streamFunctionCallArguments=BOOLEAN,
        ),
        retrievalConfig=OBJECT,
        includeServerSideToolInvocations=BOOLEAN,
    ),
    safetySettings=ListOf(
        obj("category threshold", category=STRING, threshold=STRING, method=STRING)
    ),
    generationConfig=Obj(_GENERATION_CONFIG),
    cachedContent=STRING,
    labels=MapOf(STRING),
    serviceTier=STRING,
    store=BOOLEAN,
    model=STRING,
)
"""``model`` is in the path; google-genai leaves a copy in some bodies, which the API ignores."""
_PRO = re.compile(r"gemini-[\d.]+-pro")


def check_generate(body: Json, model: str, catalog: Catalog) -> None:
    """Raise Google's 400 (or 404 for the model) for a malformed request."""
    catalog.require("gemini", model)
    check_or(body, GENERATE, _reworded)
    _check_parts(body)
    _check_functions(body)
    _check_output(body, model)


def check_count(body: Json, model: str, catalog: Catalog) -> None:
    catalog.require("gemini", model)
    inner = body.get("generateContentRequest")
    if isinstance(inner, dict):
        check_or(inner, GENERATE, _reworded)
    else:
        check_or(body, obj(contents=ListOf(_CONTENT)), _reworded)


def _snake(path: Path) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = re.sub(r"(?<!^)([A-Z])", r"_\1", part).lower()
            out += f".{name}" if out else name
    return out


def _reworded(error: SchemaError) -> ApiError:
    field = _snake(error.path)
    if error.problem == "unknown_field":
        name = error.path[-1]
        where = _snake(error.path[:-1])
        at = f" at '{where}'" if where else ""
        return invalid(
            f'Invalid JSON payload received. Unknown name "{name}"{at}: Cannot find field.'
        )
    if error.problem in ("type", "enum", "tag"):
        return invalid(f"Invalid value at '{field}', {error.value!r}")
    if error.problem == "missing":
        return invalid(f"* GenerateContentRequest.{field}: a required field is missing")
    return invalid(f"* GenerateContentRequest.{field}: {error.message.lower()}")


def _check_parts(body: Json) -> None:
    for i, content in enumerate(body.get("contents", [])):
        for j, part in enumerate(content.get("parts", [])):
            if sum(1 for f in DATA_FIELDS if f in part) != 1:
                raise invalid(
                    f"* GenerateContentRequest.contents[{i}].parts[{j}].data: required oneof "
                    "field 'data' must have one initialized field"
                )
        if not content.get("parts"):
            raise invalid(
                f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            )


def _check_functions(body: Json) -> None:
    names = [
        str(d.get("name"))
        for t in dicts(body.get("tools"))
        for d in dicts(t.get("functionDeclarations"))
    ]
    for name in names:
        if names.count(name) > 1:
            raise invalid(f"Duplicate function declaration found: {name}")
    config = body.get("toolConfig", {}).get("functionCallingConfig", {})
    allowed = config.get("allowedFunctionNames")
    if allowed is None:
        return
    if config.get("mode") not in ("ANY", "VALIDATED"):
        raise invalid(
            "* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: "
            "allowed_function_names should only be set when mode is ANY."
        )
    for name in allowed:
        if name not in names:
            raise invalid(
                "* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: "
                f"function {name} is not declared in tools."
            )


def _check_output(body: Json, model: str) -> None:
    config = body.get("generationConfig", {})
    mime = config.get("responseMimeType")
    if mime is not None and mime not in _MIME_TYPES:
        raise invalid(
            f"* GenerateContentRequest.generation_config.response_mime_type: allowed mimetypes "
            f"are {', '.join(repr(m) for m in _MIME_TYPES)}"
        )
    has_schema = [k for k in ("responseSchema", "responseJsonSchema") if k in config]
    if len(has_schema) == 2:
        raise invalid(
            "* GenerateContentRequest.generation_config.response_schema: response_schema and "
            "response_json_schema cannot both be set."
        )
    if has_schema and mime not in _JSON_TYPES:
        raise invalid(
            "* GenerateContentRequest.generation_config.response_mime_type: a response schema "
            "needs response_mime_type 'application/json' (or 'text/x.enum')."
        )
    if config.get("thinkingConfig", {}).get("thinkingBudget") == 0 and _PRO.match(model):
        raise invalid("Budget 0 is invalid. This model only works in thinking mode.")


def contract(body: Json) -> Contract:
    """What the reply must be: a call of an allowed function in mode ANY, JSON, thoughts."""
    declarations = [
        d for t in dicts(body.get("tools")) for d in dicts(t.get("functionDeclarations"))
    ]
    tools = {
        str(d.get("name")): as_dict(d.get("parametersJsonSchema") or d.get("parameters"))
        for d in declarations
    }
    calling = as_dict(as_dict(body.get("toolConfig")).get("functionCallingConfig"))
    forced: tuple[str, ...] = ()
    if calling.get("mode") == "ANY":
        allowed = calling.get("allowedFunctionNames")
        forced = tuple(str(n) for n in allowed) if isinstance(allowed, list) else tuple(tools)
    config = as_dict(body.get("generationConfig"))
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    json_out = config.get("responseMimeType") == "application/json"
    return Contract(
        forced_tools=forced,
        tool_schemas=tools,
        output_schema=as_dict(schema) if json_out and schema is not None else None,
        json_object=json_out,
        thinking=as_dict(config.get("thinkingConfig")).get("includeThoughts") is True,
        tools_allowed=calling.get("mode") != "NONE",
    )
