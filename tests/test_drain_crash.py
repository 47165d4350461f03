"""``mesh drain`` crash safety and control: SIGKILL at many points then the same command again,
Ctrl-C once and twice. The drain runs as a real child process (``MESH_CRASH_AT`` makes it
SIGKILL itself at a named point)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.drainkit import ROOT, DrainWorkspace, make_drain_workspace
from tests.test_drain import PROTOCOL, diff, protocol

pytestmark = pytest.mark.slow


def _child(ws: DrainWorkspace, *extra: str, jobs: int = 1, crash_at: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    if crash_at:
        env["MESH_CRASH_AT"] = crash_at
    return subprocess.Popen([sys.executable, "-c", "from orchestrator.cli.main import main; main()",
                             *ws.drain_args(*extra, jobs=jobs)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _small_graph(ws: DrainWorkspace) -> None:
    ws.task("A", patch=diff("lib.txt", [], ["a"]))
    ws.task("B", after=("A",), patch=diff("lib.txt", ["a"], ["a", "b"]))
    ws.task("C", patch=diff("c.txt", [], ["c"]))


@pytest.mark.parametrize("crash_at", ["checkpoint#3", "checkpoint#17", "checkpoint#30", "checkpoint#50", "commit#2",
                                      "validation#3", "land-commit#1", "land-ref#1", "land-ref#3", "close#2"])
def test_sigkill_then_rerun_gives_the_same_tree_and_no_duplicates(tmp_path, crash_at):
    ws = make_drain_workspace(tmp_path)
    _small_graph(ws)
    proc = _child(ws, jobs=2, crash_at=crash_at)
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL  # the kill point was reached
    code, events, res = ws.drain(jobs=2)
    assert code == 0, res.output
    tree = ws.tree()
    assert (tree["lib.txt"], tree["c.txt"]) == ("a\nb\n", "c\n")
    assert sorted(ws.landed_tasks()) == sorted(ws.ids[n] for n in "ABC")  # no commit landed twice
    with ws.tracker() as t:
        for name in "ABC":
            assert t.get(ws.ids[name])["status"] == "closed"
            assert protocol(ws.checkpoints(name)) == PROTOCOL
            assert len(t.comments(ws.ids[name])) == len(PROTOCOL) + 1  # no comment written twice
            assert len({cp.run_id for cp in ws.checkpoints(name)}) == 1
        assert len(t.list(issue_type="task", include_closed=True)) == 3


def test_ctrl_c_once_finishes_the_running_task_and_starts_no_new_one(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("P", priority=1, patch=diff("p.txt", [], ["p"]), sleep_s=0.05)
    ws.task("Q", priority=2, patch=diff("q.txt", [], ["q"]), sleep_s=0.05)
    proc = _child(ws)
    for line in proc.stdout:
        if json.loads(line)["event"] == "task_started":
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "starting no new task" in err
    summary = json.loads(out.splitlines()[-1])
    assert summary["stop_reason"] == "interrupted"
    assert (ws.status("P"), ws.status("Q")) == ("closed", "open")
    assert ws.tree()["p.txt"] == "p\n" and ws.checkpoints("Q") == []


def test_ctrl_c_twice_stops_now_and_the_same_command_resumes(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("P", priority=1, patch=diff("p.txt", [], ["p"]), sleep_s=0.05)
    ws.task("Q", priority=2, patch=diff("q.txt", [], ["q"]), sleep_s=0.05)
    proc = _child(ws)
    for line in proc.stdout:
        event = json.loads(line)
        if event["event"] == "checkpoint" and event["kind"] == "proposal":
            break
    proc.send_signal(signal.SIGINT)
    # (preflight's lines about the sandboxes come first on stderr)
    assert any("starting no new task" in line for line in iter(proc.stderr.readline, ""))
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130
    assert "stopping now" in err and "resumable" in err
    assert ws.status("P") == "in_progress"
    code, events, res = ws.drain()
    assert code == 0, res.output
    runs = [e for e in events if e["event"] == "task_run" and e["task"] == ws.ids["P"]]
    assert runs and runs[0]["resumed"]
    assert (ws.status("P"), ws.status("Q")) == ("closed", "closed")
    assert protocol(ws.checkpoints("P")) == PROTOCOL


def test_mesh_resume_of_a_killed_drain_task_still_lands_on_its_branch(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("A", patch=diff("a.txt", [], ["a"]))
    proc = _child(ws, crash_at="checkpoint#5")
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    from tests.test_drain import ws_mesh

    res = ws_mesh(ws, "resume", ws.ids["A"], "--force", "--backend", "command", "--worker-cmd", ws.worker_cmd(),
                  "--repo", str(ws.repo), "--config", str(ws.config), "--json")
    assert res.exit_code == 0, res.output
    assert ws.status("A") == "closed"
    assert ws.tree()["a.txt"] == "a\n"
    assert protocol(ws.checkpoints("A")) == PROTOCOL


def test_sigkill_inside_the_retry_of_a_sent_back_task_then_rerun(tmp_path):
    ws = make_drain_workspace(tmp_path, files={"shared.txt": "value = 0\n"})
    for name, value in (("X", "1"), ("Y", "2")):
        ws.task(name, patch=diff("shared.txt", ["value = 0"], [f"value = {value}"]),
                retry_files={"shared.txt": "value = 1 + 2\n"})
    # The second commit made for a landing is the retry's: killed before the branch moves.
    proc = _child(ws, jobs=2, crash_at="land-commit#2")
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    code, events, res = ws.drain(jobs=2)
    assert code == 0, res.output
    assert ws.tree()["shared.txt"] == "value = 1 + 2\n"
    assert sorted(ws.landed_tasks()) == sorted(ws.ids[n] for n in "XY")
    lands = sorted([a["result"] for a in ws.lands(n)] for n in "XY")
    assert lands == [["conflict", "landed"], ["landed"]]


def test_sigkill_between_the_close_and_its_outcome_then_rerun_writes_only_what_is_missing(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("A", patch=diff("lib.txt", [], ["a"]))
    ws.task("B", after=("A",), patch=diff("lib.txt", ["a"], ["a", "b"]))
    proc = _child(ws, crash_at="close#1")
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    # What the killed run did next, before its outcome: the close. No crash point sits between
    # the two, so the test makes the tracker write itself.
    with ws.tracker("tester") as t:
        t.close_issue(ws.ids["A"], reason="closed by the killed run", expect_status=("in_progress",))
    assert [cp.kind for cp in ws.checkpoints("A") if cp.kind != "run-head"] == PROTOCOL[:-1]
    code, events, res = ws.drain()
    assert code == 0, res.output
    assert ws.tree()["lib.txt"] == "a\nb\n"
    assert ws.landed_tasks() == [ws.ids["A"], ws.ids["B"]]
    for name in "AB":
        assert ws.status(name) == "closed"
        assert protocol(ws.checkpoints(name)) == PROTOCOL
        assert len({cp.run_id for cp in ws.checkpoints(name)}) == 1
    started = [e["task"] for e in events if e["event"] == "task_started"]
    assert started == [ws.ids["A"], ws.ids["B"]]
