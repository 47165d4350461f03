"""An import that fills an empty PostgreSQL tracker (a new one, or a workspace that replaces every
issue) writes each issue's ready state with its row and, from ``_BULK_LOAD_AT`` issues, fills the
tables without their foreign keys and secondary indexes and puts them back before it commits
(``tracker.jsonl._copy_in``, ``tracker.postgres.drop_for_bulk_load``): the tracker ends with the
same rows, ready state, constraints and indexes as an import beside other issues, and an import
refused half way leaves every row and schema object as it was."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.conftest import bench_module
from tracker.db import ready_state_changes
from tracker.errors import InvalidValueError
from tracker.jsonl import _BULK_LOAD_AT, export_jsonl, import_jsonl
from tracker.store import Tracker

_gen = bench_module("gen_workspace")
BENCH_LABEL, generate, write_jsonl = _gen.BENCH_LABEL, _gen.generate, _gen.write_jsonl

# What the bulk load takes off and puts back: every constraint, index and trigger of the schema.
_SCHEMA_OBJECTS = (
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
    " WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2",
    "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1, 2",
    "SELECT tgrelid::regclass::text, tgname, tgenabled FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2",
)
_STATE = ("SELECT id, status, blocked, defer_eff FROM issues WHERE id <> ? ORDER BY id",
          "SELECT issue_id, label FROM labels WHERE issue_id <> ? ORDER BY issue_id, label",
          "SELECT issue_id, label, priority, created_sort FROM open_labels WHERE issue_id <> ? ORDER BY issue_id, label",
          "SELECT issue_id, event_type, new_value FROM events WHERE issue_id <> ? AND event_type = 'imported'"
          " ORDER BY issue_id")


def _schema(tracker: Tracker) -> list[list[tuple]]:
    return [[tuple(r) for r in tracker.db.read(sql)] for sql in _SCHEMA_OBJECTS]


def _index_oids(tracker: Tracker) -> set[int]:
    return {r[0] for r in tracker.db.read("SELECT indexrelid::bigint FROM pg_index i JOIN pg_class t"
                                           " ON t.oid = i.indrelid WHERE t.relname IN ('issues', 'labels')"
                                           " AND NOT i.indisprimary")}


def _state(tracker: Tracker, but: str = "") -> list[list[tuple]]:
    return [[tuple(r) for r in tracker.db.read(sql, (but,))] for sql in _STATE]


def _export(tracker: Tracker) -> list[dict]:
    out = io.StringIO()
    export_jsonl(tracker, out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture
def records() -> list[dict]:
    """A generated workspace above the bulk-load threshold, with the dirty graph real files hold:
    an edge to an issue that does not exist, a parent-child cycle, a blocker that is deferred."""
    issues = generate(_BULK_LOAD_AT + 500, seed=5)
    a, b, c = issues[10], issues[11], issues[12]
    a.setdefault("dependencies", []).append({"issue_id": a["id"], "depends_on_id": "bm-nowhere", "type": "blocks"})
    a["dependencies"].append({"issue_id": a["id"], "depends_on_id": b["id"], "type": "parent-child"})
    b.setdefault("dependencies", []).append({"issue_id": b["id"], "depends_on_id": a["id"], "type": "parent-child"})
    c.update(status="deferred", defer_until="2031-01-01T00:00:00Z")
    b["dependencies"].append({"issue_id": b["id"], "depends_on_id": c["id"], "type": "blocks"})
    return issues


@pytest.fixture
def source(tmp_path, records) -> Path:
    path = tmp_path / "ws.jsonl"
    write_jsonl(records, path)
    return path


@pytest.fixture
def second_url(pg_server):
    """Another empty database on the session's server, beside ``pg_url``'s."""
    url = pg_server.create_database("bulk_second")
    yield url
    pg_server.drop_database("bulk_second")


def test_an_import_into_an_empty_tracker_ends_as_one_beside_other_issues(tmp_path, source, pg_url, second_url):
    bulk = Tracker.init(tmp_path / "bulk", prefix="bm", db_path=pg_url)
    fresh_schema = _schema(bulk)
    beside = Tracker.init(tmp_path / "beside", prefix="zz", db_path=second_url)
    other = beside.create("already here", labels=[BENCH_LABEL])["id"]  # the import takes the row-by-row path
    count = _BULK_LOAD_AT + 500
    oids = [_index_oids(t) for t in (bulk, beside)]
    assert import_jsonl(bulk, source).created == count
    assert import_jsonl(beside, source).created == count
    # Built anew (new objects) by the bulk load; kept up to date row by row beside other issues.
    assert _index_oids(bulk).isdisjoint(oids[0]) and _index_oids(beside) == oids[1]
    assert _schema(bulk) == _schema(beside) == fresh_schema
    assert _state(bulk) == _state(beside, other)
    assert _export(bulk) == [issue for issue in _export(beside) if issue["id"] != other]
    assert bulk.ready(labels=[BENCH_LABEL], issue_type="task") == [
        issue for issue in beside.ready(labels=[BENCH_LABEL], issue_type="task") if issue["id"] != other]
    blocked = {r[0] for r in bulk.db.read("SELECT id FROM issues WHERE blocked = 1")}
    assert len(blocked) > 100  # the generated graph blocks many
    # The same file on SQLite, whose ready state is refreshed from the tables after the rows are in.
    on_sqlite = Tracker.init(tmp_path / "sqlite", prefix="bm")
    import_jsonl(on_sqlite, source)
    assert blocked == {r[0] for r in on_sqlite.db.read("SELECT id FROM issues WHERE blocked = 1")}
    assert bulk.doctor()["ok"] and beside.doctor()["ok"]
    with bulk.db._lock:
        assert not ready_state_changes(bulk.db.conn)  # what a refresh from the tables would write
    for tracker in (bulk, beside, on_sqlite):
        tracker.close()


def test_a_whole_workspace_reimport_takes_the_bulk_path_and_keeps_local_comments(tmp_path, records, pg_url):
    tracker = Tracker.init(tmp_path / "ws", prefix="bm", db_path=pg_url)
    first = tmp_path / "first.jsonl"
    write_jsonl(records, first)
    import_jsonl(tracker, first)
    target = records[0]["id"]
    tracker.add_comment(target, "a checkpoint written here")
    for issue in records:
        issue["updated_at"] = "2031-06-01T00:00:00Z"
        issue["title"] = "renamed " + issue.get("title", "")
    newer = tmp_path / "newer.jsonl"
    write_jsonl(records, newer)
    schema, oids = _schema(tracker), _index_oids(tracker)
    report = import_jsonl(tracker, newer)
    assert report.updated == len(records) and report.created == 0
    assert _schema(tracker) == schema and _index_oids(tracker).isdisjoint(oids)
    assert all(issue["title"].startswith("renamed ") for issue in _export(tracker))
    assert "a checkpoint written here" in [c["text"] for c in tracker.comments(target)]
    assert import_jsonl(tracker, newer).unchanged == len(records)  # idempotent
    assert tracker.doctor()["ok"]
    tracker.close()


@pytest.mark.parametrize("filled", [False, True], ids=["empty", "whole-workspace"])
def test_an_import_refused_half_way_leaves_rows_and_schema_as_they_were(tmp_path, records, pg_url, filled):
    tracker = Tracker.init(tmp_path / "ws", prefix="bm", db_path=pg_url)
    if filled:
        good = tmp_path / "good.jsonl"
        write_jsonl(records, good)
        import_jsonl(tracker, good)
        for issue in records:
            issue["updated_at"] = "2031-06-01T00:00:00Z"
    # PostgreSQL stores no NUL in text: the labels' COPY is refused, after the issues' went in
    # without their indexes and foreign keys.
    records[-1]["labels"] = ["fine", "bad\x00label"]
    bad = tmp_path / "bad.jsonl"
    write_jsonl(records, bad)
    schema, rows, exported = _schema(tracker), _state(tracker), _export(tracker)
    with pytest.raises(InvalidValueError):
        import_jsonl(tracker, bad)
    assert _schema(tracker) == schema
    assert _state(tracker) == rows and _export(tracker) == exported
    assert len(exported) == (len(records) if filled else 0)
    tracker.close()


def test_a_small_import_into_an_empty_tracker_writes_the_ready_state_a_refresh_would(tmp_path, pg_url):
    """Below the bulk-load threshold the constraints stay, but the ready state still comes with the
    rows: a deferred epic's children, a chain of blockers, a parent-child cycle, an edge to nowhere."""
    lines = [
        {"id": "s-epic", "title": "epic", "issue_type": "epic", "status": "open", "priority": 1,
         "defer_until": "2031-01-01T00:00:00Z"},
        {"id": "s-child", "title": "child", "status": "open", "priority": 2, "dependencies": [
            {"issue_id": "s-child", "depends_on_id": "s-epic", "type": "parent-child"}]},
        {"id": "s-first", "title": "first", "status": "in_progress", "priority": 2},
        {"id": "s-second", "title": "second", "status": "open", "priority": 2, "dependencies": [
            {"issue_id": "s-second", "depends_on_id": "s-first", "type": "blocks"},
            {"issue_id": "s-second", "depends_on_id": "s-gone", "type": "blocks"}]},
        {"id": "s-third", "title": "third", "status": "open", "priority": 2, "labels": ["q"], "dependencies": [
            {"issue_id": "s-third", "depends_on_id": "s-second", "type": "parent-child"}]},
        {"id": "s-done", "title": "done", "status": "closed", "priority": 2},
        {"id": "s-free", "title": "free", "status": "open", "priority": 2, "labels": ["q"], "dependencies": [
            {"issue_id": "s-free", "depends_on_id": "s-done", "type": "blocks"}]},
        {"id": "s-loop-a", "title": "a", "status": "open", "priority": 3, "dependencies": [
            {"issue_id": "s-loop-a", "depends_on_id": "s-loop-b", "type": "parent-child"}]},
        {"id": "s-loop-b", "title": "b", "status": "open", "priority": 3, "dependencies": [
            {"issue_id": "s-loop-b", "depends_on_id": "s-loop-a", "type": "parent-child"},
            {"issue_id": "s-loop-b", "depends_on_id": "s-first", "type": "blocks"}]},
    ]
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    on_pg = Tracker.init(tmp_path / "pg", prefix="s", db_path=pg_url)
    on_sqlite = Tracker.init(tmp_path / "sqlite", prefix="s")
    for tracker in (on_pg, on_sqlite):
        assert import_jsonl(tracker, path).created == len(lines)
    with on_pg.db._lock:
        assert not ready_state_changes(on_pg.db.conn)
    states = "SELECT id, blocked, defer_eff FROM issues ORDER BY id"
    assert [tuple(r) for r in on_pg.db.read(states)] == [tuple(r) for r in on_sqlite.db.read(states)]
    assert {r[0] for r in on_pg.db.read("SELECT id FROM issues WHERE blocked = 1")} == {
        "s-second", "s-third", "s-loop-a", "s-loop-b"}
    assert [i["id"] for i in on_pg.ready()] == [i["id"] for i in on_sqlite.ready()]
    assert [i["id"] for i in on_pg.ready(labels=["q"])] == ["s-free"]
    on_pg.close()
    on_sqlite.close()
