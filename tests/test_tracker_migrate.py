"""``mesh tracker migrate``: a workspace moved between SQLite and PostgreSQL loses nothing.

Every table is compared row for row after SQLite -> PostgreSQL -> SQLite (insertion
order where the store reads it back), signed checkpoints still verify, JSONL exports
are byte-identical, the orchestrator's tables keep their keys and indexes, and a
migration that cannot finish leaves the target as it was.
"""

from __future__ import annotations

import io
import json
import socket
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.ledger.calls import ensure_calls_table, log_call
from orchestrator.protocol.checkpoint import checkpoint_problem, dedupe_key, format_checkpoint, parse_checkpoint, sign_payload
from orchestrator.cli.main import cli
from orchestrator.protocol.lease import ensure_lease_table
from orchestrator.landing.locks import ensure_lock_table
from tests.conftest import beads_real_files
from tracker.errors import ConflictError, InvalidValueError, WorkspaceError
from tracker.jsonl import export_jsonl, import_jsonl
from tracker.migrate import migrate
from tracker.pg_functions import STALE_OPEN_LABELS
from tracker.store import Tracker
from tracker.tallies import stale

KEY = "migration-test-signing-key"
# Text a lossy copy would change: line endings, tabs, trailing blanks, non-ASCII, a fence.
ODD_TEXT = "line one\r\nline two\twith tab  \n\n  indented ✓ 🚀 ünïcode \u200b\u202e reversed\n```\nend \\ ' \""
ODD_ISSUE = {"id": "mg-odd", "title": "odd", "status": "open", "priority": "high", "issue_type": "task",
             "metadata": "not an object", "timeout": "90s", "pinned": "yes", "labels": ["zeta", "alpha", "mid"],
             "dependencies": [{"issue_id": "mg-odd", "depends_on_id": "mg-missing", "type": "blocks", "weight": 3}],
             "comments": [{"id": "c1-uuid", "issue_id": "mg-odd", "author": "a", "text": "<b>&</b>",
                           "created_at": "2025-01-01T00:00:00Z", "reactions": 2}],
             "defer_until": "2031-02-03T04:05:06+02:00", "zz_unknown": {"nested": [1, None]}}


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def export_text(tracker: Tracker) -> str:
    out = io.StringIO()
    export_jsonl(tracker, out)
    return out.getvalue()


def dump(target) -> dict[str, list]:
    """Every row of every tracker and ``mesh_`` table (SQLite's derived full-text tables aside),
    in the order the store reads them back; tables without such an order sorted."""
    ordered = {"issues": "seq", "labels": "rowid", "dependencies": "rowid", "comments": "id", "events": "id"}
    with Tracker(target) as tracker:
        db = tracker.db
        if db.engine == "sqlite":
            names = [r[0] for r in db.read("SELECT name FROM pragma_table_list WHERE schema = 'main'"
                                           " AND type = 'table' AND name NOT LIKE 'sqlite_%'")]
        else:
            names = [r[0] for r in db.read("SELECT table_name FROM information_schema.tables"
                                           " WHERE table_schema = current_schema()")]
        out = {}
        if db.engine == "postgresql":  # its open issues' label rows in ready order, checked, then left out
            assert db.read(STALE_OPEN_LABELS)[0][0] == 0
        else:  # its figures of bd stats, checked, then left out (derived, SQLite's only)
            assert stale(db) == []
        for name in names:
            if name.startswith("mesh_calls_fts") or name in ("open_labels", "tallies"):
                continue
            columns = sorted(c for c in db.columns(name) if not (c == "rowid" and name in ordered))
            _, rows = db.read_tuples(f"SELECT {', '.join(columns)} FROM {name}"
                                     + (f" ORDER BY {ordered[name]}" if name in ordered else ""))
            out[name] = [dict(zip(columns, r)) for r in rows]
            if name not in ordered:
                out[name].sort(key=lambda row: json.dumps(row, sort_keys=True, default=str))
        return out


def mesh_table_shape(path: Path, table: str) -> tuple:
    """Columns (name, type, primary-key position) and indexes (unique, columns, partial) of a SQLite table."""
    with sqlite3.connect(path) as conn:
        columns = [(r[1], r[2], r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]
        indexes = sorted(
            (r[2], tuple(c[2] for c in conn.execute(f"PRAGMA index_info({r[1]})")), r[4])
            for r in conn.execute(f"PRAGMA index_list({table})"))
    return columns, indexes


def verified_checkpoints(tracker: Tracker, task_id: str) -> list[str]:
    """Kinds of the task's checkpoints, each verified against KEY (a bad one fails the test)."""
    kinds = []
    for comment in tracker.comments(task_id):
        cp = parse_checkpoint(comment["text"], id=comment["id"], author=comment["author"])
        if cp is not None:
            assert checkpoint_problem(cp, KEY.encode(), task_id=task_id) is None
            kinds.append(cp.kind)
    return kinds


@pytest.fixture
def signing_key(monkeypatch):
    monkeypatch.setenv("MESH_SIGNING_KEY", KEY)
    from orchestrator.protocol.checkpoint import signing_key as key

    return key()


def build_workspace(tracker: Tracker, key: bytes) -> dict:
    """A workspace touching every table and column kind; returns ids the tests look at."""
    import_jsonl(tracker, io.StringIO(json.dumps(ODD_ISSUE) + "\n"))
    epic = tracker.create("Epic", issue_type="epic", labels=["plan", "b-label", "a-label"], priority=1)["id"]
    task = tracker.create("Task", parent=epic, description=ODD_TEXT, metadata={"k": [1, 2.5, None]},
                          idempotency_key="make-task")["id"]
    other = tracker.create("Other", parent=epic, assignee="bob")["id"]
    tracker.add_dependency(other, task)
    tracker.add_dependency(task, "mg-odd", "related")
    tracker.update(other, defer_until="2030-01-01T00:00:00Z", notes="n")
    gate = tracker.gate_create("wait for CI", blocks=other, await_type="timer", timeout_ns=3_600_000_000_000)["id"]
    tracker.claim(task, actor="runner-1")
    tracker.add_comment(task, ODD_TEXT, author="human")
    payload = sign_payload({"v": 1, "run_id": "run-1", "seq": 1, "kind": "proposal", "task_id": task,
                            "artifact": {"plan": ODD_TEXT}}, key)
    tracker.add_comment(task, format_checkpoint("proposal", "plan ready", payload, details=ODD_TEXT),
                        author="mesh/proposer", dedupe_key=dedupe_key("run-1", 1))
    closed = tracker.create("Done", labels=["plan"])["id"]
    tracker.close_issue(closed, reason="finished")
    tracker.set_config("custom.key", "value ✓")
    with tracker.transaction() as c:  # an id gap: the counter must not hand 'lost' ids out again
        c.execute("DELETE FROM events WHERE id = (SELECT MAX(id) FROM events)")
    ensure_calls_table(tracker)
    log_call(tracker, run_id="run-1", task_id=task, role="proposer", round="proposal", attempt=1, backend="replay",
             model="m-1", prompt="plan the retries", response="use exponential backoff", usage={"input_tokens": 7},
             duration_s=0.25, error=None)
    ensure_lease_table(tracker)
    ensure_lock_table(tracker)
    with tracker.transaction() as c:
        c.execute("INSERT INTO mesh_leases VALUES (?, 'run-1', 'tok', 'me', 42, 'host', 1.5, 2.25, 1e10)", (task,))
        c.execute("INSERT INTO mesh_locks VALUES ('land:origin:main', 'tok', 'me', 42, 'host', 1.5, 1e10)")
        # Any mesh_ table is copied generically: a composite key, a unique pair, a partial index, defaults.
        c.execute("CREATE TABLE mesh_zz_generic (a TEXT NOT NULL, b INTEGER NOT NULL DEFAULT 7, c REAL,"
                  " d TEXT DEFAULT 'dflt', e TEXT, PRIMARY KEY (a, b), UNIQUE (d, e))")
        c.execute("CREATE INDEX mesh_zz_generic_open ON mesh_zz_generic(c, a) WHERE d = 'open' AND b > 1")
        c.executemany("INSERT INTO mesh_zz_generic VALUES (?, ?, ?, ?, ?)",
                      [("x", 1, 0.1, "open", None), ("x", 2, None, "open", "e"), ("y", 3, -2.5e-300, None, ODD_TEXT)])
    return {"epic": epic, "task": task, "other": other, "gate": gate, "closed": closed}


def make_source(tmp_path: Path, key: bytes) -> tuple[Path, dict]:
    with Tracker.init(tmp_path / "src", prefix="mg", actor="alice") as tracker:
        ids = build_workspace(tracker, key)
    return tmp_path / "src" / ".beads" / "mesh.db", ids


# --------------------------------------------------------------------- lossless round trips


def test_sqlite_to_postgres_and_back_loses_nothing(tmp_path, pg_url, signing_key):
    source, ids = make_source(tmp_path, signing_key)
    final = tmp_path / "back" / "mesh.db"
    before = dump(source)
    with Tracker(source) as tracker:
        exported = export_text(tracker)
        ready = [i["id"] for i in tracker.ready()]

    there = migrate(source, pg_url)
    assert there.tables["issues"] == len(before["issues"]) and not there.replaced
    assert dump(pg_url) == before
    back = migrate(pg_url, final)
    assert back.tables == there.tables
    assert dump(final) == before
    for table in ("mesh_calls", "mesh_leases", "mesh_locks", "mesh_zz_generic"):
        assert mesh_table_shape(final, table) == mesh_table_shape(source, table), table

    for target in (pg_url, final):
        with Tracker(target, actor="carol") as tracker:
            assert export_text(tracker) == exported
            assert [i["id"] for i in tracker.ready()] == ready
            assert verified_checkpoints(tracker, ids["task"]) == ["proposal"]
            assert [c["text"] for c in tracker.comments(ids["task"])][0] == ODD_TEXT
            # The dedupe key came along: a resumed run does not write its checkpoint twice.
            again = tracker.add_comment(ids["task"], "replayed", dedupe_key=dedupe_key("run-1", 1))
            assert again["text"].startswith("[orch:proposal]") and len(tracker.comments(ids["task"])) == 2
            # Counters carried over: new rows get ids after every copied (and deleted) one.
            top_event = max(e["id"] for e in before["events"]) + 1
            tracker.add_comment(ids["task"], "after the move")
            assert tracker.events()[-1]["id"] > top_event
            assert tracker.create("next child", parent=ids["epic"])["id"] == f"{ids['epic']}.3"
            assert tracker.create("same key", idempotency_key="make-task")["id"] == ids["task"]
            assert tracker.doctor()["ok"]


def test_orchestrator_tables_work_after_the_move(tmp_path, pg_url, signing_key):
    source, ids = make_source(tmp_path, signing_key)
    final = tmp_path / "back.db"
    migrate(source, pg_url)
    migrate(pg_url, final)
    with Tracker(final) as tracker:
        ensure_calls_table(tracker)  # SQLite's search index is derived: rebuilt on first use
        hits = tracker.db.read("SELECT rowid FROM mesh_calls_fts WHERE mesh_calls_fts MATCH '\"backoff\"'")
        assert [r[0] for r in hits] == [1]
        log_call(tracker, run_id="run-2", task_id=ids["task"], role="critic_a", round="critique", attempt=1,
                 backend="replay", model=None, prompt="p", response="r", usage={}, duration_s=0.0, error=None)
        assert [r[0] for r in tracker.db.read("SELECT id FROM mesh_calls ORDER BY id")] == [1, 2]
        with pytest.raises(sqlite3.IntegrityError):  # the lease table kept its primary key
            with tracker.transaction() as c:
                c.execute("INSERT INTO mesh_leases VALUES (?, 'run-2', 't', 'x', 1, 'h', 1, 1, 1)", (ids["task"],))


def test_postgres_to_postgres_and_sqlite_to_sqlite(tmp_path, pg_server, pg_url, signing_key):
    source, _ = make_source(tmp_path, signing_key)
    before = dump(source)
    copy = tmp_path / "copy.db"
    migrate(f"sqlite:///{source}", copy)
    assert dump(copy) == before
    migrate(source, pg_url)
    second = pg_server.create_database("migrate_second")
    try:
        migrate(pg_url, second)
        assert dump(second) == before
    finally:
        pg_server.drop_database("migrate_second")


@pytest.mark.parametrize("path", beads_real_files(), ids=lambda p: p.name)
def test_real_beads_export_through_postgres(path, tmp_path, pg_url):
    """``import``/``export`` on PostgreSQL give the same bytes as on SQLite, and so does a migration."""
    with Tracker.init(tmp_path / "a", prefix="bd") as local:
        import_jsonl(local, path)
        expected = export_text(local)
    with Tracker.init(tmp_path, prefix="bd", db_path=pg_url) as remote:
        import_jsonl(remote, path)
        assert export_text(remote) == expected
    migrate(pg_url, tmp_path / "b.db")
    with Tracker(tmp_path / "b.db") as back:
        assert export_text(back) == expected


def test_nul_characters_of_an_import_survive_both_engines(tracker, tmp_path):
    """PostgreSQL stores no NUL (real beads exports hold some): the import keeps the original
    for the export, and the workspace still moves between engines."""
    line = {"id": "tt-nul", "title": "t", "status": "open", "priority": 1, "issue_type": "task",
            "notes": "before\x00after", "comments": [{"id": 1, "issue_id": "tt-nul", "author": "a",
                                                      "text": "x\x00y", "created_at": "2025-01-01T00:00:00Z"}]}
    source = json.dumps(line, separators=(",", ":")) + "\n"
    assert import_jsonl(tracker, io.StringIO(source)).warnings == []
    assert json.loads(export_text(tracker)) == line
    assert tracker.get("tt-nul")["notes"] == "before\ufffdafter"
    assert tracker.comments("tt-nul")[0]["text"] == "x\x00y"
    moved = tmp_path / "moved.db"
    migrate(tracker.path, moved)
    with Tracker(moved) as back:
        assert export_text(back) == export_text(tracker)


# --------------------------------------------------------------------- targets and refusals


def test_non_empty_target_is_refused_then_replaced_with_force(tmp_path, db_target, signing_key):
    source, _ = make_source(tmp_path, signing_key)
    target = db_target or tmp_path / "target.db"
    with Tracker(target, create=True) as tracker:
        tracker.set_config("issue_prefix", "tg")
        mine = tracker.create("the target's own work")["id"]
        ensure_calls_table(tracker)
        before = export_text(tracker)
    with pytest.raises(ConflictError) as refused:
        migrate(source, target)
    assert refused.value.code == "target_not_empty" and "1 issues" in str(refused.value)
    with Tracker(target) as tracker:
        assert export_text(tracker) == before and tracker.prefix == "tg"

    report = migrate(source, target, replace=True)
    assert report.replaced
    assert dump(target) == dump(source)
    with Tracker(target) as tracker:
        assert not tracker.exists(mine) and tracker.prefix == "mg"


def test_initialised_empty_target_is_accepted(tmp_path, db_target, signing_key):
    source, _ = make_source(tmp_path, signing_key)
    target = db_target or tmp_path / "fresh" / ".beads" / "mesh.db"
    Tracker.init(tmp_path / "fresh", prefix="other", db_path=db_target).close()
    assert not migrate(source, target).replaced
    assert dump(target) == dump(source)


def test_a_row_the_target_refuses_rolls_everything_back(tmp_path, pg_url, pg_server):
    source = tmp_path / "src.db"
    with Tracker(source, create=True) as tracker:
        issue = tracker.create("fine")["id"]
        tracker.add_comment(issue, "PostgreSQL stores no NUL: \x00")
    with pytest.raises(InvalidValueError) as caught:
        migrate(source, pg_url)
    assert caught.value.code == "migration_refused" and "comments" in str(caught.value)
    assert "\n" not in str(caught.value)
    database = pg_url.rsplit("/", 1)[1]
    assert pg_server.psql(database, "SELECT to_regclass('issues') IS NULL") == "[(True,)]"


def test_a_table_the_target_cannot_define_rolls_everything_back(tmp_path, pg_url, pg_server):
    source = tmp_path / "src.db"
    with Tracker(source, create=True) as tracker:
        tracker.create("fine")
        with tracker.transaction() as c:
            c.execute("CREATE TABLE mesh_sqlite_only (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID")
    with pytest.raises(InvalidValueError) as caught:
        migrate(source, pg_url)
    assert caught.value.code == "migration_refused" and "definition of mesh_sqlite_only" in str(caught.value)
    assert pg_server.psql(pg_url.rsplit("/", 1)[1], "SELECT to_regclass('issues') IS NULL") == "[(True,)]"


def test_orphan_rows_fail_without_leaving_a_file(tmp_path, pg_url):
    """A source damaged by a writer without foreign keys cannot be copied: a typed refusal, and
    the SQLite file the migration had started is gone again."""
    source = tmp_path / "src.db"
    Tracker(source, create=True).close()
    with sqlite3.connect(source) as conn:
        conn.execute("INSERT INTO labels(issue_id, label) VALUES ('ghost', 'x')")
    target = tmp_path / "new" / "t.db"
    for destination in (target, pg_url):
        with pytest.raises(InvalidValueError) as caught:
            migrate(source, destination)
        assert caught.value.code == "migration_refused" and "labels" in str(caught.value)
    assert not target.exists() and not list(target.parent.glob("t.db*"))


def test_unusable_source_or_same_database(tmp_path, pg_server, pg_url):
    target = tmp_path / "t.db"
    with pytest.raises(WorkspaceError) as missing:
        migrate(tmp_path / "none.db", target)
    assert "no tracker database" in str(missing.value)
    with pytest.raises(WorkspaceError) as down:
        migrate(f"postgresql://mesh:pw@127.0.0.1:{closed_port()}/x", target)
    assert down.value.code == "tracker_unavailable" and ":pw@" not in str(down.value)
    assert not target.exists()

    Tracker(target, create=True).close()
    for other in (target, f"sqlite:///{target}", tmp_path / "." / "t.db"):
        with pytest.raises(InvalidValueError) as same:
            migrate(target, other, replace=True)
        assert same.value.code == "same_database"
    Tracker(pg_url, create=True).close()
    alias = pg_url.replace("127.0.0.1", "localhost")
    with pytest.raises(InvalidValueError) as same_server:
        migrate(pg_url, alias, replace=True)
    assert same_server.value.code == "same_database"


# --------------------------------------------------------------------- the command


def test_cli_migrate(tmp_path, pg_url, monkeypatch, signing_key):
    monkeypatch.chdir(tmp_path)
    source, _ = make_source(tmp_path, signing_key)
    run = CliRunner().invoke
    done = run(cli, ["tracker", "migrate", "--from", str(source), "--to", pg_url, "--json"], catch_exceptions=False)
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["from"], report["to"], report["replaced"]) == (str(source), pg_url, False)
    assert report["tables"]["mesh_zz_generic"] == 3 and report["issues"] == report["tables"]["issues"]

    again = run(cli, ["tracker", "migrate", "--from", str(source), "--to", pg_url, "--json"], catch_exceptions=False)
    assert again.exit_code == 1 and json.loads(again.stderr)["code"] == "target_not_empty"
    forced = run(cli, ["tracker", "migrate", "--from", str(source), "--to", pg_url, "--force"], catch_exceptions=False)
    assert forced.exit_code == 0 and forced.stdout.startswith(f"Migrated {report['issues']} issue(s)")

    back = tmp_path / "back.db"
    home = run(cli, ["tracker", "migrate", "--from", pg_url, "--to", str(back)], catch_exceptions=False)
    assert home.exit_code == 0, home.stderr
    assert dump(back) == dump(source)
    for args in (["--from", str(source)], ["--to", str(back)], ["--inspect", "--from", "a", "--to", "b"], []):
        assert run(cli, ["tracker", "migrate", *args]).exit_code == 2, args
    readonly = run(cli, ["tracker", "migrate", "--readonly", "--from", str(source), "--to", str(tmp_path / "r.db")])
    assert readonly.exit_code == 1 and not (tmp_path / "r.db").exists()
