"""A task closed after two blocked attempts leaves nothing of theirs open under it
(``orchestrator.protocol.supersede``), and ``mesh clean --yes`` drops its attempt branches.
Real drains (the scripted command worker), a real tracker and real git."""

from __future__ import annotations

import json

from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.drainkit import DrainWorkspace, git, make_drain_workspace


def _mesh(ws: DrainWorkspace, *args: str):
    return CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", *args], catch_exceptions=False)


def _cycles(ws: DrainWorkspace, n: int) -> None:
    """At most ``n`` review cycles (the key goes first: the file's tables follow it)."""
    kept = [line for line in ws.config.read_text().splitlines() if not line.startswith("review_max_cycles")]
    ws.config.write_text("\n".join([f"review_max_cycles = {n}", *kept]) + "\n")


def _reviews(ws: DrainWorkspace, task: str) -> list[dict]:
    """Every issue mesh filed under ``task`` (review issues and their finding issues)."""
    with ws.tracker() as t:
        reviews = t.list(parent=task, labels=["mesh:review"], include_closed=True)
        return reviews + [f for r in reviews for f in t.list(parent=r["id"], include_closed=True)]


def test_a_task_closed_after_two_blocked_attempts_leaves_nothing_open_but_a_person_s_issue(tmp_path):
    ws = make_drain_workspace(tmp_path)
    task = ws.task("A", files={"a.txt": "draft\n"}, revise={"a.txt": "final\n"})
    with ws.tracker() as t:
        mine = t.create("A person's note on A", issue_type="chore", parent=task)["id"]
    _cycles(ws, 1)  # the reviewer's MUST_FIX cannot be revised: the attempt blocks
    code, events, res = ws.drain()
    assert code == 3 and ws.status("A") == "blocked", res.output
    first = _reviews(ws, task)
    assert len(first) == 2 and all(i["status"] == "open" for i in first)  # a review issue, one finding
    res = _mesh(ws, "retry", task, "--json")
    assert res.exit_code == 0, res.output
    assert sorted(json.loads(res.stdout)["superseded"]) == sorted(i["id"] for i in first)
    with ws.tracker() as t:
        for issue in first:
            closed = t.get(issue["id"])
            assert closed["status"] == "closed" and f"superseded: {task} was retried" in closed["close_reason"]
    code, events, res = ws.drain()
    assert code == 3 and ws.status("A") == "blocked", res.output
    second = [i for i in _reviews(ws, task) if i["status"] != "closed"]
    assert len(second) == 2
    with ws.tracker() as t:  # re-opened by hand this time: nothing supersedes them yet
        t.update(task, status="open")
    _cycles(ws, 3)
    code, events, res = ws.drain()
    assert code == 0 and ws.status("A") == "closed", res.output
    run = next(e["run_id"] for e in events if e["event"] == "task_run")
    with ws.tracker() as t:
        for issue in second:
            closed = t.get(issue["id"])
            assert closed["status"] == "closed"
            assert closed["close_reason"] == f"superseded: run {run} (attempt 3) closed {task}"
        open_under = [i["id"] for i in t.list(parent=task, descendants=True)]
        assert open_under == [mine]  # only what a person filed stays open
    # mesh clean: the two failed attempts' branches go (dry run first), the landed work stays.
    attempts = git(ws.repo, "for-each-ref", "--format=%(refname:short)", f"refs/heads/mesh/{task}-*").split()
    assert len(attempts) == 2
    plan = json.loads(_mesh(ws, "clean", "--repo", str(ws.repo), "--json").stdout)
    planned = {i["name"]: i for i in plan["items"]} if isinstance(plan, dict) else {i["name"]: i for i in plan}
    for branch in attempts:
        assert planned[branch]["action"] == "remove"
        assert "earlier attempt of task" in planned[branch]["why"] and "landed on mesh/land/" in planned[branch]["why"]
    assert git(ws.repo, "for-each-ref", f"refs/heads/mesh/{task}-*").strip()  # a dry run removes nothing
    res = _mesh(ws, "clean", "--repo", str(ws.repo), "--yes")
    assert res.exit_code == 0, res.output
    assert git(ws.repo, "for-each-ref", f"refs/heads/mesh/{task}-*").strip() == ""
    assert ws.tree()["a.txt"] == "final\n"
