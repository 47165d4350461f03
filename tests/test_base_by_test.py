"""The base comparison by test, not by count (issue 35, items 4 and 6), end to end.

Real ``mesh run``s (replay workers) on the demo project with real unittest in bwrap, and a real
two-task ``mesh drain``: a patch that fixes one failing test and breaks another (the same counts)
does not pass under ``--allow-failing-base``; a patch that silences the runner never passes in any
mode; a fix is named as such with what still fails; a renamed test (the same count) is a test gone;
and a drain pays the check once for a tree the previous task validated and landed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.drainkit import make_drain_workspace
from tests.runkit import TASK, VALIDATE, make_workspace
from tests.test_attack_test_counts import (EXIT_IN_TEST_PACKAGE, _one_review_cycle, assert_not_closed, new_file,
                                           proofs, run_patch)

CALC = "def double(n):\n    return n + n + {double}\n\n\ndef half(n):\n    return n // {half}\n\n\n" \
       "def triple(n):\n    return n * {triple}\n"
CALC_TESTS = """import unittest

from calc import double, half, triple


class Calc(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(3), 6)

    def test_half(self):
        self.assertEqual(half(8), 4)

    def test_triple(self):
        self.assertEqual(triple(2), 6)
"""


def calc_change(**now: int) -> str:
    """The diff from the base's calc.py (double and triple wrong, half right) to one with ``now``."""
    before = CALC.format(double=1, half=2, triple=4).splitlines()
    after = CALC.format(**{"double": 1, "half": 2, "triple": 4, **now}).splitlines()
    body = "".join(f"-{line}\n" for line in before) + "".join(f"+{line}\n" for line in after)
    return (f"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,{len(before)} +1,{len(after)} @@\n"
            + body)


@pytest.fixture
def failing_base(tmp_path):
    """The demo workspace whose base has calc.py with two of its three tests failing."""
    ws = make_workspace(tmp_path)
    (ws.repo / "calc.py").write_text(CALC.format(double=1, half=2, triple=4))
    (ws.repo / "tests" / "test_calc.py").write_text(CALC_TESTS)
    ws.git("add", "-A")
    ws.git("commit", "-q", "-m", "calc, with two bugs")
    return ws


def allowing(ws, extra: str = "") -> str:
    path = ws.root / "mesh-failing-base.toml"
    path.write_text(_one_review_cycle((ws.repo / "mesh.toml").read_text()) + "\n" + extra)
    return str(path)


def test_fixing_one_failing_test_and_breaking_another_does_not_pass(failing_base):
    ws = failing_base
    # double fixed, half broken: 2 failed before and 2 failed after, the counts alone are equal.
    code, report, res = run_patch(ws, calc_change(double=0, half=3), None, "--allow-failing-base",
                                  "--config", allowing(ws))
    assert code == 3, res.output
    result = assert_not_closed(ws, report, "tests_broken")
    assert result["tests"]["failed"] == 2
    assert "1 test(s) that passed on the base fail: tests.test_calc.Calc.test_half" in result["stderr_tail"]
    assert "fixed: tests.test_calc.Calc.test_double" in result["stderr_tail"]


def test_a_fix_with_a_failing_base_names_what_it_fixed_and_what_still_fails(failing_base):
    ws = failing_base
    code, report, res = run_patch(ws, calc_change(double=0), None, "--allow-failing-base", "--config", allowing(ws))
    assert code == 0 and report["outcome"] == "closed", res.output
    [proof] = proofs(ws)
    [result] = proof["results"]
    assert result["passed"] is True and result["reason"] == "fails_on_base_too"
    assert ("fixed: tests.test_calc.Calc.test_double; still failing as on the base: tests.test_calc.Calc.test_triple"
            in result["stderr_tail"])
    shown = " ".join(ws.mesh("show", TASK).output.split())
    assert "pass (fails_on_base_too; tests" in shown
    assert "still failing as on the base: tests.test_calc.Calc.test_triple" in shown.replace("| ", "")


def test_a_silenced_runner_never_passes_with_a_failing_base(failing_base):
    ws = failing_base
    code, report, res = run_patch(ws, calc_change(double=0) + EXIT_IN_TEST_PACKAGE, None, "--allow-failing-base",
                                  "--config", allowing(ws, '[patch]\nallow = ["tests/__init__.py"]\n'))
    assert code == 3, res.output
    result = assert_not_closed(ws, report, "no_test_report")
    assert result["exit_code"] == 0


def test_a_renamed_test_is_a_test_gone_though_the_count_is_the_same(tmp_path):
    ws = make_workspace(tmp_path)
    path = "tests/test_temperature.py"
    text = (ws.repo / path).read_text()
    gone = text.split("def test_", 1)[1].split("(", 1)[0]
    # As many tests run and pass as on the base; but the one that passed there under its name is gone.
    renamed = text.replace(f"    def test_{gone}(", f"    def test_renamed_{gone}(", 1)
    lines_a, lines_b = text.splitlines(), renamed.splitlines()
    diff_skip = (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
                 f"@@ -1,{len(lines_a)} +1,{len(lines_b)} @@\n"
                 + "".join(f"-{line}\n" for line in lines_a) + "".join(f"+{line}\n" for line in lines_b))
    code, report, res = run_patch(ws, diff_skip)
    assert code == 3, res.output
    result = assert_not_closed(ws, report, "fewer_tests_than_base")
    [proof] = proofs(ws)
    assert result["tests"]["ran"] == proof["base_tests"]["counts"][VALIDATE]["ran"]
    assert "1 test(s) that passed on the base are gone: tests.test_temperature." in result["stderr_tail"]
    assert f".test_{gone}" in result["stderr_tail"]


UNIT = "python3 -m unittest discover -s tests -t ."
COUNTING_TEST = """import os
import unittest


class Counted(unittest.TestCase):
    def test_counted(self):
        with open(os.environ["MESH_TEST_LOG"], "a") as log:
            log.write("ran\\n")
"""


def test_a_two_task_drain_pays_the_check_once_for_a_tree_it_validated(tmp_path, monkeypatch):
    """Task B starts from the squash that landed task A: that tree passed its check in A's validation,
    so neither a base check nor a base comparison runs it again (issue 35 item 6)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    log = tmp_path / "ran.log"
    monkeypatch.setenv("MESH_TEST_LOG", str(log))
    ws = make_drain_workspace(tmp_path, files={"tests/__init__.py": "", "tests/test_counted.py": COUNTING_TEST},
                              extra_config=f'check = ["{UNIT}"]\nenv = ["MESH_TEST_LOG"]\n')
    ws.config.write_text(ws.config.read_text().replace('allow = ["python3 check.py"]',
                                                       f'allow = ["python3 check.py", "{UNIT}"]'))
    ws.task("A", files={"checks/a.py": "assert 1 + 1 == 2\n"}, commands=[UNIT])
    ws.task("B", after=("A",), files={"checks/b.py": "assert 2 + 2 == 4\n"}, commands=[UNIT])
    code, events, res = ws.drain()
    assert code == 0, res.output
    assert ws.landed_tasks() == [ws.ids["A"], ws.ids["B"]]
    # The check on the first base, A's validation, B's validation: three runs, not five.
    assert log.read_text().count("ran") == 3, res.output


SHARED = "DIVISOR = 2\n\n\ndef half(n):\n    return n // DIVISOR\n"
SHARED_TESTS = ("import unittest\n\nimport shared\n\n\nclass Shared(unittest.TestCase):\n"
                "    def test_half(self):\n        self.assertEqual(shared.half(8), 4)\n")
# A new test that leaves shared state behind: test_half fails after it, and passes alone.
POLLUTER = ("import unittest\n\nimport shared\n\n\nclass Polluter(unittest.TestCase):\n"
            "    def test_sets_the_divisor(self):\n        shared.DIVISOR = 3\n        self.assertTrue(True)\n")


@pytest.fixture
def shared_state(tmp_path):
    """The demo workspace whose base has a module-level divisor and a test of it."""
    ws = make_workspace(tmp_path)
    (ws.repo / "shared.py").write_text(SHARED)
    (ws.repo / "tests" / "test_shared.py").write_text(SHARED_TESTS)
    ws.git("add", "-A")
    ws.git("commit", "-q", "-m", "shared state")
    return ws


def test_a_test_the_change_made_depend_on_order_is_not_flaky(shared_state):
    """test_half fails in every whole run after the new polluting test, and passes alone: run again
    alone it passes, so the whole command runs once more; it fails there again, so it counts."""
    ws = shared_state
    code, report, res = run_patch(ws, new_file("tests/test_aaa_polluter.py", POLLUTER))
    assert code == 3 and report["outcome"] == "blocked", res.output
    [proof] = proofs(ws)
    [result] = proof["results"]
    assert result["passed"] is False and "flaky" not in result
    assert ("mesh: tests.test_shared.Shared.test_half failed in two whole runs and passed when run alone: it depends"
            " on what runs before it") in result["stderr_tail"]


FLAKY_TEST = """import os
import unittest


class Sometimes(unittest.TestCase):
    def test_sometimes(self):
        # The second run of this test on the machine fails, every other passes: a flaky test.
        path = os.environ["MESH_FLAKE"]
        count = int(open(path).read() or 0) + 1 if os.path.exists(path) else 1
        with open(path, "w") as handle:
            handle.write(str(count))
        self.assertNotEqual(count, 2)

    def test_steady(self):
        self.assertTrue(True)
"""


def test_a_flaky_test_is_run_again_and_named_in_the_result(tmp_path, monkeypatch):
    """Validated for real (unittest, no sandbox: the flake's counter is a file of the host): the
    base passes; the candidate's run fails the test; alone it passes, and the whole run again
    too: it counts as passed, named flaky, with a note."""
    from orchestrator.protocol.proof import BaseTests, retry_flaky
    from orchestrator.sandbox.validation import run_validation

    monkeypatch.setenv("MESH_FLAKE", str(tmp_path / "count"))
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_sometimes.py").write_text(FLAKY_TEST)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"],
                   check=True)

    def run(select=None):
        [result] = run_validation([UNIT], cwd=repo, allow=[UNIT], timeout_s=120, sandbox="none",
                                  env_names=["MESH_FLAKE"], select=select)
        return result

    base = BaseTests("base")
    base.keep(run())  # run 1: passes
    first = run()  # run 2: the flake
    assert not first.passed and [c.id for c in first.run.failures()] == ["tests.test_sometimes.Sometimes.test_sometimes"]
    [result] = retry_flaky([first], base, lambda wanted: [], lambda command, test: run({command: test} if test else None), 1)
    assert result.passed and result.run.flaky == ["tests.test_sometimes.Sometimes.test_sometimes"]
    assert result.tests.failed == 0 and result.to_dict()["flaky"] == result.run.flaky
    assert "mesh: flaky: tests.test_sometimes.Sometimes.test_sometimes failed, then passed when run again alone" \
        in result.stderr_tail
    assert (tmp_path / "count").read_text() == "4"  # alone once, then the whole command once


def test_flaky_retries_zero_counts_the_failure(shared_state):
    ws = shared_state
    path = ws.root / "no-retries.toml"
    path.write_text(_one_review_cycle((ws.repo / "mesh.toml").read_text()).replace(
        "[validation]\n", "[validation]\nflaky_retries = 0\n", 1))
    code, report, res = run_patch(ws, new_file("tests/test_aaa_polluter.py", POLLUTER), None, "--config", str(path))
    assert code == 3 and report["outcome"] == "blocked", res.output
    [proof] = proofs(ws)
    assert "flaky" not in proof["results"][0]
    assert proof["results"][0]["failures"][0]["id"] == "tests.test_shared.Shared.test_half"


def test_a_test_skipped_by_the_patch_is_a_test_gone(tmp_path):
    """Found by the trial on itoa: #[ignore] on every test landed (skipped is not failed). A test
    that passed on the base and is skipped now is not tested any more: it is gone."""
    ws = make_workspace(tmp_path)
    path = "tests/test_temperature.py"
    text = (ws.repo / path).read_text()
    skipped = text.replace("    def test_boiling", "    @unittest.skip('later')\n    def test_boiling")
    lines_a, lines_b = text.splitlines(), skipped.splitlines()
    diff = (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,{len(lines_a)} +1,{len(lines_b)} @@\n"
            + "".join(f"-{line}\n" for line in lines_a) + "".join(f"+{line}\n" for line in lines_b))
    code, report, res = run_patch(ws, diff)
    assert code == 3, res.output
    result = assert_not_closed(ws, report, "fewer_tests_than_base")
    assert "1 test(s) that passed on the base are skipped now: tests.test_temperature.CelsiusToFahrenheit" \
        ".test_boiling_point" in result["stderr_tail"]
    assert result["lost"] == {"skipped": ["tests.test_temperature.CelsiusToFahrenheit.test_boiling_point"]}
    # Named as lost, not as failing (the trial: "failing: ..." sent a model looking for an assertion).
    assert "lost against the base: tests.test_temperature.CelsiusToFahrenheit.test_boiling_point (skipped now)" \
        in report["block_detail"] and "failing:" not in report["block_detail"]
    # What the workers read: mesh's verdict and the test lost, first.
    shown = ws.mesh("show", TASK).output
    assert "| tests.test_temperature.CelsiusToFahrenheit.test_boiling_point: passed on the base, skipped now" \
        in shown
