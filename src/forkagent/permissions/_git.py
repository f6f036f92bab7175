"""``git``: read-only subcommands, without the options that write or run programs.

The repository in the working directory, and its configuration, are trusted
(a hostile ``.git/config`` can run programs on almost any git command). Options
that point git at another repository or inject configuration are therefore
denied: they would move that trust to places nobody vetted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._argv import (
    Denied,
    Inner,
    Options,
    Parsed,
    Word,
    deny_each,
    literal,
    names,
    options,
    read_options,
)

_GLOBAL_FLAGS = names("""
    --no-pager -P --no-replace-objects --literal-pathspecs --glob-pathspecs
    --noglob-pathspecs --icase-pathspecs --no-optional-locks --no-lazy-fetch --no-advice
    --version
    """)
_GLOBAL_DENIED = {
    **deny_each(
        "-c --config-env",
        "sets configuration, which can make git run programs (core.pager, diff.external...)",
    ),
    **deny_each(
        "-C --git-dir --work-tree --bare",
        "points git at another repository, whose configuration could run programs",
    ),
    "--exec-path": "changes where git finds the programs it runs",
    **deny_each("-p --paginate", "runs a pager"),
}

_READ_DENIED = {
    "--output": "writes to a file",
    "--ext-diff": "runs an external diff program",
    "--textconv": "runs text conversion programs",
    "--filters": "runs content filter programs",
    "--show-signature": "runs gpg to verify signatures",
    "--open-files-in-pager": "opens files in a pager (an interactive program)",
}
_READ = options(denied=_READ_DENIED)
"""No option is marked as taking a value: a value skipped by mistake (``log -m`` is a flag)
could hide a denied option, while a value read as options can only cause a denial."""
_GREP = options(
    denied={**_READ_DENIED, "-O": "opens files in a pager (an interactive program)"},
    valued="-e -f -A -B -C -m --max-depth --threads",
)
_SIGNATURE_FORMATS = ("%G", "%(signature")

_BRANCH = options(
    flags="""-a --all -r --remotes -l --list -v --verbose -i --ignore-case --show-current
             --no-column --no-color --omit-empty""",
    valued="--sort --format",
    optional="--contains --no-contains --merged --no-merged --points-at --color --column --abbrev",
)
_TAG = options(
    flags="-l --list -i --ignore-case --no-column --no-color --omit-empty",
    valued="--sort --format",
    optional="-n --contains --no-contains --merged --no-merged --points-at --color --column",
)
_CONFIG = options(
    flags="""--get --get-all --get-regexp --get-urlmatch -l --list --show-origin --show-scope
             --name-only --show-names -z --null --global --system --local --worktree --includes
             --no-includes --bool --int --bool-or-int --path --expiry-date --all --regexp""",
    valued="-f --file --blob --type --default --value --url",
)
_CONFIG_READS = frozenset({"--get", "--get-all", "--get-regexp", "--get-urlmatch", "-l", "--list"})
_CONFIG_WRITERS = frozenset({"set", "unset", "rename-section", "remove-section", "edit"})
"""Subcommands of newer git; named first, they win over the legacy read flags."""
_REMOTE = options(flags="-v --verbose --push --all")

_PLAIN_READERS = names("""
    log show diff status blame annotate rev-parse rev-list ls-files ls-tree cat-file describe
    shortlog whatchanged name-rev merge-base show-ref for-each-ref count-objects var
    check-ignore check-attr diff-tree diff-files diff-index version
    """)
_LISTERS = {"stash": ("list", "show"), "worktree": ("list",), "reflog": ("show", "exists")}


def check_git(program: str, args: Sequence[Word]) -> Inner | None:
    rest = _global_options(args)
    if not rest:
        return None
    subcommand, sub_args = literal("git", rest[:1])[0], rest[1:]
    check = _SUBCOMMANDS.get(subcommand)
    if check is None:
        raise Denied(f"`git {subcommand}` is not a read-only git command")
    check(subcommand, sub_args)
    return None


def _global_options(args: Sequence[Word]) -> Sequence[Word]:
    """Check the options before the subcommand; return the subcommand and its arguments."""
    for index, word in enumerate(args):
        text = literal("git", [word])[0]
        if not text.startswith("-"):
            return args[index:]
        name = text.partition("=")[0]
        if name in _GLOBAL_DENIED:
            raise Denied(f"`git {name}` {_GLOBAL_DENIED[name]}")
        if name not in _GLOBAL_FLAGS or "=" in text:
            raise Denied(f"`git {text}` is not on the list of read-only git options")
    return ()


def _read(spec: Options) -> Callable[[str, Sequence[Word]], None]:
    def check(subcommand: str, args: Sequence[Word]) -> None:
        _no_signature_formats(subcommand, read_options(f"git {subcommand}", spec, args))

    return check


def _no_signature_formats(subcommand: str, parsed: Parsed) -> None:
    values = [value for _, value in parsed.options if value is not None]
    for text in [*values, *literal("git", parsed.operands)]:
        if any(marker in text for marker in _SIGNATURE_FORMATS):
            raise Denied(f"`git {subcommand}` format `{text}` verifies signatures by running gpg")


def _listing(spec: Options) -> Callable[[str, Sequence[Word]], None]:
    """branch / tag: without ``--list`` a name operand creates something."""

    def check(subcommand: str, args: Sequence[Word]) -> None:
        parsed = read_options(f"git {subcommand}", spec, args)
        if parsed.operands and not parsed.has("-l", "--list"):
            raise Denied(
                f"`git {subcommand}` with a name creates a {subcommand}; "
                f"use `git {subcommand} --list <pattern>` to list"
            )
        _no_signature_formats(subcommand, parsed)

    return check


def _config(subcommand: str, args: Sequence[Word]) -> None:
    parsed = read_options("git config", _CONFIG, args)
    operands = literal("git config", parsed.operands)
    if operands[:1] == ["list"]:
        ok = len(operands) == 1
    elif operands[:1] == ["get"]:
        ok = len(operands) == 2
    else:
        most = 0 if parsed.has("-l", "--list") else 2
        ok = (
            parsed.has(*_CONFIG_READS)
            and len(operands) <= most
            and not set(operands[:1]) & _CONFIG_WRITERS
        )
    if not ok:
        raise Denied(
            "`git config` may change configuration; only `--get...`, `--list`, "
            "`git config get <name>` and `git config list` are read-only"
        )


def _remote(subcommand: str, args: Sequence[Word]) -> None:
    parsed = read_options("git remote", _REMOTE, args)
    operands = literal("git remote", parsed.operands)
    if not operands or (operands[0] == "get-url" and len(operands) == 2):
        return
    raise Denied(
        "`git remote` may change remotes or use the network; only `git remote -v` "
        "and `git remote get-url <name>` are read-only"
    )


def _sub_subcommand(subcommand: str, args: Sequence[Word]) -> None:
    """stash / worktree / reflog: only their listing forms, then log-style options."""
    allowed = _LISTERS[subcommand]
    first = literal(f"git {subcommand}", args[:1])
    if subcommand == "reflog" and (not first or first[0].startswith("-")):
        _read(_READ)(subcommand, args)
        return
    if not first or first[0] not in allowed:
        forms = " / ".join(f"`git {subcommand} {name}`" for name in allowed)
        raise Denied(f"`git {' '.join([subcommand, *first])}` is not read-only; use {forms}")
    _read(_READ)(subcommand, args[1:])


_SUBCOMMANDS: dict[str, Callable[[str, Sequence[Word]], None]] = {
    **dict.fromkeys(_PLAIN_READERS, _read(_READ)),
    "grep": _read(_GREP),
    "branch": _listing(_BRANCH),
    "tag": _listing(_TAG),
    "config": _config,
    "remote": _remote,
    **dict.fromkeys(_LISTERS, _sub_subcommand),
}
