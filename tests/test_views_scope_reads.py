"""A scope's views read each kind of thing once for all its tasks: ``Tracker.comments_of`` and
``Tracker.blocker_ids`` (on both engines) answer what ``comments`` and ``blockers`` answer issue
by issue, and ``mesh status`` built from them is what the task-by-task reads give."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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


def test_mesh_status_reads_the_config_without_its_model_and_checks_what_it_uses(tmp_path):
    """`mesh status` (a whole process) takes `tracker.url` and `drain.onto` from the config
    file's table: the answer is the same, without importing pydantic or the roles' schemas;
    a wrong type for either is refused (exit 2, naming the file and the key)."""
    from tracker.store import Tracker

    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    with Tracker.init(tmp_path / "elsewhere", prefix="st") as t:
        epic = t.create("Epic", issue_type="epic")["id"]
        t.create("Task", parent=epic)
        url = str(t.path)
    (project / "mesh.toml").write_text(f'[tracker]\nurl = "{url}"\n\n[drain]\nonto = "mesh/land/custom"\n')
    code = ("import atexit, sys\n"
            "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules))))\n"
            "from orchestrator.cli.start import main\nmain()\n")
    env = {k: v for k, v in os.environ.items() if k != "MESH_DB"}
    done = subprocess.run([sys.executable, "-c", code, "status", "--parent", epic, "--json"], cwd=project,
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["branch"] == "mesh/land/custom"
    imported = set(done.stderr.rpartition("MODULES ")[2].split())
    assert not {m for m in imported if m.split(".")[0] in ("pydantic", "jinja2", "anthropic", "psycopg")}
    assert "orchestrator.config" not in imported and "roles.schemas" not in imported
    (project / "mesh.toml").write_text(f'[tracker]\nurl = "{url}"\n\n[drain]\nonto = 3\n')
    done = subprocess.run([sys.executable, "-c", code, "status", "--parent", epic], cwd=project,
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "mesh.toml: drain.onto: must be a string" in done.stderr
