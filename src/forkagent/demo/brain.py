"""The emulated model's side of the demo.

The demo runs the real runtime (routing, forks, fan-out, notifications,
tools, transcripts) against the emulator; only the model is a stand-in. This
policy plays it: from each request alone, as a model does, it works out
whose turn it is (the main agent, one of its forks, or the Explore agent) and
how far that agent has got, and replies with what a capable model would do
next. Every finding it reports is read from the tool results in the request,
so the report tells the truth about the files the agents actually saw.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..agents.builtin import EXPLORE
from ..emulator import EmulatedRequest, Reply, ToolCall
from ..testing import FORK_TAG, NOTIFICATION_TAG

MAIN_PROMPT = (
    "Review the shelf library in this repository: find what is broken or missing, "
    "fix what is safe to fix, and give me a short report."
)
"""What the user asks the main agent."""


# -- reading a request -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """One tool call of the agent and what came back."""

    name: str
    input: Mapping[str, Any]
    text: str
    is_error: bool


@dataclass(slots=True)
class View:
    """An agent's own part of the conversation: its turns since it started."""

    turns: int = 0
    """Assistant messages so far: how many steps the agent has taken."""
    results: list[Result] = field(default_factory=list)
    notifications: list[str] = field(default_factory=list)

    def last(self, name: str) -> Result | None:
        return next((r for r in reversed(self.results) if r.name == name), None)


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content", "")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _text_of(block: Mapping[str, Any]) -> str:
    content = block.get("content", block.get("text", ""))
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content)


def read_view(messages: Sequence[Mapping[str, Any]]) -> View:
    """Fold an Anthropic-format message list into the agent's view of its own work."""
    view, calls = View(), {}
    for message in messages:
        for block in _blocks(message):
            kind = block.get("type")
            if kind == "tool_use":
                calls[block["id"]] = block
            elif kind == "tool_result" and block["tool_use_id"] in calls:
                call = calls[block["tool_use_id"]]
                error = bool(block.get("is_error"))
                view.results.append(Result(call["name"], call["input"], _text_of(block), error))
            elif kind == "text" and f"<{NOTIFICATION_TAG}>" in block["text"]:
                view.notifications.append(block["text"])
        view.turns += message.get("role") == "assistant"
    return view


def _fork_start(messages: Sequence[Mapping[str, Any]]) -> tuple[int, str] | None:
    """Where a fork's own part begins, and its directive; None for other agents."""
    for index, message in enumerate(messages):
        texts = [b.get("text", "") for b in _blocks(message) if b.get("type") == "text"]
        for position, text in enumerate(texts):
            if text.startswith(f"<{FORK_TAG}>") and position + 1 < len(texts):
                return index + 1, texts[position + 1].removeprefix("Directive:\n")
    return None


# -- the scripts -----------------------------------------------------------------

Step = Callable[[View], Reply]


def _call(name: str, **args: Any) -> ToolCall:
    return ToolCall(name=name, input=args)


def _search(text: str, pattern: str, path: str | None = None) -> Step:
    """A step that searches file contents with Grep and says why."""
    args: dict[str, Any] = {"pattern": pattern, "output_mode": "content"}
    if path is not None:
        args["path"] = path

    def step(view: View) -> Reply:
        return Reply(text=text, tool_calls=(_call("Grep", **args),))

    return step


def _lines(text: str) -> list[str]:
    """Non-blank lines, without Grep's ``--`` group separators."""
    return [line for line in text.splitlines() if line.strip() and line.strip() != "--"]


def _cite(hit: str) -> str:
    """A Grep hit ``path:line:code`` as ``path:line (`code`)``."""
    path, line, code = [*hit.split(":", 2), "", ""][:3]
    return f"{path}:{line} (`{code.strip()}`)" if code else hit.strip()


@dataclass(frozen=True, slots=True)
class Task:
    """One child's job: the directive the main agent gives it and how it works."""

    key: str
    """A phrase of the directive that tells the brain which task a fork has."""
    description: str
    prompt: str
    steps: tuple[Step, ...]
    background: bool = False
    agent_type: str | None = None
    """None: a fork; else the named agent to start."""

    def agent_call(self) -> ToolCall:
        args: dict[str, Any] = {"description": self.description, "prompt": self.prompt}
        if self.agent_type is None:
            args["fork"] = True
        else:
            args["subagent_type"] = self.agent_type
        if self.background:
            args["run_in_background"] = True
        return ToolCall(name="Agent", input=args)

    def reply(self, view: View) -> Reply:
        if view.turns < len(self.steps):
            return self.steps[view.turns](view)
        return Reply(text="Done; my report is above.")


# The stock fix: find the subtraction, guard it, report where.

_REMOVE_OLD = "            raise UnknownItem(sku)\n        self._stock[sku] -= quantity\n"
_REMOVE_NEW = (
    "            raise UnknownItem(sku)\n"
    "        if quantity > self._stock[sku]:\n"
    '            raise OutOfStock(f"{sku}: {quantity} asked, {self._stock[sku]} on hand")\n'
    "        self._stock[sku] -= quantity\n"
)


def _stock_order(view: View) -> Reply:
    return Reply(
        text="First the order that shows it: o-1042 asks for more tea than the shelf holds.",
        tool_calls=(_call("mcp__orders__find_order", order_id="o-1042"),),
    )


def _stock_edit(view: View) -> Reply:
    found = view.last("Grep")
    if found is None or found.is_error or "-= quantity" not in found.text:
        return Reply(text="Not done: I could not find where remove() changes the stock.")
    return Reply(
        text="remove() subtracts without checking what is on hand; guarding it.",
        tool_calls=(
            _call(
                "Edit", file_path="shelf/store.py", old_string=_REMOVE_OLD, new_string=_REMOVE_NEW
            ),
        ),
    )


def _stock_report(view: View) -> Reply:
    found, edit = view.last("Grep"), view.last("Edit")
    where = _cite(_lines(found.text)[0]) if found else "shelf/store.py"
    if edit is None or edit.is_error:
        reason = edit.text if edit else "no edit was made"
        return Reply(
            text=f"Not done. The unchecked subtraction is at {where}; the edit failed: {reason}"
        )
    return Reply(
        text=(
            f"Done. Store.remove let stock go negative at {where}: it subtracted "
            "whatever was asked. It now raises OutOfStock when more units are asked for "
            "than are on hand, and leaves the stock untouched. Changed: shelf/store.py. "
            "Not checked: callers that relied on negative stock (none in this repository)."
        )
    )


# The rounding check: every place that rounds, against the README's rule.


def _early_rounding(view: View) -> list[str]:
    """Grep hits that round with ``round()``: before the single rounding at the end."""
    found = view.last("Grep")
    hits = _lines(found.text) if found and not found.is_error else []
    return [hit for hit in hits if "round(" in hit and "quantize" not in hit]


def _rounding_context(view: View) -> Reply:
    early = _early_rounding(view)
    if not early:
        return _rounding_report(view)
    path, line = early[0].split(":", 2)[:2]
    return Reply(
        text="Reading the loop around the first one.",
        tool_calls=(_call("Read", file_path=path, offset=max(int(line) - 4, 1), limit=8),),
    )


def _rounding_report(view: View) -> Reply:
    found = view.last("Grep")
    hits = _lines(found.text) if found and not found.is_error else []
    early = _early_rounding(view)
    listing = "\n".join(f"- {_cite(hit)}" for hit in hits) or "- (no rounding found)"
    if not early:
        verdict = "Every amount is rounded once, at the end, as the README says."
    else:
        verdict = (
            "This breaks the README's rule (round once, at the end): "
            f"{_cite(early[0])} rounds each line before the sum, and Python's round() "
            "rounds half to even, so a line ending in half a cent can lose it. Fix: sum the "
            "unrounded lines and keep the single quantize(CENT, ROUND_HALF_UP) at the end. "
            "Not changed: the directive asked for a check only."
        )
    return Reply(text=f"Places that round:\n{listing}\n\n{verdict}")


# The report tests: write them, report what they cover.

REPORT_TESTS = """\
from decimal import Decimal

from shelf import Item, Store, stock_report


def stocked(quantity: int) -> Store:
    store = Store()
    store.add(Item("jam-02", "Apricot jam", Decimal("2.50"), category="food"), quantity)
    return store


def test_low_stock_is_flagged() -> None:
    assert stock_report(stocked(2)).splitlines()[0].endswith("LOW")


def test_enough_stock_is_not_flagged() -> None:
    assert "LOW" not in stock_report(stocked(5))


def test_the_shelf_value_is_the_last_line() -> None:
    assert stock_report(stocked(4)).splitlines()[-1].endswith("EUR 10.00")
"""


def _tests_write(view: View) -> Reply:
    return Reply(
        text="Writing tests for the low-stock flag and the shelf value.",
        tool_calls=(_call("Write", file_path="tests/test_report.py", content=REPORT_TESTS),),
    )


def _tests_check(view: View) -> Reply:
    wrote = view.last("Write")
    if wrote is None or wrote.is_error:
        return Reply(text=f"Not done: {wrote.text if wrote else 'nothing was written'}")
    return Reply(
        text="Reading the file back to check what landed.",
        tool_calls=(_call("Read", file_path="tests/test_report.py"),),
    )


def _tests_report(view: View) -> Reply:
    written = view.last("Read")
    if written is None or written.is_error:
        return Reply(text=f"Not done: {written.text if written else 'the file was not read back'}")
    names = re.findall(r"^\s*\d+\tdef (test_\w+)", written.text, flags=re.MULTILINE)
    listing = "\n".join(f"- {name}" for name in names)
    return Reply(
        text=f"Done. Wrote tests/test_report.py with {len(names)} tests:\n{listing}\n"
        "Not run: this session has no shell access to pytest."
    )


# The Explore agent: every open note in the repository.


def _notes_report(view: View) -> Reply:
    found = view.last("Grep")
    hits = _lines(found.text) if found and not found.is_error else []
    notes = [hit for hit in hits if re.search(r"#\s*(TODO|FIXME)", hit)]
    listing = "\n".join(f"- {_cite(note)}" for note in notes)
    return Reply(text=f"{len(notes)} open notes:\n{listing}" if notes else "No open notes.")


TASKS: tuple[Task, ...] = (
    Task(
        key="Store.remove",
        description="fix negative stock",
        prompt=(
            "Store.remove in shelf/store.py lets the stock go below zero. Make it raise "
            "OutOfStock when more units are asked for than are on hand, then report what "
            "you changed."
        ),
        steps=(
            _stock_order,
            _search(
                "Looking at what remove() does to the stock.", r"-= quantity", "shelf/store.py"
            ),
            _stock_edit,
            _stock_report,
        ),
    ),
    Task(
        key="rounds money",
        description="check order rounding",
        prompt=(
            "Check how shelf/pricing.py rounds money. The README says amounts are rounded "
            "to cents once, at the end. Report every place that rounds money and whether "
            "it follows that rule. Do not change code."
        ),
        steps=(
            _search("Searching for every place that rounds money.", r"round\(|quantize", "shelf"),
            _rounding_context,
            _rounding_report,
        ),
        background=True,
    ),
    Task(
        key="has no tests",
        description="test the stock report",
        prompt=(
            "shelf/report.py has no tests. Write tests/test_report.py covering the "
            "low-stock flag and the shelf value."
        ),
        steps=(_tests_write, _tests_check, _tests_report),
        background=True,
    ),
    Task(
        key="TODO and FIXME",
        description="find open notes",
        prompt="List every TODO and FIXME comment in this repository with its file and line. "
        "A quick look is enough.",
        steps=(_search("Searching for open notes.", r"TODO|FIXME"), _notes_report),
        agent_type="Explore",
    ),
)
BACKGROUND_TASKS = sum(task.background for task in TASKS)


# -- the main agent ---------------------------------------------------------------


def _main_survey(view: View) -> Reply:
    return Reply(
        text="I'll get the lay of the land first, and what the shop's orders look like.",
        tool_calls=(
            _call("Glob", pattern="**/*.py"),
            _call("Read", file_path="README.md"),
            _call("mcp__orders__recent_orders"),
        ),
    )


def _main_read(view: View) -> Reply:
    listing = view.last("Glob")
    found = _lines(listing.text) if listing and not listing.is_error else []
    paths = sorted(p.strip() for p in found if p.strip().endswith(".py"))
    if not paths:
        return Reply(text="I found no Python files to review.")
    return Reply(
        text=f"{len(paths)} Python files. Reading them all before deciding anything.",
        tool_calls=tuple(_call("Read", file_path=path) for path in paths),
    )


def _main_delegate(view: View) -> Reply:
    plan = (
        "Plan, from what I have read:\n"
        "1. Store.remove never checks the stock: fix it now (a fork, so it knows all of the above).\n"
        "2. pricing.py rounds in two places: check that against the README (fork, background).\n"
        "3. report.py has no tests: write some (fork, background).\n"
        "4. Collect the open TODO/FIXME notes (the Explore agent, on a cheaper model).\n"
        "The forks share this conversation through the prompt cache, so each pays only "
        "for its own directive."
    )
    return Reply(text=plan, tool_calls=tuple(task.agent_call() for task in TASKS))


def _section(title: str, body: str) -> str:
    return f"### {title}\n{body.strip()}"


_FINISHED = re.compile(r"^Agent \S+ finished: .*$", flags=re.MULTILINE)


def _child_output(result: str) -> str:
    """A sync child's own words: its Agent tool result after the runtime's status lines."""
    finished = _FINISHED.search(result)
    return result[finished.end() :] if finished else result


def _notification_result(text: str) -> tuple[str, str]:
    """The summary line and the result of a ``<task-notification>``."""
    summary = re.search(r"^summary: (.*)$", text, flags=re.MULTILINE)
    result = text.split("\nresult:\n", 1)[-1].rsplit(f"</{NOTIFICATION_TAG}>", 1)[0]
    return (summary.group(1) if summary else "background agent"), result


def _main_report(view: View) -> Reply:
    if len(view.notifications) < BACKGROUND_TASKS:
        waiting = BACKGROUND_TASKS - len(view.notifications)
        return Reply(
            text=f"{waiting} background agent(s) still working; I will write the report "
            "when their results arrive."
        )
    sections = [
        _section(f"{r.input.get('description', 'agent')} (sync)", _child_output(r.text))
        for r in view.results
        if r.name == "Agent" and not r.input.get("run_in_background")
    ]
    sections += [
        _section(f"{summary} (background)", result)
        for summary, result in map(_notification_result, view.notifications[-BACKGROUND_TASKS:])
    ]
    return Reply(text="## Review of shelf\n\n" + "\n\n".join(sections))


MAIN_STEPS: tuple[Step, ...] = (_main_survey, _main_read, _main_delegate)


# -- the policy --------------------------------------------------------------------


class DemoBrain:
    """An emulator policy that plays every agent of the demo from the request alone.

    Stateless, so retries, fan-out order and background timing cannot confuse it.
    """

    def __call__(self, request: EmulatedRequest) -> Reply:
        messages = list(request.body.get("messages", ()))
        fork = _fork_start(messages)
        if fork is not None:
            start, directive = fork
            return self._task(directive).reply(read_view(messages[start:]))
        if request.system.startswith(EXPLORE.system_prompt[:40]):
            explore = next(task for task in TASKS if task.agent_type == "Explore")
            return explore.reply(read_view(messages))
        view = read_view(messages)
        if view.turns < len(MAIN_STEPS):
            return MAIN_STEPS[view.turns](view)
        return _main_report(view)

    @staticmethod
    def _task(directive: str) -> Task:
        for task in TASKS:
            if task.key in directive:
                return task
        return Task(
            key="",
            description="",
            prompt="",
            steps=(lambda view: Reply(text=f"I have no plan for this directive: {directive}"),),
        )
