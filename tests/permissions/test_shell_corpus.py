"""Every command in shell_corpus.yaml gets the verdict (and reason) the corpus expects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from forkagent.permissions import classify_command, is_read_only_command

CORPUS: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "shell_corpus.yaml").read_text(encoding="utf-8")
)


def test_corpus_is_large_and_documented() -> None:
    assert len(CORPUS) >= 200
    assert {case["ro"] for case in CORPUS} == {True, False}
    assert all(str(case.get("why", "")).strip() for case in CORPUS)
    commands = [case["cmd"] for case in CORPUS]
    assert len(commands) == len(set(commands)), "duplicate commands in the corpus"


@pytest.mark.parametrize("case", CORPUS, ids=[repr(case["cmd"])[:60] for case in CORPUS])
def test_verdict(case: dict[str, Any]) -> None:
    verdict = classify_command(case["cmd"])
    assert verdict.read_only is case["ro"], f"{case['why']} / classifier said: {verdict.reason}"
    assert is_read_only_command(case["cmd"]) is case["ro"]
    if "says" in case:
        assert case["says"] in verdict.reason
