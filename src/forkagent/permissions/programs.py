"""Which programs a read-only shell may run, with which options.

``PROGRAMS`` maps a program name to a ``Program`` rule. A rule without a check
accepts any argument (nothing the program accepts writes or runs anything); a
checked rule reads the arguments and raises ``Denied`` naming the culprit;
a wrapper's check returns the command it runs, which is judged in turn.
``REFUSED`` gives tailored reasons for well-known programs that are not allowed.
To extend the allowlist, add a rule here (see docs/permissions.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ._argv import (
    Denied,
    Inner,
    Options,
    Word,
    deny_each,
    literal,
    names,
    options,
    read_options,
)
from ._find import check_find
from ._git import check_git
from ._sed import check_sed

Check = Callable[[str, Sequence[Word]], Inner | None]
"""Gets the program name and its arguments; raises ``Denied``; returns what a wrapper runs."""


@dataclass(frozen=True, slots=True)
class Program:
    check: Check | None = None
    """``None``: any argument is fine (nothing the program accepts writes or runs anything)."""
    wrapper: bool = False
    """It runs another command (env, xargs...), which is judged in turn."""


SAFE_ENVIRONMENT = names("""
    LANG LANGUAGE LC_ALL LC_COLLATE LC_CTYPE LC_MESSAGES LC_MONETARY LC_NUMERIC LC_TIME
    TZ NO_COLOR COLUMNS
    """)
"""Variables a command may set for itself: they change formatting, not what runs."""

_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=.*", re.DOTALL)
_MAX_WRAPPING = 8


def check_argv(argv: Sequence[Word], *, appended: bool = False, depth: int = 0) -> None:
    """Judge one simple command; ``appended``: xargs adds unknown words at run time."""
    name = program_name(argv[0])
    rule = PROGRAMS.get(name)
    if rule is None:
        raise Denied(_refusal(name))
    if rule.check is None:
        return
    if appended and not rule.wrapper:
        raise Denied(
            f"xargs would pass its input as arguments to `{name}`, which has options "
            "that are not read-only"
        )
    inner = rule.check(name, argv[1:])
    if inner is None:
        if appended:
            raise Denied(f"xargs would pass its input to `{name}` as the command to run")
        return
    if depth >= _MAX_WRAPPING:
        raise Denied("too many wrapper commands inside each other")
    check_argv(inner.argv, appended=appended or inner.appends_input, depth=depth + 1)


def program_name(word: Word) -> str:
    if word.literal and word.text in REFUSED:
        raise Denied(_refusal(word.text))
    if word.literal and _PLAIN_NAME.fullmatch(word.text):
        return word.text
    raise Denied(
        f"command name `{word.text}` must be a plain program name "
        "(no quotes, escapes, paths, variables or globs)"
    )


def check_assignment(name: str) -> None:
    """An environment assignment for a command: only formatting variables."""
    if name not in SAFE_ENVIRONMENT:
        raise Denied(
            f"setting `{name}` can change what a program runs or loads; only "
            f"{', '.join(sorted(SAFE_ENVIRONMENT))} may be set"
        )


def _refusal(name: str) -> str:
    return f"`{name}` {REFUSED.get(name, 'is not a known read-only program')}"


def simple(
    spec: Options,
    *,
    most_operands: int | None = None,
    why_fewer: str = "",
    operand_check: Callable[[str, str], None] | None = None,
) -> Check:
    """A check from an option table and limits on the operands."""

    def check(program: str, args: Sequence[Word]) -> Inner | None:
        parsed = read_options(program, spec, args)
        if most_operands is not None or operand_check is not None:
            operands = literal(program, parsed.operands)
            if most_operands is not None and len(operands) > most_operands:
                raise Denied(f"`{program} {' '.join(operands)}`: {why_fewer}")
            if operand_check is not None:
                for operand in operands:
                    operand_check(program, operand)
        return None

    return check


# --- checks for single programs --------------------------------------------------------


def _tail_operand(program: str, operand: str) -> None:
    if re.fullmatch(r"\+\d*[bcl]?f", operand):
        raise Denied(f"`{program} {operand}` (obsolete syntax) follows the file and never ends")


def _date_operand(program: str, operand: str) -> None:
    if not operand.startswith("+"):
        raise Denied(
            f"`{program} {operand}` sets the system clock; only `+FORMAT` operands read it"
        )


def _test(program: str, args: Sequence[Word]) -> Inner | None:
    for word in literal(program, args):
        if word in ("-v", "-R"):
            raise Denied(f"`{program} {word}` evaluates array subscripts, which can run commands")
    return None


_XXD_FLAGS = names("""-a -autoskip -b -bits -C -capitalize -d -e -E -EBCDIC -i -include -p -ps -postscript
    -plain -u -uppercase -h -help -v -version""")
_XXD_VALUED = names("-c -cols -g -groupsize -l -len -o -s -seek -n -name")
_XXD_ATTACHED = re.compile(r"-[cglos][+-]?(0[xX])?[0-9a-fA-F]+")


def _xxd(program: str, args: Sequence[Word]) -> Inner | None:
    """xxd reads its own single-dash options; ``-r`` (any word starting so) writes binary,
    and a second operand is the output file."""
    words = literal(program, args)
    operands: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word.startswith("-r"):
            raise Denied(f"`{program} {word}` converts back to binary, writing files")
        if operands or word == "-" or not word.startswith("-"):
            operands.append(word)
        elif word in _XXD_VALUED:
            index += 1
        elif word not in _XXD_FLAGS and not _XXD_ATTACHED.fullmatch(word):
            raise Denied(f"`{program}` option `{word}` is not on the list of read-only options")
    if len(operands) > 1:
        raise Denied(f"`{program} {' '.join(operands)}`: the second operand is a file xxd writes")
    return None


# --- wrappers: judged as the command they run -------------------------------------------

_ENV = options(
    valued="-u --unset -C --chdir",
    flags="-i --ignore-environment -0 --null -v --debug --help --version",
    denied={
        **deny_each(
            "-S --split-string", "builds a command line from a string that cannot be checked"
        ),
        **deny_each("-a --argv0", "runs a program under another name"),
    },
    permute=False,
)
_COMMAND = options(flags="-p -v -V", permute=False)
_NICE = options(valued="-n --adjustment", flags="", permute=False)
_TIMEOUT = options(
    valued="-k --kill-after -s --signal",
    flags="--preserve-status --foreground -v --verbose",
    permute=False,
)
_TIME = options(flags="-p", permute=False)
_STDBUF = options(valued="-i --input -o --output -e --error", flags="", permute=False)
_IONICE = options(
    valued="-c --class -n --classdata",
    flags="-t --ignore",
    denied=deny_each("-p --pid -P --pgid -u --uid", "changes the I/O priority of other processes"),
    permute=False,
)
_XARGS = options(
    valued="-d --delimiter -n --max-args -L --max-lines -I -s --max-chars -P --max-procs "
    "-a --arg-file -E",
    optional="-i --replace -e --eof -l",
    flags="-0 --null -r --no-run-if-empty -t --verbose -x --exit --help --version",
    denied={
        **deny_each("-p --interactive", "asks for confirmation on the terminal"),
        **deny_each("-o --open-tty", "gives the command the terminal"),
        "--process-slot-var": "sets an environment variable for the command",
    },
    permute=False,
)


def _runs(operands: Sequence[Word]) -> Inner | None:
    return Inner(operands) if operands else None


def _env(program: str, args: Sequence[Word]) -> Inner | None:
    rest = list(read_options(program, _ENV, args).operands)
    while rest and rest[0].literal and (match := _ASSIGNMENT.fullmatch(rest[0].text)):
        check_assignment(match.group(1))
        rest.pop(0)
    return _runs(rest)


def _command(program: str, args: Sequence[Word]) -> Inner | None:
    parsed = read_options(program, _COMMAND, args)
    return None if parsed.has("-v", "-V") else _runs(parsed.operands)


def _nice(program: str, args: Sequence[Word]) -> Inner | None:
    parsed = read_options(program, _NICE, args)
    for value in parsed.values("-n", "--adjustment"):
        if not value.isdigit():
            raise Denied(f"`{program} -n {value}`: only lowering the priority is allowed")
    return _runs(parsed.operands)


def _timeout(program: str, args: Sequence[Word]) -> Inner | None:
    operands = read_options(program, _TIMEOUT, args).operands
    literal(program, operands[:1])
    return _runs(operands[1:])


def _options_then_command(spec: Options) -> Check:
    return lambda program, args: _runs(read_options(program, spec, args).operands)


def _xargs(program: str, args: Sequence[Word]) -> Inner:
    operands = read_options(program, _XARGS, args).operands
    return Inner(operands or (Word("echo"),), appends_input=True)


# --- the tables ------------------------------------------------------------------------

_ANY_ARGUMENTS = """
    cat tac ls pwd echo wc head grep egrep fgrep stat du df which type whoami id uname
    nproc basename dirname realpath readlink cut tr nl column paste rev fold comm cmp diff
    md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum cksum od hexdump jq
    true false seq printenv
"""

PROGRAMS: Mapping[str, Program] = {
    **dict.fromkeys(names(_ANY_ARGUMENTS), Program()),
    "tail": Program(
        simple(
            options(
                valued="-n --lines -c --bytes",
                denied=deny_each(
                    "-f -F --follow --retry --pid -s --sleep-interval",
                    "follows the file and never finishes",
                ),
            ),
            operand_check=_tail_operand,
        )
    ),
    "printf": Program(
        simple(options(denied={"-v": "assigns its output to a shell variable"}, permute=False))
    ),
    "test": Program(_test),
    "date": Program(
        simple(
            options(
                valued="-d --date -f --file -r --reference --rfc-3339",
                optional="-I --iso-8601",
                flags="-u --utc --universal -R --rfc-email --debug --help --version",
                denied=deny_each("-s --set", "sets the system clock"),
            ),
            operand_check=_date_operand,
        )
    ),
    "hostname": Program(
        simple(
            options(
                flags="""-a --alias -A --all-fqdns -d --domain -f --fqdn --long -i --ip-address
                         -I --all-ip-addresses -s --short -y --yp --nis -h --help -V --version""",
                denied={
                    **deny_each("-F --file", "sets the host name from a file"),
                    **deny_each("-b --boot", "sets the host name"),
                },
            ),
            most_operands=0,
            why_fewer="an operand sets the host name",
        )
    ),
    "sort": Program(
        simple(
            options(
                flags="""-b --ignore-leading-blanks -d --dictionary-order -f --ignore-case
                         -g --general-numeric-sort -h --human-numeric-sort -i --ignore-nonprinting
                         -M --month-sort -n --numeric-sort -R --random-sort -r --reverse
                         -V --version-sort -c -C -m --merge -s --stable -u --unique
                         -z --zero-terminated --debug --help --version""",
                valued="""-k --key -t --field-separator -S --buffer-size --parallel --batch-size
                          --random-source --files0-from --sort""",
                optional="--check",
                denied={
                    **deny_each("-o --output", "writes its result to a file"),
                    "--compress-program": "runs a program to compress temporary files",
                    **deny_each("-T --temporary-directory", "writes temporary files there"),
                },
            )
        )
    ),
    "uniq": Program(
        simple(
            options(
                flags="""-c --count -d --repeated -D -u --unique -i --ignore-case
                         -z --zero-terminated --help --version""",
                optional="--all-repeated --group",
                valued="-f --skip-fields -s --skip-chars -w --check-chars",
            ),
            most_operands=1,
            why_fewer="the second operand is a file uniq writes",
        )
    ),
    "tree": Program(
        simple(
            options(
                denied={
                    "-o": "writes its output to a file",
                    "-R": "writes an HTML listing into every directory",
                }
            )
        )
    ),
    "file": Program(
        simple(
            options(
                valued="-m --magic-file -f --files-from -F --separator -e --exclude -P --parameter",
                denied={
                    **deny_each("-C --compile", "writes a compiled magic file"),
                    **deny_each(
                        "-z -Z --uncompress --uncompress-noreport", "runs decompression programs"
                    ),
                },
            )
        )
    ),
    "rg": Program(
        simple(
            options(
                valued="""-e --regexp -f --file -g --glob --iglob -t --type -T --type-not
                          -m --max-count -A --after-context -B --before-context -C --context
                          -j --threads -M --max-columns -r --replace -E --encoding -d --max-depth
                          --type-add --type-clear --sort --sortr --max-filesize --color --colors
                          --path-separator --context-separator --ignore-file --engine""",
                denied={
                    **deny_each("--pre --pre-glob", "runs a program on every file searched"),
                    "--hostname-bin": "runs a program",
                    **deny_each("-z --search-zip", "runs decompression programs"),
                },
            )
        )
    ),
    "xxd": Program(_xxd),
    "find": Program(check_find),
    "sed": Program(check_sed),
    "git": Program(check_git),
    "env": Program(_env, wrapper=True),
    "command": Program(_command, wrapper=True),
    "nice": Program(_nice, wrapper=True),
    "timeout": Program(_timeout, wrapper=True),
    "time": Program(_options_then_command(_TIME), wrapper=True),
    "stdbuf": Program(_options_then_command(_STDBUF), wrapper=True),
    "ionice": Program(_options_then_command(_IONICE), wrapper=True),
    "xargs": Program(_xargs, wrapper=True),
}
"""The allowlist. Anything not here is not read-only."""

REFUSED: Mapping[str, str] = {
    **dict.fromkeys(
        names("""rm rmdir mv cp dd ln mkdir touch truncate shred install chmod chown chgrp
        mkfifo mknod unlink rsync patch split csplit"""),
        "changes or deletes files",
    ),
    "tee": "writes its input to files",
    **dict.fromkeys(
        names("""awk gawk mawk nawk perl python python2 python3 node nodejs deno bun ruby php lua
        tclsh Rscript"""),
        "is an interpreter: its programs can write files and run commands",
    ),
    **dict.fromkeys(
        names("sh bash zsh dash ksh fish csh tcsh busybox"),
        "is a shell: it runs whatever it is given",
    ),
    **dict.fromkeys(
        names("eval exec source . builtin alias trap coproc"),
        "runs code that cannot be checked",
    ),
    **dict.fromkeys(
        names("""less more most pg vi vim nvim view nano emacs ed ex pico top htop btop atop man
        info watch tmux screen"""),
        "is interactive",
    ),
    **dict.fromkeys(
        names("ssh scp sftp ftp telnet nc ncat netcat curl wget socat"), "uses the network"
    ),
    **dict.fromkeys(names("sudo doas su pkexec"), "runs commands with other privileges"),
    "nohup": "detaches the command and writes nohup.out",
    **dict.fromkeys(
        names("""kill pkill killall shutdown reboot halt poweroff systemctl service mount umount
        crontab"""),
        "changes the running system",
    ),
    **dict.fromkeys(
        names("cd pushd popd export unset set shopt declare typeset local readonly umask ulimit"),
        "changes the shell's state",
    ),
}
"""Tailored reasons for well-known programs that are not allowed."""
