"""A lease per task: one run works a task at a time.

The lease is a row in the tracker database, taken in a ``BEGIN IMMEDIATE``
transaction (compare-and-set), kept alive by a heartbeat thread, and released
at the end of the run. A lease left by a killed process expires after its TTL;
``mesh resume`` takes it over then, or at once with ``--force``.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tracker.store import Tracker

__all__ = ["Lease", "LeaseHeld", "DEFAULT_TTL_S", "ensure_lease_table", "lease_is_live", "held_by_person",
           "holder_is_dead"]

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
    moment = time.time() if now is None else now
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
    if not row or row[0]["host"] != socket.gethostname() or row[0]["pid"] == os.getpid():
        return False
    try:
        os.kill(row[0]["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass
class Lease:
    """A held lease; ``heartbeat()`` starts the renewing thread, ``release()`` ends it."""

    db_path: Path
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
        token = secrets.token_hex(8)
        moment = time.time() if now is None else now
        with tracker.transaction() as c:
            row = c.execute("SELECT * FROM mesh_leases WHERE task_id = ?", (task_id,)).fetchone()
            if row is not None and row["expires_at"] > moment and not force:
                raise LeaseHeld(
                    f"{task_id} is held by run {row['run_id']} ({row['holder']}, pid {row['pid']} on {row['host']})"
                    f" for {row['expires_at'] - moment:.0f}s more; use --force if that run is dead")
            c.execute(
                "INSERT OR REPLACE INTO mesh_leases(task_id, run_id, token, holder, pid, host, acquired_at,"
                " heartbeat_at, expires_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (task_id, run_id, token, holder, os.getpid(), socket.gethostname(), moment, moment, moment + ttl_s),
            )
        return cls(db_path=tracker.path, task_id=task_id, run_id=run_id, ttl_s=ttl_s, token=token, holder=holder)

    def renew(self, tracker: Tracker) -> bool:
        """Extend the lease; False when it was taken over (our token is gone)."""
        moment = time.time()
        with tracker.transaction() as c:
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

        def beat() -> None:
            tracker = Tracker(self.db_path, actor=self.holder)
            try:
                while not self._stop.wait(self.ttl_s / 3):
                    try:
                        if not self.renew(tracker):
                            return
                    except Exception:  # a busy database must not kill the run; the next beat retries
                        continue
            finally:
                tracker.close()

        self._thread = threading.Thread(target=beat, name=f"lease-{self.task_id}", daemon=True)
        self._thread.start()

    def release(self, tracker: Tracker) -> None:
        """Stop the heartbeat and drop the lease (only if still ours)."""
        if self._stop:
            self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        with tracker.transaction() as c:
            c.execute("DELETE FROM mesh_leases WHERE task_id = ? AND token = ?", (self.task_id, self.token))
