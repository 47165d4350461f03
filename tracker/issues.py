"""Issues: creating, updating, closing, reopening and deleting them (``reader`` reads them).

``Issues`` is one part of ``store.Tracker`` (which composes it with the other parts and
gives it ``db``, ``actor``, ``transaction`` and ``_event``). Every mutation runs in one
transaction and appends to the ``events`` table.
"""

from __future__ import annotations

import os

from . import ids as idgen
from .db import refresh_ready_state
from .errors import ConflictError, InvalidValueError, TrackerError
from .jsontext import loads
from .model import AGENT_STATES, MODELLED_FIELDS, check_priority, check_status, check_type, normalize_ts, now_iso
from .rows import INSERT_COLUMNS, _dump, _row_obj, _row_values

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any
    from .rows import Conn

__all__ = ["Issues"]

# Every modelled field but the id and the timestamps the tracker itself keeps.
_UPDATABLE = frozenset(MODELLED_FIELDS) - {"id", "created_at", "created_by", "updated_at", "closed_at"}


class Issues:
    """Each change to an issue."""

    # ----------------------------------------------------------------- create

    def create(
        self,
        title: str,
        *,
        issue_type: str = "task",
        priority: int | str = 2,
        labels: Iterable[str] = (),
        parent: str | None = None,
        description: str = "",
        design: str = "",
        acceptance_criteria: str = "",
        notes: str = "",
        assignee: str | None = None,
        status: str = "open",
        issue_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> dict:
        """Create an issue and return it.

        With ``parent`` the id is ``<parent>.<n>`` and a ``parent-child``
        dependency is added. With ``idempotency_key`` a second create with the
        same key returns the first issue instead of making another (crash-safe
        retries).
        """
        if not title or not title.strip():
            raise InvalidValueError("title must not be empty")
        check_type(issue_type)
        prio = check_priority(priority)
        check_status(status)
        unknown = set(fields) - _UPDATABLE
        if unknown:
            raise InvalidValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
        if self.db.engine == "postgresql":
            from .single_writes import create_in_one  # here: a SQLite process never loads it

            now = now_iso()
            record = _new_record(self.actor, now, title, description, design, acceptance_criteria, notes, status, prio,
                                 issue_type, assignee, metadata, fields)
            issue = create_in_one(self, record, list(dict.fromkeys(labels)), parent, issue_id,
                                  f"{title}|{description}|{self.actor}|{now}|{os.getpid()}", idempotency_key)
            if issue is not None:
                return issue
        with self.transaction() as c:
            if idempotency_key:
                row = c.execute("SELECT issue_id FROM idempotency WHERE key = ?", (idempotency_key,)).fetchone()
                if row:
                    return self.get(row[0])
            now = now_iso()
            if parent:
                self._row(c, parent)
                n = c.execute(
                    "INSERT INTO child_counters(parent_id, last_child) VALUES (?, 1)"
                    " ON CONFLICT(parent_id) DO UPDATE SET last_child = child_counters.last_child + 1 RETURNING last_child",
                    (parent,),
                ).fetchone()[0]
                new_id = idgen.child_id(parent, n)
                while c.execute("SELECT 1 FROM issues WHERE id = ?", (new_id,)).fetchone():
                    n += 1
                    new_id = idgen.child_id(parent, n)
                c.execute("UPDATE child_counters SET last_child = ? WHERE parent_id = ?", (n, parent))
            elif issue_id:
                if c.execute("SELECT 1 FROM issues WHERE id = ?", (issue_id,)).fetchone():
                    raise ConflictError(f"issue {issue_id!r} already exists")
                new_id = issue_id
            else:
                new_id = self._new_hash_id(c, f"{title}|{description}|{self.actor}|{now}|{os.getpid()}")
            record = _new_record(self.actor, now, title, description, design, acceptance_criteria, notes, status, prio,
                                 issue_type, assignee, metadata, fields)
            self._insert_row(c, {"id": new_id, **record})
            for label in dict.fromkeys(labels):
                c.execute("INSERT INTO labels(issue_id, label) VALUES (?, ?) ON CONFLICT DO NOTHING", (new_id, label))
            if parent:
                c.execute(
                    "INSERT INTO dependencies(issue_id, depends_on_id, type, created_at, created_by)"
                    " VALUES (?, ?, 'parent-child', ?, ?)",
                    (new_id, parent, now, self.actor),
                )
            if idempotency_key:
                c.execute("INSERT INTO idempotency(key, issue_id) VALUES (?, ?)", (idempotency_key, new_id))
            # A new id can be the target of edges that dangled until now, and a child inherits.
            refresh_ready_state(c, [new_id])
            self._open_labels_moved(c, [new_id])
            self._event(c, new_id, "created", None, None, title, at=now)
        return self.get(new_id)

    def _new_hash_id(self, c: Conn, seed: str) -> str:
        n = c.execute("SELECT COALESCE(MAX(seq), 0) FROM issues").fetchone()[0]
        length = idgen.adaptive_length(n + 1)
        prefix = self.prefix
        for nonce in range(64):
            candidate = idgen.hash_id(prefix, seed, length + nonce // 16, nonce)
            if not c.execute("SELECT 1 FROM issues WHERE id = ?", (candidate,)).fetchone():
                return candidate
        raise TrackerError("could not find a free issue id")  # pragma: no cover - 64 collisions

    def _insert_row(self, c: Conn, record: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> None:
        values = [record.get("id"), *_row_values(record, extra)]
        c.execute(
            f"INSERT INTO issues(id, {','.join(INSERT_COLUMNS)}) VALUES ({','.join('?' * len(values))})",
            values,
        )

    # ----------------------------------------------------------------- update

    def update(self, issue_id: str, *, expect: Mapping[str, Any] | None = None, **changes: Any) -> dict:
        """Change fields of an issue; one event per changed field.

        ``expect`` makes it a compare-and-set: every given field must hold the
        given value or the update is refused with ``ConflictError``.
        """
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise InvalidValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
        if "status" in changes:
            check_status(changes["status"])
        if "priority" in changes:
            changes["priority"] = check_priority(changes["priority"])
        if "issue_type" in changes:
            check_type(changes["issue_type"])
        if "title" in changes and not str(changes["title"] or "").strip():
            raise InvalidValueError("title must not be empty")
        for key in ("description", "design", "acceptance_criteria", "notes", "assignee", "owner", "close_reason",
                    "defer_until", "due_at", "external_ref", "await_type", "await_id", "hook_bead", "role_bead"):
            # Clearing a field makes it absent, the way beads omits empty fields.
            if changes.get(key, None) == "":
                changes[key] = None
        if "agent_state" in changes and changes["agent_state"] not in AGENT_STATES:
            raise InvalidValueError(f"invalid agent state {changes['agent_state']!r} (one of: {', '.join(AGENT_STATES)})")
        if self.db.engine == "postgresql":
            from .single_writes import change_in_one  # here: a SQLite process never loads it

            issue = change_in_one(self, issue_id, changes, expect=expect)
            if issue is not None:
                return issue
        with self.transaction() as c:
            row = self._row(c, issue_id)
            current = _row_obj(row)
            for key, want in (expect or {}).items():
                if current.get(key) != want:
                    raise ConflictError(f"{issue_id}: {key} is {current.get(key)!r}, expected {want!r}")
            self._apply(c, issue_id, current, changes)
        return self.get(issue_id)

    def _apply(self, c: Conn, issue_id: str, current: Mapping[str, Any], changes: Mapping[str, Any],
               *, event_type: str = "updated") -> None:
        now = now_iso()
        sets, params = [], []
        changed = False
        for key, value in changes.items():
            old = current.get(key)
            if key in ("pinned", "ephemeral") and value is not None:
                value = bool(value)
            if old == value:
                continue
            changed = True
            if key == "metadata":
                sets.append("metadata = ?")
                params.append(_dump(value))
            elif key in ("pinned", "ephemeral"):
                sets.append(f"{key} = ?")
                params.append(None if value is None else int(value))
            else:
                sets.append(f"{key} = ?")
                params.append(value)
            if key == "defer_until":
                sets.append("defer_sort = ?")
                params.append(normalize_ts(value))
            # A plain update of the status is bd's status_changed; close, reopen and claim keep their name.
            kind = "status_changed" if key == "status" and event_type == "updated" else event_type
            self._event(c, issue_id, kind, key, old, value, at=now)
        if "status" in changes and changes["status"] != current.get("status"):
            if changes["status"] == "closed":
                sets.append("closed_at = ?")
                params.append(now)
            elif current.get("status") == "closed":
                sets += ["closed_at = NULL", "close_reason = NULL"]
        if not changed:
            return
        sets.append("updated_at = ?")
        params.append(now)
        c.execute(f"UPDATE issues SET {', '.join(sets)} WHERE id = ?", (*params, issue_id))
        _drop_kept_originals(c, issue_id, changes)
        if "status" in changes or "defer_until" in changes:
            refresh_ready_state(c, [issue_id])
        if "status" in changes or "priority" in changes:
            self._open_labels_moved(c, [issue_id])

    def _open_labels_moved(self, c: Conn, ids: list[str]) -> None:
        """After a write of the status, priority or labels of ``ids`` in a transaction: on
        PostgreSQL their rows of ``open_labels`` (``pg_functions``) rewritten; SQLite has none."""
        if self.db.engine == "postgresql":
            from .pg_functions import sync_open_labels

            sync_open_labels(c, ids)

    def close_issue(self, issue_id: str, *, reason: str = "", force: bool = False,
                    expect_status: Sequence[str] | None = None) -> dict:
        """Close an issue; refused while it has open blockers unless ``force``. A closed one is closed
        anew, as bd does: a new ``closed_at``, reason and ``closed`` event (its old status None).

        ``expect_status`` makes it a compare-and-set on the current status: a
        second closer loses with ``ConflictError`` instead of closing twice.
        """
        if self.db.engine == "postgresql":
            from .single_writes import change_in_one

            issue = change_in_one(self, issue_id, {"status": "closed", "close_reason": reason or None}, close=True,
                                        close_status=expect_status, force=force, event_type="closed")
            if issue is not None:
                return issue
        with self.transaction() as c:
            row = self._row(c, issue_id)
            if expect_status is not None and row["status"] not in expect_status:
                raise ConflictError(f"{issue_id} is {row['status']}, not {'/'.join(expect_status)}")
            current = dict(_row_obj(row), status=None) if row["status"] == "closed" else _row_obj(row)
            if not force:
                open_blockers = [b["id"] for b in self.blockers(issue_id)]
                if open_blockers:
                    raise ConflictError(f"{issue_id} has open blockers: {', '.join(open_blockers)} (use --force)")
            self._apply(c, issue_id, current, {"status": "closed", "close_reason": reason or None}, event_type="closed")
        return self.get(issue_id)

    def reopen(self, issue_id: str) -> dict:
        """Reopen a closed issue."""
        with self.transaction() as c:
            row = self._row(c, issue_id)
            if row["status"] != "closed":
                raise ConflictError(f"{issue_id} is {row['status']}, not closed")
            self._apply(c, issue_id, _row_obj(row), {"status": "open"}, event_type="reopened")
        return self.get(issue_id)

    def delete(self, issue_id: str, *, reason: str = "", force: bool = False) -> dict:
        """bd's delete: turn the issue into a tombstone (status ``tombstone`` with ``deleted_at``,
        ``deleted_by``, ``delete_reason`` and ``original_type``, as beads exports them), removing the
        dependencies on it. Refused while other issues depend on it unless ``force``. Comments,
        events and the row stay: nothing is lost, and an export carries the tombstone.
        """
        with self.transaction() as c:
            row = self._row(c, issue_id)
            if row["status"] == "tombstone":
                raise ConflictError(f"{issue_id} is already deleted")
            dependents = sorted({r[0] for r in c.execute(
                "SELECT issue_id FROM dependencies WHERE depends_on_id = ?", (issue_id,)).fetchall()})
            if dependents and not force:
                raise ConflictError(f"{issue_id} has dependents: {', '.join(dependents)} (use --force)")
            now = now_iso()
            kept = loads(row["extra"]) if row["extra"] else {}
            kept.update({"deleted_at": now, "deleted_by": self.actor, "original_type": row["issue_type"]})
            if reason:
                kept["delete_reason"] = reason
            c.execute("DELETE FROM dependencies WHERE depends_on_id = ?", (issue_id,))
            c.execute("UPDATE issues SET status = 'tombstone', updated_at = ?, extra = ? WHERE id = ?",
                      (now, _dump(kept), issue_id))
            self._event(c, issue_id, "deleted", "status", row["status"], "tombstone", at=now)
            refresh_ready_state(c, [issue_id, *dependents])
            self._open_labels_moved(c, [issue_id])
        return self.get(issue_id)


def _new_record(actor: str, now: str, title: str, description: str, design: str, acceptance_criteria: str,
                notes: str, status: str, priority: int, issue_type: str, assignee: str | None,
                metadata: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict:
    """The fields of a new issue but its id."""
    record = {
        "title": title,
        "description": description or None,
        "design": design or None,
        "acceptance_criteria": acceptance_criteria or None,
        "notes": notes or None,
        "status": status,
        "priority": priority,
        "issue_type": issue_type,
        "assignee": assignee,
        "created_at": now,
        "created_by": actor,
        "updated_at": now,
        "metadata": dict(metadata) if metadata else None,
    }
    record.update(fields)
    if status == "closed":
        record["closed_at"] = now
    return record


def _drop_kept_originals(c: Conn, issue_id: str, changed: Iterable[str]) -> None:
    """An original value kept from an import (an invalid priority, a null) is superseded
    by a new one: drop it so an export writes the new value."""
    kept = c.execute("SELECT extra FROM issues WHERE id = ?", (issue_id,)).fetchone()[0]
    if kept:
        originals = loads(kept)
        if not originals.keys().isdisjoint(changed):
            rest = {k: v for k, v in originals.items() if k not in set(changed)}
            c.execute("UPDATE issues SET extra = ? WHERE id = ?", (_dump(rest) if rest else None, issue_id))
