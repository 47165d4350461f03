"""SQLite connection, schema and transactions of the tracker.

One file, WAL journal, a busy timeout, foreign keys on, and every write
transaction opened with ``BEGIN IMMEDIATE`` so that two writers never both read
then write (the claim compare-and-set depends on it).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from .errors import WorkspaceError

__all__ = ["Database", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS config (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS issues (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL DEFAULT '',
    description TEXT,
    design TEXT,
    acceptance_criteria TEXT,
    notes TEXT,
    status TEXT NOT NULL DEFAULT 'open',
    priority INTEGER NOT NULL DEFAULT 2,
    issue_type TEXT NOT NULL DEFAULT 'task',
    assignee TEXT,
    owner TEXT,
    created_at TEXT,
    created_by TEXT,
    updated_at TEXT,
    closed_at TEXT,
    close_reason TEXT,
    defer_until TEXT,
    due_at TEXT,
    external_ref TEXT,
    metadata TEXT,
    await_type TEXT,
    await_id TEXT,
    timeout INTEGER,
    agent_state TEXT,
    last_activity TEXT,
    hook_bead TEXT,
    role_bead TEXT,
    pinned INTEGER,
    ephemeral INTEGER,
    extra TEXT,
    created_sort TEXT,
    defer_sort TEXT
);
CREATE INDEX IF NOT EXISTS issues_by_status ON issues(status, issue_type, priority, created_sort, id);
CREATE INDEX IF NOT EXISTS issues_deferred ON issues(defer_sort) WHERE defer_sort IS NOT NULL;
CREATE INDEX IF NOT EXISTS issues_by_assignee ON issues(assignee) WHERE assignee IS NOT NULL;
CREATE TABLE IF NOT EXISTS labels (
    issue_id TEXT NOT NULL REFERENCES issues(id) ON DELETE CASCADE ON UPDATE CASCADE,
    label TEXT NOT NULL,
    UNIQUE (issue_id, label)
);
CREATE INDEX IF NOT EXISTS labels_by_label ON labels(label, issue_id);
CREATE TABLE IF NOT EXISTS dependencies (
    issue_id TEXT NOT NULL REFERENCES issues(id) ON DELETE CASCADE ON UPDATE CASCADE,
    depends_on_id TEXT NOT NULL,
    type TEXT NOT NULL DEFAULT 'blocks',
    created_at TEXT,
    created_by TEXT,
    extra TEXT,
    UNIQUE (issue_id, depends_on_id, type)
);
CREATE INDEX IF NOT EXISTS deps_by_target ON dependencies(depends_on_id, type, issue_id);
CREATE INDEX IF NOT EXISTS deps_by_type ON dependencies(type, issue_id, depends_on_id);
CREATE TABLE IF NOT EXISTS comments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    issue_id TEXT NOT NULL REFERENCES issues(id) ON DELETE CASCADE ON UPDATE CASCADE,
    author TEXT,
    text TEXT NOT NULL,
    created_at TEXT,
    ext_id TEXT,
    dedupe_key TEXT UNIQUE,
    extra TEXT
);
CREATE INDEX IF NOT EXISTS comments_by_issue ON comments(issue_id, id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    issue_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    actor TEXT,
    field TEXT,
    old_value TEXT,
    new_value TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_issue ON events(issue_id, id);
CREATE TABLE IF NOT EXISTS child_counters (
    parent_id TEXT PRIMARY KEY,
    last_child INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    issue_id TEXT NOT NULL
);
"""


class Database:
    """A tracker database file with explicit, re-entrant write transactions."""

    def __init__(self, path: Path | str, *, create: bool = False):
        self.path = Path(path)
        if not create and not self.path.exists():
            raise WorkspaceError(f"no tracker database at {self.path} (run 'mesh tracker init')")
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(
                str(self.path),
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise WorkspaceError(f"cannot enable WAL on {self.path} (journal mode {mode})")
            # NORMAL is durable across application crashes in WAL mode; only an OS crash can
            # lose the last transactions, never corrupt the file.
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            if create:
                self.conn.executescript(SCHEMA)
                self.conn.execute(
                    "INSERT OR IGNORE INTO config(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            else:
                found = self.conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name='issues'"
                ).fetchone()
                if not found:
                    raise WorkspaceError(f"{self.path} is not a mesh tracker database")
        except sqlite3.DatabaseError as exc:
            raise WorkspaceError(f"cannot open tracker database {self.path}: {exc}") from exc
        self._lock = threading.RLock()
        self._depth = 0

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction; nested calls join the outer one."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.conn
                finally:
                    self._depth -= 1
                return
            self.conn.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield self.conn
            except BaseException:
                self._depth = 0
                self.conn.execute("ROLLBACK")
                raise
            else:
                self._depth = 0
                self.conn.execute("COMMIT")

    def read(self, sql: str, params: tuple | dict = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def close(self) -> None:
        self.conn.close()
