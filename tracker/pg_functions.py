"""Server-side functions of the PostgreSQL tracker (schema version 6): one write, one round trip.

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

Every function keeps one generic plan per statement (``plan_cache_mode``): each of their
statements looks rows up by id, and planning them anew at each call cost more than running them.
"""

from __future__ import annotations

from .model import BLOCKING_STATUSES
from .rows import _ISSUE_COLUMNS, INSERT_COLUMNS, UPDATE_COLUMNS

__all__ = ["FUNCTIONS", "LABEL_ORDER_COLUMNS", "LABEL_ORDER_REBUILD", "LOCKED", "STALE_LABEL_ORDER", "issue_json"]

WRITE_LOCK_ID = 0x6D657368  # postgres.WRITE_LOCK_ID ("mesh"), without importing the driver's module
_BLOCKING = ", ".join(f"'{s}'" for s in BLOCKING_STATUSES)

# A condition that takes the write lock first: a constant one, evaluated once before any row is read.
LOCKED = f"(SELECT pg_advisory_xact_lock({WRITE_LOCK_ID})::text) IS NOT NULL"

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

# An issue and what ``Issues._hydrate`` reads beside it, as one JSON object (NULL for no issue),
# written into each function that answers one (a call of a function of its own cost more).
def issue_json(source: str, dependents: str = "(SELECT count(*) FROM dependencies d WHERE d.depends_on_id = w.id)") -> str:
    """The query of that object for the issue row ``w`` of ``source`` (its ``row``: the values of
    ``rows._ISSUE_COLUMNS``); ``dependents``: their count, when the caller has read it already."""
    return f"""SELECT json_build_object(
    'row', json_build_array({', '.join('w.' + c for c in _ISSUE_COLUMNS)}),
    'labels', (SELECT json_agg(l.label ORDER BY l.rowid) FROM labels l WHERE l.issue_id = w.id),
    'deps', (SELECT json_agg(json_build_array(d.issue_id, d.depends_on_id, d.type, d.created_at, d.created_by,
                                              d.extra) ORDER BY d.rowid) FROM dependencies d WHERE d.issue_id = w.id),
    'dependents', {dependents},
    'comments', (SELECT count(*) FROM comments c WHERE c.issue_id = w.id))
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
  -- One statement writes the row, its labels (distinct, and none can exist for a new id), its edge,
  -- its key and its event.
  WITH iss AS (
    INSERT INTO issues(id, blocked, defer_eff, {', '.join(INSERT_COLUMNS)})
      SELECT v_id, v_blocked, GREATEST(r.defer_sort, v_defer), {', '.join('r.' + c for c in INSERT_COLUMNS)}
      FROM jsonb_populate_record(NULL::issues, p_row) r RETURNING id, status, priority, created_sort),
  lab AS (INSERT INTO labels(issue_id, label, issue_open, issue_priority, issue_created_sort)
    SELECT iss.id, t.label, iss.status = 'open', iss.priority, iss.created_sort
    FROM iss, unnest(p_labels) WITH ORDINALITY AS t(label, n) ORDER BY t.n),
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
                   if c != "extra"] + [
    "extra = CASE WHEN u.extra IS NOT NULL"
    " AND EXISTS (SELECT 1 FROM json_each(u.extra::json) e WHERE e.key = ANY(p_keys))"
    " THEN (SELECT json_object_agg(e.key, e.value)::text FROM json_each(u.extra::json) e WHERE e.key <> ALL(p_keys))"
    " ELSE u.extra END"])

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

# Each label row carries a copy of its issue's place in ready order (open or not, priority, creation
# key), indexed for the open ones: ``claim_next`` and ``ready`` for a label walk the label's open
# issues in ready order instead of every open issue, past those without the label (1,000 rows read
# for one claim in a plan of 1,600 among 3,600). A label row is filled when it is written (from the
# values given, else from its issue) and kept current by a trigger when its issue's place changes.
LABEL_ORDER_COLUMNS = ("issue_open", "issue_priority", "issue_created_sort")
# What ``Tracker.doctor`` counts and, with ``fix``, rewrites: label rows whose copy is not their issue's.
STALE_LABEL_ORDER = (" FROM labels l JOIN issues i ON i.id = l.issue_id WHERE (l.issue_open, l.issue_priority,"
                     " l.issue_created_sort) IS DISTINCT FROM (i.status = 'open', i.priority, i.created_sort)")
LABEL_ORDER_REBUILD = ("UPDATE labels l SET issue_open = i.status = 'open', issue_priority = i.priority,"
                       " issue_created_sort = i.created_sort FROM issues i WHERE i.id = l.issue_id"
                       " AND (l.issue_open, l.issue_priority, l.issue_created_sort)"
                       " IS DISTINCT FROM (i.status = 'open', i.priority, i.created_sort)")
_LABEL_ORDER = (
    "ALTER TABLE labels ADD COLUMN IF NOT EXISTS issue_open BOOLEAN,"
    " ADD COLUMN IF NOT EXISTS issue_priority BIGINT, ADD COLUMN IF NOT EXISTS issue_created_sort TEXT COLLATE \"C\"",
    LABEL_ORDER_REBUILD,
    "CREATE INDEX IF NOT EXISTS labels_open_order ON labels(label, issue_priority, issue_created_sort, issue_id)"
    " WHERE issue_open",
    """CREATE OR REPLACE FUNCTION mesh_label_filled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT i.status = 'open', i.priority, i.created_sort INTO NEW.issue_open, NEW.issue_priority, NEW.issue_created_sort
    FROM issues i WHERE i.id = NEW.issue_id;
  RETURN NEW;
END $$""",
    "DROP TRIGGER IF EXISTS mesh_labels_filled ON labels",
    "CREATE TRIGGER mesh_labels_filled BEFORE INSERT ON labels FOR EACH ROW WHEN (NEW.issue_open IS NULL)"
    " EXECUTE FUNCTION mesh_label_filled()",
    """CREATE OR REPLACE FUNCTION mesh_label_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE labels SET issue_open = NEW.status = 'open', issue_priority = NEW.priority,
                    issue_created_sort = NEW.created_sort WHERE issue_id = NEW.id;
  RETURN NULL;
END $$""",
    "DROP TRIGGER IF EXISTS mesh_issues_order ON issues",
    "CREATE TRIGGER mesh_issues_order AFTER UPDATE ON issues FOR EACH ROW"
    " WHEN ((OLD.status = 'open') IS DISTINCT FROM (NEW.status = 'open') OR OLD.priority IS DISTINCT FROM NEW.priority"
    " OR OLD.created_sort IS DISTINCT FROM NEW.created_sort) EXECUTE FUNCTION mesh_label_order()",
)

# Installed by ``schema.ensure_schema`` (version 6), in this order (a function its callers need first).
FUNCTIONS = (_REFRESH, _BASE36, _CREATE, _CHANGE, *_LABEL_ORDER)
