"""A scope's views read each kind of thing once for all its tasks: ``Tracker.comments_of`` and
``Tracker.blocker_ids`` (on both engines) answer what ``comments`` and ``blockers`` answer issue
by issue, and ``mesh status`` built from them is what the task-by-task reads give."""

from __future__ import annotations

import subprocess

from orchestrator.landing.catch_up import closed_unlanded, epic_open_because, scope_branch, waiting_on_landing
from orchestrator.protocol.checkpoint import format_checkpoint, load_checkpoints, load_checkpoints_of
from orchestrator.protocol.scope import resolve_scope, scope_tasks
from orchestrator.views.status import render_status, scope_status


def _checkpoint(tracker, task_id: str, kind: str, seq: int, artifact: dict, run: str = "r1") -> None:
    payload = {"v": 1, "kind": kind, "task_id": task_id, "run_id": run, "seq": seq, "artifact": artifact}
    tracker.add_comment(task_id, format_checkpoint(kind, f"{kind} {seq}", payload), author="mesh")


def _scope(tracker) -> tuple[str, list[str]]:
    epic = tracker.create("Epic", issue_type="epic")["id"]
    ids = [tracker.create(f"Task {k} 100%_done", parent=epic)["id"] for k in range(6)]
    tracker.add_dependency(ids[1], ids[0], "blocks")
    tracker.add_dependency(ids[2], ids[0], "blocks")
    tracker.add_dependency(ids[2], ids[3], "blocks")
    for k, task in enumerate(ids):
        _checkpoint(tracker, task, "proposal", 1, {"plan": ["a"]})
        tracker.add_comment(task, "[orch:land] a person's comment that only looks like one")
        tracker.add_comment(task, "[orch%land] 100% not a checkpoint")
        if k % 2 == 0:
            _checkpoint(tracker, task, "run-head", 2, {"outcome": "closed", "commit": f"{k:040x}", "attempt": 1})
            _checkpoint(tracker, task, "land", 3, {"result": "landed" if k != 4 else "failed",
                                                   "branch": "mesh/land/x", "sha": f"{k:040x}"})
            tracker.close_issue(task, reason="done", force=True)
    return epic, ids


def test_comments_of_and_blocker_ids_answer_as_the_reads_one_by_one(tracker):
    epic, ids = _scope(tracker)
    asked = [*ids, epic, ids[0]]
    every = tracker.comments_of(asked)
    assert list(every) == list(dict.fromkeys(asked))
    assert all(every[i] == tracker.comments(i) for i in every)
    lands = tracker.comments_of(asked, prefixes=["[orch:land]", "[orch:run-head]"])
    assert all(lands[i] == [c for c in tracker.comments(i) if c["text"].startswith(("[orch:land]", "[orch:run-head]"))]
               for i in lands)
    literal = tracker.comments_of(ids, prefixes=["[orch%", "[orch_"])  # % and _ are text, not wildcards
    assert [[c["text"] for c in found] for found in literal.values()] == [["[orch%land] 100% not a checkpoint"]] * 6
    blockers = tracker.blocker_ids(asked)
    assert blockers == {i: [b["id"] for b in tracker.blockers(i)] for i in dict.fromkeys(asked)}
    assert blockers[ids[2]] == sorted([ids[3]])  # ids[0] is closed: it no longer blocks


def test_status_from_one_read_is_what_the_task_by_task_reads_give(tmp_path, tracker):
    epic, ids = _scope(tracker)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(repo), "commit", "-q",
                    "--allow-empty", "-m", "start"], check=True)
    subprocess.run(["git", "-C", str(repo), "branch", f"mesh/{ids[1]}"], check=True)
    scope = resolve_scope(None, epic, env={})
    status = scope_status(tracker, scope, repo=repo)
    tasks = scope_tasks(tracker, scope)
    preloaded = load_checkpoints_of(tracker, [t["id"] for t in tasks], kinds=("land", "run-head"))
    assert all([cp for cp in load_checkpoints(tracker, t) if cp.kind in ("land", "run-head")] == preloaded[t]
               for t in preloaded)
    branch = scope_branch(tracker, scope, tasks)
    assert status["branch"] == branch == "mesh/land/x"
    unlanded = [t["id"] for t, _ in closed_unlanded(tracker, tasks, branch)]
    assert unlanded == [ids[4]]
    entries = {t["id"]: t for e in status["epics"] for t in e["tasks"]}
    assert [i for i, t in entries.items() if t["unlanded"]] == unlanded
    assert {i: t["waits_for_landing"] for i, t in entries.items() if t["waits_for_landing"]} \
           == waiting_on_landing(tracker, tasks, branch)
    assert status["epics"][0]["open_because"] == epic_open_because(tracker, epic, branch)
    assert {i: t["blockers"] for i, t in entries.items()} == {i: [b["id"] for b in tracker.blockers(i)] for i in ids}
    assert [i for i, t in entries.items() if t["branch"]] == [ids[1]]
    assert [i for i, t in entries.items() if t["landed"]] == [ids[0], ids[2]]
    assert render_status(status).count("\n") == len(ids) + 1
