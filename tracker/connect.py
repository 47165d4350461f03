"""Opening the tracker database: either engine, with its schema brought up to date.

``open_database`` takes a file path (or ``sqlite:///path``) or a PostgreSQL URL
(``postgres.PostgresDatabase``); both give the same interface. It lives apart from
``db`` because it needs both engines and the schema, and ``postgres`` and ``schema``
themselves build on ``db``: kept there, the three imported each other in a circle.
The schema and its versions are in ``schema``, imported only when a database must be made or
upgraded: a database at the current version is opened with one query.
"""

from __future__ import annotations

import os

from .db import SCHEMA_VERSION, Database, sqlite3
from .dialect import is_url, sqlite_file
from .errors import AlreadyInitializedError, WorkspaceError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["open_database", "refuse_initialized"]


def open_database(target: Path | str, *, create: bool = False, writes: bool = True):
    """The tracker database at ``target``: a SQLite file, or a PostgreSQL server for a
    ``postgresql://`` URL. Brings its schema up to date (see ``schema``). ``writes=False``: a
    SQLite file opened for reading (``db.Database``), unless its schema must be made or upgraded."""
    if is_url(target):
        from .postgres import PostgresDatabase

        db = PostgresDatabase(str(target))
        where = db.display
    else:
        db = Database(sqlite_file(target), create=create, writes=writes)
        where = db.display
        if _current(db):
            return db
    try:
        from .schema import ensure_schema  # only for a database to make or bring up to date

        if db.engine == "sqlite":
            db.prepare_writes()
        ensure_schema(db, create=create, where=where)
    except sqlite3.DatabaseError as exc:  # a damaged file surfaces at the first query
        db.close()
        raise WorkspaceError(f"cannot open tracker database {where}: {exc}") from None
    except BaseException:
        db.close()
        raise
    return db


def _current(db: Database) -> bool:
    """Whether a SQLite database is at ``SCHEMA_VERSION`` already: one query. Anything else (no
    tracker yet, an older or newer one, a damaged file) is for ``schema.ensure_schema`` to make,
    upgrade or report."""
    try:
        return db.read_tuples("SELECT MAX(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
    except sqlite3.DatabaseError:
        return False


def refuse_initialized(target: Path | str, prefix: str | None) -> None:
    """AlreadyInitializedError when ``target`` holds a workspace (an issue prefix or an issue):
    ``init`` there would rewrite a live workspace's prefix. No tracker database there yet (or one
    ``init`` could not open either) passes."""
    if not is_url(target) and not os.path.exists(sqlite_file(target)):
        return
    try:
        db = open_database(target)
    except WorkspaceError:
        return
    try:
        found = db.read("SELECT 1 FROM config WHERE key = 'issue_prefix' UNION ALL SELECT 1 FROM issues LIMIT 1")
        where = db.display
    finally:
        db.close()
    if found:
        raise AlreadyInitializedError(where, prefix)
