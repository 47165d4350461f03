"""The PostgreSQL tracker under bad conditions and real concurrency.

An unreachable server, refused credentials, a database newer than the code and a
connection dropped mid-way each end in one line with code ``tracker_unavailable``
(exit 4 from the CLI), never a traceback and never a half-written task. Claims
race from many processes: exactly one winner per issue, no issue claimed twice.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tracker.errors import ConflictError, WorkspaceError
from tracker.store import Tracker

ROOT = Path(__file__).resolve().parent.parent
SECRET = "hunter2-not-for-logs"
UNAVAILABLE = "tracker_unavailable"


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mesh_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``mesh ARGS`` in a new interpreter: what a user sees, tracebacks included if any."""
    run_env = {k: v for k, v in os.environ.items() if k != "MESH_DB"}
    run_env.update(env or {})
    return subprocess.run([sys.executable, "-c", "from orchestrator.cli.main import main; main()", *args],
                          cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=120)


def assert_unavailable_cli(url: str) -> str:
    """``mesh tracker list`` on ``url``: exit 4, one JSON line with the code, no secret; returns the message."""
    done = mesh_cli("--db", url, "tracker", "list", "--json")
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and SECRET not in done.stderr and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    error = json.loads(lines[0])
    assert error["code"] == UNAVAILABLE
    return error["error"]


def assert_unavailable(url: str) -> WorkspaceError:
    with pytest.raises(WorkspaceError) as caught:
        Tracker(url)
    assert caught.value.code == UNAVAILABLE
    assert "\n" not in str(caught.value) and SECRET not in str(caught.value)
    return caught.value


# --------------------------------------------------------------------- unreachable, credentials


def test_unreachable_server_is_one_line_and_exit_4():
    url = f"postgresql://mesh:{SECRET}@127.0.0.1:{closed_port()}/tracker"
    error = assert_unavailable(url)
    assert "refused" in str(error).lower() and "mesh:***@" in str(error)
    assert "refused" in assert_unavailable_cli(url).lower()
    plain = mesh_cli("--db", url, "tracker", "ready")
    assert plain.returncode == 4 and plain.stderr.startswith("Error: tracker unavailable: ")
    assert len(plain.stderr.splitlines()) == 1 and SECRET not in plain.stderr


@pytest.fixture(scope="module")
def password_server():
    """A second throwaway server that checks passwords (the session's trusts 127.0.0.1), with a
    role ``bob`` (password SECRET) owning a tracker database ``work``."""
    from tests.pgserver import start_server

    server, why = start_server(password="admin-" + SECRET, max_connections=40)
    if server is None:
        if os.environ.get("MESH_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here (MESH_REQUIRE_POSTGRES=1): {why}")
        pytest.skip(why)
    try:
        server.psql("postgres", f"CREATE ROLE bob LOGIN PASSWORD '{SECRET}'")
        server.psql("postgres", 'CREATE DATABASE "work" OWNER bob')
        yield server
    finally:
        server.stop()


def test_right_password_opens_and_wrong_credentials_are_refused(password_server):
    good = password_server.url("work", user="bob", password=SECRET)
    with Tracker(good, create=True) as tracker:
        tracker.create("reachable")
    refusals = {
        "wrong password": password_server.url("work", user="bob", password=SECRET + "x"),
        "no such user": password_server.url("work", user="mallory", password=SECRET),
        "no password": password_server.url("work", user="bob", password=""),
    }
    for case, url in refusals.items():
        error = assert_unavailable(url)
        assert "password" in str(error), (case, str(error))
        assert "password" in assert_unavailable_cli(url), case
    with Tracker(good) as tracker:
        assert [i["title"] for i in tracker.list()] == ["reachable"]


# --------------------------------------------------------------------- newer schema


def test_newer_schema_is_refused_and_left_alone(tmp_path, db_target, request):
    target = db_target or str(tmp_path / "t.db")
    with Tracker(target, create=True) as tracker:
        tracker.create("written by a newer mesh")
    newer = "INSERT INTO schema_version(version, applied_at) VALUES (99, '2030-01-01T00:00:00Z')"
    if db_target:
        request.getfixturevalue("pg_server").psql(db_target.rsplit("/", 1)[1], newer)
    else:
        with sqlite3.connect(target) as conn:
            conn.execute(newer)
    error = assert_unavailable(target)
    assert "schema version 99" in str(error) and "upgrade mesh" in str(error)
    assert "schema version 99" in assert_unavailable_cli(target)
    if db_target:
        rows = request.getfixturevalue("pg_server").psql(
            db_target.rsplit("/", 1)[1], "SELECT max(version), (SELECT count(*) FROM issues) FROM schema_version")
        assert rows == "[(99, 1)]"
    else:
        with sqlite3.connect(target) as conn:
            assert conn.execute("SELECT max(version), (SELECT count(*) FROM issues) FROM schema_version").fetchone() \
                == (99, 1)


# --------------------------------------------------------------------- dropped connections


def backend_pid(tracker: Tracker) -> int:
    return tracker.db.read("SELECT pg_backend_pid()")[0][0]


def test_dropped_connection_is_unavailable_then_a_new_one_works(pg_server, pg_url):
    tracker = Tracker(pg_url, create=True)
    kept = tracker.create("before the drop")["id"]
    pg_server.psql("postgres", f"SELECT pg_terminate_backend({backend_pid(tracker)})")
    with pytest.raises(WorkspaceError) as caught:
        tracker.list()
    assert caught.value.code == UNAVAILABLE and "\n" not in str(caught.value)
    tracker.close()
    with Tracker(pg_url) as fresh:
        assert [i["id"] for i in fresh.list()] == [kept]


def test_connection_dropped_inside_a_transaction_writes_nothing(pg_server, pg_url):
    with Tracker(pg_url, create=True) as setup:
        parent = setup.create("parent")["id"]
    tracker = Tracker(pg_url)
    with pytest.raises(WorkspaceError) as caught:
        with tracker.transaction():
            child = tracker.create("half-written child", parent=parent, labels=["x"])["id"]
            tracker.add_comment(child, "first step done")
            pg_server.psql("postgres", f"SELECT pg_terminate_backend({backend_pid(tracker)})")
            tracker.update(child, status="in_progress")
    assert caught.value.code == UNAVAILABLE
    tracker.close()
    with Tracker(pg_url) as check:
        assert [i["id"] for i in check.list(include_closed=True)] == [parent]
        for table in ("labels", "comments", "dependencies", "child_counters"):
            assert check.db.read(f"SELECT count(*) FROM {table}")[0][0] == 0, table
        assert [e["event_type"] for e in check.events()] == ["created"]
        # The next child takes the number the lost one had: the counter was rolled back too.
        assert check.create("next child", parent=parent)["id"] == f"{parent}.1"


HALF_WRITER = """
import sys, time
from tracker.store import Tracker
tracker = Tracker(sys.argv[1])
with tracker.transaction():
    issue = tracker.create("never committed", labels=["lost"])["id"]
    tracker.add_comment(issue, "lost too")
    print(issue, flush=True)
    time.sleep(600)
"""


def test_process_killed_mid_transaction_leaves_nothing(tmp_path, db_target):
    target = db_target or str(tmp_path / "t.db")
    with Tracker(target, create=True) as tracker:
        tracker.create("committed")
    proc = subprocess.Popen([sys.executable, "-c", HALF_WRITER, target], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        lost = proc.stdout.readline().strip()
        assert lost, "the writer never reached the middle of its transaction"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        proc.stdout.close()
    with Tracker(target) as check:
        assert [i["title"] for i in check.list()] == ["committed"]
        assert not check.exists(lost)
        assert check.db.read("SELECT count(*) FROM comments")[0][0] == 0
        check.create("the tracker still takes writes")


# --------------------------------------------------------------------- claim races


def _claim_one(url: str, issue_id: str, name: str, start, results) -> None:
    tracker = Tracker(url, actor=name)
    start.wait()
    try:
        tracker.claim(issue_id)
        results.put((name, "won"))
    except ConflictError:
        results.put((name, "lost"))
    finally:
        tracker.close()


def _claim_all(url: str, name: str, start, results) -> None:
    tracker = Tracker(url, actor=name)
    start.wait()
    claimed = []
    while (issue := tracker.claim_next(labels=["pool"])) is not None:
        assert issue["assignee"] == name and issue["status"] == "in_progress"
        claimed.append(issue["id"])
    tracker.close()
    results.put((name, claimed))


def run_processes(target, args_of, count: int) -> list:
    """Start ``count`` spawned processes released together by a barrier; their results."""
    context = multiprocessing.get_context("spawn")  # nothing inherited: each has its own connections
    start = context.Barrier(count)
    results = context.Queue()
    procs = [context.Process(target=target, args=(*args_of(k), start, results)) for k in range(count)]
    for proc in procs:
        proc.start()
    out = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    return out


def test_sixteen_processes_claiming_one_issue_have_one_winner(pg_url):
    with Tracker(pg_url, create=True) as tracker:
        issue = tracker.create("contended")["id"]
    outcomes = dict(run_processes(_claim_one, lambda k: (pg_url, issue, f"claimer-{k}"), 16))
    winners = [name for name, outcome in outcomes.items() if outcome == "won"]
    assert len(outcomes) == 16 and len(winners) == 1
    with Tracker(pg_url) as check:
        final = check.get(issue)
        assert (final["status"], final["assignee"]) == ("in_progress", winners[0])
        claims = [e for e in check.events(issue) if e["event_type"] == "claimed" and e["field"] == "assignee"]
        assert [e["new_value"] for e in claims] == winners


def test_claim_next_from_many_processes_never_claims_twice(pg_url):
    with Tracker(pg_url, create=True, actor="setup") as tracker:
        pool = [tracker.create(f"task {k}", labels=["pool"])["id"] for k in range(60)]
        blocker = tracker.create("held elsewhere", labels=["pool"], assignee="someone", status="in_progress")["id"]
        waiting = [tracker.create(f"blocked {k}", labels=["pool"])["id"] for k in range(5)]
        for issue in waiting:
            tracker.add_dependency(issue, blocker)
    results = dict(run_processes(_claim_all, lambda k: (pg_url, f"runner-{k}"), 8))
    claimed = [issue for ids in results.values() for issue in ids]
    assert len(claimed) == len(set(claimed)), "an issue was claimed twice"
    assert sorted(claimed) == sorted(pool)
    with Tracker(pg_url) as check:
        for name, ids in results.items():
            for issue in ids:
                assert (check.get(issue)["status"], check.get(issue)["assignee"]) == ("in_progress", name)
        assert all(check.get(issue)["status"] == "open" for issue in waiting)
        assert check.get(blocker)["assignee"] == "someone"


# --------------------------------------------------------------------- plans


def test_ready_and_id_lists_use_indexes_on_postgresql(pg_url, tmp_path):
    """The plans the scale benchmark depends on, on its own kind of workspace: without them
    PostgreSQL scans whole tables (``ready --limit 10`` on 100,000 issues: 56 ms, not 1 ms)."""
    import importlib.util
    import io

    from tracker.dialect import JSON_IDS
    from tracker.jsonl import import_jsonl

    spec = importlib.util.spec_from_file_location("gen_workspace", ROOT / "bench" / "gen_workspace.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with Tracker.init(tmp_path, prefix="bm", db_path=pg_url) as tracker:
        import_jsonl(tracker, io.StringIO("".join(json.dumps(o) + "\n" for o in gen.generate(3000))))
        tracker.db.conn.execute("ANALYZE")

        def plan(sql: str, params: tuple) -> str:
            return "\n".join(r[0] for r in tracker.db.read("EXPLAIN " + sql, params))

        ready = plan(*tracker._ready_sql(labels=(), issue_type=None, parent=None, limit=10, now=None))
        assert "issues_ready_order" in ready and "Seq Scan" not in ready, ready
        one = json.dumps([tracker.ready(limit=1)[0]["id"]])
        for sql in (f"SELECT id, defer_sort FROM issues WHERE defer_sort IS NOT NULL AND id IN {JSON_IDS}",
                    f"SELECT issue_id, label FROM labels WHERE issue_id IN {JSON_IDS}",
                    f"SELECT issue_id FROM dependencies WHERE type = 'blocks' AND depends_on_id IN {JSON_IDS}"):
            assert "Seq Scan" not in plan(sql, (one,)), plan(sql, (one,))
