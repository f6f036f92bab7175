"""The monitor's per-response objects built through their slots equal the dataclasses' own.

``new_report`` and the monitor's ``_reported`` skip the frozen ``__init__``; a field added,
reordered or renamed must not go unnoticed.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkagent.events import CacheReported
from forkagent.requests import Difference
from forkagent.telemetry.cache import CacheFinding, CacheReport, new_report
from forkagent.telemetry.monitor import _reported

_STATUSES = st.sampled_from(["hit", "miss", "cold", "unmeasured"])
_FINDINGS = st.lists(
    st.builds(CacheFinding, st.sampled_from(["ttl_expired", "unexplained"]), st.text(max_size=8)),
    max_size=2,
).map(tuple)
_DIFFERENCES = st.none() | st.builds(
    Difference,
    layer=st.sampled_from(["tools", "messages"]),
    block_index=st.none() | st.integers(0, 9),
    byte_offset=st.integers(0, 99),
    label=st.text(max_size=8),
    detail=st.text(max_size=8),
)
_DIAGNOSES = st.none() | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)


_TOKENS = st.integers(0, 10**6)
_VALUES = st.tuples(
    _STATUSES,
    _TOKENS,
    _TOKENS,
    _TOKENS,
    _TOKENS,
    _FINDINGS,
    _DIFFERENCES,
    st.none() | st.text(max_size=12),
    _DIAGNOSES,
)


_NAMES = tuple(field.name for field in dataclasses.fields(CacheReport))


@given(_VALUES)
def test_new_report_is_the_dataclass_built_from_the_same_values(values: tuple[object, ...]) -> None:
    fields = dict(zip(_NAMES, values, strict=True))
    built = new_report(**fields)  # type: ignore[arg-type]  # hypothesis draws each field's type
    expected = CacheReport(**fields)  # type: ignore[arg-type]
    assert type(built) is CacheReport
    assert built == expected
    assert dataclasses.astuple(built) == dataclasses.astuple(expected)
    assert built.to_dict() == expected.to_dict()


def test_new_report_sets_every_field_and_stays_frozen() -> None:
    values = ("miss", 1, 2, 3, 4, (CacheFinding("unexplained", "x"),), None, "the parent", {"a": 1})
    report = new_report(**dict(zip(_NAMES, values, strict=True)))  # type: ignore[arg-type]
    assert [getattr(report, name) for name in _NAMES] == list(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.status = "hit"  # type: ignore[misc]  # frozen: the assignment must fail


def test_reported_is_the_event_built_from_the_same_values() -> None:
    report = CacheReport("hit", 10, 8, 0, 8, (), None, "fork f's shared prefix", None)
    built = _reported("fork-1-abc", 3, report)
    assert type(built) is CacheReported
    assert built == CacheReported("fork-1-abc", 3, report)
    assert (built.agent_id, built.turn, built.report) == ("fork-1-abc", 3, report)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.turn = 4  # type: ignore[misc]  # frozen: the assignment must fail
