"""``create``, ``update`` and ``close_issue`` on PostgreSQL in one round trip each.

``Issues`` hands these writes to ``create_in_one`` and ``change_in_one`` when the engine is
PostgreSQL (imported then: a SQLite process, ``bd list`` among them, never loads this module). In
Python each is a dozen statements in a transaction (the issue read, the id chosen, the row, its
labels and edges, the ready state it can change, the events, the issue read back); here each is one
statement of data-modifying CTEs, as the claims are (``ready._claim_in_one``): the write lock taken,
the row locked and checked, the fields that differ written with their events and kept originals
dropped, and the issue answered hydrated (an update that changes nothing reads it in a second round
trip: see ``_change_sql``).

What one statement cannot do is left to a server-side function (``tracker.pg_functions``, schema
version 6), called instead: a create under a parent (the child counter), with an idempotency key,
or whose hash id is taken; a change that moves ready state around (a new ``defer_until``, or a new
status of an issue others depend on: ``mesh_refresh_ready`` must see the row written). Such a
statement writes nothing and says so, and the function does the whole write: at most two round
trips, all or nothing.

Values are validated in Python first, as on SQLite; what the server finds (no such issue, an id
taken, a failed compare-and-set, open blockers) comes back as an outcome that becomes the same
typed error as on SQLite, so an enclosing transaction stays usable. A value of a type these
statements do not compare as Python does (metadata, an int for a text field) returns None: the
caller then runs the Python transaction.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence

from . import ids as idgen
from .errors import ConflictError, NotFoundError, TrackerError
from .jsontext import dumps
from .model import BLOCKING_STATUSES, TEXT_FIELDS, normalize_ts, now_iso
from .pg_functions import LOCKED, issue_json, open_labels_left, open_labels_written, without_keys
from .rows import _ISSUE_COLUMNS, INSERT_COLUMNS, _counted_issue, _dep_from_tuple, _row_values

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from typing import Any

    # A ``store.Tracker``: not imported, not even for its name (``issues`` imports this module).
    Tracker = Any

__all__ = ["create_in_one", "change_in_one"]

# Value types a statement receives as the driver would write them (no bool: an int to Python, a
# boolean to the driver).
_PLAIN = frozenset((str, int, type(None)))
# Where each column of an issue read back (``rows._ISSUE_COLUMNS``) is among a create's values
# (``rows.INSERT_COLUMNS``) followed by its id.
_ISSUE_FROM_INSERT = operator.itemgetter(*(len(INSERT_COLUMNS) if c == "id" else INSERT_COLUMNS.index(c)
                                           for c in _ISSUE_COLUMNS))
# How each field is compared and written: text columns as they are, integers in their decimal
# text, pinned and ephemeral as 'true'/'false' (Python compares them as bools): the text of their
# events. Not metadata: its events write Python's JSON of it.
_KINDS = {**dict.fromkeys(TEXT_FIELDS, "text"), "priority": "int", "timeout": "int", "pinned": "bool",
          "ephemeral": "bool"}
_BLOCKING = ", ".join(f"'{s}'" for s in BLOCKING_STATUSES)


def create_in_one(tracker: Tracker, record: dict, labels: list[str], parent: str | None, issue_id: str | None,
                  seed: str, idempotency_key: str | None) -> dict | None:
    """``create`` on PostgreSQL; None when a value needs the Python transaction."""
    values = _row_values(record, None)
    if not _PLAIN.issuperset(map(type, values)):
        return None
    # Only the values given: a column missing from the JSON is NULL (smaller to encode and parse).
    row_json = dumps({c: v for c, v in zip(INSERT_COLUMNS, values) if v is not None}, ensure_ascii=False)
    now = record["created_at"]
    hashed = None if parent or issue_id else idgen.base36_hash(seed, 0)
    if not parent and not idempotency_key:
        wanted, new_id, waiting = _one_row(tracker, _create_sql(), (
            issue_id, hashed, row_json, labels, tracker.actor, record["title"], now))
        if new_id is None and waiting is None and issue_id:
            raise ConflictError(f"issue {issue_id!r} already exists")
        if new_id is not None:
            return _written_issue(tracker, new_id, record, values, labels, None, 0)
        # A hash id taken, or edges that waited for this id: the function does it all.
    answer = _one_row(
        tracker, "SELECT mesh_create(?::jsonb, ?::text[], ?, ?, ?, ?, ?::bigint[], ?, ?, ?, ?)",
        (row_json, labels, parent, issue_id, seed, hashed, list(_length_limits()), idgen.DEFAULT_PREFIX,
         idempotency_key, tracker.actor, now))[0]
    outcome = answer["outcome"]
    if outcome == "exists":
        raise ConflictError(f"issue {issue_id!r} already exists")
    if outcome == "no_free_id":  # pragma: no cover - 64 collisions
        raise TrackerError("could not find a free issue id")
    if outcome != "ok":  # the issue of an idempotency key, or no parent
        return _answered_issue(answer.get("issue"), answer["id"])
    return _written_issue(tracker, answer["id"], record, values, labels, parent, answer["dependents"])


def _written_issue(tracker: Tracker, new_id: str, record: dict, values: list, labels: list[str], parent: str | None,
                   dependents: int) -> dict:
    """The issue just created, from what was written: the row sent, its labels and its edge (no
    comment can exist yet); only the edges of other issues that named its id before it existed
    are counted by the server."""
    deps = [_dep_from_tuple((new_id, parent, "parent-child", record["created_at"], tracker.actor, None))] \
        if parent else None
    return _counted_issue(_ISSUE_FROM_INSERT([*values, new_id]), labels or None, deps, dependents, 0)


def change_in_one(tracker: Tracker, issue_id: str, changes: Mapping[str, Any], *,
                  expect: Mapping[str, Any] | None = None, close: bool = False, close_status: Sequence[str] | None = None,
                  force: bool = False, event_type: str = "updated") -> dict | None:
    """``update`` (``expect``: its compare-and-set) and ``close_issue`` (``close``, with its status
    compare-and-set ``close_status`` and, unless ``force``, its blocker check) on PostgreSQL;
    None when a value needs the Python transaction."""
    keys, kinds, texts = _as_texts(changes, convert=True)
    wanted = _as_texts(expect or {}, convert=False)
    if keys is None or wanted[0] is None:
        return None
    now = now_iso()
    sql = _change_sql(tuple(zip(keys, kinds)), tuple(zip(wanted[0], wanted[1])), close,
                      close_status is not None, close and not force, event_type)
    params: list[Any] = [*texts, *wanted[2]]
    if close_status is not None:
        params.append(list(close_status))
    params += [tracker.actor, now, issue_id, now]
    if "status" in changes:
        params.append(now)
    found = _one_row(tracker, sql, tuple(params))
    if found is None:
        raise NotFoundError(f"no issue {issue_id!r}")
    refusal, moved, issue = found
    if refusal is None and moved:  # the ready state of others moves: the function writes it all
        refusal = _one_row(
            tracker, "SELECT mesh_change(?, ?::text[], ?::text[], ?::text[], ?, ?::text[], ?::text[], ?::text[], ?,"
            " ?::text[], ?, ?, ?, ?)",
            (issue_id, keys, kinds, texts, normalize_ts(changes.get("defer_until")), *wanted, close,
             None if close_status is None else list(close_status), force, event_type, tracker.actor, now))[0]
        issue = refusal.get("issue")
        if refusal["outcome"] == "ok":
            refusal = None
    if refusal is None:
        # No issue answered for a change that changed nothing (see ``_change_sql``).
        return tracker.get(issue_id) if issue is None else _answered_issue(issue, issue_id)
    outcome = refusal["outcome"]
    if outcome == "expect":
        key, old, kind = refusal["key"], refusal["old"], refusal["kind"]
        value = None if old is None else int(old) if kind == "int" else old == "true" if kind == "bool" else old
        raise ConflictError(f"{issue_id}: {key} is {value!r}, expected {(expect or {})[key]!r}")
    if outcome == "status":
        raise ConflictError(f"{issue_id} is {refusal['status']}, not {'/'.join(close_status or ())}")
    if outcome == "blocked":
        raise ConflictError(f"{issue_id} has open blockers: {', '.join(refusal['blockers'])} (use --force)")
    raise NotFoundError(f"no issue {issue_id!r}")  # "missing": deleted between the two round trips


def _one_row(tracker: Tracker, sql: str, params: tuple) -> tuple | None:
    with tracker.db._lock:
        return tracker.db.conn.fetch_one(sql, params)


def _answered_issue(found: dict | None, issue_id: str) -> dict:
    """The issue a statement answered (``pg_functions.issue_json``), as ``get`` builds it."""
    if found is None:
        raise NotFoundError(f"no issue {issue_id!r}")
    deps = found["deps"]
    return _counted_issue(tuple(found["row"]), found["labels"],
                          [_dep_from_tuple(tuple(d)) for d in deps] if deps else None,
                          found["dependents"], found["comments"])


def _as_texts(values: Mapping[str, Any], *, convert: bool) -> tuple[list[str] | None, list[str], list[str | None]]:
    """Fields, their kinds and their values as the statements compare and write them (see
    ``_KINDS``). ``convert``: pinned and ephemeral become bools first, as ``Issues._apply`` makes
    them. No fields (None) when one is not comparable that way."""
    keys, kinds, texts = [], [], []
    for key, value in values.items():
        kind = _KINDS.get(key)
        if kind == "bool" and convert and value is not None:
            value = bool(value)
        if value is None and kind:
            text = None
        elif kind == "text" and type(value) is str:
            text = value
        elif kind == "int" and type(value) is int:
            text = str(value)
        elif kind == "bool" and type(value) is bool:
            text = "true" if value else "false"
        else:
            return None, [], []
        keys.append(key)
        kinds.append(kind)
        texts.append(text)
    return keys, kinds, texts


@functools.cache
def _length_limits() -> tuple[int, ...]:
    """For each hash length but the longest, the largest issue count ``ids.adaptive_length``
    gives it: the server chooses the length of a new hash id from them."""
    limits = []
    for length in range(idgen.MIN_LENGTH, idgen.MAX_LENGTH):
        low, high = 0, 1
        while idgen.adaptive_length(high) <= length:
            high *= 2
        while high - low > 1:  # adaptive_length(low) <= length < adaptive_length(high)
            mid = (low + high) // 2
            low, high = (mid, high) if idgen.adaptive_length(mid) <= length else (low, mid)
        limits.append(low)
    return tuple(limits)


@functools.cache
def _create_sql() -> str:
    """The statement of a create without parent or idempotency key. Its id: the one given, else the
    first hash candidate (``ids.hash_id`` with nonce 0 at the length for the issue count, under the
    workspace's prefix). It writes only when that id is free and no edge waits for it (then nothing
    needs refreshing: the new issue blocks nothing, has no parent, and its deferral is its own). Answers the id wanted,
    the id written, and whether edges wait for it (NULL when the id was taken). Parameters: the id
    given, the hash, the row (JSON of ``rows.INSERT_COLUMNS``), the labels, the actor, the title and
    the time."""
    # The hash's length for the issue count n (``ids.adaptive_length``): one CASE, not a count over
    # the limits (no aggregate for the server to set up at each create).
    limits = _length_limits()
    length = " ".join(f"WHEN c.n <= {most} THEN {idgen.MIN_LENGTH + k}" for k, most in enumerate(limits))
    return (
        "WITH meta AS (SELECT COALESCE(?::text, COALESCE(NULLIF((SELECT value FROM config WHERE key = 'issue_prefix'),"
        f" ''), '{idgen.DEFAULT_PREFIX}') || '-' || lpad(?::text, CASE {length}"
        f" ELSE {idgen.MIN_LENGTH + len(limits)} END, '0')) AS id"
        f" FROM (SELECT COALESCE(MAX(seq), 0) + 1 AS n FROM issues) c WHERE {LOCKED}),"
        " cand AS (SELECT m.id, EXISTS (SELECT 1 FROM dependencies d WHERE d.depends_on_id = m.id) AS waiting"
        " FROM meta m WHERE NOT EXISTS (SELECT 1 FROM issues i WHERE i.id = m.id)),"
        f" iss AS (INSERT INTO issues(id, blocked, defer_eff, {', '.join(INSERT_COLUMNS)})"
        f" SELECT c.id, 0, r.defer_sort, {', '.join('r.' + c for c in INSERT_COLUMNS)}"
        " FROM cand c, jsonb_populate_record(NULL::issues, ?::jsonb) r WHERE NOT c.waiting"
        " RETURNING id, status, priority, created_sort),"
        " lab AS (INSERT INTO labels(issue_id, label) SELECT iss.id, t.label FROM iss,"
        " unnest(?::text[]) WITH ORDINALITY AS t(label, n) ORDER BY t.n RETURNING issue_id, label),"
        " ord AS (INSERT INTO open_labels(issue_id, label, priority, created_sort)"
        " SELECT lab.issue_id, lab.label, iss.priority, iss.created_sort FROM lab, iss WHERE iss.status = 'open'),"
        " ev AS (INSERT INTO events(issue_id, event_type, actor, field, old_value, new_value, created_at)"
        " SELECT iss.id, 'created', ?, NULL, NULL, ?, ? FROM iss)"
        " SELECT (SELECT id FROM meta), (SELECT id FROM iss), (SELECT waiting FROM cand)"
    )


# How a field of each kind reads as text (its events' text), and how that text is written back.
_AS_TEXT = {"text": "{0}", "int": "{0}::text",
            "bool": "CASE WHEN {0} IS NULL THEN NULL WHEN {0} <> 0 THEN 'true' ELSE 'false' END"}
_FROM_TEXT = {"text": "{0}", "int": "{0}::bigint", "bool": "CASE {0} WHEN 'true' THEN 1 WHEN 'false' THEN 0 END"}


@functools.lru_cache(maxsize=256)
def _change_sql(fields: tuple[tuple[str, str], ...], expected: tuple[tuple[str, str], ...], close: bool,
                close_status: bool, blockers: bool, event_type: str) -> str:
    """The statement of a change of ``fields`` ((name, kind) in the caller's order), as
    ``Issues._apply`` makes it. Parameters: the new values, the expected values, the statuses a
    close expects (with ``close_status``), the actor and the time of the events, the issue id,
    ``updated_at``, and with a status among the fields the time of ``closed_at``.

    It answers (refusal, moved, issue): the first check that failed (as ``mesh_change`` answers
    it), whether the change moves the ready state of other issues or its own (then nothing was
    written), and the issue; no row for no issue.

    It answers the issue only when it wrote the row (NULL when nothing changed: the caller reads
    it). The server starts every subquery of a statement's plan before it runs it, even one it
    will not evaluate: a second reading of the issue for that rare case, or a CTE per step
    (values, verdict, changes, moved), cost more than the rest of the statement's writing
    (``EXPLAIN ANALYZE`` and timings: 0.36 ms against 0.31 for this shape)."""
    # The current values, read with the row locked (a closed issue closed anew has no old status).
    olds = ["CASE WHEN i.status = 'closed' THEN NULL ELSE i.status END" if close and name == "status"
            else _AS_TEXT[kind].format(f"i.{name}") for name, kind in fields]
    cur = ["i.id", "i.status AS was", *(f"{old} AS o{n}" for n, old in enumerate(olds)),
           *(_AS_TEXT[kind].format(f"i.{name}") + f" AS x{n}" for n, (name, kind) in enumerate(expected)),
           *(f"?::text AS v{n}" for n in range(len(fields))), *(f"?::text AS w{n}" for n in range(len(expected))),
           "(SELECT count(*) FROM dependencies d WHERE d.depends_on_id = i.id) AS dependents"]
    checks = [f"WHEN cur.x{n} IS DISTINCT FROM cur.w{n} THEN json_build_object('outcome', 'expect', 'key', '{name}',"
              f" 'old', cur.x{n}, 'kind', '{kind}')" for n, (name, kind) in enumerate(expected)]
    if close_status:
        cur.append("?::text[] AS statuses")
        checks.append("WHEN NOT cur.was = ANY(cur.statuses) THEN json_build_object('outcome', 'status', 'status', cur.was)")
    if blockers:
        cur.append("NULLIF(ARRAY(SELECT b.id FROM dependencies d JOIN issues b ON b.id = d.depends_on_id"
                   f" WHERE d.issue_id = i.id AND d.type = 'blocks' AND b.status IN ({_BLOCKING}) ORDER BY b.id),"
                   " '{}'::text[]) AS blockers")
        checks.append("WHEN cur.blockers IS NOT NULL THEN json_build_object('outcome', 'blocked', 'blockers',"
                      " cur.blockers)")
    cur += ["?::text AS actor", "?::text AS at"]  # the events'
    refusal = f"CASE {' '.join(checks)} END" if checks else "NULL::json"
    differs = {name: f"chk.o{n} IS DISTINCT FROM chk.v{n}" for n, (name, _) in enumerate(fields)}
    names = list(differs)
    moves = []
    if "defer_until" in names:
        moves.append(differs["defer_until"].replace("chk.", "cur."))
    if "status" in names:
        # A new status moves the ready state of the issues that depend on this one, if any.
        moves.append(f"({differs['status'].replace('chk.', 'cur.')} AND cur.dependents > 0)")
    moved = " OR ".join(moves) or "false"
    kinds = {name: "closed" if close else "status_changed" if name == "status" else event_type for name in names}
    sets = {name: f"CASE WHEN {differs[name]} THEN {_FROM_TEXT[kind].format(f'chk.v{n}')} ELSE u.{name} END"
            for n, (name, kind) in enumerate(fields)}
    if "status" in names:
        s = names.index("status")
        sets["closed_at"] = (f"CASE WHEN {differs['status']} AND chk.v{s} = 'closed' THEN ?"
                             f" WHEN {differs['status']} AND chk.o{s} = 'closed' THEN NULL ELSE u.closed_at END")
        sets["close_reason"] = (f"CASE WHEN {differs['status']} AND chk.v{s} IS DISTINCT FROM 'closed'"
                                f" AND chk.o{s} = 'closed' THEN NULL ELSE {sets.get('close_reason', 'u.close_reason')} END")
    assignments = [f"{name} = {value}" for name, value in sets.items() if name != "closed_at"]
    assignments.append("updated_at = ?")
    # The kept originals of the fields given are superseded (``issues._drop_kept_originals``).
    listed = "ARRAY[" + ", ".join(f"'{name}'" for name in names) + "]" if names else "'{}'::text[]"
    assignments.append(f"extra = {without_keys('u.extra', listed)}")
    if "closed_at" in sets:
        assignments.append(f"closed_at = {sets['closed_at']}")
    writes = "chk.refusal IS NULL AND NOT chk.moved"
    changed = " OR ".join(differs.values()) or "false"
    # One SELECT per field, in the caller's order (an Append runs its parts in order: the events' ids
    # follow it, as on SQLite).
    events = (" ev AS (INSERT INTO events(issue_id, event_type, actor, field, old_value, new_value, created_at) "
              + " UNION ALL ".join(f"SELECT chk.id, '{kinds[name]}', chk.actor, '{name}', chk.o{n}, chk.v{n}, chk.at"
                                   f" FROM chk WHERE {writes} AND chk.o{n} IS DISTINCT FROM chk.v{n}"
                                   for n, name in enumerate(names)) + "),"
              if names else "")
    # Its label rows in ``open_labels`` follow a new status or priority (tracker.pg_functions).
    # A close never makes an issue open: only its rows' delete.
    order = ""
    if "status" in names:
        order += f", lo AS ({open_labels_left('upd')})"
    if ("status" in names and not close) or "priority" in names:
        order += f", lw AS ({open_labels_written('upd')})"
    return (
        f"WITH chk AS (SELECT cur.*, {refusal} AS refusal, {moved} AS moved FROM (SELECT {', '.join(cur)}"
        f" FROM issues i WHERE i.id = ? AND {LOCKED} FOR UPDATE OF i) AS cur),"
        f"{events}"
        f" upd AS (UPDATE issues u SET {', '.join(assignments)} FROM chk"
        f" WHERE u.id = chk.id AND {writes} AND ({changed}) RETURNING u.*){order}"
        f" SELECT chk.refusal, chk.refusal IS NULL AND chk.moved, ({issue_json('upd w', 'chk.dependents')}) FROM chk"
    )
