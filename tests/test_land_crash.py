"""A landing interrupted at any point lands once: the crash harness of ``mesh run --onto`` and
``mesh drain`` (issue 16, item 7).

Each case runs the command as a real child process with a shared bare remote (``--remote``), on
SQLite and on PostgreSQL, and SIGKILLs it (``MESH_CRASH_AT``) at one step of the first landing, in
order (``faults.LAND_POINTS``): the landing lock taken, the task branch pushed, the commits made,
the remote's integration branch moved, the local one moved, ``[orch:land]`` written, the lock
released; then the run head written (``close``) and the task closed (``closed``). The local branch
catching up with the remote (``land-sync``) only happens in the run after a kill at ``land-push``:
that case kills twice. Then the same command runs again (``mesh run`` until nothing is left) and
the end state is an uninterrupted run's: every task closed by one run (the killed one resumed, not
a new one), its commits on the integration branch once, locally and on the remote, its task
branch holding exactly what landed, one ``[orch:land]`` per landing, nothing blocked, the
dependent run, no lock or lease left behind. Without a remote, the kill after the branch moved
is the one that matters (the others redo what had not happened, as with a remote).

The first task to land takes two review cycles, so its task branch carries two commits: a resumed run
that took the landed commits for someone else's applied its first patch again and ended blocked
with ``patch_does_not_apply: ... already exists in index``, its dependent never run (what the
attack review observed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.protocol.checkpoint import dedupe_key
from orchestrator.cli.main import cli
from orchestrator.protocol.faults import LAND_POINTS
from tests.drainkit import BRANCH, LABEL, ROOT, DrainWorkspace, git, make_drain_workspace
from tracker.store import Tracker

pytestmark = pytest.mark.slow

A_FINAL = "A = 2\n"
B_CHECK = f"import pathlib\nassert pathlib.Path('pkg/t_a.py').read_text() == {A_FINAL!r}\n"

# One kill per case, at the first landing; "land-sync" is reached in the run after "land-push".
KILLS = [[point] for point in LAND_POINTS if point != "land-sync"] + [["close"], ["closed"],
                                                                       ["land-push", "land-sync"]]


def _plan(ws: DrainWorkspace) -> None:
    """A (two review cycles, two commits); B after A, checked against A's final code."""
    ws.task("A", priority=1, files={"pkg/__init__.py": "", "pkg/t_a.py": "A = 1\n"}, revise={"pkg/t_a.py": A_FINAL})
    ws.task("B", after=("A",), files={"pkg/t_b.py": "from pkg.t_a import A\nB = A + 1\n", "checks/b.py": B_CHECK})


def _args(ws: DrainWorkspace, command: str, remote: bool) -> list[str]:
    shared = ["--remote", "origin"] if remote else []
    if command == "drain":
        return ws.drain_args(*shared)
    return ["--db", str(ws.db), "--actor", "tester", "run", "--label", LABEL, "--onto", BRANCH, *shared,
            "--backend", "command", "--worker-cmd", ws.worker_cmd(), "--repo", str(ws.repo), "--config",
            str(ws.config), "--json"]


def _killed(ws: DrainWorkspace, command: str, remote: bool, crash_at: str) -> None:
    env = {**os.environ, "MESH_CRASH_AT": f"{crash_at}#1"}
    proc = subprocess.run([sys.executable, "-c", "from orchestrator.cli.main import main; main()", *_args(ws, command, remote)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, f"not killed at {crash_at}: exit {proc.returncode}\n{proc.stderr}"


def _again(ws: DrainWorkspace, command: str, remote: bool) -> None:
    """The same command, in-process, until it has nothing left to do: once for ``mesh drain``,
    once per task (and once more to find none) for ``mesh run``."""
    for _ in range(5):
        res = CliRunner().invoke(cli, _args(ws, command, remote), catch_exceptions=False)
        assert res.exit_code == 0, res.output
        if command == "drain":
            return
        report = json.loads(res.stdout)
        if report["outcome"] == "no_runnable_task":
            return
        assert report["outcome"] == "closed", report
    pytest.fail("mesh run kept finding work")


def _commits_by_task(repo, ref: str) -> list[str]:
    out = git(repo, "log", "--reverse", "--format=%(trailers:key=Mesh-Task,valueonly)%x1e", ref)
    return [rec.strip() for rec in out.split("\x1e") if rec.strip()]


def _assert_landed_once(ws: DrainWorkspace, remote: Path | None) -> None:
    ids = {name: ws.ids[name] for name in "AB"}
    tip = git(ws.repo, "rev-parse", BRANCH).strip()
    if remote is not None:
        assert git(remote, "rev-parse", BRANCH).strip() == tip  # the remote holds what landed
    landed = _commits_by_task(ws.repo, BRANCH)
    assert landed == [ids["A"], ids["B"]], landed  # one commit per task
    tree = ws.tree()
    assert (tree["pkg/t_a.py"], tree["pkg/t_b.py"]) == (A_FINAL, "from pkg.t_a import A\nB = A + 1\n")
    with ws.tracker() as t:
        for name, task_id in ids.items():
            assert t.get(task_id)["status"] == "closed", name
            cps = ws.checkpoints(name)
            assert len({cp.run_id for cp in cps}) == 1, (name, "a new run instead of the killed one resumed")
            kinds = [cp.kind for cp in cps]
            assert (kinds.count("land"), kinds.count("run-head"), kinds.count("outcome")) == (1, 1, 1), (name, kinds)
            (land,) = ws.lands(name)
            assert land["result"] == "landed"
            # The landed commit holds the task branch's tree and names its head: nothing applied or
            # committed twice.
            task_head = git(ws.repo, "rev-parse", f"mesh/{task_id}").strip()
            assert git(ws.repo, "rev-parse", f"{task_head}^{{tree}}") == git(ws.repo, "rev-parse", f"{land['sha']}^{{tree}}")
            assert f"Mesh-Source: {task_head}" in git(ws.repo, "log", "-1", "--format=%B", land["sha"]), name
            assert subprocess.run(["git", "merge-base", "--is-ancestor", land["sha"], tip], cwd=ws.repo).returncode == 0
        assert t.db.read("SELECT name FROM mesh_locks") == []
        assert t.db.read("SELECT task_id FROM mesh_leases") == []


def _crash_and_rerun(tmp_path: Path, db_target: str | None, command: str, kills: list[str], *, remote: bool) -> None:
    ws = make_drain_workspace(tmp_path, db=db_target)
    origin = None
    if remote:
        origin = tmp_path / "origin.git"
        git(tmp_path, "clone", "--quiet", "--bare", str(ws.repo), str(origin))
        git(ws.repo, "remote", "add", "origin", str(origin))
    _plan(ws)
    for point in kills:
        _killed(ws, command, remote, point)
    _again(ws, command, remote)
    _assert_landed_once(ws, origin)


@pytest.mark.parametrize("kills", KILLS, ids="+".join)
@pytest.mark.parametrize("command", ["run", "drain"])
def test_a_landing_killed_at_any_step_lands_once_when_the_same_command_runs_again(tmp_path, db_target, command,
                                                                                   kills):
    _crash_and_rerun(tmp_path, db_target, command, kills, remote=True)


@pytest.mark.parametrize("command", ["run", "drain"])
def test_without_a_remote_a_landing_killed_after_the_branch_moved_lands_once(tmp_path, db_target, command):
    _crash_and_rerun(tmp_path, db_target, command, ["land-ref"], remote=False)


def test_two_writers_of_one_run_record_its_landing_once(tmp_path, db_target):
    """The tracker checks for the run's ``[orch:land]`` and writes it in one transaction: writers
    of one run that disagree on the seq (two resumes of it racing) leave one comment."""
    tracker = Tracker.init(tmp_path, prefix="lc", actor="tester", db_path=db_target)
    task = tracker.create("T", issue_type="task")["id"]
    tracker.close()

    def write(seq: int) -> int:
        with Tracker(tracker.path, actor="tester") as mine:
            return mine.add_comment(task, f"[orch:land] landed (writer {seq})",
                                    dedupe_key=dedupe_key("run-1", seq, "land"))["id"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        ids = set(pool.map(write, range(15, 23)))
    with Tracker(tracker.path, actor="tester") as t:
        assert len(ids) == 1 and len(t.comments(task)) == 1
