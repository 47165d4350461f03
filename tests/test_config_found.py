"""Configuration and tracker found the way git finds a repository, from any folder of the project.

A run started in a subfolder reads the project's ``mesh.toml`` (and says which file it
read); ``--repo PATH`` from another folder means PATH's tracker; "no tracker" says where it
looked; a global option given after the command says where it goes. Real repos, a real
subprocess of mesh where the current folder matters.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.config import load_config
from orchestrator.workspace import config_folders
from tests.runkit import TASK, happy_script, make_workspace

MESH = [sys.executable, "-c", "from orchestrator.cli.main import main; main()"]
ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MESH_DB", "BD_PLAN_LABEL")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_a_run_from_a_subfolder_reads_the_projects_mesh_toml_and_names_it(tmp_path):
    ws = make_workspace(tmp_path)
    script = ws.write_script(happy_script())
    # No --repo, --db or --config: the tracker, the repository and mesh.toml are all found from tests/.
    done = subprocess.run([*MESH, "--actor", "tester", "run", "--label", "plan:demo", "--backend", "replay",
                           "--script", str(script)], cwd=ws.repo / "tests", env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("orch_preflight ") and lines[1] == f"configuration: {ws.repo / 'mesh.toml'}"
    # The demo's allowlist was read: the validation command ran (it is allowed nowhere else).
    assert "  validation: python3 -m unittest discover -s tests -t . -> pass" in done.stdout


def test_config_folders_stop_at_the_repository_or_the_workspace(tmp_path):
    project = tmp_path / "project"
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    # Outside any repository or workspace only the folder itself counts.
    assert config_folders(deep) == [deep] and load_config(deep).source == "defaults"
    (project / ".git").mkdir()
    assert config_folders(deep) == [deep, deep.parent, project]
    # A workspace above the repository (one tracker for several repositories) widens the search.
    (tmp_path / ".beads").mkdir()
    assert config_folders(deep)[-1] == tmp_path
    (tmp_path / "mesh.toml").write_text("review_max_cycles = 7\n")
    # A pyproject.toml without [tool.mesh] on the way up does not stop the search; one with it does.
    (deep / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    config = load_config(deep)
    assert (config.review_max_cycles, config.source) == (7, str(tmp_path / "mesh.toml"))
    (deep.parent / "pyproject.toml").write_text("[tool.mesh]\nreview_max_cycles = 5\n")
    config = load_config(deep)
    assert (config.review_max_cycles, config.source) == (5, f"{deep.parent / 'pyproject.toml'} [tool.mesh]")
    # Command-line overrides keep the source.
    assert config.with_overrides(integrate=False).source == config.source


def test_worker_cmd_alone_selects_the_command_backend_and_conflicts_are_named(tmp_path):
    from orchestrator.runner import RunError, RunOptions, load_run_config

    assert load_run_config(RunOptions(repo=tmp_path, worker_cmd="agent --stdin")).backend == "command"
    try:
        load_run_config(RunOptions(repo=tmp_path, worker_cmd="agent", backend="replay"))
    except RunError as exc:
        assert exc.exit_code == 2 and "--worker-cmd runs a command worker" in str(exc)
    else:
        raise AssertionError("--worker-cmd with --backend replay was accepted")


def test_report_with_repo_from_another_folder_uses_that_repos_tracker(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    code, _, res = ws.run(happy_script())
    assert code == 0, res.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("MESH_DB", raising=False)
    out = elsewhere / "page.html"
    done = CliRunner().invoke(cli, ["report", TASK, "--repo", str(ws.repo), "-o", str(out)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert TASK in out.read_text()


def test_no_tracker_says_where_it_looked_and_how_to_name_one(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    monkeypatch.delenv("MESH_DB", raising=False)
    repo = tmp_path / "repo"
    repo.mkdir()
    done = CliRunner().invoke(cli, ["report", "x-1", "--repo", str(repo)], catch_exceptions=False)
    assert done.exit_code == 4
    message = done.stderr
    assert f"no .beads/ folder in {repo} or any folder above it nor in {empty} or any folder above it" in message
    assert "cd into the project's folder" in message and "mesh --db PATH/.beads/mesh.db" in message
    assert "init" not in message
    shown = CliRunner().invoke(cli, ["show", "x-1"], catch_exceptions=False)
    assert shown.exit_code == 4 and f"in {empty} or any folder above it" in shown.stderr and "init" not in shown.stderr


def test_a_global_option_after_the_command_says_where_it_goes():
    done = CliRunner().invoke(cli, ["run", "--label", "plan:x", "--db", "team.db"], prog_name="mesh")
    assert done.exit_code == 2
    assert "--db is an option of mesh itself, not of 'mesh run': give it before the command, as in:" \
           " mesh --db team.db run --label plan:x" in done.stderr
    done = CliRunner().invoke(cli, ["status", "--actor=me", "--label", "plan:x"], prog_name="mesh")
    assert done.exit_code == 2 and "as in: mesh --actor=me status --label plan:x" in done.stderr
    # Other unknown options keep click's own message.
    done = CliRunner().invoke(cli, ["run", "--nope"])
    assert done.exit_code == 2 and "No such option '--nope'" in done.stderr
