"""Moving a tracker workspace from one database to another: SQLite and PostgreSQL, either way.

``migrate(source, target)`` copies everything a workspace holds, row for row: the
issues with every column (kept import originals in ``extra``, ``metadata``, the sort
keys and the kept ready state), labels and dependencies in their insertion order,
comments with their ids, text and dedupe keys byte for byte (so signed ``[orch:*]``
checkpoints still verify and are never written twice), events, child counters,
idempotency keys, config and the schema's version history; then every table whose
name starts with ``mesh_`` (the orchestrator's calls, leases and locks), generically:
its columns, keys and indexes are read from the source's catalog and created on the
target, and its rows copied by column name. Id counters carry over, so the next
comment or event gets an id after the last one copied. SQLite's full-text index of
the calls table is not copied: it is derived, and the orchestrator rebuilds it on
first use.

All or nothing: the source is read in one snapshot, and the target is written in one
transaction (its schema included), which is rolled back on any error; a SQLite file
the migration created is removed again. A target that already holds a workspace is
refused unless ``replace=True``, which replaces its whole contents. Failures are
``TrackerError``\\ s with a code: ``same_database``, ``target_not_empty``,
``migration_refused`` (a row, table or index the target will not take), or the ``WorkspaceError`` of
a database that cannot be opened (``tracker_unavailable`` for a server).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .dialect import ROWID_TABLES, display_target, is_url, sqlite_path
from .errors import ConflictError, InvalidValueError, TrackerError, WorkspaceError
from .pg_functions import OPEN_LABELS_REBUILD, SQLITE_ONLY_INDEXES
from .schema import SCHEMA, ensure_schema, statements

__all__ = ["MigrationReport", "migrate"]

# The tracker's own tables, parents before the tables that reference them.
TRACKER_TABLES = ("config", "schema_version", "issues", "labels", "dependencies", "comments", "events",
                  "child_counters", "idempotency")
ORCHESTRATOR_PREFIX = "mesh_"
# Tables whose rows make a target "not empty" (config and versions come with any schema).
_CONTENT_TABLES = ("issues", "labels", "dependencies", "comments", "events", "child_counters", "idempotency")
# The order rows are read in: insertion order where the store reads it back.
_ORDER = {"issues": "seq", "labels": "rowid", "dependencies": "rowid", "comments": "id", "events": "id",
          "config": "key", "schema_version": "version", "child_counters": "parent_id", "idempotency": "key"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The tracker's secondary indexes: dropped for the copy and built once afterwards (the usual
# way to bulk-load) instead of being updated row by row.
_INDEXES = [(re.search(r"INDEX IF NOT EXISTS (\w+)", s).group(1), s) for s in statements(SCHEMA)
            if s.startswith("CREATE INDEX")]


@dataclass
class MigrationReport:
    """What a migration copied: rows per table, in the order the tables were written."""

    source: str
    target: str
    tables: dict[str, int] = field(default_factory=dict)
    replaced: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The report as ``mesh tracker migrate --json`` prints it."""
        return {"from": self.source, "to": self.target, "issues": self.tables.get("issues", 0),
                "comments": self.tables.get("comments", 0), "events": self.tables.get("events", 0),
                "tables": dict(self.tables), "replaced": self.replaced}


def migrate(source: Path | str, target: Path | str, *, replace: bool = False) -> MigrationReport:
    """Copy the workspace in ``source`` into ``target`` (each a SQLite path, ``sqlite:///path``
    or a ``postgresql://`` URL) and return what was copied.

    ``target`` must be a new or empty database (a new SQLite file is created) unless
    ``replace``, which first empties it. Nothing is written to ``target`` unless every row
    is copied; ``source`` is only read (but, as on any open, its schema is brought up to
    date first).
    """
    report = MigrationReport(display_target(source), display_target(target), replaced=False)
    if _same_file(source, target):
        raise InvalidValueError(f"{report.source} is both the source and the target", code="same_database")
    from .connect import open_database

    src = open_database(source)
    try:
        dst, created = _open_target(target)
        try:
            same = _identity(src)
            if same is not None and same == _identity(dst):
                raise InvalidValueError(f"{report.source} and {report.target} are the same database",
                                        code="same_database")
            with _snapshot(src):
                _copy(src, dst, report, replace)
        except BaseException:
            dst.close()
            if created:
                _remove_sqlite(sqlite_path(target))
            raise
        dst.close()
    finally:
        src.close()
    return report


# --------------------------------------------------------------------- opening


def _same_file(source: Path | str, target: Path | str) -> bool:
    if is_url(source) or is_url(target):
        return False
    a, b = sqlite_path(source), sqlite_path(target)
    if a.exists() and b.exists():
        return a.samefile(b)
    return a.resolve() == b.resolve()


def _open_target(target: Path | str) -> tuple[Any, bool]:
    """The target database without its schema (that is written in the copy's transaction),
    and whether this call created its file."""
    if is_url(target):
        from .postgres import PostgresDatabase

        return PostgresDatabase(str(target)), False
    from .db import Database

    path = sqlite_path(target)
    created = not path.exists()
    try:
        return Database(path, create=True), created
    except BaseException:
        if created:
            _remove_sqlite(path)
        raise


def _remove_sqlite(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def _identity(db: Any) -> tuple | None:
    """What tells two PostgreSQL URLs naming one database apart from two databases (None for SQLite,
    whose files are compared by path)."""
    if db.engine != "postgresql":
        return None
    return tuple(db.read("SELECT pg_postmaster_start_time()::text, current_database(), current_schema()")[0])


@contextlib.contextmanager
def _snapshot(db: Any) -> Iterator[None]:
    """One consistent view of the source for every table read (writers may go on meanwhile)."""
    with db._lock:
        if db.engine == "sqlite":
            db.conn.execute("BEGIN")  # deferred: the first read fixes the WAL snapshot
        else:
            db.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                db.conn.execute("ROLLBACK")


# --------------------------------------------------------------------- the copy


def _copy(src: Any, dst: Any, report: MigrationReport, replace: bool) -> None:
    mesh_tables = _orchestrator_tables(src)
    with dst.transaction() as c:
        ensure_schema(dst, create=True, where=dst.display)
        held = _contents(dst)
        if held and not replace:
            summary = ", ".join(f"{n} {table}" for table, n in held.items())
            raise ConflictError(f"{report.target} already holds a tracker ({summary}): migrate into an empty"
                                " database, or replace its contents with --force", code="target_not_empty")
        report.replaced = bool(held)
        for table in reversed(TRACKER_TABLES):
            c.execute(f"DELETE FROM {table}")
        _drop_orchestrator_tables(dst, c)
        for name, _ in _INDEXES:
            c.execute(f"DROP INDEX IF EXISTS {name}")
        for table in TRACKER_TABLES:
            report.tables[table] = _copy_rows(src, dst, c, table, report)
        for name, statement in _INDEXES:
            if dst.engine == "sqlite" or name not in SQLITE_ONLY_INDEXES:
                c.execute(statement)
        if dst.engine == "postgresql":  # the open issues' label rows in ready order, derived
            for statement in OPEN_LABELS_REBUILD:
                c.execute(statement)
        else:  # the figures of bd stats, derived: counted once (the copy moved them row by row)
            from .tallies import recount

            recount(c)
        for table in mesh_tables:
            table_ddl, *index_ddl = _table_ddl(src, table)
            with _refused(report, f"the definition of {table}"):
                c.execute(table_ddl)
            report.tables[table] = _copy_rows(src, dst, c, table, report)
            with _refused(report, f"an index of {table}"):
                for statement in index_ddl:
                    c.execute(statement)
        _carry_counters(src, dst, c, list(TRACKER_TABLES) + mesh_tables)


def _contents(db: Any) -> dict[str, int]:
    """Rows the target holds in content tables (the tracker's and the orchestrator's)."""
    held = {}
    for table in (*_CONTENT_TABLES, *_orchestrator_tables(db)):
        n = db.read(f"SELECT count(*) FROM {table}")[0][0]
        if n:
            held[table] = n
    return held


def _copy_rows(src: Any, dst: Any, c: Any, table: str, report: MigrationReport) -> int:
    source_columns = [col for col in _columns(src, table) if not (col == "rowid" and table in ROWID_TABLES)]
    missing = set(source_columns) - set(_columns(dst, table))
    if missing:
        raise InvalidValueError(f"{report.target} has no column {', '.join(sorted(missing))} in {table}:"
                                " nothing was migrated", code="migration_refused")
    names = ", ".join(source_columns)
    order = _ORDER.get(table) or ("rowid" if src.engine == "sqlite" else _primary_key(src, table))
    sql = f"SELECT {names} FROM {table}" + (f" ORDER BY {order}" if order else "")
    _, rows = src.read_tuples(sql)
    with _refused(report, f"a row of {table}"):
        if dst.engine == "postgresql":
            from .postgres import copy_rows

            copy_rows(c, table, source_columns, rows)
        else:
            c.executemany(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(source_columns))})", rows)
        written = c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    if written != len(rows):
        raise InvalidValueError(f"{table}: {len(rows)} rows read, {written} written: nothing was migrated",
                                code="migration_refused")
    return written


@contextlib.contextmanager
def _refused(report: MigrationReport, what: str) -> Iterator[None]:
    """What the target's database refuses (a value, a key, a statement) as one typed line; a
    server that went away stays ``tracker_unavailable``."""
    try:
        yield
    except (TrackerError, *_driver_errors()) as exc:
        if isinstance(exc, WorkspaceError):
            raise
        detail = " ".join(str(exc).split())
        raise InvalidValueError(f"{report.target} refused {what} ({detail}): nothing was migrated",
                                code="migration_refused") from None


def _driver_errors() -> tuple[type[BaseException], ...]:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a declared dependency
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


def _columns(db: Any, table: str) -> list[str]:
    """A table's columns in their declared order."""
    if db.engine == "sqlite":
        return [r[1] for r in db.read(f"PRAGMA table_info({table})")]
    return [r[0] for r in db.read(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? ORDER BY ordinal_position", (table,))]


def _primary_key(db: Any, table: str) -> str:
    rows = db.read("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = ?::regclass"
                   " AND contype = 'p'", (table,))
    return rows[0][0][len("PRIMARY KEY ("):-1] if rows else ""


# --------------------------------------------------------------------- the orchestrator's tables


def _orchestrator_tables(db: Any) -> list[str]:
    """The ``mesh_`` tables of a database: plain tables only (not SQLite's full-text index
    and its shadow tables, which are derived)."""
    if db.engine == "sqlite":
        rows = db.read("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name")
        virtual = [name for name, sql in rows if sql.upper().startswith("CREATE VIRTUAL TABLE")]
        names = [name for name, _ in rows
                 if name not in virtual and not any(name.startswith(v + "_") for v in virtual)]
    else:
        names = [r[0] for r in db.read(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            " AND table_type = 'BASE TABLE' ORDER BY table_name")]
    tables = [name for name in names if name.startswith(ORCHESTRATOR_PREFIX)]
    for name in tables:
        if not _NAME.match(name):
            raise InvalidValueError(f"cannot migrate table {name!r}: not a plain identifier", code="migration_refused")
    return tables


def _drop_orchestrator_tables(db: Any, c: Any) -> None:
    """Drop the target's ``mesh_`` tables (empty unless replacing): the source's replace them."""
    if db.engine == "sqlite":
        for (name,) in db.read("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"):
            if name.startswith(ORCHESTRATOR_PREFIX):
                c.execute(f"DROP TABLE {name}")  # with its shadow tables
    for name in _orchestrator_tables(db):
        c.execute(f"DROP TABLE {name}")


def _table_ddl(db: Any, table: str) -> list[str]:
    """CREATE TABLE and CREATE INDEX statements of ``table`` in SQLite's DDL, which the target
    runs as it is (SQLite) or rewritten by the dialect (PostgreSQL), as the orchestrator's own
    DDL is."""
    if db.engine == "sqlite":
        return [r[0] for r in db.read(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('table', 'index') AND sql IS NOT NULL"
            " ORDER BY type = 'index', name", (table,))]
    return _ddl_from_postgres(db, table)


_TYPES = (("bigint", "INTEGER"), ("integer", "INTEGER"), ("smallint", "INTEGER"), ("boolean", "INTEGER"),
          ("double precision", "REAL"), ("real", "REAL"), ("numeric", "REAL"), ("bytea", "BLOB"))


def _ddl_from_postgres(db: Any, table: str) -> list[str]:
    columns = db.read(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid),"
        " a.attidentity FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
        " WHERE a.attrelid = ?::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", (table,))
    constraints = db.read("SELECT contype, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = ?::regclass"
                          " ORDER BY contype, conname", (table,))
    odd = [definition for kind, definition in constraints if kind not in ("p", "u", "f")]
    if odd:
        raise InvalidValueError(f"cannot migrate table {table}: constraint {odd[0]} has no portable form",
                                code="migration_refused")
    keys = [definition for kind, definition in constraints if kind == "p"]
    lines = []
    for name, pg_type, not_null, default, identity in columns:
        serial = identity in ("a", "d") or (default or "").startswith("nextval(")
        kind = next((sqlite for pg, sqlite in _TYPES if pg_type.startswith(pg)), "TEXT")
        if serial and keys == [f"PRIMARY KEY ({name})"]:
            lines.append(f"{name} INTEGER PRIMARY KEY AUTOINCREMENT")
            keys = []
            continue
        line = f"{name} {kind}" + (" NOT NULL" if not_null else "")
        if default is not None and not serial:
            line += f" DEFAULT {_without_casts(default)}"
        lines.append(line)
    lines += keys + [definition for kind, definition in constraints if kind in ("u", "f")]
    ddl = [f"CREATE TABLE {table} (\n    " + ",\n    ".join(lines) + "\n)"]
    for name, unique, predicate, key_columns in db.read(
        "SELECT i.relname, ix.indisunique, pg_get_expr(ix.indpred, ix.indrelid, true),"
        " ARRAY(SELECT pg_get_indexdef(ix.indexrelid, k, true) FROM generate_series(1, ix.indnkeyatts) k)"
        " FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid WHERE ix.indrelid = ?::regclass"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = ix.indexrelid) ORDER BY i.relname",
        (table,),
    ):
        where = f" WHERE {_without_casts(predicate)}" if predicate else ""
        ddl.append(f"CREATE {'UNIQUE ' if unique else ''}INDEX {name} ON {table}({', '.join(key_columns)}){where}")
    return ddl


_LITERAL = re.compile(r"('(?:[^']|'')*')")
_CAST = re.compile(r"::(?:\"[^\"]+\"|[a-z_]+(?: (?:precision|varying|with(?:out)? time zone))*)(?:\(\d+\))?(?:\[\])?")


def _without_casts(expression: str) -> str:
    """A PostgreSQL expression without its ``::type`` casts (outside string literals)."""
    parts = _LITERAL.split(expression)
    return "".join(part if k % 2 else _CAST.sub("", part) for k, part in enumerate(parts))


# --------------------------------------------------------------------- id counters


def _carry_counters(src: Any, dst: Any, c: Any, tables: list[str]) -> None:
    """Set the target's id counters to the source's (at least the largest id copied), so that
    ids freed by deleted rows are not handed out again."""
    counters = _counters(src)
    if dst.engine == "sqlite":
        autoincrement = {r[0] for r in c.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND upper(sql) LIKE '%AUTOINCREMENT%'")}
        for name, value in counters.items():
            if name in tables and name in autoincrement:
                c.execute("DELETE FROM sqlite_sequence WHERE name = ?", (name,))
                c.execute(f"INSERT INTO sqlite_sequence(name, seq) SELECT ?, MAX(COALESCE(MAX({value[0]}), 0), ?)"
                          f" FROM {name}", (name, value[1]))
        return
    for name, column in _identity_columns(dst):
        if name not in tables:
            continue
        top = c.execute(f"SELECT MAX({column}) FROM {name}").fetchone()[0] or 0
        value = max(top, counters.get(name, (column, 0))[1])
        if value:
            c.execute("SELECT setval(pg_get_serial_sequence(?, ?), ?)", (name, column, value))


def _counters(db: Any) -> dict[str, tuple[str, int]]:
    """Each table's id column and the last id its counter handed out."""
    if db.engine == "sqlite":
        if not db.table_exists("sqlite_sequence"):
            return {}
        out = {}
        for name, value in db.read("SELECT name, seq FROM sqlite_sequence"):
            key = [r[1] for r in db.read(f"PRAGMA table_info({name})") if r[5] == 1]
            if len(key) == 1:
                out[name] = (key[0], int(value or 0))
        return out
    out = {}
    for name, column in _identity_columns(db):
        value = db.read("SELECT pg_sequence_last_value(pg_get_serial_sequence(?, ?)::regclass)", (name, column))[0][0]
        out[name] = (column, int(value or 0))
    return out


def _identity_columns(db: Any) -> list[tuple[str, str]]:
    """(table, column) of the identity columns a writer sets itself (not the generated rowids)."""
    return [(r[0], r[1]) for r in db.read(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND is_identity = 'YES' AND identity_generation = 'BY DEFAULT' ORDER BY table_name")]
