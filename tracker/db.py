"""The tracker's SQLite engine: its connection and transactions, and the ready-work state.

``connect.open_database`` opens this engine or ``postgres.PostgresDatabase``; both give
the same interface (``Transactions`` is their shared part). SQLite is one file, WAL
journal, a busy timeout, foreign keys on for a connection that writes (one that only reads
skips those settings), and every write transaction opened with ``BEGIN IMMEDIATE`` so that
two writers never both read then write (the claim compare-and-set depends on it). This
module imports neither engine's opener nor the schema: ``postgres`` and ``schema`` build on
it, not the other way round.
"""

from __future__ import annotations

import os
import sys
import time
from _thread import RLock  # threading's RLock itself, without importing threading at every start

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path
    from typing import Any


def statement_cache(maxsize: int) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
    """All that ``_sqlite3`` takes from ``functools``: ``lru_cache(maxsize)``, which it wraps
    around each connection to keep its prepared statements by their SQL (at most ``maxsize``,
    the least recently used dropped first; 0 keeps none)."""

    def cache_of(prepare: Callable[[str], Any]) -> Callable[[str], Any]:
        kept: dict = {}

        def statement(sql: str) -> Any:
            found = kept.pop(sql, None)
            if found is None:
                found = prepare(sql)
            if maxsize > 0:
                if len(kept) >= maxsize:
                    kept.pop(next(iter(kept)), None)
                kept[sql] = found  # the most recent last
            return found

        return statement

    return cache_of


def _load_sqlite() -> Any:
    """The C module itself: the ``sqlite3`` package around it adds only its datetime adapters
    (deprecated since 3.12; the tracker stores text) and imports datetime and collections for
    them, a tenth of a hot read's whole process. Its classes are the package's own.

    Loading it imports ``functools`` for ``lru_cache`` alone, and ``functools`` imports
    ``collections`` and builds a named tuple: a quarter of a bare interpreter's start, more
    than a hot read's query and answer. Unless something loaded ``functools`` already, the
    module loads against ``statement_cache`` in its place, which ``sys.modules`` holds for that
    moment only: a later ``import functools`` gets the real one."""
    if "functools" in sys.modules:
        import _sqlite3
        return _sqlite3
    stand_in = type(sys)("functools")
    stand_in.lru_cache = statement_cache  # type: ignore[attr-defined]
    sys.modules["functools"] = stand_in
    try:
        import _sqlite3
    finally:
        if sys.modules.get("functools") is stand_in:
            del sys.modules["functools"]
    return _sqlite3


try:
    sqlite3 = _load_sqlite()
except ImportError:  # pragma: no cover - an interpreter whose sqlite3 is built otherwise
    import sqlite3  # type: ignore[no-redef]

from .errors import WorkspaceError
from .jsontext import id_array
from .model import BLOCKING_STATUSES

__all__ = ["Database", "Transactions", "refresh_ready_state", "ready_state_changes", "statement_cache",
           "SCHEMA_VERSION"]

BUSY_TIMEOUT_MS = 30_000
CACHE_KIB = 16 * 1024
# The schema version this mesh reads and writes (``schema`` holds the versions themselves). It is
# kept here, below ``schema``, so that opening a database already at it (``connect``) needs one
# query and no ``schema`` module: a hot read never loads the schema's text.
SCHEMA_VERSION = 8



class Transactions:
    """Re-entrant write transactions over one connection, for both engines: ``transaction()``
    begins one, and calls inside it join it (all or nothing). An engine says how to begin
    (``exclusive``: serialised with every other exclusive writer), how to raise a joined
    transaction to exclusive, and how to end one."""

    conn: Any
    _lock: RLock
    _depth = 0

    def _begin(self, exclusive: bool) -> None:
        raise NotImplementedError

    def _join(self, exclusive: bool) -> None:
        """An inner ``transaction(exclusive=...)`` joins the open one (nothing to do by default)."""

    def _end(self, commit: bool) -> None:
        raise NotImplementedError

    def transaction(self, *, exclusive: bool = True) -> _Transaction:
        """A write transaction on ``conn``; nested calls join the outer one."""
        return _Transaction(self, exclusive)


class _Transaction:
    """``Transactions.transaction``'s context manager, as a class: ``contextlib`` is not worth
    its import on a hot read's path. The outer one begins and ends (commits unless an exception
    leaves it); an inner one joins it."""

    __slots__ = ("owner", "exclusive", "outer")

    def __init__(self, owner: Transactions, exclusive: bool):
        self.owner, self.exclusive, self.outer = owner, exclusive, False

    def __enter__(self) -> Any:
        owner = self.owner
        owner._lock.acquire()
        try:
            if owner._depth:
                owner._join(self.exclusive)
            else:
                owner._begin(self.exclusive)
                self.outer = True
        except BaseException:
            owner._lock.release()
            raise
        owner._depth += 1
        return owner.conn

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        owner = self.owner
        try:
            owner._depth -= 1
            if self.outer:
                owner._end(commit=kind is None)
        finally:
            owner._lock.release()


class Database(Transactions):
    """A tracker database file with explicit, re-entrant write transactions."""

    engine = "sqlite"

    def __init__(self, path: Path | str, *, create: bool = False, writes: bool = True):
        """Open ``path`` (made when ``create``). ``writes=False`` opens it for reading only: the
        settings a write needs are made by ``prepare_writes``, which a read never calls (a hot
        read saves their statements, a tenth of a millisecond)."""
        self.file = os.fspath(path)
        if not create and not os.path.exists(self.file):
            raise WorkspaceError(f"no tracker database at {self.file} (run 'mesh tracker init')")
        if create:
            os.makedirs(os.path.dirname(self.file) or ".", exist_ok=True)
        self._writes_prepared = False
        try:
            self.conn = sqlite3.connect(
                self.file,
                timeout=BUSY_TIMEOUT_MS / 1000,  # SQLite's busy timeout: no PRAGMA needed
                isolation_level=None,
                check_same_thread=False,
            )
            self.conn.row_factory = sqlite3.Row
            # SQLite's default page cache (2 MB) holds a query's pages or its hydration's, not both,
            # in a large tracker: every ready call then reads both again from the OS, and its cost
            # grows with the tracker instead of the answer. Pages are allocated only as used.
            self.conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            if writes:
                self.prepare_writes()
        except sqlite3.DatabaseError as exc:
            raise WorkspaceError(f"cannot open tracker database {self.file}: {exc}") from exc
        self._lock = RLock()
        self._depth = 0

    display = property(lambda self: self.file)

    def prepare_writes(self) -> None:
        """What this connection needs before it writes: the WAL journal (readers never wait for a
        writer; a file that cannot have it is refused), ``synchronous = NORMAL`` and foreign keys.
        The journal mode is the file's own and stays; the other two are the connection's."""
        if self._writes_prepared:
            return
        mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise WorkspaceError(f"cannot enable WAL on {self.file} (journal mode {mode})")
        # NORMAL is durable across application crashes in WAL mode; only an OS crash can
        # lose the last transactions, never corrupt the file.
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self._writes_prepared = True

    @property
    def path(self) -> Path:
        """The database file (made on demand: a hot read never needs ``pathlib``)."""
        from pathlib import Path

        return Path(self.file)

    # SQLite has one writer at a time: every transaction is ``exclusive``.
    def _begin(self, exclusive: bool) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def _end(self, commit: bool) -> None:
        self.conn.execute("COMMIT" if commit else "ROLLBACK")

    def read(self, sql: str, params: tuple | dict = ()) -> list[sqlite3.Row]:
        """All rows of a query (as ``sqlite3.Row``)."""
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def read_tuples(self, sql: str, params: tuple | dict = ()) -> tuple[list[str], list[tuple]]:
        """Column names and plain-tuple rows of a query: the fast path for bulk reads."""
        with self._lock:
            cur = self.conn.cursor()
            cur.row_factory = None
            rows = cur.execute(sql, params).fetchall()
            return [d[0] for d in cur.description], rows

    # No SQL for ``now()``: the caller reads it (no round trip here) and passes it.
    now_sql: str | None = None

    def now(self) -> float:
        """The clock leases are measured with: this machine's (a SQLite file has one host)."""
        return time.time()

    def table_exists(self, name: str) -> bool:
        return bool(self.read("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.read(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------- ready-work state
#
# Whether an issue is blocked, and the latest ``defer_until`` among it and its
# ancestors, depend on other issues (blockers' statuses, the parent chain).
# Computing them at query time costs a graph walk per candidate, far too slow
# for ``ready`` on 100,000 issues; they are kept in the ``blocked`` and
# ``defer_eff`` columns instead, and refreshed by every write that can change
# them. Neither depends on the clock: ``ready`` compares ``defer_eff`` with now.

_BLOCKING = "(" + ",".join(f"'{s}'" for s in BLOCKING_STATUSES) + ")"
_IDS = "(SELECT value FROM json_each(?))"


def refresh_ready_state(conn: sqlite3.Connection, ids: Iterable[str] | None = None) -> int:
    """Recompute ``blocked`` and ``defer_eff`` after a change to ``ids`` (all issues when None).

    Runs inside the caller's transaction; returns how many rows changed. See
    ``ready_state_changes`` for what is recomputed.
    """
    changes = ready_state_changes(conn, ids)
    conn.executemany("UPDATE issues SET blocked = ?, defer_eff = ? WHERE id = ?", changes)
    return len(changes)


def ready_state_changes(conn: sqlite3.Connection, ids: Iterable[str] | None = None) -> list[tuple]:
    """Recompute ``blocked`` and ``defer_eff`` after a change to ``ids`` (all issues when None).

    A change to an issue (its status, its ``defer_until``, its edges, its
    creation) can change the state of the issues that ``blocks``-depend on it
    and of all their descendants through ``parent-child``; those are refreshed.
    ``blocked`` is 1 when the issue or an ancestor has a ``blocks`` dependency
    on an issue whose status is in ``BLOCKING_STATUSES`` (missing issues never
    block); ``defer_eff`` is the latest normalised ``defer_until`` of the issue
    and its ancestors. Returns ``(blocked, defer_eff, id)`` for each issue whose
    stored values differ from the computed ones; writes nothing.
    """
    if ids is None:
        parents: dict[str, list[str]] = {}
        for child, parent in conn.execute(
            "SELECT issue_id, depends_on_id FROM dependencies WHERE type = 'parent-child'"
        ):
            parents.setdefault(child, []).append(parent)
        direct = {r[0] for r in conn.execute(
            "SELECT DISTINCT d.issue_id FROM dependencies d JOIN issues b ON b.id = d.depends_on_id"
            f" WHERE d.type = 'blocks' AND b.status IN {_BLOCKING}"
        )}
        defer = dict(conn.execute("SELECT id, defer_sort FROM issues WHERE defer_sort IS NOT NULL").fetchall())
        current = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, blocked, defer_eff FROM issues")}
    else:
        seeds = set(ids)
        if not seeds:
            return []
        seeds.update(_column(conn, "SELECT issue_id FROM dependencies WHERE type = 'blocks'"
                                   f" AND depends_on_id IN {_IDS}", seeds))
        targets = set(seeds)
        frontier = seeds
        while frontier:  # every descendant through parent-child
            frontier = set(_column(conn, "SELECT issue_id FROM dependencies WHERE type = 'parent-child'"
                                         f" AND depends_on_id IN {_IDS}", frontier)) - targets
            targets |= frontier
        parents = {}
        known: set[str] = set(targets)
        frontier = set(targets)
        while frontier:  # every ancestor of those
            rows = conn.execute("SELECT issue_id, depends_on_id FROM dependencies WHERE type = 'parent-child'"
                                f" AND issue_id IN {_IDS}", (id_array(sorted(frontier)),)).fetchall()
            for child, parent in rows:
                parents.setdefault(child, []).append(parent)
            frontier = {parent for _, parent in rows} - known
            known |= frontier
        direct = set(_column(conn, "SELECT DISTINCT d.issue_id FROM dependencies d JOIN issues b"
                                   f" ON b.id = d.depends_on_id WHERE d.type = 'blocks' AND b.status IN {_BLOCKING}"
                                   f" AND d.issue_id IN {_IDS}", known))
        defer = dict(conn.execute(f"SELECT id, defer_sort FROM issues WHERE defer_sort IS NOT NULL AND id IN {_IDS}",
                                  (id_array(sorted(known)),)).fetchall())
        current = {r[0]: (r[1], r[2]) for r in conn.execute(
            f"SELECT id, blocked, defer_eff FROM issues WHERE id IN {_IDS}", (id_array(sorted(targets)),))}
    return [(blocked, defer_eff, issue_id) for issue_id, (blocked, defer_eff) in zip(
        current, ready_states(current, parents, direct, defer)) if (blocked, defer_eff) != current[issue_id]]


def ready_states(ids: Iterable[str], parents: dict[str, list[str]], direct: set[str] | frozenset[str],
                 defer: dict[str, str]) -> Iterator[tuple[int, str | None]]:
    """``(blocked, defer_eff)`` of each of ``ids``, in order, from the graph around them:
    ``parents`` (child -> its parent-child parents), ``direct`` (the issues with a ``blocks``
    dependency on an issue in a blocking status) and ``defer`` (normalised ``defer_until`` of
    those that have one). What ``ready_state_changes`` reads from the tables, an import of a whole
    workspace already holds in memory."""
    for issue_id in ids:
        if issue_id in parents:
            lineage = _lineage(issue_id, parents)
            defers = [defer[a] for a in lineage if a in defer]
            yield int(not direct.isdisjoint(lineage)), max(defers) if defers else None
        else:
            yield int(issue_id in direct), defer.get(issue_id)


def _column(conn: sqlite3.Connection, sql: str, ids: Iterable[str]) -> list[str]:
    return [r[0] for r in conn.execute(sql, (id_array(sorted(ids)),))]


def _lineage(issue_id: str, parents: dict[str, list[str]]) -> set[str]:
    """The issue and all its ancestors (parent-child cycles from dirty imports end the walk)."""
    seen = {issue_id}
    stack = [issue_id]
    while stack:
        for parent in parents.get(stack.pop(), ()):
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen
