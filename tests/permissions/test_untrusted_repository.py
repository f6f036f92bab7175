"""A cloned repository cannot act through forkagent: each of issue 14's five ways, closed."""

from __future__ import annotations

import json
import logging
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forkagent import Agent, ConfigurationError, Session
from forkagent.cli import app
from forkagent.messages import ToolResultBlock, UserMessage
from forkagent.permissions import PermissionPolicy
from forkagent.permissions.trust import is_trusted, trust
from forkagent.state import read_transcript, state_dir, transcript_path
from forkagent.testing import ScriptedModel, reply, tool_call
from forkagent.tools import EnvironmentPolicy

runner = CliRunner()


def results(model: ScriptedModel) -> list[ToolResultBlock]:
    """Every tool result the model was sent, in order."""
    seen: dict[str, ToolResultBlock] = {}
    for request in model.requests:
        for message in request.messages:
            if isinstance(message, UserMessage):
                for block in message.tool_results:
                    seen[block.tool_use_id] = block
    return list(seen.values())


# -- 1. resume keeps the permission mode -------------------------------------------------


async def test_resume_keeps_plan_mode_and_loosening_is_explicit(tmp_path: Path) -> None:
    from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator

    target = tmp_path / "out.txt"

    def write(content: str) -> Reply:
        return Reply(
            tool_calls=(ToolCall("Write", {"file_path": str(target), "content": content}),)
        )

    emulator = Emulator()
    with use_emulator(emulator):
        emulator.script(write("x"), "planned", agent="main")
        agent = Agent(
            model="emulator:claude-sonnet-4-6", cwd=tmp_path, permissions=PermissionPolicy("plan")
        )
        async with agent.session() as session:
            await session.send("plan it")
            root = session.root.id
        path = transcript_path(root, root)
        assert not target.exists()

        emulator.script(write("y"), "ok", agent="main")
        async with Session.resume(Agent(), path) as resumed:  # Agent() alone trusts everything
            result = await resumed.send("now write it")
        assert not target.exists()  # yet the recorded plan mode holds
        refusals = [
            b.text for m in result.messages if isinstance(m, UserMessage) for b in m.tool_results
        ]
        assert any("plan mode" in text for text in refusals)

        with pytest.raises(ConfigurationError, match="loosen"):
            Session.resume(Agent(permissions=PermissionPolicy("bypass")), path)
        emulator.script(write("z"), "ok", agent="main")
        policy = PermissionPolicy("bypass")
        async with Session.resume(Agent(permissions=policy), path, loosen=True) as s:
            await s.send("write it, I mean it")
    assert target.read_text() == "z"


def test_the_cli_resume_without_a_terminal_refuses_what_run_refuses(tmp_path: Path) -> None:
    from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator

    target = tmp_path / "out.txt"
    emulator = Emulator()
    write = Reply(tool_calls=(ToolCall("Write", {"file_path": str(target), "content": "x"}),))
    emulator.script(write, "refused, planning instead", write, "done", agent="main")
    with use_emulator(emulator):
        args = ["--model", "emulator:claude-sonnet-4-6", "--cwd", str(tmp_path), "--json"]
        first = runner.invoke(app, ["run", "write", *args, "--permission-mode", "plan"])
        main = json.loads(first.stdout)["agents"][0]["id"]
        resumed = runner.invoke(app, ["resume", main, "write it now"])
        looser = runner.invoke(app, ["resume", main, "x", "--permission-mode", "bypass"])
    assert not target.exists()
    assert resumed.exit_code == 0, resumed.output
    assert looser.exit_code == 1
    assert "--loosen" in looser.output


# -- 2. repository hooks wait for trust ------------------------------------------------------


def project_with_hook(root: Path, command: str) -> Path:
    settings = root / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    hook = {"type": "command", "command": command}
    settings.write_text(
        json.dumps({"hooks": {"PreToolUse": [{"matcher": "Glob", "hooks": [hook]}]}})
    )
    return root


async def run_one_glob(root: Path, **agent: object) -> None:
    model = ScriptedModel([reply(tool_call("Glob", pattern="*")), reply("done")])
    await Agent(model=model, cwd=root, subagents=False, **agent).run("look")  # type: ignore[arg-type]


async def test_project_hooks_run_only_once_the_directory_is_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "hook-ran"
    root = project_with_hook(tmp_path / "repo", f"touch {marker}")
    with caplog.at_level(logging.WARNING, logger="forkagent.trust"):
        await run_one_glob(root)
    assert not marker.exists()
    assert "forkagent trust" in caplog.text
    trust(root)
    assert is_trusted(root / "sub" / "dir")  # a trusted directory covers what is below it
    await run_one_glob(root)
    assert marker.exists()


async def test_plan_mode_never_runs_a_hook_that_can_write(tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    root = project_with_hook(tmp_path / "repo", f"touch {marker}")
    await run_one_glob(root, trust_project=True, permissions=PermissionPolicy("plan"))
    assert not marker.exists()


async def test_agent_file_hooks_wait_for_trust_but_the_agent_loads(tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    root = tmp_path / "repo"
    agents = root / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "helper.md").write_text(
        "---\nname: helper\ndescription: helps\nhooks:\n  PreToolUse:\n    - matcher: Glob\n"
        f"      hooks:\n        - type: command\n          command: touch {marker}\n---\nHelp.\n"
    )
    model = ScriptedModel(
        [
            reply(tool_call("Agent", prompt="look", subagent_type="helper")),
            reply(tool_call("Glob", pattern="*")),
            reply("looked"),
            reply("done"),
        ]
    )
    result = await Agent(model=model, cwd=root).run("delegate")
    assert any(a.label == "helper" for a in result.agents)
    assert not marker.exists()


def test_trust_on_the_command_line(tmp_path: Path) -> None:
    root = project_with_hook(tmp_path / "repo", "true")
    done = runner.invoke(app, ["trust", str(root)])
    assert done.exit_code == 0
    assert ".claude/settings.json" in done.stdout
    assert str(root.resolve()) in runner.invoke(app, ["trust", "--list"]).stdout
    assert runner.invoke(app, ["trust", str(root), "--revoke"]).exit_code == 0
    assert not is_trusted(root)
    mode = stat.S_IMODE((state_dir() / "trust.json").stat().st_mode)
    assert mode == 0o600


# -- 3. reads are confined ---------------------------------------------------------------


async def test_reads_outside_the_tree_and_through_symlinks_are_not_free(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("private notes")
    root = tmp_path / "repo"
    root.mkdir()
    (root / "link.txt").symlink_to(outside / "notes.txt")
    model = ScriptedModel(
        [
            reply(
                tool_call("Read", file_path=str(outside / "notes.txt")),
                tool_call("Read", file_path="link.txt"),
            ),
            reply("done"),
        ]
    )
    await Agent(model=model, cwd=root, permissions=PermissionPolicy("plan")).run("read")
    texts = [r.text for r in results(model)]
    assert all("outside the working directory" in t for t in texts)
    assert not any("private notes" in t for t in texts)

    allowed = ScriptedModel([reply(tool_call("Read", file_path="link.txt")), reply("done")])
    policy = PermissionPolicy("plan", add_dirs=(outside,))
    await Agent(model=allowed, cwd=root, permissions=policy).run("read")
    assert "private notes" in results(allowed)[0].text


async def test_credential_files_are_refused_even_inside_the_tree_and_in_bypass(
    tmp_path: Path,
) -> None:
    (tmp_path / ".env").write_text("API_TOKEN=abcdef123456\n")
    (tmp_path / "app.py").write_text("print('API_TOKEN')\n")
    model = ScriptedModel(
        [
            reply(tool_call("Read", file_path=".env"), tool_call("Grep", pattern="API_TOKEN")),
            reply("done"),
        ]
    )
    await Agent(model=model, cwd=tmp_path, permissions=PermissionPolicy("bypass")).run("look")
    read, grep = results(model)
    assert "credentials file" in read.text
    assert "abcdef123456" not in grep.text
    assert "app.py" in grep.text


# -- 4. secrets out of the model's reach ----------------------------------------------------------


async def test_the_shell_sees_no_api_key_and_a_leaked_one_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-ant-test-0123456789abcdef"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("SHOP_DB_PASSWORD", "hunter2-hunter2")
    monkeypatch.setenv("SHOP_NAME", "corner shop")
    (tmp_path / "leak.txt").write_text(f"key={key}\n")
    model = ScriptedModel(
        [reply(tool_call("Bash", command="printenv; cat leak.txt")), reply("done")]
    )
    agent = Agent(model=model, cwd=tmp_path, permissions=PermissionPolicy("bypass"))
    async with agent.session() as session:
        await session.send("show me")
        root = session.root.id
    [output] = results(model)
    assert key not in output.text
    assert "hunter2" not in output.text
    assert "corner shop" in output.text
    assert "[redacted $ANTHROPIC_API_KEY]" in output.text
    transcript = transcript_path(root, root).read_text()
    assert key not in transcript

    kept = ScriptedModel(
        [reply(tool_call("Bash", command="printenv SHOP_DB_PASSWORD")), reply("ok")]
    )
    policy = EnvironmentPolicy.keeping("SHOP_DB_PASSWORD")
    await Agent(
        model=kept, cwd=tmp_path, env_policy=policy, permissions=PermissionPolicy("bypass")
    ).run("x")
    assert "hunter2-hunter2" in results(kept)[0].text


# -- 5. worktree isolation holds against absolute paths -------------------------------------------


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


async def test_an_isolated_child_cannot_write_the_parents_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(
        repo,
        "-c",
        "user.name=T",
        "-c",
        "user.email=t@x",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "i",
    )
    (repo / "shared.txt").write_text("original\n")
    target = repo.resolve() / "shared.txt"

    script = ScriptedModel(
        [
            reply(
                tool_call(
                    "Agent", prompt="edit it", subagent_type="general-purpose", isolation="worktree"
                )
            ),
            reply(tool_call("Write", file_path=str(target), content="leaked\n")),
            reply("child done"),
            reply("parent done"),
        ]
    )
    await Agent(model=script, cwd=repo, permissions=PermissionPolicy("bypass")).run("delegate")
    assert target.read_text() == "original\n"
    refusal = results(script)[0].text
    assert "your own worktree" in refusal
    report = results(script)[-1].text
    assert f"Write {target}" in report


# -- and the state directory is private ---------------------------------------------------------------


async def test_every_folder_of_the_state_directory_is_private(tmp_path: Path) -> None:
    async with Agent(model=ScriptedModel([reply("hi")]), cwd=tmp_path).session() as session:
        await session.send("hi")
        root = session.root.id
    path = transcript_path(root, root)
    assert read_transcript(path).header.agent_id == root
    for folder in (path.parent, path.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
