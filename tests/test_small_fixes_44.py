"""Issue 44, item 6: the small ones, each performed."""

from __future__ import annotations

import subprocess
import sys

from orchestrator.testruns.unittest_reader import READER, SHIM
from orchestrator.testruns.xml_reports import read_junit

SETUP_FAILS = ("import unittest\n\n\n" + "".join(
    f"class T{n}(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n"
    f"        raise RuntimeError('no database')\n\n    def test_{n}(self):\n        pass\n\n\n" for n in range(3))
               + "class Fine(unittest.TestCase):\n    def test_fine(self):\n        pass\n")


def test_a_failures_message_and_its_traceback_are_not_glued():
    data = (b'<testsuites><testsuite name="s"><testcase classname="t" name="a">'
            b"<failure message=\"assert b'x' != b'file.txt'\">self = &lt;tests.T&gt;\n    def test(): ...</failure>"
            b"</testcase></testsuite></testsuites>")
    [case] = read_junit(data, "pytest", lambda attrs: attrs["name"]).cases
    assert case.message.startswith("assert b'x' != b'file.txt'\nself = <tests.T>"), case.message


def test_more_classes_failing_their_set_up_than_tests_run_is_read(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_db.py").write_text(SETUP_FAILS)
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-c", SHIM, str(report), "discover", "-s", "tests", "-t", "."], cwd=tmp_path,
                   capture_output=True, check=False)
    run = READER.read(report.read_bytes())
    counts = run.counts()
    assert counts.passed == 1 and counts.errors == 3, counts
    assert {case.id for case in run.cases if case.status == "errored"} == {
        f"setUpClass (tests.test_db.T{n})" for n in range(3)}


def test_mesh_init_says_which_tool_made_the_python_environment(tmp_path):
    from orchestrator.toolchains.view import inspect
    from tests.toolchainkit import commit_all, init_repo, tool_env

    repo = tmp_path / "p"
    init_repo(repo)
    (repo / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\n')
    (repo / "p.py").write_text("X = 1\n")
    (repo / "uv.lock").write_text("version = 1\n")
    commit_all(repo)
    found = inspect(repo, None, tool_env(), check_installed=False).found
    assert [f.label for f in found] == ["python (uv)"]


def test_a_node_projects_preflight_says_nothing_of_python(tmp_path):
    import json

    from orchestrator.toolchains.view import inspect
    from tests.toolchainkit import commit_all, init_repo, tool_env

    repo = tmp_path / "n"
    init_repo(repo)
    (repo / "package.json").write_text(json.dumps({"name": "n", "scripts": {"test": "node --test"}}))
    (repo / "index.js").write_text("module.exports = 1;\n")
    commit_all(repo)
    inspection = inspect(repo, None, tool_env(), check_installed=False)
    assert [f.label for f in inspection.found] == ["node (npm)"]
    assert not any("Python" in note or "python" in note.lower() for note in inspection.notes), inspection.notes


def test_a_base_check_missing_a_dependency_group_names_the_install(tmp_path):
    from orchestrator.toolchains.base_check import BaseCheck

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\n\n'
                                             '[dependency-groups]\ndev = ["pytest>=8", "pytest-cov"]\n')
    (tmp_path / "uv.lock").write_text("version = 1\n")
    failed = {"command": "python -m pytest", "passed": False, "exit_code": 1,
              "stderr_tail": "/repo/.venv/bin/python: No module named 'pytest'\n"}
    text = BaseCheck("c" * 40, ["python -m pytest"], [failed]).failure_text(repo=tmp_path)
    assert "group 'dev'" in text and "uv sync --group dev" in text and "--allow-failing-base" not in text, text
    other = {**failed, "stderr_tail": "AssertionError: 1 != 2\n"}
    assert "--allow-failing-base" in BaseCheck("c" * 40, ["python -m pytest"], [other]).failure_text(repo=tmp_path)


def test_a_tracked_tracker_folder_does_not_stop_validation_at_the_repositorys_own_path(tmp_path):
    """bd users track .beads/ (config.yaml, issues.jsonl): with a project environment the tree shows
    at the repository's own path, where the tracker's folder is covered; copying the tracked files
    under the cover failed every command ("cp: cannot create regular file ... Read-only file
    system"). They are left out of the tree: the commands run, and never see the tracker."""
    import subprocess
    import sys

    from orchestrator.sandbox.bwrap import require_bwrap
    from orchestrator.sandbox.project_env import find_environment
    from orchestrator.sandbox.validation import run_validation
    from tests.toolchainkit import commit_all, init_repo

    require_bwrap()
    repo = tmp_path / "repo"
    init_repo(repo)
    (repo / ".beads").mkdir()
    (repo / ".beads" / "config.yaml").write_text("issue-prefix: x\n")
    (repo / ".beads" / "issues.jsonl").write_text("")
    (repo / "check.py").write_text("import os\nprint('tracker seen:', os.path.exists('.beads/config.yaml'))\n")
    (repo / ".gitignore").write_text(".venv/\n")
    commit_all(repo)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    command = "python check.py"
    [result] = run_validation([command], cwd=repo, allow=[command], timeout_s=60,
                              environment=find_environment(repo), hidden=[repo / ".beads"])
    assert result.passed and "tracker seen: False" in result.stdout_tail, result.stderr_tail
    assert (repo / ".beads" / "config.yaml").exists()  # the checkout's own is untouched


def test_vitest_output_loses_mesh_s_tests_file_by_file():
    """The clack trial: every file line lost mesh's whole count; only the file holding them does."""
    import re

    from orchestrator.sandbox.node_output import clean_vitest

    text = "\n".join([
        " ❯ test/a.test.ts (5 tests | 2 failed) 12ms",
        "   ✓ adds 1ms",
        "   × adds twice copy 3ms",
        "     → expected 5 to be 6",
        "   × totals copy 1ms",
        "     → expected 1 to be 2",
        "   ✓ totals 0ms",
        "   ✓ keeps 0ms",
        " ✓ test/b.test.ts (18 tests) 4ms",
        "",
        " Test Files  1 failed | 1 passed (2)",
        "      Tests  2 failed | 21 passed (23)",
    ])
    mine = re.compile(r"(?<![A-Za-z0-9_])(adds twice copy|totals copy)(?![A-Za-z0-9_])")
    shown = clean_vitest(text, mine, {"failed": 2, "passed": 0})
    assert " ✓ test/a.test.ts (3 tests) 12ms" in shown and " ✓ test/b.test.ts (18 tests) 4ms" in shown, shown
    assert "Tests  21 passed (21)" in shown and "Test Files  2 passed (2)" in shown, shown
    assert "copy" not in shown and "expected" not in shown


def test_a_test_writing_a_snapshot_gets_no_twin():
    """The clack trial: twins of snapshot tests wrote snapshots of their own ("Snapshots 10 written")."""
    from orchestrator.mutants.js_tests import MUTATOR

    text = ("import { test, expect } from 'vitest';\n"
            "test('renders', () => { expect(render()).toMatchSnapshot(); expect(f(1)).toBe(2); });\n"
            "test('inline', () => { expect(g()).toMatchInlineSnapshot(`x`); expect(f(1)).toBe(2); });\n"
            "test('plain', () => { expect(f(1)).toBe(2); });\n")
    assert [c.name for c in MUTATOR.candidates("x.test.ts", text)] == ["plain"]
