"""Server-side functions of the PostgreSQL tracker (schema versions 6 and 7): one write, one round trip.

``create``, ``update`` and ``close_issue`` read, decide and write: in Python each is a dozen
statements in a transaction (the issue read, the id chosen, the row, its labels and edges, the
ready state of every issue it can change, the events, the issue read back). On PostgreSQL the
reading and writing happen here instead, in PL/pgSQL, and the store makes one call that answers
the issue hydrated: what took a dozen round trips takes one. The store still
validates every value in Python before the call; what a function finds (no such issue, an id
taken, a failed compare-and-set, open blockers) it answers as an ``outcome`` that the store turns
into the same typed error as on SQLite, so an enclosing transaction stays usable.

Each function takes the write lock (the advisory lock of ``postgres.WRITE_LOCK_ID``) first, as the
store's exclusive transactions do: writers of one tracker still run one at a time.

``mesh_refresh_ready`` is ``db.refresh_ready_state`` in one statement: the same seeds (the issues
given and those that ``blocks``-depend on them), every descendant through ``parent-child``, and for
each the lineage that decides ``blocked`` and ``defer_eff``. Its plan walks the indexes from the
issues given: the planner cannot estimate a recursive walk, guesses tens of rows, and would
otherwise scan the whole issues table twice for each write (1.2 ms at 2,000 issues).

``open_labels`` (version 7) holds the label rows of the open issues in ready order, for the walks
of ``claim_next`` and ``ready`` by label; the writes keep it themselves (see below).

Every function keeps one generic plan per statement (``plan_cache_mode``): each of their
statements looks rows up by id, and planning them anew at each call cost more than running them.
"""

from __future__ import annotations

from .model import BLOCKING_STATUSES
from .rows import _ISSUE_COLUMNS, INSERT_COLUMNS, UPDATE_COLUMNS

__all__ = ["FUNCTIONS", "LOCKED", "OPEN_LABELS_REBUILD", "RELATED", "SQLITE_ONLY_INDEXES", "STALE_OPEN_LABELS",
           "issue_json", "open_labels_left", "open_labels_written", "sync_open_labels", "without_keys"]

WRITE_LOCK_ID = 0x6D657368  # postgres.WRITE_LOCK_ID ("mesh"), without importing the driver's module
_BLOCKING = ", ".join(f"'{s}'" for s in BLOCKING_STATUSES)

# A condition that takes the write lock first: a constant one, evaluated once before any row is read.
LOCKED = f"(SELECT pg_advisory_xact_lock({WRITE_LOCK_ID})::text) IS NOT NULL"

# Schema version 7: the label rows of the open issues, each with its issue's place in ready order
# (priority, creation key), in a table of their own, ``open_labels``, indexed in that order:
# ``claim_next`` and ``ready`` for a label walk the label's open issues in ready order instead of
# every open issue, past those without the label (1,000 rows read for one claim in a plan of 1,600
# among 3,600). A claim or a close deletes its issue's rows (no index entry written); version 6 kept
# the same copy in ``labels`` itself, updated by a trigger at every claim and close: that trigger's
# call and the row's new version (three index entries) were a seventh of a claim's time.
#
# No trigger keeps it: each write that makes an issue open or not, changes its priority or adds or
# removes its labels writes the issue's rows itself, in its own statement (the claims, ``create``,
# ``update``, ``close_issue``, ``mesh_create``, ``mesh_change``) or with ``sync_open_labels``
# (the Python transactions, imports, migrations). ``doctor`` counts the rows that differ from
# ``labels`` and ``issues`` (``STALE_OPEN_LABELS``) and, with ``fix``, rebuilds the table.
OPEN_LABEL_ROWS = ("SELECT l.issue_id, l.label, i.priority, i.created_sort FROM labels l JOIN issues i"
                   " ON i.id = l.issue_id WHERE i.status = 'open'")
_OPEN_LABEL_COLUMNS = "open_labels(issue_id, label, priority, created_sort)"
STALE_OPEN_LABELS = (f"SELECT count(*) FROM ((SELECT issue_id, label, priority, created_sort FROM open_labels"
                     f" EXCEPT {OPEN_LABEL_ROWS}) UNION ALL ({OPEN_LABEL_ROWS} EXCEPT SELECT issue_id, label,"
                     " priority, created_sort FROM open_labels)) AS differing")
OPEN_LABELS_REBUILD = ("DELETE FROM open_labels", f"INSERT INTO {_OPEN_LABEL_COLUMNS} {OPEN_LABEL_ROWS}")
_OPEN_LABELS_OF = ("DELETE FROM open_labels WHERE issue_id = ANY(?::text[])",
                   f"INSERT INTO {_OPEN_LABEL_COLUMNS} {OPEN_LABEL_ROWS} AND i.id = ANY(?::text[])")


def sync_open_labels(c: object, ids: list[str]) -> None:
    """Write the ``open_labels`` rows of the issues ``ids`` as their labels and status now are (in
    the transaction of ``c``, after its writes of those issues and labels)."""
    for statement in _OPEN_LABELS_OF:
        c.execute(statement, (ids,))  # type: ignore[attr-defined]


def open_labels_written(source: str) -> str:
    """A data-modifying CTE body: the ``open_labels`` rows of the issue ``source`` wrote (``id``,
    ``status``, ``priority``, ``created_sort``) when it is open, from its labels read by
    ``mesh_labels_of``."""
    return (f"INSERT INTO {_OPEN_LABEL_COLUMNS} SELECT w.id, f.label, w.priority, w.created_sort FROM {source} w,"
            " mesh_labels_of(w.id) AS f(label) WHERE w.status = 'open' ON CONFLICT (issue_id, label)"
            " DO UPDATE SET priority = excluded.priority, created_sort = excluded.created_sort")


def open_labels_left(source: str) -> str:
    """A data-modifying CTE body: the ``open_labels`` rows of the issue ``source`` wrote deleted
    when it is not open (an index probe when it had none)."""
    return f"DELETE FROM open_labels o USING {source} w WHERE o.issue_id = w.id AND w.status <> 'open'"


# An issue statement that makes an issue open or changes its priority writes its rows from the
# issue's labels as they are when it runs, read with a snapshot of their own (a VOLATILE function:
# the statement's snapshot is older than the write lock it waited for, and a label added meanwhile
# would be missed).
_LABELS_OF = """CREATE OR REPLACE FUNCTION mesh_labels_of(p_id text) RETURNS SETOF text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RETURN QUERY SELECT label FROM labels WHERE issue_id = p_id;
END $$"""
# An issue's kept originals (``extra``) without those of the fields a write sets
# (``issues._drop_kept_originals``). A function, not subqueries in the writing statements: the
# server starts every subquery of a plan at each execution, and most issues keep none.
_WITHOUT_KEYS = """CREATE OR REPLACE FUNCTION mesh_without_keys(p_extra text, p_keys text[]) RETURNS text
  LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM json_each(p_extra::json) e WHERE e.key = ANY(p_keys)) THEN
    RETURN p_extra;
  END IF;
  RETURN (SELECT json_object_agg(e.key, e.value)::text FROM json_each(p_extra::json) e WHERE e.key <> ALL(p_keys));
END $$"""


def without_keys(extra: str, keys: str) -> str:
    """The expression of ``extra`` (a column) without the kept originals of ``keys`` (a text[])."""
    return f"CASE WHEN {extra} IS NULL THEN NULL ELSE mesh_without_keys({extra}, {keys}) END"


# SQLite's covering index for its ``INDEXED BY`` plans: PostgreSQL's plans do not use it, and every
# write of an open issue paid its entry.
SQLITE_ONLY_INDEXES = ("issues_ready_by_id",)
_OPEN_LABELS = (
    # Version 6's copy in ``labels`` and what kept it.
    "DROP TRIGGER IF EXISTS mesh_issues_order ON issues",
    "DROP TRIGGER IF EXISTS mesh_labels_filled ON labels",
    "DROP FUNCTION IF EXISTS mesh_label_order()",
    "DROP FUNCTION IF EXISTS mesh_label_filled()",
    "DROP INDEX IF EXISTS labels_open_order",
    "ALTER TABLE labels DROP COLUMN IF EXISTS issue_open, DROP COLUMN IF EXISTS issue_priority,"
    " DROP COLUMN IF EXISTS issue_created_sort",
    *(f"DROP INDEX IF EXISTS {name}" for name in SQLITE_ONLY_INDEXES),
    "CREATE TABLE IF NOT EXISTS open_labels (issue_id TEXT NOT NULL, label TEXT NOT NULL, priority INTEGER NOT NULL,"
    " created_sort TEXT, PRIMARY KEY (issue_id, label))",
    "CREATE INDEX IF NOT EXISTS open_labels_order ON open_labels(label, priority, created_sort, issue_id)",
    *OPEN_LABELS_REBUILD,
    _LABELS_OF,
    _WITHOUT_KEYS,
)

_REFRESH = f"""
CREATE OR REPLACE FUNCTION mesh_refresh_ready(p_ids text[]) RETURNS void LANGUAGE plpgsql
  SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  IF cardinality(p_ids) = 1 AND NOT EXISTS (SELECT 1 FROM dependencies WHERE depends_on_id = p_ids[1]) THEN
    -- Nothing depends on the one issue: only its own state can change, and its parents' stored
    -- state already sums up their lineage.
    UPDATE issues x SET blocked = s.blocked, defer_eff = GREATEST(x.defer_sort, s.parents_defer) FROM (SELECT
      CASE WHEN EXISTS (SELECT 1 FROM dependencies d JOIN issues b ON b.id = d.depends_on_id
                        WHERE d.issue_id = p_ids[1] AND d.type = 'blocks' AND b.status IN ({_BLOCKING}))
             OR EXISTS (SELECT 1 FROM dependencies d JOIN issues p ON p.id = d.depends_on_id
                        WHERE d.issue_id = p_ids[1] AND d.type = 'parent-child' AND p.blocked <> 0)
           THEN 1 ELSE 0 END AS blocked,
      (SELECT max(p.defer_eff) FROM dependencies d JOIN issues p ON p.id = d.depends_on_id
       WHERE d.issue_id = p_ids[1] AND d.type = 'parent-child') AS parents_defer) s
    WHERE x.id = p_ids[1] AND (x.blocked IS DISTINCT FROM s.blocked
                               OR x.defer_eff IS DISTINCT FROM GREATEST(x.defer_sort, s.parents_defer));
    RETURN;
  END IF;
  WITH RECURSIVE
  seeds(id) AS (SELECT unnest(p_ids) UNION SELECT d.issue_id FROM dependencies d
                WHERE d.type = 'blocks' AND d.depends_on_id = ANY(p_ids)),
  targets(id) AS (SELECT id FROM seeds UNION SELECT d.issue_id FROM dependencies d JOIN targets t
                  ON d.type = 'parent-child' AND d.depends_on_id = t.id),
  lineage(tid, aid) AS (SELECT id, id FROM targets UNION SELECT l.tid, d.depends_on_id FROM lineage l
                        JOIN dependencies d ON d.type = 'parent-child' AND d.issue_id = l.aid),
  state(id, blocked, defer_eff) AS (
    SELECT l.tid, max(CASE WHEN EXISTS (SELECT 1 FROM dependencies d JOIN issues b ON b.id = d.depends_on_id
                                        WHERE d.type = 'blocks' AND d.issue_id = l.aid
                                        AND b.status IN ({_BLOCKING})) THEN 1 ELSE 0 END),
           max(a.defer_sort)
    FROM lineage l LEFT JOIN issues a ON a.id = l.aid GROUP BY l.tid)
  UPDATE issues i SET blocked = s.blocked, defer_eff = s.defer_eff FROM state s
  WHERE i.id = s.id AND (i.blocked IS DISTINCT FROM s.blocked OR i.defer_eff IS DISTINCT FROM s.defer_eff);
END $$
"""

# The labels and the dependencies of the issue ``w`` in insertion order, as arrays (``ARRAY(...)``,
# not ``json_agg``: the server sets up each aggregate of a plan at every execution, at about the
# cost of reading its rows), and its dependents and comments counted.
_LABELS = "ARRAY(SELECT l.label FROM labels l WHERE l.issue_id = w.id ORDER BY l.rowid)"
_DEPS = ("ARRAY(SELECT json_build_array(d.issue_id, d.depends_on_id, d.type, d.created_at, d.created_by, d.extra)"
         " FROM dependencies d WHERE d.issue_id = w.id ORDER BY d.rowid)")
_DEPENDENTS = "(SELECT count(*) FROM dependencies d WHERE d.depends_on_id = w.id)"
_COMMENTS = "(SELECT count(*) FROM comments c WHERE c.issue_id = w.id)"
# What ``Issues._hydrate`` reads of an issue ``w`` beside its row, as columns of one query
# (``Issues._hydrated_row``): the claims answer their issue with them.
RELATED = f"{_LABELS}, {_DEPS}, {_DEPENDENTS}, {_COMMENTS}"


# An issue and what ``Issues._hydrate`` reads beside it, as one JSON object (NULL for no issue),
# written into each function that answers one (a call of a function of its own cost more).
def issue_json(source: str, dependents: str = _DEPENDENTS) -> str:
    """The query of that object for the issue row ``w`` of ``source`` (its ``row``: the values of
    ``rows._ISSUE_COLUMNS``); ``dependents``: their count, when the caller has read it already."""
    return f"""SELECT json_build_object(
    'row', json_build_array({', '.join('w.' + c for c in _ISSUE_COLUMNS)}),
    'labels', to_json({_LABELS}), 'deps', to_json({_DEPS}), 'dependents', {dependents}, 'comments', {_COMMENTS})
  FROM {source}"""


# ``ids.hash_id``'s base36 text of a seed and nonce (before it is padded and cut to a length).
_BASE36 = """
CREATE OR REPLACE FUNCTION mesh_base36(p_seed text, p_nonce int) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  digest bytea := substring(sha256(convert_to(p_seed || '|' || p_nonce, 'UTF8')) FROM 1 FOR 12);
  v numeric := 0;
  out text := '';
BEGIN
  FOR k IN 0..11 LOOP v := v * 256 + get_byte(digest, k); END LOOP;
  WHILE v > 0 LOOP
    out := substr('0123456789abcdefghijklmnopqrstuvwxyz', mod(v, 36)::int + 1, 1) || out;
    v := div(v, 36);
  END LOOP;
  RETURN CASE WHEN out = '' THEN '0' ELSE out END;
END $$
"""

# ``Issues.create``: p_row holds the columns of the new row but its id (``rows.INSERT_COLUMNS``);
# p_hash the base36 hash of the seed with nonce 0 (``ids.base36_hash``: the first candidate, the only
# one tried unless it is taken), p_limits the largest issue count of each hash length
# (``ids.adaptive_length``).
_CREATE = f"""
CREATE OR REPLACE FUNCTION mesh_create(p_row jsonb, p_labels text[], p_parent text, p_id text, p_seed text,
                                       p_hash text, p_limits bigint[], p_default_prefix text, p_idem text, p_actor text,
                                       p_now text) RETURNS json LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_id text;
  v_n bigint;
  v_len int;
  v_prefix text;
  v_blocked bigint := 0;
  v_defer text COLLATE "C";
  v_dependents bigint;
BEGIN
  -- The write lock, the issue of the idempotency key, the hash length and the prefix: one statement.
  SELECT (SELECT issue_id FROM idempotency WHERE key = p_idem),
         3 + (SELECT count(*) FROM unnest(p_limits) AS t(most)
              WHERE most < (SELECT COALESCE(MAX(seq), 0) + 1 FROM issues)),
         COALESCE(NULLIF((SELECT value FROM config WHERE key = 'issue_prefix'), ''), p_default_prefix)
    INTO v_id, v_len, v_prefix WHERE {LOCKED};
  IF v_id IS NOT NULL THEN
    RETURN json_build_object('outcome', 'existing', 'id', v_id, 'issue', ({issue_json('issues w WHERE w.id = v_id')}));
  END IF;
  IF p_parent IS NOT NULL THEN
    SELECT blocked, defer_eff INTO v_blocked, v_defer FROM issues WHERE id = p_parent;
    IF NOT FOUND THEN
      RETURN json_build_object('outcome', 'missing', 'id', p_parent);
    END IF;
    INSERT INTO child_counters(parent_id, last_child) VALUES (p_parent, 1) ON CONFLICT (parent_id)
      DO UPDATE SET last_child = child_counters.last_child + 1 RETURNING last_child INTO v_n;
    v_id := p_parent || '.' || v_n;
    WHILE EXISTS (SELECT 1 FROM issues WHERE id = v_id) LOOP
      v_n := v_n + 1;
      v_id := p_parent || '.' || v_n;
    END LOOP;
    UPDATE child_counters SET last_child = v_n WHERE parent_id = p_parent;
  ELSIF p_id IS NOT NULL THEN
    IF EXISTS (SELECT 1 FROM issues WHERE id = p_id) THEN
      RETURN json_build_object('outcome', 'exists', 'id', p_id);
    END IF;
    v_id := p_id;
  ELSE
    FOR nonce IN 0..63 LOOP
      v_id := v_prefix || '-' || lpad(CASE WHEN nonce = 0 THEN p_hash ELSE mesh_base36(p_seed, nonce) END,
                                      v_len + nonce / 16, '0');
      EXIT WHEN NOT EXISTS (SELECT 1 FROM issues WHERE id = v_id);
      v_id := NULL;
    END LOOP;
    IF v_id IS NULL THEN
      RETURN json_build_object('outcome', 'no_free_id');
    END IF;
  END IF;
  -- Edges of other issues that named this id before it existed (an import keeps them).
  SELECT count(*) INTO v_dependents FROM dependencies WHERE depends_on_id = v_id;
  -- Its ready state: its parent's (which sums up the parent's lineage) and its own deferral; with
  -- such edges, mesh_refresh_ready below also recomputes the issues they make it block.
  -- One statement writes the row, its labels (distinct, and none can exist for a new id) and their
  -- open_labels rows, its edge, its key and its event.
  WITH iss AS (
    INSERT INTO issues(id, blocked, defer_eff, {', '.join(INSERT_COLUMNS)})
      SELECT v_id, v_blocked, GREATEST(r.defer_sort, v_defer), {', '.join('r.' + c for c in INSERT_COLUMNS)}
      FROM jsonb_populate_record(NULL::issues, p_row) r RETURNING id, status, priority, created_sort),
  lab AS (INSERT INTO labels(issue_id, label)
    SELECT iss.id, t.label FROM iss, unnest(p_labels) WITH ORDINALITY AS t(label, n) ORDER BY t.n),
  ord AS (INSERT INTO open_labels(issue_id, label, priority, created_sort)
    SELECT iss.id, t.label, iss.priority, iss.created_sort FROM iss, unnest(p_labels) AS t(label)
    WHERE iss.status = 'open'),
  dep AS (INSERT INTO dependencies(issue_id, depends_on_id, type, created_at, created_by)
    SELECT iss.id, p_parent, 'parent-child', p_now, p_actor FROM iss WHERE p_parent IS NOT NULL),
  idem AS (INSERT INTO idempotency(key, issue_id) SELECT p_idem, iss.id FROM iss WHERE p_idem IS NOT NULL)
  INSERT INTO events(issue_id, event_type, actor, field, old_value, new_value, created_at)
    SELECT iss.id, 'created', p_actor, NULL, NULL, p_row ->> 'title', p_now FROM iss;
  IF v_dependents > 0 THEN
    PERFORM mesh_refresh_ready(ARRAY[v_id]);
  END IF;
  RETURN json_build_object('outcome', 'ok', 'id', v_id, 'dependents', v_dependents);
END $$
"""

# ``Issues.update`` and ``close_issue`` (``Issues._apply``). p_keys are the changed fields in the
# caller's order, p_kinds their kind (text, int, bool) and p_values their new values as text the
# way an event writes them ('true'/'false' for a bool); p_expect_* the compare-and-set of
# ``update(expect=...)``, the same way. p_close for ``close_issue``: its status compare-and-set
# (p_close_status, NULL for none) and, unless p_force, its blocker check; a closed issue closed
# anew has no old status.
_KIND_TEXT = """CASE p_kinds[k] WHEN 'bool' THEN CASE WHEN v_cur ->> p_keys[k] IS NULL THEN NULL
      WHEN (v_cur ->> p_keys[k])::bigint <> 0 THEN 'true' ELSE 'false' END ELSE v_cur ->> p_keys[k] END"""
# (No ``?`` operator in these bodies: ``dialect.to_postgres`` reads ``?`` as a placeholder.)
_SETS = ", ".join([f"{c} = CASE WHEN v_set -> '{c}' IS NULL THEN u.{c} ELSE r.{c} END" for c in UPDATE_COLUMNS
                   if c != "extra"] + [f"extra = {without_keys('u.extra', 'p_keys')}"])

_CHANGE = f"""
CREATE OR REPLACE FUNCTION mesh_change(p_id text, p_keys text[], p_kinds text[], p_values text[], p_defer_sort text,
                                       p_expect_keys text[], p_expect_kinds text[], p_expect_values text[],
                                       p_close boolean, p_close_status text[], p_force boolean, p_event text,
                                       p_actor text, p_now text)
                                       RETURNS json LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_cur jsonb;
  v_extra text;
  v_dependents boolean;
  v_old text;
  v_status text;
  v_blockers json;
  v_set jsonb := '{{}}';
  v_changed text[] := '{{}}';
  v_olds text[] := '{{}}';
  v_news text[] := '{{}}';
  v_issue json;
  k int;
BEGIN
  -- The write lock, the row locked and read, its open blockers for a close, whether any issue
  -- depends on it: one statement (each statement of a function costs as much as a small write).
  SELECT to_jsonb(i), i.extra, i.status,
         CASE WHEN p_close AND NOT p_force THEN
           (SELECT json_agg(b.id ORDER BY b.id) FROM dependencies d JOIN issues b ON b.id = d.depends_on_id
            WHERE d.issue_id = p_id AND d.type = 'blocks' AND b.status IN ({_BLOCKING})) END,
         EXISTS (SELECT 1 FROM dependencies d WHERE d.depends_on_id = p_id)
    INTO v_cur, v_extra, v_status, v_blockers, v_dependents
    FROM issues i WHERE i.id = p_id AND {LOCKED} FOR UPDATE OF i;
  IF NOT FOUND THEN
    RETURN json_build_object('outcome', 'missing', 'id', p_id);
  END IF;
  FOR k IN 1..coalesce(array_length(p_expect_keys, 1), 0) LOOP
    v_old := CASE p_expect_kinds[k] WHEN 'bool' THEN CASE WHEN v_cur ->> p_expect_keys[k] IS NULL THEN NULL
      WHEN (v_cur ->> p_expect_keys[k])::bigint <> 0 THEN 'true' ELSE 'false' END ELSE v_cur ->> p_expect_keys[k] END;
    IF v_old IS DISTINCT FROM p_expect_values[k] THEN
      RETURN json_build_object('outcome', 'expect', 'key', p_expect_keys[k], 'old', v_old, 'kind', p_expect_kinds[k]);
    END IF;
  END LOOP;
  IF p_close THEN
    IF p_close_status IS NOT NULL AND NOT v_status = ANY(p_close_status) THEN
      RETURN json_build_object('outcome', 'status', 'status', v_status);
    END IF;
    IF v_blockers IS NOT NULL THEN
      RETURN json_build_object('outcome', 'blocked', 'blockers', v_blockers);
    END IF;
    IF v_status = 'closed' THEN
      v_status := NULL;
      v_cur := v_cur || '{{"status": null}}';
    END IF;
  END IF;
  FOR k IN 1..coalesce(array_length(p_keys, 1), 0) LOOP
    v_old := {_KIND_TEXT};
    CONTINUE WHEN v_old IS NOT DISTINCT FROM p_values[k];
    v_set := v_set || jsonb_build_object(p_keys[k], CASE p_kinds[k] WHEN 'bool'
      THEN to_jsonb(CASE p_values[k] WHEN 'true' THEN 1 WHEN 'false' THEN 0 END) ELSE to_jsonb(p_values[k]) END);
    IF p_keys[k] = 'defer_until' THEN
      v_set := v_set || jsonb_build_object('defer_sort', p_defer_sort);
    END IF;
    v_changed := v_changed || p_keys[k];
    v_olds := v_olds || v_old;
    v_news := v_news || p_values[k];
  END LOOP;
  IF 'status' = ANY(p_keys) AND p_values[array_position(p_keys, 'status')] IS DISTINCT FROM v_status THEN
    IF p_values[array_position(p_keys, 'status')] = 'closed' THEN
      v_set := v_set || jsonb_build_object('closed_at', p_now);
    ELSIF v_status = 'closed' THEN
      v_set := v_set || '{{"closed_at": null, "close_reason": null}}';
    END IF;
  END IF;
  IF v_set <> '{{}}' THEN
    v_set := v_set || jsonb_build_object('updated_at', p_now);
    -- One statement writes the row (its kept originals of the fields given dropped) and the
    -- events, and reads the issue back.
    WITH ev AS (
      INSERT INTO events(issue_id, event_type, actor, field, old_value, new_value, created_at)
        SELECT p_id, CASE WHEN e.field = 'status' AND p_event = 'updated' THEN 'status_changed' ELSE p_event END,
               p_actor, e.field, e.old, e.new, p_now
        FROM unnest(v_changed, v_olds, v_news) WITH ORDINALITY AS e(field, old, new, n) ORDER BY e.n),
    w AS (UPDATE issues u SET {_SETS} FROM jsonb_populate_record(NULL::issues, v_set) r WHERE u.id = p_id
          RETURNING u.*)
    {issue_json('w')} INTO v_issue;
    IF 'status' = ANY(v_changed) OR 'priority' = ANY(v_changed) THEN
      DELETE FROM open_labels WHERE issue_id = p_id;
      INSERT INTO open_labels(issue_id, label, priority, created_sort) {OPEN_LABEL_ROWS} AND i.id = p_id;
    END IF;
    -- The issue's own state follows its deferral and its lineage, not its status: a new status
    -- changes the state of the issues that depend on it, if any (see mesh_refresh_ready).
    IF 'defer_until' = ANY(v_changed) OR ('status' = ANY(v_changed) AND v_dependents) THEN
      PERFORM mesh_refresh_ready(ARRAY[p_id]);  -- not a column of the issue answered
    END IF;
  ELSE
    v_issue := ({issue_json('issues w WHERE w.id = p_id')});
  END IF;
  RETURN json_build_object('outcome', 'ok', 'id', p_id, 'issue', v_issue);
END $$
"""

# Installed by ``schema.ensure_schema`` (versions 6 and 7), in this order (what a function uses first).
FUNCTIONS = (*_OPEN_LABELS, _REFRESH, _BASE36, _CREATE, _CHANGE)
