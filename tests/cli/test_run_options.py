"""``forkagent run``'s inputs, defaults and errors, and ``forkagent models``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forkagent.cli import app

runner = CliRunner()


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["run", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_the_prompt_can_come_from_stdin(tmp_path: Path) -> None:
    code, out, _ = run("-", "--model", "test:echo", "--cwd", str(tmp_path), stdin="from a pipe\n")
    assert code == 0
    assert "from a pipe" in out


def test_an_empty_stdin_prompt_is_a_usage_error(tmp_path: Path) -> None:
    code, _out, err = run("-", "--model", "test:echo", "--cwd", str(tmp_path), stdin="  \n")
    assert code == 2
    assert "empty" in err


def test_the_answer_streams_to_stdout_once(tmp_path: Path) -> None:
    code, out, _ = run(
        "Say hello to the team", "--model", "emulator:claude-sonnet-4-6", "--cwd", str(tmp_path)
    )
    assert code == 0
    assert out.count("Understood: Say hello to the team") == 1


def test_emulator_runs_say_once_that_replies_are_scripted(tmp_path: Path) -> None:
    _, _, err = run("hi", "--model", "emulator:claude-sonnet-4-6", "--cwd", str(tmp_path))
    assert err.count("scripted") == 1


def test_a_model_typo_gets_a_suggestion_and_errors_keep_their_brackets(tmp_path: Path) -> None:
    code, _, err = run("hi", "--model", "antropic:claude-sonnet-4-6", "--cwd", str(tmp_path))
    assert code == 1
    assert err.startswith("error:")
    assert "did you mean 'anthropic'" in err


def test_an_unknown_model_on_a_known_provider_warns_about_its_price(tmp_path: Path) -> None:
    _, _, err = run("hi", "--model", "emulator:claude-sonet-4-6", "--cwd", str(tmp_path))
    assert "no price or cache rules are known" in err
    assert "did you mean emulator:claude-sonnet-4-6" in err


def test_with_json_an_error_is_a_json_object(tmp_path: Path) -> None:
    code, out, _ = run("hi", "--model", "nowhere:x", "--json", "--cwd", str(tmp_path))
    assert code == 1
    error = json.loads(out)["error"]
    assert error["type"] == "UnknownModelError"
    assert "nowhere" in error["message"]


def test_claude_codes_spelling_of_a_mode_is_accepted_and_a_bad_one_lists_the_valid(
    tmp_path: Path,
) -> None:
    assert (
        run(
            "hi", "--model", "test:echo", "--permission-mode", "acceptEdits", "--cwd", str(tmp_path)
        )[0]
        == 0
    )
    code, _, err = run(
        "hi", "--model", "test:echo", "--permission-mode", "yolo", "--cwd", str(tmp_path)
    )
    assert code == 2
    assert "default, accept_edits, plan, bypass" in err


def test_the_system_prompt_option_replaces_the_main_agents(tmp_path: Path) -> None:
    from forkagent.state import read_transcript, transcript_path

    args = ("hi", "--model", "test:echo", "--system-prompt", "You are terse.", "--json")
    code, out, _ = run(*args, "--cwd", str(tmp_path))
    assert code == 0
    main = json.loads(out)["agents"][0]["id"]
    system = read_transcript(transcript_path(main, main)).header.system
    assert isinstance(system, str)
    assert system.startswith("You are terse.\n")


def test_allowed_tools_refuses_the_others_and_the_refusals_are_listed(tmp_path: Path) -> None:
    from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator

    emulator = Emulator()
    write = ToolCall("Write", {"file_path": str(tmp_path / "out.txt"), "content": "x"})
    emulator.script(Reply(tool_calls=(write,)), "gave up", agent="main")
    with use_emulator(emulator):
        code, _, err = run(
            "write it",
            "--model",
            "emulator:claude-sonnet-4-6",
            "--allowed-tools",
            "Read,Glob",
            "--permission-mode",
            "bypass",
            "--cwd",
            str(tmp_path),
        )
    assert code == 0
    assert not (tmp_path / "out.txt").exists()
    assert "1 tool call(s) were refused" in err
    assert "Write" in err


def test_model_and_limits_come_from_the_environment_and_config_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_config = Path.home() / ".config" / "forkagent" / "config.toml"
    user_config.parent.mkdir(parents=True, exist_ok=True)
    user_config.write_text('model = "emulator:claude-sonnet-4-6"\nmax_turns = 3\n')
    code, out, _ = run("hi", "--json", "--cwd", str(tmp_path))
    assert code == 0
    assert json.loads(out)["agents"][0]["model"] == "emulator:claude-sonnet-4-6"
    monkeypatch.setenv("FORKAGENT_MODEL", "test:echo")
    code, out, _ = run("hi", "--json", "--cwd", str(tmp_path))
    assert code == 0
    assert json.loads(out)["agents"][0]["model"].startswith("test:")


def test_a_project_config_cannot_loosen_the_permission_mode(tmp_path: Path) -> None:
    project = tmp_path / ".forkagent"
    project.mkdir()
    (project / "config.toml").write_text('permission_mode = "bypass"\n')
    code, _, err = run("hi", "--model", "test:echo", "--cwd", str(tmp_path))
    assert code == 1
    assert "cannot set permission_mode" in err


def test_run_as_a_named_agent_takes_its_prompt_and_tools(tmp_path: Path) -> None:
    agents = tmp_path / ".forkagent" / "agents"
    agents.mkdir(parents=True)
    (agents / "terse.md").write_text(
        "---\nname: terse\ndescription: short answers\ntools: Read\npermissionMode: plan\n---\n"
        "Answer in one word.\n"
    )
    code, _out, _ = run(
        "hi", "--model", "test:echo", "--agent", "terse", "--json", "--cwd", str(tmp_path)
    )
    assert code == 0
    code, _, err = run("hi", "--model", "test:echo", "--agent", "nobody", "--cwd", str(tmp_path))
    assert code == 1
    assert "known:" in err


def test_models_lists_prices_cache_minimums_and_deprecation() -> None:
    result = runner.invoke(app, ["models", "anthropic", "--json"])
    assert result.exit_code == 0
    models = {m["model"]: m for m in json.loads(result.stdout)["models"]}
    assert all(name.startswith("anthropic:") for name in models)
    sonnet = models["anthropic:claude-sonnet-4-6"]
    assert sonnet["input"] > 0
    assert sonnet["min_cache_tokens"] > 0
    assert any(m["deprecated"] for m in models.values())


def test_help_has_no_type_tags_on_flags() -> None:
    result = runner.invoke(app, ["run", "--help"])
    assert "PROMPT" in result.stdout
    assert "<bool>" not in result.stdout


def test_demo_twice_in_one_workdir_explains_instead_of_a_traceback(tmp_path: Path) -> None:
    first = runner.invoke(app, ["demo", "--fast", "--json", "--workdir", str(tmp_path)])
    assert first.exit_code == 0
    figures = json.loads(first.stdout)["comparison"]
    assert all(len(str(figures[k]).split(".")[-1]) <= 4 for k in ("this_run", "lower_bound"))
    again = runner.invoke(app, ["demo", "--fast", "--workdir", str(tmp_path)])
    assert again.exit_code == 1
    assert "left from an earlier demo" in again.stderr
    assert again.exception is None or isinstance(again.exception, SystemExit)


def test_a_result_shows_itself_in_a_notebook() -> None:
    from forkagent import Agent

    result = Agent(model="test:echo", subagents=False).run_sync("hello")
    shown = result._repr_markdown_()
    assert shown.startswith("**completed**")
    assert "| agent | kind |" in shown


def test_ps_shows_start_times_and_a_tree_and_stop_and_resume_speak_json(tmp_path: Path) -> None:
    from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator

    emulator = Emulator()
    fork = ToolCall("Agent", {"prompt": "check it", "fork": True})
    emulator.script(Reply(tool_calls=(fork,)), "done", agent="main")
    with use_emulator(emulator):
        args = ["--model", "emulator:claude-sonnet-4-6", "--cwd", str(tmp_path), "--json"]
        main = json.loads(runner.invoke(app, ["run", "go", *args]).stdout)["agents"][0]["id"]
        resumed = runner.invoke(app, ["resume", main, "and again", "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["status"] == "completed"
    listing = runner.invoke(app, ["ps", "--tree"]).stdout
    # Without a terminal the gate is closed: the `fork: true` call ran a general-purpose agent.
    lines = [line for line in listing.splitlines() if "general-purpose-" in line or main in line]
    assert lines[0].startswith(main)
    assert any(
        line.startswith("  general-purpose-") for line in lines
    )  # the child, indented under it
    assert "STARTED" in listing
    stopped = json.loads(runner.invoke(app, ["stop", main, "--json"]).stdout)
    assert stopped == {"agent": main, "outcome": "already_finished", "status": "completed"}
