"""``sed``: options, then the script read the way GNU sed compiles it.

The script reader mirrors GNU sed's own tokenising (delimiters, escapes,
bracket expressions in regexes, labels, text arguments) so that every place
sed would find a command or an ``s`` flag is looked at. The commands and flags
that write (``w``, ``W``, ``s///w``) or run a shell (``e``, ``s///e``) are denied;
anything not understood is denied too.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._argv import Denied, Inner, Word, deny_each, literal, options, read_options

_OPTIONS = options(
    valued="-e --expression -l --line-length",
    flags="""-n --quiet --silent -E -r --regexp-extended -s --separate -z --null-data
             -u --unbuffered --posix --debug --sandbox -b --binary --help --version""",
    denied={
        **deny_each("-i --in-place", "edits files in place"),
        **deny_each("-f --file", "reads its script from a file, which cannot be checked"),
    },
)

_NO_ARGUMENT = frozenset("=dDFgGhHnNpPxz}")
_OPTIONAL_NUMBER = frozenset("lqQ")
_LABELLED = frozenset(":btTv")
_TEXT = frozenset("aic")
_FILE_READS = frozenset("rR")
_WRITES = {
    "w": "writes to a file",
    "W": "writes to a file",
    "e": "runs a shell command",
}
_SUBSTITUTE_FLAGS = frozenset("gpiImM0123456789")
_BLANKS = " \t"
_END_OF_COMMAND = frozenset(";\n}#")


def check_sed(program: str, args: Sequence[Word]) -> Inner | None:
    parsed = read_options("sed", _OPTIONS, args)
    scripts = parsed.values("-e", "--expression")
    operands = literal("sed", parsed.operands)
    if not scripts:
        if not operands:
            raise Denied("`sed` has no script")
        scripts = [operands[0]]
    script = "\n".join(scripts)
    try:
        _Script(script).check()
    except IndexError:
        raise Denied(f"sed script `{script}` is incomplete") from None
    return None


class _Script:
    """A cursor over one sed script; each method consumes one syntactic piece."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def check(self) -> None:
        while True:
            self._skip(_BLANKS + ";\n")
            if self.pos >= len(self.text):
                return
            self._addresses()
            self._command()

    def _fail(self, what: str) -> Denied:
        return Denied(f"sed script `{self.text}`: {what}")

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _take(self) -> str:
        char = self.text[self.pos]
        self.pos += 1
        return char

    def _skip(self, chars: str) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in chars:
            self.pos += 1

    def _addresses(self) -> None:
        if self._address():
            self._skip(_BLANKS)
            if self._peek() == ",":
                self.pos += 1
                self._skip(_BLANKS)
                if not self._address():
                    raise self._fail("a `,` is not followed by an address")
        self._skip(_BLANKS)
        if self._peek() == "!":
            self.pos += 1
            self._skip(_BLANKS)

    def _address(self) -> bool:
        char = self._peek()
        if char in ("/", "\\"):
            self.pos += 1
            self._delimited(self._take() if char == "\\" else "/", regex=True)
            self._skip(_BLANKS + "IM")
        elif char.isdigit():
            self._number()
            self._skip(_BLANKS)
            if self._peek() == "~":
                self.pos += 1
                self._skip(_BLANKS)
                self._number()
        elif char in ("+", "~"):
            self.pos += 1
            self._skip(_BLANKS)
            self._number()
        elif char == "$":
            self.pos += 1
        else:
            return False
        return True

    def _number(self) -> None:
        self._skip("0123456789")

    def _command(self) -> None:
        command = self._take()
        if command in _WRITES:
            raise self._fail(f"the `{command}` command {_WRITES[command]}")
        if command == "{":
            return
        if command in _NO_ARGUMENT:
            self._end_of_command()
        elif command in _OPTIONAL_NUMBER:
            self._skip(_BLANKS)
            self._number()
            self._end_of_command()
        elif command in _LABELLED:
            self._label()
        elif command in _TEXT:
            self._skip(_BLANKS)
            self._rest_of_line(escapes=True)
        elif command in _FILE_READS or command == "#":
            self._rest_of_line(escapes=False)
        elif command == "s":
            self._substitute()
        elif command == "y":
            delimiter = self._delimiter()
            self._delimited(delimiter, regex=False)
            self._delimited(delimiter, regex=False)
            self._end_of_command()
        else:
            raise self._fail(f"`{command}` is not a sed command this checker knows")

    def _substitute(self) -> None:
        delimiter = self._delimiter()
        self._delimited(delimiter, regex=True)
        self._delimited(delimiter, regex=False)
        while True:
            self._skip(_BLANKS)
            flag = self._peek()
            if flag == "" or flag in _END_OF_COMMAND:
                return
            if flag in _WRITES:
                raise self._fail(f"the `s///{flag}` flag {_WRITES[flag]}")
            if flag not in _SUBSTITUTE_FLAGS:
                raise self._fail(f"`{flag}` is not an `s` flag this checker knows")
            self.pos += 1

    def _delimiter(self) -> str:
        delimiter = self._take()
        if delimiter in ("\\", "\n") or not delimiter.isascii():
            raise self._fail(f"`{delimiter!r}` cannot be used as a delimiter here")
        return delimiter

    def _delimited(self, delimiter: str, *, regex: bool) -> None:
        """Consume up to the closing delimiter; in a regex, ``[...]`` hides delimiters."""
        while True:
            char = self._take()
            if char == delimiter:
                return
            if char == "\n":
                raise self._fail("a regex or replacement is not terminated")
            if char == "\\":
                self._take()
            elif char == "[" and regex:
                self._bracket()

    def _bracket(self) -> None:
        """Consume a bracket expression (after its ``[``) as GNU sed does."""
        if self._peek() == "^":
            self.pos += 1
        if self._peek() == "]":
            self.pos += 1
        state, closer = 0, ""
        while True:
            char = self._take()
            if char == "\n":
                raise self._fail("a bracket expression is not terminated")
            if char in ".:=" and state == 1:
                state, closer = 2, char
            elif char in ".:=" and state == 2 and char == closer:
                state = 3
            elif char == "[":
                state = 1 if state == 0 else state
            elif char == "]" and state in (0, 1):
                return
            elif char == "]" and state == 3:
                state = 0
            else:
                state &= ~1

    def _label(self) -> None:
        self._skip(_BLANKS)
        while self._peek() not in ("", "\n", ";", "}", "#", " ", "\t"):
            self.pos += 1

    def _rest_of_line(self, *, escapes: bool) -> None:
        """Text of a/i/c continues over an escaped newline; a file name or comment does not."""
        while self.pos < len(self.text) and self.text[self.pos] != "\n":
            self.pos += 2 if escapes and self.text[self.pos] == "\\" else 1

    def _end_of_command(self) -> None:
        self._skip(_BLANKS)
        if self._peek() not in ("", ";", "\n", "}", "#"):
            raise self._fail(f"unexpected `{self._peek()}` after a command")
