"""The tracker on PostgreSQL: connections, transactions and errors (psycopg 3).

``PostgresDatabase`` has the interface of ``db.Database`` (``transaction``,
``read``, ``read_tuples``, ``now``, ``table_exists``, ``close``), so the store
reads the same for both engines; the SQL is rewritten by ``dialect.to_postgres``.

- The first tracker a process opens connects directly, so a wrong host or password
  is reported as the server says it. Later ones (a drain's task threads, lease
  heartbeats: a process that holds connections for long) take theirs from one
  ``psycopg_pool.ConnectionPool`` per URL and give it back on close.
- A write transaction takes a transaction-scoped advisory lock first, so writers of
  one tracker database run one at a time: what SQLite's ``BEGIN IMMEDIATE`` gives the
  store's read-then-write code. ``BEGIN`` and the lock are sent with the transaction's
  first statement, in one round trip (pipeline mode). Hot single-statement paths (claiming the next ready
  task, leases) use ``transaction(exclusive=False)`` and rely on row locks
  (``FOR UPDATE SKIP LOCKED``) and compare-and-set ``UPDATE`` instead.
- Times that must agree across machines (lease expiry) come from the server: ``now()``.
- An unreachable server, refused credentials or a connection dropped mid-way become a
  ``WorkspaceError`` with code ``tracker_unavailable``: one line, no traceback; the
  open transaction is rolled back by the server, so nothing is half-written.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Sequence
from typing import Any

from .db import Transactions
from .dialect import display_target, to_postgres
from .errors import ConflictError, InvalidValueError, TrackerError, WorkspaceError

__all__ = ["PostgresDatabase", "Row", "UNAVAILABLE", "copy_rows", "drop_for_bulk_load"]

UNAVAILABLE = "tracker_unavailable"
# The advisory lock every exclusive write transaction takes ("mesh" in ASCII).
WRITE_LOCK_ID = 0x6D657368
CONNECT_TIMEOUT_S = 10
POOL_WAIT_S = 60
POOL_MAX = 64

_pools: dict[str, Any] = {}
_connected: set[str] = set()
_pools_lock = threading.Lock()


class Row(tuple):
    """A result row read by position or by column name, like ``sqlite3.Row``."""

    __slots__ = ()
    _names: tuple[str, ...] = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._index[key])
            except KeyError:
                raise IndexError(f"no column {key!r}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


@functools.lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    return type("Row", (Row,), {"__slots__": (), "_names": names,
                                "_index": {name: i for i, name in enumerate(names)}})


def _row_factory(cursor: Any):
    names = tuple(column.name for column in cursor.description or ())
    cls = _row_class(names)
    return lambda values: tuple.__new__(cls, values)


def unavailable(target: str, exc: BaseException) -> WorkspaceError:
    """The one-line error for a server that cannot be used (no password in it)."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return WorkspaceError(f"tracker unavailable: PostgreSQL at {display_target(target)}: {detail}",
                          code=UNAVAILABLE)


def _typed(target: str, exc: Exception) -> TrackerError:
    """The tracker's typed error for a psycopg one: a broken or unreachable server is
    ``tracker_unavailable``; text PostgreSQL cannot store (a NUL character) is bad input; a
    constraint is a conflict; anything else a ``database_error`` (one line, never a traceback)."""
    import psycopg

    detail = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.QueryCanceled):
        return unavailable(target, exc)
    if isinstance(exc, psycopg.DataError):
        return InvalidValueError(f"PostgreSQL refused a value: {detail}")
    if isinstance(exc, psycopg.IntegrityError):
        return ConflictError(f"PostgreSQL refused the write: {detail}")
    return TrackerError(f"database error: {detail}", code="database_error")


class _Connection:
    """A psycopg connection that speaks the store's SQL (``?`` placeholders, SQLite DDL)."""

    def __init__(self, pg: Any, target: str):
        self.pg = pg
        self._target = target
        # Statements that open the transaction (BEGIN, the write lock), sent with the next one.
        self.deferred: list[str] = []
        self._one: Any = None  # the cursor of ``fetch_one``, made on first use

    def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        """The first row (a tuple) of one statement whose answer is read at once: the single
        writes' path. It reuses one cursor: psycopg builds a cursor's adapters anew each time,
        about 10 microseconds of a 100-microsecond round trip."""
        if self.deferred:
            return self.execute(sql, params, tuples=True).fetchone()
        import psycopg
        from psycopg.rows import tuple_row

        if self._one is None or self._one.closed:
            self._one = self.pg.cursor(row_factory=tuple_row)
        try:
            return self._one.execute(to_postgres(sql), tuple(params)).fetchone()
        except psycopg.Error as exc:
            raise _typed(self._target, exc) from None

    def execute(self, sql: str, params: Sequence[Any] | dict = (), *, tuples: bool = False) -> Any:
        """Run one statement; ``tuples`` reads plain tuples (the bulk-read fast path). Statements
        deferred before it go in the same round trip (pipeline mode), in order."""
        import psycopg
        from psycopg.rows import tuple_row

        args = tuple(params) if not isinstance(params, dict) else params
        target = self.pg.cursor(row_factory=tuple_row) if tuples else self.pg
        try:
            if not self.deferred:
                return target.execute(to_postgres(sql), args)
            deferred, self.deferred = self.deferred, []
            with self.pg.pipeline():
                for statement in deferred:
                    self.pg.execute(statement)
                return target.execute(to_postgres(sql), args)
        except psycopg.Error as exc:
            raise _typed(self._target, exc) from None

    def flush(self) -> None:
        """Send the deferred statements now (before what does not go through ``execute``: COPY,
        ``executemany``, statements in PostgreSQL's own SQL)."""
        import psycopg

        deferred, self.deferred = self.deferred, []
        try:
            for statement in deferred:
                self.pg.execute(statement)
        except psycopg.Error as exc:
            raise _typed(self._target, exc) from None

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        import psycopg

        self.flush()
        try:
            with self.pg.cursor() as cur:
                cur.executemany(to_postgres(sql), [tuple(r) for r in rows])
        except psycopg.Error as exc:
            raise _typed(self._target, exc) from None


def copy_rows(conn: _Connection, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Rows into ``table`` with one ``COPY`` (bulk loads: an import, a migration), in the open
    transaction of ``conn``; errors typed as ``_Connection.execute`` types them."""
    import psycopg

    conn.flush()
    try:
        with conn.pg.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    except psycopg.Error as exc:
        raise _typed(conn._target, exc) from None


# What a bulk load takes off its tables and puts back once filled, in the order it is taken off: the
# foreign keys first (any that name these tables, from either side), then the unique constraints
# they rest on, then the plain indexes. Primary keys stay (identity columns: their index grows at
# its end). Each row: the table, the object's name, the statement that drops it, the one that
# builds it again.
_BULK_LOAD_OBJECTS = """
SELECT c.conrelid::regclass::text, c.conname,
       format('ALTER TABLE %1$s DROP CONSTRAINT %2$I', c.conrelid::regclass, c.conname),
       format('ALTER TABLE %1$s ADD CONSTRAINT %2$I %3$s', c.conrelid::regclass, c.conname,
              pg_get_constraintdef(c.oid)),
       CASE c.contype WHEN 'f' THEN 0 ELSE 1 END AS step
  FROM pg_constraint c
 WHERE c.contype IN ('f', 'u') AND (c.conrelid = ANY(?::text[]::regclass[]) OR c.confrelid = ANY(?::text[]::regclass[]))
UNION ALL
SELECT i.indrelid::regclass::text, x.relname, format('DROP INDEX %s', i.indexrelid::regclass),
       pg_get_indexdef(i.indexrelid), 2
  FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
 WHERE i.indrelid = ANY(?::text[]::regclass[]) AND NOT i.indisprimary
   AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.contype IN ('p', 'u', 'x'))
 ORDER BY 5, 1, 2"""


def drop_for_bulk_load(conn: _Connection, tables: Sequence[str]) -> list[str]:
    """Take the foreign keys, unique constraints and secondary indexes off ``tables`` (about to
    be filled by ``COPY`` while empty) in the open transaction of ``conn``, and return the
    statements that put them back (``conn.execute`` them once the rows are in, before the commit).
    Read from the catalog: an index or constraint a later schema adds is handled the same.

    A foreign key checked per copied row, and indexes kept up to date row by row, cost most of
    a large load; built once over the loaded rows, an index is a sort, and a foreign key added
    to a filled table is checked by one join. DDL is transactional in PostgreSQL: a load that
    fails leaves every object as it was. Dropping takes the tables' exclusive lock until the
    commit, so readers wait for the load instead of reading the old rows: the caller does this
    only when the tables hold nothing to read."""
    names = list(tables)
    found = conn.execute(_BULK_LOAD_OBJECTS, (names, names, names)).fetchall()
    for row in found:
        conn.execute(row[2])
    return [row[3] for row in reversed(found)]


class PostgresDatabase(Transactions):
    """A tracker database on a PostgreSQL server, with re-entrant write transactions."""

    engine = "postgresql"
    # ``now()`` as SQL, for a statement that reads the clock itself instead of a round trip first.
    now_sql = "EXTRACT(EPOCH FROM clock_timestamp())::float8"

    def __init__(self, url: str):
        self.path = url  # what reopens it (threads, heartbeats); print ``display`` instead
        self.display = display_target(url)
        self._lock = threading.RLock()
        self._depth = 0
        self._exclusive = False
        self._pool = None
        pg = self._connect(url)
        self.conn = _Connection(pg, url)

    # ------------------------------------------------------------------ connections

    def _connect(self, url: str) -> Any:
        try:
            import psycopg
            import psycopg_pool
        except ImportError as exc:  # pragma: no cover - declared dependencies
            raise WorkspaceError(f"the PostgreSQL tracker needs psycopg 3: {exc}", code=UNAVAILABLE) from None
        with _pools_lock:
            first = url not in _connected
            _connected.add(url)
            if not first and url not in _pools:
                # ``check``: a connection the server dropped while it sat in the pool is replaced
                # instead of handed out.
                _pools[url] = psycopg_pool.ConnectionPool(
                    url, min_size=1, max_size=POOL_MAX, open=True, name="mesh-tracker",
                    check=psycopg_pool.ConnectionPool.check_connection,
                    kwargs={"autocommit": True, "row_factory": _row_factory,
                            "connect_timeout": CONNECT_TIMEOUT_S, "application_name": "mesh"})
            pool = None if first else _pools[url]
        try:
            if pool is None:
                return psycopg.connect(url, autocommit=True, row_factory=_row_factory,
                                       connect_timeout=CONNECT_TIMEOUT_S, application_name="mesh")
            self._pool = pool
            return pool.getconn(timeout=POOL_WAIT_S)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            with _pools_lock:
                if first:
                    _connected.discard(url)
            raise unavailable(url, exc) from None

    def close(self) -> None:
        pg = self.conn.pg
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.putconn(pg)
        else:
            with contextlib.suppress(Exception):
                pg.close()

    # ------------------------------------------------------------------ transactions and reads

    # An exclusive transaction takes the advisory lock first (at once, or when a joined inner
    # transaction asks for it); a non-exclusive one relies on its own row locks. Both are sent with
    # the transaction's first statement, in one round trip (``_Connection.deferred``): a claim and
    # its lease, or a write in Python, wait one round trip less for each; a transaction that ran no
    # statement never reaches the server.
    def _begin(self, exclusive: bool) -> None:
        self.conn.deferred.append("BEGIN")
        self._join(exclusive)

    def _join(self, exclusive: bool) -> None:
        if exclusive and not self._exclusive:
            self.conn.deferred.append(f"SELECT pg_advisory_xact_lock({WRITE_LOCK_ID})")
            self._exclusive = True

    def _end(self, commit: bool) -> None:
        import psycopg

        self._exclusive = False
        begun = "BEGIN" not in self.conn.deferred
        self.conn.deferred.clear()
        if not begun:
            return
        if commit:
            self.conn.execute("COMMIT")  # a failure here is typed by _Connection; the server ended it
        else:
            with contextlib.suppress(psycopg.Error, TrackerError):
                self.conn.execute("ROLLBACK")

    def read(self, sql: str, params: tuple | dict = ()) -> list[Row]:
        """All rows of a query (read by position or column name)."""
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def read_tuples(self, sql: str, params: tuple | dict = ()) -> tuple[list[str], list[tuple]]:
        """Column names and rows of a query."""
        with self._lock:
            cur = self.conn.execute(sql, params, tuples=True)
            rows = cur.fetchall()
            return [d.name for d in cur.description or ()], rows

    def now(self) -> float:
        """The server's clock, in epoch seconds: every runner agrees on lease expiry."""
        return float(self.read(f"SELECT {self.now_sql}")[0][0])

    def table_exists(self, name: str) -> bool:
        return self.read("SELECT to_regclass(?) IS NOT NULL", (name,))[0][0]

    def columns(self, table: str) -> set[str]:
        return {r[0] for r in self.read(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = ?", (table,))}
