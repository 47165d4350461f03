"""A lease per task: one run works a task at a time.

The lease is a row in the tracker database, taken in a write transaction
(compare-and-set), kept alive by a heartbeat thread, and released at the end of
the run. A lease left by a killed process expires after its TTL; ``mesh resume``
takes it over then, or at once with ``--force``. Every time a lease is measured
against comes from the database's clock (``tracker.db.now()``: the server's on
PostgreSQL), so runners on machines whose clocks differ agree on when it expires.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracker.store import Tracker

__all__ = ["Lease", "LeaseHeld", "keep_alive", "DEFAULT_TTL_S", "ensure_lease_table", "lease_is_live", "held_by_person",
           "holder_is_dead", "process_gone", "claim_next_leased"]

DEFAULT_TTL_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mesh_leases (
    task_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    token TEXT NOT NULL,
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    expires_at REAL NOT NULL
)
"""


class LeaseHeld(Exception):
    """Another live run holds the task."""


def ensure_lease_table(tracker: Tracker) -> None:
    with tracker.transaction() as c:
        c.execute(_SCHEMA)


def lease_is_live(tracker: Tracker, task_id: str, *, now: float | None = None) -> bool:
    """True while some run holds an unexpired lease on ``task_id``."""
    ensure_lease_table(tracker)
    moment = tracker.db.now() if now is None else now
    row = tracker.db.read("SELECT expires_at FROM mesh_leases WHERE task_id = ?", (task_id,))
    return bool(row) and row[0]["expires_at"] > moment


def held_by_person(tracker: Tracker, task: dict, actor: str) -> bool:
    """True for an in-progress task assigned to someone else that no mesh run ever leased:
    a person works it by hand, and mesh leaves it alone unless told to take it over."""
    if task.get("status") != "in_progress" or not task.get("assignee") or task["assignee"] == actor:
        return False
    ensure_lease_table(tracker)
    return not tracker.db.read("SELECT 1 FROM mesh_leases WHERE task_id = ?", (task["id"],))


def holder_is_dead(tracker: Tracker, task_id: str) -> bool:
    """True when the task's lease belongs to a process of this host that no longer exists
    (a killed run): its lease can be taken over without waiting for the TTL."""
    ensure_lease_table(tracker)
    row = tracker.db.read("SELECT pid, host FROM mesh_leases WHERE task_id = ?", (task_id,))
    return bool(row) and process_gone(row[0]["host"], row[0]["pid"])


def process_gone(host: str | None, pid: int | None) -> bool:
    """True when ``pid`` of ``host`` is a process of this host (not this one) that no longer
    exists: what it held can be taken over at once. A process of another host is never known gone."""
    if host != socket.gethostname() or not pid or pid == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def keep_alive(path: Path | str, actor: str, every_s: float, renew: Callable[[Tracker], bool],
               stop: threading.Event, *, name: str) -> threading.Thread:
    """A started daemon thread calling ``renew(tracker)`` every ``every_s`` until ``stop`` is set
    or ``renew`` returns False (what it renews was taken over). It has its own connection
    (``path`` reopened); a busy or dropped database must not kill the run, so a failed beat is
    retried at the next one on a new connection."""

    def beat() -> None:
        tracker = None
        try:
            while not stop.wait(every_s):
                try:
                    tracker = tracker or Tracker(path, actor=actor)
                    if not renew(tracker):
                        return
                except Exception:
                    if tracker is not None:
                        tracker.close()
                    tracker = None
        finally:
            if tracker is not None:
                tracker.close()

    thread = threading.Thread(target=beat, name=name, daemon=True)
    thread.start()
    return thread


@dataclass
class Lease:
    """A held lease; ``heartbeat()`` starts the renewing thread, ``release()`` ends it."""

    db_path: Path | str  # a SQLite file or a PostgreSQL URL (what Tracker() reopens)
    task_id: str
    run_id: str
    ttl_s: float
    token: str
    holder: str
    _stop: threading.Event | None = None
    _thread: threading.Thread | None = None

    @classmethod
    def acquire(cls, tracker: Tracker, task_id: str, run_id: str, *, holder: str, ttl_s: float = DEFAULT_TTL_S,
                force: bool = False, now: float | None = None) -> "Lease":
        """Take the task's lease, or raise ``LeaseHeld`` while another run's lease is live.

        ``force`` takes it over regardless (the user says the other run is dead).
        """
        ensure_lease_table(tracker)
        return cls._take(tracker, task_id, run_id, holder=holder, ttl_s=ttl_s, force=force, now=now)

    @classmethod
    def _take(cls, tracker: Tracker, task_id: str, run_id: str, *, holder: str, ttl_s: float, force: bool = False,
              now: float | None = None) -> "Lease":
        """``acquire`` once the table exists: row locks only, never the writers' lock (inside a
        transaction that holds a claimed row, waiting for that lock could deadlock with a writer
        that holds it and waits for the row)."""
        token = secrets.token_hex(8)
        # The database's clock read by the statement itself where it can (PostgreSQL: one round
        # trip less), else read here.
        clock = tracker.db.now_sql if now is None else None
        moment = () if clock else (tracker.db.now() if now is None else now,)
        # One compare-and-set statement: insert the lease, or replace one that lapsed (or any, with
        # ``force``). Runners taking different tasks never wait for each other.
        with tracker.transaction(exclusive=False) as c:
            won = c.execute(
                _take_sql("(SELECT ? AS id) AS task", clock, "token"),
                (run_id, token, holder, os.getpid(), socket.gethostname(), ttl_s, task_id, *moment, int(force)),
            ).fetchone()
            if won is None or won[0] != token:
                row = c.execute("SELECT * FROM mesh_leases WHERE task_id = ?", (task_id,)).fetchone()
                left = row["expires_at"] - (moment[0] if moment else tracker.db.now())
                raise LeaseHeld(
                    f"{task_id} is held by run {row['run_id']} ({row['holder']}, pid {row['pid']} on {row['host']})"
                    f" for {left:.0f}s more; use --force if that run is dead")
        return cls(db_path=tracker.path, task_id=task_id, run_id=run_id, ttl_s=ttl_s, token=token, holder=holder)

    def renew(self, tracker: Tracker) -> bool:
        """Extend the lease; False when it was taken over (our token is gone)."""
        with tracker.transaction(exclusive=False) as c:
            moment = tracker.db.now()
            n = c.execute("UPDATE mesh_leases SET heartbeat_at = ?, expires_at = ? WHERE task_id = ? AND token = ?",
                          (moment, moment + self.ttl_s, self.task_id, self.token)).rowcount
        return n == 1

    def holds(self, tracker: Tracker) -> bool:
        """True while this lease (its token) is still the task's lease."""
        row = tracker.db.read("SELECT token FROM mesh_leases WHERE task_id = ?", (self.task_id,))
        return bool(row) and row[0]["token"] == self.token

    def heartbeat(self) -> None:
        """Renew every third of the TTL from a thread with its own connection."""
        self._stop = threading.Event()
        self._thread = keep_alive(self.db_path, self.holder, self.ttl_s / 3, self.renew, self._stop,
                                  name=f"lease-{self.task_id}")

    def release(self, tracker: Tracker) -> None:
        """Stop the heartbeat and drop the lease (only if still ours)."""
        if self._stop:
            self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        with tracker.transaction() as c:
            c.execute("DELETE FROM mesh_leases WHERE task_id = ? AND token = ?", (self.task_id, self.token))


def _take_sql(task: str, clock: str | None, answer: str) -> str:
    """The lease's compare-and-set ``INSERT`` for the task ``task`` (a row source with its ``id``);
    its parameters: the run, token, holder, pid, host, TTL, the time unless ``clock`` reads it, and
    whether to take a live lease over (force); it returns ``answer`` of the lease row it wrote."""
    return ("INSERT INTO mesh_leases(task_id, run_id, token, holder, pid, host, acquired_at, heartbeat_at,"
            f" expires_at) SELECT task.id, ?, ?, ?, ?, ?, t.m, t.m, t.m + ? FROM {task}, (SELECT {clock or '?'} AS m) AS t"
            " WHERE true ON CONFLICT(task_id) DO UPDATE SET"
            " run_id = excluded.run_id, token = excluded.token, holder = excluded.holder, pid = excluded.pid,"
            " host = excluded.host, acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at,"
            " expires_at = excluded.expires_at WHERE mesh_leases.expires_at <= excluded.acquired_at OR ? = 1"
            f" RETURNING {answer}")


def claim_next_leased(tracker: Tracker, *, labels: list[str], parent: str | None, skip: set[str], run_id: str,
                      ttl_s: float, lease: bool = True, types: Sequence[str] = ("task",)
                      ) -> tuple[dict, Lease | None] | None:
    """Claim the next ready task of a scope (``Tracker.claim_next``: on PostgreSQL one statement,
    ``FOR UPDATE SKIP LOCKED``) and take its lease, in one transaction: a task is never claimed
    without its lease (which ``held_by_person`` tells a run's task by), and a lease is never taken
    on a task another runner claimed. A task whose lease another run holds is passed over (its
    claim undone); None when nothing is left to claim. ``lease=False`` (runs that do not
    integrate) claims only. The lease table must exist (``ensure_lease_table``, once: it takes
    the writers' lock). ``types``: the issue types the scope runs.

    On PostgreSQL with a lease, the lease's ``INSERT`` is the claim statement's gate
    (``Tracker.claim_next``): the pick, the claim, its events and the lease are one statement,
    one round trip, and a task whose lease is live is passed over by the statement itself."""
    if lease and tracker.db.engine == "postgresql":
        token = secrets.token_hex(8)
        gate = (_take_sql("cand AS task", tracker.db.now_sql, "task_id AS id"),
                (run_id, token, tracker.actor, os.getpid(), socket.gethostname(), ttl_s, 0))
        task = tracker.claim_next(labels=labels, issue_type=list(types), parent=parent, skip=skip, gate=gate)
        if task is None:
            return None
        return task, Lease(db_path=tracker.path, task_id=task["id"], run_id=run_id, ttl_s=ttl_s, token=token,
                           holder=tracker.actor)
    avoid = set(skip)
    while True:
        task = None
        try:
            with tracker.transaction(exclusive=False):
                task = tracker.claim_next(labels=labels, issue_type=list(types), parent=parent, skip=avoid)
                if task is None:
                    return None
                held = Lease._take(tracker, task["id"], run_id, holder=tracker.actor, ttl_s=ttl_s) if lease else None
            return task, held
        except LeaseHeld:
            avoid.add(task["id"])
