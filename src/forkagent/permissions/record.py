"""A policy as its transcript keeps it, and the rule for bringing it back on resume.

Resuming must not be a side door: an agent started in plan mode, with a tool
filter or without the repository's trust, resumes with at least those limits.
A resume may tighten them; loosening needs ``loosen=True`` (``--loosen``).
The handler (who answers questions) is never recorded: it belongs to the
process that resumes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import cast, get_args

from ..errors import ConfigurationError
from ..messages import JsonValue
from .filters import (
    AllowAll,
    AllowTools,
    DenyTools,
    MemoryDirFilter,
    ReadOnlyFilter,
    ToolFilter,
    _AllOf,
    _AnyOf,
    all_of,
    any_of,
)
from .modes import _LATITUDE, PermissionMode, PermissionPolicy


def policy_record(policy: PermissionPolicy | None, trusted: bool | None) -> dict[str, JsonValue]:
    """What the transcript header keeps under ``extra["permissions"]``."""
    if policy is None:
        return {"mode": None, "trusted": trusted}
    return {
        "mode": policy.mode,
        "filter": filter_to_json(policy.filter),
        "add_dirs": [str(d) for d in policy.add_dirs],
        "allow_secrets": policy.allow_secrets,
        "trusted": trusted,
    }


def restored_policy(
    record: Mapping[str, JsonValue] | None,
    given: PermissionPolicy | None,
    *,
    loosen: bool = False,
) -> PermissionPolicy | None:
    """The policy a resumed agent runs under: ``given``, never looser than ``record``
    unless ``loosen``. Without a record (an older transcript) ``given`` stands."""
    if record is None or record.get("mode") is None:
        return given
    mode = record["mode"]
    if mode not in get_args(PermissionMode):
        raise ConfigurationError(f"the transcript records an unknown permission mode {mode!r}")
    try:
        recorded_filter = filter_from_json(record.get("filter"))
    except ConfigurationError:
        if given is None or given.filter is None:
            raise
        recorded_filter = None  # the caller passed its own filter again
    recorded = PermissionPolicy(
        mode=cast(PermissionMode, mode),
        filter=recorded_filter,
        add_dirs=tuple(Path(str(d)) for d in _list(record.get("add_dirs"))),
        allow_secrets=bool(record.get("allow_secrets", False)),
    )
    if given is None:
        return recorded
    looser = _looser_parts(recorded, given)
    if looser and not loosen:
        raise ConfigurationError(
            f"the agent was started with {'; '.join(looser)}; resuming would loosen that. "
            "Pass loosen=True (on the command line, --loosen) to do it on purpose."
        )
    if loosen:
        return given
    both = [f for f in (recorded.filter, given.filter) if f is not None]
    return PermissionPolicy(
        mode=given.mode,
        handler=given.handler,
        filter=all_of(*both) if len(both) > 1 else (both[0] if both else None),
        add_dirs=recorded.add_dirs,
        allow_secrets=recorded.allow_secrets,
    )


def recorded_trust(record: Mapping[str, JsonValue] | None) -> bool | None:
    value = record.get("trusted") if record else None
    return value if isinstance(value, bool) else None


def _looser_parts(recorded: PermissionPolicy, given: PermissionPolicy) -> list[str]:
    parts: list[str] = []
    if _LATITUDE[given.mode] > _LATITUDE[recorded.mode]:
        parts.append(f"permission mode {recorded.mode!r}, not {given.mode!r}")
    extra = {d.resolve() for d in given.add_dirs} - {d.resolve() for d in recorded.add_dirs}
    if extra:
        parts.append(f"no access to {', '.join(sorted(map(str, extra)))}")
    if given.allow_secrets and not recorded.allow_secrets:
        parts.append("credential files refused")
    return parts


def filter_to_json(tool_filter: ToolFilter | None) -> JsonValue:
    """The built-in filters as data; another filter is recorded by name only."""
    if tool_filter is None or isinstance(tool_filter, AllowAll):
        return None
    if isinstance(tool_filter, AllowTools):
        return {"type": "allow_tools", "names": sorted(tool_filter.names)}
    if isinstance(tool_filter, DenyTools):
        return {"type": "deny_tools", "names": sorted(tool_filter.names)}
    if isinstance(tool_filter, ReadOnlyFilter):
        return {"type": "read_only", "read_tools": sorted(tool_filter.read_tools)}
    if isinstance(tool_filter, MemoryDirFilter):
        return {"type": "memory_dir", "dir": str(tool_filter.memory_dir)}
    if isinstance(tool_filter, _AllOf | _AnyOf):
        kind = "all_of" if isinstance(tool_filter, _AllOf) else "any_of"
        return {"type": kind, "filters": [filter_to_json(f) for f in tool_filter.filters]}
    return {"type": "custom", "name": type(tool_filter).__name__}


def filter_from_json(data: JsonValue) -> ToolFilter | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"a recorded tool filter is not an object: {data!r}")
    kind = data.get("type")
    if kind == "allow_tools":
        return AllowTools(str(n) for n in _list(data.get("names")))
    if kind == "deny_tools":
        return DenyTools(str(n) for n in _list(data.get("names")))
    if kind == "read_only":
        return ReadOnlyFilter(str(n) for n in _list(data.get("read_tools")))
    if kind == "memory_dir":
        return MemoryDirFilter(str(data.get("dir")))
    if kind in ("all_of", "any_of"):
        parts = [f for f in map(filter_from_json, _list(data.get("filters"))) if f is not None]
        return (all_of if kind == "all_of" else any_of)(*parts)
    raise ConfigurationError(
        f"the agent ran with a tool filter of its own ({data.get('name', kind)}), which a "
        "transcript cannot hold: resume it with that filter in Agent(permissions=...)"
    )


def _list(value: JsonValue) -> list[JsonValue]:
    return list(value) if isinstance(value, list) else []
