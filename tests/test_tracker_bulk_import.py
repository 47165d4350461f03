"""A large import into a small tracker drops the secondary indexes and builds them again before
it commits (``tracker.jsonl``): the tracker ends with exactly the indexes and answers it would
have had, and an import that fails half way leaves every index and row as it was."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest

import tracker.jsonl as jsonl
from tracker.jsonl import export_jsonl, import_jsonl
from tests.conftest import bench_module
from tracker.store import Tracker

_gen = bench_module("gen_workspace")
BENCH_LABEL, generate, write_jsonl = _gen.BENCH_LABEL, _gen.generate, _gen.write_jsonl


def _indexes(db: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name").fetchall()


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "ws.jsonl"
    write_jsonl(generate(3000, seed=5), path)
    return path


def test_a_bulk_import_ends_with_the_same_indexes_and_answers(tmp_path, source, monkeypatch):
    bulk = Tracker.init(tmp_path / "bulk", prefix="bk")
    expected = _indexes(str(bulk.path))
    assert import_jsonl(bulk, source).created == 3000
    monkeypatch.setattr(jsonl, "_BULK_LOAD_AT", 10**9)  # the same file, every index kept up to date throughout
    kept = Tracker.init(tmp_path / "kept", prefix="bk")
    assert import_jsonl(kept, source).created == 3000
    assert _indexes(str(bulk.path)) == _indexes(str(kept.path)) == expected
    for tracker in (bulk, kept):
        assert tracker.doctor()["ok"]
        with sqlite3.connect(tracker.path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"  # indexes match their tables
    exports = []
    for tracker in (bulk, kept):
        out = io.StringIO()
        export_jsonl(tracker, out)
        exports.append(out.getvalue())
    assert exports[0] == exports[1]
    for query in ({"labels": [BENCH_LABEL], "issue_type": "task"}, {"limit": 10}, {}):
        assert bulk.ready(**query) == kept.ready(**query)


def test_a_bulk_import_that_fails_leaves_the_tracker_as_it_was(tmp_path, source, monkeypatch):
    tracker = Tracker.init(tmp_path / "ws", prefix="bk")
    tracker.create("already here")
    before = _indexes(str(tracker.path))

    def fail(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error (injected)")

    monkeypatch.setattr(jsonl, "refresh_ready_state", fail)  # after the indexes are dropped and rows written
    with pytest.raises(sqlite3.OperationalError):
        import_jsonl(tracker, source)
    assert _indexes(str(tracker.path)) == before
    assert [i["title"] for i in tracker.list(include_closed=True)] == ["already here"]


REAL = sorted((Path(__file__).resolve().parents[2] / "shared" / "data" / "beads-real").glob("*.jsonl"))


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_an_import_into_an_empty_tracker_writes_the_ready_state_the_full_pass_computes(tmp_path, path):
    """Into an empty tracker the import takes each issue's blocked and deferred state from the
    file's own graph and runs no pass over the tables: the state is the one that pass computes."""
    from tracker.db import ready_state_changes

    tracker = Tracker.init(tmp_path / "ws", prefix="bk")
    import_jsonl(tracker, path)
    with sqlite3.connect(tracker.path) as conn:
        assert ready_state_changes(conn) == []


def test_the_ready_state_of_an_import_into_a_tracker_with_issues_counts_them(tmp_path):
    """A file whose issue depends on one only the tracker holds: the file alone would call it
    ready; the pass after the writes sees the open blocker (and its close)."""
    tracker = Tracker.init(tmp_path / "ws", prefix="bk")
    blocker = tracker.create("already here")["id"]
    line = ('{"id": "bk-new", "title": "from the file", "status": "open", "priority": 1, "issue_type": "task",'
            ' "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",'
            f' "dependencies": [{{"issue_id": "bk-new", "depends_on_id": "{blocker}", "type": "blocks"}}]}}\n')
    import_jsonl(tracker, io.StringIO(line))
    assert "bk-new" not in [i["id"] for i in tracker.ready()]
    tracker.close_issue(blocker)
    assert "bk-new" in [i["id"] for i in tracker.ready()]
