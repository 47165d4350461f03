"""The agent CLI presets, driven through fake CLIs that print the real CLIs' recorded output.

Each fake is a real executable on PATH, run as a real subprocess by the preset; see
``tests/presetkit.py``. The real Claude Code CLI is driven in ``test_presets_claude.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from orchestrator.config import ConfigError, load_config
from roles.backends import BackendError, CommandBackend, WorkerRequest
from roles.backends.presets import PRESET_NAMES, PresetBackend, WorkerTeam, command_workers
from roles.prompts import Prompt
from tests import presetkit as kit
from tests.runkit import TASK, happy_script, make_workspace

ANSWER = '{"plan": ["Add f"], "assumptions": [], "risk": "low"}'


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    """A HOME of its own and a bin folder first on PATH, for the fakes."""
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    kit.make_home(home)
    bin_dir.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return home, bin_dir


def request(role="proposer", worktree=None, attempt=1) -> WorkerRequest:
    return WorkerRequest(role=role, round="proposal", task_id="bd-9", run_id="run-42", attempt=attempt,
                         prompt=Prompt("shared part\n", "role part\n"), worktree=worktree)


def preset(name: str, **kw) -> PresetBackend:
    return PresetBackend(name, models={"proposer": "claude-sonnet-4-6", "critic_a": "gpt-5"}, **kw)


# ------------------------------------------------------------------ command lines and answers


def test_claude_code_reads_the_result_and_runs_read_only(cli_env):
    home, bin_dir = cli_env
    kit.install_fake(bin_dir, "claude", {"*": [{"stdout": kit.claude_result(ANSWER)}]})
    response = preset("claude-code").call(request())
    assert (response.text, response.error, response.model) == (ANSWER, None, "claude-sonnet-4-6")
    assert response.usage.to_dict() == {"input_tokens": 12, "output_tokens": 40, "cache_read_tokens": 8346,
                                        "cache_write_tokens": 120, "cost_usd": 0.0032}
    [call] = kit.calls(home, "claude")
    assert call["stdin"] == "shared part\nrole part\n"
    argv = call["argv"]
    assert argv[:3] == ["-p", "--output-format", "json"]
    assert argv[argv.index("--model") + 1] == "claude-sonnet-4-6"
    assert argv[argv.index("--tools") + 1] == "Read,Grep,Glob"
    assert argv[argv.index("--permission-mode") + 1] == "dontAsk"
    # Only the user's own settings: a worktree's hooks and MCP servers never load.
    assert argv[argv.index("--setting-sources") + 1] == "user" and "--strict-mcp-config" in argv


def test_codex_reads_the_last_agent_message_and_counts_cached_input_apart(cli_env):
    home, bin_dir = cli_env
    kit.install_fake(bin_dir, "codex", {"*": [{"stdout": kit.codex_events(ANSWER)}]})
    backend = preset("codex")
    response = backend.call(request("critic_a"))
    assert (response.text, response.error, response.model) == (ANSWER, None, "gpt-5")
    assert response.usage.to_dict() == {"input_tokens": 200, "output_tokens": 30, "cache_read_tokens": 1000,
                                        "cache_write_tokens": 0, "cost_usd": 0.0}
    argv = kit.calls(home, "codex")[0]["argv"]
    assert argv[:2] == ["exec", "--json"] and argv[-1] == "-"
    assert argv[argv.index("--sandbox") + 1] == "read-only" and "--ignore-rules" in argv
    assert argv[argv.index("-m") + 1] == "gpt-5"
    # mesh's default models are Claude names: Codex then keeps its own configured model.
    backend.call(request("proposer"))
    assert "-m" not in kit.calls(home, "codex")[1]["argv"]


def test_opencode_answers_with_the_last_step_and_sums_every_step(cli_env):
    home, bin_dir = cli_env
    kit.install_fake(bin_dir, "opencode", {"*": [{"stdout": kit.opencode_events(ANSWER)}]})
    backend = PresetBackend("opencode", models={"proposer": "claude-sonnet-4-6", "critic_a": "openai/gpt-5"})
    response = backend.call(request())
    assert (response.text, response.error, response.model) == (ANSWER, None, "anthropic/claude-sonnet-4-6")
    assert response.usage.to_dict() == {"input_tokens": 20, "output_tokens": 12, "cache_read_tokens": 3174,
                                        "cache_write_tokens": 3174, "cost_usd": pytest.approx(0.0139625)}
    [call] = kit.calls(home, "opencode")
    assert call["argv"] == ["run", "--format", "json", "--model", "anthropic/claude-sonnet-4-6"]
    permission = json.loads(call["env"]["OPENCODE_PERMISSION"])
    assert {permission[tool] for tool in ("edit", "bash", "webfetch", "task", "external_directory")} == {"deny"}
    assert call["env"]["OPENCODE_DISABLE_PROJECT_CONFIG"] == "1"
    backend.call(request("critic_a"))
    assert kit.calls(home, "opencode")[1]["argv"][-1] == "openai/gpt-5"


def test_opencode_needs_provider_slash_model(cli_env):
    kit.install_fake(cli_env[1], "opencode", {"*": [{}]})
    with pytest.raises(BackendError, match=r"models.critic_b for the opencode worker: .*openai/gpt-5"):
        PresetBackend("opencode", models={"critic_b": "gpt-5"})


def test_opencode_refuses_a_worktree_holding_opencode_plugins(cli_env, tmp_path):
    home, bin_dir = cli_env
    kit.install_fake(bin_dir, "opencode", {"*": [{"stdout": kit.opencode_events(ANSWER)}]})
    worktree = tmp_path / "tree"
    (worktree / ".opencode" / "plugin").mkdir(parents=True)
    (worktree / ".opencode" / "plugin" / "x.js").write_text("require('fs').writeFileSync('/tmp/pwned', '1')")
    with pytest.raises(BackendError, match=r"does not run in a worktree holding \.opencode/"):
        PresetBackend("opencode").call(request(worktree=worktree))
    assert kit.calls(home, "opencode") == []


# ------------------------------------------------------------------ environment


def test_keys_reach_the_cli_only_through_worker_env(cli_env, monkeypatch):
    home, bin_dir = cli_env
    kit.install_fake(bin_dir, "claude", {"*": [{"stdout": kit.claude_result(ANSWER)}]})
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-" + "k" * 40)
    monkeypatch.setenv("MESH_SIGNING_KEY", "s" * 40)
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "7")
    preset("claude-code").call(request())
    preset("claude-code", env_names=["ANTHROPIC_API_KEY", "MESH_SIGNING_KEY", "CLAUDE_CODE_MAX_RETRIES"]).call(
        request())
    without, with_key = (call["env"] for call in kit.calls(home, "claude"))
    assert "ANTHROPIC_API_KEY" not in without and without["CLAUDE_CODE_MAX_RETRIES"] == "2"
    assert with_key["ANTHROPIC_API_KEY"] == os.environ["ANTHROPIC_API_KEY"]
    assert with_key["CLAUDE_CODE_MAX_RETRIES"] == "7"  # a default the user may override
    assert "MESH_SIGNING_KEY" not in with_key and with_key["MESH_ROLE"] == "proposer"


def test_a_passed_variable_cannot_undo_opencode_s_permissions(cli_env, monkeypatch):
    home, bin_dir = cli_env
    kit.install_fake(bin_dir, "opencode", {"*": [{"stdout": kit.opencode_events(ANSWER)}]})
    monkeypatch.setenv("OPENCODE_PERMISSION", '{"edit": "allow", "bash": "allow"}')
    PresetBackend("opencode", env_names=["OPENCODE_PERMISSION"]).call(request())
    assert json.loads(kit.calls(home, "opencode")[0]["env"]["OPENCODE_PERMISSION"])["edit"] == "deny"


# ------------------------------------------------------------------ failures


@pytest.mark.parametrize("program, output, needle", [
    ("claude", kit.CLAUDE_NOT_LOGGED_IN, "ANTHROPIC_API_KEY"),
    ("claude", kit.CLAUDE_BAD_KEY, "ANTHROPIC_API_KEY"),
    ("codex", kit.CODEX_BAD_KEY, "CODEX_API_KEY"),
    ("codex", kit.CODEX_NO_KEY, "CODEX_API_KEY"),
    ("opencode", kit.OPENCODE_BAD_KEY, "worker_env"),
    ("opencode", kit.OPENCODE_NO_KEY, "worker_env"),
])
def test_not_logged_in_is_one_line_naming_the_fix(cli_env, program, output, needle):
    kit.install_fake(cli_env[1], program, {"*": [{"stdout": output, "exit": 1}]})
    name = {"claude": "claude-code", "codex": "codex", "opencode": "opencode"}[program]
    with pytest.raises(BackendError) as caught:
        PresetBackend(name).call(request())
    message = str(caught.value)
    assert message.startswith(f"the {name} worker is not logged in (") and needle in message
    assert "\n" not in message


def test_a_key_the_cli_echoes_is_redacted(cli_env, monkeypatch):
    key = "sk-proj-" + "Q7x" * 16
    monkeypatch.setenv("OPENAI_API_KEY", key)
    echoed = kit.codex_failure(f"unexpected status 401 Unauthorized: Incorrect API key provided: {key}.")
    kit.install_fake(cli_env[1], "codex", {"*": [{"stdout": echoed, "exit": 1}, {"stdout": echoed.replace(
        "401 Unauthorized", "500 Internal Server Error"), "exit": 1}]})
    backend = PresetBackend("codex", env_names=["OPENAI_API_KEY"])
    with pytest.raises(BackendError) as caught:
        backend.call(request())
    assert key not in str(caught.value) and "[REDACTED]" in str(caught.value)
    response = backend.call(request())
    assert response.error == "no_response" and key not in response.detail and "[REDACTED]" in response.detail


@pytest.mark.parametrize("program, output", [
    ("claude", kit.CLAUDE_RATE_LIMITED),
    ("codex", kit.CODEX_RATE_LIMITED),
    ("opencode", kit.OPENCODE_RATE_LIMITED),
])
def test_rate_limited_is_no_response_for_the_profile_to_retry(cli_env, program, output):
    kit.install_fake(cli_env[1], program, {"*": [{"stdout": output, "exit": 1}]})
    name = {"claude": "claude-code", "codex": "codex", "opencode": "opencode"}[program]
    response = PresetBackend(name).call(request())
    assert (response.text, response.error) == (None, "no_response")
    assert response.detail.startswith(f"rate_limited: {name}: ")


def test_other_failures_are_no_response_with_the_cli_s_words(cli_env):
    home, bin_dir = cli_env
    kit.install_fake(bin_dir, "claude", {"*": [
        {"stdout": kit.CLAUDE_OVERLOADED, "exit": 1},
        {"stdout": "Segmentation fault\n", "exit": 139},
        {"stdout": "", "stderr": "Error: config file is corrupted\n", "exit": 1},
        {"stdout": kit.claude_result("   ")},
    ]})
    backend = preset("claude-code")
    details = [backend.call(request()) for _ in range(4)]
    assert {r.error for r in details} == {"no_response"}
    assert details[0].detail.startswith("failed: claude-code: API Error: 529 Overloaded.")
    assert details[1].detail == "failed: claude-code: exit status 139: claude-code printed no JSON result:" \
                                " Segmentation fault"
    assert details[2].detail == "failed: claude-code: exit status 1: Error: config file is corrupted"
    assert details[3].detail == "failed: claude-code: claude-code answered with empty text"


def test_an_unknown_model_names_the_setting(cli_env):
    kit.install_fake(cli_env[1], "claude", {"*": [{"stdout": kit.CLAUDE_NO_MODEL, "exit": 1}]})
    with pytest.raises(BackendError, match=r"cannot use model claude-sonnet-4-6 .* check models.<role>"):
        preset("claude-code").call(request())


def test_a_missing_cli_is_one_line_with_the_install_command(cli_env, monkeypatch):
    monkeypatch.setenv("PATH", str(cli_env[1]))
    for name, package in (("claude-code", "@anthropic-ai/claude-code"), ("codex", "@openai/codex"),
                          ("opencode", "opencode-ai")):
        with pytest.raises(BackendError, match=f"not on PATH: npm install -g {package}$"):
            PresetBackend(name)


def test_a_cli_that_hangs_is_no_response_with_the_timeout(cli_env):
    kit.install_fake(cli_env[1], "codex", {"*": [{"sleep": 60}]})
    response = preset("codex", timeout_s=0.5).call(request())
    assert (response.text, response.error) == (None, "no_response")
    assert response.detail.startswith("timeout: the worker ran past 0.5s")


# ------------------------------------------------------------------ one worker per role


def test_each_role_gets_its_own_worker(cli_env, tmp_path):
    home, bin_dir = cli_env
    kit.install_fake(bin_dir, "claude", {"*": [{"stdout": kit.claude_result("from claude")}]})
    kit.install_fake(bin_dir, "codex", {"*": [{"stdout": kit.codex_events("from codex")}]})
    plain = tmp_path / "plain.py"
    plain.write_text("import sys; sys.stdin.read(); print('from the plain worker')")
    team = command_workers(roles=["proposer", "critic_a", "skeptic"], worker="claude-code",
                           workers={"critic_a": "codex", "skeptic": "command"},
                           worker_cmd=f"{sys.executable} {plain}", models={"critic_a": "gpt-5"})
    assert isinstance(team, WorkerTeam) and team.name == "command"
    answers = {role: team.call(request(role)).text for role in ("proposer", "critic_a", "skeptic")}
    assert answers == {"proposer": "from claude", "critic_a": "from codex", "skeptic": "from the plain worker\n"}
    assert kit.calls(home, "codex")[0]["argv"][-3:] == ["-m", "gpt-5", "-"]


def test_one_worker_for_every_role_is_that_worker(cli_env, tmp_path):
    kit.install_fake(cli_env[1], "codex", {"*": [{}]})
    assert isinstance(command_workers(roles=["proposer"], worker="codex"), PresetBackend)
    assert isinstance(command_workers(roles=["proposer"], worker_cmd=sys.executable), CommandBackend)
    with pytest.raises(BackendError, match="needs --worker NAME"):
        command_workers(roles=["proposer"])
    with pytest.raises(BackendError, match="role skeptic uses the plain command worker, but worker_cmd is not set"):
        command_workers(roles=["proposer", "skeptic"], worker="codex", workers={"skeptic": "command"})


# ------------------------------------------------------------------ configuration


def test_config_worker_and_workers(tmp_path):
    (tmp_path / "mesh.toml").write_text('worker = "claude-code"\n[workers]\ncritic_a = "codex"\n')
    config = load_config(tmp_path)
    assert (config.backend, config.worker, config.workers) == ("command", "claude-code", {"critic_a": "codex"})
    (tmp_path / "mesh.toml").write_text('backend = "anthropic"\nworker = "codex"\n')
    assert load_config(tmp_path).backend == "anthropic"  # an explicit backend stays


@pytest.mark.parametrize("text, message", [
    ('worker = "claud"\n', "invalid value for 'worker': Value error, unknown worker 'claud'"),
    ('[workers]\ncritic_z = "codex"\n', "unknown role 'critic_z'"),
    ('[workers]\ncritic_a = "aider"\n', "unknown worker 'aider' for critic_a"),
])
def test_config_rejects_unknown_workers_in_one_line(tmp_path, text, message):
    (tmp_path / "mesh.toml").write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(tmp_path)
    assert "\n" not in str(caught.value)


def test_preset_names_match_the_cli_choice():
    from orchestrator.cli.main import _run_options

    import click

    @_run_options
    def command(**kw):
        return kw

    option = next(p for p in click.command()(command).params if p.name == "worker")
    assert tuple(option.type.choices) == PRESET_NAMES


# ------------------------------------------------------------------ mesh run --worker


def _role_plan(program_output) -> dict[str, list[dict]]:
    """The happy script's answers, each printed the way ``program_output`` formats a CLI's output."""
    return {role: [{"stdout": program_output(entry["text"])} for entry in entries]
            for role, entries in happy_script().items()}


@pytest.mark.parametrize("name, program, output", [
    ("codex", "codex", kit.codex_events),
    ("opencode", "opencode", kit.opencode_events),
])
def test_mesh_run_with_a_preset_closes_the_task(tmp_path, name, program, output):
    ws = make_workspace(tmp_path)
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    kit.make_home(home)
    kit.install_fake(bin_dir, program, _role_plan(output))
    env = {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    res = ws.mesh("run", "--label", "plan:demo", "--worker", name, "--repo", str(ws.repo), "--json", env=env)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["outcome"] == "closed"
    made = kit.calls(home, program)
    assert len(made) == 11 and {c["role"] for c in made} == set(happy_script())
    # Workers run sandboxed in the task's worktree (never the repository itself).
    assert {Path(c["cwd"]).name for c in made} == {TASK}
    assert report["usage"]["input_tokens"] > 0


def test_mesh_run_worker_usage_errors_exit_2(tmp_path):
    ws = make_workspace(tmp_path)
    # A PATH with the tools mesh itself needs, and no agent CLI on it.
    tools = tmp_path / "tools"
    tools.mkdir()
    for program in ("git", "bwrap"):
        (tools / program).symlink_to(shutil.which(program))
    env = {"PATH": str(tools)}
    res = ws.mesh("run", "--label", "plan:demo", "--worker", "codex", "--repo", str(ws.repo), env=env)
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == ["mesh: the codex worker needs `codex`, which is not on PATH:"
                                               " npm install -g @openai/codex"]
    res = ws.mesh("run", "--label", "plan:demo", "--worker", "codex", "--worker-cmd", "x", "--repo", str(ws.repo))
    assert res.exit_code == 2 and "give --worker NAME or --worker-cmd CMD, not both" in res.stderr
    res = ws.mesh("run", "--label", "plan:demo", "--worker", "codex", "--backend", "replay", "--repo", str(ws.repo))
    assert res.exit_code == 2 and "cannot run with --backend replay" in res.stderr


def test_mesh_drain_takes_the_worker_too(tmp_path):
    ws = make_workspace(tmp_path)
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    kit.make_home(home)
    kit.install_fake(bin_dir, "codex", _role_plan(kit.codex_events))
    env = {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    res = ws.mesh("drain", "--label", "plan:demo", "--ids", TASK, "--worker", "codex", "--repo", str(ws.repo),
                  "--json", env=env)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert (summary["event"], summary["closed"], summary["landings"]) == ("summary", [TASK], 1)
    assert summary["calls"] == len(kit.calls(home, "codex")) == 11


def test_a_budget_counts_the_cost_the_cli_reports(tmp_path):
    ws = make_workspace(tmp_path)
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    kit.make_home(home)
    kit.install_fake(bin_dir, "claude", _role_plan(lambda text: kit.claude_result(text, cost=0.004)))
    config = tmp_path / "mesh.toml"
    config.write_text('worker = "claude-code"\n' + (ws.repo / "mesh.toml").read_text() + "\n[budget]\nmax_usd = 0.01\n")
    env = {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    res = ws.mesh("run", "--label", "plan:demo", "--repo", str(ws.repo), "--config", str(config), "--json", env=env)
    assert res.exit_code == 3, res.output
    report = json.loads(res.stdout)
    assert (report["outcome"], report["block_reason"]) == ("blocked", "budget_exceeded")
    # The proposal ($0.004) and the three critiques asked at once ($0.012 in all): the run is
    # over budget, so the synthesis is never asked.
    assert [c["role"] for c in kit.calls(home, "claude")].count("synthesizer") == 0
    assert len(kit.calls(home, "claude")) == 4
