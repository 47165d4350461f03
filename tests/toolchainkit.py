"""Real projects of each toolchain, built with real tools and real dependencies.

- Node: a package depending on ``ms`` from the npm registry, installed with npm, pnpm or Yarn
  (``make test`` installs pnpm and Yarn beside the venv), tested by ``node --test``; a
  TypeScript package checked by ``tsc --noEmit``; a Vitest package.
- Go: a module requiring ``github.com/google/go-cmp``, whose source comes from Debian's
  ``golang-github-google-go-cmp-dev``: served as a file-system module proxy made here, then
  downloaded into a module cache of the test's own with ``go mod download``, as a user's is.
- Rust: a crate depending on ``itoa`` and ``memchr`` from Debian's packaged crates
  (``/usr/share/cargo/registry``), named as a directory source in the crate's
  ``.cargo/config.toml``.
- Python: a hatch-vcs package whose ``_version.py`` and compiled ``.mo`` catalogue are generated
  and git-ignored, with an editable install in its ``.venv``.

Installs are made once per test session into a template and copied per test. Each builder
returns the repository (its base committed) and the environment the toolchains must see.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE_TOOLS = ROOT / ".venv" / "node-tools" / "node_modules" / ".bin"
YARN_BERRY = ROOT / ".venv" / "yarn-berry" / "node_modules" / ".bin"
GO_CMP = Path("/usr/share/gocode/src/github.com/google/go-cmp")
CARGO_REGISTRY = Path("/usr/share/cargo/registry")
REQUIRED = os.environ.get("MESH_REQUIRE_TOOLCHAINS") == "1"

NODE_TEST = """const test = require('node:test');
const assert = require('node:assert');
const { seconds } = require('../index.js');
test('seconds', () => { assert.strictEqual(seconds('2s'), 2); });
"""
NODE_INDEX = "const ms = require('ms');\nexports.seconds = (text) => ms(text) / 1000;\n"


@pytest.fixture(scope="session")
def templates(tmp_path_factory):
    """Where the session's project templates are built, once each."""
    return tmp_path_factory.mktemp("toolchain-templates")


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """Build caches and base checks under the test's own cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def need(program: str, why: str) -> str:
    """The path of ``program`` on PATH (the node tools folder included); skip, or fail under
    ``make test``, when it is missing."""
    found = shutil.which(program, path=f"{NODE_TOOLS}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        message = f"{program} is not installed ({why}); make test installs it"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    return found


def tool_env(**extra: str) -> dict[str, str]:
    """os.environ with the node tools folder on PATH and ``extra`` set."""
    env = dict(os.environ)
    env["PATH"] = f"{NODE_TOOLS}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def commit_all(repo: Path, message: str = "base") -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def init_repo(repo: Path) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}{done.stderr[-2000:]}"


def write_node_package(repo: Path, *, test_script: str = "node --test", extra: dict | None = None) -> None:
    package = {"name": "nodep", "version": "1.0.0", "private": True, "scripts": {"test": test_script},
               "dependencies": {"ms": "^2.1.3"}, **(extra or {})}
    (repo / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    (repo / "index.js").write_text(NODE_INDEX)
    (repo / "test").mkdir(exist_ok=True)
    (repo / "test" / "seconds.test.js").write_text(NODE_TEST)
    (repo / ".gitignore").write_text("node_modules/\n")


_INSTALL = {"npm": ["install", "--no-audit", "--no-fund", "--loglevel=error"],
            "pnpm": ["install", "--reporter=silent"], "yarn": ["install", "--silent", "--no-progress"]}


def _from_template(template_root: Path, name: str, tmp_path: Path, build) -> Path:
    """A copy in ``tmp_path`` of the project ``build(folder)`` makes once per session (a git
    repository with its base committed and its dependencies installed)."""
    template = template_root / name
    if not template.exists():
        folder = template_root / f"{name}.build"
        shutil.rmtree(folder, ignore_errors=True)
        init_repo(folder)
        build(folder)
        commit_all(folder)
        folder.rename(template)
    repo = tmp_path / name
    shutil.copytree(template, repo, symlinks=True)
    return repo


def node_project(template_root: Path, tmp_path: Path, manager: str = "npm") -> Path:
    """A Node project installed with ``manager`` (a template per session, copied here)."""
    program = need(manager, f"the {manager} project")
    need("node", "the Node projects")

    def build(folder: Path) -> None:
        write_node_package(folder)
        _run([program, *_INSTALL[manager]], folder, tool_env())

    return _from_template(template_root, f"node-{manager}", tmp_path, build)


def ts_project(template_root: Path, tmp_path: Path) -> Path:
    """A TypeScript project (``typescript`` from the npm registry) whose check is ``tsc --noEmit``."""
    npm = need("npm", "the TypeScript project")

    def build(folder: Path) -> None:
        (folder / "package.json").write_text(json.dumps({
            "name": "tsp", "version": "1.0.0", "private": True, "scripts": {"test": "tsc --noEmit"},
            "devDependencies": {"typescript": "^5"}}, indent=2) + "\n")
        (folder / "tsconfig.json").write_text(json.dumps({"compilerOptions": {"strict": True, "target": "es2020",
                                                                              "incremental": True},
                                                          "include": ["src"]}))
        (folder / "src").mkdir()
        (folder / "src" / "add.ts").write_text("export function add(a: number, b: number): number { return a + b; }\n")
        (folder / ".gitignore").write_text("node_modules/\n*.tsbuildinfo\n")
        _run([npm, *_INSTALL["npm"]], folder, tool_env())

    return _from_template(template_root, "tsp", tmp_path, build)


def vitest_project(template_root: Path, tmp_path: Path) -> Path:
    """A Vitest project (``vitest@3`` from the npm registry, which Node 20 runs): Vite writes its
    cache into ``node_modules/.vite`` and parses with WebAssembly."""
    npm = need("npm", "the Vitest project")

    def build(folder: Path) -> None:
        (folder / "package.json").write_text(json.dumps({
            "name": "vt", "version": "1.0.0", "private": True, "type": "module",
            "scripts": {"test": "vitest run"}, "devDependencies": {"vitest": "^3"}}, indent=2) + "\n")
        (folder / "src").mkdir()
        (folder / "src" / "add.js").write_text("export const add = (a, b) => a + b;\n")
        (folder / "src" / "add.test.js").write_text(
            "import { test, expect } from 'vitest';\nimport { add } from './add.js';\n"
            "test('add', () => { expect(add(1, 2)).toBe(3); });\n")
        (folder / ".gitignore").write_text("node_modules/\n")
        _run([npm, *_INSTALL["npm"]], folder, tool_env())

    return _from_template(template_root, "vt", tmp_path, build)


WORKSPACE_FILES = {
    "package.json": json.dumps({"name": "mono", "private": True, "scripts": {"test": "pnpm -r test"},
                                "devDependencies": {"vitest": "^3"}}, indent=2) + "\n",
    # esbuild's install script is not needed by Vitest (its binary comes as a package).
    "pnpm-workspace.yaml": "packages:\n  - 'packages/*'\nallowBuilds:\n  esbuild: false\n",
    ".gitignore": "node_modules/\n",
    "packages/core/package.json": json.dumps({
        "name": "@mono/core", "version": "1.0.0", "type": "module", "main": "src/index.js",
        "scripts": {"test": "vitest run"}, "devDependencies": {"vitest": "^3"}}, indent=2) + "\n",
    "packages/core/src/index.js": "export const add = (a, b) => a + b;\n",
    "packages/core/test/index.test.js": ("import { test, expect } from 'vitest';\nimport { add } from '../src/index.js';\n\n"
                                         "test('adds', () => { expect(add(2, 3)).toBe(5); });\n"
                                         "test('adds negatives', () => { expect(add(-2, -3)).toBe(-5); });\n"),
    "packages/prompts/package.json": json.dumps({
        "name": "@mono/prompts", "version": "1.0.0", "type": "module", "main": "src/index.js",
        "scripts": {"test": "vitest run"}, "dependencies": {"@mono/core": "workspace:*"},
        "devDependencies": {"vitest": "^3"}}, indent=2) + "\n",
    # A TypeScript config: Vite bundles it into node_modules/.vite-temp before loading it.
    "packages/prompts/vitest.config.ts": ("import { defineConfig } from 'vitest/config';\n"
                                          "export default defineConfig({ test: { include: ['test/**/*.test.js'] } });\n"),
    "packages/prompts/src/index.js": "import { add } from '@mono/core';\n\nexport const total = (xs) => xs.reduce(add, 0);\n",
    "packages/prompts/test/index.test.js": ("import { test, expect } from 'vitest';\nimport { total } from '../src/index.js';\n\n"
                                            "test('totals', () => { expect(total([1, 2, 3])).toBe(6); });\n"),
    "packages/util/package.json": json.dumps({"name": "@mono/util", "version": "1.0.0",
                                              "scripts": {"test": "node --test"}}, indent=2) + "\n",
    "packages/util/test/util.test.js": ("const test = require('node:test');\nconst assert = require('node:assert');\n\n"
                                        "test('twice', () => { assert.strictEqual(2 * 2, 4); });\n"),
}
# The pnpm version the workspace pins, not the installed one: pnpm would download it, offline it cannot.
PINNED_PNPM = "pnpm@9.15.0"


def pnpm_workspace(template_root: Path, tmp_path: Path) -> Path:
    """A pnpm workspace (``vitest@3`` from the npm registry): ``@mono/core`` and ``@mono/prompts``
    (depending on core through ``workspace:*``) tested by Vitest, ``@mono/util`` by node --test;
    the root's ``test`` script is ``pnpm -r test``; ``packageManager`` pins another pnpm."""
    pnpm = need("pnpm", "the pnpm workspace")
    need("node", "the pnpm workspace")

    def build(folder: Path) -> None:
        for name, text in WORKSPACE_FILES.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
        _run([pnpm, *_INSTALL["pnpm"]], folder, tool_env(COREPACK_ENABLE_STRICT="0"))
        manifest = json.loads((folder / "package.json").read_text())
        manifest["packageManager"] = PINNED_PNPM  # pinned after the install, as a checkout of it has it
        (folder / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")

    return _from_template(template_root, "pnpm-workspace", tmp_path, build)


def pnp_project(template_root: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A Yarn Plug'n'Play project (Yarn 4 from the npm registry): no node_modules, a ``.pnp.cjs``
    and ``.yarn/cache`` ignored. Returns it and the environment with that Yarn first on PATH."""
    yarn = YARN_BERRY / "yarn"
    if not yarn.exists():
        need("a program that is not there", "Yarn 4 (@yarnpkg/cli-dist)")
    # Yarn 2+ installs --immutable by default when it sees CI set (as CI does): the fixture is new.
    env = tool_env(COREPACK_ENABLE_STRICT="0", YARN_ENABLE_IMMUTABLE_INSTALLS="false")
    env["PATH"] = f"{YARN_BERRY}{os.pathsep}{env['PATH']}"

    def build(folder: Path) -> None:
        write_node_package(folder)
        (folder / ".yarnrc.yml").write_text("nodeLinker: pnp\nenableGlobalCache: false\nenableTelemetry: false\n")
        (folder / ".gitignore").write_text(".yarn/cache\n.yarn/install-state.gz\n.pnp.*\n")
        _run([str(yarn), "install"], folder, env)

    return _from_template(template_root, "pnp", tmp_path, build), env


def go_proxy(folder: Path) -> Path:
    """A file-system Go module proxy serving Debian's go-cmp source as its version."""
    if not (GO_CMP / "cmp").is_dir():
        need("a program that is not there", "Debian's golang-github-google-go-cmp-dev")
    module, version = "github.com/google/go-cmp", "v0.5.9"
    versions = folder / module / "@v"
    versions.mkdir(parents=True, exist_ok=True)
    (versions / "list").write_text(version + "\n")
    (versions / f"{version}.info").write_text(json.dumps({"Version": version, "Time": "2022-08-01T00:00:00Z"}))
    (versions / f"{version}.mod").write_text((GO_CMP / "go.mod").read_text())
    with zipfile.ZipFile(versions / f"{version}.zip", "w") as archive:
        for base, _dirs, files in os.walk(GO_CMP):
            for name in files:
                path = Path(base) / name
                archive.write(path, f"{module}@{version}/{path.relative_to(GO_CMP).as_posix()}")
    return folder


GO_SOURCE = """package gop

import "github.com/google/go-cmp/cmp"

// Same tells whether two slices hold the same numbers.
func Same(a, b []int) bool { return cmp.Equal(a, b) }
"""
GO_TEST = """package gop

import "testing"

func TestSame(t *testing.T) {
\tif !Same([]int{1, 2}, []int{1, 2}) || Same([]int{1}, []int{2}) {
\t\tt.Fatal("Same is wrong")
\t}
}
"""


def go_project(tmp_path: Path, *, download: bool = True) -> tuple[Path, dict[str, str]]:
    """A Go module needing go-cmp; with ``download`` its module cache (the test's own) holds it.
    Returns the repository and the environment naming that cache."""
    go = need("go", "the Go project")
    modcache = tmp_path / "gomodcache"
    env = tool_env(GOMODCACHE=str(modcache), GOFLAGS="-modcacherw=false", GOTOOLCHAIN="local",
                   GOCACHE=str(tmp_path / "gocache-host"))
    repo = tmp_path / "gop"
    init_repo(repo)
    (repo / "go.mod").write_text("module example.com/gop\n\ngo 1.19\n\nrequire github.com/google/go-cmp v0.5.9\n")
    (repo / "gop.go").write_text(GO_SOURCE)
    (repo / "gop_test.go").write_text(GO_TEST)
    proxy = go_proxy(tmp_path / "goproxy")
    fetch = {**env, "GOPROXY": f"file://{proxy}", "GOSUMDB": "off", "GOFLAGS": "-mod=mod"}
    _run([go, "mod", "tidy"], repo, fetch)
    commit_all(repo)
    if download:
        _run([go, "mod", "download"], repo, fetch)
    else:
        # A user who cloned the module and never downloaded its requirements: an empty cache.
        env["GOMODCACHE"] = str(tmp_path / "empty-gomodcache")
    env.pop("GOFLAGS")
    return repo, env


RUST_LIB = """pub fn digits(n: u64) -> String { itoa::Buffer::new().format(n).to_string() }

pub fn find(haystack: &[u8], needle: u8) -> Option<usize> { memchr::memchr(needle, haystack) }

#[cfg(test)]
mod tests {
    #[test]
    fn digits_and_find() {
        assert_eq!(super::digits(42), "42");
        assert_eq!(super::find(b"abc", b'c'), Some(2));
    }
}
"""


def rust_project(tmp_path: Path) -> Path:
    """A crate needing itoa and memchr from Debian's packaged crates (a directory source)."""
    need("cargo", "the Rust project")
    crates = sorted(p.name for p in CARGO_REGISTRY.glob("itoa-1.*")) + sorted(
        p.name for p in CARGO_REGISTRY.glob("memchr-2.*"))
    if len(crates) < 2:
        need("a program that is not there", "Debian's librust-itoa-dev and librust-memchr-dev")
    repo = tmp_path / "rustp"
    init_repo(repo)
    (repo / "src").mkdir()
    (repo / ".cargo").mkdir()
    (repo / "Cargo.toml").write_text('[package]\nname = "rustp"\nversion = "0.1.0"\nedition = "2021"\n\n'
                                     '[dependencies]\nitoa = "1"\nmemchr = "2"\n')
    (repo / ".cargo" / "config.toml").write_text(
        f'[source.crates-io]\nreplace-with = "debian"\n\n[source.debian]\ndirectory = "{CARGO_REGISTRY}"\n')
    (repo / "src" / "lib.rs").write_text(RUST_LIB)
    (repo / ".gitignore").write_text("target/\nCargo.lock\n")
    commit_all(repo)
    _run(["cargo", "generate-lockfile", "--offline"], repo, tool_env())
    return repo


HATCH_PYPROJECT = """[build-system]
build-backend = "hatchling.build"
requires = ["hatch-vcs", "hatchling"]

[project]
name = "stamped"
dynamic = ["version"]
dependencies = ["only-in-the-venv"]

[tool.hatch]
version.source = "vcs"
build.hooks.vcs.version-file = "src/stamped/_version.py"
"""
HATCH_TEST = '''import gettext
import os
import unittest

import only_in_the_venv
import stamped


class T(unittest.TestCase):
    def test_version_is_the_generated_one(self):
        self.assertEqual(stamped.__version__, "1.2.3")

    def test_catalogue_is_compiled(self):
        locales = os.path.join(os.path.dirname(stamped.__file__), "locale")
        fr = gettext.translation("stamped", locales, languages=["fr"])
        self.assertEqual(fr.gettext("hello"), "bonjour")

    def test_dependency(self):
        self.assertEqual(only_in_the_venv.answer(), 42)
'''


def _mo(messages: dict[str, str]) -> bytes:
    """A GNU gettext catalogue (the .mo format msgfmt writes)."""
    import struct

    keys = sorted(messages)
    ids = b"".join(k.encode() + b"\0" for k in keys)
    strs = b"".join(messages[k].encode() + b"\0" for k in keys)
    offsets, o_ids, o_strs = [], 0, 0
    for k in keys:
        offsets.append((len(k.encode()), o_ids, len(messages[k].encode()), o_strs))
        o_ids += len(k.encode()) + 1
        o_strs += len(messages[k].encode()) + 1
    start = 7 * 4 + 16 * len(keys)
    head = struct.pack("Iiiiiii", 0x950412DE, 0, len(keys), 7 * 4, 7 * 4 + 8 * len(keys), 0, 0)
    table_ids = b"".join(struct.pack("ii", ln, start + off) for ln, off, _, _ in offsets)
    table_strs = b"".join(struct.pack("ii", ln, start + len(ids) + off) for _, _, ln, off in offsets)
    return head + table_ids + table_strs + ids + strs


def hatch_project(tmp_path: Path) -> Path:
    """A hatch-vcs package: ``_version.py`` and the ``.mo`` are generated and ignored, the
    package is installed editable in ``.venv`` (a .pth, as pip's editable installs write)."""
    repo = tmp_path / "stamped"
    package = repo / "src" / "stamped"
    (package / "locale" / "fr" / "LC_MESSAGES").mkdir(parents=True)
    init_repo(repo)
    (repo / "pyproject.toml").write_text(HATCH_PYPROJECT)
    (package / "__init__.py").write_text("from stamped._version import __version__\n")
    (package / "locale" / "fr" / "LC_MESSAGES" / "stamped.po").write_text(
        'msgid "hello"\nmsgstr "bonjour"\n')
    (repo / "tests").mkdir()
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_stamped.py").write_text(HATCH_TEST)
    (repo / ".gitignore").write_text(".venv/\nsrc/stamped/_version.py\n*.mo\n__pycache__/\n")
    commit_all(repo)
    (package / "_version.py").write_text('__version__ = version = "1.2.3"\n')
    (package / "locale" / "fr" / "LC_MESSAGES" / "stamped.mo").write_bytes(_mo({"hello": "bonjour"}))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    site = Path(subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "only_in_the_venv.py").write_text("def answer():\n    return 42\n")
    (site / "__editable__.stamped.pth").write_text(str(repo / "src") + "\n")
    return repo
