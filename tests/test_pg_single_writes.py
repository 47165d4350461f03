"""PostgreSQL's one-round-trip writes (tracker/single_writes.py, tracker/pg_functions.py) do what
SQLite's Python transactions do.

The same calls are made on a SQLite tracker and on a PostgreSQL one: every answer (the issue, or
the typed error and its message), the audit trail and the stored ready state must agree. Random
sequences of writes (Hypothesis, derandomized in CI) cover the paths: plain creates, children,
idempotency keys, ids taken, updates of every kind of field, compare-and-set, closes with blockers
and with dependents (the server-side function), reopens. Then what the paths promise besides:
one statement per write, refusals that leave an enclosing transaction usable, a taken hash id, the
hash and its length as ``tracker.ids`` computes them, and a tracker of schema version 4 migrated.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracker import ids as idgen
from tracker.db import ready_state_changes
from tracker.errors import ConflictError, TrackerError
from tracker.pg_functions import STALE_OPEN_LABELS
from tracker.schema import SCHEMA_VERSION
from tracker.single_writes import _length_limits
from tracker.store import Tracker

# Fields the tracker stamps with the clock: they differ between two runs of the same calls.
CLOCK = ("created_at", "updated_at", "closed_at")

IDS = ["w-a", "w-b", "w-c", "w-d"]
TEXTS = st.sampled_from(["", "one", "two", "ünï ✓"])
FIELD_VALUES = {
    "title": st.sampled_from(["t1", "t2"]),
    "notes": TEXTS,
    "description": TEXTS,
    "assignee": st.sampled_from([None, "", "ann", "bob"]),
    "priority": st.integers(0, 4),
    "status": st.sampled_from(["open", "in_progress", "blocked", "deferred", "closed", "hooked"]),
    "pinned": st.sampled_from([None, True, False, 1, 0]),
    "timeout": st.sampled_from([None, 5, 7_000_000_000]),
    "defer_until": st.sampled_from([None, "", "2026-01-01T00:00:00Z", "2030-01-01T00:00:00Z"]),
    "metadata": st.sampled_from([None, {"k": 1}]),
}
TARGET = st.sampled_from(IDS + ["w-a.1", "w-missing"])
OPS = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(IDS + ["w-missing"]),
              st.lists(st.sampled_from(["x", "y"]), max_size=3), st.sampled_from([None, "k1", "k2"])),
    st.tuples(st.just("child"), TARGET),
    st.tuples(st.just("update"), TARGET,
              st.dictionaries(st.sampled_from(sorted(FIELD_VALUES)), st.none(), min_size=1, max_size=3).flatmap(
                  lambda keys: st.fixed_dictionaries({k: FIELD_VALUES[k] for k in keys}))),
    st.tuples(st.just("expect"), TARGET, st.sampled_from(["status", "assignee", "priority", "pinned"]),
              st.sampled_from(["open", None, 2, True, "in_progress"])),
    st.tuples(st.just("close"), TARGET, st.booleans(), st.sampled_from([None, ("open",), ("in_progress", "open")])),
    st.tuples(st.just("reopen"), TARGET),
    st.tuples(st.just("block"), TARGET, TARGET, st.sampled_from(["blocks", "parent-child"])),
    st.tuples(st.just("claim_next"), st.sampled_from(["x", "y"])),
    st.tuples(st.just("label"), TARGET, st.sampled_from(["x", "y"])),
    st.tuples(st.just("unlabel"), TARGET, st.sampled_from(["x", "y"])),
    st.tuples(st.just("claim"), TARGET, st.sampled_from(["ann", "bob"])),
    st.tuples(st.just("delete"), TARGET, st.booleans()),
)


def _apply(tracker: Tracker, op: tuple) -> object:
    """Run one call; its answer without clock fields, or the error it raised (type and message)."""
    kind = op[0]
    try:
        if kind == "create":
            issue = tracker.create(f"issue {op[1]}", issue_id=op[1], labels=op[2], idempotency_key=op[3])
        elif kind == "child":
            issue = tracker.create("a child", parent=op[1], labels=["x"])
        elif kind == "update":
            issue = tracker.update(op[1], **op[2])
        elif kind == "expect":
            issue = tracker.update(op[1], expect={op[2]: op[3]}, notes="checked")
        elif kind == "close":
            issue = tracker.close_issue(op[1], reason="done", force=op[2], expect_status=op[3])
        elif kind == "reopen":
            issue = tracker.reopen(op[1])
        elif kind == "claim_next":
            issue = tracker.claim_next(labels=[op[1]])
        elif kind == "label":
            issue = tracker.add_label(op[1], op[2])
        elif kind == "unlabel":
            issue = tracker.remove_label(op[1], op[2])
        elif kind == "claim":
            issue = tracker.claim(op[1], actor=op[2])
        elif kind == "delete":
            issue = tracker.delete(op[1], force=op[2])
        else:
            issue = tracker.add_dependency(op[1], op[2], op[3])
    except TrackerError as exc:
        return type(exc).__name__, str(exc)
    return _unclocked(issue)


def _unclocked(value: object) -> object:
    if isinstance(value, dict):
        return {k: _unclocked(v) for k, v in value.items() if k not in CLOCK}
    if isinstance(value, list):
        return [_unclocked(v) for v in value]
    return value


def _ids(issues: list[dict]) -> list[str]:
    return [i["id"] for i in issues]


def _stale_label_order(tracker: Tracker) -> int:
    """Rows of ``open_labels`` missing, extra or whose copy of their issue's place in ready order
    is not the issue's."""
    return tracker.db.read(STALE_OPEN_LABELS)[0][0]


def _trail(tracker: Tracker) -> list[tuple]:
    return [(e["issue_id"], e["event_type"], e["actor"], e["field"], e["old_value"], e["new_value"])
            for e in tracker.events() if e["field"] not in CLOCK]


def _state(tracker: Tracker) -> list[tuple]:
    return [tuple(r) for r in tracker.db.read("SELECT id, blocked, defer_eff, extra FROM issues ORDER BY id")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=12))
def test_writes_agree_with_sqlite(ops, pg_server):
    name = f"agree{next(_names)}"
    url = pg_server.create_database(name)
    try:
        with tempfile.TemporaryDirectory() as folder:
            lite = Tracker.init(Path(folder) / "lite", prefix="w", actor="ann")
            pg = Tracker.init(Path(folder) / "pg", prefix="w", actor="ann", db_path=url)
            try:
                for op in ops:
                    assert _apply(pg, op) == _apply(lite, op), op
                    with pg.db._lock:
                        assert not ready_state_changes(pg.db.conn), op
                    assert not _stale_label_order(pg), op
                    for label in ("x", "y"):
                        assert _ids(pg.ready(labels=[label])) == _ids(lite.ready(labels=[label])), op
                assert _trail(pg) == _trail(lite)
                assert _state(pg) == _state(lite)
            finally:
                lite.close()
                pg.close()
    finally:
        pg_server.drop_database(name)


_names = iter(range(1 << 30))


def _counted(tracker: Tracker) -> list[str]:
    """The statements the tracker's connection sends from now on."""
    sent: list[str] = []
    conn = tracker.db.conn
    execute, fetch_one = conn.execute, conn.fetch_one

    def counting(sql, params=(), **kw):
        sent.append(sql)
        return execute(sql, params, **kw)

    def counting_one(sql, params=()):
        sent.append(sql)
        return fetch_one(sql, params)

    conn.execute, conn.fetch_one = counting, counting_one
    return sent


def test_each_write_is_one_statement(tmp_path, pg_url):
    tracker = Tracker.init(tmp_path, prefix="one", actor="ann", db_path=pg_url)
    epic = tracker.create("an epic", issue_type="epic")
    blocker = tracker.create("first")
    later = tracker.create("later")
    tracker.add_dependency(later["id"], blocker["id"])
    sent = _counted(tracker)
    task = tracker.create("a task", labels=["plan:q3", "x"], priority=1)
    child = tracker.create("a child", parent=epic["id"])
    tracker.update(task["id"], notes="more", priority=3, pinned=True)
    tracker.close_issue(child["id"], reason="done")
    assert len(sent) == 4
    # A close that makes others ready: the statement finds it, the function writes it (two in all).
    assert tracker.ready(labels=[]) and later["id"] not in [i["id"] for i in tracker.ready()]
    sent.clear()
    tracker.close_issue(blocker["id"])
    assert len(sent) == 2 and later["id"] in [i["id"] for i in tracker.ready()]
    tracker.close()


def test_an_update_that_changes_nothing_answers_the_issue_and_writes_nothing(tmp_path, pg_url):
    """The statement answers only a row it wrote; for a change that changes nothing the issue is
    read after it."""
    tracker = Tracker.init(tmp_path, prefix="same", actor="ann", db_path=pg_url)
    task = tracker.create("a task", labels=["x"], notes="kept")
    events = len(tracker.events())
    again = tracker.update(task["id"], notes="kept", priority=task["priority"])
    assert again == tracker.get(task["id"]) and again["updated_at"] == task["updated_at"]
    assert again["notes"] == "kept" and again["labels"] == ["x"]
    assert len(tracker.events()) == events
    tracker.close()


def test_refusals_leave_the_enclosing_transaction_usable(tmp_path, pg_url):
    tracker = Tracker.init(tmp_path, prefix="tx", actor="ann", db_path=pg_url)
    blocker = tracker.create("first")
    task = tracker.create("second")
    tracker.add_dependency(task["id"], blocker["id"])
    with tracker.transaction():
        with pytest.raises(ConflictError, match="open blockers"):
            tracker.close_issue(task["id"])
        with pytest.raises(ConflictError, match="already exists"):
            tracker.create("again", issue_id=task["id"])
        with pytest.raises(ConflictError, match="expected 'closed'"):
            tracker.update(task["id"], expect={"status": "closed"}, notes="no")
        kept = tracker.create("kept")
    assert tracker.get(kept["id"])["title"] == "kept"
    tracker.close()


def test_a_taken_hash_id_is_found_again(tmp_path, pg_url, monkeypatch):
    """The statement tries the first hash candidate only; when it is taken the function tries the
    next nonces (``ids.hash_id``'s loop) and the issue is created all the same."""
    tracker = Tracker.init(tmp_path, prefix="hx", actor="ann", db_path=pg_url)
    monkeypatch.setattr(idgen, "base36_hash", lambda seed, nonce: "zzz")
    first = tracker.create("one")
    second = tracker.create("two", labels=["x"])
    assert first["id"] == "hx-zzz" and second["id"] != first["id"] and len(second["id"]) == len("hx-zzz")
    assert tracker.get(second["id"])["labels"] == ["x"]
    assert [e["event_type"] for e in tracker.events(second["id"])] == ["created"]
    tracker.close()


@pytest.mark.parametrize("seed", ["plain", "ünïcode ✓|x", "", "a" * 300])
def test_the_server_hashes_as_python(pg_url, tmp_path, seed):
    tracker = Tracker.init(tmp_path, prefix="h", db_path=pg_url)
    for nonce in (0, 1, 17, 63):
        assert tracker.db.read("SELECT mesh_base36(?, ?)", (seed, nonce))[0][0] == idgen.base36_hash(seed, nonce)
    tracker.close()


def test_the_statement_lengthens_the_hash_where_python_does(tmp_path, pg_url):
    """A create's statement picks the hash length for the issue count as ``ids.adaptive_length``
    does, on both sides of the first limit (163 issues: three characters, then four)."""
    tracker = Tracker.init(tmp_path, prefix="len", actor="ann", db_path=pg_url)
    first = _length_limits()[0]
    with tracker.transaction():
        for k in range(first - 1):
            tracker.create(f"issue {k}", issue_id=f"len-given{k}")
    at_limit, past = (tracker.create("hashed")["id"] for _ in range(2))
    assert len(at_limit.split("-", 1)[1]) == idgen.adaptive_length(first) == idgen.MIN_LENGTH
    assert len(past.split("-", 1)[1]) == idgen.adaptive_length(first + 1) == idgen.MIN_LENGTH + 1
    tracker.close()


def test_hash_lengths_follow_the_issue_count():
    for length, most in zip(range(idgen.MIN_LENGTH, idgen.MAX_LENGTH), _length_limits()):
        assert idgen.adaptive_length(most) == length and idgen.adaptive_length(most + 1) == length + 1


def test_a_version_4_tracker_is_migrated(tmp_path, pg_url):
    tracker = Tracker.init(tmp_path, prefix="old", db_path=pg_url)
    epic = tracker.create("an epic", issue_type="epic")
    task = tracker.create("a planned task", labels=["plan"], priority=1)
    with tracker.transaction() as c:  # what version 4 had: none of what versions 5, 6 and 7 add
        for function in ("mesh_create(jsonb, text[], text, text, text, text, bigint[], text, text, text, text)",
                         "mesh_change(text, text[], text[], text[], text, text[], text[], text[], boolean, text[],"
                         " boolean, text, text, text)", "mesh_refresh_ready(text[])", "mesh_base36(text, int)"):
            c.execute(f"DROP FUNCTION {function}")
        c.execute("DROP FUNCTION mesh_labels_of(text)")
        c.execute("DROP TABLE open_labels")
        c.execute("DROP INDEX issues_open_order")
        c.execute("CREATE INDEX issues_ready_by_id ON issues(id, issue_type, priority, created_sort, defer_eff,"
                  " ephemeral, pinned) WHERE status = 'open' AND blocked = 0")
        c.execute("DELETE FROM schema_version WHERE version >= 5")
        c.execute("UPDATE config SET value = '4' WHERE key = 'schema_version'")
    tracker.close()
    reopened = Tracker(pg_url, actor="ann")
    assert reopened.db.read("SELECT MAX(version) FROM schema_version")[0][0] == SCHEMA_VERSION
    assert not _stale_label_order(reopened)  # the open labels written before, with their issue's place
    assert not reopened.db.read("SELECT 1 FROM pg_indexes WHERE indexname = 'issues_ready_by_id'")
    child = reopened.create("a child", parent=epic["id"], labels=["plan"])  # through mesh_create
    assert child["id"] == f"{epic['id']}.1" and child["parent"] == epic["id"]
    assert reopened.update(child["id"], defer_until="2030-01-01T00:00:00Z")["defer_until"]  # through mesh_change
    assert reopened.claim_next(labels=["plan"])["id"] == task["id"]
    assert reopened.close_issue(child["id"])["status"] == "closed"
    with reopened.db._lock:
        assert not ready_state_changes(reopened.db.conn)
    assert not _stale_label_order(reopened)
    reopened.close()


def test_claim_next_walks_the_labels_open_issues(tmp_path, pg_url):
    """Ready work of a label is read from the label's open issues in ready order (``open_labels``),
    not by walking every open issue past those without the label; a claimed, closed, reopened or
    reprioritised issue keeps its rows there current, and the order stays (priority, creation)."""
    tracker = Tracker.init(tmp_path, prefix="lo", actor="ann", db_path=pg_url)
    with tracker.transaction():
        for k in range(200):  # ahead of the plan in ready order, without its label
            tracker.create(f"other {k}", priority=0, labels=["other"])
    plan = [tracker.create(f"plan {k}", priority=2, labels=["plan"])["id"] for k in range(4)]
    tracker.update(plan[3], priority=1)
    tracker.db.conn.execute("ANALYZE")
    assert [tracker.claim_next(labels=["plan"])["id"] for _ in range(2)] == [plan[3], plan[0]]
    tracker.close_issue(plan[1])
    tracker.reopen(plan[1])
    assert not _stale_label_order(tracker)
    sql, params = tracker._ready_sql(labels=["plan"], issue_type=None, parent=None, limit=1, now=None, columns="i.id")
    shown = "\n".join(r[0] for r in tracker.db.read("EXPLAIN " + sql, params))
    assert "open_labels_order" in shown, shown
    assert _ids(tracker.ready(labels=["plan"])) == [plan[1], plan[2]]
    assert [tracker.claim_next(labels=["plan"])["id"] for _ in range(2)] == [plan[1], plan[2]]
    assert tracker.claim_next(labels=["plan"]) is None and not _stale_label_order(tracker)
    tracker.close()


def test_an_import_by_copy_gives_what_sqlite_gives(tmp_path, pg_url):
    """PostgreSQL imports with COPY: the same issues, edges (one listed twice kept once), comments
    (a newer file keeps the comments written here since), events and ready state as SQLite's
    INSERTs, and the open issues' label rows in ready order (``open_labels``)."""
    import io
    import json

    from bench.gen_workspace import generate
    from tracker.jsonl import export_jsonl, import_jsonl

    issues = generate(300)
    issues[5].setdefault("dependencies", []).extend([{"issue_id": issues[5]["id"], "depends_on_id": issues[1]["id"],
                                                      "type": "blocks"}] * 2)
    first = "".join(json.dumps(i) + "\n" for i in issues)
    newer = dict(issues[7], title="changed", updated_at="2099-01-01T00:00:00Z")
    second = json.dumps(newer) + "\n"
    outcomes = []
    for name, target in (("lite", None), ("pg", pg_url)):
        tracker = Tracker.init(tmp_path / name, prefix="bm", actor="ann", db_path=target)
        import_jsonl(tracker, io.StringIO(first))
        tracker.add_comment(issues[7]["id"], "written here since")
        import_jsonl(tracker, io.StringIO(second))
        out = io.StringIO()
        export_jsonl(tracker, out)
        with tracker.db._lock:
            assert not ready_state_changes(tracker.db.conn)
        if target:
            assert not _stale_label_order(tracker)
        outcomes.append(([_unclocked(json.loads(line)) for line in out.getvalue().splitlines()],
                         _ids(tracker.ready()), _trail(tracker)))
        tracker.close()
    assert str(outcomes[0][0]).count("written here since") == 1
    assert outcomes[0] == outcomes[1]


def test_doctor_finds_and_repairs_a_stale_label_order(tmp_path, pg_url):
    tracker = Tracker.init(tmp_path, prefix="dr", actor="ann", db_path=pg_url)
    task = tracker.create("planned", labels=["plan"])
    assert {c["name"]: c["ok"] for c in tracker.doctor()["checks"]}["label_order"]
    with tracker.transaction() as c:  # what a hand edit of the table could leave
        c.execute("DELETE FROM open_labels WHERE issue_id = ?", (task["id"],))
    assert tracker.claim_next(labels=["plan"]) is None
    report = tracker.doctor()
    assert not report["ok"] and not {c["name"]: c["ok"] for c in report["checks"]}["label_order"]
    assert tracker.doctor(fix=True)["ok"]
    assert tracker.claim_next(labels=["plan"])["id"] == task["id"]
    tracker.close()
