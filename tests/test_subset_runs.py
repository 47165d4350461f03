"""Issue 48, item 1: a command the check already covers is not run again. The synthesizer's
``python -m pytest tests/test_a.py`` beside the check ``python -m pytest`` is judged from the
check's run (its tests picked by id, the proof naming the command that stood for it); a command
with other options, or naming tests the larger run does not hold, still runs."""

from __future__ import annotations

import sys

import pytest

from orchestrator.sandbox.bwrap import require_bwrap
from orchestrator.sandbox.validation import run_validation
from orchestrator.testruns.subsets import covered_by
from tests.test_attack_forged_runner import _project

PY = sys.executable
TEST_A = ("import unittest\n\nfrom calc import add\n\n\nclass Add(unittest.TestCase):\n"
          "    def test_small(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
          "    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n")
TEST_B = "def test_plain():\n    assert 1 + 1 == 2\n"
FILES = {"calc.py": "def add(a, b):\n    return a + b\n", "tests/__init__.py": "", "tests/test_a.py": TEST_A,
         "tests/test_b.py": TEST_B}


@pytest.mark.parametrize("small, big, picked", [
    ("python -m pytest tests/test_a.py", "python -m pytest", ["tests.test_a.Add::test_small"]),
    ("python -m pytest tests/test_a.py::Add::test_zero", "python -m pytest tests", ["tests.test_a.Add::test_zero"]),
    ("python -m pytest tests", "python -m pytest", ["tests.test_b::test_plain", "tests.test_a.Add::test_zero"]),
    ("python -m unittest tests.test_a", "python -m unittest", ["tests.test_a.Add.test_small"]),
])
def test_a_subset_and_its_tests_are_told(small, big, picked):
    pick = covered_by(small.split(), big.split(), None)
    assert pick is not None
    assert all(pick(case) for case in picked)
    assert not pick("other.test_c::test_x") and not pick("other.test_c.C.test_x")


@pytest.mark.parametrize("small, big", [
    ("python -m pytest -q tests/test_a.py", "python -m pytest"),          # another option
    ("python -m pytest tests/test_a.py", "python -m pytest -x"),          # the larger stops at a failure
    ("python -m pytest -k small tests/test_a.py", "python -m pytest -k small"),
    ("python -m pytest tests/test_a.py", "python -m pytest tests/test_b.py"),  # not inside
    ("python3 -m pytest tests/test_a.py", "python -m pytest"),            # another interpreter
    ("python -m unittest tests.test_a", "python -m unittest discover -s tests"),
    ("python -m pytest", "python -m pytest"),
])
def test_what_is_no_subset(small, big):
    assert covered_by(small.split(), big.split(), None) is None


def _validate(root, commands):
    require_bwrap()
    return run_validation(commands, cwd=root, allow=commands, timeout_s=120)


def test_the_smaller_command_is_judged_from_the_larger_run(tmp_path):
    root = _project(tmp_path / "p", FILES)
    small, big = f"{PY} -m pytest tests/test_a.py", f"{PY} -m pytest"
    first, whole = _validate(root, [small, big])
    assert whole.passed and whole.tests.ran == 3, whole.stderr_tail
    assert first.passed and first.tests.ran == 2 and first.duration_s == 0.0
    assert f"judged from the tests of `{big}`" in first.stderr_tail
    assert {case.id for case in first.run.cases} == {"tests.test_a.Add::test_small", "tests.test_a.Add::test_zero"}
    # A failing test of the subset fails it, with its message, from the larger run.
    broken = _project(tmp_path / "q", {**FILES, "calc.py": "def add(a, b):\n    return a - b\n"})
    first, whole = _validate(broken, [small, big])
    assert not first.passed and [case.id for case in first.run.failures()] == ["tests.test_a.Add::test_small"]
    assert "5" in first.run.failures()[0].message and "judged from" in first.stderr_tail


def test_a_command_the_larger_run_does_not_hold_runs_itself(tmp_path):
    root = _project(tmp_path / "p", {**FILES, "pytest.ini": "[pytest]\ntestpaths = tests/test_b.py\n"})
    # pytest's testpaths keep tests/test_a.py out of the whole run: the subset is not found there.
    small, big = f"{PY} -m pytest tests/test_a.py", f"{PY} -m pytest"
    first, whole = _validate(root, [small, big])
    assert whole.tests.ran == 1 and first.tests.ran == 2, (whole.tests, first.tests)
    assert "judged from" not in first.stderr_tail


def test_go_jest_vitest_and_cargo_subsets_are_told(tmp_path):
    (tmp_path / "go.mod").write_text("module example.com/m\n\ngo 1.19\n")
    pick = covered_by(["go", "test", "-json", "./pkg/foo"], ["go", "test", "-json", "./..."], tmp_path)
    assert pick is not None and pick("example.com/m/pkg/foo.TestX") and pick("example.com/m/pkg/foo.TestX/sub")
    assert not pick("example.com/m/pkg/bar.TestX") and not pick("example.com/m/pkg/foo/deeper.TestY")
    assert covered_by(["go", "test", "./pkg/..."], ["go", "test", "./pkg/foo"], tmp_path) is None
    assert covered_by(["go", "test", "-run", "TestX", "./pkg"], ["go", "test", "./..."], tmp_path) is None
    pick = covered_by(["npx", "vitest", "run", "test/a.test.ts"], ["npx", "vitest", "run"], tmp_path)
    assert pick is not None and pick("test/a.test.ts > adds") and not pick("test/b.test.ts > adds")
    assert covered_by(["npx", "jest", "-t", "adds", "a.test"], ["npx", "jest"], tmp_path) is None
    assert covered_by(["npx", "jest", "a.test"], ["npx", "vitest", "run"], tmp_path) is None
    pick = covered_by(["cargo", "test", "parser"], ["cargo", "test"], tmp_path)
    assert pick is not None and pick("parser::tests::reads") and not pick("lexer::tests::reads")


def test_an_evals_grading_runs_each_command_itself(tmp_path):
    """A hidden command's tests all get their twins: the eval's grading judges no subset."""
    require_bwrap()
    root = _project(tmp_path / "p", FILES)
    small, big = f"{PY} -m pytest tests/test_a.py", f"{PY} -m pytest"
    first, _whole = run_validation([small, big], cwd=root, allow=[small, big], timeout_s=120, judge_subsets=False)
    assert first.passed and first.tests.ran == 2 and "judged from" not in first.stderr_tail
    assert first.duration_s > 0
