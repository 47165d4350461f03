"""Crash safety: the demo run is killed with SIGKILL at every checkpoint boundary, then resumed.

For every kill point the final state (the sequence of comment kinds, the issues with
their statuses and links, the task branch's tree) equals an uninterrupted run's, with
no duplicated comment or sub-issue and no resume that gets stuck.

The worker answers are the demo's replay script. A resumed run asks only what the
killed run did not receive (an answer received but not yet checkpointed is taken from
the calls log), so the resumed replay backend starts each role's list after the answers
the killed run received, and the calls of both processes add up to one run's.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.runner import RunOptions, run
from tests.runkit import TASK, demo_script, make_workspace

pytestmark = pytest.mark.slow


def _options(ws, script_path: Path, *, task: str | None = None, force: bool = False) -> RunOptions:
    # Branch-only (--no-land): this harness pins the run protocol; landing killed at every
    # step is tests/test_land_crash.py's.
    return RunOptions(label="plan:demo", backend="replay", script=script_path, repo=ws.repo, db=ws.db,
                      actor="tester", task=task, force=force, land=False)


def _child(ws, script_path: Path, crash_at: str) -> None:
    os.environ["MESH_CRASH_AT"] = crash_at
    run(_options(ws, script_path), echo=lambda line: None)
    os._exit(0)  # the run ended without reaching the kill point


def _remaining_script(ws) -> dict:
    """The demo script minus the answers the killed run already received."""
    from orchestrator.ledger.calls import calls_for

    script = demo_script()
    with ws.tracker() as t:
        made = calls_for(t, task_id=TASK)
    for call in made:
        script[call["role"]].pop(0)
    return script


def state(ws) -> dict:
    """What must be equal between a crashed-and-resumed run and an uninterrupted one."""
    from orchestrator.ledger.calls import calls_for

    with ws.tracker() as t:
        checkpoints = load_checkpoints(t, TASK)
        issues = t.list(include_closed=True)
        titles = {i["id"]: i["title"] for i in issues}
        described = sorted(
            (i["title"], i["issue_type"], i["status"], tuple(sorted(i.get("labels", []))),
             titles.get(i.get("parent"), i.get("parent")), i.get("close_reason"))
            for i in issues
        )
        seqs = [(cp.run_id, cp.seq) for cp in checkpoints]
        ncalls = len(calls_for(t, task_id=TASK))
    return {
        "kinds": [cp.kind for cp in checkpoints],
        "issues": described,
        "tree": ws.git("rev-parse", f"mesh/{TASK}^{{tree}}").strip(),
        "commits": ws.git("rev-list", "--count", f"main..mesh/{TASK}").strip(),
        "unique_seqs": len(seqs) == len(set(seqs)),
        "runs": len({cp.run_id for cp in checkpoints}),
        "calls": ncalls,
    }


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    ws = make_workspace(tmp_path_factory.mktemp("baseline"))
    report = run(_options(ws, ws.write_script(demo_script())), echo=lambda line: None)
    assert report.outcome == "closed"
    return state(ws)


# The demo flow writes 29 checkpoints (asserted below), so every boundary is a kill point.
ALL_POINTS = [f"checkpoint#{i}" for i in range(1, 30)] + [
    "apply#1", "apply#2", "commit#1", "commit#2", "validation#1", "validation#2", "close#1",
    "review-issue#1", "finding-issue#1", "finding-issue#2"]


def test_baseline_has_the_expected_number_of_checkpoints(baseline):
    assert len(baseline["kinds"]) == 29, baseline["kinds"]
    assert baseline["kinds"][-2:] == ["run-head", "outcome"]


@pytest.mark.parametrize("crash_at", ALL_POINTS)
def test_kill_and_resume_reaches_the_uninterrupted_state(tmp_path, baseline, crash_at):
    ws = make_workspace(tmp_path)
    script_path = ws.write_script(demo_script())
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_child, args=(ws, script_path, crash_at))
    child.start()
    child.join(120)
    assert child.exitcode == -9, f"the run was not killed at {crash_at} (exit {child.exitcode})"
    resumed = ws.write_script(_remaining_script(ws), "resume.json")
    report = run(_options(ws, resumed, task=TASK, force=True), echo=lambda line: None)
    if crash_at == f"checkpoint#{len(baseline['kinds'])}":
        # Killed after its outcome was written: the run had finished, so nothing is resumed.
        assert report.outcome == "no_runnable_task"
        assert any("no interrupted run" in m for m in report.mutations)
    else:
        assert report.outcome == "closed", (crash_at, report.to_dict())
    after = state(ws)
    assert after["unique_seqs"]
    assert after["runs"] == 1, "the resumed run must continue the killed run, not start another"
    # No model call was paid twice: the killed and the resumed run together made as many as one run.
    for key in ("kinds", "issues", "tree", "commits", "calls"):
        assert after[key] == baseline[key], (crash_at, key)


def _blocking_script() -> dict:
    from tests.runkit import happy_script, r

    script = happy_script()
    script["proposer"][:1] = [r("proposal", "no plan"), r("proposal", "still no plan")]
    return script


def test_kill_between_blocking_the_task_and_its_outcome_then_resume_writes_the_outcome_once(tmp_path):
    """The run head is written before the task is set blocked: a run killed right after finds
    its way back (``mesh resume``) and writes the outcome, once, instead of leaving none."""
    ws = make_workspace(tmp_path)
    script_path = ws.write_script(_blocking_script())
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_child, args=(ws, script_path, "block"))
    child.start()
    child.join(120)
    assert child.exitcode == -9, f"the run was not killed at block (exit {child.exitcode})"
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "blocked"
    assert ws.kinds()[-1] == "run-head"  # decided and signed, outcome not yet written
    report = run(_options(ws, ws.write_script({}, "resume.json"), task=TASK, force=True), echo=lambda line: None)
    assert report.outcome == "blocked" and report.block_reason == "proposal_unparsable"
    kinds = ws.kinds()
    assert kinds[-2:] == ["run-head", "outcome"] and kinds.count("outcome") == 1 and kinds.count("run-head") == 1
    assert len({cp.run_id for cp in ws.checkpoints()}) == 1
