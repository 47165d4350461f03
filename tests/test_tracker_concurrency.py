"""Several processes writing one tracker at once: no lost comment, one claim winner, a sound file."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

from tracker.errors import ConflictError
from tracker.store import Tracker

WORKERS = 6
COMMENTS_EACH = 25
ROOT = Path(__file__).resolve().parent.parent


def _worker(db_path: str, issue_id: str, name: str, start, results) -> None:
    """Add comments and try to claim, all processes released together by the barrier."""
    tracker = Tracker(db_path, actor=name)
    start.wait()
    for k in range(COMMENTS_EACH):
        tracker.add_comment(issue_id, f"{name} says {k}")
        if k == COMMENTS_EACH // 2:
            try:
                tracker.claim(issue_id)
                results.put((name, "won"))
            except ConflictError:
                results.put((name, "lost"))
    tracker.add_comment(issue_id, "[orch:vote] agree", dedupe_key="run-1:vote:7")
    tracker.close()


def test_processes_comment_and_claim_concurrently(tracker):
    issue = tracker.create("contended")["id"]
    context = multiprocessing.get_context("spawn")  # no connection or lock inherited from the parent
    start = context.Barrier(WORKERS)
    results = context.Queue()
    names = [f"worker-{k}" for k in range(WORKERS)]
    procs = [context.Process(target=_worker, args=(str(tracker.path), issue, name, start, results)) for name in names]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    outcomes = dict(results.get(timeout=10) for _ in names)

    winners = [name for name, outcome in outcomes.items() if outcome == "won"]
    assert len(winners) == 1 and len(outcomes) == WORKERS
    final = tracker.get(issue)
    assert (final["status"], final["assignee"]) == ("in_progress", winners[0])

    texts = [c["text"] for c in tracker.comments(issue)]
    expected = {f"{name} says {k}" for name in names for k in range(COMMENTS_EACH)}
    assert set(texts) - {"[orch:vote] agree"} == expected and len(texts) == len(expected) + 1
    assert texts.count("[orch:vote] agree") == 1, "the deduplicated checkpoint was written twice"
    assert len([e for e in tracker.events(issue) if e["event_type"] == "commented"]) == len(expected) + 1
    assert tracker.doctor()["ok"]


def test_cli_claims_race_has_one_winner(tmp_path):
    """The same through ``mesh tracker update --claim`` in separate interpreters."""
    tracker = Tracker.init(tmp_path, prefix="rc")
    issue = tracker.create("contended")["id"]
    tracker.close()
    env = dict(os.environ, MESH_DB=str(tmp_path / ".beads" / "mesh.db"))
    code = "from orchestrator.cli.main import main; main()"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, "--actor", f"cli-{k}", "tracker", "update", issue, "--claim",
                          "--json"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k in range(4)
    ]
    codes = [proc.wait(60) for proc in procs]
    errors = [proc.stderr.read() for proc in procs]
    for proc in procs:
        proc.stdout.close()
        proc.stderr.close()
    assert sorted(codes) == [0, 1, 1, 1], errors
    assert all('"code": "conflict"' in err for err, rc in zip(errors, codes) if rc == 1)
    with Tracker(tmp_path / ".beads" / "mesh.db") as check:
        assert check.get(issue)["assignee"] == f"cli-{codes.index(0)}"
        assert check.db.read("PRAGMA integrity_check")[0][0] == "ok"
