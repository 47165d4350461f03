"""The tracker library: ids, the events audit trail, gates, slots, schema migration, doctor."""

from __future__ import annotations

import io
import json
import math
import re
import sqlite3
from pathlib import Path

import pytest

from tracker import ids
from tracker.db import ready_state_changes
from tracker.schema import SCHEMA_VERSION
from tracker.jsonl import import_jsonl
from tracker.model import normalize_ts, parse_duration
from tracker.store import Tracker


# ----------------------------------------------------------------- ids


def _largest_n_for(length: int) -> int:
    """Largest n whose birthday-bound collision probability at ``length`` is at most 0.25."""
    return math.floor(math.sqrt(2 * 36.0**length * math.log(1 / (1 - 0.25))))


def test_adaptive_length_thresholds():
    assert [_largest_n_for(k) for k in (3, 4, 5, 6, 7)] == [163, 983, 5898, 35389, 212339]
    assert ids.adaptive_length(0) == ids.adaptive_length(1) == 3
    for length in (3, 4, 5, 6, 7):
        n = _largest_n_for(length)
        assert ids.adaptive_length(n) == length
        assert ids.adaptive_length(n + 1) == length + 1
    assert ids.adaptive_length(10**9) == ids.MAX_LENGTH
    lengths = [ids.adaptive_length(n) for n in range(0, 300_000, 997)]
    assert lengths == sorted(lengths)


def test_hash_ids_are_base36_of_the_requested_length():
    for length in range(3, 9):
        made = ids.hash_id("bd", "seed", length)
        assert re.fullmatch(rf"bd-[0-9a-z]{{{length}}}", made)
        assert made == ids.hash_id("bd", "seed", length)
        assert made != ids.hash_id("bd", "seed", length, nonce=1)
    assert ids.child_id("bd-abc", 3) == "bd-abc.3"


def test_ids_of_a_growing_workspace_get_longer(tracker):
    first = tracker.create("first")["id"]
    assert re.fullmatch(r"tt-[0-9a-z]{3}", first)
    with tracker.transaction():
        made = [tracker.create(f"issue {k}")["id"] for k in range(170)]
    hash_lengths = [len(i.split("-", 1)[1]) for i in made]
    assert hash_lengths[0] == 3 and hash_lengths[-1] == 4
    assert hash_lengths == sorted(hash_lengths), "the id length never shrinks as issues are added"
    assert len(set(made)) == len(made)


def test_imported_workspace_sizes_drive_the_id_length(tmp_path):
    tracker = Tracker.init(tmp_path, prefix="big")
    lines = "".join(json.dumps({"id": f"big-{k}", "title": "x", "status": "closed", "priority": 2,
                                "issue_type": "task"}) + "\n" for k in range(1000))
    import_jsonl(tracker, io.StringIO(lines))
    assert re.fullmatch(r"big-[0-9a-z]{5}", tracker.create("after a thousand")["id"])


def test_child_ids_count_up_and_nest(tracker):
    epic = tracker.create("epic", issue_type="epic")["id"]
    one, two = tracker.create("one", parent=epic)["id"], tracker.create("two", parent=epic)["id"]
    assert (one, two) == (f"{epic}.1", f"{epic}.2")
    assert tracker.create("grandchild", parent=one)["id"] == f"{epic}.1.1"
    tracker.create("taken", issue_id=f"{epic}.3")
    assert tracker.create("three", parent=epic)["id"] == f"{epic}.4", "an existing id is skipped"
    assert [c["id"] for c in tracker.children(epic)] == [f"{epic}.1", f"{epic}.2", f"{epic}.4"]
    assert tracker.get(f"{epic}.1.1")["parent"] == one


# ----------------------------------------------------------------- events


def _last_events(tracker, since: int) -> list[dict]:
    return [e for e in tracker.events() if e["id"] > since]


def _top(tracker) -> int:
    return tracker.db.read("SELECT COALESCE(MAX(id), 0) FROM events")[0][0]


MUTATIONS = {
    "create": (lambda t, w: t.create("new one"), "created"),
    "update": (lambda t, w: t.update(w["task"], title="renamed"), "updated"),
    "update status": (lambda t, w: t.update(w["task"], status="blocked"), "status_changed"),
    "claim": (lambda t, w: t.claim(w["task"]), "claimed"),
    "close": (lambda t, w: t.close_issue(w["task"], reason="done"), "closed"),
    "reopen": (lambda t, w: t.reopen(w["closed"]), "reopened"),
    "comment": (lambda t, w: t.add_comment(w["task"], "hello"), "commented"),
    "add dependency": (lambda t, w: t.add_dependency(w["task"], w["other"]), "dependency_added"),
    "remove dependency": (lambda t, w: t.remove_dependency(w["other"], w["closed"]), "dependency_removed"),
    "add label": (lambda t, w: t.add_label(w["task"], "new"), "label_added"),
    "remove label": (lambda t, w: t.remove_label(w["task"], "plan"), "label_removed"),
    "gate create": (lambda t, w: t.gate_create("wait", blocks=w["task"]), "dependency_added"),
    "gate resolve": (lambda t, w: t.gate_resolve(w["gate"]), "closed"),
    "gate check": (lambda t, w: t.gate_check(now="2999-01-01T00:00:00Z"), "closed"),
    "slot set": (lambda t, w: t.slot_set(w["agent"], "hook", w["task"]), "slot_set"),
    "slot clear": (lambda t, w: t.slot_clear(w["agent"], "role"), "slot_cleared"),
    "agent state": (lambda t, w: t.agent_state(w["agent"], "working"), "agent_state"),
    "ensure agent": (lambda t, w: t.ensure_agent("worker-2"), "created"),
    "ensure role": (lambda t, w: t.ensure_role("critic"), "created"),
    "import": (lambda t, w: import_jsonl(t, io.StringIO('{"id":"tt-imp","title":"i","priority":1}\n')), "imported"),
}


@pytest.fixture
def small(tracker):
    task = tracker.create("task", labels=["plan"])["id"]
    other = tracker.create("other")["id"]
    closed = tracker.create("closed")["id"]
    tracker.add_dependency(other, closed)
    tracker.close_issue(closed)
    gate = tracker.gate_create("timer", blocks=other, await_type="timer", timeout_ns=parse_duration("1h"))["id"]
    agent = tracker.ensure_agent("worker-1")["id"]
    role = tracker.ensure_role("proposer")["id"]
    tracker.slot_set(agent, "role", role)
    return {"task": task, "other": other, "closed": closed, "gate": gate, "agent": agent}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_every_mutation_writes_events(small, tracker, name):
    call, event_type = MUTATIONS[name]
    since = _top(tracker)
    call(tracker, small)
    written = _last_events(tracker, since)
    assert written, f"{name} wrote no event"
    assert event_type in {e["event_type"] for e in written}
    for event in written:
        assert event["actor"] == "tester" and event["issue_id"]
        assert normalize_ts(event["created_at"]) is not None


def test_update_events_carry_old_and_new_values(small, tracker):
    since = _top(tracker)
    tracker.update(small["task"], priority=0, title="T", notes="n")
    events = {e["field"]: e for e in _last_events(tracker, since)}
    assert set(events) == {"priority", "title", "notes"}
    assert (events["priority"]["old_value"], events["priority"]["new_value"]) == ("2", "0")
    assert (events["title"]["old_value"], events["title"]["new_value"]) == ("task", "T")
    assert events["notes"]["old_value"] is None
    since = _top(tracker)
    tracker.update(small["task"], priority=0)
    assert _last_events(tracker, since) == [], "an update that changes nothing writes nothing"
    claim = tracker.claim(small["task"], actor="zed")
    assert claim["assignee"] == "zed"
    fields = {e["field"]: (e["old_value"], e["new_value"]) for e in tracker.events(small["task"])[-2:]}
    assert fields == {"status": ("open", "in_progress"), "assignee": (None, "zed")}


# ----------------------------------------------------------------- behaviour


def test_idempotent_create_and_deduplicated_comments(tracker):
    first = tracker.create("once", idempotency_key="run-1:create")
    assert tracker.create("once again", idempotency_key="run-1:create")["id"] == first["id"]
    c1 = tracker.add_comment(first["id"], "[orch:vote] agree", dedupe_key="run-1:7")
    c2 = tracker.add_comment(first["id"], "[orch:vote] agree", dedupe_key="run-1:7")
    assert c1 == c2 and len(tracker.comments(first["id"])) == 1
    tracker.add_comment(first["id"], "other", dedupe_key="run-2:1")
    assert tracker.comment_keys("run-1:") == {"run-1:7"}


def test_claim_is_compare_and_set(tracker):
    task = tracker.create("t")["id"]
    assert tracker.claim(task, actor="ann")["assignee"] == "ann"
    assert tracker.claim(task, actor="ann")["status"] == "in_progress", "re-claiming one's own issue is fine"
    assigned = tracker.create("for bob", assignee="bob")["id"]
    with pytest.raises(Exception):
        tracker.claim(assigned, actor="ann")
    assert tracker.claim(assigned, actor="bob")["status"] == "in_progress"


def test_timer_gates_resolve_when_due(tracker):
    task = tracker.create("t")["id"]
    gate = tracker.gate_create("cool-off", blocks=task, await_type="timer", timeout_ns=parse_duration("2h"))
    assert gate["timeout"] == 2 * 3600 * 10**9
    assert tracker.gate_check(now=gate["created_at"]) == []
    later = normalize_ts(gate["created_at"]).replace(gate["created_at"][:4], str(int(gate["created_at"][:4]) + 1))
    resolved = tracker.gate_check(now=later)
    assert [g["id"] for g in resolved] == [gate["id"]] and resolved[0]["status"] == "closed"
    assert task in [i["id"] for i in tracker.ready()]


def test_parse_duration():
    assert parse_duration("90s") == 90 * 10**9
    assert parse_duration("1h30m") == 90 * 60 * 10**9
    assert parse_duration("2d") == 2 * 86400 * 10**9
    assert parse_duration("250ms") == 250 * 10**6
    assert parse_duration("15") == 15 * 10**9
    for bad in ("", "soon", "5 minutes", "1h-2m"):
        with pytest.raises(Exception):
            parse_duration(bad)


def test_schema_1_database_is_migrated_on_open(tmp_path):
    """A database written before the kept ready state existed gains it, computed, on first open."""
    tracker = Tracker.init(tmp_path, prefix="mg")
    blocker = tracker.create("blocker")["id"]
    waiting = tracker.create("waiting")["id"]
    tracker.add_dependency(waiting, blocker)
    path = tracker.path
    tracker.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE tallies")  # version 8's, like its index
    conn.execute("DROP INDEX issues_ready_deferred")
    conn.execute("DROP INDEX issues_ready_order")
    conn.execute("DROP INDEX issues_ready_by_id")
    conn.execute("ALTER TABLE issues DROP COLUMN blocked")
    conn.execute("ALTER TABLE issues DROP COLUMN defer_eff")
    conn.execute("UPDATE config SET value = '1' WHERE key = 'schema_version'")
    conn.execute("DROP TABLE schema_version")  # files of schema 1 and 2 kept the version in config only
    conn.commit()
    conn.close()
    reopened = Tracker(path)
    assert [i["id"] for i in reopened.ready()] == [blocker]
    assert reopened.get_config("schema_version") == str(SCHEMA_VERSION)
    assert reopened.doctor()["ok"]


def test_schema_4_database_gains_the_open_order_index_and_list_walks_it(tmp_path):
    """Version 5 adds the index bd's 50-issue `list` walks instead of sorting every open issue."""
    tracker = Tracker.init(tmp_path, prefix="mg")
    for k in range(60):
        tracker.create(f"issue {k}", priority=k % 5)
    path = tracker.path
    tracker.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX issues_open_order")
    conn.execute("DELETE FROM schema_version WHERE version >= 5")
    conn.execute("UPDATE config SET value = '4' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with Tracker(path) as reopened:
        assert reopened.get_config("schema_version") == str(SCHEMA_VERSION)
        listed = reopened.list(limit=50)
        assert [i["id"] for i in listed] == [i["id"] for i in reopened.list()][:50]
        plan = " ".join(str(tuple(row)) for row in reopened.db.conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM issues i WHERE i.status NOT IN ('closed','tombstone')"
            " ORDER BY i.priority, i.created_sort, i.id LIMIT 50").fetchall())
        assert "issues_open_order" in plan and "TEMP B-TREE" not in plan


def test_doctor_finds_and_fixes_a_stale_ready_state(tracker):
    blocker = tracker.create("blocker")["id"]
    waiting = tracker.create("waiting")["id"]
    tracker.add_dependency(waiting, blocker)
    with tracker.transaction() as c:  # what a writer that bypassed the library would leave
        c.execute("UPDATE issues SET blocked = 0")
    report = tracker.doctor()
    assert not report["ok"]
    assert [c for c in report["checks"] if c["name"] == "ready_state"][0]["ok"] is False
    tracker.doctor(fix=True)
    assert tracker.doctor()["ok"] and ready_state_changes(tracker.db.conn) == []
    assert [i["id"] for i in tracker.ready()] == [blocker]


def test_init_reads_prefix_from_beads_config(tmp_path):
    (tmp_path / ".beads").mkdir()
    (tmp_path / ".beads" / "config.yaml").write_text('sync-branch: main\nissue-prefix: "web"\n')
    tracker = Tracker.init(tmp_path)
    assert tracker.prefix == "web" and tracker.create("x")["id"].startswith("web-")
    assert Tracker.init(tmp_path, prefix="api", force=True).prefix == "api"  # a live workspace: --force


def test_where_and_status(tracker):
    tracker.create("a")
    closed = tracker.create("b")["id"]
    tracker.close_issue(closed)
    assert tracker.where()["prefix"] == "tt"
    summary = tracker.status()["summary"]
    assert (summary["total_issues"], summary["open_issues"], summary["closed_issues"], summary["ready_issues"]) == (
        2, 1, 1, 1)


def test_delete_makes_a_tombstone_that_is_kept_and_exported(tracker):
    from tracker.errors import ConflictError
    from tracker.jsonl import iter_export

    blocker = tracker.create("blocker")["id"]
    waiting = tracker.create("waiting")["id"]
    tracker.add_dependency(waiting, blocker)
    with pytest.raises(ConflictError):
        tracker.delete(blocker)  # something still depends on it
    gone = tracker.delete(blocker, reason="duplicate", force=True)
    assert gone["status"] == "tombstone" and gone["delete_reason"] == "duplicate"
    assert gone["original_type"] == "task" and gone["deleted_by"] == "tester"
    assert [i["id"] for i in tracker.ready()] == [waiting]  # its dependent is free
    assert blocker not in [i["id"] for i in tracker.list()]
    exported = {i["id"]: i for i in iter_export(tracker)}
    assert exported[blocker]["status"] == "tombstone" and exported[blocker]["deleted_at"]
    assert tracker.events(blocker)[-1]["event_type"] == "deleted"
    with pytest.raises(ConflictError):
        tracker.delete(blocker)


def test_sqlite_urls_name_relative_and_absolute_files(tmp_path, monkeypatch):
    from tracker.dialect import display_target, is_url, sqlite_path

    monkeypatch.chdir(tmp_path)
    assert sqlite_path("sqlite:///work/mesh.db") == Path("work/mesh.db")
    assert sqlite_path("sqlite:////abs/mesh.db") == Path("/abs/mesh.db")
    with Tracker("sqlite:///rel.db", create=True) as t:
        t.create("x")
    assert (tmp_path / "rel.db").exists()
    assert is_url("postgresql://u@h/db") and not is_url("sqlite:///x") and not is_url(Path("x"))
    assert display_target("postgresql://u:s3cret@h:5432/db?password=p") == "postgresql://u:***@h:5432/db?password=***"


def test_a_reader_knows_the_default_prefix_the_writes_use():
    from tracker import ids, reader

    assert reader.DEFAULT_PREFIX == ids.DEFAULT_PREFIX
