"""``mesh tracker --json`` against bd v0.50.3's JSON shapes, on each engine.

The expected shapes are read off bd's Go structs and the ``outputJSON`` calls of
its commands at tag v0.50.3 (cited beside each); beads clients parse exactly
these: arrays vs objects, field names, the ``dependencies``/``dependents``
nesting of ``show``, ``stats`` counts, error objects. The global flags clients
pass (before or after the subcommand) are exercised on the way.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from click.testing import CliRunner

from tracker.cli import tracker_group
from tracker.store import Tracker

# internal/types/types.go:15-132, the json tags of types.Issue.
ISSUE_FIELDS = frozenset("""
id title description design acceptance_criteria notes spec_id status priority issue_type assignee owner
estimated_minutes created_at created_by updated_at closed_at close_reason closed_by_session due_at defer_until
external_ref source_system metadata compaction_level compacted_at compacted_at_commit original_size labels
dependencies comments deleted_at deleted_by delete_reason original_type sender ephemeral wisp_type pinned
is_template bonded_from creator validations quality_score crystallizes await_type await_id timeout waiters holder
source_formula source_location hook_bead role_bead agent_state last_activity role_type rig mol_type work_type
event_kind actor target payload
""".split())
# Fields without omitempty (types.go:17, 21, 30, 39, 41), plus status and issue_type, which are never empty.
ISSUE_ALWAYS = {"id", "title", "status", "priority", "issue_type", "created_at", "updated_at"}
COUNTS = {"dependency_count", "dependent_count", "comment_count"}  # types.go:726 IssueWithCounts
DEPENDENCY_FIELDS = {"issue_id", "depends_on_id", "type", "created_at", "created_by", "metadata", "thread_id"}  # :698
COMMENT_FIELDS = {"id", "issue_id", "author", "text", "created_at"}  # types.go:880
STATISTICS_FIELDS = {  # types.go:947-958
    "total_issues", "open_issues", "in_progress_issues", "closed_issues", "blocked_issues", "deferred_issues",
    "ready_issues", "tombstone_issues", "pinned_issues", "epics_eligible_for_closure", "average_lead_time_hours",
}


@pytest.fixture
def ws(tmp_path, db_target):
    """A tracker (file or PostgreSQL database) with an epic, two children where B waits on A,
    a closed issue and a comment; returns (db, ids)."""
    t = Tracker.init(tmp_path, prefix="sh", actor="shaper", db_path=db_target)
    try:
        epic = t.create("Epic", issue_type="epic", priority=1)
        a = t.create("A", parent=epic["id"], labels=["ui", "p"], description="do A", assignee="ann",
                     external_ref="gh-9", priority=0)
        b = t.create("B", parent=epic["id"], labels=["p"])
        t.add_dependency(b["id"], a["id"], "blocks")
        t.add_comment(b["id"], "waiting on A", author="bob")
        done = t.create("Done")
        t.close_issue(done["id"], reason="shipped")
        ids = {"epic": epic["id"], "a": a["id"], "b": b["id"], "done": done["id"]}
        db = db_target or str(t.path)
    finally:
        t.close()
    return db, ids


def bd(db: str, *args: str, ok: bool = True):
    """``bd ARGS`` as a client runs it: global flags mixed in, settings as the shim passes them."""
    result = CliRunner().invoke(tracker_group, list(args), obj={"db": db, "actor": "shaper"})
    if ok:
        assert result.exit_code == 0, (result.output, result.stderr)
    return result


def bd_json(db: str, *args: str):
    return json.loads(bd(db, *args).stdout)


def assert_issue(obj: dict, *, extra: set[str] = frozenset()) -> None:
    """``obj`` is a types.Issue (plus ``extra`` keys) with JSON types bd would print."""
    assert ISSUE_ALWAYS <= set(obj) <= ISSUE_FIELDS | extra, set(obj) - ISSUE_FIELDS - extra
    assert isinstance(obj["priority"], int) and isinstance(obj["id"], str)
    for stamp in ("created_at", "updated_at", "closed_at"):
        if stamp in obj:
            datetime.fromisoformat(obj[stamp].replace("Z", "+00:00"))
    assert all(isinstance(label, str) for label in obj.get("labels", []))


def test_show_is_an_array_with_whole_issues_in_dependencies_and_dependents(ws):
    db, ids = ws
    # cmd/bd/show.go:319 outputJSON(allDetails): an array even for one id; types.go:735 IssueDetails.
    [b] = bd_json(db, "show", ids["b"], "--json")
    assert_issue(b, extra={"dependents", "parent"})
    assert b["parent"] == ids["epic"] and b["labels"] == ["p"]
    # types.go:721: each dependency is the other issue plus dependency_type, ordered by priority.
    assert [(d["id"], d["dependency_type"]) for d in b["dependencies"]] == [(ids["a"], "blocks"),
                                                                           (ids["epic"], "parent-child")]
    for linked in b["dependencies"]:
        assert_issue(linked, extra={"dependency_type"})
    assert set(b["comments"][0]) == COMMENT_FIELDS and b["comments"][0]["author"] == "bob"
    # A comment id is a string (bd >= 1.0 and beads-mcp >= 1.3), where v0.50.3 printed an int64.
    assert b["comments"][0]["id"].isdigit()
    [a] = bd_json(db, "--json", "show", ids["a"])
    assert [(d["id"], d["dependency_type"]) for d in a["dependents"]] == [(ids["b"], "blocks")]
    assert "comments" not in a and a["external_ref"] == "gh-9"
    both = bd_json(db, "show", ids["a"], ids["b"], "--json")
    assert [x["id"] for x in both] == [ids["a"], ids["b"]]


def test_list_and_ready_elements_are_issues_with_counts(ws):
    db, ids = ws
    listed = bd_json(db, "list", "--json", "--tree=false")  # beads-ui's call
    assert [i["id"] for i in listed] == [ids["a"], ids["epic"], ids["b"]]
    for item in listed:
        assert_issue(item, extra=COUNTS)
        assert COUNTS <= set(item)
    # cmd/bd/list.go:713: list carries the raw dependency records.
    b = next(i for i in listed if i["id"] == ids["b"])
    assert (b["dependency_count"], b["comment_count"]) == (2, 1)
    assert all(set(d) <= DEPENDENCY_FIELDS for d in b["dependencies"])
    # cmd/bd/ready.go:150: ready's IssueWithCounts carries no dependency records.
    ready = bd_json(db, "ready", "--limit", "1000", "--json")
    assert [i["id"] for i in ready] == [ids["a"], ids["epic"]]
    for item in ready:
        assert_issue(item, extra=COUNTS)
        assert "dependencies" not in item
    assert bd_json(db, "ready", "--json", "--unassigned") == [r for r in ready if r["id"] != ids["a"]]
    assert [i["id"] for i in bd_json(db, "ready", "--json", "--priority", "0", "--label-any", "ui,zz")] == [ids["a"]]
    assert [i["id"] for i in bd_json(db, "list", "--json", "--title", "b", "--no-assignee")] == [ids["b"]]
    assert [i["id"] for i in bd_json(db, "list", "--json", "--status", "closed")] == [ids["done"]]


def test_writes_print_bd_issue_objects_and_arrays(ws):
    db, ids = ws
    # cmd/bd/create.go:672 outputJSON(issue): one object, no counts or dependency records.
    created = bd_json(db, "create", "C", "-t", "bug", "-p", "1", "--deps", f"{ids['a']},related:{ids['b']}",
                      "--external-ref", "jira-1", "-l", "x", "--json")
    assert_issue(created)
    assert created["labels"] == ["x"] and created["external_ref"] == "jira-1"
    # cmd/bd/create.go: StringSliceP("labels", "l"): bd's long name is --labels, comma-separated.
    labelled = bd_json(db, "create", "D", "--labels", "y,z", "--json")
    assert labelled["labels"] == ["y", "z"]
    # cmd/bd/update.go: --add-label, --remove-label, --set-labels (repeatable, comma-separated).
    [moved] = bd_json(db, "update", labelled["id"], "--add-label", "a, b", "--remove-label", "y,absent", "--json")
    assert sorted(moved["labels"]) == ["a", "b", "z"]
    [reset] = bd_json(db, "update", labelled["id"], "--set-labels", "c,c", "--add-label", "d", "--json")
    assert sorted(reset["labels"]) == ["c", "d"]
    [cleared] = bd_json(db, "update", labelled["id"], "--set-labels", "", "--json")
    assert "labels" not in cleared or cleared["labels"] in ([], None)
    # update --parent: the parent-child edge moves ('' removes it), the id stays.
    [moved] = bd_json(db, "update", labelled["id"], "--parent", ids["a"], "--json")
    assert moved["id"] == labelled["id"] and bd_json(db, "show", labelled["id"], "--json")[0]["parent"] == ids["a"]
    bd_json(db, "update", labelled["id"], "--parent", ids["b"], "--json")
    [shown] = bd_json(db, "show", labelled["id"], "--json")
    assert shown["parent"] == ids["b"]
    assert [(d["id"], d["dependency_type"]) for d in shown["dependencies"]] == [(ids["b"], "parent-child")]
    bd_json(db, "update", labelled["id"], "--parent", "", "--json")
    assert "parent" not in bd_json(db, "show", labelled["id"], "--json")[0]
    [shown] = bd_json(db, "show", created["id"], "--json")
    assert {(d["id"], d["dependency_type"]) for d in shown["dependencies"]} == {(ids["a"], "blocks"),
                                                                               (ids["b"], "related")}
    # cmd/bd/update.go:402, close.go:251, reopen.go:71: arrays of types.Issue.
    [claimed] = bd_json(db, "update", created["id"], "--claim", "--json", "--actor", "claimer")
    assert_issue(claimed)
    assert (claimed["status"], claimed["assignee"]) == ("in_progress", "claimer")
    [released] = bd_json(db, "reopen", created["id"], "--json")
    assert released["status"] == "open"
    [closed] = bd_json(db, "close", created["id"], "--reason", "fixed", "--force", "--json")
    assert_issue(closed)
    assert closed["close_reason"] == "fixed"
    [reopened] = bd_json(db, "reopen", created["id"], "--reason", "again", "--json")
    assert reopened["status"] == "open" and "closed_at" not in reopened
    assert [c["text"] for c in bd_json(db, "comments", created["id"], "--json")] == ["again"]
    # dep.go:286 and :470.
    assert bd_json(db, "dep", "add", ids["epic"], created["id"], "--type", "related", "--json") == {
        "status": "added", "issue_id": ids["epic"], "depends_on_id": created["id"], "type": "related"}
    assert bd_json(db, "dep", "remove", ids["epic"], created["id"], "--json") == {
        "status": "removed", "issue_id": ids["epic"], "depends_on_id": created["id"]}
    # comments.go:139 outputJSON(comment), by way of bd's older top-level alias.
    comment = bd_json(db, "comment", created["id"], "done", "--author", "zed", "--json")
    assert set(comment) == COMMENT_FIELDS and (comment["author"], comment["text"]) == ("zed", "done")
    noted = bd_json(db, "note", created["id"], "n1", "--json")
    assert bd_json(db, "note", created["id"], "n2", "--json")["notes"] == "n1\nn2" and noted["notes"] == "n1"


def test_stats_blocked_epic_status_and_version(ws):
    db, ids = ws
    # status.go:19 StatusOutput{summary}; bd has recent_activity from git, left out here as with --no-activity.
    stats = bd_json(db, "stats", "--json")
    assert set(stats) == {"summary"} and set(stats["summary"]) == STATISTICS_FIELDS
    summary = stats["summary"]
    assert (summary["total_issues"], summary["open_issues"], summary["closed_issues"]) == (4, 3, 1)
    assert (summary["blocked_issues"], summary["ready_issues"]) == (1, 2)
    assert isinstance(summary["average_lead_time_hours"], float) and summary["average_lead_time_hours"] >= 0
    assert bd_json(db, "status", "--json") == stats
    # ready.go:226 outputJSON(blocked), types.go:919 BlockedIssue.
    [blocked] = bd_json(db, "blocked", "--json")
    assert_issue(blocked, extra={"blocked_by_count", "blocked_by"})
    assert (blocked["id"], blocked["blocked_by_count"], blocked["blocked_by"]) == (ids["b"], 1, [ids["a"]])
    assert bd_json(db, "blocked", "--parent", ids["done"], "--json") == []
    # epic.go:42, types.go:1106 EpicStatus.
    [row] = bd_json(db, "epic", "status", "--json")
    assert set(row) == {"epic", "total_children", "closed_children", "eligible_for_close"}
    assert (row["epic"]["id"], row["total_children"], row["closed_children"], row["eligible_for_close"]) == (
        ids["epic"], 2, 0, False)
    # version.go:31 (JSON) and :44 (text); clients read the first X.Y.Z.
    assert bd_json(db, "version", "--json")["version"] == "0.50.3"
    assert bd(db, "version").stdout.startswith("bd version 0.50.3 (mesh ")
    assert bd(db, "--version").stdout == bd(db, "version").stdout


def test_errors_are_objects_and_global_flags_are_accepted_anywhere(ws):
    db, ids = ws
    missing = bd(db, "show", "sh-nope", "--json", ok=False)
    assert missing.exit_code == 1 and missing.stdout == ""
    assert json.loads(missing.stderr) == {"error": "no issue 'sh-nope'", "code": "not_found"}
    # beads-mcp appends --actor/--no-auto-flush/--no-auto-import; beadsflow and beads-ui put
    # --no-daemon/--sandbox first; bd's persistent flags go anywhere.
    [shown] = bd_json(db, "--no-daemon", "--sandbox", "show", ids["a"], "--actor", "x", "--no-auto-flush",
                      "--no-auto-import", "--allow-stale", "-q", "--lock-timeout", "5s", "--json")
    assert shown["id"] == ids["a"]
    assert bd(db, "dep", "--json", "add", ids["done"], ids["a"]).stdout.startswith("{")
    refused = bd(db, "--readonly", "create", "nope", "--json", ok=False)
    assert refused.exit_code == 1 and json.loads(refused.stderr)["code"] == "readonly"
    assert bd(db, "list", "--readonly", "--json").exit_code == 0
    assert bd(db, "--no-db", "list", ok=False).exit_code == 2  # JSONL-only mode is not offered


def test_maintenance_reports_for_beads_mcp_admin(ws):
    db, ids = ws
    validate = bd_json(db, "doctor", "--check=validate", "--json")  # doctor_validate.go:42
    assert set(validate) == {"path", "checks", "overall_ok"} and validate["overall_ok"] is True
    assert all({"name", "status", "message"} <= set(c) for c in validate["checks"])
    bd(db, "create", "test-1 leftover")
    polluted = bd_json(db, "doctor", "--check=pollution", "--json")  # doctor_pollution.go:60
    assert polluted["polluted_count"] == 1 and polluted["issues"][0]["title"] == "test-1 leftover"
    # A heuristic's warning leaves the workspace usable: exit 0, as bd; the check names the issue.
    warned = bd_json(db, "doctor", "--check=validate", "--json")
    assert warned["overall_ok"] is True
    [check] = [c for c in warned["checks"] if c["name"] == "Test Pollution"]
    assert check["status"] == "warning" and polluted["issues"][0]["id"] in check["message"]
    # The names beads-mcp 0.50 calls for the same two reports.
    assert bd_json(db, "detect-pollution", "--json") == polluted
    assert bd_json(db, "validate", "--checks", "orphans", "--json")["overall_ok"] is True
    clean = bd(db, "doctor", "--check=pollution", "--clean", "--yes", "--json", ok=False)
    assert json.loads(clean.stderr)["code"] == "unsupported"
    assert bd_json(db, "repair-deps", "--json") == {"orphans_found": 0, "orphans": [], "fixed": 0}
    info = bd_json(db, "info", "--schema", "--json")
    assert info["schema"]["config"] == {"issue_prefix": "sh"} and info["issue_count"] == 5
    assert "issues" in info["schema"]["tables"] and info["schema"]["detected_prefix"] == "sh"
    inspect = bd_json(db, "migrate", "--inspect", "--json")
    assert inspect["current_state"]["db_exists"] is True and inspect["warnings"] == []
    assert "bd ready" in bd(db, "quickstart").stdout


def test_bd_shim_and_mesh_bd_read_bds_environment(tmp_path, monkeypatch):
    from orchestrator.cli.main import cli
    from tracker.bd_shim import bd_settings

    assert bd_settings({"BEADS_DB": "/a/x.db", "BEADS_DIR": "/b/.beads"})["db"] == "/a/x.db"
    assert bd_settings({"BEADS_DIR": "/b/.beads"})["db"] == "/b/.beads/mesh.db"
    assert bd_settings({"BD_ACTOR": "bd-one", "BEADS_ACTOR": "mcp-one"})["actor"] == "bd-one"
    assert bd_settings({"BEADS_ACTOR": "mcp-one"}, actor="typed")["actor"] == "typed"
    assert bd_settings({}) == {"db": None, "actor": None}  # then mesh's own MESH_DB / MESH_ACTOR

    with Tracker.init(tmp_path / "one", prefix="one") as t:
        one = t.create("in one")["id"]
    with Tracker.init(tmp_path / "two", prefix="two") as t:
        t.create("in two")
    monkeypatch.delenv("MESH_DB", raising=False)
    monkeypatch.setenv("BEADS_DIR", str(tmp_path / "one" / ".beads"))
    monkeypatch.setenv("BD_ACTOR", "bd-actor")
    shown = CliRunner().invoke(cli, ["bd", "--no-daemon", "--json", "show", one])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)[0]["id"] == one
    created = CliRunner().invoke(cli, ["bd", "create", "by env", "--json"])
    assert json.loads(created.stdout)["created_by"] == "bd-actor"
    # mesh --db typed on the command line wins over bd's environment.
    listed = CliRunner().invoke(cli, ["--db", str(tmp_path / "two" / ".beads" / "mesh.db"), "--actor", "typed",
                                      "bd", "create", "typed", "--json"])
    assert json.loads(listed.stdout)["id"].startswith("two-") and json.loads(listed.stdout)["created_by"] == "typed"
    assert "bd [OPTIONS] COMMAND" in CliRunner().invoke(cli, ["bd", "--help"]).stdout
