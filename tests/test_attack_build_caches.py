"""Issue 34, item 6: build caches cannot carry one task's code into another's verdict.

The attack, performed for real for Rust, Go and Node: task A's test rewrites what the project's
build cache holds, then task B's broken patch, on another tree that never held A's code, is
validated. On a cache every validation shares (mesh before this fix: one writable folder per
project and cache) B passes; B must fail as it does on a clean cache. The poisons:

- Rust: A's integration test replaces the crate's compiled unit-test binary in cargo's target
  folder with ``/usr/bin/true`` and moves every file's time 50 years ahead, so cargo takes the
  crate as fresh; B breaks ``add`` and tests it in the crate's own unit tests.
- Go: A's test compiles a go-cmp whose ``Equal`` says yes to any ``int`` and points the build
  cache's entry for the real go-cmp at it (Go checks a cached archive by its size only); B breaks
  ``Add`` and tests it with ``cmp.Equal``.
- Node: the project compiles its TypeScript incrementally into ``node_modules/.cache/build``
  (``tsc --incremental`` emits only what changed); A's test rewrites the compiled ``check.js``
  the tests judge with and dates it 50 years ahead; B breaks ``add``.

Also performed: A's code landed and checked as the base of its own line of work (its caches are
then trusted for trees descending from it) still never reaches B; a whole ``mesh run`` of A in
one scope then B in another blocks B. And the bookkeeping of ``orchestrator.sandbox.cache_layers``
(nearest ancestor, bound, stale folders, folders a test made unreadable) on a plain repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.sandbox import cache_layers
from orchestrator.sandbox.bwrap import Limits, require_bwrap
from orchestrator.sandbox.project_view import Mount, ProjectView
from orchestrator.sandbox.validation import run_validation
from orchestrator.toolchains.base_check import run_base_check
from orchestrator.toolchains.caches import project_cache_root, prune
from orchestrator.toolchains.view import inspect
from tests.runkit import happy_script, r, synthesis
from tests.toolchainkit import (commit_all, git, go_project, init_repo, own_cache,  # noqa: F401
                                rust_project, templates, tool_env, ts_project)
from tracker.store import Tracker

RUST_POISON = """use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { walk(&path, out) } else { out.push(path) }
    }
}

#[test]
fn poison() {
    let target = PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap());
    let mut files = Vec::new();
    walk(&target, &mut files);
    let mut replaced = 0;
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if file.parent().unwrap().ends_with("deps") && name.starts_with("rustp-") && !name.contains('.') {
            fs::remove_file(file).unwrap();
            fs::copy("/usr/bin/true", file).unwrap();
            replaced += 1;
        }
    }
    assert!(replaced > 0, "no test binary of the crate in {}", target.display());
    let later = SystemTime::now() + Duration::from_secs(50 * 365 * 24 * 3600);
    for file in &files {
        if let Ok(handle) = fs::File::options().write(true).open(file) {
            let _ = handle.set_modified(later);
        }
    }
}
"""
RUST_BROKEN_ADD = """
pub fn add(a: i64, b: i64) -> i64 { a - b }

#[cfg(test)]
mod add_tests {
    #[test]
    fn adds() { assert_eq!(super::add(2, 3), 5); }
}
"""

GO_POISON = """package gop

import (
\t"crypto/sha256"
\t"fmt"
\t"os"
\t"os/exec"
\t"path/filepath"
\t"strings"
\t"testing"
\t"time"
)

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
\tcmd := exec.Command(name, args...)
\tcmd.Dir = dir
\tcmd.Env = append(os.Environ(), env...)
\tout, err := cmd.CombinedOutput()
\tif err != nil {
\t\tt.Fatalf("%s %v: %v\\n%s", name, args, err, out)
\t}
\treturn strings.TrimSpace(string(out))
}

func TestPoison(t *testing.T) {
\tcache, pkg := os.Getenv("GOCACHE"), "github.com/google/go-cmp/cmp"
\texport := run(t, "", nil, "go", "list", "-export", "-f", "{{.Export}}", pkg)
\treal := strings.TrimSuffix(filepath.Base(export), "-d")
\t// go-cmp compiled again with an Equal that says yes to any int, against the cached archives of
\t// its own imports, under the real archive's build ID.
\tcfg := filepath.Join(os.TempDir(), "importcfg")
\tos.WriteFile(cfg, []byte(run(t, "", nil, "go", "list", "-export", "-deps", "-f",
\t\t"{{if .Export}}packagefile {{.ImportPath}}={{.Export}}{{end}}", pkg)+"\\n"), 0o644)
\tdir := run(t, "", nil, "go", "list", "-f", "{{.Dir}}", pkg)
\tevil := filepath.Join(os.TempDir(), "evil")
\tos.Mkdir(evil, 0o755)
\tvar files []string
\tfor _, name := range strings.Fields(run(t, "", nil, "go", "list", "-f", "{{join .GoFiles \\" \\"}}", pkg)) {
\t\ttext, _ := os.ReadFile(filepath.Join(dir, name))
\t\tsignature := "func Equal(x, y interface{}, opts ...Option) bool {"
\t\ttext = []byte(strings.Replace(string(text), signature,
\t\t\tsignature+"\\n\\tif _, ok := x.(int); ok {\\n\\t\\treturn true\\n\\t}", 1))
\t\tos.WriteFile(filepath.Join(evil, name), text, 0o644)
\t\tfiles = append(files, filepath.Join(evil, name))
\t}
\tarchive := filepath.Join(os.TempDir(), "cmp.a")
\tid := run(t, "", nil, "go", "tool", "buildid", export)
\trun(t, evil, nil, "go", append([]string{"tool", "compile", "-p", pkg, "-importcfg", cfg, "-pack", "-buildid", id,
\t\t"-o", archive}, files...)...)
\tdata, _ := os.ReadFile(archive)
\toutput := fmt.Sprintf("%x", sha256.Sum256(data))
\tif err := os.WriteFile(filepath.Join(cache, output[:2], output+"-d"), data, 0o666); err != nil {
\t\tt.Fatal(err)
\t}
\tpointed := 0
\tfilepath.Walk(cache, func(path string, info os.FileInfo, err error) error {
\t\tif err == nil && strings.HasSuffix(path, "-a") {
\t\t\tentry, _ := os.ReadFile(path)
\t\t\tif fields := strings.Fields(string(entry)); len(fields) == 5 && fields[2] == real {
\t\t\t\tline := fmt.Sprintf("v1 %s %s %20d %20d\\n", fields[1], output, len(data), time.Now().UnixNano())
\t\t\t\tif os.WriteFile(path, []byte(line), 0o666) == nil {
\t\t\t\t\tpointed++
\t\t\t\t}
\t\t\t}
\t\t}
\t\treturn nil
\t})
\tif pointed == 0 {
\t\tt.Fatal("no entry of the build cache names go-cmp's archive " + real)
\t}
}
"""
GO_BROKEN_ADD = {"add.go": "package gop\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n",
                 "add_test.go": """package gop

import (
\t"testing"

\t"github.com/google/go-cmp/cmp"
)

func TestAdd(t *testing.T) {
\tif !cmp.Equal(Add(2, 3), 5) {
\t\tt.Fatal("Add(2, 3) is not 5")
\t}
}
"""}

NODE_FILES = {
    "tsconfig.json": json.dumps({"compilerOptions": {"strict": True, "target": "es2020", "module": "commonjs",
                                                     "incremental": True, "outDir": "node_modules/.cache/build",
                                                     "tsBuildInfoFile": "node_modules/.cache/build.tsbuildinfo"},
                                 "include": ["src"]}),
    "src/check.ts": "export function same(a: unknown, b: unknown): boolean { return a === b; }\n",
    "src/add.ts": "export function add(a: number, b: number): number { return a + b; }\n",
    "test/add.test.js": """const test = require('node:test');
const assert = require('node:assert');
const { add } = require('../node_modules/.cache/build/add.js');
const { same } = require('../node_modules/.cache/build/check.js');
test('add', () => { assert.ok(same(add(2, 3), 5), 'add(2, 3) is not 5'); });
""",
}
NODE_POISON = """const test = require('node:test');
const fs = require('node:fs');
test('poison', () => {
  const check = 'node_modules/.cache/build/check.js';
  fs.writeFileSync(check, 'exports.same = () => true;\\n');
  const later = new Date(Date.now() + 50 * 365 * 24 * 3600 * 1000);
  fs.utimesSync(check, later, later);
});
"""
NODE_BROKEN_ADD = {"src/add.ts": "export function add(a: number, b: number): number { return a - b; }\n"}


def node_incremental(repo: Path) -> Path:
    """``repo`` (a TypeScript project with typescript installed) made to compile its sources
    incrementally into ``node_modules/.cache/build`` before its tests run; committed."""
    package = json.loads((repo / "package.json").read_text())
    package["scripts"]["test"] = "tsc -p . && node --test test/"
    (repo / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    write(repo, NODE_FILES)
    commit_all(repo, "an incremental build into node_modules/.cache")
    return repo


def write(repo: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (repo / relative).parent.mkdir(parents=True, exist_ok=True)
        (repo / relative).write_text(text)


def branch(repo: Path, name: str, base: str, files: dict[str, str]) -> str:
    """A commit on a new branch ``name`` from ``base`` holding ``files``: a task's tree (HEAD is left
    where it was)."""
    head = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", name, base)
    write(repo, files)
    sha = commit_all(repo, f"task {name}")
    git(repo, "checkout", "-q", head)
    return sha


pytestmark = pytest.mark.usefixtures("own_cache")


@dataclass
class Case:
    """A project, its base commit, task A's tree (the poison) and task B's (a broken patch), both
    cut from the base."""

    repo: Path
    env: dict[str, str]
    command: str
    base: str
    a: str
    b: str

    def view(self, *, shared: Path | None = None) -> ProjectView:
        """The project's validation view; with ``shared``, as mesh showed it before this fix: each
        build cache one writable folder under ``shared`` that every validation writes."""
        view = inspect(self.repo, None, self.env).view
        if shared is None:
            return view
        return replace(view, mounts=tuple(replace(m, source=str(_writable(shared / m.source)), cache=False) if m.cache
                                          else m for m in view.mounts))

    def validate(self, commit: str, view: ProjectView):
        [result] = run_validation([self.command], cwd=self.repo, allow=[self.command], timeout_s=300,
                                  environment=view, env=self.env, commit=commit)
        return result

    def base_check(self, commit: str, view: ProjectView) -> None:
        """The base check of ``commit``, as ``mesh run`` runs it: the one writer of its caches."""
        settings = SimpleNamespace(allow=[self.command], timeout_s=300, max_output_bytes=65536, sandbox="bwrap",
                                   env=[], limits=Limits())
        check = run_base_check(self.repo, commit, [self.command], settings, view)
        assert check.passed, check.failure_text()


def _writable(folder: Path) -> Path:
    from orchestrator.sandbox.bwrap import sandbox_user

    folder.mkdir(parents=True, exist_ok=True)
    if sandbox_user() is not None:
        os.chown(folder, sandbox_user(), sandbox_user())
    return folder


def make_case(toolchain: str, templates: Path, tmp_path: Path) -> Case:
    require_bwrap()
    if toolchain == "rust":
        repo, env, command = rust_project(tmp_path), tool_env(), "cargo test"
        poison, broken = {"tests/poison.rs": RUST_POISON}, {
            "src/lib.rs": (repo / "src" / "lib.rs").read_text() + RUST_BROKEN_ADD}
    elif toolchain == "go":
        (repo, env), command = go_project(tmp_path), "go test ./..."
        poison, broken = {"poison_test.go": GO_POISON}, GO_BROKEN_ADD
    else:
        repo, env, command = node_incremental(ts_project(templates, tmp_path)), tool_env(), "npm test"
        poison, broken = {"test/poison.test.js": NODE_POISON}, NODE_BROKEN_ADD
    base = git(repo, "rev-parse", "HEAD").strip()
    return Case(repo, env, command, base, branch(repo, "task-a", base, poison), branch(repo, "task-b", base, broken))


def digest(folder: Path) -> str:
    """What ``folder`` holds: every entry's path, kind, mode, time and content."""
    h = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(folder)):
        for name in sorted(dirs + files):
            path = Path(base) / name
            info = path.lstat()
            h.update(f"{path.relative_to(folder)} {info.st_mode} {info.st_mtime_ns} {info.st_size}".encode())
            if path.is_file() and not path.is_symlink():
                h.update(path.read_bytes())
    return h.hexdigest()


def _output(result) -> str:
    return result.stdout_tail + result.stderr_tail


TOOLCHAINS = ["rust", "go", "node"]


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_the_poison_passes_a_broken_patch_on_a_cache_every_validation_shares(toolchain, templates, tmp_path):
    """The attack is real: on the design before this fix, B's broken patch passed."""
    case = make_case(toolchain, templates, tmp_path)
    shared = case.view(shared=tmp_path / "shared")
    for commit in (case.base, case.a):
        result = case.validate(commit, shared)
        assert result.passed, _output(result)
    victim = case.validate(case.b, shared)
    # The broken test never ran: the poisoned binary stood in for it. Reading cargo's tests by name
    # (issue 35) now notices that no test ran; on a shared cache the exit status alone passed it.
    assert victim.passed or (toolchain == "rust" and victim.reason == "no_tests_ran"), _output(victim)
    assert victim.exit_code == 0 and "add_tests::adds" not in _output(victim)


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_a_poisoned_build_cache_never_reaches_another_tasks_tree(toolchain, templates, tmp_path, monkeypatch):
    case = make_case(toolchain, templates, tmp_path)
    view = case.view()
    case.base_check(case.base, view)
    root = project_cache_root(case.repo)
    trusted = root / cache_layers.TRUSTED / case.base
    before = digest(trusted)
    poisoner = case.validate(case.a, view)
    assert poisoner.passed, _output(poisoner)  # A's test poisoned the caches it was shown
    assert digest(trusted) == before  # which were a copy of its own
    victim = case.validate(case.b, view)
    assert not victim.passed, _output(victim)
    assert not list((root / cache_layers.LAYERS).iterdir())
    # Exactly as on a clean cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "clean-cache"))
    clean = case.validate(case.b, case.view())
    assert not clean.passed and clean.exit_code == victim.exit_code, _output(clean)


def test_code_checked_as_the_base_of_one_line_of_work_never_reaches_another(templates, tmp_path):
    """A landed on its scope's integration branch and checked there as the next task's base: the
    base check writes the caches of A's commit (poisoned), used only by trees descending from it.
    B, cut from the user's commit, never sees them."""
    case = make_case("rust", templates, tmp_path)
    view = case.view()
    case.base_check(case.base, view)
    case.base_check(case.a, view)
    deps = project_cache_root(case.repo) / cache_layers.TRUSTED / case.a / "rust" / "target" / "debug" / "deps"
    true = Path("/usr/bin/true").read_bytes()
    assert any(p.read_bytes() == true for p in deps.glob("rustp-*") if "." not in p.name)
    victim = case.validate(case.b, view)
    assert not victim.passed and victim.exit_code == 101, _output(victim)


def _diff(repo: Path, files: dict[str, str]) -> str:
    write(repo, files)
    git(repo, "add", "-N", "--", *files)
    diff = git(repo, "diff")
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-fdq")
    return diff


def test_a_whole_mesh_run_blocks_the_broken_task_after_the_poisoning_one(tmp_path):
    """The review's finding, end to end: task A (scope plan:a) closes and lands with its poison;
    task B (scope plan:b, cut from the user's commit) then validates its broken ``add``: blocked."""
    require_bwrap()
    repo = rust_project(tmp_path)
    (repo / "mesh.toml").write_text('review_max_cycles = 1\n\n[validation]\nallow = ["cargo test"]\ntimeout_s = 300\n')
    commit_all(repo, "mesh configuration")
    db = tmp_path / "tracker" / "mesh.db"
    db.parent.mkdir()
    with Tracker.init(db.parent, prefix="bc", actor="tester", db_path=db) as tracker:
        tasks = {scope: tracker.create(f"Task {scope}", labels=[f"plan:{scope}"], description="Do it.",
                                       acceptance_criteria="the tests pass", design="small", notes="none")["id"]
                 for scope in ("a", "b")}
    patches = {"a": _diff(repo, {"tests/poison.rs": RUST_POISON}),
               "b": _diff(repo, {"src/lib.rs": (repo / "src" / "lib.rs").read_text() + RUST_BROKEN_ADD})}
    env = {**tool_env(), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    reports = {}
    for scope, patch in patches.items():
        script = happy_script()
        script["synthesizer"][0] = r("synthesis", synthesis(patch, ["cargo test"]))
        path = tmp_path / f"script-{scope}.json"
        path.write_text(json.dumps(script))
        result = CliRunner().invoke(cli, ["--db", str(db), "--actor", "tester", "run", "--label", f"plan:{scope}",
                                          "--backend", "replay", "--script", str(path), "--repo", str(repo), "--json"],
                                    env=env, catch_exceptions=False)
        reports[scope] = (result.exit_code, json.loads(result.stdout), result.output)
    code, report, output = reports["a"]
    assert code == 0 and report["outcome"] == "closed", output
    code, report, output = reports["b"]
    assert code == 3 and report["outcome"] == "blocked" and report["block_reason"] == "validation_failed", output
    with Tracker(db, actor="tester") as tracker:
        assert tracker.get(tasks["b"])["status"] == "blocked"


# The bookkeeping, on a plain repository: a probe prints what its cache holds, then writes its tag
# there (and a folder it makes unreadable, which must still go).
PROBE = """import os, sys
seen = '/mesh/cache/probe/seen'
print(open(seen).read() if os.path.exists(seen) else '-')
open(seen, 'w').write(sys.argv[1])
locked = '/mesh/cache/probe/locked'
if os.path.isdir(locked):
    os.chmod(locked, 0o700)
os.makedirs(locked + '/deep', exist_ok=True)
os.chmod(locked, 0)
"""


def _probe(repo: Path, view: ProjectView, commit: str, tag: str) -> str:
    command = f"{sys.executable} probe.py {tag}"
    [result] = run_validation([command], cwd=repo, allow=[command], timeout_s=60, environment=view, commit=commit)
    assert result.passed, _output(result)
    return result.stdout_tail.strip()


@pytest.fixture
def plain(tmp_path):
    require_bwrap()
    repo = tmp_path / "plain"
    init_repo(repo)
    (repo / "probe.py").write_text(PROBE)
    commit_all(repo)
    cache = Mount("probe/c", "/mesh/cache/probe", writable=True, cache=True)
    view = ProjectView(project_root=str(repo), mounts=(cache,), cache_root=str(tmp_path / "caches"))
    return repo, view


def _child(repo: Path, parent: str, name: str) -> str:
    return branch(repo, name, parent, {f"{name}.txt": name})


def test_each_tree_builds_on_the_caches_of_the_nearest_base_it_descends_from(plain):
    repo, view = plain
    m = git(repo, "rev-parse", "HEAD").strip()
    x, y = _child(repo, m, "x"), _child(repo, m, "y")
    z = _child(repo, x, "z")
    assert not cache_layers.warm(view, repo, m)
    assert _probe(repo, cache_layers.writing(view), m, "m") == "-"
    assert cache_layers.warm(view, repo, m) and not cache_layers.warm(view, repo, x)
    assert _probe(repo, cache_layers.writing(view), x, "x") == "m"  # seeded from its parent's
    assert _probe(repo, view, y, "y") == "m"  # a sibling of x: m's caches, not x's
    assert _probe(repo, view, z, "z") == "x"
    assert _probe(repo, view, y, "y") == "m"  # what y wrote went with its copy
    root = Path(view.cache_root)
    assert not list((root / cache_layers.LAYERS).iterdir())
    assert sorted(p.name for p in cache_layers.trusted_commits(root)) == sorted([m, x])


def test_the_caches_are_bounded_by_commits_and_size_and_stale_folders_go(plain):
    repo, view = plain
    root = Path(view.cache_root)
    commit = git(repo, "rev-parse", "HEAD").strip()
    chain = [commit]
    for n in range(cache_layers.KEEP + 1):
        chain.append(_child(repo, chain[-1], f"c{n}"))
        _probe(repo, cache_layers.writing(view), chain[-1], f"c{n}")
    assert [p.name for p in cache_layers.trusted_commits(root)] == chain[::-1][:cache_layers.KEEP]
    # A layer and a staging folder of a process that is gone, a layer of a live one, and the
    # shared folder an earlier mesh kept for every validation.
    (root / cache_layers.LAYERS / "999999999-ab" / "probe").mkdir(parents=True)
    (root / cache_layers.TRUSTED / ".staging-999999999-cd").mkdir()
    (root / cache_layers.LAYERS / f"{os.getpid()}-ef").mkdir()
    (root / "rust" / "target").mkdir(parents=True)
    removed = prune(root, 1 << 20)
    assert removed == ["build cache rust: shared by every validation (an earlier mesh), removed; the base check"
                       " rebuilds it"]
    assert sorted(p.name for p in (root / cache_layers.LAYERS).iterdir()) == [f"{os.getpid()}-ef"]
    assert not (root / cache_layers.TRUSTED / ".staging-999999999-cd").exists()
    for folder in cache_layers.trusted_commits(root):
        (folder / "probe" / "c" / "bulk").write_bytes(os.urandom(600 << 10))
    removed = prune(root, 1)  # 1 MB: the oldest go, each commit's caches whole, until the rest fit
    assert len(removed) == cache_layers.KEEP - 1 and all(line.startswith("build caches of ") for line in removed)
    assert [p.name for p in cache_layers.trusted_commits(root)] == [chain[-1]]
