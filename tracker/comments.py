"""Comments on issues, with dedupe keys: the orchestrator's checkpoints are comments.

``Comments`` is one part of ``store.Tracker``: adding them (``reader.Reader`` reads them).
"""

from __future__ import annotations

from .errors import InvalidValueError
from .model import now_iso
from .rows import _COMMENT_COLUMNS, _comment_obj

__all__ = ["Comments"]


class Comments:
    """Adding comments."""

    def add_comment(self, issue_id: str, text: str, *, author: str | None = None,
                    dedupe_key: str | None = None) -> dict:
        """Add a comment; with ``dedupe_key`` a repeat returns the first comment instead."""
        if not text:
            raise InvalidValueError("comment text must not be empty")
        if self.db.engine == "postgresql":
            return self._add_comment_in_one(issue_id, text, author or self.actor, dedupe_key)
        with self.transaction() as c:
            self._row(c, issue_id)
            if dedupe_key:
                row = c.execute("SELECT * FROM comments WHERE dedupe_key = ?", (dedupe_key,)).fetchone()
                if row:
                    return _comment_obj(row)
            now = now_iso()
            comment_id = c.execute(
                "INSERT INTO comments(issue_id, author, text, created_at, dedupe_key) VALUES (?,?,?,?,?) RETURNING id",
                (issue_id, author or self.actor, text, now, dedupe_key),
            ).fetchone()[0]
            c.execute("UPDATE issues SET updated_at = ? WHERE id = ?", (now, issue_id))
            self._event(c, issue_id, "commented", None, None, text[:200], at=now)
            row = c.execute("SELECT * FROM comments WHERE id = ?", (comment_id,)).fetchone()
        return _comment_obj(row)

    def _add_comment_in_one(self, issue_id: str, text: str, author: str, dedupe_key: str | None) -> dict:
        """``add_comment`` on PostgreSQL: one statement (the issue row locked first, as the
        update of its ``updated_at`` will lock it: two writers of one issue queue instead of both
        share-locking it and deadlocking on the upgrade; the comment inserted unless its dedupe key
        is taken, ``updated_at`` and the ``commented`` event written), then the comment; a second
        round trip only to say why
        nothing was written (no such issue) or, when a concurrent writer took the same dedupe
        key a moment earlier, to read that writer's comment."""
        now = now_iso()
        sql = (
            "WITH issue AS (SELECT id FROM issues WHERE id = ? FOR NO KEY UPDATE),"
            f" old AS (SELECT {_COMMENT_COLUMNS} FROM comments WHERE dedupe_key = ? AND EXISTS (SELECT 1 FROM issue)),"
            " ins AS (INSERT INTO comments(issue_id, author, text, created_at, dedupe_key)"
            " SELECT id, ?, ?, ?, ? FROM issue WHERE NOT EXISTS (SELECT 1 FROM old)"
            f" ON CONFLICT (dedupe_key) DO NOTHING RETURNING {_COMMENT_COLUMNS}),"
            " upd AS (UPDATE issues SET updated_at = ? WHERE id IN (SELECT issue_id FROM ins)),"
            " ev AS (INSERT INTO events(issue_id, event_type, actor, field, old_value, new_value, created_at)"
            " SELECT issue_id, 'commented', ?, NULL, NULL, ?, ? FROM ins)"
            f" SELECT {_COMMENT_COLUMNS} FROM ins UNION ALL SELECT {_COMMENT_COLUMNS} FROM old"
        )
        params = (issue_id, dedupe_key, author, text, now, dedupe_key, now, self.actor, text[:200], now)
        with self.db._lock:
            row = self.db.conn.fetch_one(sql, params)
        if row is not None:
            return _comment_obj(row)
        self._require(issue_id)
        found = self.db.read(f"SELECT {_COMMENT_COLUMNS} FROM comments WHERE dedupe_key = ?", (dedupe_key,))
        return _comment_obj(tuple(found[0]))
