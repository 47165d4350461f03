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
import subprocess
import sys

import pytest
from click.testing import CliRunner

from orchestrator.cli import cli

from .drainkit import BRANCH, LABEL, git, make_drain_workspace

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
def test_run_then_drain_builds_the_dependent_on_its_blockers_code(tmp_path, run_flags):
    ws = make_drain_workspace(tmp_path)
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
        assert f"{ws.ids['epic']} is closed but not landed" not in status and f"{one} is closed but not landed" in status
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
    assert "no task in scope" in out and ("closest: plan:drain" in out if scope[0] == "--label" else ws.ids["epic"] in out)
    assert _branches(ws) == before
    assert len(git(ws.repo, "worktree", "list").splitlines()) == 1
