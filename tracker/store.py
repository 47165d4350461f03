"""The tracker library: ``Tracker``, the one entry point, and where a workspace is.

``Tracker`` composes its parts, one module each: ``issues`` (read, list, create,
update, close, delete), ``ready`` (ready work and claims), ``dependencies``
(dependencies and labels), ``comments`` and ``coordination`` (gates, slots, agents);
this module keeps what they share: opening and closing the database, transactions,
the workspace's config, the ``events`` audit trail, and the workspace's status and
health. Every mutation runs in a ``BEGIN IMMEDIATE`` transaction and appends to the
``events`` table (who, what, old, new, when). Issue objects are plain dicts with
beads' field names, plus ``labels``, ``dependencies``, ``dependency_count``,
``dependent_count``, ``comment_count`` and ``parent`` (see ``rows``).
"""

from __future__ import annotations

import os

from . import ids as idgen
from .comments import Comments
from .connect import open_database, refuse_initialized
from .coordination import Coordination
from .db import ready_state_changes, refresh_ready_state
from .dependencies import Dependencies
from .dialect import is_url, sqlite_file
from .errors import WorkspaceError
from .issues import Issues
from .jsontext import dumps
from .model import normalize_ts, now_iso
from .ready import ReadyWork

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any
    from .rows import Conn

__all__ = ["Tracker", "find_workspace", "default_db_path", "DB_NAME"]

DB_NAME = "mesh.db"
DEFAULT_PREFIX = idgen.DEFAULT_PREFIX


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


class Tracker(Issues, ReadyWork, Dependencies, Comments, Coordination):
    """A beads-compatible issue tracker stored in a SQLite file or on a PostgreSQL server.

    ``path`` is a file path, ``sqlite:///path`` or a ``postgresql://`` URL; ``self.path``
    is what reopens the same database (hand it to threads), ``self.db.display`` what may
    be printed.
    """

    def __init__(self, path: Path | str, *, actor: str | None = None, create: bool = False):
        self.db = open_database(path, create=create)
        self.actor = actor or os.environ.get("MESH_ACTOR") or os.environ.get("USER") or "mesh"

    # ----------------------------------------------------------------- lifecycle

    @classmethod
    def init(cls, root: Path, *, prefix: str | None = None, actor: str | None = None,
             db_path: Path | str | None = None, force: bool = False) -> "Tracker":
        """Create the workspace database ``<root>/.beads/mesh.db`` (or ``db_path``); refused where one
        holds a workspace already, unless ``force`` opens it. Its prefix is ``prefix``, else the one
        stored, else ``issue-prefix`` of ``<root>/.beads/config.yaml``, else ``bd``."""
        target = (db_path if is_url(db_path) else sqlite_file(db_path)) if db_path else root / ".beads" / DB_NAME
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
        # Counted by the database: every command that opens the tracker through the runner asks
        # for this status, and building each ready issue only to count them cost it 0.1 s and up.
        sql, params = self._ready_sql(labels=(), issue_type=None, parent=None, limit=None, now=None, columns="i.id",
                                      ordered=False)
        ready = self.db.read(f"SELECT count(*) FROM ({sql}) AS ready", params)[0][0]
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
        if not sqlite:
            from .pg_functions import STALE_OPEN_LABELS

            unordered = self.db.read(STALE_OPEN_LABELS)[0][0]
            checks.append({"name": "label_order", "ok": unordered == 0,
                           "detail": f"{unordered} open label row(s) missing, extra or with a stale ready order"})
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
                if not sqlite:
                    from .pg_functions import OPEN_LABELS_REBUILD

                    for statement in OPEN_LABELS_REBUILD:
                        c.execute(statement)
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

def write_workspace_files(beads: Path, where: dict) -> list[str]:
    """bd's workspace files beside a ``.beads/mesh.db`` that ``init`` made there: ``config.yaml``
    (``issue-prefix``, the file to commit) and ``metadata.json`` (which database, which backend),
    each only where it is missing; the paths written. Nothing for a database elsewhere (``--db``):
    a ``.beads/`` without its database would pass for the workspace."""
    import json  # here: the hot bd reads import this module and never need json
    from pathlib import Path

    if where.get("engine") or Path(where["database_path"]).resolve() != (beads / DB_NAME).resolve():
        return []
    written = []
    config = beads / "config.yaml"
    if not config.exists():
        config.write_text("# beads workspace settings, read by mesh tracker and bd clients: commit this file.\n"
                          f"issue-prefix: {json.dumps(where['prefix'])}\n", encoding="utf-8")
        written.append(str(config))
    metadata = beads / "metadata.json"
    if not metadata.exists():
        metadata.write_text(json.dumps({"database": DB_NAME, "backend": "sqlite"}, indent=2) + "\n", encoding="utf-8")
        written.append(str(metadata))
    return written


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


def _event_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return dumps(value, ensure_ascii=False)
