"""Counts that mean what they say: pytest's collection and import errors are errors, not tests
that ran, and validation commands are never read as tests (``1 of 2 command(s) failed`` beside
``N test(s) ran: ...``). Real pytest runs through ``run_validation`` in bwrap and without a
sandbox."""

from __future__ import annotations

import json
import shlex
import sys

from orchestrator.protocol.proof import Proof
from orchestrator.sandbox.testcounts import TestCounts, commands_phrase, runner_counts_phrase
from tests.test_testcounts import project
from tests.test_validation import mode, run  # noqa: F401  (mode is a fixture)

PY = shlex.quote(sys.executable)
BROKEN = {"tests/test_imports.py": "import no_such_module_here\n", "tests/test_syntax.py": "def broken(:\n"}


def test_collection_and_import_errors_are_errors_not_tests_that_ran(tmp_path, mode):
    cmd = f"{PY} -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests"
    [result] = run([cmd], project(tmp_path, BROKEN), sandbox=mode)
    assert not result.passed
    assert result.tests == TestCounts(runner="pytest", ran=2, passed=2, failed=0, errors=0, skipped=1,
                                      collection_errors=2)
    assert result.tests.line() == "2 ran: 2 passed, 0 failed, 0 errors; 1 skipped; 2 collection error(s)"


def test_an_interrupted_collection_ran_no_test(tmp_path, mode):
    """pytest stops at a collection error by default: no test ran, and the report says so."""
    [result] = run([f"{PY} -m pytest -q -p no:cacheprovider tests"], project(tmp_path, BROKEN), sandbox=mode)
    assert not result.passed and result.tests.ran == 0 and result.tests.collection_errors == 2
    proof = Proof.of([result], commit="c0ffee")
    assert proof.summary() == ("fail: 0/1 command(s) passed; 0 test(s) ran: 0 passed, 0 failed, 0 errors;"
                               " 2 collection error(s) (a test module or package could not be imported or built)")


def test_commands_and_tests_are_worded_apart():
    assert commands_phrase(1, 1) == "1 of 2 command(s) failed"
    assert commands_phrase(2, 0, 1) == "2 of 2 command(s) passed, 1 rejected"
    counts = [TestCounts("pytest", 5, 4, 1, 0, 0), TestCounts("unittest", 2, 2, 0, 0, 1)]
    assert runner_counts_phrase(counts) == "7 test(s) ran: 6 passed, 1 failed, 0 errors, 1 skipped"
    assert runner_counts_phrase([]) == ""
    # A checkpoint written before collection errors were counted still reads.
    assert TestCounts.from_dict({"runner": "pytest", "ran": 1, "passed": 1, "failed": 0, "errors": 0,
                                 "skipped": 0}).collection_errors == 0


def test_the_step_a_run_is_in_is_named_from_its_latest_checkpoint():
    from orchestrator.views.live import current_step

    assert current_step("vote", "agree 5/5 (cycle 0) skeptic: fine") == "validation"  # the tests run now
    assert current_step("review-cycle", "cycle 1: approved") == "landing"
    assert current_step("review-cycle", "cycle 1: changes requested") == "revision plan"
    assert current_step("review-request", "waiting for a person's review (review cycle 1)") == "waiting for a person"
    assert current_step(None) == "starting" and current_step("outcome", "closed") == "done"


def test_usage_counts_every_failed_call_by_its_typed_reason(tmp_path):
    """A run whose proposer first answers a vote of the wrong shape: that call is an error of
    reason invalid_shape in mesh usage (it was answered, and refused)."""
    from orchestrator.ledger.usage import render_usage, usage_summary
    from tests.runkit import make_workspace, happy_script, r, TASK

    ws = make_workspace(tmp_path)
    script = happy_script()
    script["proposer"].insert(1, r("vote", {"vote": "maybe", "reason": "unsure"}))
    code, report, res = ws.run(script, "--ids", TASK)
    assert code == 0 and report["outcome"] == "closed", res.output
    with ws.tracker() as t:
        summary = usage_summary(t)
    assert summary["total"]["errors"] == 1
    assert summary["total"]["errors_by_reason"] == {"invalid_shape": 1}
    proposer = next(row for row in summary["by_role"] if row["role"] == "proposer")
    assert proposer["errors"] == 1 and proposer["errors_by_reason"] == {"invalid_shape": 1}
    assert "1 failed call(s) by reason: invalid_shape 1" in render_usage(summary)
    res = ws.mesh("usage", "--json")
    assert json.loads(res.stdout)["total"]["errors_by_reason"] == {"invalid_shape": 1}


def test_the_preflight_line_reads_as_a_sentence_everywhere_but_its_own_print(tmp_path):
    from orchestrator.views.preflight import preflight_text
    from tests.runkit import make_workspace, happy_script, TASK

    line = ("orch_preflight orch_run_id=run-1 scope_mode=label plan_label=plan:demo parent_epic= selected_adapter=local"
            " selection_reason=fixed_local_profile requested_workers=5 local_cap=1 ids= overrides=max_tasks=1,"
            "parallel_tasks=1,adapter=local sandbox=bwrap")
    assert preflight_text(line) == ("preflight: run run-1 on label plan:demo: 5 worker role(s), validation sandbox"
                                    " bwrap, the scope's next task")
    ws = make_workspace(tmp_path)
    path = ws.write_script(happy_script())
    res = ws.mesh("run", "--label", "plan:demo", "--ids", TASK, "--backend", "replay", "--script", str(path),
                  "--repo", str(ws.repo))
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("orch_preflight orch_run_id=")  # the profile's line, as the run starts
    assert "orch_preflight" not in res.stdout and "  preflight: run run-" in res.stdout  # the summary
    shown = ws.mesh("show", TASK).stdout
    assert "orch_preflight" not in shown and "preflight: run run-" in shown
    with ws.tracker() as t:
        from orchestrator.protocol.checkpoint import load_checkpoints

        (pre,) = [cp for cp in load_checkpoints(t, TASK) if cp.kind == "preflight"]
    assert pre.payload["artifact"]["line"].startswith("orch_preflight orch_run_id=")  # the payload unchanged


def test_mcp_scope_leaves_a_deleted_task_out(tmp_path):
    from orchestrator.mcp_server.service import MeshService
    from tests.drainkit import LABEL, make_drain_workspace

    ws = make_drain_workspace(tmp_path)
    kept = ws.task("kept", files={"k.txt": "k\n"})
    gone = ws.task("gone", after=("kept",), files={"g.txt": "g\n"})
    with ws.tracker() as t:
        t.delete(gone, force=True)
    view = MeshService(ws.repo, db=str(ws.db), actor="tester", config_file=ws.config).scope(LABEL, None)
    listed = [t["id"] for bucket in ("ready", "running", "waiting", "blocked", "closed") for t in view[bucket]]
    assert listed == [kept]
