"""What bd v0.50.3 users type by hand, on each engine: ids without their prefix, ``label`` on
several issues and its listings, ``list --sort``, closing a closed issue, ``dep list``/``tree``,
``search``, ``count``, ``stale``, ``children`` and ``duplicates``, each against bd's JSON
(the Go code cited beside each: cmd/bd/*.go and internal/ at tag v0.50.3)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from tests.test_bd_shapes import COUNTS, assert_issue, bd, bd_json, ws  # noqa: F401  (ws is a fixture)
from tracker.bd_views import resolve_id, stale
from tracker.store import Tracker

TREE_NODE = {"depth", "parent_id", "truncated"}  # internal/types/types.go:926 TreeNode


def short(issue_id: str) -> str:
    return issue_id.split("-", 1)[1]


def test_ids_resolve_without_their_prefix_as_bd_resolves_them(ws):
    db, ids = ws
    # internal/utils/id_parser.go:40: the hash alone, a child's hash, a unique part of a hash.
    assert bd_json(db, "show", short(ids["a"]), "--json")[0]["id"] == ids["a"]
    assert bd_json(db, "show", short(ids["epic"]), short(ids["b"]), "--json")[1]["id"] == ids["b"]
    updated = bd_json(db, "update", short(ids["a"]), "--priority", "3", "--json")
    assert (updated[0]["id"], updated[0]["priority"]) == (ids["a"], 3)
    with Tracker.open(db) as t:
        assert resolve_id(t, ids["a"]) == ids["a"]
        assert resolve_id(t, short(ids["done"])) == ids["done"]
    assert bd_json(db, "comments", "add", short(ids["a"]), "hi", "--json")["issue_id"] == ids["a"]
    missing = bd(db, "show", "zzzz", "--json", ok=False)
    assert missing.exit_code == 1 and json.loads(missing.stderr)["code"] == "not_found"


def test_an_ambiguous_short_id_is_refused(tmp_path, db_target):
    with Tracker.init(tmp_path, prefix="am", actor="t", db_path=db_target) as t:
        first = t.create("one", issue_id="am-abc1")
        t.create("two", issue_id="am-abc2")
        db = db_target or str(t.path)
        assert resolve_id(t, "abc1") == first["id"]
    res = bd(db, "show", "abc", "--json", ok=False)
    assert res.exit_code == 1 and json.loads(res.stderr)["code"] == "ambiguous_id"
    assert "am-abc1" in json.loads(res.stderr)["error"] and "am-abc2" in json.loads(res.stderr)["error"]


def test_label_add_and_remove_take_several_issues_and_print_an_array(ws):
    db, ids = ws
    # cmd/bd/label.go:62 (add [issue-id...] [label]) and :36 (one {status, issue_id, label} per issue).
    added = bd_json(db, "label", "add", short(ids["a"]), ids["b"], "urgent", "--json")
    assert added == [{"status": "added", "issue_id": ids["a"], "label": "urgent"},
                     {"status": "added", "issue_id": ids["b"], "label": "urgent"}]
    # label.go:139: an array of strings, [] when none.
    assert bd_json(db, "label", "list", ids["a"], "--json") == ["ui", "p", "urgent"]
    assert bd_json(db, "label", "list", ids["done"], "--json") == []
    # label.go:165: [{label, count}] sorted by label, over every issue.
    assert bd_json(db, "label", "list-all", "--json") == [
        {"label": "p", "count": 2}, {"label": "ui", "count": 1}, {"label": "urgent", "count": 2}]
    removed = bd_json(db, "label", "remove", ids["a"], ids["b"], "urgent", "--json")
    assert [r["status"] for r in removed] == ["removed", "removed"]
    assert "urgent" not in bd(db, "label", "list", ids["b"]).stdout


def test_list_sort_and_reverse(ws):
    db, ids = ws
    # cmd/bd/list.go:193: priority ascending; title case-insensitive; --reverse flips.
    by_priority = [i["id"] for i in bd_json(db, "list", "--sort", "priority", "--json")]
    assert by_priority[0] == ids["a"]
    titles = [i["title"] for i in bd_json(db, "list", "--sort", "title", "--json")]
    assert titles == sorted(titles, key=str.lower)
    assert [i["title"] for i in bd_json(db, "list", "--sort", "title", "-r", "--json")] == titles[::-1]
    closed_first = bd_json(db, "list", "--all", "--sort", "closed", "--json")
    assert closed_first[0]["id"] == ids["done"]  # a closed_at sorts before none
    assert len(bd_json(db, "list", "--sort", "id", "--limit", "1", "--json")) == 1
    assert bd(db, "list", "--sort", "bogus", ok=False).exit_code == 2


def test_closing_a_closed_issue_closes_it_again(ws):
    db, ids = ws
    with Tracker.open(db) as t:
        before = t.get(ids["done"])
    again = bd_json(db, "close", short(ids["done"]), "--reason", "shipped twice", "--json")
    assert (again[0]["status"], again[0]["close_reason"]) == ("closed", "shipped twice")
    assert again[0]["closed_at"] >= before["closed_at"]
    with Tracker.open(db) as t:
        assert [e["event_type"] for e in t.events(ids["done"])].count("closed") >= 2


def test_dep_list_down_and_up(ws):
    db, ids = ws
    # cmd/bd/dep.go:301: IssueWithDependencyMetadata, what it depends on / what depends on it.
    down = bd_json(db, "dep", "list", short(ids["b"]), "--json")
    assert [(i["id"], i["dependency_type"]) for i in down] == [(ids["a"], "blocks"), (ids["epic"], "parent-child")]
    for item in down:
        assert_issue(item, extra={"dependency_type"})
    up = bd_json(db, "dep", "list", ids["a"], "--direction", "up", "--json")
    assert [(i["id"], i["dependency_type"]) for i in up] == [(ids["b"], "blocks")]
    assert bd_json(db, "dep", "list", ids["b"], "-t", "parent-child", "--json")[0]["id"] == ids["epic"]
    assert bd_json(db, "dep", "list", ids["done"], "--json") == []
    assert "depends on" in bd(db, "dep", "list", ids["b"]).stdout


def test_dep_tree_nodes(ws):
    db, ids = ws
    # dependencies.go:537: the root at depth 0 with its own id as parent_id, then by depth, priority, id.
    tree = bd_json(db, "dep", "tree", ids["b"], "--json")
    # The epic, reached again through A, shows once at its shallowest depth unless --show-all-paths.
    assert [(n["id"], n["depth"], n["parent_id"]) for n in tree] == [
        (ids["b"], 0, ids["b"]), (ids["a"], 1, ids["b"]), (ids["epic"], 1, ids["b"])]
    every = bd_json(db, "dep", "tree", ids["b"], "--show-all-paths", "--json")
    assert (ids["epic"], 2, ids["a"]) in [(n["id"], n["depth"], n["parent_id"]) for n in every]
    for node in tree:
        assert_issue(node, extra=TREE_NODE)
        assert node["truncated"] is False
    up = bd_json(db, "dep", "tree", ids["epic"], "--direction", "up", "--json")
    assert {n["id"] for n in up} == {ids["epic"], ids["a"], ids["b"]}
    deep = bd_json(db, "dep", "tree", ids["epic"], "--direction", "up", "--max-depth", "1", "--json")
    assert all(n["truncated"] == (n["depth"] == 1) for n in deep)
    both = bd_json(db, "dep", "tree", ids["a"], "--direction", "both", "--json")
    assert [n["id"] for n in both if n["depth"] == 0] == [ids["a"]]
    assert bd_json(db, "dep", "tree", ids["b"], "--status", "closed", "--json") == []
    rendered = bd(db, "dep", "tree", ids["b"]).stdout
    assert rendered.splitlines()[0].startswith(ids["b"]) and "└── " in rendered


def test_search(ws):
    db, ids = ws
    # cmd/bd/search.go:270: IssueWithCounts over title, description and id, closed ones included.
    found = bd_json(db, "search", "do a", "--json")
    assert [i["id"] for i in found] == [ids["a"]]
    for item in found:
        assert_issue(item, extra=COUNTS)
        assert "dependencies" not in item
    assert [i["id"] for i in bd_json(db, "search", short(ids["done"]), "--json")] == [ids["done"]]
    assert bd_json(db, "search", "--query", "DONE", "--status", "open", "--json") == []
    assert bd_json(db, "search", "nothing-like-it", "--json") == []
    assert bd(db, "search", ok=False).exit_code == 2


def test_count(ws):
    db, ids = ws
    # cmd/bd/count.go:221 and :299.
    assert bd_json(db, "count", "--json") == {"count": 4}
    assert bd_json(db, "count", "--status", "open", "--json") == {"count": 3}
    assert bd_json(db, "count", "--by-status", "--json") == {
        "total": 4, "groups": [{"group": "closed", "count": 1}, {"group": "open", "count": 3}]}
    assert bd_json(db, "count", "--by-label", "--json")["groups"] == [
        {"group": "(no labels)", "count": 2}, {"group": "p", "count": 2}, {"group": "ui", "count": 1}]
    assert bd_json(db, "count", "--by-assignee", "-l", "p", "--json")["groups"] == [
        {"group": "(unassigned)", "count": 1}, {"group": "ann", "count": 1}]
    assert bd(db, "count").stdout.strip() == "4"


def test_stale(ws):
    db, ids = ws
    with Tracker.open(db) as t:
        later = datetime.now(timezone.utc) + timedelta(days=40)
        found = stale(t, days=30, now=later)
        # internal/storage/sqlite/ready.go:383: not closed, least recently updated first.
        assert {i["id"] for i in found} == {ids["epic"], ids["a"], ids["b"]}
        assert stale(t, days=30) == []
        assert [i["id"] for i in stale(t, days=30, status="in_progress", now=later)] == []
    assert bd_json(db, "stale", "--json") == []
    assert [i["id"] for i in bd_json(db, "stale", "--days", "0", "--json")][:1]
    assert bd(db, "stale", "--status", "closed", ok=False).exit_code == 2


def test_children_is_list_parent(ws):
    db, ids = ws
    children = bd_json(db, "children", short(ids["epic"]), "--json")
    assert [c["id"] for c in children] == [ids["a"], ids["b"]]
    assert children == bd_json(db, "list", "--parent", ids["epic"], "--json")


def test_duplicates(ws):
    db, ids = ws
    assert bd_json(db, "duplicates", "--json") == {"duplicate_groups": 0, "groups": []}
    with Tracker.open(db, actor="t") as t:
        twin = t.create("Twin", description="same")
        twin2 = t.create("Twin", description="same")
        t.add_dependency(twin2["id"], ids["b"], "related")
    # cmd/bd/duplicates.go:158: the most connected issue is the target.
    result = bd_json(db, "duplicates", "--json")
    assert result["duplicate_groups"] == 1
    [group] = result["groups"]
    assert group["suggested_target"] == twin2["id"] and group["suggested_sources"] == [twin["id"]]
    assert group["suggested_action"] == f"bd close {twin['id']} && bd dep add {twin['id']} {twin2['id']} --type related"
    assert {i["id"]: i["is_merge_target"] for i in group["issues"]} == {twin["id"]: False, twin2["id"]: True}
    assert "Suggested: bd close" in bd(db, "duplicates").stdout


@pytest.mark.parametrize("command", [["dep", "list"], ["dep", "tree"], ["label", "list"], ["label", "list-all"],
                                     ["search"], ["count"], ["stale"], ["children"], ["duplicates"]])
def test_every_new_command_has_help(command):
    from click.testing import CliRunner

    from tracker.cli import tracker_group

    result = CliRunner().invoke(tracker_group, [*command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output


def test_the_new_views_print_issue_text_inert(tmp_path, db_target):
    """Attack: issue text carrying terminal control sequences (an OSC 52 clipboard write, a
    screen clear) and a bidi override, shown by every new human view; none reaches the terminal raw."""
    hostile = "pwn\x1b]52;c;ZWNobyBvd25lZA==\x07\x1b[2J\u202etxt"
    with Tracker.init(tmp_path, prefix="ev", actor="t", db_path=db_target) as t:
        one = t.create(hostile, labels=[hostile], description=hostile)
        two = t.create(hostile, description=hostile)
        t.add_dependency(two["id"], one["id"])
        db = db_target or str(t.path)
    outputs = [bd(db, *args).stdout for args in (
        ["search", "pwn"], ["dep", "tree", two["id"]], ["dep", "list", two["id"]], ["label", "list", one["id"]],
        ["label", "list-all"], ["duplicates"], ["stale", "--days", "0"], ["children", one["id"]],
        ["count", "--by-label"])]
    for out in outputs:
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert any("\\u001b" in out for out in outputs)


@pytest.mark.parametrize("command", [["ready"], ["show", "hv-x"], ["list", "--sort", "title"]])
def test_the_hot_commands_stay_light(tmp_path, command):
    """``bd ready``, ``show`` and ``list`` (with the new id resolution and sorting) import none
    of pydantic, rich, jinja2, anthropic or psycopg."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    Tracker.init(tmp_path, prefix="hv").close()
    code = ("import sys\nfrom orchestrator.cli.main import cli\n"
            f"try:\n    cli(['bd', *{command!r}, '--json'], standalone_mode=False)\nexcept BaseException:\n    pass\n"
            "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'rich', 'jinja2', 'anthropic', 'psycopg')))\n")
    env = dict(os.environ, MESH_DB=str(tmp_path / ".beads" / "mesh.db"))
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], env=env,
                          capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in done.stdout, done.stdout + done.stderr
