"""Arguments as the shell hands them to a program, and a getopt-style option reader.

Programs read their options in different ways; this reader follows GNU getopt
(bundled short options, ``--name=value``, unambiguous abbreviations of long
options, options after operands) and errs towards denial wherever a program
could read an argument differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


class Denied(Exception):
    """Stops the classifier; the message is the reason shown to the model."""


@dataclass(frozen=True, slots=True)
class Word:
    """One argument. ``text`` is its value after quote removal when ``literal``;
    otherwise (variables, globs, ``~``) the value is only known at run time and
    ``text`` is the source spelling."""

    text: str
    literal: bool = True


@dataclass(frozen=True, slots=True)
class Inner:
    """The command a wrapper (env, timeout, xargs...) runs, judged on its own."""

    argv: Sequence[Word]
    appends_input: bool = False
    """True for xargs: words read from stdin are added to ``argv`` at run time."""


@dataclass(frozen=True)
class Options:
    """What a program's options mean, for the reader.

    Mark an option ``valued`` only when sure it takes a value: a value that is
    wrongly skipped could hide a dangerous option, while a value wrongly read
    as options can only cause a denial.
    """

    valued: frozenset[str] = frozenset()
    """Options that take a value, attached or as the next argument."""
    optional: frozenset[str] = frozenset()
    """Options whose value can only be attached (``-n5``, ``--color=auto``)."""
    denied: Mapping[str, str] = field(default_factory=dict)
    """Option -> why it is not read-only. Abbreviations of long ones are denied too."""
    flags: frozenset[str] | None = None
    """The other options allowed; ``None`` allows any option not denied."""
    permute: bool = True
    """GNU style: options may follow operands. False: the first operand ends options."""


def options(
    *,
    valued: str = "",
    optional: str = "",
    denied: Mapping[str, str] | None = None,
    flags: str | None = None,
    permute: bool = True,
) -> Options:
    """Build ``Options`` from space-separated option lists (keeps the tables short)."""
    return Options(
        valued=names(valued),
        optional=names(optional),
        denied=dict(denied or {}),
        flags=None if flags is None else names(flags),
        permute=permute,
    )


def names(text: str) -> frozenset[str]:
    """A set from a whitespace-separated list (keeps the tables readable)."""
    return frozenset(text.split())


def deny_each(spellings: str, why: str) -> dict[str, str]:
    """The same reason for several spellings of one option."""
    return dict.fromkeys(spellings.split(), why)


@dataclass(frozen=True, slots=True)
class Parsed:
    options: tuple[tuple[str, str | None], ...]
    operands: tuple[Word, ...]

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.options)

    def values(self, *names: str) -> list[str]:
        return [value for name, value in self.options if name in names and value is not None]


def literal(program: str, words: Iterable[Word]) -> list[str]:
    """The values of ``words``; any word known only at run time is denied."""
    out = []
    for word in words:
        if not word.literal:
            raise Denied(
                f"`{program}` argument `{word.text}` is expanded at run time (variable, "
                "glob or ~), so its value cannot be checked; write it out literally"
            )
        out.append(word.text)
    return out


def read_options(program: str, spec: Options, args: Sequence[Word]) -> Parsed:
    """Split ``args`` into options and operands, denying what ``spec`` forbids."""
    found: list[tuple[str, str | None]] = []
    operands: list[Word] = []
    queue = list(args)
    only_operands = False
    while queue:
        word = queue.pop(0)
        if only_operands:
            operands.append(word)
            continue
        text = literal(program, [word])[0]
        if text == "--":
            only_operands = True
        elif text.startswith("--"):
            found.append(_long(program, spec, text, queue))
        elif text.startswith("-") and text != "-":
            found.extend(_short(program, spec, text, queue))
        else:
            operands.append(word)
            only_operands = not spec.permute
    return Parsed(tuple(found), tuple(operands))


def _long(program: str, spec: Options, text: str, queue: list[Word]) -> tuple[str, str | None]:
    name, has_value, value = text.partition("=")
    for bad, why in spec.denied.items():
        if bad.startswith("--") and len(name) > 2 and bad.startswith(name):
            raise Denied(f"`{program} {bad}` {why}")
    if name in spec.valued:
        return name, value if has_value else _next_value(program, name, queue)
    if name in spec.optional:
        return name, value if has_value else None
    if spec.flags is not None and (name not in spec.flags or has_value):
        raise Denied(_not_listed(program, text))
    return name, value if has_value else None


def _short(
    program: str, spec: Options, text: str, queue: list[Word]
) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    for index in range(1, len(text)):
        name = "-" + text[index]
        rest = text[index + 1 :]
        if name in spec.denied:
            raise Denied(f"`{program} {name}` {spec.denied[name]}")
        if name in spec.valued:
            found.append((name, rest or _next_value(program, name, queue)))
            break
        if name in spec.optional:
            found.append((name, rest or None))
            break
        if spec.flags is not None and name not in spec.flags:
            raise Denied(_not_listed(program, name))
        found.append((name, None))
    return found


def _next_value(program: str, name: str, queue: list[Word]) -> str:
    if not queue:
        raise Denied(f"`{program} {name}` is missing its value")
    return literal(program, [queue.pop(0)])[0]


def _not_listed(program: str, option: str) -> str:
    return f"`{program}` option `{option}` is not on the list of read-only options"
