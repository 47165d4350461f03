"""``mesh init`` on fresh clones of real projects (Node, Go, Rust, hatch-vcs): it writes a
``mesh.toml`` for what it finds, creates the tracker and fills ``.gitignore``, and ``mesh run``
then works with no further editing; dependencies not yet installed are named with their
install command; an existing ``mesh.toml`` is kept."""

from __future__ import annotations

import json
import shutil
import tomllib

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.conftest import BEADS_REAL
from tests.runkit import happy_script, r, synthesis
from tests.toolchainkit import commit_all, git, go_project, hatch_project, node_project, rust_project, tool_env
from tracker.store import Tracker


@pytest.fixture(scope="session")
def templates(tmp_path_factory):
    return tmp_path_factory.mktemp("init-templates")


def mesh(env: dict, *args: str):
    return CliRunner().invoke(cli, ["--actor", "tester", *args], env=env, catch_exceptions=False)


def clone(repo, tmp_path):
    """A fresh clone of ``repo`` with the checkout's ignored installs and generated files beside."""
    fresh = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(fresh))
    for ignored in git(repo, "ls-files", "--others", "--ignored", "--exclude-standard", "--directory").split("\n"):
        if ignored and ignored not in (".venv/",):
            source, target = repo / ignored, fresh / ignored
            target.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree(source, target, symlinks=True) if source.is_dir() else shutil.copy2(source, target))
    return fresh


def projects(kind, templates, tmp_path):
    if kind == "node":
        return node_project(templates, tmp_path), tool_env(), "npm test", {"extra.js": "exports.x = 1;\n"}
    if kind == "go":
        repo, env = go_project(tmp_path)
        return repo, env, "go test ./...", {"extra.go": "package gop\n\n// Extra is one.\nconst Extra = 1\n"}
    if kind == "rust":
        return rust_project(tmp_path), tool_env(), "cargo test", {"src/extra.rs": "pub const EXTRA: u8 = 1;\n"}
    if kind == "plain":
        # python3 where the sandbox shows no python (this machine's is a pyenv shim under HOME).
        from orchestrator.toolchains.python import _sandbox_python

        return plain_project(tmp_path), tool_env(), f"{_sandbox_python()} -m unittest", {"extra.py": "EXTRA = 1\n"}
    return hatch_project(tmp_path), tool_env(), "python -m unittest", {"src/stamped/extra.py": "EXTRA = 1\n"}


def plain_project(tmp_path):
    """Python files and a unittest test, no manifest and no environment: mesh's own Python."""
    repo = tmp_path / "plain"
    (repo / "tests").mkdir(parents=True)
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_calc.py").write_text("import unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n"
                                                 "    def test_add(self):\n        self.assertEqual(calc.add(1, 2), 3)\n")
    commit_all(repo, "A calculator")
    return repo


@pytest.mark.parametrize("kind", ["node", "go", "rust", "python", "plain"])
def test_mesh_init_leaves_a_project_mesh_run_works_in(kind, templates, tmp_path):
    repo, env, check, files = projects(kind, templates, tmp_path)
    env = {**env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    if kind == "python":
        fresh = repo  # its .venv holds an editable install of this very checkout
    else:
        fresh = clone(repo, tmp_path)
    result = mesh(env, "init", "--repo", str(fresh), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["check"] == [check] and check in report["allow"]
    config = tomllib.loads((fresh / "mesh.toml").read_text())
    assert config["validation"]["check"] == [check]
    assert ".beads/*.db*" in (fresh / ".gitignore").read_text()
    db = fresh / ".beads" / "mesh.db"
    with Tracker(db, actor="tester") as tracker:
        task = tracker.create("Add extra", labels=["plan:first"], description="d", design="d",
                              acceptance_criteria="a", notes="n")["id"]
    git(fresh, "add", "mesh.toml", ".gitignore")
    commit_all(fresh, "mesh configuration")
    for path, text in files.items():
        (fresh / path).write_text(text)
    git(fresh, "add", "-N", *files)
    patch = git(fresh, "diff")
    git(fresh, "reset", "-q", "--hard")
    git(fresh, "clean", "-fdq")
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(patch, [check]))
    (tmp_path / "script.json").write_text(json.dumps(script))
    done = mesh(env, "--db", str(db), "run", "--label", "plan:first", "--backend", "replay", "--script",
                str(tmp_path / "script.json"), "--repo", str(fresh), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["outcome"] == "closed" and task


def test_mesh_init_names_the_install_of_dependencies_not_installed_and_keeps_a_config(templates, tmp_path):
    repo = node_project(templates, tmp_path)
    shutil.rmtree(repo / "node_modules")
    (repo / "mesh.toml").write_text("# mine\n")
    result = mesh(tool_env(XDG_CACHE_HOME=str(tmp_path / "cache")), "init", "--repo", str(repo))
    assert result.exit_code == 0, result.output
    assert "not installed:" in result.output and "  npm ci" in result.output
    assert (repo / "mesh.toml").read_text() == "# mine\n" and "kept" in result.output


def test_mesh_init_outside_git_is_a_usage_error(tmp_path):
    result = mesh(tool_env(), "init", "--repo", str(tmp_path))
    assert result.exit_code == 2 and "git init" in result.output


def test_mesh_init_in_a_bd_workspace_imports_its_export_under_its_own_prefix(tmp_path):
    from tests.toolchainkit import init_repo

    repo = tmp_path / "bdproject"
    init_repo(repo)
    (repo / ".beads").mkdir()
    (repo / ".beads" / "config.yaml").write_text("issue-prefix: web\n")
    export = BEADS_REAL / "dolt-era-704.jsonl"
    if not export.exists():
        pytest.skip("../shared/data/beads-real/ is not beside the project")
    shutil.copy(export, repo / ".beads" / "issues.jsonl")
    (repo / "app.py").write_text("X = 1\n")
    commit_all(repo)
    result = mesh(tool_env(XDG_CACHE_HOME=str(tmp_path / "cache")), "init", "--repo", str(repo))
    assert result.exit_code == 0, result.output
    assert "(prefix web); imported 704 issue(s)" in result.output
    with Tracker(repo / ".beads" / "mesh.db", actor="tester") as tracker:
        assert tracker.get_config("issue_prefix") == "web" and len(tracker.list(status=["open", "closed"],
                                                                                 limit=0)) > 0
