"""The calls table: every worker call logged to the tracker database (llm's ``responses`` idea).

Prompts, raw responses and error details are scrubbed of secrets before they are written.
On SQLite the prompts and responses are indexed for full-text search (FTS5, table
``mesh_calls_fts``), kept in sync by triggers; ``mesh logs -q`` reads it.
"""

from __future__ import annotations

from tracker.jsontext import dumps, loads
from tracker.model import now_iso
from tracker.store import Tracker

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


__all__ = ["ensure_calls_table", "has_search_index", "log_call", "calls_for", "logged_response",
           "SEARCH_COLUMNS"]

# The columns ``mesh logs -q`` searches.
SEARCH_COLUMNS = ("prompt", "response")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mesh_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    role TEXT NOT NULL,
    round TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    backend TEXT NOT NULL,
    model TEXT,
    prompt TEXT,
    response TEXT,
    usage TEXT,
    duration_s REAL,
    error TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS mesh_calls_by_run ON mesh_calls(run_id, id);
CREATE INDEX IF NOT EXISTS mesh_calls_by_task ON mesh_calls(task_id, id);
"""


def ensure_calls_table(tracker: Tracker) -> None:
    """Create the calls table, and on SQLite its full-text index, where this database lacks
    them. Idempotent, and all in one write transaction: a database made before the index
    existed gets it (filled from the rows already logged) on first use."""
    sqlite = tracker.db.engine == "sqlite"
    if sqlite and has_search_index(tracker):
        return
    with tracker.transaction() as c:
        for statement in _SCHEMA.strip().split(";"):
            if statement.strip():
                c.execute(statement)
        if sqlite:
            # sqlite-utils 4 runs its DDL as single statements inside an open transaction (no
            # implicit COMMIT); replace=True re-checks under our lock and repairs a table
            # whose triggers are missing. No plugins and no PRAGMA on the tracker's connection.
            import sqlite_utils  # here: only to create the index, once per database

            calls = sqlite_utils.Database(c, recursive_triggers=False, execute_plugins=False)["mesh_calls"]
            calls.enable_fts(SEARCH_COLUMNS, create_triggers=True, replace=True)


def has_search_index(tracker: Tracker) -> bool:
    """Whether the calls table has its full-text index and the triggers that keep it in sync
    (always False on PostgreSQL, which searches without one)."""
    if tracker.db.engine != "sqlite":
        return False
    rows = tracker.db.read("SELECT name FROM sqlite_master WHERE name IN (?, ?, ?, ?)",
                           ("mesh_calls_fts", "mesh_calls_ai", "mesh_calls_ad", "mesh_calls_au"))
    return len(rows) == 4


def log_call(tracker: Tracker, *, run_id: str, task_id: str, role: str, round: str, attempt: int,
             backend: str, model: str | None, prompt: str, response: str | None, usage: dict[str, Any],
             duration_s: float, error: str | None) -> None:
    """Append one call (prompt, response and error scrubbed: a backend's error detail can quote
    the model's output)."""
    from redact import scrub  # here: reading the log never needs the scrubber

    with tracker.transaction() as c:
        c.execute(
            "INSERT INTO mesh_calls(run_id, task_id, role, round, attempt, backend, model, prompt, response,"
            " usage, duration_s, error, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, task_id, role, round, attempt, backend, model, scrub(prompt),
             scrub(response) if response is not None else None, dumps(usage), duration_s,
             scrub(error) if error is not None else None, now_iso()),
        )


REJECTED = "rejected: "


def mark_rejected(tracker: Tracker, *, run_id: str, role: str, round: str, attempt: int, reason: str) -> None:
    """Record on a logged answered call that mesh refused its answer (``reason``: a parse error's
    ``kind: message``, e.g. ``invalid_shape: ...``): the call counts as failed, by that reason.
    Idempotent: only a call with no error yet is marked."""
    from redact import scrub

    with tracker.transaction() as c:
        c.execute("UPDATE mesh_calls SET error = ? WHERE id = (SELECT MAX(id) FROM mesh_calls WHERE run_id = ?"
                  " AND role = ? AND round = ? AND attempt = ?) AND error IS NULL",
                  (scrub(REJECTED + reason)[:2000], run_id, role, round, attempt))


def failure_reason(error: str | None) -> str | None:
    """The typed reason of a logged call's error (``invalid_shape``, ``no_response``, ``timeout``...);
    None for a call that did not fail (no error, or a note)."""
    if not error or error.startswith("note: "):
        return None
    code = error.removeprefix(REJECTED).split(":", 1)[0].strip()
    return code if code and " " not in code else "error"


def calls_for(tracker: Tracker, *, run_id: str | None = None, task_id: str | None = None) -> list[dict]:
    """Logged calls of a run or a task, oldest first."""
    where, params = [], []
    if run_id:
        where.append("run_id = ?")
        params.append(run_id)
    if task_id:
        where.append("task_id = ?")
        params.append(task_id)
    sql = "SELECT * FROM mesh_calls" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
    try:
        rows = tracker.db.read(sql, tuple(params))
    except Exception as exc:  # the table does not exist before the first run
        if "no such table" in str(exc):
            return []
        raise
    out = []
    for r in rows:
        d = dict(r)
        d["usage"] = loads(d["usage"]) if d["usage"] else {}
        out.append(d)
    return out


def logged_response(tracker: Tracker, *, run_id: str, role: str, round: str, attempt: int,
                    prompt: str) -> dict | None:
    """The latest answered call of a run with exactly this role, round, attempt and prompt (an
    answer mesh refused included: asked again, it is refused again, not paid twice)."""
    rows = tracker.db.read(
        "SELECT * FROM mesh_calls WHERE run_id = ? AND role = ? AND round = ? AND attempt = ? AND prompt = ?"
        " AND response IS NOT NULL AND (error IS NULL OR error LIKE 'rejected: %') ORDER BY id DESC LIMIT 1",
        (run_id, role, round, attempt, prompt),
    )
    if not rows:
        return None
    row = dict(rows[0])
    row["usage"] = loads(row["usage"]) if row["usage"] else {}
    return row
