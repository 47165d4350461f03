"""A large import into a small tracker drops the secondary indexes and builds them again before
it commits (``tracker.jsonl``): the tracker ends with exactly the indexes and answers it would
have had, and an import that fails half way leaves every index and row as it was."""

from __future__ import annotations

import io
import json
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


def _rows(db: str) -> dict[str, list[tuple]]:
    """Every label, edge and comment (without its id), and each issue's events, as sorted lists."""
    with sqlite3.connect(db) as conn:
        return {"labels": sorted(conn.execute("SELECT issue_id, label FROM labels")),
                "dependencies": sorted(conn.execute("SELECT issue_id, depends_on_id, type, created_at, created_by, extra"
                                                    " FROM dependencies")),
                "comments": sorted(conn.execute("SELECT issue_id, author, text, created_at, ext_id, extra FROM comments")),
                "events": sorted(conn.execute("SELECT issue_id, event_type, actor, new_value FROM events"))}


def test_an_import_writes_no_reference_it_cannot_keep_and_leaves_the_checks_on(tmp_path, source):
    """The import writes with SQLite's foreign keys unchecked (every row names an issue it writes):
    the tracker holds no row they would refuse, they are on again after it, a replaced issue's
    labels, edges and comments are its new ones only (not the old ones beside them: no cascade
    removed those), and each issue's ``imported`` event names its own line, blank and malformed
    lines counted."""
    lines = source.read_text(encoding="utf-8").splitlines()
    text = "\n".join(["", "not json"] + lines[:1500] + ["", "[1]"] + lines[1500:]) + "\n"
    tracker = Tracker.init(tmp_path / "ws", prefix="bk")
    assert import_jsonl(tracker, io.StringIO(text)).created == 3000
    assert tracker.db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with sqlite3.connect(tracker.path) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    line_of = {json.loads(line)["id"]: f"line {n}" for n, line in enumerate(text.splitlines(), start=1)
               if line.startswith("{")}
    events = _rows(str(tracker.path))["events"]
    assert sorted(events) == sorted((i, "imported", tracker.actor, line_of[i]) for i in line_of)

    # The same issues again, each newer: every one replaced, none of its rows doubled.
    newer = [json.loads(line) for line in lines]
    for obj in newer:
        obj["updated_at"] = "2099-01-01T00:00:00Z"
    newer_text = "".join(json.dumps(obj) + "\n" for obj in newer)
    assert import_jsonl(tracker, io.StringIO(newer_text)).updated == 3000
    fresh = Tracker.init(tmp_path / "fresh", prefix="bk")
    import_jsonl(fresh, io.StringIO(newer_text))
    again, once = _rows(str(tracker.path)), _rows(str(fresh.path))
    for table in ("labels", "dependencies", "comments"):
        assert again[table] == once[table], table
    assert tracker.db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert tracker.doctor()["ok"]


def test_an_import_that_failed_is_run_again_from_the_start_without_doubles(tmp_path, source, monkeypatch):
    """A crash inside the import's transaction leaves what was there (and the foreign keys on);
    running the import again gives what one clean import gives."""
    tracker = Tracker.init(tmp_path / "ws", prefix="bk")
    tracker.create("already here")

    def fail(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error (injected)")

    with monkeypatch.context() as m:
        m.setattr(jsonl, "refresh_ready_state", fail)  # after every row is written
        with pytest.raises(sqlite3.OperationalError):
            import_jsonl(tracker, source)
    assert tracker.db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert import_jsonl(tracker, source).created == 3000
    clean = Tracker.init(tmp_path / "clean", prefix="bk")
    clean.create("already here")
    import_jsonl(clean, source)
    ours, theirs = _rows(str(tracker.path)), _rows(str(clean.path))
    for table in ("labels", "dependencies", "comments"):
        assert ours[table] == theirs[table], table
    assert len(ours["events"]) == len(theirs["events"])
    out = [io.StringIO(), io.StringIO()]
    export_jsonl(tracker, out[0])
    export_jsonl(clean, out[1])
    assert [json.loads(x)["title"] for x in out[0].getvalue().splitlines()] == \
        [json.loads(x)["title"] for x in out[1].getvalue().splitlines()]


@pytest.mark.parametrize("block", [1, 7, 4096])
def test_a_file_read_in_blocks_gives_the_lines_one_by_one(tmp_path, monkeypatch, block):
    """The file is read a block at a time and split: lines across blocks, CRLF ends, a last
    line without its newline, and the size limit come out as reading line by line gives them."""
    from tracker.errors import ImportLineError

    monkeypatch.setattr(jsonl, "_BLOCK_CHARS", block)
    monkeypatch.setattr(jsonl, "MAX_LINE_CHARS", 200)
    lines = [json.dumps({"id": f"bk-{k}", "title": "t" * (k * 13 % 120), "status": "open", "priority": 1}) for k in range(12)]
    path = tmp_path / "in.jsonl"
    path.write_bytes(("\r\n".join(lines[:6]) + "\n\n" + "\n".join(lines[6:])).encode())
    tracker = Tracker.init(tmp_path / "ws", prefix="bk")
    report = import_jsonl(tracker, path)
    assert report.created == 12 and report.lines == 13 and report.warnings == []
    assert {i["id"]: i["title"] for i in tracker.list(include_closed=True)} == \
        {json.loads(line)["id"]: json.loads(line)["title"] for line in lines}
    too_long = json.dumps({"id": "bk-long", "title": "x" * 300, "priority": 1})
    path.write_text(lines[0] + "\n" + too_long + "\n" + lines[1] + "\n")
    with pytest.raises(ImportLineError) as refused:
        import_jsonl(Tracker.init(tmp_path / "ws2", prefix="bk"), path)
    assert refused.value.line == 2 and "longer than 200" in str(refused.value)
