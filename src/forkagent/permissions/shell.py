"""Is a shell command read-only? A classifier that fails closed.

The command is parsed with tree-sitter-bash. Only a small set of shapes is
accepted: lists and pipelines of simple commands, each a known read-only
program (see ``programs.py``) with read-only arguments, with redirections only
to /dev/null or between descriptors. Anything the parser could not read, any
node type not listed here, and any text the tree does not account for makes
the command not read-only.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from ._argv import Denied, Word
from ._words import read_word
from .programs import check_argv, check_assignment

_BASH = Language(tree_sitter_bash.language())
MAX_COMMAND_LENGTH = 10_000
INTERNAL_ERROR = "the classifier failed on this command"

_CONTAINERS = frozenset({"program", "list", "pipeline", "negated_command", "redirected_statement"})
_STATEMENTS = _CONTAINERS | {"command", "test_command"}
_SEPARATORS = frozenset({";", "&&", "||", "|", "|&", "!"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_WORDS = frozenset(
    {
        "word",
        "string",
        "raw_string",
        "concatenation",
        "simple_expansion",
        "expansion",
        "number",
        "ansi_c_string",
    }
)
_WORD_PARTS = _WORDS | {
    "string_content",
    "variable_name",
    "special_variable_name",
    '"',
    "$",
    "${",
    "}",
}
_TEST_EXPRESSIONS = frozenset({"unary_expression", "binary_expression", "test_operator"})
_TEST_TOKENS = frozenset({"[", "]", "!", "=", "==", "!="})
_TEST_LEAVES = frozenset({"test_operator", "extglob_pattern"})
"""Read as plain words inside ``[ ]`` (the grammar shares them with ``[[ ]]``)."""
_TEST_EVALUATES_SUBSCRIPTS = frozenset({"-v", "-R"})

_TO_FILE = frozenset({">", ">>", "&>", "&>>", ">|"})
_DUPLICATE = frozenset({">&", "<&"})
_CLOSE = frozenset({">&-", "<&-"})
_NETWORK_PATHS = ("/dev/tcp/", "/dev/udp/")
_HEREDOC_DELIMITER = re.compile(r"""(?P<q>['"]?)(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P=q)""")
_ESCAPED_DELIMITER = re.compile(r"\\(?P<name>[A-Za-z_][A-Za-z0-9_]*)")

_REFUSED_SYNTAX = {
    "&": "runs a command in the background",
    ">": "is a redirection here (inside `[ ]` it writes a file)",
    "<": "is a redirection here (inside `[ ]` it reads a file)",
    "subshell": "is a subshell, which is not allowed",
    "compound_statement": "is a command group, which is not allowed",
    "function_definition": "defines a function",
    "variable_assignment": "assigns a shell variable",
    "declaration_command": "declares or exports variables",
    "unset_command": "unsets variables",
    "command_substitution": "runs a command (command substitution)",
    "process_substitution": "runs a command (process substitution)",
    "arithmetic_expansion": "evaluates arithmetic, which can assign variables",
    "comment": "is a comment; comments are not allowed (the shell and this checker "
    "could disagree about where one ends)",
    "if_statement": "is control flow; only plain commands are allowed",
    "while_statement": "is control flow; only plain commands are allowed",
    "for_statement": "is control flow; only plain commands are allowed",
    "c_style_for_statement": "is control flow; only plain commands are allowed",
    "case_statement": "is control flow; only plain commands are allowed",
}


@dataclass(frozen=True, slots=True)
class ShellVerdict:
    read_only: bool
    reason: str
    """Why; for a denial it names the offending part, in words meant for the model."""


def is_read_only_command(command: str) -> bool:
    """True only when nothing in ``command`` can write, delete, run other code or change
    the system. Never raises."""
    return classify_command(command).read_only


def classify_command(command: str) -> ShellVerdict:
    """``is_read_only_command`` with the reason. Never raises."""
    try:
        _check_characters(command)
        source = command.encode()
        root = Parser(_BASH).parse(source).root_node
        _Checker().check(root)
        _check_coverage(root, source)
    except Denied as denied:
        return ShellVerdict(False, str(denied))
    except RecursionError:
        return ShellVerdict(False, "the command is nested too deeply to check")
    except Exception as error:  # fail closed: a checker bug must never allow a command
        return ShellVerdict(False, f"{INTERNAL_ERROR} ({type(error).__name__})")
    return ShellVerdict(True, "every command is a known read-only program with safe arguments")


def _check_characters(command: str) -> None:
    """Refuse text where what the model, the parser and bash see could differ."""
    if not command.strip():
        raise Denied("the command is empty")
    if len(command) > MAX_COMMAND_LENGTH:
        raise Denied(f"the command is longer than {MAX_COMMAND_LENGTH} characters")
    if "\\\n" in command:
        raise Denied("a backslash-newline (line continuation) is not allowed")
    for char in command:
        if char in "\t\n ":
            continue
        if char == "\r":
            raise Denied("a carriage return is not allowed (it hides text on a terminal)")
        if unicodedata.category(char)[0] in "CZ":
            raise Denied(f"the invisible or unusual character U+{ord(char):04X} is not allowed")


def _text(node: Node) -> str:
    return (node.text or b"").decode()


def _snippet(node: Node) -> str:
    text = _text(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _refused(node: Node) -> Denied:
    why = _REFUSED_SYNTAX.get(node.type, f"is shell syntax ({node.type}) that is not allowed")
    return Denied(f"`{_snippet(node)}` {why}")


class _Checker:
    """Walks the syntax tree without recursion (long lists nest deeply)."""

    def check(self, root: Node) -> None:
        if root.has_error:
            raise Denied(
                "the shell parser could not read the command (syntax error or unsupported "
                "syntax), so it cannot be called read-only"
            )
        stack = [root]
        while stack:
            node = stack.pop()
            if node.type in _CONTAINERS:
                stack.extend(reversed(node.children))
            elif node.type == "command":
                self._command(node, stack)
            elif node.type == "test_command":
                self._test(node)
            elif node.type in _REDIRECTS:
                self._redirect(node, stack)
            elif node.is_named or node.type not in _SEPARATORS:
                raise _refused(node)

    def _command(self, node: Node, stack: list[Node]) -> None:
        argv: list[Word] = []
        for child in node.children:
            if child.type in _REDIRECTS:
                self._redirect(child, stack)
            elif child.type == "variable_assignment" and not argv:
                self._assignment(child)
            elif child.type == "command_name" and not argv:
                argv.append(Word(_text(child)))
            elif child.type in _WORDS and argv:
                argv.append(self._word(child))
            else:
                raise _refused(child)
        if not argv:
            raise Denied(f"`{_snippet(node)}` has no command to run")
        check_argv(argv)

    def _word(self, node: Node) -> Word:
        """The word's value; its own reader gives the clearer reason, the node types are
        checked as well in case the parser saw something the reader did not."""
        word = read_word(_text(node))
        parts = [node]
        while parts:
            part = parts.pop()
            if part.type not in _WORD_PARTS:
                raise _refused(part)
            parts.extend(part.children)
        return word

    def _assignment(self, node: Node) -> None:
        name, *rest = node.children
        if name.type != "variable_name":
            raise _refused(node)
        check_assignment(_text(name))
        for value in rest:
            if value.type in _WORDS:
                self._word(value)
            elif value.is_named or value.type not in ("=", "+="):
                raise _refused(value)

    def _test(self, node: Node) -> None:
        """``[ ... ]`` only; ``[[`` evaluates operands as arithmetic, which can run commands."""
        if node.children[0].type != "[":
            raise Denied(
                f"`{_snippet(node)}`: `[[ ... ]]` can evaluate arithmetic that runs commands; "
                "use `[ ... ]` or `test`"
            )
        parts = list(node.children)
        while parts:
            part = parts.pop()
            if part.type in _WORDS or part.type in _TEST_LEAVES:
                self._test_word(part)
            elif part.type in _TEST_EXPRESSIONS:
                parts.extend(part.children)
            elif part.is_named or part.type not in _TEST_TOKENS:
                raise _refused(part)

    def _test_word(self, node: Node) -> None:
        if node.type in _TEST_LEAVES and node.child_count == 0:
            word = read_word(_text(node))
        else:
            word = self._word(node)
        if not word.literal:
            raise Denied(
                f"`[ ... ]` word `{word.text}` is expanded at run time; with operators such as "
                "-v an expanded word can run commands, so only literal words are allowed"
            )
        if word.text in _TEST_EVALUATES_SUBSCRIPTS:
            raise Denied(
                f"`[ {word.text} ... ]` evaluates array subscripts, which can run commands"
            )

    def _redirect(self, node: Node, stack: list[Node]) -> None:
        if node.type == "heredoc_redirect":
            self._heredoc(node, stack)
            return
        operator = ""
        targets: list[Word] = []
        for child in node.children:
            if child.type == "file_descriptor":
                continue
            if child.type in _WORDS:
                targets.append(self._word(child))
            elif child.is_named:
                raise _refused(child)
            else:
                operator = child.type
        if node.type == "herestring_redirect" and operator == "<<<" and len(targets) == 1:
            return
        _file_redirect(_snippet(node), operator, targets)

    def _heredoc(self, node: Node, stack: list[Node]) -> None:
        delimiter = ""
        quoted = ended = False
        for child in node.children:
            if child.type == "heredoc_start":
                delimiter, quoted = _heredoc_delimiter(_text(child))
            elif child.type == "heredoc_body":
                _heredoc_body(child, quoted)
            elif child.type == "heredoc_end":
                ended = _text(child).lstrip("\t") == delimiter
            elif child.type in _REDIRECTS:
                self._redirect(child, stack)
            elif child.type in _STATEMENTS:
                stack.append(child)
            elif child.is_named or child.type not in _SEPARATORS | {"<<", "<<-"}:
                raise _refused(child)
        if not ended:
            raise Denied(f"`{_snippet(node)}`: the here-document does not end where expected")


def _file_redirect(shown: str, operator: str, targets: list[Word]) -> None:
    if operator in _CLOSE and not targets:
        return
    if len(targets) != 1 or not targets[0].literal:
        raise Denied(f"`{shown}`: the redirection target must be written out literally")
    target = targets[0].text
    if operator in _TO_FILE or (operator == ">&" and not _is_descriptor(target)):
        if target != "/dev/null":
            raise Denied(
                f"`{shown}` writes to `{target}`; output may only go to /dev/null "
                "or another descriptor (2>&1)"
            )
    elif operator in _DUPLICATE:
        if not _is_descriptor(target):
            raise Denied(f"`{shown}`: `{target}` is not a file descriptor")
    elif operator == "<":
        if target.startswith(_NETWORK_PATHS):
            raise Denied(f"`{shown}` opens a network connection")
    else:
        raise Denied(f"`{shown}`: the redirection `{operator}` is not allowed")


def _is_descriptor(target: str) -> bool:
    return target.isdigit() or target == "-"


def _heredoc_delimiter(raw: str) -> tuple[str, bool]:
    """The delimiter and whether it is quoted (a quoted one stops all expansion)."""
    match = _HEREDOC_DELIMITER.fullmatch(raw) or _ESCAPED_DELIMITER.fullmatch(raw)
    if match is None:
        raise Denied(f"here-document delimiter `{raw}` must be a plain word")
    return match.group("name"), raw != match.group("name")


def _heredoc_body(node: Node, quoted: bool) -> None:
    text = _text(node)
    if not quoted and (node.named_child_count or any(char in text for char in "$`\\")):
        raise Denied(
            "an unquoted here-document expands `$`, backquotes and backslashes in its body; "
            "quote the delimiter (<<'EOF') to pass the text as it is"
        )


def _check_coverage(root: Node, source: bytes) -> None:
    """Every non-blank byte must belong to a token of the tree; otherwise the parser
    skipped text that bash would still read."""
    position = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count:
            stack.extend(reversed(node.children))
            continue
        _blank_gap(source[position : node.start_byte])
        position = max(position, node.end_byte)
    _blank_gap(source[position:])


def _blank_gap(gap: bytes) -> None:
    if gap.strip(b" \t\n"):
        shown = gap.decode(errors="replace").strip()[:40]
        raise Denied(f"part of the command (`{shown}`) was not understood by the parser")
