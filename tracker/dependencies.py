"""Dependencies and labels: the typed edges between issues, and the labels on them.

``Dependencies`` is one part of ``store.Tracker`` (``reader.Reader`` reads blockers). An edge that can block (``blocks``,
``parent-child``) is refused when it closes a cycle, and every change to an edge
refreshes the ready-work state of the issues it touches.
"""

from __future__ import annotations

from .db import refresh_ready_state
from .errors import ConflictError, CycleError, InvalidValueError, NotFoundError
from .model import now_iso
from .rows import _dep_obj

__all__ = ["Dependencies"]


class Dependencies:
    """Adding and removing dependencies and labels."""

    def add_dependency(self, issue_id: str, depends_on_id: str, dep_type: str = "blocks") -> dict:
        """``issue_id`` depends on ``depends_on_id``; refused if either is missing or it closes a cycle."""
        if not dep_type or not dep_type.strip():
            raise InvalidValueError("dependency type must not be empty")
        if issue_id == depends_on_id:
            raise CycleError(f"{issue_id} cannot depend on itself")
        with self.transaction() as c:
            self._row(c, issue_id)
            self._row(c, depends_on_id)
            if dep_type in ("blocks", "parent-child"):
                # Would depends_on_id reach issue_id through edges of the same kind?
                hit = c.execute(
                    "WITH RECURSIVE reach(id) AS (SELECT id FROM issues WHERE id = ? UNION SELECT d.depends_on_id FROM dependencies d"
                    " JOIN reach r ON d.issue_id = r.id AND d.type = ?) SELECT 1 FROM reach WHERE id = ?",
                    (depends_on_id, dep_type, issue_id),
                ).fetchone()
                if hit:
                    raise CycleError(f"{issue_id} -> {depends_on_id} ({dep_type}) would create a cycle")
            if dep_type == "parent-child":
                existing = c.execute(
                    "SELECT depends_on_id FROM dependencies WHERE issue_id = ? AND type = 'parent-child'", (issue_id,)
                ).fetchone()
                if existing and existing[0] != depends_on_id:
                    raise ConflictError(f"{issue_id} already has parent {existing[0]}")
            now = now_iso()
            cur = c.execute(
                "INSERT INTO dependencies(issue_id, depends_on_id, type, created_at, created_by)"
                " VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
                (issue_id, depends_on_id, dep_type, now, self.actor),
            )
            if cur.rowcount:
                c.execute("UPDATE issues SET updated_at = ? WHERE id = ?", (now, issue_id))
                refresh_ready_state(c, [issue_id])
                self._event(c, issue_id, "dependency_added", dep_type, None, depends_on_id, at=now)
            row = c.execute(
                "SELECT * FROM dependencies WHERE issue_id = ? AND depends_on_id = ? AND type = ?",
                (issue_id, depends_on_id, dep_type),
            ).fetchone()
        return _dep_obj(row)

    def remove_dependency(self, issue_id: str, depends_on_id: str, dep_type: str | None = None) -> int:
        """Remove the dependency (of any type unless ``dep_type``); returns how many went."""
        with self.transaction() as c:
            self._row(c, issue_id)
            sql = "DELETE FROM dependencies WHERE issue_id = ? AND depends_on_id = ?"
            params: tuple = (issue_id, depends_on_id)
            if dep_type:
                sql += " AND type = ?"
                params += (dep_type,)
            n = c.execute(sql, params).rowcount
            if not n:
                raise NotFoundError(f"{issue_id} has no dependency on {depends_on_id}")
            now = now_iso()
            c.execute("UPDATE issues SET updated_at = ? WHERE id = ?", (now, issue_id))
            refresh_ready_state(c, [issue_id])
            self._event(c, issue_id, "dependency_removed", dep_type, depends_on_id, None, at=now)
        return n

    def add_label(self, issue_id: str, label: str) -> dict:
        if not label or not label.strip():
            raise InvalidValueError("label must not be empty")
        with self.transaction() as c:
            self._row(c, issue_id)
            if c.execute("INSERT INTO labels(issue_id, label) VALUES (?, ?) ON CONFLICT DO NOTHING",
                         (issue_id, label)).rowcount:
                now = now_iso()
                c.execute("UPDATE issues SET updated_at = ? WHERE id = ?", (now, issue_id))
                self._open_labels_moved(c, [issue_id])
                self._event(c, issue_id, "label_added", "labels", None, label, at=now)
        return self.get(issue_id)

    def remove_label(self, issue_id: str, label: str) -> dict:
        with self.transaction() as c:
            self._row(c, issue_id)
            if not c.execute("DELETE FROM labels WHERE issue_id = ? AND label = ?", (issue_id, label)).rowcount:
                raise NotFoundError(f"{issue_id} has no label {label!r}")
            now = now_iso()
            c.execute("UPDATE issues SET updated_at = ? WHERE id = ?", (now, issue_id))
            self._open_labels_moved(c, [issue_id])
            self._event(c, issue_id, "label_removed", "labels", label, None, at=now)
        return self.get(issue_id)
