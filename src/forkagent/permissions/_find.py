"""``find``: paths first, then an expression whose every primary must be harmless."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._argv import Denied, Inner, Word, literal, names

_LEADING_FLAGS = frozenset({"-H", "-L", "-P"})
_OPTIMISE = re.compile(r"-O\d*")

_NO_ARGUMENT = names("""
    -depth -d -mount -xdev -noleaf -follow -daystart -ignore_readdir_race
    -noignore_readdir_race -warn -nowarn -empty -readable -writable -executable -nouser
    -nogroup -true -false -print -print0 -ls -prune -quit -not -a -and -o -or ! ( ) ,
    -help --help -version --version
    """)
_ONE_ARGUMENT = names("""
    -name -iname -path -ipath -wholename -iwholename -regex -iregex -lname -ilname -type
    -xtype -size -mtime -mmin -atime -amin -ctime -cmin -newer -anewer -cnewer -perm -user
    -group -uid -gid -links -inum -samefile -used -fstype -context -maxdepth -mindepth
    -regextype -printf -files0-from
    """)
_NEWER_XY = re.compile(r"-newer[aBcm][aBcmt]")

_DENIED = {
    "-delete": "deletes files",
    "-exec": "runs a command for each file",
    "-execdir": "runs a command for each file",
    "-ok": "runs a command for each file",
    "-okdir": "runs a command for each file",
    "-fprint": "writes its output to a file",
    "-fprint0": "writes its output to a file",
    "-fprintf": "writes its output to a file",
    "-fls": "writes its output to a file",
}


def check_find(program: str, args: Sequence[Word]) -> Inner | None:
    """Allow only tests, read-only options and printing actions; every arity is known,
    so a value such as ``-name -delete`` is never mistaken for a primary."""
    words = literal("find", args)
    index = _skip_leading_options(words)
    while index < len(words) and not _starts_expression(words[index]):
        index += 1
    while index < len(words):
        primary = words[index]
        if primary in _DENIED:
            raise Denied(f"`find {primary}` {_DENIED[primary]}")
        if primary in _NO_ARGUMENT:
            index += 1
        elif primary in _ONE_ARGUMENT or _NEWER_XY.fullmatch(primary):
            if index + 1 >= len(words):
                raise Denied(f"`find {primary}` is missing its value")
            index += 2
        else:
            raise Denied(f"`find {primary}` is not on the list of read-only find primaries")
    return None


def _skip_leading_options(words: list[str]) -> int:
    index = 0
    while index < len(words):
        word = words[index]
        if word in _LEADING_FLAGS or _OPTIMISE.fullmatch(word):
            index += 1
        elif word == "-D":
            index += 2
        else:
            break
    return index


def _starts_expression(word: str) -> bool:
    return word.startswith("-") or word in {"(", ")", "!", ","}
