"""The tracker library: ``Tracker``, the one entry point, and where a workspace is.

``Tracker`` is a ``reader.Reader`` (opening the database, every read, the workspace's status)
with the writes, one module each: ``issues`` (create, update, close, delete), ``ready``
(claims), ``dependencies`` (dependencies and labels), ``comments`` and ``coordination`` (gates,
slots, agents); this module keeps what the writes share: creating a workspace, transactions,
the workspace's config, the ``events`` audit trail, and the database's health. Every
mutation runs in a ``BEGIN IMMEDIATE`` transaction and appends to the ``events`` table (who,
what, old, new, when). Issue objects are plain dicts with beads' field names, plus
``labels``, ``dependencies``, ``dependency_count``, ``dependent_count``, ``comment_count`` and
``parent`` (see ``rows``).
"""

from __future__ import annotations

from . import ids as idgen
from .comments import Comments
from .connect import refuse_initialized
from .coordination import Coordination
from .db import ready_state_changes, refresh_ready_state
from .dependencies import Dependencies
from .dialect import is_url, sqlite_file
from .issues import Issues
from .jsontext import dumps
from .model import normalize_ts, now_iso
from .reader import DB_NAME, Reader, default_db_path, find_workspace
from .ready import ReadyWork

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any
    from .rows import Conn

__all__ = ["Tracker", "Reader", "find_workspace", "default_db_path", "DB_NAME"]

DEFAULT_PREFIX = idgen.DEFAULT_PREFIX


class Tracker(Issues, ReadyWork, Dependencies, Comments, Coordination, Reader):
    """A beads-compatible issue tracker stored in a SQLite file or on a PostgreSQL server.

    ``path`` is a file path, ``sqlite:///path`` or a ``postgresql://`` URL; ``self.path``
    is what reopens the same database (hand it to threads), ``self.db.display`` what may
    be printed.
    """

    _WRITES = True

    def __init__(self, path: Path | str, *, actor: str | None = None, create: bool = False):
        super().__init__(path, actor=actor, create=create)
        self._counts_kept = self.db.engine != "sqlite"  # PostgreSQL counts stats' figures from its tables

    def _keep_counts(self) -> None:
        """Before this tracker's first write on SQLite: the triggers of its connection that keep
        the figures of ``stats`` (``tallies.install``; a tracker that only reads never pays for
        making them)."""
        if not self._counts_kept:
            from .tallies import install

            install(self.db)
            self._counts_kept = True

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

    def transaction(self, *, exclusive: bool = True):
        """A write transaction; tracker calls inside it join it (all or nothing).

        ``exclusive=False`` is for single-row compare-and-set writes: on PostgreSQL they then
        run beside other writers, relying on row locks (SQLite has one writer regardless)."""
        self._keep_counts()
        return self.db.transaction(exclusive=exclusive)

    def set_config(self, key: str, value: str) -> None:
        with self.transaction() as c:
            c.execute("INSERT INTO config(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                      (key, value))

    def _event(self, c: Conn, issue_id: str, event_type: str, field: str | None = None,
               old: Any = None, new: Any = None, *, at: str | None = None) -> None:
        c.execute(
            "INSERT INTO events(issue_id, event_type, actor, field, old_value, new_value, created_at)"
            " VALUES (?,?,?,?,?,?,?)",
            (issue_id, event_type, self.actor, field, _event_text(old), _event_text(new), at or now_iso()),
        )

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
        if sqlite:
            from .tallies import stale as stale_tallies

            differing = stale_tallies(self.db)
            checks.append({"name": "tallies", "ok": not differing,
                           "detail": "; ".join(differing) or "the figures of stats agree with the tables"})
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
                else:
                    from .tallies import recount

                    recount(c)
            fixed.append("sort keys rebuilt")
            fixed.append("ready state rebuilt")
            if sqlite:
                fixed.append("stats figures recounted")
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
