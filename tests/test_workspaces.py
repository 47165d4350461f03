"""Issue 44, item 2: Node workspaces. A real pnpm workspace (Vitest from the npm registry in two
packages, one depending on the other through ``workspace:*``, node --test in a third, the root's
``test`` script ``pnpm -r test``, a TypeScript Vitest config that Vite bundles into
``node_modules/.vite-temp``, ``packageManager`` pinning a pnpm that is not installed): ``mesh init``
names its packages and runners; validation reads each package's runner, ids prefixed by package;
a change runs the tests of the packages it reaches and says which; through ``mesh run`` a breaking
and a deleting patch are blocked naming the dependent package's test, an honest one lands and a
clean clone of the landed branch passes ``pnpm test``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.sandbox.validation import run_validation
from orchestrator.testruns.workspaces import affected, workspace_of, workspace_run
from orchestrator.toolchains.view import inspect
from tests.runkit import MESH, TASK, make_workspace
from tests.test_attack_test_counts import run_patch
from tests.toolchainkit import (WORKSPACE_FILES, commit_all, git, own_cache, pnpm_workspace, templates,  # noqa: F401
                                tool_env)

pytestmark = pytest.mark.usefixtures("own_cache")

IDS = {"@mono/core: test/index.test.js > adds", "@mono/core: test/index.test.js > adds negatives",
       "@mono/prompts: test/index.test.js > totals", "@mono/util: twice"}


def validate(repo: Path, command: str, since: str | None = None, **extra):
    environ = tool_env()
    view = inspect(repo, None, environ).view
    [result] = run_validation([command], cwd=repo, allow=[command], timeout_s=300, environment=view, env=environ,
                              since=since, **extra)
    return result


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_packages_their_dependencies_and_the_commands_that_run_them_are_read(tmp_path):
    _write(tmp_path, WORKSPACE_FILES)
    workspace = workspace_of(tmp_path)
    assert workspace.manager == "pnpm"
    assert [(p.name, p.folder, sorted(p.needs)) for p in workspace.packages] == [
        ("@mono/core", "packages/core", []), ("@mono/prompts", "packages/prompts", ["@mono/core"]),
        ("@mono/util", "packages/util", [])]
    for argv in (["pnpm", "test"], ["pnpm", "-r", "test"], ["pnpm", "--recursive", "run", "test"]):
        assert [p.name for p in workspace_run(argv, tmp_path).chosen] == ["@mono/core", "@mono/prompts", "@mono/util"]
    assert [p.name for p in workspace_run(["pnpm", "--filter", "@mono/prompts", "test"], tmp_path).chosen] == ["@mono/prompts"]
    assert [p.name for p in workspace_run(["pnpm", "--filter", "./packages/util", "test"], tmp_path).chosen] == ["@mono/util"]
    assert workspace_run(["pnpm", "run", "build"], tmp_path) is None
    # npm's and Yarn's workspaces, declared in package.json.
    npm = tmp_path / "npm"
    _write(npm, {"package.json": json.dumps({"name": "r", "workspaces": ["libs/*"]}),
                 "package-lock.json": "{}", "libs/a/package.json": json.dumps({"name": "a", "scripts": {"test": "jest"}}),
                 "libs/b/package.json": json.dumps({"name": "b", "dependencies": {"a": "*"},
                                                    "scripts": {"test": "jest"}})})
    assert [p.name for p in workspace_run(["npm", "test", "--workspaces"], npm).chosen] == ["a", "b"]
    assert [p.name for p in workspace_run(["npm", "test", "-w", "libs/b"], npm).chosen] == ["b"]
    yarn = tmp_path / "yarn"
    _write(yarn, {"package.json": json.dumps({"name": "r", "workspaces": {"packages": ["libs/*"]}}), "yarn.lock": "",
                  "libs/a/package.json": json.dumps({"name": "a", "scripts": {"test": "jest"}})})
    assert workspace_of(yarn).manager == "yarn"
    assert [p.name for p in workspace_run(["yarn", "workspaces", "run", "test"], yarn).chosen] == ["a"]
    assert [p.name for p in workspace_run(["yarn", "workspace", "a", "test"], yarn).chosen] == ["a"]


def test_a_change_reaches_its_package_and_those_depending_on_it_declared_or_not(tmp_path):
    _write(tmp_path, WORKSPACE_FILES)
    found = workspace_run(["pnpm", "test"], tmp_path)
    workspace, chosen = found.workspace, found.chosen
    names = lambda found: [p.name for p in found[0]]  # noqa: E731
    assert names(affected(workspace, chosen, ["packages/core/src/index.js"], tmp_path)) == ["@mono/core", "@mono/prompts"]
    assert affected(workspace, chosen, ["packages/core/src/index.js"], tmp_path)[1]["@mono/prompts"] == \
        "depends on @mono/core"
    assert names(affected(workspace, chosen, ["packages/util/test/util.test.js"], tmp_path)) == ["@mono/util"]
    assert names(affected(workspace, chosen, ["pnpm-lock.yaml"], tmp_path)) == ["@mono/core", "@mono/prompts",
                                                                             "@mono/util"]
    assert names(affected(workspace, chosen, None, tmp_path)) == ["@mono/core", "@mono/prompts", "@mono/util"]
    # A package importing another by a relative path, without declaring it, is reached too.
    (tmp_path / "packages/util/index.js").write_text("const core = require('../core/src/index.js');\n")
    found = affected(workspace, chosen, ["packages/core/src/index.js"], tmp_path)
    assert names(found) == ["@mono/core", "@mono/prompts", "@mono/util"] and found[1]["@mono/util"] == \
        "imports @mono/core"


def test_mesh_init_names_the_packages_and_their_runners(templates, tmp_path):
    repo = pnpm_workspace(templates, tmp_path)
    (repo / ".nvmrc").write_text("12.22.12\n")  # a Node older than any installed here
    commit_all(repo, "pin node")
    env = {k: v for k, v in tool_env().items() if not k.startswith("GIT_")}
    done = subprocess.run([*MESH, "init"], cwd=repo, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "toolchains: node (pnpm workspace)" in done.stdout, done.stdout
    assert ("a pnpm workspace of 3 package(s): @mono/core (vitest); @mono/prompts (vitest, needs @mono/core);"
            " @mono/util (node --test)") in done.stdout, done.stdout
    assert "packageManager pins pnpm@9.15.0: validation runs the installed pnpm, offline" in done.stdout
    assert "the project pins Node 12.22.12 (.nvmrc); validation runs the installed Node v" in done.stdout
    config = (repo / "mesh.toml").read_text()
    assert 'check = ["pnpm test"]' in config and '"pnpm --filter @mono/prompts test"' in config


def test_each_packages_runner_is_read_through_the_workspace_script(templates, tmp_path):
    repo = pnpm_workspace(templates, tmp_path)
    result = validate(repo, "pnpm test")
    assert result.passed, result.stdout_tail + result.stderr_tail
    assert {case.id for case in result.run.cases} == IDS and result.tests.ran == 4
    # Each package's output under its name; mesh's twins not in it (Vitest's counts are the package's own).
    shown = result.stdout_tail + result.stderr_tail
    assert "── @mono/prompts (packages/prompts): npm test ──" in shown
    assert "Tests  2 passed (2)" in shown and "Tests  1 passed (1)" in shown, shown
    assert "Failed Tests" not in shown and "failed" not in shown.lower().replace("0 failed", ""), shown
    assert "EROFS" not in shown and "ERR_PNPM" not in shown
    assert "mesh: workspace packages run: @mono/core, @mono/prompts, @mono/util" in shown
    # One package's failing test, by its package and id, with its message.
    (repo / "packages/util/test/util.test.js").write_text(WORKSPACE_FILES["packages/util/test/util.test.js"]
                                                          .replace("2 * 2, 4", "2 * 2, 5"))
    commit_all(repo, "break util's test")
    result = validate(repo, "pnpm test")
    assert not result.passed and [c.id for c in result.run.failures()] == ["@mono/util: twice"]
    assert "5" in result.run.failures()[0].message


def test_a_change_runs_the_packages_it_reaches_and_says_which(templates, tmp_path):
    repo = pnpm_workspace(templates, tmp_path)
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "packages/core/src/index.js").write_text("export const add = (a, b) => b + a;\n")
    commit_all(repo, "core")
    result = validate(repo, "pnpm test", since=base)
    assert result.passed, result.stderr_tail
    assert {case.id for case in result.run.cases} == IDS - {"@mono/util: twice"}
    assert result.run.scope == ("@mono/core: ", "@mono/prompts: ")
    assert ("mesh: workspace packages run: @mono/core (changed), @mono/prompts (depends on @mono/core);"
            " not run (the change does not reach them): @mono/util") in result.stderr_tail
    # A flaky test is run again in its own package alone (Vitest's -t).
    again = validate(repo, "pnpm test", select={"pnpm test": "@mono/prompts: test/index.test.js > totals"})
    assert again.passed and [case.id for case in again.run.cases] == ["@mono/prompts: test/index.test.js > totals"]


def _workspace_run(tmp_path, templates):
    """The demo workspace with its project replaced by the pnpm workspace (check ``pnpm test``)."""
    source = pnpm_workspace(templates, tmp_path / "source")
    ws = make_workspace(tmp_path)
    ws.git("rm", "-rq", "temperature.py", "tests")
    ignored = (ws.repo / ".gitignore").read_text()
    _write(ws.repo, {name: text for name, text in WORKSPACE_FILES.items() if name != ".gitignore"})
    (ws.repo / "package.json").write_text((source / "package.json").read_text())
    (ws.repo / "pnpm-lock.yaml").write_text((source / "pnpm-lock.yaml").read_text())
    (ws.repo / ".gitignore").write_text(ignored + "node_modules/\n")
    for folder in ("", "packages/core/", "packages/prompts/"):
        subprocess.run(["cp", "-al", str(source / folder / "node_modules"), str(ws.repo / folder / "node_modules")],
                       check=True)
    config = (ws.repo / "mesh.toml").read_text()
    start = config.index("[validation]")
    end = config.find("\n[", start + 1)
    (ws.repo / "mesh.toml").write_text(config[:start] + '[validation]\nallow = ["pnpm test"]\ncheck = ["pnpm test"]\n'
                                       'timeout_s = 300\n' + (config[end:] if end != -1 else ""))
    commit_all(ws.repo, "the workspace")
    return ws, source


def _patch(path: str, old: str, new: str) -> str:
    old_lines, new_lines = old.splitlines(), new.splitlines()
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,{len(old_lines)} +1,{len(new_lines)} @@\n"
            + "".join(f"-{line}\n" for line in old_lines) + "".join(f"+{line}\n" for line in new_lines))


CORE = WORKSPACE_FILES["packages/core/src/index.js"]
CORE_TESTS = WORKSPACE_FILES["packages/core/test/index.test.js"]
# add(a, b) right for the two core tests' numbers only: prompts' total([1, 2, 3]) breaks.
BREAK = _patch("packages/core/src/index.js", CORE, "export const add = (a, b) => (a < 0 ? a + b : a + b + (b === 3 ? 0 : 1));\n")
DELETE = _patch("packages/core/src/index.js", CORE, "export const add = (a, b) => a + b + (a < 0 ? 1 : 0);\n") + \
    _patch("packages/core/test/index.test.js", CORE_TESTS, CORE_TESTS.replace(
        "test('adds negatives', () => { expect(add(-2, -3)).toBe(-5); });\n", ""))
HONEST = _patch("packages/core/src/index.js", CORE, "/** Sums two numbers. */\nexport const add = (a, b) => a + b;\n")


@pytest.mark.parametrize("patch, lost", [(BREAK, "@mono/prompts: test/index.test.js > totals"),
                                         (DELETE, "@mono/core: test/index.test.js > adds negatives")],
                         ids=["breaking-the-dependent", "deleting"])
def test_a_patch_breaking_a_dependent_or_deleting_a_test_is_blocked(templates, tmp_path, patch, lost, monkeypatch):
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    ws, _source = _workspace_run(tmp_path, templates)
    code, report, res = run_patch(ws, patch, ["pnpm test"])
    assert code == 3 and report["outcome"] == "blocked", res.output
    assert lost in report["block_detail"], report["block_detail"]
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "blocked"


def test_an_honest_patch_lands_and_the_landed_branch_passes_in_a_clean_clone(templates, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    ws, source = _workspace_run(tmp_path, templates)
    code, report, res = run_patch(ws, HONEST, ["pnpm test"], "--onto", "mesh/land/mono")
    assert code == 0 and report["outcome"] == "closed", res.output
    clone = tmp_path / "clone"
    env = {k: v for k, v in tool_env().items() if not k.startswith("GIT_")}
    subprocess.run(["git", "clone", "-q", "-b", "mesh/land/mono", str(ws.repo), str(clone)], check=True, env=env)
    assert "/** Sums two numbers. */" in (clone / "packages/core/src/index.js").read_text()
    for folder in ("", "packages/core/", "packages/prompts/"):
        subprocess.run(["cp", "-al", str(source / folder / "node_modules"), str(clone / folder / "node_modules")],
                       check=True)
    done = subprocess.run(["pnpm", "test"], cwd=clone, capture_output=True, text=True,
                          env={**env, "npm_config_manage_package_manager_versions": "false",
                               "pnpm_config_manage_package_manager_versions": "false"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert os.path.exists(clone / "packages/core/src/index.js")


def test_the_root_pretest_builds_what_the_packages_tests_import(templates, tmp_path):
    """clack's layout: the root's ``pretest`` builds each package's ``dist/`` (git-ignored), which a
    dependent package imports; ``pnpm test`` runs it before the packages' tests."""
    repo = pnpm_workspace(templates, tmp_path)
    manifest = json.loads((repo / "package.json").read_text())
    manifest["scripts"]["pretest"] = "node build.js"
    (repo / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (repo / "build.js").write_text("const fs = require('fs');\nfs.mkdirSync('packages/core/dist', { recursive: true });\n"
                                   "fs.copyFileSync('packages/core/src/index.js', 'packages/core/dist/index.js');\n")
    core = json.loads((repo / "packages/core/package.json").read_text())
    core["main"] = "dist/index.js"
    (repo / "packages/core/package.json").write_text(json.dumps(core, indent=2) + "\n")
    (repo / ".gitignore").write_text("node_modules/\ndist/\n")
    commit_all(repo, "build before testing")
    result = validate(repo, "pnpm test")
    assert result.passed and {case.id for case in result.run.cases} == IDS, result.stdout_tail + result.stderr_tail
    assert "── @mono/prompts (packages/prompts): npm run pretest, then npm test ──" in result.stdout_tail
