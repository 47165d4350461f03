"""The README's "Use" sequence on one scope: ``mesh run`` then ``mesh drain``.

An epic of three tasks where the second changes what the first added (a function in
``lib.py``) and the third stands alone. Whether ``mesh run`` lands its task (the default) or
keeps it on ``mesh/<task>`` (``--no-land``), the drain builds the second task on the first's
code: the integration branch holds the three commits in dependency order, the second one
modifies ``lib.py`` (a worktree without the first's code would have created it, and its
landing would have conflicted), and every check passes on the branch's tree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli

from orchestrator.protocol.faults import LAND_POINTS

from .drainkit import BRANCH, LABEL, ROOT, git, make_drain_workspace

LIB_1 = "def f():\n    return 1\n"
LIB_2 = LIB_1 + "\n\ndef g():\n    return f() + 1\n"
CHECK_2 = 'ns = {}\nexec(open("lib.py").read(), ns)\nassert ns["g"]() == 2\n'


def _epic(ws):
    one = ws.task("one", priority=1, files={"lib.py": LIB_1, "checks/one.py": 'exec(open("lib.py").read())\n'})
    two = ws.task("two", after=("one",), files={"lib.py": LIB_2, "checks/two.py": CHECK_2})
    three = ws.task("three", files={"checks/three.py": "assert 3 == 3\n"})
    return one, two, three


def _mesh(ws, *args: str):
    return CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", *args], catch_exceptions=False)


def _run_args(ws, *extra: str) -> list[str]:
    return ["run", "--label", LABEL, "--backend", "command", "--worker-cmd", ws.worker_cmd(), "--repo",
            str(ws.repo), "--config", str(ws.config), "--json", *extra]


@pytest.mark.parametrize("run_flags", [(), ("--no-land",)], ids=["run-lands", "run-no-land"])
def test_run_then_drain_builds_the_dependent_on_its_blockers_code(tmp_path, run_flags, db_target):
    ws = make_drain_workspace(tmp_path, db=db_target)
    one, two, three = _epic(ws)
    res = _mesh(ws, *_run_args(ws, *run_flags))
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["task"]["id"] == one and ws.status("one") == "closed"
    if run_flags:
        # Branch-only: nothing landed yet, and status says the dependent waits for it.
        assert git(ws.repo, "show-ref", "--verify", f"refs/heads/{BRANCH}", check=False) == ""
        status = _mesh(ws, "status", "--label", LABEL, "--repo", str(ws.repo)).stdout
        assert f"{one}  " in status and "not landed on mesh/land/plan-drain" in status
        assert f"waits for {one} to land" in status
        assert f"{one} is closed but not landed on {BRANCH}" in status.splitlines()[1]
        # Another branch-only run leaves the dependent waiting, and says so.
        res = _mesh(ws, *_run_args(ws, "--no-land", "--ids", two))
        idle = json.loads(res.stdout)
        assert res.exit_code == 0 and idle["outcome"] == "no_runnable_task"
        assert [t["reason"] for t in idle["idle"]["tasks"]] == [f"waits for {one} to land (mesh run or mesh drain"
                                                                " lands it first)"]
        assert ws.status("two") == "open"
    code, events, res = ws.drain()
    assert code == 0, res.output
    if run_flags:
        assert any(e["event"] == "catch_up" and e["task"] == one for e in events)
    # The three commits, in dependency order, on the one integration branch.
    landed = ws.landed_tasks()
    assert landed == [one, two, three]
    two_sha = next(a["sha"] for a in ws.lands("two") if a["result"] == "landed")
    assert set(git(ws.repo, "diff-tree", "--no-commit-id", "--name-status", "-r", two_sha).splitlines()) \
        == {"M\tlib.py", "A\tchecks/two.py"}
    tree = ws.tree()
    assert tree["lib.py"] == LIB_2 and {"checks/one.py", "checks/two.py", "checks/three.py"} <= set(tree)
    # Every check passes on the branch's tree.
    checkout = tmp_path / "checkout"
    git(ws.repo, "worktree", "add", "--quiet", "--detach", str(checkout), BRANCH)
    ran = subprocess.run([sys.executable, "check.py"], cwd=checkout, capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr
    # The epic's tasks are all closed and landed: the epic is closed, naming the landed commits.
    with ws.tracker() as t:
        epic = t.get(ws.ids["epic"])
    assert epic["status"] == "closed" and two_sha[:12] in (epic.get("close_reason") or "")
    # --parent names the same scope, and so the same branch.
    status = json.loads(_mesh(ws, "status", "--parent", ws.ids["epic"], "--repo", str(ws.repo), "--json").stdout)
    assert status["branch"] == BRANCH and all(t["landed"] for e in status["epics"] for t in e["tasks"])


def _branches(ws) -> list[str]:
    return git(ws.repo, "for-each-ref", "--format=%(refname)", "refs/heads/").split()


@pytest.mark.parametrize("scope", [("--label", "plan:dran"), ("--parent", "dr-nope")], ids=["label", "parent"])
def test_a_typod_scope_creates_nothing_and_names_the_closest(tmp_path, scope):
    ws = make_drain_workspace(tmp_path)
    _epic(ws)
    before = _branches(ws)
    args = [a if a != LABEL else scope[1] for a in ws.drain_args()]
    args[args.index("--label")] = scope[0]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 2
    out = res.output
    assert ("did you mean --label plan:drain" in out if scope[0] == "--label" else ws.ids["epic"] in out), out
    assert _branches(ws) == before
    assert len(git(ws.repo, "worktree", "list").splitlines()) == 1
    # mesh run says the same, and creates nothing either.
    run_args = [a if a != LABEL else scope[1] for a in _run_args(ws)]
    run_args[run_args.index("--label")] = scope[0]
    res = _mesh(ws, *run_args)
    assert res.exit_code == 2 and ("plan:drain" in res.output or ws.ids["epic"] in res.output), res.output
    assert _branches(ws) == before and len(git(ws.repo, "worktree", "list").splitlines()) == 1


def _lands_of(ws, name: str) -> list[str]:
    return [a["result"] for a in ws.lands(name)]


@pytest.mark.parametrize("point", [p for p in LAND_POINTS if p not in ("land-push-task", "land-sync", "land-push")])
def test_a_catch_up_landing_killed_at_any_step_lands_once(tmp_path, point):
    """``mesh drain`` killed while landing a task ``mesh run --no-land`` closed: the same drain
    run again lands it once (one commit, one ``[orch:land]``) and then its dependent."""
    ws = make_drain_workspace(tmp_path)
    one, two, three = _epic(ws)
    assert _mesh(ws, *_run_args(ws, "--no-land")).exit_code == 0
    env = {**os.environ, "MESH_CRASH_AT": f"{point}#1"}
    proc = subprocess.run([sys.executable, "-c", "from orchestrator.cli.main import main; main()", *ws.drain_args()],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert ws.status("two") == "open"  # nothing started before the blocker landed
    code, events, res = ws.drain()
    assert code == 0, res.output
    assert ws.landed_tasks() == [one, two, three]
    assert _lands_of(ws, "one") == ["landed"]
    with ws.tracker() as t:
        assert t.db.read("SELECT name FROM mesh_locks") == []


def test_a_closed_task_that_cannot_land_blocks_and_its_dependent_waits(tmp_path):
    """The integration branch gained a conflicting ``lib.py`` after ``mesh run --no-land`` closed
    task one: the drain's landing of one conflicts, one is blocked, two never starts."""
    ws = make_drain_workspace(tmp_path)
    one, two, three = _epic(ws)
    assert _mesh(ws, *_run_args(ws, "--no-land")).exit_code == 0
    git(ws.repo, "branch", BRANCH, "main")
    other = tmp_path / "other"
    git(ws.repo, "worktree", "add", "--quiet", str(other), BRANCH)
    (other / "lib.py").write_text("def f():\n    return 'something else'\n")
    git(other, "add", "lib.py")
    git(other, "commit", "--quiet", "-m", "someone else's lib")
    git(ws.repo, "worktree", "remove", str(other))
    code, events, res = ws.drain()
    assert code == 3, res.output
    assert ws.status("one") == "blocked" and ws.status("two") == "open"
    assert _lands_of(ws, "one") == ["conflict"]
    assert events[-1]["blocked"] == {one: "merge_conflict"}
    assert ws.landed_tasks() == [three]
    status = _mesh(ws, "status", "--label", LABEL, "--repo", str(ws.repo)).stdout
    assert f"blocked by {one}" in status and "land conflict" in status


def test_attack_a_forged_landing_neither_skips_the_catch_up_nor_picks_the_branch(tmp_path, monkeypatch):
    """With a signing key, an unsigned ``[orch:land]`` claiming task one landed on another branch
    is no landing: the drain still lands one (on the scope's branch) before two starts."""
    from orchestrator.protocol.checkpoint import format_checkpoint

    monkeypatch.setenv("MESH_SIGNING_KEY", "k" * 40)
    ws = make_drain_workspace(tmp_path)
    one, two, three = _epic(ws)
    assert _mesh(ws, *_run_args(ws, "--no-land")).exit_code == 0
    run_id = ws.checkpoints("one")[-1].run_id
    head = git(ws.repo, "rev-parse", "main").strip()
    payload = {"v": 1, "run_id": run_id, "seq": 99, "kind": "land", "task_id": one, "role": None,
               "step": ["land", "", "land"], "artifact": {"result": "landed", "branch": "mesh/land/evil", "sha": head}}
    with ws.tracker() as t:
        t.add_comment(one, format_checkpoint("land", "landed on mesh/land/evil", payload), author="mesh/orchestrator")
    code, events, res = ws.drain()
    assert code == 0, res.output
    assert events[-1]["branch"] == BRANCH and ws.landed_tasks() == [one, two, three]
    assert git(ws.repo, "show-ref", "--verify", "refs/heads/mesh/land/evil", check=False) == ""


def test_a_scope_with_no_task_makes_no_branch(tmp_path):
    """A label only an epic carries: the drain ends at once, exit 0, and creates nothing."""
    ws = make_drain_workspace(tmp_path)
    with ws.tracker() as t:
        t.create("Later", issue_type="epic", labels=[LABEL])
    before = _branches(ws)
    code, events, res = ws.drain()
    assert code == 0 and events[-1]["stop_reason"] == "empty_scope" and events[-1]["branch"] == ""
    assert _branches(ws) == before and len(git(ws.repo, "worktree", "list").splitlines()) == 1


def test_mesh_run_says_what_its_catch_up_landed(tmp_path):
    """``mesh run --no-land`` closed a task; the next landing ``mesh run`` lands it before its own
    task, and says so first in its report's mutations; with nothing left to run after it, it
    still lands it (before, it only said every task was closed) and says so before why it is idle."""
    ws = make_drain_workspace(tmp_path)
    one, two, three = _epic(ws)
    assert _mesh(ws, *_run_args(ws, "--no-land")).exit_code == 0
    res = _mesh(ws, *_run_args(ws))
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["task"]["id"] == two and ws.landed_tasks() == [one, two], res.output
    assert report["mutations"][0].startswith(f"{one}: closed earlier, landed now on {BRANCH} (squash "), report
    assert _mesh(ws, *_run_args(ws, "--no-land")).exit_code == 0  # three: closed, not landed
    res = _mesh(ws, *_run_args(ws)[:-1])  # the human form, with nothing left to run after the catch-up
    assert res.exit_code == 0, res.output
    assert res.output.count(f"{three}: closed earlier, landed now on {BRANCH} (rebase ") == 1, res.output
    assert res.output.index("closed earlier") < res.output.index("no runnable task"), res.output
    assert ws.landed_tasks() == [one, two, three]
