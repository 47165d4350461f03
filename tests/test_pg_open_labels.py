"""PostgreSQL's ``open_labels`` (schema version 7): the label rows of the open issues in ready order,
written by the writes themselves, with no trigger.

A write statement reads with a snapshot taken when it starts, before it waits for the write lock;
the one that makes an issue open reads the issue's labels with a snapshot of its own
(``mesh_labels_of``), so a label added while it waited is not missed. The property test of every
write on both engines (tests/test_pg_single_writes.py) checks the table after each call, and every
PostgreSQL tracker of the ``tracker`` fixture is checked when its test ends (tests/conftest.py).
"""

from __future__ import annotations

import threading
import time

from tracker.pg_functions import STALE_OPEN_LABELS
from tracker.store import Tracker


def _stale(tracker: Tracker) -> int:
    return tracker.db.read(STALE_OPEN_LABELS)[0][0]


def _waiting_for_a_lock(watch: Tracker, pid: int) -> bool:
    row = watch.db.read("SELECT wait_event_type FROM pg_stat_activity WHERE pid = ?", (pid,))
    return bool(row) and row[0][0] == "Lock"


def test_an_issue_made_open_while_a_label_is_added_gets_that_label_row(tmp_path, pg_url):
    """The label is added in a transaction holding the write lock; meanwhile another process's
    ``update(status='open')`` of the issue starts (its statement's snapshot taken) and waits for
    that lock. Once the label is committed, the issue is open with both labels in
    ``open_labels``: ready work of the new label finds it."""
    tracker = Tracker.init(tmp_path, prefix="ol", actor="ann", db_path=pg_url)
    task = tracker.create("a task", labels=["plan"])
    tracker.close_issue(task["id"])
    other = Tracker(pg_url, actor="bob")
    watch = Tracker(pg_url, actor="watch")
    pid = other.db.read("SELECT pg_backend_pid()")[0][0]
    outcome: dict = {}

    def reopen() -> None:
        try:
            outcome["issue"] = other.update(task["id"], status="open")
        except Exception as exc:  # reported below
            outcome["error"] = exc

    with tracker.transaction():
        tracker.add_label(task["id"], "late")  # holds the write lock until the block ends
        worker = threading.Thread(target=reopen)
        worker.start()
        deadline = time.monotonic() + 30
        while not _waiting_for_a_lock(watch, pid):
            assert time.monotonic() < deadline, "the reopening statement never waited for the lock"
            time.sleep(0.01)
    worker.join(30)
    assert "error" not in outcome, outcome
    assert outcome["issue"]["status"] == "open"  # (its labels as its statement's snapshot saw them)
    assert sorted(tracker.get(task["id"])["labels"]) == ["late", "plan"]
    assert [i["id"] for i in tracker.ready(labels=["late"])] == [task["id"]]
    assert _stale(tracker) == 0
    for t in (other, watch, tracker):
        t.close()


def test_a_claimed_or_closed_issue_leaves_and_a_reopened_one_returns(tmp_path, pg_url):
    """Each way an issue stops or starts being open moves its rows, whatever path the write takes:
    one statement (claim, close, update), a server function (a close that moves others' ready
    state), or a Python transaction (reopen, delete)."""
    tracker = Tracker.init(tmp_path, prefix="mv", actor="ann", db_path=pg_url)
    a, b, c = (tracker.create(f"task {k}", labels=["plan", "other"])["id"] for k in range(3))
    tracker.add_dependency(c, b)  # closing b moves c's ready state: mesh_change does the write

    def rows() -> list[tuple]:
        return [tuple(r) for r in tracker.db.read("SELECT issue_id, label FROM open_labels ORDER BY 1, 2")]

    assert len(rows()) == 6
    tracker.claim(a)
    tracker.close_issue(b)
    assert {r[0] for r in rows()} == {c}
    tracker.update(a, status="open")
    tracker.reopen(b)
    tracker.update(b, priority=0)
    assert {r[0] for r in rows()} == {a, b, c}
    assert tracker.db.read("SELECT DISTINCT priority FROM open_labels WHERE issue_id = ?", (b,))[0][0] == 0
    tracker.delete(c, force=True)
    tracker.remove_label(a, "other")
    assert rows() == sorted([(a, "plan"), (b, "other"), (b, "plan")])
    assert [i["id"] for i in tracker.ready(labels=["plan"])] == [b, a]
    assert _stale(tracker) == 0
    tracker.close()
