"""A background child's notification is written when its parent reads it, with the text
it had when the child finished."""

from __future__ import annotations

from pathlib import Path

from forkagent._orchestration.runtime import RuntimeOptions, _ChildReport
from forkagent._orchestration.tasks import TaskResult
from forkagent.messages import TextBlock, UserMessage
from forkagent.requests import ModelRequest
from forkagent.usage import Usage

from ._support import make_agent, tree_model


async def test_a_delivered_report_reads_as_the_result_it_was_made_from(tmp_path: Path) -> None:
    def fork(request: ModelRequest) -> str:
        return f"Scope: done with {request.messages[-1].text[-6:]}"

    model = tree_model(["Planned.", "Read the reports."], fork=fork)
    options = RuntimeOptions(resume_on_notification=False)
    async with make_agent(model, tmp_path, options=options).session() as session:
        await session.send("Plan.")
        tasks = await session.fork(["task one", "task two"], background=True)
        results = [await task.wait() for task in tasks]
        waiting = list(session.root.inbox)
        assert [r.task_id for r in waiting] == [t.id for t in tasks]
        expected = [r.block.text for r in waiting]
        for task, result, text in zip(tasks, results, expected, strict=True):
            # Read from the text, not rebuilt the way the report builds it: each child's own
            # id, status, label and output, as it finished.
            assert text.splitlines()[1:4] == [
                f"task: {task.id}",
                "status: completed",
                f"summary: {task.label}",
            ]
            assert result.output.startswith("Scope: done with ")
            assert text.endswith(f"result:\n{result.output}\n</task-notification>")
        assert await session.answer_notifications()
    delivered = [m for m in session.messages if isinstance(m, UserMessage)][-1]
    assert [b.text for b in delivered.content if isinstance(b, TextBlock)][-2:] == expected


def test_a_report_names_its_worktree_and_error() -> None:
    result = TaskResult(
        task_id="named-3-abcdef",
        status="failed",
        output="",
        usage=Usage(input_tokens=10, output_tokens=2),
        turns=2,
        seconds=1.25,
        error="ToolError: no",
        worktree_path="/tmp/wt",
        worktree_branch="forkagent/named-3",
    )
    text = _ChildReport("Refactor", result).block.text
    assert text.splitlines()[1:4] == [
        "task: named-3-abcdef",
        "status: failed",
        "summary: Refactor",
    ]
    assert "\nworktree: /tmp/wt (branch forkagent/named-3)\nerror: ToolError: no\n" in text
    assert text.endswith("result:\n(no output)\n</task-notification>")
