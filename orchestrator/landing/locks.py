"""Named locks shared by every runner of one tracker: the landing queue across machines.

A lock is a row of ``mesh_locks`` in the tracker database (SQLite or PostgreSQL), taken
by one compare-and-set statement: insert it, or take over a row whose time is up
(``ON CONFLICT ... DO UPDATE ... WHERE expires_at < now``); the database's clock
decides when that is, so runners on machines whose clocks differ agree. The holder
renews it from a heartbeat thread; a killed holder's lock lapses after its TTL, or at once
when the holder was a process of this host that is gone.
Waiters poll. ``mesh drain`` holds ``land:<where>:<branch>`` for each landing, so two
runners never move one integration branch at the same time.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator

from tracker.store import Tracker

from orchestrator.protocol.lease import keep_alive

__all__ = ["LockTimeout", "ensure_lock_table", "named_lock", "lock_holder"]

DEFAULT_TTL_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mesh_locks (
    name TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
)
"""


class LockTimeout(Exception):
    """The lock stayed held by someone else for longer than the caller would wait."""


def ensure_lock_table(tracker: Tracker) -> None:
    with tracker.transaction() as c:
        c.execute(_SCHEMA)


def lock_holder(tracker: Tracker, name: str) -> dict | None:
    """Who holds ``name`` now (None when free or lapsed)."""
    ensure_lock_table(tracker)
    rows = tracker.db.read("SELECT holder, pid, host, expires_at FROM mesh_locks WHERE name = ?", (name,))
    if not rows or rows[0]["expires_at"] <= tracker.db.now():
        return None
    return {"holder": rows[0]["holder"], "pid": rows[0]["pid"], "host": rows[0]["host"]}


def _take_from_dead(tracker: Tracker, name: str, token: str, holder: str, ttl_s: float) -> bool:
    """Take ``name`` over from a holder process of this host that no longer exists (a killed
    drain), without waiting for its TTL; a compare-and-set on the dead holder's token."""
    rows = tracker.db.read("SELECT token, pid, host FROM mesh_locks WHERE name = ?", (name,))
    if not rows or rows[0]["host"] != socket.gethostname() or rows[0]["pid"] == os.getpid():
        return False
    try:
        os.kill(rows[0]["pid"], 0)
        return False
    except ProcessLookupError:
        pass
    except PermissionError:  # alive, under another user
        return False
    with tracker.transaction(exclusive=False) as c:
        now = tracker.db.now()
        won = c.execute(
            "UPDATE mesh_locks SET token = ?, holder = ?, pid = ?, host = ?, acquired_at = ?, expires_at = ?"
            " WHERE name = ? AND token = ? RETURNING token",
            (token, holder, os.getpid(), socket.gethostname(), now, now + ttl_s, name, rows[0]["token"]),
        ).fetchone()
    return won is not None


def _try_take(tracker: Tracker, name: str, token: str, holder: str, ttl_s: float) -> bool:
    with tracker.transaction(exclusive=False) as c:
        now = tracker.db.now()
        row = c.execute(
            "INSERT INTO mesh_locks(name, token, holder, pid, host, acquired_at, expires_at)"
            " VALUES (?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET token = excluded.token,"
            " holder = excluded.holder, pid = excluded.pid, host = excluded.host,"
            " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at"
            " WHERE mesh_locks.expires_at < ? RETURNING token",
            (name, token, holder, os.getpid(), socket.gethostname(), now, now + ttl_s, now),
        ).fetchone()
    return row is not None and row[0] == token


@contextlib.contextmanager
def named_lock(tracker: Tracker, name: str, *, holder: str, ttl_s: float = DEFAULT_TTL_S,
               poll_s: float = 0.2, timeout_s: float | None = None,
               on_wait: Callable[[dict | None], None] | None = None) -> Iterator[None]:
    """Hold ``name`` for the ``with`` block, waiting (polling) while another runner holds it.

    The heartbeat renews it every third of ``ttl_s`` over its own connection (``tracker.path``
    reopened), so a long landing keeps it; raises ``LockTimeout`` after ``timeout_s``.
    ``on_wait`` is told the holder once, when the lock is found taken.
    """
    ensure_lock_table(tracker)
    token = secrets.token_hex(8)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    told = False
    while not (_try_take(tracker, name, token, holder, ttl_s) or _take_from_dead(tracker, name, token, holder, ttl_s)):
        if not told and on_wait is not None:
            on_wait(lock_holder(tracker, name))
            told = True
        if deadline is not None and time.monotonic() > deadline:
            raise LockTimeout(f"{name} stayed held by {lock_holder(tracker, name)} for {timeout_s:g}s")
        time.sleep(poll_s)
    def renew(mine: Tracker) -> bool:
        with mine.transaction(exclusive=False) as c:
            return c.execute("UPDATE mesh_locks SET expires_at = ? WHERE name = ? AND token = ?",
                             (mine.db.now() + ttl_s, name, token)).rowcount == 1

    stop = threading.Event()
    beat = keep_alive(tracker.path, holder, ttl_s / 3, renew, stop, name=f"lock-{name}")
    try:
        yield
    finally:
        stop.set()
        beat.join(timeout=5)
        with tracker.transaction(exclusive=False) as c:
            c.execute("DELETE FROM mesh_locks WHERE name = ? AND token = ?", (name, token))
