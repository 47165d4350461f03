"""JSONL import and export: fidelity on real beads exports, dirty data, newer-wins updates."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.conftest import beads_real_files
from tracker.jsonl import encode_line, export_jsonl, import_jsonl
from tracker.store import Tracker


def export_text(tracker: Tracker) -> str:
    out = io.StringIO()
    export_jsonl(tracker, out)
    return out.getvalue()


def source_objects(path: Path) -> dict[str, dict]:
    """Each id's object as the file gives it, the last line winning for a duplicated id."""
    objects: dict[str, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("id"), str):
            objects[obj["id"]] = obj
    return objects


def jsonl(*objects: dict | str) -> io.StringIO:
    return io.StringIO("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects))


@pytest.mark.parametrize("path", beads_real_files(), ids=lambda p: p.name)
def test_real_export_round_trip_loses_nothing(path, tmp_path, db_target):
    first = Tracker.init(tmp_path / "a", prefix="bd", db_path=db_target)
    report = import_jsonl(first, path)
    source = source_objects(path)
    assert report.created == len(source) and report.updated == 0
    assert {w["code"] for w in report.warnings} <= {"missing_priority", "duplicate_id"}
    exported = export_text(first)

    second = Tracker.init(tmp_path / "b", prefix="bd")
    again = import_jsonl(second, io.StringIO(exported))
    assert again.warnings == [] and again.created == len(source)
    assert export_text(second) == exported, "export -> import -> export is not byte-identical"

    lines = exported.splitlines()
    objects = [json.loads(line) for line in lines]
    assert [o["id"] for o in objects] == sorted(source), "export is not one line per issue sorted by id"
    for obj in objects:
        original = source[obj["id"]]
        for key, value in original.items():
            assert key in obj and obj[key] == value, (obj["id"], key)
        assert set(obj) - set(original) <= {"priority"}, obj["id"]
        if "priority" not in original:
            assert obj["priority"] == 2
    first.close()
    second.close()


def test_dirty_file_warns_with_line_numbers_and_imports_the_rest(tracker):
    text = jsonl(
        {"id": "d-1", "title": "no priority", "status": "open", "issue_type": "task"},
        {"id": "d-2", "title": "first copy", "status": "open", "priority": 1, "issue_type": "task"},
        "<<<<<<< HEAD",
        {"id": "d-3", "title": "ours", "status": "open", "priority": 1, "issue_type": "task"},
        "=======",
        "{\"id\": \"d-4\", \"title\": broken",
        ">>>>>>> theirs",
        "[1, 2, 3]",
        "42",
        "\"just a string\"",
        "",
        {"title": "no id"},
        {"id": "d-2", "title": "second copy", "status": "closed", "priority": 3, "issue_type": "bug"},
    )
    report = import_jsonl(tracker, text)
    warnings = {(w["line"], w["code"]) for w in report.warnings}
    assert warnings == {
        (1, "missing_priority"), (3, "conflict_marker"), (5, "conflict_marker"), (6, "malformed"),
        (7, "conflict_marker"), (8, "malformed"), (9, "malformed"), (10, "malformed"), (12, "missing_id"),
        (13, "duplicate_id"),
    }
    assert all(w["message"] and "\n" not in w["message"] for w in report.warnings)
    assert report.created == 3 and report.lines == 13
    assert tracker.get("d-1")["priority"] == 2
    assert (tracker.get("d-2")["title"], tracker.get("d-2")["status"]) == ("second copy", "closed")
    assert not tracker.exists("d-4")


def test_odd_values_survive_export(tracker):
    odd = {"id": "o-1", "title": "odd", "status": "open", "priority": "high", "issue_type": "task",
           "assignee": None, "metadata": "not an object", "timeout": "90s", "pinned": "yes",
           "labels": ["x"], "dependencies": [{"issue_id": "o-1", "depends_on_id": "o-2", "type": "blocks",
                                              "weight": 3}],
           "comments": [{"id": "c1-uuid", "issue_id": "o-1", "author": "a", "text": "<b>&</b>",
                         "created_at": "2025-01-01T00:00:00Z", "reactions": 2}],
           "zz_unknown": {"nested": [1, None]}}
    report = import_jsonl(tracker, jsonl(odd))
    assert {w["code"] for w in report.warnings} == {"invalid_priority"}
    line = export_text(tracker).strip()
    assert json.loads(line) == odd
    assert "\\u003cb\\u003e\\u0026\\u003c/b\\u003e" in line  # Go's HTML-safe escaping, like bd
    issue = tracker.get("o-1")
    assert issue["priority"] == 2 and issue["title"] == "odd"
    tracker.update("o-1", priority=1)
    assert json.loads(export_text(tracker))["priority"] == 1, "a new value must replace the kept original"


def test_newer_updated_at_wins(tracker):
    base = {"id": "u-1", "title": "v1", "status": "open", "priority": 2, "issue_type": "task",
            "updated_at": "2025-06-01T12:00:00Z", "labels": ["old"]}
    assert import_jsonl(tracker, jsonl(base)).created == 1
    same = import_jsonl(tracker, jsonl(dict(base, title="same time")))
    assert (same.unchanged, same.updated) == (1, 0) and tracker.get("u-1")["title"] == "v1"
    # 05:00-08:00 is 13:00Z: newer, although it sorts before the stored text.
    newer = dict(base, title="v2", updated_at="2025-06-01T05:00:00-08:00", labels=["new"])
    assert import_jsonl(tracker, jsonl(newer)).updated == 1
    issue = tracker.get("u-1")
    assert (issue["title"], issue["labels"]) == ("v2", ["new"])
    older = dict(base, title="v0", updated_at="2025-06-01T13:00:00+02:00")
    report = import_jsonl(tracker, jsonl(older))
    assert report.skipped_older == 1 and tracker.get("u-1")["title"] == "v2"
    no_stamp = {k: v for k, v in base.items() if k != "updated_at"}
    assert import_jsonl(tracker, jsonl(dict(no_stamp, title="v?"))).updated == 0


def test_import_refreshes_ready_state_of_existing_issues(tracker):
    """An import that changes a blocker's status unblocks what the workspace already held."""
    waiting = tracker.create("waiting")
    blocker = {"id": "x-1", "title": "blocker", "status": "open", "priority": 2, "issue_type": "task",
               "updated_at": "2025-01-01T00:00:00Z"}
    import_jsonl(tracker, jsonl(blocker))
    tracker.add_dependency(waiting["id"], "x-1")
    assert waiting["id"] not in [i["id"] for i in tracker.ready()]
    import_jsonl(tracker, jsonl(dict(blocker, status="closed", updated_at="2025-02-01T00:00:00Z")))
    assert waiting["id"] in [i["id"] for i in tracker.ready()]
    assert tracker.doctor()["ok"]


def test_encode_line_matches_go():
    assert encode_line({"a": "<x> & \u2028", "b": [1, None]}) == '{"a":"\\u003cx\\u003e \\u0026 \\u2028","b":[1,null]}'


def test_newer_import_keeps_comments_written_locally_since_the_export(tmp_path):
    """Replacing an issue with a newer file version merges comments instead of dropping them."""
    t = Tracker(tmp_path / "a.db", create=True)
    issue = t.create("task")
    t.add_comment(issue["id"], "exported comment", dedupe_key="orch:run-1:1")
    buf = io.StringIO()
    export_jsonl(t, buf)
    t.add_comment(issue["id"], "[orch:vote] written after the export", dedupe_key="orch:run-1:2")
    newer = json.loads(buf.getvalue().splitlines()[0])
    newer["title"] = "renamed elsewhere"
    newer["updated_at"] = "2999-01-01T00:00:00Z"
    report = import_jsonl(t, io.StringIO(json.dumps(newer) + "\n"))
    assert report.updated == 1
    assert t.get(issue["id"])["title"] == "renamed elsewhere"
    texts = [c["text"] for c in t.comments(issue["id"])]
    assert texts == ["exported comment", "[orch:vote] written after the export"]
    # Dedupe keys survive, so a checkpoint still cannot be written twice.
    assert t.add_comment(issue["id"], "again", dedupe_key="orch:run-1:1")["text"] == "exported comment"
    assert t.add_comment(issue["id"], "again", dedupe_key="orch:run-1:2")["text"].startswith("[orch:vote]")
