"""Properties of the classifier on arbitrary input: it never raises, is deterministic,
no composition with a non-read-only command is read-only, and the word reader agrees
with bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forkagent.permissions import ShellVerdict, classify_command
from forkagent.permissions._argv import Denied
from forkagent.permissions._words import read_word
from forkagent.permissions.shell import INTERNAL_ERROR

SHELL_CHARACTERS = " \t\n;&|<>()$`'\"\\{}[]*?~#=-!@%^+,./:0123456789abcdefgilnoprstuvwxyzEIOP"
SHELLISH = st.text(
    alphabet=st.sampled_from([*SHELL_CHARACTERS, "\r", "\u00a0", "\u200b", "é", "\x00"]),
    max_size=60,
)
TOKEN_TEXT = """ls cat grep rg find sed git sort uniq xargs env timeout nice command tail date xxd tree
    test [ ] -delete -exec -o -i -n -r -f -v -c -C -p --output --pre -z log diff show branch
    config stash -- . f 's/a/b/w x' 's/a/b/' p e w 'x' "$X" $(id) `id` *.py > >> < 2>&1
    /dev/null | || && ; & \\n <<EOF EOF {} \\; + 5"""
TOKENS = st.sampled_from(TOKEN_TEXT.split())
WORDS_JOINED = st.lists(TOKENS, min_size=1, max_size=12).map(" ".join)
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=80)
"""Any code point, lone surrogates and control characters included."""

READ_ONLY = ["ls -la", "git status", "cat f | grep x", "rg foo", "find . -name '*.py'"]
NOT_READ_ONLY = ["rm x", "echo hi > f", "find . -delete", "sed -i s/a/b/ f", "git push"]


def check_total(command: str) -> ShellVerdict:
    first = classify_command(command)
    second = classify_command(command)
    assert isinstance(first, ShellVerdict)
    assert first == second
    assert first.reason
    assert not first.reason.startswith(INTERNAL_ERROR), first.reason
    return first


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT)
def test_arbitrary_text_never_raises(command: str) -> None:
    check_total(command)


@settings(max_examples=400, deadline=None)
@given(SHELLISH)
def test_shell_characters_never_raise(command: str) -> None:
    check_total(command)


@settings(max_examples=400, deadline=None)
@given(WORDS_JOINED)
def test_token_soup_never_raises(command: str) -> None:
    check_total(command)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(READ_ONLY),
    st.sampled_from(NOT_READ_ONLY),
    st.sampled_from(["; ", " && ", " || ", " | ", "\n", " & "]),
    st.booleans(),
)
def test_a_writer_anywhere_spoils_the_whole(ok: str, bad: str, joiner: str, first: bool) -> None:
    assert classify_command(ok).read_only
    command = f"{bad}{joiner}{ok}" if first else f"{ok}{joiner}{bad}"
    assert not classify_command(command).read_only


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(READ_ONLY), st.sampled_from([" &", " > out", " >> out", " 2> err"]))
def test_background_and_file_redirection_spoil_a_reader(ok: str, suffix: str) -> None:
    assert not classify_command(ok + suffix).read_only


WORD_PIECES = [*"abc-=/.:,{}~*?[]'\"\\$ ", "x y", "\\ ", "'a b'", '"a b"', "$'q'", '"$"', "'\\'"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(WORD_PIECES), min_size=1, max_size=6).map("".join))
def test_a_literal_word_is_what_bash_passes(word: str) -> None:
    """The word reader's value of a literal word is the one argument bash gives a program."""
    try:
        value = read_word(word)
    except Denied:
        return
    command = f"printf '%s\\0' {word}"
    if not value.literal or not classify_command(command).read_only:
        return
    done = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        cwd=tempfile.gettempdir(),
        env={"PATH": os.defpath},
        check=True,
        timeout=10,
    )
    assert done.stdout.decode().split("\0")[:-1] == [value.text]
