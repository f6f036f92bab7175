"""Reading one shell word the way bash will expand it.

The parser finds where a word starts and ends; this module decides its value.
Quote removal is done here (so ``-de""lete`` and ``'-delete'`` are both seen
as ``-delete``). A word whose value depends on the run (variables, globs,
``~``, brace expansion) is marked not literal; substitutions that run
commands are denied outright.
"""

from __future__ import annotations

import re

from ._argv import Denied, Word

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED = re.compile(r"\{(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+)\}")
_SPECIAL_PARAMETERS = frozenset("@*#?$!-0123456789")
_METACHARACTERS = frozenset(" \t\n;&|<>()")
_GLOB = frozenset("*?[")
_ESCAPABLE_IN_DOUBLE_QUOTES = frozenset('$`"\\')


def read_word(raw: str) -> Word:
    """The value of one word as bash would see it; raises ``Denied`` for anything that runs."""
    return _Reader(raw).read()


class _Reader:
    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.pos = 0
        self.out: list[str] = []
        self.literal = True
        self.brace = False

    def read(self) -> Word:
        if self.raw.startswith("#"):
            raise Denied(f"`{self.raw}` starts with `#`, which the shell reads as a comment")
        if self.raw.startswith("~"):
            self.literal = False
        while self.pos < len(self.raw):
            self._unquoted(self.raw[self.pos])
        if self.brace and ("," in self.raw or ".." in self.raw):
            self.literal = False
        return Word("".join(self.out) if self.literal else self.raw, self.literal)

    def _unquoted(self, char: str) -> None:
        if char == "\\":
            self._escape()
        elif char == "'":
            self._single_quoted()
        elif char == '"':
            self.pos += 1
            self._double_quoted()
        elif char == "$":
            self._dollar(quoted=False)
        elif char == "`":
            raise Denied(f"`{self.raw}`: backquote command substitution runs a command")
        elif char in _METACHARACTERS:
            raise Denied(f"`{self.raw}`: unexpected shell character `{char}`")
        else:
            self._plain(char)

    def _plain(self, char: str) -> None:
        if char in _GLOB:
            self.literal = False
        elif char == "{":
            self.brace = True
        elif char == "~" and self.pos > 0 and self.raw[self.pos - 1] in "=:":
            self.literal = False
        self.out.append(char)
        self.pos += 1

    def _escape(self) -> None:
        if self.pos + 1 >= len(self.raw) or self.raw[self.pos + 1] == "\n":
            raise Denied(f"`{self.raw}`: a backslash at the end of a line is not allowed")
        self.out.append(self.raw[self.pos + 1])
        self.pos += 2

    def _single_quoted(self) -> None:
        end = self.raw.find("'", self.pos + 1)
        if end < 0:
            raise Denied(f"`{self.raw}`: unterminated single quote")
        self.out.append(self.raw[self.pos + 1 : end])
        self.pos = end + 1

    def _double_quoted(self) -> None:
        """From just after an opening ``"`` to just after the closing one."""
        while self.pos < len(self.raw):
            char = self.raw[self.pos]
            if char == '"':
                self.pos += 1
                return
            if char == "\\":
                following = self.raw[self.pos + 1 : self.pos + 2]
                if following == "\n":
                    raise Denied(f"`{self.raw}`: a backslash at the end of a line is not allowed")
                if following in _ESCAPABLE_IN_DOUBLE_QUOTES and following:
                    self.out.append(following)
                    self.pos += 2
                    continue
                self.out.append(char)
                self.pos += 1
            elif char == "$":
                self._dollar(quoted=True)
            elif char == "`":
                raise Denied(f"`{self.raw}`: backquote command substitution runs a command")
            else:
                self.out.append(char)
                self.pos += 1
        raise Denied(f"`{self.raw}`: unterminated double quote")

    def _dollar(self, *, quoted: bool) -> None:
        following = self.raw[self.pos + 1 : self.pos + 2]
        if following == "(":
            raise Denied(f"`{self.raw}`: `$(...)` runs a command (or evaluates arithmetic)")
        if following == "[":
            raise Denied(f"`{self.raw}`: `$[...]` evaluates arithmetic")
        if following == "{":
            self._braced_parameter()
        elif following == "'" and not quoted:
            self._ansi_c_string()
        elif following == '"' and not quoted:
            self.literal = False
            self.pos += 2
            self._double_quoted()
        elif (name := _NAME.match(self.raw, self.pos + 1)) is not None:
            self.literal = False
            self.pos = name.end()
        elif following and following in _SPECIAL_PARAMETERS:
            self.literal = False
            self.pos += 2
        else:
            self.out.append("$")
            self.pos += 1

    def _braced_parameter(self) -> None:
        match = _BRACED.match(self.raw, self.pos + 1)
        if match is None:
            raise Denied(
                f"`{self.raw}`: only plain `${{NAME}}` expansions are allowed "
                "(operators can assign, run commands or evaluate arithmetic)"
            )
        self.literal = False
        self.pos = match.end()

    def _ansi_c_string(self) -> None:
        index = self.pos + 2
        while index < len(self.raw) and self.raw[index] != "'":
            index += 2 if self.raw[index] == "\\" else 1
        if index >= len(self.raw):
            raise Denied(f"`{self.raw}`: unterminated $'...' string")
        self.literal = False
        self.pos = index + 1
