"""Comments on issues, with dedupe keys: the orchestrator's checkpoints are comments.

``Comments`` is one part of ``store.Tracker``.
"""

from __future__ import annotations

from .errors import InvalidValueError
from .model import now_iso
from .rows import _comment_obj

__all__ = ["Comments"]


class Comments:
    """Adding and reading comments."""

    def add_comment(self, issue_id: str, text: str, *, author: str | None = None,
                    dedupe_key: str | None = None) -> dict:
        """Add a comment; with ``dedupe_key`` a repeat returns the first comment instead."""
        if not text:
            raise InvalidValueError("comment text must not be empty")
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

    def comments(self, issue_id: str) -> list[dict]:
        """Comments of an issue, oldest first."""
        with self.db._lock:
            self._row(self.db.conn, issue_id)
        rows = self.db.read("SELECT * FROM comments WHERE issue_id = ? ORDER BY id", (issue_id,))
        return [_comment_obj(r) for r in rows]

    def comment_keys(self, prefix: str) -> set[str]:
        """Dedupe keys that start with ``prefix`` (checkpoints already written)."""
        rows = self.db.read(
            "SELECT dedupe_key FROM comments WHERE dedupe_key >= ? AND dedupe_key < ?", (prefix, prefix + "\uffff")
        )
        return {r[0] for r in rows}
