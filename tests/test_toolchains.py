"""Validation in each toolchain's own environment, on real projects with real dependencies, in the
real sandbox: Node under npm, pnpm and Yarn, TypeScript's tsc, a Go module with its module cache,
a Rust crate with Debian's packaged crates, a hatch-vcs package with generated files. Each shows
its installed dependencies read-only and offline, keeps its build cache outside the tree (written by
the base check, copied for every other validation), and a project whose dependencies are not installed
is refused with the command that installs them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.sandbox.cache_layers import writing
from orchestrator.sandbox.validation import run_validation
from orchestrator.toolchains.base import DependenciesMissing
from orchestrator.toolchains.caches import project_cache_root, prune
from orchestrator.toolchains.view import inspect
from tests.toolchainkit import (commit_all, go_project, hatch_project, node_project, own_cache,  # noqa: F401
                                pnp_project, rust_project, templates, tool_env, ts_project, vitest_project)


pytestmark = pytest.mark.usefixtures("own_cache")


def validate(repo: Path, commands: list[str], env: dict[str, str] | None = None, allow: list[str] | None = None,
             settings=None, base: bool = False):
    """``commands`` validated on the repository's HEAD; with ``base``, as the base check (the one
    validation that writes the build caches, those of HEAD)."""
    environ = env or tool_env()
    view = inspect(repo, settings, environ).view
    return run_validation(commands, cwd=repo, allow=allow or commands, timeout_s=300,
                          environment=writing(view) if base else view, env=environ)


@pytest.mark.parametrize("manager", ["npm", "pnpm", "yarn"])
def test_a_node_project_imports_its_installed_dependency(templates, tmp_path, manager):
    repo = node_project(templates, tmp_path, manager)
    inspection = inspect(repo, None, tool_env())
    assert any(f"toolchain node ({manager})" in note and "node_modules/ read-only" in note
               for note in inspection.notes)
    assert inspection.check_commands() == [f"{manager} test"]
    [result] = validate(repo, [f"{manager} test"])
    assert result.passed, result.stdout_tail + result.stderr_tail


def test_a_yarn_plug_n_play_project_resolves_through_its_pnp_files(templates, tmp_path):
    repo, env = pnp_project(templates, tmp_path)
    assert not (repo / "node_modules").exists()
    inspection = inspect(repo, None, env)
    assert {m.target for m in inspection.view.mounts} >= {".pnp.cjs", ".yarn/cache"}
    [result] = validate(repo, ["yarn test"], env)
    assert result.passed, result.stdout_tail + result.stderr_tail
    import shutil

    shutil.rmtree(repo / ".yarn" / "cache")
    (repo / ".pnp.cjs").unlink()
    with pytest.raises(DependenciesMissing, match="yarn install --immutable"):
        inspect(repo, None, env)


def test_a_failing_node_test_fails_and_names_its_error(templates, tmp_path):
    repo = node_project(templates, tmp_path)
    (repo / "index.js").write_text("const ms = require('ms');\nexports.seconds = (text) => ms(text);\n")
    commit_all(repo, "a bug")
    [result] = validate(repo, ["npm test"])
    assert not result.passed and "seconds" in result.stdout_tail


def test_node_modules_is_read_only_and_caches_stay_outside_the_tree(templates, tmp_path):
    repo = node_project(templates, tmp_path)
    (repo / "test" / "write.test.js").write_text("""const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
test('writes', () => {
  assert.throws(() => fs.writeFileSync('node_modules/ms/index.js', 'module.exports = () => 7;'), /EROFS|EACCES/);
  assert.throws(() => fs.writeFileSync('node_modules/planted.js', 'x'), /EROFS|EACCES/);
  fs.mkdirSync('node_modules/.cache/tool', { recursive: true });
  fs.writeFileSync('node_modules/.cache/tool/entry', 'cached');
});
""")
    commit_all(repo, "a test that writes")
    before = (repo / "node_modules" / "ms" / "index.js").read_bytes()
    [result] = validate(repo, ["npm test"])
    assert result.passed, result.stdout_tail + result.stderr_tail
    assert (repo / "node_modules" / "ms" / "index.js").read_bytes() == before
    assert not (repo / "node_modules" / "planted.js").exists()
    assert not (repo / "node_modules" / ".cache" / "tool").exists()
    # A validation's own copy of the caches is gone with it; the base check's writes are kept.
    assert not list(project_cache_root(repo).rglob("entry"))
    [checked] = validate(repo, ["npm test"], base=True)
    assert checked.passed, checked.stdout_tail + checked.stderr_tail
    cached = list(project_cache_root(repo).glob("trusted/*/node/*.cache/tool/entry"))
    assert [p.read_text() for p in cached] == ["cached"]
    assert "node_modules" not in subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True,
                                                text=True).stdout


def test_a_node_project_without_node_modules_is_refused_with_npm_ci(templates, tmp_path):
    repo = node_project(templates, tmp_path)
    import shutil

    shutil.rmtree(repo / "node_modules")
    with pytest.raises(DependenciesMissing, match="npm ci"):
        inspect(repo, None, tool_env())


def test_typescript_checks_with_tsc(templates, tmp_path):
    repo = ts_project(templates, tmp_path)
    [passing] = validate(repo, ["npm test"])
    assert passing.passed, passing.stdout_tail + passing.stderr_tail
    (repo / "src" / "add.ts").write_text("export function add(a: number, b: number): number { return 'x'; }\n")
    commit_all(repo, "a type error")
    [failing] = validate(repo, ["npm test"])
    assert not failing.passed and "TS2322" in failing.stdout_tail + failing.stderr_tail


def test_vitest_runs_with_its_vite_cache_outside_the_tree(templates, tmp_path):
    repo = vitest_project(templates, tmp_path)
    [result] = validate(repo, ["npm test"], base=True)
    assert result.passed, result.stdout_tail + result.stderr_tail
    assert list(project_cache_root(repo).glob("trusted/*/node/*.vite/vitest/*/results.json"))
    assert not list((repo / "node_modules" / ".vite").rglob("results.json"))


def test_a_tool_of_node_modules_bin_runs_by_its_path_in_the_tree(templates, tmp_path):
    """``node_modules/.bin/vitest``: the tree copy holds no node_modules (the sandbox shows the
    checkout's there), so the program is found through the view's mount, not the copy."""
    repo = vitest_project(templates, tmp_path)
    passing, missing = validate(repo, ["node_modules/.bin/vitest run", "node_modules/.bin/nope run"])
    assert passing.passed, passing.stdout_tail + passing.stderr_tail
    assert missing.reason == "not_found" and "node_modules/.bin/nope" in missing.stderr_tail


def test_a_go_module_tests_offline_from_its_module_cache(tmp_path):
    repo, env = go_project(tmp_path)
    inspection = inspect(repo, None, env)
    assert inspection.check_commands() == ["go test ./..."]
    assert dict(inspection.view.env)["GOPROXY"] == "off"
    [first] = validate(repo, ["go test ./..."], env, base=True)
    assert first.passed, first.stdout_tail + first.stderr_tail
    # The build cache is the project's own, outside the tree, kept for the base's commit.
    assert any(project_cache_root(repo).glob("trusted/*/go/build/*"))


def test_the_go_module_cache_is_read_only(tmp_path):
    repo, env = go_project(tmp_path)
    (repo / "plant_test.go").write_text("""package gop

import (
\t"os"
\t"path/filepath"
\t"testing"
)

func TestPlant(t *testing.T) {
\ttarget := filepath.Join(os.Getenv("GOMODCACHE"), "github.com", "google", "go-cmp@v0.5.9", "cmp", "planted.go")
\tif err := os.WriteFile(target, []byte("package cmp"), 0o644); err == nil {
\t\tt.Fatal("wrote into the module cache")
\t}
}
""")
    commit_all(repo, "a test that plants")
    [result] = validate(repo, ["go test ./..."], env)
    assert result.passed, result.stdout_tail + result.stderr_tail
    assert not list((tmp_path / "gomodcache").rglob("planted.go"))


def test_a_go_module_whose_requirements_are_not_downloaded_is_refused(tmp_path):
    repo, env = go_project(tmp_path, download=False)
    with pytest.raises(DependenciesMissing, match="go mod download"):
        inspect(repo, None, env)


def test_a_rust_crate_builds_offline_and_its_dependencies_once(tmp_path):
    repo = rust_project(tmp_path)
    inspection = inspect(repo, None, tool_env())
    assert inspection.check_commands() == ["cargo test"]
    assert "Cargo.lock" in inspection.view.carried
    [first] = validate(repo, ["cargo test"], base=True)
    assert first.passed, first.stdout_tail + first.stderr_tail
    assert "Compiling itoa" in first.stderr_tail
    lib = repo / "src" / "lib.rs"
    for n in range(2):
        lib.write_text(lib.read_text() + f"\npub fn one{n}() -> u8 {{ 1 }}\n")
        commit_all(repo, "a one-line patch")
        [later] = validate(repo, ["cargo test"])
        assert later.passed, later.stdout_tail + later.stderr_tail
        # The base check's target folder, copied: only the crate itself was compiled again.
        assert "Compiling rustp" in later.stderr_tail and "Compiling itoa" not in later.stderr_tail
    assert not (repo / "target").exists()


def test_a_build_cache_over_its_bound_is_removed_whole(tmp_path):
    repo = rust_project(tmp_path)
    [result] = validate(repo, ["cargo test"], base=True)
    assert result.passed
    root = project_cache_root(repo)
    assert prune(root, 1 << 20) == []
    removed = prune(root, 1)
    assert any(line.startswith("build caches of ") for line in removed) and not list(root.glob("trusted/*"))


def test_a_hatch_vcs_package_validates_with_its_generated_files(tmp_path):
    repo = hatch_project(tmp_path)
    inspection = inspect(repo, None, tool_env())
    assert set(inspection.view.carried) == {"src/stamped/_version.py", "src/stamped/locale/fr/LC_MESSAGES/stamped.mo"}
    command = "python -m unittest discover -s tests -t ."
    [result] = validate(repo, [command])
    assert result.passed, result.stdout_tail + result.stderr_tail


def test_a_committed_file_wins_over_a_carried_one(tmp_path):
    repo = hatch_project(tmp_path)
    (repo / ".gitignore").write_text(".venv/\n*.mo\n__pycache__/\n")
    (repo / "src" / "stamped" / "_version.py").write_text('__version__ = version = "9.9.9"\n')
    commit_all(repo, "the version file committed")
    (repo / "src" / "stamped" / "_version.py").write_text('__version__ = version = "1.2.3"\n')
    [result] = validate(repo, ["python -m unittest discover -s tests -t ."])
    assert not result.passed and "9.9.9" in result.stderr_tail


class _Settings:
    python = env_dir = None
    carry: list[str] = []
    setup: list[str] = []
    build_cache_mb = 4096


def test_setup_commands_run_in_the_sandbox_before_each_command(tmp_path):
    repo = hatch_project(tmp_path)
    (repo / "gen.py").write_text("open('src/stamped/_made.py', 'w').write('MADE = 1\\n')\n")
    (repo / "tests" / "test_made.py").write_text("import unittest\n\n\nclass M(unittest.TestCase):\n"
                                                 "    def test_made(self):\n        from stamped import _made\n"
                                                 "        self.assertEqual(_made.MADE, 1)\n")
    commit_all(repo, "a generator")
    settings = _Settings()
    settings.setup = ["python gen.py"]
    command = "python -m unittest discover -s tests -t ."
    [result] = validate(repo, [command], settings=settings, allow=[command, "python gen.py"])
    assert result.passed, result.stdout_tail + result.stderr_tail
    assert not (repo / "src" / "stamped" / "_made.py").exists()
    [refused] = validate(repo, [command], settings=settings, allow=[command])
    assert refused.rejected and "setup command 'python gen.py'" in refused.stderr_tail


def test_carry_names_untracked_files_by_glob(tmp_path):
    repo = hatch_project(tmp_path)
    (repo / "secret.key").write_text("not carried")
    settings = _Settings()
    settings.carry = ["src/**/*.mo", "src/stamped/_version.py", "pyproject.toml"]
    view = inspect(repo, settings, tool_env()).view
    # Tracked files are never carried (the commit's own is what runs), nor unnamed ones.
    assert "pyproject.toml" not in view.carried and "secret.key" not in view.carried


def test_a_python_service_with_a_typescript_front_end_is_both(tmp_path):
    from tests.toolchainkit import init_repo

    repo = tmp_path / "service"
    init_repo(repo)
    (repo / "pyproject.toml").write_text('[project]\nname = "service"\nversion = "1"\n')
    (repo / "app.py").write_text("X = 1\n")
    (repo / "web").mkdir()
    (repo / "web" / "package.json").write_text(json.dumps({"name": "web", "scripts": {"test": "vitest run"},
                                                           "devDependencies": {"vitest": "^3"}}))
    (repo / "web" / "package-lock.json").write_text("{}")
    (repo / ".gitignore").write_text("node_modules/\n")
    commit_all(repo)
    with pytest.raises(DependenciesMissing, match=r"web/ declares Node dependencies .* cd web && npm ci"):
        inspect(repo, None, tool_env())
    (repo / "web" / "node_modules" / "vitest").mkdir(parents=True)
    inspection = inspect(repo, None, tool_env())
    assert [f.label for f in inspection.found] == ["python", "node (npm)"]
    assert inspection.check_commands()[1] == "npm --prefix web test"
    [mount] = [m for m in inspection.view.mounts if m.target == "web/node_modules"]
    assert mount.in_tree and not mount.writable
    assert any(note.startswith("toolchain node (npm) in web/") for note in inspection.notes)


def test_a_crate_whose_dependencies_are_not_fetched_is_refused_with_cargo_fetch(tmp_path):
    repo = rust_project(tmp_path)
    manifest = repo / "Cargo.toml"
    manifest.write_text(manifest.read_text() + 'not-in-any-registry-here = "1"\n')
    commit_all(repo, "a dependency nobody fetched")
    with pytest.raises(DependenciesMissing, match="cargo fetch"):
        inspect(repo, None, tool_env())


def test_the_cargo_registry_is_read_only_and_the_target_folder_never_lands(tmp_path):
    repo = rust_project(tmp_path)
    cargo_home = tmp_path / "cargo-home"
    (cargo_home / "registry" / "src").mkdir(parents=True)
    (cargo_home / "registry" / "src" / "kept.txt").write_text("the user's")
    (repo / "tests").mkdir()
    (repo / "tests" / "plant.rs").write_text("""#[test]
fn plant() {
    let home = std::env::var("CARGO_HOME").unwrap();
    assert!(std::fs::write(format!("{home}/registry/src/kept.txt"), "planted").is_err());
    assert!(std::fs::write(format!("{home}/registry/planted.txt"), "planted").is_err());
    let target = std::env::var("CARGO_TARGET_DIR").unwrap();
    std::fs::write(format!("{target}/from-a-test.txt"), "cache").unwrap();
}
""")
    commit_all(repo, "a test that plants")
    env = tool_env(CARGO_HOME=str(cargo_home), RUSTUP_HOME=str(Path.home() / ".rustup"))
    [result] = validate(repo, ["cargo test"], env)
    assert result.passed, result.stdout_tail + result.stderr_tail
    assert (cargo_home / "registry" / "src" / "kept.txt").read_text() == "the user's"
    assert not (cargo_home / "registry" / "planted.txt").exists()
    assert "from-a-test.txt" not in subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True,
                                                   text=True).stdout


def test_the_projects_own_node_from_a_version_manager_runs_the_tests(templates, tmp_path):
    import shutil

    repo = node_project(templates, tmp_path)
    # A version manager's Node (nvm's layout), under a HOME of its own: not the system's.
    prefix = tmp_path / "home" / ".nvm" / "versions" / "node" / "v20.0.0"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(shutil.which("node"), prefix / "bin" / "node")
    (prefix / "bin" / "marker-only-here").write_text("")
    env = tool_env()
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env['PATH']}"
    inspection = inspect(repo, None, env)
    assert f"Node {prefix / 'bin' / 'node'}" in " ".join(inspection.notes)
    assert str(prefix / "bin") == inspection.view.path[0]
    expected = json.dumps(str(prefix / "bin" / "node"))
    (repo / "test" / "which.test.js").write_text(
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        f"test('node', () => {{ assert.strictEqual(process.execPath, {expected}); }});\n")
    commit_all(repo, "which node")
    [result] = validate(repo, ["node --test"], env)
    assert result.passed, result.stdout_tail + result.stderr_tail


def test_a_vendoring_go_module_validates_from_its_vendor_folder(tmp_path):
    import subprocess as sp

    repo, env = go_project(tmp_path)
    sp.run(["go", "mod", "vendor"], cwd=repo, env={**env, "GOFLAGS": "-mod=mod", "GOPROXY": "off"}, check=True,
           capture_output=True)
    commit_all(repo, "vendored")
    env = {**env, "GOMODCACHE": str(tmp_path / "no-cache-at-all")}
    inspection = inspect(repo, None, env)
    assert "GOFLAGS" not in dict(inspection.view.env)
    [result] = validate(repo, ["go test ./..."], env)
    assert result.passed, result.stdout_tail + result.stderr_tail
