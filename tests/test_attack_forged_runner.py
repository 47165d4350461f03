"""Issue 34, item 3 (and issue 35, item 4): verdicts the code under test cannot forge.

Each attack is performed for real: a project whose code under test (a module, a test
package's ``__init__.py``, a test helper) replaces the runner's assertions or its test
execution at import, run by the real runner (unittest, pytest) inside bwrap through
``run_validation``, the way validation and eval grading run it; and once end to end, a
``mesh run`` whose broken patch forges its own grade. Without mesh's control tests each of
these reported every test passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sandbox import canaries
from orchestrator.sandbox.bwrap import require_bwrap
from orchestrator.sandbox.validation import run_validation
from tests.runkit import TASK, VALIDATE, make_workspace
from tests.test_attack_test_counts import BROKEN_FEATURE, run_patch

UNITTEST = f"{sys.executable} -m unittest discover -s tests -t ."
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"
CODE = "def add(a, b):\n    return a - b\n"  # broken: every honest run fails
TESTS = ("import unittest\n\nfrom calc import add\n\n\nclass Add(unittest.TestCase):\n"
         "    def test_small(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
         "    def test_zero(self):\n        self.assertEqual(add(0, 4), 4)\n")
PLAIN_TESTS = "from calc import add\n\n\ndef test_small():\n    assert add(2, 3) == 5\n"
NO_OP_ASSERT = "import unittest\nunittest.TestCase.assertEqual = lambda self, first, second, msg=None: None\n"
NO_OP_RUNTEST = "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
REPORT_ALL_PASSED = ("import _pytest.reports\n_real = _pytest.reports.TestReport.__init__\n"
                     "def _init(self, *args, **kwargs):\n    _real(self, *args, **kwargs)\n"
                     "    self.outcome = 'passed'\n    self.longrepr = None\n"
                     "    if hasattr(self, 'wasxfail'):\n        del self.wasxfail\n"
                     "_pytest.reports.TestReport.__init__ = _init\n")


def _project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)
    return root


def _validate(root: Path, command: str):
    require_bwrap()
    [result] = run_validation([command], cwd=root, allow=[command], timeout_s=120)
    return result


@pytest.mark.parametrize("where", ["calc.py", "tests/__init__.py", "tests/helpers.py"])
def test_unittest_assertions_replaced_from_the_code_or_a_test_helper_are_caught(tmp_path, where):
    files = {"calc.py": CODE, "tests/__init__.py": "", "tests/test_calc.py": TESTS}
    if where == "tests/helpers.py":
        files["tests/test_calc.py"] = "from tests import helpers  # noqa\n" + TESTS
    files[where] = files.get(where, "") + NO_OP_ASSERT
    result = _validate(_project(tmp_path / "p", files), UNITTEST)
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail)
    assert "verdicts are forged" in result.stderr_tail and "must fail" in result.stderr_tail


@pytest.mark.parametrize("attack", [NO_OP_ASSERT, NO_OP_RUNTEST, REPORT_ALL_PASSED])
def test_pytest_execution_or_reports_replaced_from_the_code_are_caught(tmp_path, attack):
    files = {"calc.py": CODE + attack, "tests/__init__.py": "", "tests/test_calc.py": TESTS,
             "tests/test_plain.py": PLAIN_TESTS}
    result = _validate(_project(tmp_path / "p", files), PYTEST)
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail)


@pytest.mark.parametrize("command", [UNITTEST, PYTEST])
def test_an_honest_run_passes_with_the_projects_own_counts(tmp_path, command):
    good = {"calc.py": "def add(a, b):\n    return a + b\n", "tests/__init__.py": "", "tests/test_calc.py": TESTS}
    root = _project(tmp_path / "p", good)
    result = _validate(root, command)
    assert result.passed and result.reason is None, result.stderr_tail
    assert result.tests.ran == 2 and result.tests.passed == 2 and result.tests.skipped == 0
    assert "control tests" not in result.stderr_tail
    # What a person or a worker reads is the project's own run: mesh's failing control tests
    # are not in it, and the closing counts are the project's.
    shown = result.stdout_tail + result.stderr_tail
    assert "fail" not in shown.lower() and "xfail" not in shown and "FAILURES" not in shown, shown
    assert ("2 passed in " in shown) if "pytest" in command else ("Ran 2 tests in" in shown and "\nOK" in shown), shown
    # A broken one fails as it always did, its counts its own.
    (root / "calc.py").write_text(CODE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "b"],
                   check=True, env=env)
    broken = _validate(root, command)
    assert not broken.passed and broken.reason is None
    assert broken.tests.ran == 2 and broken.tests.failed == 2
    # The checkout itself never held the control tests.
    assert (root / "tests" / "test_calc.py").read_text() == TESTS


def test_a_run_that_selects_tests_says_the_runner_is_not_checked(tmp_path):
    root = _project(tmp_path / "p", {"calc.py": "def add(a, b):\n    return a + b\n", "tests/__init__.py": "",
                                     "tests/test_calc.py": TESTS})
    result = _validate(root, f"{PYTEST} -k small")
    assert result.passed and "runner's honesty is not checked" in result.stderr_tail


def test_the_control_tests_look_like_the_tests_around_them(tmp_path):
    module = tmp_path / "tests" / "test_calc.py"
    module.parent.mkdir()
    module.write_text(TESTS)
    planted = canaries.plant(["discover", "-s", "tests"], "unittest", tmp_path, seed=7)
    text = module.read_text()
    assert planted is not None and text.startswith(TESTS)
    assert "mesh" not in text.lower() and "canary" not in text.lower() and "_unittest" not in text
    assert sorted(planted.expected.values()) == ["failed", "passed", "passed", "xfail"]
    other = canaries.plant(["discover", "-s", "tests"], "unittest", tmp_path, seed=8)
    assert set(other.expected) != set(planted.expected)  # drawn afresh for each command
    other.remove()
    planted.remove()
    assert module.read_text() == TESTS


def test_a_broken_patch_that_forges_its_grade_does_not_close_the_task(tmp_path):
    ws = make_workspace(tmp_path)
    forge = ("diff --git a/temperature.py b/temperature.py\n--- a/temperature.py\n+++ b/temperature.py\n"
             "@@ -1,3 +1,5 @@\n \"\"\"Temperature conversions for the weather-station firmware tools.\"\"\"\n"
             "+import unittest\n+unittest.TestCase.assertEqual = lambda self, first, second, msg=None: None\n \n"
             " ABSOLUTE_ZERO_C = -273.15\n")
    assert_blocked_as_forged(ws, forge + BROKEN_FEATURE)


def assert_blocked_as_forged(ws, patch: str) -> None:
    """``patch`` run by ``mesh run`` is blocked at validation as ``runner_forged``, its task blocked."""
    code, report, res = run_patch(ws, patch)
    assert code == 3, res.output
    assert report["outcome"] == "blocked" and report["block_reason"] == "validation_failed"
    assert f"`{VALIDATE}`: runner_forged" in report["block_detail"]
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "blocked"
