"""Round trips a PostgreSQL transaction saves (``tracker.postgres``): its ``BEGIN`` and write lock go
with its first statement, and a lease reads the server's clock in the statement that takes it
(``orchestrator.protocol.lease``). Watched from a second connection, as another runner sees it:
the lock is taken before the first statement runs and held until the commit, a transaction that
ran nothing never reached the server, and a first statement that fails leaves nothing behind."""

from __future__ import annotations

import psycopg
import pytest

from orchestrator.protocol.lease import Lease, LeaseHeld, claim_next_leased, ensure_lease_table
from tracker.errors import TrackerError
from tracker.postgres import WRITE_LOCK_ID
from tracker.store import Tracker

_WRITE_LOCKS = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND granted")


def _watch(url: str):
    return psycopg.connect(url, autocommit=True)


def _backend_state(watch, pid: int) -> str | None:
    row = watch.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row[0] if row else None


def test_begin_and_the_write_lock_go_with_the_first_statement(tmp_path, pg_url):
    tracker = Tracker.init(tmp_path, prefix="rt", actor="ann", db_path=pg_url)
    pid = tracker.db.conn.pg.info.backend_pid
    with _watch(pg_url) as watch:
        with tracker.transaction():
            # Nothing sent yet: no transaction open on the server, no lock taken.
            assert _backend_state(watch, pid) == "idle"
            assert watch.execute(_WRITE_LOCKS, (WRITE_LOCK_ID,)).fetchone()[0] == 0
            issue = tracker.create("inside")
            assert _backend_state(watch, pid) == "idle in transaction"
            assert watch.execute(_WRITE_LOCKS, (WRITE_LOCK_ID,)).fetchone()[0] == 1
            # Not visible to others before the commit.
            assert watch.execute("SELECT count(*) FROM issues").fetchone()[0] == 0
        assert watch.execute(_WRITE_LOCKS, (WRITE_LOCK_ID,)).fetchone()[0] == 0
        assert watch.execute("SELECT title FROM issues").fetchall() == [("inside",)]
        with tracker.transaction():
            pass  # ran nothing: never reached the server
        assert _backend_state(watch, pid) == "idle"
    assert tracker.get(issue["id"])["title"] == "inside"
    tracker.close()


def test_a_failing_first_statement_rolls_the_transaction_back(tmp_path, pg_url):
    tracker = Tracker.init(tmp_path, prefix="rt", actor="ann", db_path=pg_url)
    with pytest.raises(TrackerError):
        with tracker.transaction() as c:
            c.execute("INSERT INTO no_such_table VALUES (1)")
    with pytest.raises(TrackerError):
        with tracker.transaction() as c:
            c.execute("INSERT INTO config(key, value) VALUES ('k', 'v')")
            c.execute("INSERT INTO config(key, value) VALUES ('k', 'again')")  # the key taken: refused
    assert tracker.db.read("SELECT value FROM config WHERE key = 'k'") == []
    with _watch(pg_url) as watch:
        assert _backend_state(watch, tracker.db.conn.pg.info.backend_pid) == "idle"
        assert watch.execute(_WRITE_LOCKS, (WRITE_LOCK_ID,)).fetchone()[0] == 0
    assert tracker.create("after")["title"] == "after"
    tracker.close()


def test_a_lease_is_measured_with_the_server_clock_read_by_its_statement(tmp_path, pg_url):
    tracker = Tracker.init(tmp_path, prefix="rt", actor="ann", db_path=pg_url)
    ensure_lease_table(tracker)
    task = tracker.create("a task", labels=["plan:q"])
    before = tracker.db.now()
    claimed, lease = claim_next_leased(tracker, labels=["plan:q"], parent=None, skip=set(), run_id="run-a",
                                       ttl_s=120)
    after = tracker.db.now()
    assert claimed["id"] == task["id"] and lease.holds(tracker)
    row = tracker.db.read("SELECT acquired_at, heartbeat_at, expires_at FROM mesh_leases")[0]
    assert before <= row["acquired_at"] == row["heartbeat_at"] <= after
    assert row["expires_at"] == row["acquired_at"] + 120
    with pytest.raises(LeaseHeld, match=r"held by run run-a .* for \d+s more"):
        Lease.acquire(tracker, task["id"], "run-b", holder="bob", ttl_s=120)
    tracker.close()


def test_a_drain_claims_a_task_with_its_lease_in_one_statement(tmp_path, pg_url):
    """``claim_next_leased`` on PostgreSQL: the pick, the claim, its events and the lease are one
    statement sent once; a task whose lease another run holds is passed over by that statement
    (nothing of it written), and the next one taken in a second."""
    from tests.test_pg_single_writes import _counted

    tracker = Tracker.init(tmp_path, prefix="rt", actor="ann", db_path=pg_url)
    ensure_lease_table(tracker)
    leased = tracker.create("leased elsewhere", labels=["plan:q"], priority=0)
    free = tracker.create("free", labels=["plan:q"], priority=1)
    last = tracker.create("last", labels=["plan:q"], priority=2)
    Lease.acquire(tracker, leased["id"], "other-run", holder="bob")
    sent = _counted(tracker)
    task, lease = claim_next_leased(tracker, labels=["plan:q"], parent=None, skip=set(), run_id="run-a", ttl_s=60)
    assert task["id"] == free["id"] and (task["status"], task["assignee"]) == ("in_progress", "ann")
    assert len(sent) == 2  # the leased task refused by the statement, then the free one taken
    assert lease.holds(tracker) and lease.token
    assert [(e["event_type"], e["field"]) for e in tracker.events(free["id"])][-2:] == \
        [("claimed", "status"), ("claimed", "assignee")]
    assert [e["event_type"] for e in tracker.events(leased["id"])] == ["created"]
    assert tracker.get(leased["id"])["status"] == "open"
    sent.clear()
    task, _ = claim_next_leased(tracker, labels=["plan:q"], parent=None, skip={leased["id"]}, run_id="run-a",
                                ttl_s=60)
    assert task["id"] == last["id"] and len(sent) == 1
    row = tracker.db.read("SELECT run_id, holder, expires_at - acquired_at AS ttl FROM mesh_leases WHERE task_id = ?",
                          (last["id"],))[0]
    assert (row["run_id"], row["holder"], row["ttl"]) == ("run-a", "ann", 60)
    assert claim_next_leased(tracker, labels=["plan:q"], parent=None, skip={leased["id"]}, run_id="run-a",
                             ttl_s=60) is None
    tracker.close()
