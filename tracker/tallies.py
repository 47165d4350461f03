"""The figures of ``bd stats`` kept by the writes (SQLite): counters instead of scans.

``bd stats --json`` reports counts by status, the blocked and pinned issues, the epics every
child of which is closed, the ready work and the average lead time. Computed from the tables
they are eight scans of the whole tracker (45 ms at 10,000 issues); kept here they are one read
of a few rows. The ``tallies`` table holds one counter per figure, kept exact inside each
writing transaction by triggers on ``issues`` and ``dependencies``:

- a row's own figures (its status, pinned, its lead time, ready and not deferred) move by the
  row's old and new values, each figure's trigger firing only when a column it reads changes;
- a figure that depends on other rows (an issue is blocked while one of its ``blocks`` edges
  leads to unfinished work; an epic is done when every child is closed) is taken away for every
  issue a change can touch just before the change (``BEFORE``) and added back just after it
  (``AFTER``), each time by the same query over the tables as they are then; so the counter
  moves by exactly what changed, without a case for each kind of change.

The triggers are the writing connection's own (``TEMP``, made by ``install`` before a ``Tracker``'s
first write): SQLite parses every trigger of a database's schema at each connection's first
statement, and the reads agents run all day (``bd ready``, ``bd show``) would pay a millisecond
for text they never run. So a writer without them (an older mesh, a hand-made connection) could
write without counting: the counter ``as_of_event`` follows the newest ``events`` row only while
every write was counted (each tracker write adds events), a read that finds it behind counts
from the tables instead, and the next ``Tracker`` to write counts again first.

Ready work also depends on the clock (a deferral ends): the counter keeps the ready issues with
no deferral; those whose deferral has passed are counted at the read, through a small index.
A bulk import drops the triggers with the indexes and counts everything once at its end
(``recount``); ``doctor`` compares the counters with a count of the tables, ``doctor --fix``
recounts. PostgreSQL computes the same figures from its tables (``statistics`` in ``bd_reads``).

May import: ``model``.
"""

from __future__ import annotations

from .model import BLOCKING_STATUSES, INFRA_TYPES, NON_WORK_TYPES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FIXED", "TRIGGER_PREFIX", "counted", "install", "micros_sql", "read", "ready", "recount", "restore", "schema",
           "stale"]


def _is(expr: str, values: tuple[str, ...], *, negate: bool = False) -> str:
    """``expr IN values`` (``NOT IN`` with ``negate``) as comparisons joined by OR (AND): in a
    trigger, SQLite builds a temporary index for an ``IN`` list at every row it fires for
    (about 0.1 ms a write)."""
    op, join = ("<>", " AND ") if negate else ("=", " OR ")
    return "(" + join.join(f"{expr} {op} '{v}'" for v in values) + ")"


TRIGGER_PREFIX = "tally_"


def micros_sql(c: str) -> str:
    """SQL for the instant of the RFC 3339 text ``c`` in microseconds since the epoch (NULL when
    SQLite cannot read it): whole seconds from its first 19 characters with its offset (what
    follows the fraction's digits), the fraction from its own digits (the first six), so nothing
    is rounded (SQLite's own date functions round the fraction to the millisecond)."""
    zone = f"ltrim(substr({c}, 20), '.0123456789')"
    return (f"(CAST(strftime('%s', substr({c}, 1, 19) || {zone}) AS INTEGER) * 1000000"
            f" + CAST(substr(substr({c}, 21, max(length({c}) - 20 - length({zone}), 0)) || '000000', 1, 6) AS INTEGER))")


def _work(r: str) -> str:
    return _is(f"{r}.issue_type", INFRA_TYPES, negate=True)


def _lead(r: str) -> str:
    """A work issue's lead time in whole milliseconds (the exact difference in microseconds, cut
    toward zero: a sum of 100,000 leads of years each stays an integer), NULL when it has none
    (not closed, or a stamp that cannot be read)."""
    return (f"(CASE WHEN {_work(r)} AND {r}.closed_at IS NOT NULL THEN"
            f" ({micros_sql(f'{r}.closed_at')} - {micros_sql(f'{r}.created_at')}) / 1000 END)")


def _status(r: str) -> tuple[str, str]:
    """(name, value) of the counter of the row ``r``'s status."""
    return f"'status:' || {r}.status", _work(r)


_STATUS_COLUMNS = ("status", "issue_type")


def _own(r: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, value, the columns it reads) of every fixed counter the row ``r`` adds to by itself."""
    lead = _lead(r)
    lead_columns = ("issue_type", "closed_at", "created_at")
    return [
        ("pinned", f"({_work(r)} AND COALESCE({r}.pinned, 0) = 1)", ("issue_type", "pinned")),
        ("lead_n", f"({lead} IS NOT NULL)", lead_columns),
        ("lead_ms", f"COALESCE({lead}, 0)", lead_columns),
        # Ready work (``reader._ready_sql``) that no deferral holds back.
        ("ready_undeferred", f"({r}.status = 'open' AND {r}.blocked = 0 AND {r}.defer_eff IS NULL"
                             f" AND ({r}.ephemeral IS NULL OR {r}.ephemeral = 0) AND ({r}.pinned IS NULL OR {r}.pinned = 0)"
                             f" AND {_is(f'{r}.issue_type', NON_WORK_TYPES, negate=True)})",
         ("status", "blocked", "defer_eff", "ephemeral", "pinned", "issue_type")),
    ]


FIXED = tuple(name for name, _, _ in _own("i")) + ("blocked", "epics_done", "as_of_event")


def _add_status(r: str, sign: str) -> str:
    name, value = _status(r)
    return (f"INSERT INTO tallies(name, n) VALUES ({name}, {sign}({value}))"
            " ON CONFLICT(name) DO UPDATE SET n = n + excluded.n;")


def _changed(columns: tuple[str, ...]) -> str:
    return " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in columns)


# The issues of ``ids`` (a subquery) that are blocked: unfinished work with a ``blocks`` edge to
# unfinished work; and the epics of ``ids`` that are open with children, every one closed. With
# ``without`` (an issue's id), as if that issue were not in the tracker.
def _blocked(ids: str, without: str | None = None) -> str:
    gone = f" AND y.id IS NOT {without}" if without else ""
    gone_z = f" AND z.id IS NOT {without}" if without else ""
    return (f"(SELECT count(*) FROM ({ids}) AS s CROSS JOIN issues y ON y.id = s.id"
            f" WHERE {_is('y.status', BLOCKING_STATUSES)}{gone} AND {_work('y')}"
            " AND EXISTS (SELECT 1 FROM dependencies d JOIN issues z ON z.id = d.depends_on_id"
            f" WHERE d.issue_id = y.id AND d.type = 'blocks' AND {_is('z.status', BLOCKING_STATUSES)}{gone_z}))")


def _epic_done(without: str | None = None) -> str:
    """The conditions on ``e`` of an open epic with children, every one closed."""
    gone_c = f" AND c.id IS NOT {without}" if without else ""
    return ("e.issue_type = 'epic' AND e.status <> 'closed' AND e.status <> 'tombstone'"
            " AND EXISTS (SELECT 1 FROM dependencies d JOIN issues c ON c.id = d.issue_id"
            f" WHERE d.depends_on_id = e.id AND d.type = 'parent-child'{gone_c})"
            " AND NOT EXISTS (SELECT 1 FROM dependencies d JOIN issues c ON c.id = d.issue_id"
            f" WHERE d.depends_on_id = e.id AND d.type = 'parent-child' AND c.status <> 'closed'{gone_c})")


def _done_epics(ids: str, without: str | None = None) -> str:
    gone = f" AND e.id IS NOT {without}" if without else ""
    return f"(SELECT count(*) FROM ({ids}) AS s CROSS JOIN issues e ON e.id = s.id WHERE {_epic_done(without)}{gone})"


def _move_graph(blocked_ids: str, epic_ids: str, sign: str) -> str:
    """Add (``sign`` +) or take away (-) the blocked issues and done epics among the ids."""
    return (f"UPDATE tallies SET n = n {sign} {_blocked(blocked_ids)} WHERE name = 'blocked';"
            f" UPDATE tallies SET n = n {sign} {_done_epics(epic_ids)} WHERE name = 'epics_done';")


def _issue_sets(x: str) -> tuple[str, str]:
    """Whom a change of the issue ``x`` can move: itself and the issues its ``blocks`` edges
    hold back; itself and the epics it is a child of (``UNION ALL``: a ``UNION`` builds a
    temporary table at every write)."""
    return (f"SELECT {x}.id AS id UNION ALL SELECT issue_id FROM dependencies WHERE depends_on_id = {x}.id"
            f" AND type = 'blocks' AND issue_id IS NOT {x}.id",
            f"SELECT {x}.id AS id UNION ALL SELECT depends_on_id FROM dependencies WHERE issue_id = {x}.id"
            f" AND type = 'parent-child' AND depends_on_id IS NOT {x}.id")


def _edge_sets(rows: tuple[str, ...]) -> tuple[str, str]:
    """Whom a change of the edges ``rows`` (OLD, NEW) can move: the issue a ``blocks`` edge holds
    back, the epic of a ``parent-child`` edge (each once)."""
    if len(rows) == 1:
        (r,) = rows
        return (f"SELECT {r}.issue_id AS id WHERE {r}.type = 'blocks'",
                f"SELECT {r}.depends_on_id AS id WHERE {r}.type = 'parent-child'")
    return ("SELECT OLD.issue_id AS id WHERE OLD.type = 'blocks' UNION ALL SELECT NEW.issue_id WHERE"
            " NEW.type = 'blocks' AND NOT (OLD.type = 'blocks' AND OLD.issue_id IS NEW.issue_id)",
            "SELECT OLD.depends_on_id AS id WHERE OLD.type = 'parent-child' UNION ALL SELECT NEW.depends_on_id"
            " WHERE NEW.type = 'parent-child' AND NOT (OLD.type = 'parent-child' AND OLD.depends_on_id IS NEW.depends_on_id)")


def _arrive(x: str, sign: str) -> str:
    """The issue ``x`` arrives (``sign`` +: what its neighbours count now, less what they counted
    without it) or leaves (-), measured while it is in the table: a deleted issue's own edges
    may be gone by its ``AFTER`` trigger (the foreign keys' cascade)."""
    blocked_ids, epic_ids = _issue_sets(x)
    other = "-" if sign == "+" else "+"
    return (f"UPDATE tallies SET n = n {sign} {_blocked(blocked_ids)} {other} {_blocked(blocked_ids, f'{x}.id')}"
            " WHERE name = 'blocked';"
            f" UPDATE tallies SET n = n {sign} {_done_epics(epic_ids)} {other} {_done_epics(epic_ids, f'{x}.id')}"
            " WHERE name = 'epics_done';")


# What can move the blocked count (an issue's unfinished-ness, being work, its id) and the done
# epics (being closed, being an open epic, its id): any other change fires neither.
_BLOCKED_MOVED = (f"{_is('OLD.status', BLOCKING_STATUSES)} IS NOT {_is('NEW.status', BLOCKING_STATUSES)}"
                  f" OR {_work('OLD')} IS NOT {_work('NEW')}"
                  " OR OLD.id IS NOT NEW.id")
_OPEN_EPIC = "({r}.issue_type = 'epic' AND {r}.status <> 'closed' AND {r}.status <> 'tombstone')"
_EPICS_MOVED = ("(OLD.status = 'closed') IS NOT (NEW.status = 'closed')"
                f" OR {_OPEN_EPIC.format(r='OLD')} IS NOT {_OPEN_EPIC.format(r='NEW')} OR OLD.id IS NOT NEW.id")


def _trigger(name: str, when: str, event: str, table: str, body: str, condition: str = "") -> str:
    cond = f" WHEN {condition}" if condition else ""
    return (f"CREATE TEMP TRIGGER IF NOT EXISTS {TRIGGER_PREFIX}{name} {when} {event} ON main.{table}"
            f" FOR EACH ROW{cond} BEGIN {body} END")


def _triggers() -> list[str]:
    old_issue, new_issue = _issue_sets("OLD"), _issue_sets("NEW")
    fixed_in = " ".join(f"UPDATE tallies SET n = n + ({value}) WHERE name = '{name}';" for name, value, _ in _own("NEW"))
    fixed_out = " ".join(f"UPDATE tallies SET n = n - ({value}) WHERE name = '{name}';" for name, value, _ in _own("OLD"))
    out = [
        _trigger("issue_in", "AFTER", "INSERT", "issues", _add_status("NEW", "+") + " " + fixed_in),
        _trigger("issue_out", "AFTER", "DELETE", "issues", _add_status("OLD", "-") + " " + fixed_out),
        _trigger("status_moved", "AFTER", "UPDATE", "issues", _add_status("OLD", "-") + " " + _add_status("NEW", "+"),
                 _changed(_STATUS_COLUMNS)),
        _trigger("graph_issue_in", "AFTER", "INSERT", "issues", _arrive("NEW", "+")),
        _trigger("graph_issue_out", "BEFORE", "DELETE", "issues", _arrive("OLD", "-")),
        # One trigger per figure, fired only by a change of what it reads (a claim moves the
        # status and ready counters, nothing else).
        _trigger("blocked_moved_before", "BEFORE", "UPDATE", "issues",
                 f"UPDATE tallies SET n = n - {_blocked(old_issue[0])} WHERE name = 'blocked';", _BLOCKED_MOVED),
        _trigger("blocked_moved_after", "AFTER", "UPDATE", "issues",
                 f"UPDATE tallies SET n = n + {_blocked(new_issue[0])} WHERE name = 'blocked';", _BLOCKED_MOVED),
        _trigger("epics_moved_before", "BEFORE", "UPDATE", "issues",
                 f"UPDATE tallies SET n = n - {_done_epics(old_issue[1])} WHERE name = 'epics_done';", _EPICS_MOVED),
        _trigger("epics_moved_after", "AFTER", "UPDATE", "issues",
                 f"UPDATE tallies SET n = n + {_done_epics(new_issue[1])} WHERE name = 'epics_done';", _EPICS_MOVED),
    ]
    old_own = {name: value for name, value, _ in _own("OLD")}
    figures: dict[tuple[str, ...], list[str]] = {}
    for name, value, columns in _own("NEW"):
        figures.setdefault(columns, []).append(
            f"UPDATE tallies SET n = n + ({value}) - ({old_own[name]}) WHERE name = '{name}';")
    for columns, statements in figures.items():
        label = "_".join(sorted({name for name, _, cols in _own("NEW") if cols == columns}))
        out.append(_trigger(f"{label}_moved", "AFTER", "UPDATE", "issues", " ".join(statements), _changed(columns)))
    for event, rows in {"INSERT": ("NEW",), "DELETE": ("OLD",), "UPDATE": ("OLD", "NEW")}.items():
        sets = _edge_sets(rows)
        kinds = " OR ".join(_is(f"{r}.type", ("blocks", "parent-child")) for r in rows)
        out.append(_trigger(f"graph_edge_{event.lower()}_before", "BEFORE", event, "dependencies",
                            _move_graph(*sets, "-"), kinds))
        out.append(_trigger(f"graph_edge_{event.lower()}_after", "AFTER", event, "dependencies",
                            _move_graph(*sets, "+"), kinds))
    # Counted up to this event: it follows the newest event only from where it was the newest.
    out.append(_trigger("as_of_event", "AFTER", "INSERT", "events",
                        "UPDATE tallies SET n = NEW.id WHERE name = 'as_of_event'"
                        " AND n = (SELECT COALESCE(max(id), 0) FROM events WHERE id < NEW.id);"))
    return out


_MADE: list[str] = []  # the triggers' statements, built once a process


def install(db: Any) -> None:
    """Give the connection of ``db`` (SQLite) the triggers that keep the counters, and count
    again when a writer without them wrote since the last count (or none was made)."""
    if not _MADE:
        _MADE.extend(_triggers())
    with db._lock:
        for statement in _MADE:
            db.conn.execute(statement)
    if not _behind(db.read):
        return
    import sqlite3

    try:
        with db.transaction() as c:
            if _behind(lambda sql: c.execute(sql).fetchall()):
                recount(c)
    except sqlite3.OperationalError:  # read-only, or busy past the timeout: reads count from the tables meanwhile
        pass


def restore(c: Any) -> None:
    """The triggers made again on the connection of the cursor ``c`` after a bulk write dropped
    them, and every counter counted (in its transaction)."""
    for statement in _MADE or _triggers():
        c.execute(statement)
    recount(c)


_NEWEST = "SELECT 'newest_event', COALESCE(max(id), 0) FROM events"


def _behind(read: Any) -> bool:
    """Whether the counters miss a write (``as_of_event`` is not the newest event)."""
    kept = dict(read(f"SELECT name, n FROM tallies WHERE name = 'as_of_event' UNION ALL {_NEWEST}"))
    return kept.get("as_of_event") != kept["newest_event"]


def counted(read: Any) -> dict[str, int]:
    """Every counter counted from the tables, ``read`` running a query (a database's ``read``, or
    a cursor's): a scan for the row figures (each lead time computed once), a join for the
    blocked issues, the epics one by one."""
    figures = [name for name, _, _ in _own("i")]
    values = {name: value for name, value, _ in _own("i")}
    inner = ", ".join(f"{values[name]} AS {name}" for name in figures if not name.startswith("lead"))
    sums = ", ".join(f"sum({name})" for name in figures if not name.startswith("lead"))
    row = read(f"SELECT {sums}, sum(lead IS NOT NULL), sum(COALESCE(lead, 0)) FROM (SELECT {inner},"
               f" {_lead('i')} AS lead FROM issues i LIMIT -1 OFFSET 0)")[0]  # (not flattened: one lead a row)
    out = dict(zip([n for n in figures if not n.startswith("lead")] + ["lead_n", "lead_ms"], (v or 0 for v in row)))
    status, work = _status("i")
    out.update((name, n) for name, n in read(f"SELECT {status}, sum({work}) FROM issues i GROUP BY i.status"))
    out["blocked"] = read(
        "SELECT COUNT(DISTINCT y.id) FROM issues y JOIN dependencies d ON d.issue_id = y.id"
        f" JOIN issues z ON z.id = d.depends_on_id WHERE d.type = 'blocks' AND {_is('y.status', BLOCKING_STATUSES)}"
        f" AND {_is('z.status', BLOCKING_STATUSES)} AND {_work('y')}")[0][0]
    out["epics_done"] = read(f"SELECT count(*) FROM issues e WHERE {_epic_done()}")[0][0]
    out["as_of_event"] = read(_NEWEST)[0][1]
    return out


def recount(c: Any) -> None:
    """Every counter from the tables, in the transaction of the cursor ``c`` (a new tracker, an
    import's end, ``doctor --fix``). Every fixed counter has its row, zero or not: the triggers
    update it in place."""
    figures = counted(lambda sql: c.execute(sql).fetchall())
    c.execute("DELETE FROM tallies")
    c.executemany("INSERT INTO tallies(name, n) VALUES (?, ?)",
                  [(name, figures.get(name, 0)) for name in FIXED]
                  + [(name, n) for name, n in figures.items() if name not in FIXED and n])


def schema() -> list[str]:
    """SQLite's statements for the counters: the table and the index of the deferred open issues
    (the ready ones among them are counted at the read). The triggers are each writer's
    (``install``)."""
    return ["CREATE TABLE IF NOT EXISTS tallies (name TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
            "CREATE INDEX IF NOT EXISTS issues_ready_deferred ON issues(defer_eff)"
            " WHERE status = 'open' AND blocked = 0 AND defer_eff IS NOT NULL"]


# Ready issues whose deferral has ended by ``?`` (``reader._ready_sql``'s other conditions).
_DUE = ("SELECT count(*) FROM issues i INDEXED BY issues_ready_deferred WHERE i.status = 'open' AND i.blocked = 0"
        " AND i.defer_eff IS NOT NULL AND i.defer_eff <= ? AND (i.ephemeral IS NULL OR i.ephemeral = 0)"
        f" AND (i.pinned IS NULL OR i.pinned = 0) AND {_is('i.issue_type', NON_WORK_TYPES, negate=True)}")


def read(db: Any, now: str) -> dict[str, int] | None:
    """The counters (``ready`` included, as of ``now``), or None where the tracker keeps none
    (PostgreSQL)."""
    if db.engine != "sqlite":
        return None
    counters = dict(db.read(f"SELECT name, n FROM tallies UNION ALL {_NEWEST} UNION ALL SELECT 'due', ({_DUE})",
                            (now,)))  # one statement: one snapshot
    if counters.get("as_of_event") != counters["newest_event"]:
        counters = counted(db.read)  # a writer without the triggers wrote since the last count
        counters["due"] = db.read(_DUE, (now,))[0][0]
    counters["ready"] = counters.get("ready_undeferred", 0) + counters.pop("due")
    return counters


def ready(db: Any, now: str) -> int | None:
    """How many issues are ready work as of ``now`` (``Reader.status``), from the counters; None
    where there are none to trust (PostgreSQL, or a write they missed: the caller counts)."""
    if db.engine != "sqlite":
        return None
    kept, as_of, newest, due = db.read(
        "SELECT (SELECT n FROM tallies WHERE name = 'ready_undeferred'), (SELECT n FROM tallies WHERE name ="
        f" 'as_of_event'), (SELECT COALESCE(max(id), 0) FROM events), ({_DUE})", (now,))[0]
    return None if kept is None or as_of != newest else kept + due


def stale(db: Any) -> list[str]:
    """The figures of ``db`` (SQLite) whose counters differ from a count of the tables, each as
    ``name: kept != counted``. ``as_of_event`` is not one: behind (or ahead, after events were
    deleted), it only makes reads count from the tables until the next write counts again."""
    kept = {name: n for name, n in db.read("SELECT name, n FROM tallies") if n and name != "as_of_event"}
    found = {name: n for name, n in counted(db.read).items() if n and name != "as_of_event"}
    return [f"{name}: {kept.get(name, 0)} != {found.get(name, 0)}"
            for name in sorted(set(kept) | set(found)) if kept.get(name, 0) != found.get(name, 0)]
