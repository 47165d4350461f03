"""Issue 44, item 3: no blind pass. A check command whose tests mesh does not read, failing on the
base, never passes a patch with ``--allow-failing-base`` on the strength of "fails on the base as
well" (a deleted or newly failing test would look the same); one whose tests are read is judged
by them; and the base-check message proposes ``--allow-failing-base`` only where it can hold."""

from __future__ import annotations

from orchestrator.sandbox.validation import ValidationResult
from orchestrator.testruns.model import TestCounts
from orchestrator.toolchains.base_check import BaseCheck

UNREAD = "python3 check.py"
READ = "python3 -m pytest -q tests"


def _base(results):
    return BaseCheck("b" * 40, [r["command"] for r in results], results)


def test_an_unread_command_failing_on_the_base_stays_failed():
    base = _base([{"command": UNREAD, "passed": False, "exit_code": 1, "reason": None}])
    [judged] = base.judge([ValidationResult(UNREAD, 1, False, False, None)])
    assert not judged.passed and judged.reason != "fails_on_base_too"
    assert "cannot tell the base's failures from new ones" in judged.stderr_tail
    text = base.failure_text()
    assert "--allow-failing-base cannot help" in text and f"`{UNREAD}`" in text


def test_a_read_command_is_judged_by_its_counts_and_a_lost_test_fails():
    then = TestCounts("pytest", ran=5, passed=4, failed=1, errors=0, skipped=0).to_dict()
    base = _base([{"command": READ, "passed": False, "exit_code": 1, "tests": then}])
    same = ValidationResult(READ, 1, False, False, None, tests=TestCounts("pytest", ran=5, passed=4, failed=1, errors=0, skipped=0))
    assert base.judge([same])[0].passed  # the base's one failure, nothing new
    deleted = ValidationResult(READ, 1, False, False, None, tests=TestCounts("pytest", ran=4, passed=4, failed=0, errors=0, skipped=0))
    assert not base.judge([deleted])[0].passed  # the failing test deleted: fewer ran
    worse = ValidationResult(READ, 1, False, False, None, tests=TestCounts("pytest", ran=5, passed=3, failed=2, errors=0, skipped=0))
    assert not base.judge([worse])[0].passed
    assert "pass --allow-failing-base to count only new failures" in base.failure_text()


def test_a_run_with_an_unread_failing_check_stops_before_any_worker_call(tmp_path):
    import os
    import subprocess

    from tests.runkit import TASK, happy_script, make_workspace

    ws = make_workspace(tmp_path)
    config = (ws.repo / "mesh.toml").read_text().replace(
        'allow = ["python3 -m unittest', f'check = ["{UNREAD}"]\nallow = ["{UNREAD}", "python3 -m unittest')
    (ws.repo / "mesh.toml").write_text(config)
    (ws.repo / "check.py").write_text("import sys\nprint('1 check failed')\nsys.exit(1)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "add", "-A"], cwd=ws.repo, check=True, env=env)
    subprocess.run(["git", "-c", "user.name=p", "-c", "user.email=p@p", "commit", "-qm", "check"], cwd=ws.repo,
                   check=True, env=env)
    code, report, res = ws.run(happy_script(), "--allow-failing-base")
    assert code == 2, res.output
    assert "--allow-failing-base cannot help" in res.output and UNREAD in res.output
    assert ws.kinds() == [] or "proposal" not in ws.kinds()  # no worker was called
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "open"
