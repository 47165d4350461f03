"""The tracker library: issues, labels, dependencies, comments, events, ready work.

``Tracker`` is the one entry point. Every mutation runs in a ``BEGIN IMMEDIATE``
transaction and appends to the ``events`` table (who, what, old, new, when).
Issue objects are plain dicts with beads' field names, plus ``labels``,
``dependencies``, ``dependency_count``, ``dependent_count``, ``comment_count``
and ``parent``.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import ids as idgen
from .connect import open_database, refuse_initialized
from .db import ready_state_changes, refresh_ready_state
from .dialect import JSON_IDS, is_url, sqlite_path
from .errors import ConflictError, CycleError, InvalidValueError, NotFoundError, TrackerError, WorkspaceError
from .model import (
    AGENT_STATES,
    BLOCKING_STATUSES,
    EXPORT_ORDER,
    MODELLED_FIELDS,
    NON_WORK_TYPES,
    TEXT_FIELDS,
    check_priority,
    check_status,
    check_type,
    normalize_ts,
    now_iso,
)

__all__ = ["Tracker", "find_workspace", "default_db_path", "DB_NAME"]

DB_NAME = "mesh.db"
DEFAULT_PREFIX = "bd"

# Every modelled field but the id and the timestamps the tracker itself keeps.
_UPDATABLE = frozenset(MODELLED_FIELDS) - {"id", "created_at", "created_by", "updated_at", "closed_at"}
_SQL_BLOCKING = "(" + ",".join(f"'{s}'" for s in BLOCKING_STATUSES) + ")"
_SQL_NON_WORK = "(" + ",".join(f"'{t}'" for t in NON_WORK_TYPES) + ")"
_JSON_IDS = JSON_IDS
# The columns an issue object is built from (the hot path reads only these).
_ISSUE_COLUMNS = ("id", *TEXT_FIELDS, "priority", "pinned", "ephemeral", "metadata", "timeout", "extra")
_ISSUE_SELECT = ", ".join(f"i.{c}" for c in _ISSUE_COLUMNS)
_DEP_COLUMNS = "issue_id, depends_on_id, type, created_at, created_by, extra"
# A connection inside a transaction (sqlite3's, or postgres' adapter) and a row read by
# position or column name (sqlite3.Row, postgres.Row).
Conn = Any
Row = Any


def find_workspace(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` that holds a ``.beads/`` folder."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".beads").is_dir():
            return folder
    return None


def default_db_path(start: Path | None = None) -> Path | str | None:
    """``MESH_DB`` if set (a path or a PostgreSQL URL), else ``.beads/mesh.db`` of the
    enclosing workspace."""
    env = os.environ.get("MESH_DB")
    if env:
        return env if is_url(env) else sqlite_path(env)
    root = find_workspace(start)
    return root / ".beads" / DB_NAME if root else None


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Tracker:
    """A beads-compatible issue tracker stored in a SQLite file or on a PostgreSQL server.

    ``path`` is a file path, ``sqlite:///path`` or a ``postgresql://`` URL; ``self.path``
    is what reopens the same database (hand it to threads), ``self.db.display`` what may
    be printed.
    """

    def __init__(self, path: Path | str, *, actor: str | None = None, create: bool = False):
        self.db = open_database(path, create=create)
        self.path = self.db.path
        self.actor = actor or os.environ.get("MESH_ACTOR") or os.environ.get("USER") or "mesh"

    # ----------------------------------------------------------------- lifecycle

    @classmethod
    def init(cls, root: Path, *, prefix: str | None = None, actor: str | None = None,
             db_path: Path | str | None = None, force: bool = False) -> "Tracker":
        """Create the workspace database ``<root>/.beads/mesh.db`` (or ``db_path``); refused where one
        holds a workspace already, unless ``force`` opens it. Its prefix is ``prefix``, else the one
        stored, else ``issue-prefix`` of ``<root>/.beads/config.yaml``, else ``bd``."""
        target = (db_path if is_url(db_path) else sqlite_path(db_path)) if db_path else root / ".beads" / DB_NAME
        if not force:
            refuse_initialized(target, prefix)
        tracker = cls(target, actor=actor, create=True)
        if prefix:
            tracker.set_config("issue_prefix", prefix)
        elif tracker.get_config("issue_prefix") is None:
            tracker.set_config("issue_prefix", _prefix_from_yaml(root / ".beads" / "config.yaml") or DEFAULT_PREFIX)
        return tracker

    @classmethod
    def open(cls, path: Path | str | None = None, *, actor: str | None = None) -> "Tracker":
        """Open an existing database (``path``, ``MESH_DB`` or the enclosing workspace)."""
        target = (path if is_url(path) else sqlite_path(path)) if path else default_db_path()
        if target is None:
            raise WorkspaceError("no .beads/ workspace found here or above (run 'mesh tracker init')")
        return cls(target, actor=actor)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self, *, exclusive: bool = True):
        """A write transaction; tracker calls inside it join it (all or nothing).

        ``exclusive=False`` is for single-row compare-and-set writes: on PostgreSQL they then
        run beside other writers, relying on row locks (SQLite has one writer regardless)."""
        return self.db.transaction(exclusive=exclusive)

    def get_config(self, key: str) -> str | None:
        row = self.db.read("SELECT value FROM config WHERE key = ?", (key,))
        return row[0][0] if row else None

    def set_config(self, key: str, value: str) -> None:
        with self.transaction() as c:
            c.execute("INSERT INTO config(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                      (key, value))

    @property
    def prefix(self) -> str:
        return self.get_config("issue_prefix") or DEFAULT_PREFIX

    # ----------------------------------------------------------------- events

    def _event(self, c: Conn, issue_id: str, event_type: str, field: str | None = None,
               old: Any = None, new: Any = None, *, at: str | None = None) -> None:
        c.execute(
            "INSERT INTO events(issue_id, event_type, actor, field, old_value, new_value, created_at)"
            " VALUES (?,?,?,?,?,?,?)",
            (issue_id, event_type, self.actor, field, _event_text(old), _event_text(new), at or now_iso()),
        )

    def events(self, issue_id: str | None = None) -> list[dict]:
        """The audit trail, oldest first (all issues when ``issue_id`` is None)."""
        if issue_id is None:
            rows = self.db.read("SELECT * FROM events ORDER BY id")
        else:
            rows = self.db.read("SELECT * FROM events WHERE issue_id = ? ORDER BY id", (issue_id,))
        return [dict(r) for r in rows]

    # ----------------------------------------------------------------- reads

    def _row(self, c: Conn, issue_id: str) -> Row:
        row = c.execute("SELECT * FROM issues WHERE id = ?", (issue_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no issue {issue_id!r}")
        return row

    def _require(self, issue_id: str) -> None:
        if not self.exists(issue_id):
            raise NotFoundError(f"no issue {issue_id!r}")

    def exists(self, issue_id: str) -> bool:
        return bool(self.db.read("SELECT 1 FROM issues WHERE id = ?", (issue_id,)))

    def get(self, issue_id: str, *, comments: bool = False) -> dict:
        """One issue object; ``comments=True`` embeds its comments."""
        with self.db._lock:
            row = self._row(self.db.conn, issue_id)
        issue = self._hydrate([row])[0]
        if comments:
            issue["comments"] = self.comments(issue_id)
        return issue

    def _hydrate(self, rows: Sequence[tuple] | Sequence[Row], *, counts: bool = True) -> list[dict]:
        """Issue objects for ``rows`` with labels, dependencies, counts and parent.

        ``rows`` are tuples of ``_ISSUE_COLUMNS`` (the fast path) or ``sqlite3.Row``
        objects of the issues table. Related rows are read with one query per kind
        for all ``rows`` (ids are passed as one JSON array, so there is no
        parameter limit to chunk around).
        """
        if not rows:
            return []
        if hasattr(rows[0], "keys"):  # whole rows of the issues table
            rows = [tuple(r[c] for c in _ISSUE_COLUMNS) for r in rows]
        id_list = json.dumps([r[0] for r in rows])
        labels: dict[str, list[str]] = {}
        deps: dict[str, list[dict]] = {}
        dependents: dict[str, int] = {}
        ncomments: dict[str, int] = {}
        read = self.db.read_tuples
        with self.db._lock:
            # Through the (issue_id, ...) indexes, then back into insertion order: an
            # ORDER BY rowid in SQL would make SQLite scan the whole table instead.
            for issue_id, label, _ in sorted(read(
                f"SELECT issue_id, label, rowid FROM labels WHERE issue_id IN {_JSON_IDS}", (id_list,)
            )[1], key=_last):
                labels.setdefault(issue_id, []).append(label)
            for r in sorted(read(
                f"SELECT {_DEP_COLUMNS}, rowid FROM dependencies WHERE issue_id IN {_JSON_IDS}", (id_list,)
            )[1], key=_last):
                deps.setdefault(r[0], []).append(_dep_from_tuple(r))
            if counts:
                dependents = dict(read(
                    f"SELECT depends_on_id, count(*) FROM dependencies WHERE depends_on_id IN {_JSON_IDS}"
                    " GROUP BY depends_on_id", (id_list,)
                )[1])
                ncomments = dict(read(
                    f"SELECT issue_id, count(*) FROM comments WHERE issue_id IN {_JSON_IDS} GROUP BY issue_id",
                    (id_list,),
                )[1])
        out = []
        for r in rows:
            iid = r[0]
            issue_deps = deps.get(iid)
            issue = _build_issue(r, labels.get(iid), issue_deps)
            if counts:
                issue["dependency_count"] = len(issue_deps) if issue_deps else 0
                issue["dependent_count"] = dependents.get(iid, 0)
                issue["comment_count"] = ncomments.get(iid, 0)
                if issue_deps:
                    parent = next((d["depends_on_id"] for d in issue_deps if d["type"] == "parent-child"), None)
                    if parent:
                        issue["parent"] = parent
            out.append(issue)
        return out

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        labels: Sequence[str] = (),
        issue_type: str | None = None,
        parent: str | None = None,
        descendants: bool = False,
        assignee: str | None = None,
        include_closed: bool = False,
        limit: int | None = None,
    ) -> list[dict]:
        """Issues matching every given filter, ordered by (priority, created_at, id).

        Without ``status``, closed and tombstoned issues are left out unless
        ``include_closed``. ``parent`` selects direct children, or every
        descendant with ``descendants=True`` (an unknown ``parent`` is a
        ``NotFoundError``).
        """
        where, params = [], []
        if status:
            statuses = [status] if isinstance(status, str) else list(status)
            for s in statuses:
                check_status(s, importing=True)
            where.append(f"i.status IN ({','.join('?' * len(statuses))})")
            params += statuses
        elif not include_closed:
            where.append("i.status NOT IN ('closed','tombstone')")
        if issue_type:
            where.append("i.issue_type = ?")
            params.append(issue_type)
        if assignee:
            where.append("i.assignee = ?")
            params.append(assignee)
        for label in labels:
            where.append("i.id IN (SELECT issue_id FROM labels WHERE label = ?)")
            params.append(label)
        cte = ""
        if parent:
            self._require(parent)
            cte, cparams = _descendants_cte(parent, descendants)
            where.append("i.id IN (SELECT id FROM scope)")
            params = cparams + params
        sql = f"{cte} SELECT {_ISSUE_SELECT} FROM issues i"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY i.priority, i.created_sort, i.id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self._hydrate(self.db.read_tuples(sql, tuple(params))[1])

    def ready(
        self,
        *,
        labels: Sequence[str] = (),
        issue_type: str | None = None,
        parent: str | None = None,
        limit: int | None = None,
        now: str | None = None,
        hydrate: bool = True,
    ) -> list[dict]:
        """Ready work: open, not pinned or ephemeral, not deferred, not blocked.

        Blocked means a ``blocks`` dependency on an issue whose status is open,
        in_progress, blocked, deferred or hooked, or an ancestor (through
        ``parent-child``) that is blocked; deferral is inherited from ancestors
        the same way. Non-work types (gate, agent, role, molecule, message,
        merge-request, rig) are left out unless ``issue_type`` names one.
        Ordered by (priority, created_at, id). ``parent`` keeps descendants of it
        (an unknown ``parent`` is a ``NotFoundError``, not an empty answer).
        """
        if parent:
            self._require(parent)
        if not hydrate:
            sql, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent, limit=limit,
                                          now=now, columns="i.*")
            return [dict(r) for r in self.db.read(sql, params)]
        sql, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent, limit=limit, now=now)
        return self._hydrate(self.db.read_tuples(sql, params)[1])

    def _ready_sql(self, *, labels, issue_type, parent, limit, now, columns: str = _ISSUE_SELECT) -> tuple[str, tuple]:
        # ``blocked`` and ``defer_eff`` are kept current by every write (see
        # db.refresh_ready_state), so ready work is one indexed pass over the issues.
        labels = list(labels)
        where = [
            "i.status = 'open'",
            "i.blocked = 0",
            "(i.defer_eff IS NULL OR i.defer_eff <= ?)",
            # Not COALESCE(x, 0) = 0: PostgreSQL's planner cannot estimate it, guesses that almost
            # nothing is ready and scans the whole table instead of the ready-order index.
            "(i.ephemeral IS NULL OR i.ephemeral = 0)",
            "(i.pinned IS NULL OR i.pinned = 0)",
        ]
        params: list[Any] = [normalize_ts(now or now_iso())]
        if issue_type:
            where.append("i.issue_type = ?")
            params.append(issue_type)
        else:
            where.append(f"i.issue_type NOT IN {_SQL_NON_WORK}")
        for label in labels[1:]:
            where.append("i.id IN (SELECT issue_id FROM labels WHERE label = ?)")
            params.append(label)
        cte = ""
        if parent:
            cte, sparams = _descendants_cte(parent, True)
            where.append("i.id IN (SELECT id FROM scope)")
            params = sparams + params
        # The plan is chosen here, not left to statistics a fresh workspace lacks. A
        # label drives the search: its issues, each checked in a covering index of the
        # open, unblocked issues (a join, not IN, so SQLite never starts from the other
        # side). A scope does the same through that index. A type alone walks
        # (status, type, ...) in ready order; with no filter the index of open,
        # unblocked issues is already in ready order, so a LIMIT stops after a few rows.
        if labels:
            source = "labels l0 CROSS JOIN issues i INDEXED BY issues_ready_by_id ON i.id = l0.issue_id"
            where.append("l0.label = ?")
            params.append(labels[0])
        elif parent:
            source = "issues i INDEXED BY issues_ready_by_id"
        elif issue_type:
            source = "issues i INDEXED BY issues_by_status"
        else:
            source = "issues i INDEXED BY issues_ready_order"
        sql = (f"{cte} SELECT {columns} FROM {source} WHERE {' AND '.join(where)}"
               " ORDER BY i.priority, i.created_sort, i.id")
        if limit:
            sql += f" LIMIT {int(limit)}"
        return sql, tuple(params)

    def blockers(self, issue_id: str) -> list[dict]:
        """Issues that block ``issue_id`` right now (its own ``blocks`` edges to open work)."""
        _, rows = self.db.read_tuples(
            f"SELECT {_ISSUE_SELECT} FROM dependencies d JOIN issues i ON i.id = d.depends_on_id"
            f" WHERE d.issue_id = ? AND d.type = 'blocks' AND i.status IN {_SQL_BLOCKING} ORDER BY i.id",
            (issue_id,),
        )
        return self._hydrate(rows, counts=False)

    def children(self, parent_id: str) -> list[dict]:
        """Direct children (``parent-child`` dependents) of ``parent_id``."""
        return self.list(parent=parent_id, include_closed=True)

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
            record = {
                "id": new_id,
                "title": title,
                "description": description or None,
                "design": design or None,
                "acceptance_criteria": acceptance_criteria or None,
                "notes": notes or None,
                "status": status,
                "priority": prio,
                "issue_type": issue_type,
                "assignee": assignee,
                "created_at": now,
                "created_by": self.actor,
                "updated_at": now,
                "metadata": dict(metadata) if metadata else None,
            }
            record.update(fields)
            if status == "closed":
                record["closed_at"] = now
            self._insert_row(c, record)
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
        cols = ["id", "priority", *TEXT_FIELDS, "metadata", "timeout", "pinned", "ephemeral", "extra",
                "created_sort", "defer_sort"]
        values = []
        for col in cols:
            if col == "metadata":
                values.append(_dump(record.get("metadata")))
            elif col == "extra":
                values.append(_dump(dict(extra)) if extra else None)
            elif col == "created_sort":
                values.append(normalize_ts(record.get("created_at")) or "")
            elif col == "defer_sort":
                values.append(normalize_ts(record.get("defer_until")))
            elif col in ("pinned", "ephemeral"):
                v = record.get(col)
                values.append(None if v is None else int(bool(v)))
            else:
                values.append(record.get(col))
        c.execute(
            f"INSERT INTO issues({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
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

    def claim(self, issue_id: str, actor: str | None = None) -> dict:
        """Compare-and-set: take an open, unassigned issue (or one already the actor's).

        One ``UPDATE ... WHERE`` on the values just read decides: of two claimers of
        one issue, on any engine and any machine, exactly one gets it, and neither
        waits for writers of other issues.
        """
        who = actor or self.actor
        with self.db.transaction(exclusive=False) as c:
            if not self._claim_in(c, issue_id, who):
                row = self._row(c, issue_id)
                holder = f" by {row['assignee']}" if row["assignee"] else ""
                raise ConflictError(f"{issue_id} cannot be claimed: it is {row['status']}{holder}")
        return self.get(issue_id)

    def claim_next(self, actor: str | None = None, *, labels: Sequence[str] = (), issue_type: str | None = None,
                   parent: str | None = None, skip: Iterable[str] = ()) -> dict | None:
        """Claim the first ready issue (ready order) that no one else is claiming, or None.

        On PostgreSQL the candidates are read ``FOR UPDATE SKIP LOCKED``: N runners asking at
        once each lock a different row instead of queueing behind the first one.
        """
        who = actor or self.actor
        avoid = set(skip)
        sql, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent,
                                      limit=len(avoid) + 8, now=None, columns="i.id")
        if self.db.engine == "postgresql":
            sql += " FOR UPDATE OF i SKIP LOCKED"
        with self.db.transaction(exclusive=False) as c:
            for (issue_id,) in c.execute(sql, params).fetchall():
                if issue_id not in avoid and self._claim_in(c, issue_id, who):
                    break
            else:
                return None
        return self.get(issue_id)

    def _claim_in(self, c: Conn, issue_id: str, who: str) -> bool:
        """The claim's compare-and-set inside a transaction: False when the issue is not
        claimable by ``who`` (or someone else changed it first)."""
        row = c.execute("SELECT status, assignee FROM issues WHERE id = ?", (issue_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no issue {issue_id!r}")
        status, assignee = row[0], row[1]
        if not ((status == "open" and (not assignee or assignee == who)) or (status == "in_progress" and assignee == who)):
            return False
        now = now_iso()
        won = c.execute(
            "UPDATE issues SET status = 'in_progress', assignee = ?, updated_at = ?"
            " WHERE id = ? AND status = ? AND COALESCE(assignee, '') = ? RETURNING id",
            (who, now, issue_id, status, assignee or ""),
        ).fetchone()
        if won is None:
            return False
        _drop_kept_originals(c, issue_id, ("status", "assignee"))
        if status != "in_progress":
            self._event(c, issue_id, "claimed", "status", status, "in_progress", at=now)
        if assignee != who:
            self._event(c, issue_id, "claimed", "assignee", assignee, who, at=now)
        return True

    def close_issue(self, issue_id: str, *, reason: str = "", force: bool = False,
                    expect_status: Sequence[str] | None = None) -> dict:
        """Close an issue; refused while it has open blockers unless ``force``. A closed one is closed
        anew, as bd does: a new ``closed_at``, reason and ``closed`` event (its old status None).

        ``expect_status`` makes it a compare-and-set on the current status: a
        second closer loses with ``ConflictError`` instead of closing twice.
        """
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
            kept = json.loads(row["extra"]) if row["extra"] else {}
            kept.update({"deleted_at": now, "deleted_by": self.actor, "original_type": row["issue_type"]})
            if reason:
                kept["delete_reason"] = reason
            c.execute("DELETE FROM dependencies WHERE depends_on_id = ?", (issue_id,))
            c.execute("UPDATE issues SET status = 'tombstone', updated_at = ?, extra = ? WHERE id = ?",
                      (now, _dump(kept), issue_id))
            self._event(c, issue_id, "deleted", "status", row["status"], "tombstone", at=now)
            refresh_ready_state(c, [issue_id, *dependents])
        return self.get(issue_id)

    # ----------------------------------------------------------------- comments

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

    # ----------------------------------------------------------------- dependencies and labels

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
                self._event(c, issue_id, "label_added", "labels", None, label, at=now)
        return self.get(issue_id)

    def remove_label(self, issue_id: str, label: str) -> dict:
        with self.transaction() as c:
            self._row(c, issue_id)
            if not c.execute("DELETE FROM labels WHERE issue_id = ? AND label = ?", (issue_id, label)).rowcount:
                raise NotFoundError(f"{issue_id} has no label {label!r}")
            now = now_iso()
            c.execute("UPDATE issues SET updated_at = ? WHERE id = ?", (now, issue_id))
            self._event(c, issue_id, "label_removed", "labels", label, None, at=now)
        return self.get(issue_id)

    # ----------------------------------------------------------------- gates, slots, agents

    def gate_create(self, title: str, *, blocks: str, await_type: str = "human",
                    timeout_ns: int | None = None, await_id: str | None = None,
                    idempotency_key: str | None = None) -> dict:
        """A gate issue that ``blocks`` the waiting issue until it is resolved."""
        if await_type not in ("human", "timer", "ci"):
            raise InvalidValueError(f"invalid await type {await_type!r} (human, timer, ci)")
        if await_type == "timer" and not timeout_ns:
            raise InvalidValueError("a timer gate needs --timeout")
        with self.transaction():
            self.get(blocks)
            gate = self.create(title, issue_type="gate", await_type=await_type, await_id=await_id,
                               timeout=timeout_ns, idempotency_key=idempotency_key)
            self.add_dependency(blocks, gate["id"], "blocks")
        return self.get(gate["id"])

    def gate_resolve(self, gate_id: str, *, reason: str = "resolved") -> dict:
        """Resolve a gate: close it, which unblocks what waits on it."""
        with self.transaction():
            gate = self.get(gate_id)
            if gate["issue_type"] != "gate":
                raise InvalidValueError(f"{gate_id} is a {gate['issue_type']}, not a gate")
            return self.close_issue(gate_id, reason=reason, force=True, expect_status=("open", "in_progress", "blocked"))

    def gate_check(self, now: str | None = None) -> list[dict]:
        """Resolve timer gates whose time has come; returns the gates resolved."""
        from .model import add_ns

        moment = normalize_ts(now) if now else normalize_ts(now_iso())
        due = []
        for row in self.db.read(
            "SELECT id, created_at, timeout FROM issues WHERE issue_type = 'gate' AND await_type = 'timer'"
            " AND status NOT IN ('closed','tombstone') AND timeout IS NOT NULL"
        ):
            if add_ns(row["created_at"], row["timeout"]) <= moment:
                due.append(row["id"])
        return [self.gate_resolve(g, reason="timer elapsed") for g in due]

    def _agent(self, c: Conn, agent_id: str) -> Row:
        row = self._row(c, agent_id)
        if row["issue_type"] != "agent":
            raise InvalidValueError(f"{agent_id} is a {row['issue_type']}, not an agent")
        return row

    def slot_set(self, agent_id: str, slot: str, issue_id: str, *, replace: str | None = None) -> dict:
        """Attach ``issue_id`` to an agent's ``hook`` (0..1, refused while held) or ``role`` slot.

        ``replace`` names the hook the caller has seen and means to replace (a compare-and-set:
        refused when the slot holds anything else by then).
        """
        field = _slot_field(slot)
        with self.transaction() as c:
            row = self._agent(c, agent_id)
            self._row(c, issue_id)
            held = row[field]
            if slot == "hook" and held and held != issue_id and held != replace:
                raise ConflictError(f"{agent_id} hook slot is held by {held} (clear it first)")
            self._apply(c, agent_id, _row_obj(row), {field: issue_id}, event_type="slot_set")
        return self.get(agent_id)

    def slot_clear(self, agent_id: str, slot: str) -> dict:
        field = _slot_field(slot)
        with self.transaction() as c:
            row = self._agent(c, agent_id)
            self._apply(c, agent_id, _row_obj(row), {field: None}, event_type="slot_cleared")
        return self.get(agent_id)

    def slot_show(self, agent_id: str) -> dict:
        with self.db._lock:
            row = self._agent(self.db.conn, agent_id)
        return {"agent": agent_id, "hook": row["hook_bead"], "role": row["role_bead"]}

    def agent_state(self, agent_id: str, state: str) -> dict:
        """Set an agent's state and its ``last_activity``."""
        if state not in AGENT_STATES:
            raise InvalidValueError(f"invalid agent state {state!r} (one of: {', '.join(AGENT_STATES)})")
        with self.transaction() as c:
            row = self._agent(c, agent_id)
            self._apply(c, agent_id, _row_obj(row),
                        {"agent_state": state, "last_activity": now_iso()}, event_type="agent_state")
        return self.get(agent_id)

    def ensure_agent(self, name: str, *, labels: Iterable[str] = ("gt:agent",), idempotency_key: str | None = None) -> dict:
        """The agent issue titled ``name``, created if missing."""
        return self._ensure_typed(name, "agent", labels, idempotency_key)

    def ensure_role(self, name: str, *, labels: Iterable[str] = ("gt:role",), idempotency_key: str | None = None) -> dict:
        """The role issue titled ``name``, created if missing."""
        return self._ensure_typed(name, "role", labels, idempotency_key)

    def _ensure_typed(self, name: str, issue_type: str, labels: Iterable[str], key: str | None) -> dict:
        with self.transaction():
            rows = self.db.read(
                "SELECT * FROM issues WHERE issue_type = ? AND title = ? AND status != 'tombstone' ORDER BY seq LIMIT 1",
                (issue_type, name),
            )
            if rows:
                return self._hydrate(rows)[0]
            return self.create(name, issue_type=issue_type, labels=labels,
                               idempotency_key=key or f"{issue_type}:{name}")

    # ----------------------------------------------------------------- workspace status

    def where(self) -> dict:
        """The workspace folder, the database (a URL without its password) and the prefix."""
        if self.db.engine != "sqlite":
            root = find_workspace()
            return {"path": str(root) if root else None, "database_path": self.db.display, "prefix": self.prefix,
                    "engine": self.db.engine}
        root = self.path.parent.parent if self.path.parent.name == ".beads" else self.path.parent
        return {"path": str(root), "database_path": str(self.path), "prefix": self.prefix}

    def status(self) -> dict:
        counts = {r[0]: r[1] for r in self.db.read("SELECT status, count(*) FROM issues GROUP BY status")}
        ready = len(self.ready(hydrate=False))
        return {
            "summary": {
                "total_issues": sum(counts.values()),
                "open_issues": counts.get("open", 0),
                "in_progress_issues": counts.get("in_progress", 0),
                "blocked_issues": counts.get("blocked", 0),
                "deferred_issues": counts.get("deferred", 0),
                "closed_issues": counts.get("closed", 0),
                "ready_issues": ready,
            },
            "by_status": counts,
        }

    def doctor(self, *, fix: bool = False) -> dict:
        """Check the database; with ``fix`` repair what can be repaired safely.

        With ``fix`` the checks reported (and ``ok``) are those run after the
        repairs, so ``ok`` says whether a problem is left; ``fixed`` lists the repairs.
        """
        checks = []
        sqlite = self.db.engine == "sqlite"
        if sqlite:
            integrity = self.db.read("PRAGMA integrity_check")[0][0]
            checks.append({"name": "integrity", "ok": integrity == "ok", "detail": integrity})
            fk = self.db.read("PRAGMA foreign_key_check")
            mode = self.db.read("PRAGMA journal_mode")[0][0]
        else:
            server = self.db.read("SHOW server_version")[0][0]
            checks.append({"name": "server", "ok": True, "detail": f"PostgreSQL {server}"})
            fk = self.db.read(" UNION ALL ".join(
                f"SELECT issue_id FROM {table} WHERE issue_id NOT IN (SELECT id FROM issues)"
                for table in ("labels", "comments", "dependencies")))
            mode = "wal"  # the server's own write-ahead log
        checks.append({"name": "foreign_keys", "ok": not fk, "detail": f"{len(fk)} violation(s)"})
        if sqlite:
            checks.append({"name": "journal_mode", "ok": mode == "wal", "detail": mode})
        dangling = self.db.read(
            "SELECT count(*) FROM dependencies d LEFT JOIN issues i ON i.id = d.depends_on_id WHERE i.id IS NULL"
        )[0][0]
        checks.append({"name": "dangling_dependencies", "ok": True, "detail": f"{dangling} edge(s) to unknown issues (kept)"})
        # An issue without created_at sorts first ('' key); only a key that disagrees
        # with its timestamp is a problem.
        unsorted = sum(
            1 for r in self.db.read("SELECT created_at, created_sort, defer_until, defer_sort FROM issues")
            if (normalize_ts(r[0]) or "") != r[1] or normalize_ts(r[2]) != r[3]
        )
        checks.append({"name": "sort_keys", "ok": unsorted == 0, "detail": f"{unsorted} issue(s) with a stale sort key"})
        with self.db._lock:
            stale = len(ready_state_changes(self.db.conn))
        checks.append({"name": "ready_state", "ok": stale == 0,
                       "detail": f"{stale} issue(s) with a stale blocked/deferred state"})
        fixed = []
        if fix:
            with self.transaction() as c:
                for r in c.execute("SELECT id, created_at, defer_until FROM issues").fetchall():
                    c.execute("UPDATE issues SET created_sort = ?, defer_sort = ? WHERE id = ?",
                              (normalize_ts(r[1]) or "", normalize_ts(r[2]), r[0]))
                if fk:
                    c.execute("DELETE FROM labels WHERE issue_id NOT IN (SELECT id FROM issues)")
                    c.execute("DELETE FROM comments WHERE issue_id NOT IN (SELECT id FROM issues)")
                    c.execute("DELETE FROM dependencies WHERE issue_id NOT IN (SELECT id FROM issues)")
                refresh_ready_state(c)
            fixed.append("sort keys rebuilt")
            fixed.append("ready state rebuilt")
            if fk:
                fixed.append("orphan rows removed")
            if sqlite and mode != "wal":
                self.db.conn.execute("PRAGMA journal_mode = WAL")
                fixed.append("journal mode set to WAL")
            self.db.conn.execute("PRAGMA optimize" if sqlite else "ANALYZE")
            return dict(self.doctor(), fixed=fixed)
        ok = all(ch["ok"] for ch in checks)
        return {"ok": ok, "checks": checks, "fixed": fixed, "database_path": self.db.display}


# --------------------------------------------------------------------- helpers


def _prefix_from_yaml(path: Path) -> str | None:
    """``issue-prefix`` from a beads ``config.yaml`` (a flat key: value file)."""
    if not path.exists():
        return None
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("issue-prefix", "issue_prefix", "prefix"):
            # YAML allows a trailing "# comment" after an unquoted value.
            value = value.split(" #", 1)[0].strip()
            return value.strip("\"'") or None
    return None


def _drop_kept_originals(c: Conn, issue_id: str, changed: Iterable[str]) -> None:
    """An original value kept from an import (an invalid priority, a null) is superseded
    by a new one: drop it so an export writes the new value."""
    kept = c.execute("SELECT extra FROM issues WHERE id = ?", (issue_id,)).fetchone()[0]
    if kept:
        originals = json.loads(kept)
        if not originals.keys().isdisjoint(changed):
            rest = {k: v for k, v in originals.items() if k not in set(changed)}
            c.execute("UPDATE issues SET extra = ? WHERE id = ?", (_dump(rest) if rest else None, issue_id))


def _slot_field(slot: str) -> str:
    if slot == "hook":
        return "hook_bead"
    if slot == "role":
        return "role_bead"
    raise InvalidValueError(f"invalid slot {slot!r} (hook or role)")


def _descendants_cte(parent: str, descendants: bool) -> tuple[str, list]:
    if descendants:
        return (
            "WITH RECURSIVE scope(id) AS (SELECT issue_id FROM dependencies WHERE type = 'parent-child'"
            " AND depends_on_id = ? UNION SELECT d.issue_id FROM dependencies d JOIN scope s"
            " ON d.type = 'parent-child' AND d.depends_on_id = s.id)",
            [parent],
        )
    return (
        "WITH scope(id) AS (SELECT issue_id FROM dependencies WHERE type = 'parent-child' AND depends_on_id = ?)",
        [parent],
    )


def _event_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _row_obj(row: Row) -> dict:
    """Every modelled field of an issues row (None where absent): the current values
    that updates compare against and ``expect`` checks."""
    out: dict[str, Any] = {"id": row["id"]}
    for key in TEXT_FIELDS:
        out[key] = row[key]
    out["priority"] = row["priority"]
    for key in ("pinned", "ephemeral"):
        value = row[key]
        out[key] = None if value is None else bool(value)
    out["metadata"] = _load(row["metadata"])
    out["timeout"] = row["timeout"]
    if row["extra"]:
        for key, value in json.loads(row["extra"]).items():
            out.setdefault(key, value)
    return out


def _last(row: tuple) -> Any:
    return row[-1]


def _build_issue(row: tuple, labels: list[str] | None, deps: list[dict] | None,
                 comments: list[dict] | None = None, *, export: bool = False) -> dict:
    """An issue object from a row of ``_ISSUE_COLUMNS``, in beads' field order, unknown fields last.

    Fields in ``EXPORT_ORDER`` come first (empty ones left out, ``priority``
    always present, ``labels``, ``dependencies`` and ``comments`` in their
    places), then fields an import kept that the model does not know, in their
    original order. This is the hot path of ``ready`` and ``export``: the common
    case is one C-level gather and one comprehension. With ``export`` a kept
    original wins over its column: an import that found an invalid ``priority``
    or a non-string ``title`` stored a usable value in the column and the
    original among the extra fields, and the export gives back the original.
    """
    values = _EXPORT_GETTER(row + (labels or None, deps or None, comments or None))
    out = {key: value for key, value in zip(EXPORT_ORDER, values) if value is not None}
    for key in ("pinned", "ephemeral"):
        if key in out:
            out[key] = bool(out[key])
    if "metadata" in out:
        out["metadata"] = json.loads(out["metadata"])
    kept = row[_EXTRA_AT]
    if kept:
        extra = json.loads(kept)
        if not _EXPORT_KEYS.isdisjoint(extra):
            # A kept value for a modelled field goes in that field's place.
            out = {key: extra[key] if key in extra and (key not in out or export) else out[key]
                   for key in EXPORT_ORDER if key in out or key in extra}
        for key, value in extra.items():
            if key not in out:
                out[key] = value
    return out


_EXPORT_KEYS = frozenset(EXPORT_ORDER)
_EXTRA_AT = _ISSUE_COLUMNS.index("extra")
# Where each EXPORT_ORDER field sits in a row of _ISSUE_COLUMNS extended with (labels, deps, comments).
_EXPORT_GETTER = operator.itemgetter(*(
    _ISSUE_COLUMNS.index(key) if key in _ISSUE_COLUMNS
    else len(_ISSUE_COLUMNS) + ("labels", "dependencies", "comments").index(key)
    for key in EXPORT_ORDER
))


def _dep_from_tuple(row: tuple) -> dict:
    """A dependency object from ``_DEP_COLUMNS`` (anything after them is ignored)."""
    dep: dict[str, Any] = {"issue_id": row[0], "depends_on_id": row[1], "type": row[2]}
    if row[3] is not None:
        dep["created_at"] = row[3]
    if row[4] is not None:
        dep["created_by"] = row[4]
    if row[5]:
        dep.update(json.loads(row[5]))
    return dep


def _dep_obj(row: Row) -> dict:
    dep: dict[str, Any] = {"issue_id": row["issue_id"], "depends_on_id": row["depends_on_id"], "type": row["type"]}
    if row["created_at"] is not None:
        dep["created_at"] = row["created_at"]
    if row["created_by"] is not None:
        dep["created_by"] = row["created_by"]
    if row["extra"]:
        dep.update(json.loads(row["extra"]))
    return dep


_COMMENT_COLUMNS = "id, issue_id, author, text, created_at, ext_id, extra"


def _comment_obj(row: Row | tuple) -> dict:
    """A comment object from a comments row (``sqlite3.Row``, or a tuple of ``_COMMENT_COLUMNS``).

    ``ext_id`` is the id the comment had in an imported file (an integer in older
    beads files, a UUID string in newer ones), kept as JSON so its type survives.
    """
    local_id, issue_id, author, text, created_at, ext_id, extra = (
        tuple(row[c] for c in ("id", "issue_id", "author", "text", "created_at", "ext_id", "extra"))
        if hasattr(row, "keys") else row
    )
    if ext_id is not None:
        # Most ids are plain integers: skip the JSON decoder for them (export of 100k issues).
        local_id = int(ext_id) if ext_id.isdigit() else json.loads(ext_id)
    comment: dict[str, Any] = {"id": local_id, "issue_id": issue_id, "author": author, "text": text,
                               "created_at": created_at}
    if extra:
        comment.update(json.loads(extra))
    return comment
