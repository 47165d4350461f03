"""The tracker's schema and its versions, for both engines.

The schema is written once, in SQLite's DDL; ``dialect.to_postgres`` turns it into
PostgreSQL's. The version lives in the ``schema_version`` table (one row per
migration applied, with when). Opening a database applies the forward migrations
it lacks, in one write transaction (all or nothing; two processes opening an old
database at once migrate it once), and refuses a database newer than this code
with a clear error instead of misreading it.

Versions: 1 the first schema; 2 the cached ready state (``blocked``, ``defer_eff``);
3 the ``schema_version`` table (earlier SQLite files kept the version in ``config``); 4 on
PostgreSQL, a trigger that says ``NOTIFY mesh_changes`` after every statement that adds to
``events`` (every change of an issue, a comment included), so a reader such as ``mesh serve``
learns of a change by ``LISTEN`` instead of reading the tables again and again (SQLite has its
change counter, ``PRAGMA data_version``, and needs nothing); 5 the index ``issues_open_order``
(the order ``list`` shows the issues that are not closed in: bd's ``list`` stops at 50, and
without it every open issue was sorted to find them); 6 on PostgreSQL, what makes
each write one round trip (``tracker.pg_functions``: the server-side functions of the writes one
statement cannot do, and the label rows' copy of their issue's place in ready order; SQLite runs
the same writes in-process and needs nothing); 7 on PostgreSQL, that copy moved into a table of the
open issues' label rows, ``open_labels``, which a claim or a close deletes from instead of updating
``labels`` through a trigger (and SQLite's covering index ``issues_ready_by_id`` dropped there); 8 on
SQLite, the figures of ``bd stats`` kept by triggers in the table ``tallies`` (``tracker.tallies``;
PostgreSQL computes them from its tables and needs nothing).
"""

from __future__ import annotations

from .db import SCHEMA_VERSION
from .errors import WorkspaceError

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["CHANGE_CHANNEL", "SCHEMA", "SCHEMA_VERSION", "current_version", "ensure_schema", "statements"]

# Version 5 (see the module docstring); also in SCHEMA, for new trackers.
OPEN_ORDER_INDEX = ("CREATE INDEX IF NOT EXISTS issues_open_order ON issues(priority, created_sort, id)"
                    " WHERE status NOT IN ('closed','tombstone')")

# PostgreSQL only (version 4): one notification per writing statement on ``events``, sent when its
# transaction commits (a transaction's identical notifications are folded into one by the server).
CHANGE_CHANNEL = "mesh_changes"
POSTGRES_NOTIFY = (
    "CREATE OR REPLACE FUNCTION mesh_notify_change() RETURNS trigger LANGUAGE plpgsql AS"
    f" $$ BEGIN PERFORM pg_notify('{CHANGE_CHANNEL}', ''); RETURN NULL; END $$",
    "DROP TRIGGER IF EXISTS mesh_events_notify ON events",
    "CREATE TRIGGER mesh_events_notify AFTER INSERT ON events FOR EACH STATEMENT"
    " EXECUTE FUNCTION mesh_notify_change()",
)

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
    defer_sort TEXT,
    blocked INTEGER NOT NULL DEFAULT 0,
    defer_eff TEXT
);
CREATE INDEX IF NOT EXISTS issues_by_status ON issues(status, issue_type, priority, created_sort, id);
CREATE INDEX IF NOT EXISTS issues_ready_order ON issues(priority, created_sort, id)
    WHERE status = 'open' AND blocked = 0;
CREATE INDEX IF NOT EXISTS issues_ready_by_id ON issues(id, issue_type, priority, created_sort, defer_eff, ephemeral, pinned)
    WHERE status = 'open' AND blocked = 0;
CREATE INDEX IF NOT EXISTS issues_by_assignee ON issues(assignee) WHERE assignee IS NOT NULL;
CREATE INDEX IF NOT EXISTS issues_open_order ON issues(priority, created_sort, id)
    WHERE status NOT IN ('closed','tombstone');
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

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
)
"""


def statements(script: str) -> list[str]:
    """The statements of a DDL script (the schema has no ``;`` inside a statement)."""
    return [s.strip() for s in script.split(";") if s.strip()]


def current_version(db: Any) -> int:
    """The schema version of an open database: 0 when it holds no tracker at all."""
    if db.table_exists("schema_version"):
        row = db.read("SELECT MAX(version) FROM schema_version")
        if row and row[0][0] is not None:
            return int(row[0][0])
    if not db.table_exists("issues"):
        return 0
    row = db.read("SELECT value FROM config WHERE key = 'schema_version'") if db.table_exists("config") else []
    if row and str(row[0][0]).isdigit():
        return int(row[0][0])
    return 2 if "blocked" in db.columns("issues") else 1


def ensure_schema(db: Any, *, create: bool, where: str) -> None:
    """Bring the database at ``where`` to ``SCHEMA_VERSION`` (creating it when ``create``)."""
    version = current_version(db)
    if version == SCHEMA_VERSION:
        return
    _check(version, create, where)
    with db.transaction() as c:
        version = current_version(db)  # another process may have migrated while we waited
        _check(version, create, where)
        if version == 0:
            for statement in statements(SCHEMA):
                c.execute(statement)
        elif version < 2:
            c.execute("ALTER TABLE issues ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0")
            c.execute("ALTER TABLE issues ADD COLUMN defer_eff TEXT")
            for statement in statements(SCHEMA):  # the indexes over the new columns
                c.execute(statement)
            from .db import refresh_ready_state

            refresh_ready_state(c)
        if version < 4 and getattr(db, "engine", "sqlite") == "postgresql":
            for statement in POSTGRES_NOTIFY:
                c.execute(statement)
        if 2 <= version < 5:  # (below 2 the whole schema's statements ran above)
            c.execute(OPEN_ORDER_INDEX)
        if version < 7 and getattr(db, "engine", "sqlite") == "postgresql":
            from .pg_functions import FUNCTIONS  # versions 6 and 7 (each statement may run again)

            for statement in FUNCTIONS:
                c.execute(statement)
        if version < 8 and getattr(db, "engine", "sqlite") == "sqlite":
            from .tallies import recount, schema

            for statement in schema():
                c.execute(statement)
            recount(c)
        if version < SCHEMA_VERSION:
            from .model import now_iso

            c.execute(VERSION_TABLE)
            now = now_iso()
            for v in range(max(version, 0) + 1, SCHEMA_VERSION + 1):
                c.execute("INSERT INTO schema_version(version, applied_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                          (v, now))
            c.execute("INSERT INTO config(key, value) VALUES ('schema_version', ?)"
                      " ON CONFLICT(key) DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))


def _check(version: int, create: bool, where: str) -> None:
    if version > SCHEMA_VERSION:
        # Unusable by this mesh, like an unreachable server: the same code, so runs block the same way.
        raise WorkspaceError(f"{where} has tracker schema version {version}, newer than this mesh understands"
                             f" ({SCHEMA_VERSION}): upgrade mesh to use it", code="tracker_unavailable")
    if version == 0 and not create:
        raise WorkspaceError(f"{where} is not a mesh tracker database (run 'mesh tracker init')")
