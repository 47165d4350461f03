"""Validation that proves nothing does not close a task (issue 16, item 2), end to end.

Each test drives a real ``mesh run`` (replay backend) on the demo project in a temporary git
repository, with its real tests run by the real runner inside bwrap, and checks what the
user relies on: a patch that stops the tests from running (``os._exit(0)`` in the test
package, a ``conftest.py`` deselecting every test, deleting half the test files) never
closes its task, and the proof checkpoint says why; a good patch closes with its counts
in the proof, ``mesh show`` and the HTML report; the base tree is counted once per run, not
again on resume.
"""

from __future__ import annotations

import multiprocessing
import os
import shlex
import sys
from pathlib import Path

import pytest

from orchestrator.sandbox import validation
from orchestrator.runner import RunOptions, run
from tests.runkit import (PATCH_FEATURE, TASK, VALIDATE, demo_script, happy_script, make_workspace, r,
                          synthesis)

PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider tests"
# The feature, deliberately broken: Fahrenheit to Celsius multiplies by 9/5.
BROKEN_FEATURE = PATCH_FEATURE.replace("(fahrenheit - 32) * 5 / 9", "(fahrenheit - 32) * 9 / 5")
EXIT_IN_TEST_PACKAGE = ("diff --git a/tests/__init__.py b/tests/__init__.py\n--- a/tests/__init__.py\n"
                        "+++ b/tests/__init__.py\n@@ -0,0 +1,2 @@\n+import os\n+os._exit(0)\n")
TWO_TESTS = "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n\n" \
            "    def test_b(self):\n        pass\n"


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines))


def deleted_file(path: str, text: str) -> str:
    lines = text.splitlines()
    return (f"diff --git a/{path} b/{path}\ndeleted file mode 100644\n--- a/{path}\n+++ /dev/null\n"
            f"@@ -1,{len(lines)} +0,0 @@\n" + "".join(f"-{line}\n" for line in lines))


def config(ws, extra: str = "") -> str:
    """A config file: the demo's, plus pytest in the allowlist, plus ``extra``."""
    path = ws.root / "mesh-counts.toml"
    text = (ws.repo / "mesh.toml").read_text().replace("allow = [", f"allow = [{PYTEST!r}, ", 1)
    path.write_text(_one_review_cycle(text) + "\n" + extra)
    return str(path)


def _one_review_cycle(text: str) -> str:
    # A failing validation starts a revision cycle while cycles are left; these attacks are
    # about the verdict on the first one, so none is left.
    return text.replace("review_max_cycles = 3", "review_max_cycles = 1")


def run_patch(ws, patch: str, commands: list[str] | None = None, *extra: str):
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(patch, commands))
    if "--config" not in extra:
        path = ws.root / "mesh-one-cycle.toml"
        path.write_text(_one_review_cycle((ws.repo / "mesh.toml").read_text()))
        extra = (*extra, "--config", str(path))
    return ws.run(script, *extra)


def proofs(ws) -> list[dict]:
    return [cp.payload["artifact"] for cp in ws.checkpoints() if cp.kind == "proof"]


def assert_not_closed(ws, report: dict, reason: str, command: str = VALIDATE) -> dict:
    """The run ended blocked ``validation_failed``, with ``reason`` in the proof and the report."""
    assert report["outcome"] == "blocked"
    assert report["block_reason"] == "validation_failed"
    assert f"`{command}`: {reason}" in report["block_detail"]
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "blocked"
    [proof] = proofs(ws)
    [result] = proof["results"]
    assert proof["passed"] is False and result["passed"] is False
    assert result["reason"] == reason
    assert report["validation"][0]["reason"] == reason
    return result


def test_attack_os_exit_in_the_test_package_does_not_close_a_broken_task(ws, tmp_path):
    # The project lets tasks edit its test package (refused by default, issue 34): the counts still hold.
    code, report, res = run_patch(ws, BROKEN_FEATURE + EXIT_IN_TEST_PACKAGE, None,
                                  "--config", config(ws, '[patch]\nallow = ["tests/__init__.py"]\n'))
    assert code == 3, res.output
    result = assert_not_closed(ws, report, "no_test_report")
    assert result["exit_code"] == 0  # what let the broken task close before: the runner exited 0
    assert result["tests"] is None
    assert f"{VALIDATE}: fail (exit 0, no_test_report)" in ws.mesh("show", TASK).output
    page = tmp_path / "report.html"
    assert ws.mesh("report", TASK, "-o", str(page)).exit_code == 0
    assert "no_test_report" in page.read_text()


def test_attack_a_conftest_deselecting_every_test_does_not_close_the_task(ws):
    conftest = ("def pytest_collection_modifyitems(session, config, items):\n"
                "    config.hook.pytest_deselected(items=list(items))\n    items.clear()\n\n\n"
                "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n")
    # The project lets tasks edit conftest.py (protected by default): the counts still hold.
    code, report, res = run_patch(ws, BROKEN_FEATURE + new_file("conftest.py", conftest), [PYTEST],
                                  "--config", config(ws, '[patch]\nallow = ["conftest.py"]\n'))
    assert code == 3, res.output
    result = assert_not_closed(ws, report, "no_tests_ran", PYTEST)
    assert result["exit_code"] == 0
    assert result["tests"] == {"runner": "pytest", "ran": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}


def _four_test_files(ws) -> None:
    """Main gains three more test files of two tests each: 8 tests on the base tree."""
    for name in ("a", "b", "c"):
        (ws.repo / "tests" / f"test_more_{name}.py").write_text(TWO_TESTS)
    ws.git("add", "-A")
    ws.git("commit", "-q", "-m", "more tests")


def test_attack_deleting_half_the_test_files_does_not_close_the_task(ws):
    _four_test_files(ws)
    patch = PATCH_FEATURE + deleted_file("tests/test_more_b.py", TWO_TESTS) + \
        deleted_file("tests/test_more_c.py", TWO_TESTS)
    code, report, res = run_patch(ws, patch)
    assert code == 3, res.output
    result = assert_not_closed(ws, report, "fewer_tests_than_base")
    assert result["exit_code"] == 0
    # Every test left passes (the feature's 3 new ones included), but 7 ran where the base ran 8.
    assert result["tests"] == {"runner": "unittest", "ran": 7, "passed": 7, "failed": 0, "errors": 0, "skipped": 0}
    [proof] = proofs(ws)
    base = proof["base_tests"]
    assert base["commit"] == ws.git("rev-parse", "main").strip()
    assert base["counts"][VALIDATE]["ran"] == 8
    # Held against the base test by test (issue 35 item 4): the four tests that are gone, by name.
    assert ("4 test(s) that passed on the base are gone: tests.test_more_b.T.test_a, tests.test_more_b.T.test_b,"
            " tests.test_more_c.T.test_a, tests.test_more_c.T.test_b") in result["stderr_tail"]


def test_compare_base_off_lets_a_smaller_suite_pass_and_counts_no_base(ws, monkeypatch):
    _four_test_files(ws)
    materialized = spy_materialize(monkeypatch)
    patch = PATCH_FEATURE + deleted_file("tests/test_more_c.py", TWO_TESTS)
    # The base check (a feature of its own) is off too: nothing at all runs on the base.
    code, report, res = run_patch(ws, patch, None, "--config",
                                  _with_validation_key(ws, "compare_base = false\nbase_check = false"))
    assert code == 0, res.output
    [proof] = proofs(ws)
    assert proof["base_tests"] is None and proof["results"][0]["tests"]["ran"] == 9
    assert ws.git("rev-parse", "main").strip() not in materialized


def _with_validation_key(ws, line: str) -> str:
    path = ws.root / "mesh-validation.toml"
    path.write_text((ws.repo / "mesh.toml").read_text().replace("[validation]\n", f"[validation]\n{line}\n", 1))
    return str(path)


def spy_materialize(monkeypatch) -> list[str]:
    """The commits validation materialises, in order (the real function does the work)."""
    seen: list[str] = []
    real = validation.materialize_tree

    def recording(repo: Path, commit: str, dest: Path) -> str:
        full = real(repo, commit, dest)
        seen.append(full)
        return full

    monkeypatch.setattr(validation, "materialize_tree", recording)
    return seen


def test_a_good_patch_closes_with_its_counts_in_the_proof_show_and_report(ws, monkeypatch, tmp_path):
    materialized = spy_materialize(monkeypatch)
    path = ws.write_script(demo_script())
    res = ws.mesh("run", "--label", "plan:demo", "--backend", "replay", "--script", str(path), "--repo", str(ws.repo))
    assert res.exit_code == 0, res.output
    assert f"validation: {VALIDATE} -> pass (tests 6 ran: 6 passed, 0 failed, 0 errors; 0 skipped)" in res.output
    first, second = proofs(ws)
    counts = {"runner": "unittest", "ran": 5, "passed": 5, "failed": 0, "errors": 0, "skipped": 0}
    assert first["results"][0]["tests"] == counts
    assert second["results"][0]["tests"] == {**counts, "ran": 6, "passed": 6}
    base = ws.git("rev-parse", "main").strip()
    assert first["base_tests"] == second["base_tests"] == {"commit": base, "counts": {VALIDATE: {**counts, "ran": 2,
                                                                                                  "passed": 2}}}
    # Two validations, one count of the base tree.
    assert materialized.count(base) == 1 and len(materialized) == 3
    shown = ws.mesh("show", TASK).output
    assert "pass (tests 5 ran: 5 passed, 0 failed, 0 errors; 0 skipped; base tree 2 ran)" in shown
    assert "pass (tests 6 ran: 6 passed, 0 failed, 0 errors; 0 skipped; base tree 2 ran)" in shown
    page = tmp_path / "report.html"
    assert ws.mesh("report", TASK, "-o", str(page)).exit_code == 0
    html = page.read_text()
    assert "6 ran: 6 passed, 0 failed, 0 errors; 0 skipped; base tree 2 ran" in html
    assert "6 test(s) ran" in html


def _crash_child(ws, script_path: Path, crash_at: str) -> None:
    os.environ["MESH_CRASH_AT"] = crash_at
    run(RunOptions(label="plan:demo", backend="replay", script=script_path, repo=ws.repo, db=ws.db,
                   actor="tester"), echo=lambda line: None)
    os._exit(0)


def test_a_resumed_run_takes_the_base_counts_from_its_proof(ws, monkeypatch):
    # Killed after the second validation ran, before its proof was written: the resumed run
    # validates the revision again, and finds the base counts in the first proof.
    child = multiprocessing.get_context("fork").Process(
        target=_crash_child, args=(ws, ws.write_script(demo_script()), "validation#2"))
    child.start()
    child.join(120)
    assert child.exitcode == -9
    from orchestrator.ledger.calls import calls_for

    script = demo_script()
    with ws.tracker() as t:
        for call in calls_for(t, task_id=TASK):
            script[call["role"]].pop(0)
    materialized = spy_materialize(monkeypatch)
    report = run(RunOptions(label="plan:demo", backend="replay", script=ws.write_script(script, "rest.json"),
                            repo=ws.repo, db=ws.db, actor="tester", task=TASK, force=True), echo=lambda line: None)
    assert report.outcome == "closed", (report.block_reason, report.block_detail)
    base = ws.git("rev-parse", "main").strip()
    assert base not in materialized and len(materialized) == 1
    assert proofs(ws)[-1]["base_tests"]["counts"][VALIDATE]["ran"] == 2
