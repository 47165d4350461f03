"""The hot reads (``bd ready/list/show --json``, ``mesh tracker ...`` the same) answered without
click (``tracker.bd_hot``): the same bytes as the full command line, on the real beads exports
and on generated workspaces; everything else, and every failure, left to the full command line;
and what the hot path imports (no click, nor any heavy module).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import beads_real_files, bench_module
from tracker.bd_hot import INFRA_TYPES, answer
from tracker.db import statement_cache
from tracker.cli import tracker_group
from tracker.jsonl import import_jsonl
from tracker.store import Tracker

ROOT = Path(__file__).resolve().parent.parent
_gen = bench_module("gen_workspace")
generate, write_jsonl = _gen.generate, _gen.write_jsonl

# What a hot read must not import: click (the whole point) and the heavy modules of mesh's other commands.
HEAVY = ("click", "pydantic", "jinja2", "rich", "anthropic", "psycopg", "sqlite_utils", "llm", "orchestrator.cli.main")
# The tracker's write code: a read opens a ``reader.Reader`` and needs none of it.
WRITES = ("tracker.store", "tracker.issues", "tracker.ready", "tracker.dependencies", "tracker.comments",
          "tracker.coordination", "tracker.ids", "tracker.bd_compat", "tracker.single_writes", "tracker.jsonl")


def _workspace(tmp_path: Path, source: Path) -> tuple[str, list[str]]:
    """A tracker with ``source`` imported; its database and a few of its ids (a short one too)."""
    tracker = Tracker.init(tmp_path / "ws", prefix="hot")
    try:
        import_jsonl(tracker, source)
        everything = tracker.list(include_closed=True)
        ids = [i["id"] for i in everything[:3]] + [i["id"] for i in everything if i.get("dependencies")][:2]
        ids += [i["id"] for i in everything if i.get("comment_count")][:1]
        if ids:
            ids.append(ids[0].partition("-")[2])  # a short id, as bd resolves it
        return str(tracker.path), ids
    finally:
        tracker.close()


@pytest.fixture
def small(tmp_path) -> tuple[str, list[str]]:
    """A generated workspace of 60 issues: its database and a few ids."""
    source = tmp_path / "small.jsonl"
    write_jsonl(generate(60, seed=3), source)
    return _workspace(tmp_path, source)


def _command_lines(ids: list[str]) -> list[list[str]]:
    lines = [["ready", "--json"], ["list", "--json"], ["--json", "ready", "--limit", "3"],
             ["ready", "--limit=0", "--json", "--actor", "agent", "--no-auto-flush", "--no-auto-import"],
             ["list", "--status", "open,in_progress", "--limit", "7", "--json"], ["list", "-s", "closed", "--json"],
             ["-q", "list", "-n", "2", "--json", "--readonly"], ["show", "--json", "no-such-id"]]
    lines += [["show", issue_id, "--json"] for issue_id in ids]
    if ids:
        lines.append(["show", *ids[:3], "--json"])
    return lines


def _full(args: list[str], db: str) -> tuple[int, bytes]:
    result = CliRunner().invoke(tracker_group, args, obj={"db": db, "actor": None})
    return result.exit_code, result.stdout_bytes


def check_same(db: str, lines: list[list[str]]) -> int:
    """Each of ``lines`` answered by the hot path as the full command line answers it, or left to
    it when that fails; how many the hot path answered."""
    answered = 0
    for args in lines:
        code, full = _full(args, db)
        text = answer(args, {"db": db, "actor": None})
        if code:
            assert text is None, args  # a failure is the full command line's to report
        else:
            assert text is not None, args
            assert text.encode() == full, args
            answered += 1
    return answered


@pytest.mark.parametrize("source", beads_real_files(), ids=lambda p: p.name)
def test_hot_reads_print_what_the_full_command_line_prints_on_real_exports(tmp_path, source):
    db, ids = _workspace(tmp_path, source)
    check_same(db, _command_lines(ids))
    # And what they print is what the file holds: `list --limit 0` lists every issue bd lists,
    # counted from the file itself (both paths once listed nothing where issues kept extra fields).
    listed = {i["id"] for i in json.loads(answer(["list", "--json", "--limit", "0"], {"db": db}))}
    records = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    assert listed == {r["id"] for r in records if r.get("status", "open") not in ("closed", "tombstone")
                      and r.get("issue_type", "task") not in ("gate", *INFRA_TYPES) and r.get("is_template") is not True}


@pytest.mark.parametrize("size", [300, 2000])
def test_hot_reads_print_what_the_full_command_line_prints_on_generated_workspaces(tmp_path, size):
    source = tmp_path / "ws.jsonl"
    write_jsonl(generate(size, seed=size), source)
    db, ids = _workspace(tmp_path, source)
    check_same(db, _command_lines(ids))
    assert json.loads(answer(["ready", "--json"], {"db": db}))  # there is ready work to compare


@pytest.mark.parametrize("args", [
    ["ready"], ["ready", "--json", "--label", "--x"], ["list", "--json", "--tree=false"], ["show", "--json"],
    ["ready", "--json", "--limit", "-1"], ["ready", "--json", "--limit", "x"], ["ready", "--json", "--limit"],
    ["--limit", "3", "ready", "--json"], ["ready", "--json", "extra"], ["ready", "--json", "--db", ""],
    ["ready", "--json", "--help"], ["create", "x", "--json"], ["ready", "--json", "-qv"], [],
])
def test_other_command_lines_are_left_to_the_full_command_line(small, args):
    db, _ = small
    assert answer(args, {"db": db}) is None


def test_a_missing_workspace_is_reported_by_the_full_command_line(tmp_path):
    assert answer(["ready", "--json"], {"db": str(tmp_path / "none.db")}) is None
    assert not (tmp_path / "none.db").exists()


def _run(entry: str, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """A console script (``entry``: its module and function) as installed, listing what it imported."""
    code = ("import atexit, sys\n"
            "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules))))\n"
            f"from {entry.split(':')[0]} import {entry.split(':')[1]} as main\n"
            "main()\n")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                          env={**os.environ, **env}, timeout=120)


@pytest.mark.parametrize("entry,prefix", [("tracker.bd_shim:main", []), ("orchestrator.cli.start:main", ["tracker"])])
@pytest.mark.parametrize("args", [["ready", "--json"], ["list", "--json"], ["show", "ID", "--json"]])
def test_the_hot_commands_import_no_heavy_module(tmp_path, small, entry, prefix, args):
    db, ids = small
    args = [ids[0] if a == "ID" else a for a in args]
    done = _run(entry, [*prefix, *args], tmp_path, MESH_DB=db)
    assert done.returncode == 0, done.stderr
    imported = set(done.stderr.decode().rpartition("MODULES ")[2].split())
    assert "tracker.bd_hot" in imported
    assert not {m for m in imported if m.split(".")[0] in HEAVY or m in HEAVY}
    assert not imported.intersection(WRITES)
    assert done.stdout == _full(args, db)[1]


def test_the_entry_points_fall_back_to_the_full_command_line(tmp_path, small):
    db, _ = small
    done = _run("tracker.bd_shim:main", ["show", "nope-zzz", "--json"], tmp_path, BEADS_DB=db)
    assert done.returncode == 1 and done.stdout == b""
    assert json.loads(done.stderr.decode().rpartition("\nMODULES ")[0])["code"] == "not_found"
    done = _run("orchestrator.cli.start:main", ["tracker", "ready"], tmp_path, MESH_DB=db)
    assert done.returncode == 0 and "click" in done.stderr.decode().rpartition("MODULES ")[2].split()
    assert done.stdout == _full(["ready"], db)[1]
    done = _run("orchestrator.cli.start:main", ["--help"], tmp_path)
    assert done.returncode == 0 and b"mesh" in done.stdout


def test_mesh_help_lists_the_lazy_commands_as_they_are(tmp_path):
    """`mesh --help` names `mesh tracker` without importing it, with the short help the loaded
    command gives: the listing is the same before and after the command is loaded."""
    done = _run("orchestrator.cli.start:main", ["--help"], tmp_path)
    assert done.returncode == 0
    assert "tracker.cli" not in done.stderr.decode().rpartition("MODULES ")[2].split()
    from orchestrator.cli.main import _LAZY, cli

    lazy = CliRunner().invoke(cli, ["--help"], prog_name="mesh", terminal_width=80).output
    assert all(f"  {name} " in lazy for name in _LAZY)
    for name in _LAZY:
        assert cli.get_command(None, name) is not None  # loads it
    assert CliRunner().invoke(cli, ["--help"], prog_name="mesh", terminal_width=80).output == lazy


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_mesh_help_is_the_generated_text_on_a_wide_terminal_and_clicks_own_on_a_narrow_one(tmp_path, flag):
    def modules(done: subprocess.CompletedProcess) -> set[str]:
        return set(done.stderr.decode().rpartition("MODULES ")[2].split())

    wide = _run("orchestrator.cli.start:main", [flag], tmp_path, COLUMNS="120")
    assert wide.returncode == 0
    assert not {m for m in modules(wide) if m.split(".")[0] in HEAVY or m in HEAVY or m == "tracker.store"}
    assert wide.stdout == _run("orchestrator.cli.main:main", [flag], tmp_path, COLUMNS="120").stdout
    narrow = _run("orchestrator.cli.start:main", [flag], tmp_path, COLUMNS="60")
    assert "click" in modules(narrow) and narrow.stdout != wide.stdout
    assert narrow.stdout == _run("orchestrator.cli.main:main", [flag], tmp_path, COLUMNS="60").stdout


def test_the_generated_help_is_the_command_lines_own():
    from orchestrator.cli import help_text

    assert help_text.render() == help_text.MESH_HELP, "regenerate it: python -m orchestrator.cli.help_text"


def test_list_shows_fifty_by_default_as_bd_does(tmp_path):
    """bd's `list` stops at 50 unless `--limit 0` (or another limit) is given, and says so on
    stderr in its human output; the hot path and the full command line agree."""
    source = tmp_path / "more.jsonl"
    write_jsonl(generate(150, seed=5), source)
    db, _ = _workspace(tmp_path, source)
    with Tracker.open(db) as t:
        open_count = len(t.list(exclude_types=("gate", *INFRA_TYPES), templates=False))  # what bd lists
    assert open_count > 50
    for args in (["list", "--json"], ["list", "--json", "--limit", "0"], ["list", "--json", "-n", "55"]):
        expected = {"--json": 50, "0": open_count, "55": 55}[args[-1] if len(args) > 2 else "--json"]
        assert len(json.loads(answer(args, {"db": db}))) == expected
        assert len(json.loads(_full(args, db)[1])) == expected
    human = CliRunner().invoke(tracker_group, ["list"], obj={"db": db, "actor": None})
    assert human.exit_code == 0 and len(human.stdout.splitlines()) == 50
    assert "Showing 50 issues (use --limit 0 for all)" in human.stderr
    everything = CliRunner().invoke(tracker_group, ["list", "--limit", "0"], obj={"db": db, "actor": None})
    assert len(everything.stdout.splitlines()) == open_count and everything.stderr == ""


def test_list_leaves_out_templates_gates_and_infrastructure_unless_asked_as_bd_does(tracker):
    """bd's `list` hides templates (a beads file's is_template), gates and its infrastructure
    types (agents, roles, messages: mesh's role agents) unless --include-templates /
    --include-gates / --include-infra (or --type of theirs) ask for them; on each engine, through
    the hot path and the full command line alike. The tracker's own list keeps them all."""
    from tracker.bd_hot import list_issues

    task = tracker.create("ordinary work")["id"]
    gate = tracker.gate_create("wait for CI", blocks=task, await_type="human")["id"]
    agent = tracker.create("mesh-proposer", issue_type="agent")["id"]
    line = ('{"id": "tt-tmpl", "title": "a template", "status": "open", "priority": 2, "issue_type": "task",'
            ' "is_template": true, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}\n'
            '{"id": "tt-not", "title": "not one", "status": "open", "priority": 2, "issue_type": "task",'
            ' "is_template": false, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}\n'
            # Extra fields without is_template (a real export's bd counts): not a template.
            '{"id": "tt-kept", "title": "kept fields", "status": "open", "priority": 2, "issue_type": "task",'
            ' "dependency_count": 0, "source_note": "x", "created_at": "2026-01-01T00:00:00Z",'
            ' "updated_at": "2026-01-01T00:00:00Z"}\n')
    import_jsonl(tracker, io.StringIO(line))

    def ids(**options) -> set[str]:
        return {i["id"] for i in list_issues(tracker, limit=0, **options)}

    assert ids() == {task, "tt-not", "tt-kept"}
    assert ids(include_gates=True) == {task, "tt-not", "tt-kept", gate}
    assert ids(issue_type="gate") == {gate}
    assert ids(include_infra=True) == {task, "tt-not", "tt-kept", agent}
    assert ids(issue_type="agent") == {agent}
    assert ids(include_templates=True) == {task, "tt-not", "tt-kept", "tt-tmpl"}
    assert {i["id"] for i in tracker.list()} == {task, "tt-not", "tt-kept", "tt-tmpl", gate, agent}
    db = str(tracker.db.path)  # the file, or the PostgreSQL URL
    assert {i["id"] for i in json.loads(answer(["list", "--json"], {"db": db}))} == {task, "tt-not", "tt-kept"}
    for args, expected in ((["list", "--json"], {task, "tt-not", "tt-kept"}),
                           (["list", "--json", "--include-gates", "--include-templates", "--include-infra"],
                            {task, "tt-not", "tt-kept", gate, "tt-tmpl", agent})):
        res = CliRunner().invoke(tracker_group, args, obj={"db": db, "actor": None})
        assert res.exit_code == 0, res.output
        assert {i["id"] for i in json.loads(res.stdout)} == expected


@pytest.mark.parametrize("args", [["ready", "--json"], ["list", "--json", "--limit", "0"], ["show", "ID", "ID2", "--json"],
                                  ["blocked", "--json"], ["stats", "--json"]])
def test_sqlite_loads_without_functools_and_answers_the_same(tmp_path, small, args):
    """A bare interpreter (no site: nothing has imported ``functools``) loads ``_sqlite3`` against
    ``db.statement_cache``: the hot read imports neither ``functools`` nor ``collections`` and
    prints what the full command line prints."""
    db, ids = small
    args = [{"ID": ids[0], "ID2": ids[1]}.get(a, a) for a in args]
    code = ("import atexit, sys\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules))))\n"
            "from tracker.bd_shim import main\nmain()\n")
    done = subprocess.run([sys.executable, "-S", "-c", code, *args], cwd=tmp_path, capture_output=True,
                          env={**os.environ, "BEADS_DB": db}, timeout=120)
    assert done.returncode == 0, done.stderr
    imported = set(done.stderr.decode().rpartition("MODULES ")[2].split())
    assert "tracker.bd_hot" in imported and "_sqlite3" in imported
    assert not imported & {"functools", "collections"}
    assert done.stdout == _full(args, db)[1]


def test_the_statement_cache_keeps_the_most_recently_used_statements():
    made: list[str] = []
    cache = statement_cache(2)(lambda sql: made.append(sql) or f"prepared {sql}")
    assert [cache(s) for s in ("a", "b", "a", "c", "a", "b")] == [f"prepared {s}" for s in "abacab"]
    assert made == ["a", "b", "c", "b"]  # "b" was the least recently used when "c" came
    none_kept = statement_cache(0)(lambda sql: made.append(sql) or sql)
    made.clear()
    assert [none_kept(s) for s in "aa"] == ["a", "a"] and made == ["a", "a"]


def test_a_hot_answer_ends_the_process_whole_and_runs_the_exit_handlers(tmp_path, small):
    """The hot paths end the process without the interpreter's teardown (``hot_output.finish``):
    the whole answer still reaches a pipe (every open issue), the status is 0, and exit handlers
    run."""
    db, _ = small
    code = ("import atexit, sys\n"
            "atexit.register(lambda: sys.stderr.write('HANDLER RAN'))\n"
            "from tracker.bd_shim import main\nmain()\n")
    done = subprocess.run([sys.executable, "-c", code, "list", "--json", "--limit", "0"], cwd=tmp_path,
                          capture_output=True, env={**os.environ, "BEADS_DB": db}, timeout=120)
    assert done.returncode == 0 and done.stderr == b"HANDLER RAN"
    assert done.stdout == _full(["list", "--json", "--limit", "0"], db)[1]


def test_a_hot_read_leaves_the_wal_open_and_loses_no_write_around_it(tmp_path, small):
    """A console script's hot read ends the process with its database open
    (``answer(exiting=True)``): the ``-wal`` and ``-shm`` files stay for the next read instead
    of being deleted and made again. With a writer open across it, writing before and after,
    nothing is lost: every write is read back, by the next hot read too, and the file is whole;
    the writer, closing last, checkpoints and removes the files as SQLite always does."""
    db, _ = small
    wal, shm = Path(db + "-wal"), Path(db + "-shm")
    code = "from tracker.bd_shim import main\nmain()\n"

    def hot(*args: str) -> list:
        done = subprocess.run([sys.executable, "-c", code, *args, "--json"], cwd=tmp_path, capture_output=True,
                              env={**os.environ, "BEADS_DB": db}, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    hot("ready")
    assert wal.exists() and shm.exists()
    writer = Tracker.open(db)
    before = writer.create("written before the read")["id"]
    assert before in {i["id"] for i in hot("list", "--limit", "0")}
    after = writer.create("written after the read")["id"]
    shown = hot("show", before, after)
    assert [i["id"] for i in shown] == [before, after]
    writer.close()  # the last connection: it checkpoints and removes the WAL files
    assert not wal.exists() and not shm.exists()
    with Tracker.open(db) as reopened:
        assert reopened.db.read("PRAGMA integrity_check")[0][0] == "ok"
        assert reopened.exists(before) and reopened.exists(after)
        assert reopened.doctor()["ok"]


def _blocked_oracle(tracker) -> list[tuple[str, list[str]]]:
    """bd's blocked list computed in Python from the tracker's whole list: unfinished issues, not
    pinned, whose status is blocked or deferred or that a ``blocks`` edge to unfinished work holds,
    by (priority, created_at, id), each with the sorted ids holding it."""
    from tracker.model import BLOCKING_STATUSES

    everything = {i["id"]: i for i in tracker.list(include_closed=True)}
    out = []
    for i in sorted(everything.values(), key=lambda i: (i["priority"], i.get("created_at") or "", i["id"])):
        if i["status"] not in BLOCKING_STATUSES or i.get("pinned"):
            continue
        holding = sorted(d["depends_on_id"] for d in i.get("dependencies") or ()
                         if d["type"] == "blocks" and d["depends_on_id"] in everything
                         and everything[d["depends_on_id"]]["status"] in BLOCKING_STATUSES)
        if holding or i["status"] in ("blocked", "deferred"):
            out.append((i["id"], holding))
    return out


def test_blocked_lists_what_the_issues_themselves_say_on_each_engine(tracker):
    """`blocked` (found from the `blocks` edges and the status index, then only those rows) lists
    exactly the issues and blockers a plain reading of every issue finds, on a generated workspace
    with blocked, deferred, pinned and closed issues and edges to closed and to missing issues."""
    from tracker import bd_reads

    source = io.StringIO()
    records = generate(300, seed=47)
    records[0]["pinned"], records[0]["status"] = True, "blocked"
    records[1].setdefault("dependencies", []).append(
        {"issue_id": records[1]["id"], "depends_on_id": "bm-gone", "type": "blocks"})
    for record in records:
        source.write(json.dumps(record) + "\n")
    source.seek(0)
    import_jsonl(tracker, source)
    answer = [(i["id"], i["blocked_by"]) for i in bd_reads.blocked(tracker)]
    assert answer == _blocked_oracle(tracker) and len(answer) > 20
    assert all(i["blocked_by_count"] == len(i["blocked_by"]) for i in bd_reads.blocked(tracker))


@pytest.mark.parametrize("source", beads_real_files(), ids=lambda p: p.name)
def test_blocked_lists_what_the_issues_themselves_say_on_real_exports(tmp_path, source):
    from tracker import bd_reads

    db, _ = _workspace(tmp_path, source)
    with Tracker.open(db) as t:
        assert [(i["id"], i["blocked_by"]) for i in bd_reads.blocked(t)] == _blocked_oracle(t)


def test_a_hot_read_of_issues_with_kept_fields_and_metadata_imports_no_json_package(tmp_path):
    """Issues that keep fields the model does not know (a real export's bd counts) or carry
    metadata are decoded by ``_json``'s C scanner: the hot read does not import ``json`` (with the
    ``re`` and ``enum`` it brings, 11 ms of a process), and prints what the full command line prints."""
    tracker = Tracker.init(tmp_path / "ws", prefix="kf")
    try:
        import_jsonl(tracker, io.StringIO(
            '{"id": "kf-1", "title": "kept", "status": "open", "priority": 1, "issue_type": "task",'
            ' "dependency_count": 0, "source_note": {"from": "bd", "n": [1, 2.5, null]},'
            ' "metadata": {"k": "v\\u00e9", "nested": {"x": true}},'
            ' "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}\n'))
        db = str(tracker.path)
    finally:
        tracker.close()
    for args in (["list", "--json"], ["ready", "--json"], ["show", "kf-1", "--json"]):
        done = _run("tracker.bd_shim:main", args, tmp_path, BEADS_DB=db)
        assert done.returncode == 0, done.stderr
        imported = set(done.stderr.decode().rpartition("MODULES ")[2].split())
        # (``re`` itself: a development install's editable finder loads it in every process)
        assert "tracker.bd_hot" in imported and not imported.intersection({"json", "json.decoder"}), args
        assert done.stdout == _full(args, db)[1]
        assert json.loads(done.stdout)[0]["metadata"] == {"k": "v\u00e9", "nested": {"x": True}}
