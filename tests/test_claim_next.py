"""``claim_next`` on each engine: the same issue, the same answer, the same trail.

On PostgreSQL it is one statement (tracker/ready.py ``_claim_next_in_one``); on SQLite a
read then a compare-and-set. Both must pick the first ready issue the claimer may take (ready
order; not one assigned to someone else; not one it was told to skip), answer exactly what
``get`` answers afterwards, write the ``claimed`` events, drop the kept originals of status and
assignee, and keep to a scope (label, type, parent epic with its descendants).
"""

from __future__ import annotations

import json

from tracker.jsonl import import_jsonl


def _events(tracker, issue_id: str) -> list[tuple]:
    return [(e["event_type"], e["field"], e["old_value"], e["new_value"]) for e in tracker.events(issue_id)
            if e["event_type"] == "claimed"]


def test_claim_next_answers_what_get_answers_and_writes_the_trail(tracker):
    first = tracker.create("first", labels=["plan:x", "area:core"], priority=1)
    tracker.create("later", labels=["plan:x"], priority=2)
    tracker.add_comment(first["id"], "a note")
    other = tracker.create("elsewhere", labels=["plan:y"], priority=0)
    tracker.add_dependency(other["id"], first["id"], "related")
    claimed = tracker.claim_next("ann", labels=["plan:x"])
    assert claimed == tracker.get(first["id"])
    assert claimed["status"] == "in_progress" and claimed["assignee"] == "ann"
    assert claimed["labels"] == ["plan:x", "area:core"]
    assert claimed["comment_count"] == 1 and claimed["dependent_count"] == 1
    assert _events(tracker, first["id"]) == [("claimed", "status", "open", "in_progress"),
                                             ("claimed", "assignee", None, "ann")]


def test_claim_next_skips_work_assigned_to_someone_else_and_the_skip_list(tracker):
    a = tracker.create("a", labels=["plan:x"], priority=0)
    tracker.update(a["id"], assignee="bob")
    b = tracker.create("b", labels=["plan:x"], priority=1)
    c = tracker.create("c", labels=["plan:x"], priority=2)
    assert tracker.claim_next("ann", labels=["plan:x"], skip=[b["id"]])["id"] == c["id"]
    assert tracker.claim_next("ann", labels=["plan:x"])["id"] == b["id"]
    assert tracker.claim_next("ann", labels=["plan:x"]) is None
    assert tracker.claim_next("bob", labels=["plan:x"])["id"] == a["id"]  # one's own assigned work


def test_claim_next_keeps_to_the_type_and_the_epics_descendants(tracker):
    epic = tracker.create("epic", issue_type="epic")
    outside = tracker.create("outside", priority=0)
    inside = tracker.create("inside", priority=3, parent=epic["id"])
    bug = tracker.create("a bug", issue_type="bug", priority=0, parent=epic["id"])
    assert tracker.claim_next("ann", parent=epic["id"], issue_type="task")["id"] == inside["id"]
    assert tracker.claim_next("ann", parent=epic["id"])["id"] == bug["id"]
    assert tracker.claim_next("ann", parent=epic["id"]) is None
    assert tracker.get(outside["id"])["status"] == "open"


def test_claim_next_drops_the_kept_originals_of_status_and_assignee(tracker, tmp_path):
    line = {"id": "tt-kept", "title": "imported", "status": "open", "priority": 2, "issue_type": "task",
            "labels": ["plan:x"], "assignee": None, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "custom_field": {"keep": [1, 2]}}
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(line) + "\n")
    import_jsonl(tracker, source)
    claimed = tracker.claim_next("ann", labels=["plan:x"])
    assert claimed["id"] == "tt-kept" and claimed == tracker.get("tt-kept")
    assert claimed.get("custom_field") == {"keep": [1, 2]}  # an unknown field an import kept stays
    assert "assignee" in claimed and claimed["assignee"] == "ann"
    [(kept,)] = tracker.db.read("SELECT extra FROM issues WHERE id = 'tt-kept'")
    assert json.loads(kept) == {"custom_field": {"keep": [1, 2]}}  # the import's null assignee is gone


def test_claim_next_on_nothing_ready_changes_nothing(tracker):
    blocker = tracker.create("blocker", labels=["plan:z"])
    blocked = tracker.create("blocked", labels=["plan:x"])
    tracker.add_dependency(blocked["id"], blocker["id"], "blocks")
    assert tracker.claim_next("ann", labels=["plan:x"]) is None
    assert tracker.get(blocked["id"])["status"] == "open" and _events(tracker, blocked["id"]) == []


def test_claim_by_id_takes_open_work_once_and_says_why_it_cannot(tracker):
    import pytest

    from tracker.errors import ConflictError, NotFoundError

    issue = tracker.create("one", labels=["plan:x"])
    claimed = tracker.claim(issue["id"], "ann")
    assert claimed == tracker.get(issue["id"]) and claimed["assignee"] == "ann"
    assert tracker.claim(issue["id"], "ann")["status"] == "in_progress"  # one's own claim again
    with pytest.raises(ConflictError, match="cannot be claimed: it is in_progress by ann"):
        tracker.claim(issue["id"], "bob")
    closed = tracker.create("two")
    tracker.close_issue(closed["id"], reason="done")
    with pytest.raises(ConflictError, match="it is closed$"):
        tracker.claim(closed["id"], "bob")
    with pytest.raises(NotFoundError):
        tracker.claim("tt-nope", "bob")
    assert _events(tracker, issue["id"]) == [("claimed", "status", "open", "in_progress"),
                                             ("claimed", "assignee", None, "ann")]


def test_add_comment_writes_once_per_dedupe_key_and_refuses_an_unknown_issue(tracker):
    import pytest

    from tracker.errors import NotFoundError

    issue = tracker.create("one")
    first = tracker.add_comment(issue["id"], "checkpoint 1", author="mesh/proposer", dedupe_key="orch:run-1:1")
    again = tracker.add_comment(issue["id"], "checkpoint 1, written again", dedupe_key="orch:run-1:1")
    assert again == first and first["author"] == "mesh/proposer" and first["text"] == "checkpoint 1"
    plain = tracker.add_comment(issue["id"], "a note")
    assert [c["text"] for c in tracker.comments(issue["id"])] == ["checkpoint 1", "a note"]
    assert plain["author"] == "tester"
    assert [e["new_value"] for e in tracker.events(issue["id"]) if e["event_type"] == "commented"] == \
        ["checkpoint 1", "a note"]
    assert tracker.get(issue["id"])["updated_at"] >= issue["updated_at"]
    with pytest.raises(NotFoundError):
        tracker.add_comment("tt-nope", "lost", dedupe_key="orch:run-1:1")
