"""Leases and races, with processes: two runs never take one task; racing closers close once."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import time

import pytest

from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.protocol.lease import Lease, LeaseHeld
from orchestrator.runner import RunOptions, run
from tests.runkit import TASK, happy_script, make_workspace



@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def test_lease_is_exclusive_until_expiry_or_force(ws):
    with ws.tracker() as t:
        first = Lease.acquire(t, TASK, "run-a", holder="a", ttl_s=30, now=1000.0)
        with pytest.raises(LeaseHeld, match="run-a"):
            Lease.acquire(t, TASK, "run-b", holder="b", ttl_s=30, now=1010.0)
        # Expired: taken over.
        second = Lease.acquire(t, TASK, "run-b", holder="b", ttl_s=30, now=1031.0)
        assert not first.renew(t)  # the old holder learns it lost the lease
        # Forced: taken over at once.
        third = Lease.acquire(t, TASK, "run-c", holder="c", ttl_s=30, force=True, now=1032.0)
        assert not second.renew(t)
        assert third.renew(t)
        third.release(t)
        Lease.acquire(t, TASK, "run-d", holder="d", ttl_s=30)


def test_a_live_lease_makes_run_skip_to_the_next_task(ws):
    with ws.tracker() as t:
        lease = Lease.acquire(t, TASK, "run-other", holder="someone", ttl_s=300)
    try:
        code, report, res = ws.run(happy_script())
        assert code == 0, res.output
        assert report["task"]["id"] == "demo-7kq.4"
    finally:
        with ws.tracker() as t:
            lease.release(t)


def test_resume_of_a_task_held_by_a_live_lease_exits_3_unless_forced(ws):
    with ws.tracker() as t:
        t.claim(TASK, actor="someone")
        Lease.acquire(t, TASK, "run-other", holder="someone", ttl_s=300)
    path = ws.write_script(happy_script())
    res = ws.mesh("resume", TASK, "--backend", "replay", "--script", str(path), "--repo", str(ws.repo))
    assert res.exit_code == 3
    assert "--force" in res.stderr
    res = ws.mesh("resume", TASK, "--force", "--backend", "replay", "--script", str(path), "--repo", str(ws.repo),
                  "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["outcome"] == "closed"
    assert any("taken over from someone" in m for m in report["mutations"])


def _run_in_process(db, repo, script, out_queue):
    report = run(RunOptions(label="plan:demo", backend="replay", script=script, repo=repo, db=db, actor="racer"),
                 echo=lambda line: None)
    out_queue.put(report.task["id"] if report.task else None)


@pytest.mark.slow
def test_two_runs_on_one_scope_never_take_the_same_task(ws):
    script = happy_script()
    for responses in script.values():
        for entry in responses:
            entry["delay_s"] = 0.05
    path = ws.write_script(script)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_run_in_process, args=(ws.db, ws.repo, path, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    taken = sorted(queue.get(timeout=5) for _ in procs)
    assert taken == ["demo-7kq.1", "demo-7kq.4"]


def _close_by_resume(db, repo, script, start):
    start.wait(120)  # both contenders ready: they go at the same instant
    try:
        run(RunOptions(label="plan:demo", backend="replay", script=script, repo=repo, db=db, actor="tester",
                       task=TASK, force=True), echo=lambda line: None)
    finally:
        os._exit(0)


def _close_by_ci(db, checkout, start):
    from orchestrator.landing.ci_close import ci_close
    from orchestrator.config import load_config
    from orchestrator.protocol.scope import Scope
    from tracker.store import Tracker

    start.wait(120)
    try:
        with Tracker(db, actor="ci") as tracker:
            ci_close(tracker, load_config(checkout), Scope("label", plan_label="plan:demo"), repo=checkout)
    finally:
        os._exit(0)


def _kill_before_close(ws, path):
    def child():
        os.environ["MESH_CRASH_AT"] = "close#1"
        run(RunOptions(label="plan:demo", backend="replay", script=path, repo=ws.repo, db=ws.db, actor="tester"),
            echo=lambda line: None)
        os._exit(0)

    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=child)
    p.start()
    p.join(120)
    assert p.exitcode == -9


@pytest.mark.slow
def test_local_run_and_ci_close_racing_close_once(tmp_path):
    """50 repetitions: an approved task, killed just before its close, is closed by a resumed
    local run and by `mesh ci-close` at the same instant, in two processes."""
    template = make_workspace(tmp_path / "template")
    path = template.write_script(happy_script())
    _kill_before_close(template, path)
    resume_script = template.write_script({}, "empty.json")  # every answer is checkpointed already
    # CI closes for its own checkout of the task branch: the run head binds the approval to it.
    checkout = tmp_path / "ci-checkout"
    subprocess.run(["git", "clone", "-q", "--branch", f"mesh/{TASK}", str(template.repo), str(checkout)], check=True)
    with template.tracker() as t:
        assert [cp.kind for cp in load_checkpoints(t, TASK)][-1] == "run-head", "the killed run must hold its head"
        t.db.conn.execute(f"VACUUM INTO '{tmp_path / 'ci-alone.db'}'")
    # Alone, the CI closer closes the task: in the race below it is a real contender.
    from orchestrator.landing.ci_close import ci_close
    from orchestrator.config import load_config
    from orchestrator.protocol.scope import Scope
    from tracker.store import Tracker

    with Tracker(tmp_path / "ci-alone.db", actor="ci") as t:
        alone = ci_close(t, load_config(checkout), Scope("label", plan_label="plan:demo"), repo=checkout)
        assert [c.result for c in alone] == ["closed"], [c.to_dict() for c in alone]
    ctx = multiprocessing.get_context("fork")
    for i in range(50):
        db = tmp_path / f"race-{i}.db"
        with template.tracker() as t:
            t.db.conn.execute(f"VACUUM INTO '{db}'")
        start = ctx.Barrier(2)
        procs = [ctx.Process(target=_close_by_resume, args=(db, template.repo, resume_script, start)),
                 ctx.Process(target=_close_by_ci, args=(db, checkout, start))]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        with Tracker(db) as t:
            closes = [e for e in t.events(TASK) if e["field"] == "status" and e["new_value"] == "closed"]
            assert t.get(TASK)["status"] == "closed", i
            assert len(closes) == 1, (i, closes)
            kinds = [cp.kind for cp in load_checkpoints(t, TASK)]
            assert kinds.count("outcome") <= 1
    assert subprocess.run(["git", "status", "--porcelain"], cwd=template.repo, capture_output=True,
                          text=True).stdout == ""
