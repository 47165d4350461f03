"""``mesh tracker``: every command, its --json shape, its errors, its help, its start-up cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tracker.cli import tracker_group
from tracker.store import Tracker

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def ws(tmp_path, monkeypatch, db_target):
    """A workspace folder with an initialised tracker on each engine (MESH_DB names the
    PostgreSQL database); the CLI runs from inside it."""
    monkeypatch.chdir(tmp_path)
    if db_target:
        monkeypatch.setenv("MESH_DB", db_target)
    else:
        monkeypatch.delenv("MESH_DB", raising=False)
    monkeypatch.setenv("MESH_ACTOR", "alice")
    result = CliRunner().invoke(cli, ["tracker", "init", "--prefix", "cl"])
    assert result.exit_code == 0, result.output
    return tmp_path


def mesh(*args: str, ok: bool = True):
    """Run ``mesh ARGS``; returns the result (stdout and stderr kept apart)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
    return result


def mesh_json(*args: str):
    return json.loads(mesh(*args, "--json").stdout)


def test_init_creates_database_and_uses_config_prefix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESH_DB", raising=False)
    (tmp_path / ".beads").mkdir()
    (tmp_path / ".beads" / "config.yaml").write_text("# beads\nissue-prefix: proj  # from bd\n")
    out = mesh("tracker", "init")
    assert (tmp_path / ".beads" / "mesh.db").exists()
    assert "prefix: proj" in out.stdout
    assert mesh_json("tracker", "create", "first")["id"].startswith("proj-")
    assert mesh_json("tracker", "where")["prefix"] == "proj"


def test_init_with_db_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESH_DB", raising=False)
    target = tmp_path / "elsewhere" / "t.db"
    info = mesh_json("--db", str(target), "tracker", "init", "--prefix", "zz")
    assert info["database_path"] == str(target) and target.exists()
    assert mesh_json("--db", str(target), "tracker", "create", "x")["id"].startswith("zz-")


def test_create_show_list_ready_json_shapes(ws):
    epic = mesh_json("tracker", "create", "Epic", "--type", "epic", "-p", "1", "--label", "plan,x")
    assert epic["issue_type"] == "epic" and epic["priority"] == 1 and epic["labels"] == ["plan", "x"]
    task = mesh_json("tracker", "create", "Task", "--parent", epic["id"], "--description", "D", "--design", "G",
                     "--acceptance", "A", "--notes", "N", "--assignee", "bob", "-l", "plan")
    assert task["id"] == f"{epic['id']}.1"
    assert (task["description"], task["design"], task["acceptance_criteria"], task["notes"], task["assignee"]) == (
        "D", "G", "A", "N", "bob")
    assert task["created_by"] == "alice"
    # create prints bd's types.Issue: labels, but no dependency records or counts (see test_bd_shapes.py).
    assert task["labels"] == ["plan"] and "dependencies" not in task and "dependency_count" not in task
    [shown] = mesh_json("tracker", "show", task["id"])
    assert shown["id"] == task["id"] and shown["parent"] == epic["id"] and "comments" not in shown
    listed = mesh_json("tracker", "list")
    assert isinstance(listed, list) and [i["id"] for i in listed] == [epic["id"], task["id"]]
    assert [i["id"] for i in mesh_json("tracker", "list", "--parent", epic["id"])] == [task["id"]]
    assert [i["id"] for i in mesh_json("tracker", "list", "--label", "x")] == [epic["id"]]
    assert [i["id"] for i in mesh_json("tracker", "list", "--assignee", "bob")] == [task["id"]]
    assert [i["id"] for i in mesh_json("tracker", "list", "--type", "epic")] == [epic["id"]]
    ready = mesh_json("tracker", "ready", "--label", "plan", "--type", "task")
    assert [i["id"] for i in ready] == [task["id"]]
    assert [i["id"] for i in mesh_json("tracker", "ready", "--parent", epic["id"])] == [task["id"]]


def test_ready_limit_defaults_to_ten(ws):
    for k in range(12):
        mesh("tracker", "create", f"t{k}")
    assert len(mesh_json("tracker", "ready")) == 10
    assert len(mesh_json("tracker", "ready", "--limit", "3")) == 3
    assert len(mesh_json("tracker", "ready", "--limit", "0")) == 12


def test_list_all_and_status_filter(ws):
    a = mesh_json("tracker", "create", "a")
    b = mesh_json("tracker", "create", "b")
    mesh("tracker", "close", a["id"], "--reason", "done")
    assert [i["id"] for i in mesh_json("tracker", "list")] == [b["id"]]
    assert {i["id"] for i in mesh_json("tracker", "list", "--all")} == {a["id"], b["id"]}
    assert [i["id"] for i in mesh_json("tracker", "list", "--status", "closed,in_progress")] == [a["id"]]


def test_human_output(ws):
    epic = mesh_json("tracker", "create", "Epic", "--type", "epic", "-l", "plan")
    task = mesh_json("tracker", "create", "Do it", "--parent", epic["id"], "-p", "0", "--description", "line1\nline2")
    mesh("tracker", "comments", "add", task["id"], "looks good", "--author", "rev")
    listing = mesh("tracker", "list").stdout.splitlines()
    assert listing[0] == f"{task['id']}  [P0] [task] open  Do it"
    assert listing[1] == f"{epic['id']}  [P2] [epic] open  Epic  (plan)"
    block = mesh("tracker", "show", task["id"]).stdout
    assert block.startswith(f"{task['id']}: Do it\n")
    for fragment in ("Status:", "Priority:", "P0", "Parent:", epic["id"], "Description:", "  line2",
                     f"depends on {epic['id']}  (parent-child)", "Comments (1):", "rev:", "looks good"):
        assert fragment in block
    assert mesh("tracker", "ready", "--label", "nope").stdout.strip() == "No ready work."


def test_update_fields_and_claim(ws, monkeypatch):
    task = mesh_json("tracker", "create", "t")
    [updated] = mesh_json("tracker", "update", task["id"], "--priority", "0", "--title", "T2", "--notes", "n",
                        "--status", "blocked", "--design", "d", "--acceptance", "a", "--description", "x")
    assert (updated["priority"], updated["title"], updated["notes"], updated["status"]) == (0, "T2", "n", "blocked")
    mesh("tracker", "update", task["id"], "--status", "open")
    [claimed] = mesh_json("--actor", "carol", "tracker", "update", task["id"], "--claim")
    assert (claimed["status"], claimed["assignee"]) == ("in_progress", "carol")
    lost = mesh("--actor", "dave", "tracker", "update", task["id"], "--claim", "--json", ok=False)
    assert lost.exit_code == 1 and json.loads(lost.stderr)["code"] == "conflict"
    [again] = mesh_json("--actor", "carol", "tracker", "update", task["id"], "--claim", "--priority", "3")
    assert again["priority"] == 3
    usage = mesh("tracker", "update", task["id"], "--claim", "--status", "open", ok=False)
    assert usage.exit_code == 2
    nothing = mesh("tracker", "update", task["id"], "--json", ok=False)
    assert nothing.exit_code == 1 and json.loads(nothing.stderr)["code"] == "invalid_value"


def test_close_reopen_and_blockers(ws):
    a = mesh_json("tracker", "create", "a")
    b = mesh_json("tracker", "create", "b")
    dep = mesh_json("tracker", "dep", "add", a["id"], b["id"])
    assert dep == {"status": "added", "issue_id": a["id"], "depends_on_id": b["id"], "type": "blocks"}
    refused = mesh("tracker", "close", a["id"], "--json", ok=False)
    assert refused.exit_code == 1 and b["id"] in json.loads(refused.stderr)["error"]
    [closed] = mesh_json("tracker", "close", a["id"], "--force", "--reason", "anyway")
    assert (closed["status"], closed["close_reason"]) == ("closed", "anyway") and closed["closed_at"]
    [reopened] = mesh_json("tracker", "reopen", a["id"])
    assert reopened["status"] == "open" and "closed_at" not in reopened
    removed = mesh_json("tracker", "dep", "remove", a["id"], b["id"])
    assert removed == {"status": "removed", "issue_id": a["id"], "depends_on_id": b["id"]}
    assert mesh_json("tracker", "close", a["id"])[0]["status"] == "closed"
    related = mesh_json("tracker", "dep", "add", b["id"], a["id"], "--type", "related")
    assert related["type"] == "related"


def test_comments_group_lists_by_default_and_adds(ws):
    task = mesh_json("tracker", "create", "t")
    assert mesh_json("tracker", "comments", task["id"]) == []
    added = mesh_json("tracker", "comments", "add", task["id"], "[orch:proposal] plan", "--author", "proposer")
    assert set(added) >= {"id", "issue_id", "author", "text", "created_at"}
    assert (added["author"], added["text"]) == ("proposer", "[orch:proposal] plan")
    mesh("tracker", "comments", "add", task["id"], "second")
    listed = json.loads(mesh("tracker", "comments", "--json", task["id"]).stdout)
    assert [c["text"] for c in listed] == ["[orch:proposal] plan", "second"]
    assert listed[1]["author"] == "alice"
    assert "second" in mesh("tracker", "comments", task["id"]).stdout
    assert mesh("tracker", "comments", "show", task["id"]).exit_code == 0


def test_labels(ws):
    task = mesh_json("tracker", "create", "t")
    # bd's label add/remove print an array, one object per issue (cmd/bd/label.go:36).
    assert mesh_json("tracker", "label", "add", task["id"], "plan") == [{
        "status": "added", "issue_id": task["id"], "label": "plan"}]
    assert mesh_json("tracker", "show", task["id"])[0]["labels"] == ["plan"]
    assert mesh_json("tracker", "label", "remove", task["id"], "plan")[0]["status"] == "removed"
    missing = mesh("tracker", "label", "remove", task["id"], "plan", "--json", ok=False)
    assert json.loads(missing.stderr)["code"] == "not_found"


def test_gates(ws):
    task = mesh_json("tracker", "create", "t")
    gate = mesh_json("tracker", "gate", "create", "approval", "--blocks", task["id"])
    assert gate["issue_type"] == "gate" and gate["await_type"] == "human"
    assert task["id"] not in [i["id"] for i in mesh_json("tracker", "ready")]
    resolved = mesh_json("tracker", "gate", "resolve", gate["id"], "--reason", "approved")
    assert (resolved["status"], resolved["close_reason"]) == ("closed", "approved")
    assert task["id"] in [i["id"] for i in mesh_json("tracker", "ready")]
    timer = mesh_json("tracker", "gate", "create", "cool-off", "--blocks", task["id"], "--await-type", "timer",
                      "--timeout", "1ms")
    assert timer["timeout"] == 1_000_000
    checked = mesh_json("tracker", "gate", "check")
    assert [g["id"] for g in checked] == [timer["id"]]
    assert mesh_json("tracker", "gate", "check") == []
    bad = mesh("tracker", "gate", "create", "x", "--blocks", task["id"], "--timeout", "soon", "--json", ok=False)
    assert json.loads(bad.stderr)["code"] == "invalid_value"


def test_slots_and_agent_state(ws):
    agent = mesh_json("tracker", "create", "worker-1", "--type", "agent")
    role = mesh_json("tracker", "create", "proposer", "--type", "role")
    task = mesh_json("tracker", "create", "t")
    other = mesh_json("tracker", "create", "u")
    assert mesh_json("tracker", "slot", "set", agent["id"], "role", role["id"]) == {
        "agent": agent["id"], "slot": "role", "bead": role["id"]}
    mesh("tracker", "slot", "set", agent["id"], "hook", task["id"])
    held = mesh("tracker", "slot", "set", agent["id"], "hook", other["id"], "--json", ok=False)
    assert held.exit_code == 1 and json.loads(held.stderr)["code"] == "conflict"
    assert mesh_json("tracker", "slot", "show", agent["id"]) == {
        "agent": agent["id"], "slots": {"hook": task["id"], "role": role["id"]}}
    assert mesh_json("tracker", "slot", "clear", agent["id"], "hook") == {
        "agent": agent["id"], "slot": "hook", "bead": None}
    assert "hook: (empty)" in mesh("tracker", "slot", "show", agent["id"]).stdout
    state = mesh_json("tracker", "agent", "state", agent["id"], "working")
    assert state["agent"] == agent["id"] and state["agent_state"] == "working" and state["last_activity"]
    not_agent = mesh("tracker", "agent", "state", task["id"], "working", "--json", ok=False)
    assert json.loads(not_agent.stderr)["code"] == "invalid_value"


def test_where_status_doctor(ws, engine):
    mesh("tracker", "create", "t")
    where = mesh_json("tracker", "where")
    first_check = "integrity" if engine == "sqlite" else "server"
    if engine == "sqlite":
        assert where["database_path"].endswith(os.path.join(".beads", "mesh.db"))
    else:
        assert where["database_path"] == os.environ["MESH_DB"] and where["engine"] == "postgresql"
    assert where["prefix"] == "cl"
    status = mesh_json("tracker", "status")
    assert status["summary"]["total_issues"] == 1 and status["summary"]["ready_issues"] == 1
    doctor = mesh_json("tracker", "doctor")
    assert doctor["ok"] and {c["name"] for c in doctor["checks"]} >= {first_check, "foreign_keys", "ready_state"}
    fixed = mesh_json("tracker", "doctor", "--fix")
    assert "ready state rebuilt" in fixed["fixed"]
    assert first_check in mesh("tracker", "doctor").stdout


def test_import_export_round_trip(ws, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"id":"ex-1","title":"one","status":"open","priority":1,"issue_type":"task","custom":{"k":1}}\n'
        "<<<<<<< HEAD\n"
        '{"id":"ex-2","title":"two","status":"open","issue_type":"bug"}\n'
        "not json\n"
    )
    result = mesh("tracker", "import", str(source))
    assert "2 created" in result.stdout
    assert f"{source}:2: conflict_marker" in result.stderr and f"{source}:4: malformed" in result.stderr
    assert f"{source}:3: missing_priority" in result.stderr
    report = mesh_json("tracker", "import", str(source))
    assert report["unchanged"] == 2 and {w["code"] for w in report["warnings"]} >= {"malformed"}
    out = tmp_path / "out.jsonl"
    summary = mesh_json("tracker", "export", "-o", str(out))
    assert summary == {"exported": 2, "path": str(out)}
    lines = out.read_text().splitlines()
    assert json.loads(lines[0])["custom"] == {"k": 1} and json.loads(lines[1])["priority"] == 2
    assert mesh("tracker", "export").stdout.splitlines() == lines
    missing = mesh("tracker", "import", str(tmp_path / "nope.jsonl"), "--json", ok=False)
    assert missing.exit_code == 1 and json.loads(missing.stderr)["code"] == "io_error"


def test_errors_are_one_line_with_codes(ws):
    unknown = mesh("tracker", "show", "cl-nope", "--json", ok=False)
    assert unknown.exit_code == 1 and unknown.stdout == ""
    assert json.loads(unknown.stderr) == {"error": "no issue 'cl-nope'", "code": "not_found"}
    plain = mesh("tracker", "show", "cl-nope", ok=False)
    assert plain.stderr == "Error: no issue 'cl-nope'\n" and "Traceback" not in plain.stderr
    for args in (["create", "x", "-p", "9"], ["create", "x", "--type", "saga"], ["list", "--status", "done"],
                 ["ready", "--parent", "cl-nope"], ["dep", "add", "cl-a", "cl-b"]):
        result = mesh("tracker", *args, "--json", ok=False)
        assert result.exit_code == 1, args
        error = json.loads(result.stderr)
        assert set(error) == {"error", "code"} and "\n" not in error["error"]


def test_unavailable_workspace_exits_4(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESH_DB", raising=False)
    result = mesh("tracker", "ready", "--json", ok=False)
    assert result.exit_code == 4 and json.loads(result.stderr)["code"] == "workspace_unavailable"
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    result = mesh("--db", str(garbage), "tracker", "list", ok=False)
    assert result.exit_code == 4 and result.stderr.startswith("Error: ") and "Traceback" not in result.stderr


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from _commands(command, prefix + (name,))


EXPECTED = {
    "init", "create", "show", "list", "ready", "update", "close", "reopen", "comments", "comments add", "dep",
    "dep add", "dep remove", "label", "label add", "label remove", "gate", "gate create", "gate resolve",
    "gate check", "slot", "slot set", "slot clear", "slot show", "agent", "agent state", "where", "status",
    "doctor", "import", "export",
}


def test_every_command_of_the_contract_exists():
    names = {" ".join(path) for path, _ in _commands(tracker_group)}
    assert EXPECTED <= names


@pytest.mark.parametrize("path", [p for p, _ in _commands(tracker_group)], ids=" ".join)
def test_every_command_has_help(path):
    command = tracker_group
    for name in path:
        command = command.commands[name]
    assert (command.help or "").strip(), f"{' '.join(path)} has no help text"
    for param in command.params:
        if isinstance(param, click.Option):
            assert (param.help or "").strip(), f"{' '.join(path)} {param.opts} has no help text"
    result = CliRunner().invoke(cli, ["tracker", *path, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output


def test_tracker_commands_do_not_import_heavy_modules(tmp_path):
    """``mesh tracker ready`` must start fast: no pydantic, jinja2, git, rich or anthropic."""
    Tracker.init(tmp_path, prefix="hv").close()
    code = (
        "import sys\n"
        "from orchestrator.cli.main import cli\n"
        "try:\n"
        "    cli(['tracker', 'ready', '--json'], standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'jinja2', 'git', 'rich', 'anthropic'))\n"
        "print('HEAVY', heavy)\n"
    )
    env = dict(os.environ, MESH_DB=str(tmp_path / ".beads" / "mesh.db"))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout
