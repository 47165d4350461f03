"""Many runners, one backlog: three ``mesh drain`` processes, each in its own clone of a
repository with a shared bare remote, against one PostgreSQL tracker.

Every task is run once (no checkpoint written twice), landed once, and the remote's
integration branch ends with the same tree as a single runner's drain of the same plan;
then the same with one runner SIGKILLed mid-way, whose task is taken over by the others
once its lease runs out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.drainkit import BRANCH, LABEL, ROOT, DrainWorkspace, git, make_drain_workspace
from tests.test_drain import PROTOCOL, diff, protocol
from tracker.store import Tracker

pytestmark = pytest.mark.slow

RUNNERS = 3
TASKS = 12
# A lease is renewed every third of its TTL; a live runner's lease lapses only when its beats stop
# for two thirds of it (a 4 s lease lapsed once on a loaded machine, and another runner took a
# live task). Where no runner dies none has to lapse: mesh's default lease (60 s: 40 s of stall
# tolerated). Where one is killed, its task is taken over once its lease ran out: short enough to
# wait for, with 13 s of stall between two beats of a live runner tolerated.
LONG_LEASE_S = 60
TAKEOVER_LEASE_S = 20


def _plan(ws: DrainWorkspace) -> None:
    """Twelve tasks in a DAG: three chains of four, the last of each also waiting on a
    task of the next chain (a cross edge), each adding its own file."""
    for i in range(TASKS):
        after = []
        if i >= 3:
            after.append(f"T{i - 3}")
        if i >= 9:
            after.append(f"T{(i + 1) % 3 + 3}")
        ws.task(f"T{i}", after=tuple(after), patch=diff(f"out/t{i}.txt", [], [f"task {i}"]), sleep_s=0.02)


def _shared(tmp_path: Path, url: str) -> tuple[DrainWorkspace, Path, list[Path]]:
    """The plan in a PostgreSQL tracker, a bare remote and one clone per runner."""
    ws = make_drain_workspace(tmp_path)
    ws.db = url
    Tracker.init(tmp_path / "ws", prefix="mr", actor="tester", db_path=url).close()
    _plan(ws)
    remote = tmp_path / "origin.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(ws.repo), str(remote))
    clones = []
    for k in range(RUNNERS):
        clone = tmp_path / f"runner{k}"
        git(tmp_path, "clone", "--quiet", str(remote), str(clone))
        git(clone, "config", "user.name", f"Runner {k}")
        git(clone, "config", "user.email", f"runner{k}@example.com")
        clones.append(clone)
    return ws, remote, clones


def _start(ws: DrainWorkspace, clone: Path, k: int, lease_ttl_s: float = LONG_LEASE_S) -> subprocess.Popen:
    args = ws.drain_args("--remote", "origin", jobs=2)
    args[args.index("--repo") + 1] = str(clone)
    args[args.index("--actor") + 1] = f"runner-{k}"
    # PYTHONFAULTHANDLER: a runner that never ends is sent SIGABRT (``_finish``) and says where it was.
    env = {**os.environ, "MESH_LEASE_TTL_S": str(lease_ttl_s), "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([sys.executable, "-c", "from orchestrator.cli.main import main; main()", *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    """The runner's (stdout, stderr) once it ended; one still running after ``timeout`` fails the
    test with every thread's stack (faulthandler, on SIGABRT) and the end of its output."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate(timeout=60)
        raise AssertionError(f"a runner did not end within {timeout:g}s; its stacks and output:\n{err[-12000:]}"
                             f"\n--- stdout ---\n{out[-3000:]}") from None


def _remote_tree(remote: Path) -> dict[str, str]:
    names = git(remote, "ls-tree", "-r", "--name-only", BRANCH).split()
    return {name: git(remote, "show", f"{BRANCH}:{name}") for name in names}


def _landed(remote: Path) -> list[str]:
    out = git(remote, "log", "--reverse", "--format=%(trailers:key=Mesh-Task,valueonly)%x1e", BRANCH)
    return [rec.strip() for rec in out.split("\x1e") if rec.strip()]


def _single_runner_tree(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "single").mkdir()
    ws = make_drain_workspace(tmp_path / "single")
    _plan(ws)
    code, _, res = ws.drain(jobs=2)
    assert code == 0, res.output
    return ws.tree()


def _check_all_done_once(ws: DrainWorkspace, remote: Path, *, taken_over: str | None = None) -> None:
    landed = _landed(remote)
    assert sorted(landed) == sorted(ws.ids[f"T{i}"] for i in range(TASKS)), landed  # each landed once
    pushed = set(git(remote, "for-each-ref", "--format=%(refname)", "refs/heads/mesh/").split())
    assert pushed == {f"refs/heads/mesh/{ws.ids[f'T{i}']}" for i in range(TASKS)} | {f"refs/heads/{BRANCH}"}
    with ws.tracker() as t:
        for i in range(TASKS):
            task = ws.ids[f"T{i}"]
            assert t.get(task)["status"] == "closed"
            checkpoints = ws.checkpoints(f"T{i}")
            assert protocol(checkpoints) == PROTOCOL, task
            comments = t.comments(task)
            assert len(comments) == len(PROTOCOL) + 1, task  # no checkpoint written twice
            keys = [c["text"].split("\n", 1)[0] for c in comments]
            assert len(keys) == len(set(keys))
            if task != taken_over:
                assert len({cp.run_id for cp in checkpoints}) == 1


def test_three_runners_drain_one_backlog_once(tmp_path, pg_url):
    ws, remote, clones = _shared(tmp_path, pg_url)
    procs = [_start(ws, clone, k) for k, clone in enumerate(clones)]
    outputs = [_finish(p) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, (err[-2000:], out[-3000:])
    _check_all_done_once(ws, remote)
    ran = {}
    for k, (out, _) in enumerate(outputs):
        for line in out.splitlines():
            if line.startswith("{") and json.loads(line).get("event") == "task_run":
                ran.setdefault(json.loads(line)["task"], []).append(k)
    assert all(len(runners) == 1 for runners in ran.values()), ran  # no task run by two runners
    assert _remote_tree(remote) == _single_runner_tree(tmp_path)


def test_a_killed_runner_s_task_is_taken_over_after_its_lease(tmp_path, pg_url):
    ws, remote, clones = _shared(tmp_path, pg_url)
    runners = {f"runner-{k}": _start(ws, clone, k, TAKEOVER_LEASE_S) for k, clone in enumerate(clones)}
    # Kill a runner in the middle of a task: the first one seen with a task whose rounds are
    # under way (which runner gets going first depends on the machine's load, not the test).
    deadline = time.monotonic() + 120
    taken = holder = None
    while time.monotonic() < deadline and taken is None:
        with Tracker(pg_url, actor="observer") as t:
            for task in t.list(status="in_progress", labels=[LABEL], issue_type="task"):
                if task.get("assignee") in runners and len(t.comments(task["id"])) >= 4:
                    taken, holder = task["id"], task["assignee"]
                    break
        time.sleep(0.05)
    assert taken is not None, "no runner got a task under way"
    victim = runners.pop(holder)
    others = list(runners.values())
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)
    for p in others:
        out, err = _finish(p)
        assert p.returncode == 0, (err[-2000:], out[-3000:])
    _check_all_done_once(ws, remote, taken_over=taken)
    with ws.tracker() as t:
        assert t.get(taken)["assignee"] in set(runners)  # taken over by a live runner
    assert _remote_tree(remote) == _single_runner_tree(tmp_path)
