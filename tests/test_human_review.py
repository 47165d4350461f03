"""A person as the reviewer: real ``mesh run`` processes wait at the review gate for ``mesh review``.

Each run is a process of its own (as a person would start it); the review comes from another
process, the ``mesh review`` command. The run must wait with its claim alive, take exactly the
review given (the same ``[orch:review]`` checkpoint and finding sub-issues a reviewer worker's
answer makes, signed), survive being killed while it waits, and refuse nothing it should take.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from orchestrator.protocol.checkpoint import checkpoint_problem
from tests.runkit import MESH, TASK, demo_script, finish, happy_script, make_workspace, without_reviewer
from tests.runkit import human_review_config as _config

KEY = "human-review-test-key"
FINDING = "human:temperature.py:8"


def _env() -> dict[str, str]:
    return {**os.environ, "MESH_SIGNING_KEY": KEY}


def _start_run(ws, script: dict, *extra: str) -> subprocess.Popen:
    path = ws.write_script(script)
    return subprocess.Popen([*MESH, "--db", str(ws.db), "--actor", "tester", "run", "--label", "plan:demo",
                             "--backend", "replay", "--script", str(path), "--repo", str(ws.repo), "--no-land",
                             "--config", str(_config(ws)), "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ws.repo)


def _review(ws, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*MESH, "--db", str(ws.db), "--actor", "tester", "review", *args, "--repo", str(ws.repo),
                           "--config", str(_config(ws))],
                          capture_output=True, text=True, env=_env(), cwd=ws.repo, timeout=120)


def _wait_for_request(ws, proc: subprocess.Popen | None = None, cycle: int = 1) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out = _review(ws, "--json")
        waits = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else []
        if any(w["cycle"] == cycle for w in waits):
            return next(w for w in waits if w["cycle"] == cycle)
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended before asking: {proc.stdout.read()} {proc.stderr.read()}")
        time.sleep(0.2)
    raise AssertionError("no run asked for a person's review")


def _trusted(ws, kind: str) -> list:
    return [cp for cp in ws.checkpoints() if cp.kind == kind
            and checkpoint_problem(cp, KEY.encode(), task_id=TASK) is None]


def test_a_run_waits_for_a_person_and_closes_on_their_approval(tmp_path):
    ws = make_workspace(tmp_path)
    proc = _start_run(ws, without_reviewer(happy_script()), "--reviewer", "human")
    try:
        wait = _wait_for_request(ws, proc)
        assert wait["task"] == TASK and "fahrenheit_to_celsius" in wait["diff"]
        shown = _review(ws, TASK)
        assert shown.returncode == 0 and "+def fahrenheit_to_celsius" in shown.stdout
        with ws.tracker() as t:
            assert t.get(TASK)["status"] == "in_progress"  # the claim is kept while it waits
        done = _review(ws, TASK, "--approve", "--summary", "Reads well; tests cover the edge.", "--as", "Ada")
        assert done.returncode == 0, done.stderr
        report = finish(proc)
    finally:
        proc.kill()
    assert report["outcome"] == "closed", report
    reviews = _trusted(ws, "review")
    assert len(reviews) == 1 and reviews[0].payload["reviewer"] == "person/Ada"
    assert reviews[0].payload["artifact"]["decision"] == "approve"
    assert len(_trusted(ws, "review-request")) == 1 and len(_trusted(ws, "human-review")) == 1
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "closed"
    history = subprocess.run([*MESH, "--db", str(ws.db), "show", TASK], capture_output=True, text=True, env=_env())
    assert "reviewed by person/Ada" in history.stdout and "review-request" in history.stdout


def test_a_persons_line_comment_becomes_a_finding_issue_and_a_revision_cycle(tmp_path):
    ws = make_workspace(tmp_path)
    script = without_reviewer(demo_script())
    plan = json.loads(script["synthesizer"][2]["text"])
    plan["steps"][0]["finding_id"] = FINDING
    script["synthesizer"][2]["text"] = json.dumps(plan)
    proc = _start_run(ws, script, "--reviewer", "human")
    try:
        _wait_for_request(ws, proc, cycle=1)
        asked = _review(ws, TASK, "--request-changes", "--comment",
                        "temperature.py:8 High MUST_FIX accepts temperatures below absolute zero", "--as", "Ada")
        assert asked.returncode == 0, asked.stderr
        _wait_for_request(ws, proc, cycle=2)
        assert _review(ws, TASK, "--approve", "--as", "Ada").returncode == 0
        report = finish(proc)
    finally:
        proc.kill()
    assert report["outcome"] == "closed", report
    first = _trusted(ws, "review")[0].payload["artifact"]
    assert first["decision"] == "request_changes"
    [finding] = first["findings"]
    assert finding["finding_id"] == FINDING and finding["location"] == "temperature.py:8"
    assert finding["label"] == "MUST_FIX" and finding["severity"] == "High"
    assert "celsius * 9 / 5 + 32" in finding["code_context"]
    issue_id = report["review"]["subtasks"][FINDING]
    with ws.tracker() as t:
        issue = t.get(issue_id)
    assert "temperature.py:8" in issue["title"] + (issue.get("description") or "")
    assert issue["status"] == "closed"  # fixed by the revision the person then approved
    assert "revision" in ws.kinds()


def test_refused_reviews_write_nothing(tmp_path):
    ws = make_workspace(tmp_path)
    none_waiting = _review(ws, TASK, "--approve")
    assert none_waiting.returncode == 2 and "no run waiting" in none_waiting.stderr
    proc = _start_run(ws, without_reviewer(happy_script()), "--reviewer", "human")
    try:
        _wait_for_request(ws, proc)
        before = ws.kinds()
        cases = [
            (["--request-changes", "--comment", "temperature.py:2 High this line is not in the diff"], "comments[0].line"),
            (["--request-changes", "--comment", "README.md:1 Low not a file of the diff"], "comments[0].path"),
            (["--request-changes"], "comments"),
            (["--approve", "--comment", "temperature.py:8 Critical MUST_FIX cannot approve this"], "decision"),
            (["--approve", "--summary", "\n".join("line" for _ in range(7))], "summary"),
        ]
        for args, field in cases:
            out = _review(ws, TASK, *args)
            assert out.returncode == 2, (args, out.stdout, out.stderr)
            assert f"review refused ({field}" in out.stderr, out.stderr
        assert ws.kinds() == before  # nothing written by a refused review
        assert _review(ws, TASK, "--approve").returncode == 0
        again = _review(ws, TASK, "--approve")
        assert again.returncode == 2
        report = finish(proc)
    finally:
        proc.kill()
    assert report["outcome"] == "closed"
    assert len(_trusted(ws, "human-review")) == 1


def test_a_run_killed_while_it_waits_resumes_and_takes_the_review_given_meanwhile(tmp_path):
    ws = make_workspace(tmp_path)
    script = without_reviewer(happy_script())
    proc = _start_run(ws, script, "--reviewer", "human")
    try:
        _wait_for_request(ws, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    # The person reviews while no process runs the task: the wait is in the tracker.
    assert _review(ws, TASK, "--approve", "--as", "Ada").returncode == 0
    path = ws.write_script(script)
    resumed = subprocess.run([*MESH, "--db", str(ws.db), "--actor", "tester", "resume", TASK, "--force",
                              "--backend", "replay", "--script", str(path), "--repo", str(ws.repo), "--no-land",
                              "--config", str(_config(ws)), "--reviewer", "human", "--json"],
                             capture_output=True, text=True, env=_env(), cwd=ws.repo, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["outcome"] == "closed"
    assert len(_trusted(ws, "review-request")) == 1  # asked once, across the restart
    assert len(_trusted(ws, "review")) == 1


def test_the_label_review_human_on_the_epic_makes_a_worker_configured_run_wait(tmp_path):
    ws = make_workspace(tmp_path)
    with ws.tracker() as t:
        parent = t.get(TASK)["parent"]
        t.add_label(parent, "review:human")
    proc = _start_run(ws, without_reviewer(happy_script()))
    try:
        _wait_for_request(ws, proc)
        assert _review(ws, TASK, "--approve").returncode == 0
        assert finish(proc)["outcome"] == "closed"
    finally:
        proc.kill()


@pytest.mark.parametrize("spec", ["nocolon", "a.py:x text", ":3 text"])
def test_a_malformed_comment_is_a_usage_error(tmp_path, spec):
    ws = make_workspace(tmp_path)
    out = _review(ws, TASK, "--request-changes", "--comment", spec)
    assert out.returncode == 2 and "PATH:LINE" in out.stderr


def test_a_drain_killed_while_a_run_waits_is_picked_up_by_the_next_drain_which_waits_again(tmp_path):
    ws = make_workspace(tmp_path)
    path = ws.write_script(without_reviewer(happy_script()))

    def drain() -> subprocess.Popen:
        return subprocess.Popen([*MESH, "--db", str(ws.db), "--actor", "tester", "drain", "--label", "plan:demo",
                                 "--ids", TASK, "--backend", "replay", "--script", str(path), "--repo", str(ws.repo),
                                 "--config", str(_config(ws)), "--reviewer", "human"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ws.repo)

    first = drain()
    try:
        _wait_for_request(ws, first)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        first.kill()
    second = drain()
    try:
        # The next drain takes the interrupted run over and waits at the same request: the
        # review given now reaches it.
        _wait_for_request(ws, second)
        assert _review(ws, TASK, "--approve", "--as", "Ada").returncode == 0
        try:
            _, err = second.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            second.kill()
            raise AssertionError(second.communicate()[1]) from None
        assert second.returncode == 0, err
    finally:
        second.kill()
    assert len(_trusted(ws, "review-request")) == 1
    assert len({cp.run_id for cp in _trusted(ws, "preflight")}) == 1  # the same run, resumed
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "closed"
