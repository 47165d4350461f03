"""A run whose PostgreSQL connection is cut mid-way: one line, exit 4, nothing half-written,
and ``mesh resume`` finishes the same run without writing any checkpoint twice."""

from __future__ import annotations

import socket

import psycopg
import pytest

from orchestrator.runner import RunError, RunOptions, run
from tests.runkit import TASK, demo_script, make_workspace
from tests.test_crash_resume import _remaining_script

FULL_RUN = ["preflight", "proposal", "critique", "critique", "critique", "synthesis", "vote", "vote", "vote",
            "vote", "vote", "proof", "review"]


def _cut_every_other_connection(url: str) -> int:
    """Terminate every session of the database but this one (what a server restart or a
    network cut does to the run's connections)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
    return len(rows)


def test_a_connection_cut_mid_run_is_one_line_exit_4_and_resume_finishes(tmp_path, pg_url):
    ws = make_workspace(tmp_path, pg_url)
    script = ws.write_script(demo_script())
    seen: list[str] = []

    def echo(line: str) -> None:
        if line.startswith("[orch:"):
            seen.append(line)
            if len(seen) == 4:
                assert _cut_every_other_connection(pg_url) >= 1

    with pytest.raises(RunError) as failed:
        run(RunOptions(label="plan:demo", backend="replay", script=script, repo=ws.repo, db=pg_url,
                       actor="tester"), echo=echo)
    assert failed.value.exit_code == 4
    message = str(failed.value)
    assert "\n" not in message and message.startswith("tracker unavailable: PostgreSQL at ")
    assert "Traceback" not in message
    written = ws.kinds()
    assert written == FULL_RUN[:len(written)] and len(written) >= 4  # a prefix: nothing half-written

    resumed = ws.write_script(_remaining_script(ws), "resume.json")
    report = run(RunOptions(label="plan:demo", backend="replay", script=resumed, repo=ws.repo, db=pg_url,
                            actor="tester", task=TASK, force=True), echo=lambda line: None)
    assert report.outcome == "closed"
    checkpoints = ws.checkpoints()
    assert len({cp.run_id for cp in checkpoints}) == 1  # the same run, continued
    with ws.tracker() as t:
        texts = [c["text"].split("\n", 1)[0] for c in t.comments(TASK)]
    assert len(texts) == len(set(texts))  # no checkpoint written twice


def test_the_cli_says_one_line_for_an_unreachable_server(tmp_path):
    ws = make_workspace(tmp_path)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    closed = f"postgresql://mesh@127.0.0.1:{port}/none"
    res = ws.mesh("--db", closed, "run", "--label", "plan:demo", "--backend", "replay", "--script",
                  str(ws.write_script(demo_script())), "--repo", str(ws.repo))
    assert res.exit_code == 4
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "tracker unavailable" in err and "Traceback" not in err


def test_config_tracker_url_selects_the_postgresql_tracker(tmp_path, pg_url, monkeypatch):
    monkeypatch.delenv("MESH_DB", raising=False)
    ws = make_workspace(tmp_path, pg_url)
    config = tmp_path / "mesh.toml"  # outside the repo: CI's own file
    own = ws.repo / "mesh.toml"
    config.write_text((own.read_text() if own.exists() else "") + f'\n[tracker]\nurl = "{pg_url}"\n')
    report = run(RunOptions(label="plan:demo", backend="replay", script=ws.write_script(demo_script()),
                            repo=ws.repo, config_file=config, actor="tester"), echo=lambda line: None)
    assert report.outcome == "closed"
    assert not (ws.repo / ".beads" / "mesh.db").exists()  # nothing went to a SQLite file
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "closed"


@pytest.mark.parametrize("lock", ["lease", "landing lock"])
def test_sixteen_runners_racing_for_one_lease_or_lock_one_wins(tmp_path, pg_url, lock):
    """Real concurrent sessions on the server: the compare-and-set statements let exactly one
    of them in, and the rest see who holds it."""
    import threading

    from orchestrator.protocol.lease import Lease, LeaseHeld
    from orchestrator.landing.locks import _try_take, ensure_lock_table
    from tracker.store import Tracker

    with Tracker.init(tmp_path, prefix="lr", db_path=pg_url) as t:
        task = t.create("contended")["id"]
        ensure_lock_table(t)
    barrier = threading.Barrier(16)
    winners: list[int] = []

    def racer(k: int) -> None:
        with Tracker(pg_url, actor=f"runner-{k}") as mine:
            barrier.wait()
            if lock == "lease":
                try:
                    Lease.acquire(mine, task, f"run-{k}", holder=f"runner-{k}", ttl_s=30)
                    winners.append(k)
                except LeaseHeld:
                    pass
            elif _try_take(mine, "land:x:main", f"token-{k}", f"runner-{k}", 30):
                winners.append(k)

    threads = [threading.Thread(target=racer, args=(k,)) for k in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(winners) == 1
