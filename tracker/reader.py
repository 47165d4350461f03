"""Reading a tracker: ``Reader``, the read half of ``store.Tracker``, and where a workspace is.

``Reader`` opens a tracker's database and answers every read: one issue, a filtered list,
ready work and what blocks it, comments, the audit trail, the workspace's status. ``store.Tracker``
is a ``Reader`` with the writes added (``issues``, ``ready``, ``dependencies``, ``comments``,
``coordination``), so every read is the same code whichever class runs it. A process that only
reads (``bd ready``, ``bd show``, ``bd list``: ``bd_hot``) opens a ``Reader`` and imports none of
the write code, which is most of the tracker's bytes.

May import: the tracker's lower modules (``connect``, ``db``, ``dialect``, ``errors``, ``jsontext``,
``model``, ``rows``); never ``store`` or a write module.
"""

from __future__ import annotations

import os

from .connect import open_database
from .dialect import JSON_IDS, is_url, sqlite_file
from .errors import NotFoundError, WorkspaceError
from .jsontext import id_array
from .model import BLOCKING_STATUSES, NON_WORK_TYPES, check_status, normalize_ts, now_iso
from .rows import _COMMENT_COLUMNS, _DEP_COLUMNS, _ISSUE_COLUMNS, _ISSUE_SELECT, _build_issue, _comment_obj, \
    _counted_issue, _dep_from_tuple, _DEP_ROWID, _LABEL_ROWID

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any
    from pathlib import Path
    from .rows import Conn, Row

__all__ = ["Reader", "find_workspace", "default_db_path", "DB_NAME", "DEFAULT_PREFIX"]

DB_NAME = "mesh.db"
DEFAULT_PREFIX = "bd"  # ids.DEFAULT_PREFIX (``ids`` makes new ids, which a reader never does)
_JSON_IDS = JSON_IDS
_SQL_BLOCKING = "(" + ",".join(f"'{s}'" for s in BLOCKING_STATUSES) + ")"
_SQL_NON_WORK = "(" + ",".join(f"'{t}'" for t in NON_WORK_TYPES) + ")"
# An issue's columns and its two counts (dependents, comments): the same index lookups as a
# count over the ids afterwards, without that second statement (``list`` and ``ready``).
_COUNTED_SELECT = (_ISSUE_SELECT + ", (SELECT count(*) FROM dependencies d WHERE d.depends_on_id = i.id),"
                   " (SELECT count(*) FROM comments c WHERE c.issue_id = i.id)")
_N = len(_ISSUE_COLUMNS)
# An issue a beads file marks as a template (bd's is_template): the key among the extra fields.
_IS_TEMPLATE = {"sqlite": "json_type(i.extra, '$.is_template') = 'true'",
                "postgresql": "(i.extra::jsonb -> 'is_template') = 'true'::jsonb"}


def find_workspace(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` that holds a ``.beads/`` folder."""
    from pathlib import Path

    found = _workspace_folder(start)
    return Path(found) if found else None


def _workspace_folder(start: Path | str | None) -> str | None:
    """``find_workspace`` in strings (``os.path``: a hot read never needs ``pathlib``)."""
    folder = os.path.realpath(start or os.getcwd())
    while True:
        if os.path.isdir(os.path.join(folder, ".beads")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def default_db_path(start: Path | None = None) -> Path | str | None:
    """``MESH_DB`` if set (a path or a PostgreSQL URL), else ``.beads/mesh.db`` of the
    enclosing workspace."""
    from pathlib import Path

    target = _default_target(start)
    return target if target is None or is_url(target) else Path(target)


def _default_target(start: Path | str | None = None) -> str | None:
    """``default_db_path`` as a string."""
    env = os.environ.get("MESH_DB")
    if env:
        return env if is_url(env) else sqlite_file(env)
    root = _workspace_folder(start)
    return os.path.join(root, ".beads", DB_NAME) if root else None


class Reader:
    """A tracker opened for reading (``Tracker`` adds the writes).

    ``path`` is a file path, ``sqlite:///path`` or a ``postgresql://`` URL; ``self.path``
    is what reopens the same database (hand it to threads), ``self.db.display`` what may
    be printed.
    """

    # Whether this class writes: a Reader's SQLite connection skips the settings only writes need.
    _WRITES = False

    def __init__(self, path: Path | str, *, actor: str | None = None, create: bool = False):
        self.db = open_database(path, create=create, writes=self._WRITES)
        self.actor = actor or os.environ.get("MESH_ACTOR") or os.environ.get("USER") or "mesh"

    # ----------------------------------------------------------------- lifecycle

    @classmethod
    def open(cls, path: Path | str | None = None, *, actor: str | None = None) -> "Reader":
        """Open an existing database (``path``, ``MESH_DB`` or the enclosing workspace)."""
        target = (path if is_url(path) else sqlite_file(path)) if path else _default_target()
        if target is None:
            raise WorkspaceError("no .beads/ workspace found here or above (run 'mesh tracker init')")
        return cls(target, actor=actor)

    @property
    def path(self) -> Path | str:
        """What reopens this database: its file (a ``Path``), or its PostgreSQL URL."""
        return self.db.path

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_config(self, key: str) -> str | None:
        row = self.db.read("SELECT value FROM config WHERE key = ?", (key,))
        return row[0][0] if row else None

    @property
    def prefix(self) -> str:
        return self.get_config("issue_prefix") or DEFAULT_PREFIX

    # ----------------------------------------------------------------- events

    def events(self, issue_id: str | None = None) -> list[dict]:
        """The audit trail, oldest first (all issues when ``issue_id`` is None)."""
        if issue_id is None:
            rows = self.db.read("SELECT * FROM events ORDER BY id")
        else:
            rows = self.db.read("SELECT * FROM events WHERE issue_id = ? ORDER BY id", (issue_id,))
        return [dict(r) for r in rows]

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
        # Every command that opens the tracker through the runner asks for this status: the ready
        # count from the counters SQLite's writes keep (``tallies``), else counted by the database
        # (building each ready issue only to count them cost it 0.1 s and up).
        from .tallies import ready as kept_ready

        ready = kept_ready(self.db, now_iso())
        if ready is None:
            ready = self._ready_count()
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

    def _ready_count(self) -> int:
        """How many issues are ready work, counted by the database from the tables."""
        sql, params = self._ready_sql(labels=(), issue_type=None, parent=None, limit=None, now=None,
                                      columns="i.id", ordered=False)
        return self.db.read(f"SELECT count(*) FROM ({sql}) AS ready", params)[0][0]

    # ----------------------------------------------------------------- issues


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

    def _hydrate(self, rows: Sequence[tuple] | Sequence[Row], *, counts: bool = True,
                 counted: bool = False) -> list[dict]:
        """Issue objects for ``rows`` with labels, dependencies, counts and parent.

        ``rows`` are tuples of ``_ISSUE_COLUMNS`` (the fast path) or ``sqlite3.Row``
        objects of the issues table; ``counted``: tuples of ``_COUNTED_SELECT``, whose
        query counted each issue's dependents and comments itself (a statement less,
        the hot reads' ``list`` and ``ready``). Related rows are read with one query per
        kind for all ``rows`` (ids are passed as one JSON array, so there is no
        parameter limit to chunk around).
        """
        if not rows:
            return []
        if hasattr(rows[0], "keys"):  # whole rows of the issues table
            rows = [tuple(r[c] for c in _ISSUE_COLUMNS) for r in rows]
        id_list = id_array([r[0] for r in rows])
        labels: dict[str, list[str]] = {}
        deps: dict[str, list[dict]] = {}
        read = self.db.read_tuples
        with self.db._lock:
            # Through the (issue_id, ...) indexes, then back into insertion order: an
            # ORDER BY rowid in SQL would make SQLite scan the whole table instead.
            for issue_id, label, _ in sorted(read(
                f"SELECT issue_id, label, rowid FROM labels WHERE issue_id IN {_JSON_IDS}", (id_list,)
            )[1], key=_LABEL_ROWID):
                labels.setdefault(issue_id, []).append(label)
            for r in sorted(read(
                f"SELECT {_DEP_COLUMNS}, rowid FROM dependencies WHERE issue_id IN {_JSON_IDS}", (id_list,)
            )[1], key=_DEP_ROWID):
                deps.setdefault(r[0], []).append(_dep_from_tuple(r))
            if counts and not counted:  # both in one statement: its first run costs as much as its reads
                tallied = {r[0]: r[1:] for r in read(
                    "SELECT j.value, (SELECT count(*) FROM dependencies d WHERE d.depends_on_id = j.value),"
                    " (SELECT count(*) FROM comments c WHERE c.issue_id = j.value) FROM json_each(?) j", (id_list,)
                )[1]}
        if not counts:
            return [_build_issue(r, labels.get(r[0]), deps.get(r[0])) for r in rows]
        if counted:
            return [_counted_issue(r[:_N], labels.get(r[0]), deps.get(r[0]), r[_N], r[_N + 1]) for r in rows]
        return [_counted_issue(r, labels.get(r[0]), deps.get(r[0]), *tallied[r[0]]) for r in rows]

    def _hydrated_row(self, row: tuple) -> dict:
        """The issue object of a row of ``_ISSUE_COLUMNS`` followed by ``pg_functions.RELATED``'s columns
        (PostgreSQL: an issue and everything ``_hydrate`` reads for it, in one statement)."""
        n = len(_ISSUE_COLUMNS)
        labels, deps, dependents, ncomments = row[n:n + 4]
        return _counted_issue(row[:n], labels or None, [_dep_from_tuple(tuple(d)) for d in deps] if deps else None,
                              dependents, ncomments)

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        labels: Sequence[str] = (),
        issue_type: str | Sequence[str] | None = None,
        parent: str | None = None,
        descendants: bool = False,
        assignee: str | None = None,
        include_closed: bool = False,
        limit: int | None = None,
        exclude_types: Sequence[str] = (),
        templates: bool = True,
    ) -> list[dict]:
        """Issues matching every given filter, ordered by (priority, created_at, id).

        ``issue_type``: one type, or several (any of them).
        Without ``status``, closed and tombstoned issues are left out unless
        ``include_closed``. ``parent`` selects direct children, or every
        descendant with ``descendants=True`` (an unknown ``parent`` is a
        ``NotFoundError``). ``exclude_types`` leaves those types out; without
        ``templates``, so are the issues a beads file marks ``is_template``.
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
            types = [issue_type] if isinstance(issue_type, str) else list(issue_type)
            where.append(f"i.issue_type IN ({','.join('?' * len(types))})")
            params += types
        if assignee:
            where.append("i.assignee = ?")
            params.append(assignee)
        if exclude_types:
            where.append(f"i.issue_type NOT IN ({','.join('?' * len(exclude_types))})")
            params += list(exclude_types)
        if not templates:  # kept among an imported issue's extra fields, as JSON true
            # COALESCE: extra fields without the key give NULL, which must keep the issue, not drop it.
            where.append(f"NOT (i.extra IS NOT NULL AND COALESCE({_IS_TEMPLATE[self.db.engine]}, FALSE))")
        for label in labels:
            where.append("i.id IN (SELECT issue_id FROM labels WHERE label = ?)")
            params.append(label)
        cte = ""
        if parent:
            self._require(parent)
            cte, cparams = _descendants_cte(parent, descendants)
            where.append("i.id IN (SELECT id FROM scope)")
            params = cparams + params
        sql = f"{cte} SELECT {_COUNTED_SELECT} FROM issues i"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY i.priority, i.created_sort, i.id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self._hydrate(self.db.read_tuples(sql, tuple(params))[1], counted=True)

    def children(self, parent_id: str) -> list[dict]:
        """Direct children (``parent-child`` dependents) of ``parent_id``."""
        return self.list(parent=parent_id, include_closed=True)

    # ----------------------------------------------------------------- ready work and blockers

    def ready(
        self,
        *,
        labels: Sequence[str] = (),
        issue_type: str | Sequence[str] | None = None,
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
        merge-request, rig) are left out unless ``issue_type`` (one type or several) names one.
        Ordered by (priority, created_at, id). ``parent`` keeps descendants of it
        (an unknown ``parent`` is a ``NotFoundError``, not an empty answer).
        """
        if parent:
            self._require(parent)
        if not hydrate:
            sql, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent, limit=limit,
                                          now=now, columns="i.*")
            return [dict(r) for r in self.db.read(sql, params)]
        sql, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent, limit=limit, now=now,
                                      columns=_COUNTED_SELECT)
        return self._hydrate(self.db.read_tuples(sql, params)[1], counted=True)

    def _ready_sql(self, *, labels, issue_type, parent, limit, now, columns: str = _ISSUE_SELECT,
                   extra_where: Sequence[str] = (), extra_params: Sequence[Any] = (),
                   ordered: bool = True) -> tuple[str, tuple]:
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
        where += extra_where
        params: list[Any] = [normalize_ts(now) if now else now_iso(), *extra_params]
        if issue_type:
            types = [issue_type] if isinstance(issue_type, str) else list(issue_type)
            where.append(f"i.issue_type IN ({','.join('?' * len(types))})")
            params += types
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
        order = "i.priority, i.created_sort, i.id"
        if labels and self.db.engine == "postgresql":
            # The label's open issues in ready order, from their label rows' copy of it
            # (``open_labels``, tracker.pg_functions): the walk reads the label's open issues only.
            source = "open_labels l0 JOIN issues i ON i.id = l0.issue_id"
            where.append("l0.label = ?")
            params.append(labels[0])
            order = "l0.priority, l0.created_sort, l0.issue_id"
        elif labels:
            source = "labels l0 CROSS JOIN issues i INDEXED BY issues_ready_by_id ON i.id = l0.issue_id"
            where.append("l0.label = ?")
            params.append(labels[0])
        elif parent or not ordered:  # unordered (a count): the covering index, no row read
            source = "issues i INDEXED BY issues_ready_by_id"
        elif issue_type:
            source = "issues i INDEXED BY issues_by_status"
        else:
            source = "issues i INDEXED BY issues_ready_order"
        sql = f"{cte} SELECT {columns} FROM {source} WHERE {' AND '.join(where)}"
        if ordered:
            sql += f" ORDER BY {order}"
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

    def blocker_ids(self, issue_ids: Iterable[str]) -> dict[str, list[str]]:
        """For each of ``issue_ids``, the ids of the issues blocking it right now, sorted (what
        ``blockers`` returns as whole issues): one read for a whole scope (``mesh status``)."""
        ids = list(dict.fromkeys(issue_ids))
        out: dict[str, list[str]] = {issue_id: [] for issue_id in ids}
        for issue_id, blocker in self.db.read(
            f"SELECT d.issue_id, d.depends_on_id FROM dependencies d JOIN issues i ON i.id = d.depends_on_id"
            f" WHERE d.issue_id IN {JSON_IDS} AND d.type = 'blocks' AND i.status IN {_SQL_BLOCKING}",
            (id_array(ids),),
        ):
            out[issue_id].append(blocker)
        for blockers in out.values():
            blockers.sort()
        return out

    # ----------------------------------------------------------------- comments

    def comments(self, issue_id: str) -> list[dict]:
        """Comments of an issue, oldest first."""
        with self.db._lock:
            self._row(self.db.conn, issue_id)
        rows = self.db.read("SELECT * FROM comments WHERE issue_id = ? ORDER BY id", (issue_id,))
        return [_comment_obj(r) for r in rows]

    def comments_of(self, issue_ids: Iterable[str], *, prefixes: Sequence[str] = ()) -> dict[str, list[dict]]:
        """The comments of many issues in one read, oldest first for each (every id given is a
        key); with ``prefixes``, only those whose text starts with one of them. For views of a
        whole scope (``mesh status``), which would otherwise read issue after issue."""
        ids = list(dict.fromkeys(issue_ids))
        sql = f"SELECT {_COMMENT_COLUMNS} FROM comments WHERE issue_id IN {JSON_IDS}"
        params: list[str] = [id_array(ids)]
        if prefixes:
            sql += " AND (" + " OR ".join(["text LIKE ? ESCAPE '\\'"] * len(prefixes)) + ")"
            params += [p.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for p in prefixes]
        out: dict[str, list[dict]] = {issue_id: [] for issue_id in ids}
        # In id order here, not by ORDER BY: SQLite would then walk the whole table by id.
        for row in sorted(self.db.read_tuples(sql, tuple(params))[1]):  # id first: in id order
            out[row[1]].append(_comment_obj(row))
        return out

    def comment_keys(self, prefix: str) -> set[str]:
        """Dedupe keys that start with ``prefix`` (checkpoints already written)."""
        rows = self.db.read(
            "SELECT dedupe_key FROM comments WHERE dedupe_key >= ? AND dedupe_key < ?", (prefix, prefix + "\uffff")
        )
        return {r[0] for r in rows}


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
