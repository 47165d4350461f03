"""A way back: why nothing runs, ``mesh retry`` for a blocked task, ``mesh clean`` for what
finished work leaves behind. Real runs on the demo repo and tracker (replay backend), real git."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.worktree.gitops import worktree_home
from tests.runkit import TASK, happy_script, make_workspace, r, synthesis
from tests.test_run_e2e import BROKEN, one_review_cycle


def _block(ws) -> dict:
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(BROKEN))
    code, report, res = ws.run(script, "--ids", TASK, "--config", one_review_cycle(ws))
    assert code == 3 and report["block_reason"] == "validation_failed", res.output
    return report


def _run_text(ws, *args: str):
    path = ws.write_script(happy_script())
    return ws.mesh("run", *args, "--backend", "replay", "--script", str(path), "--repo", str(ws.repo))


def test_a_blocked_task_is_named_with_its_reason_and_retried_into_a_new_run(tmp_path):
    ws = make_workspace(tmp_path)
    first = _block(ws)
    # Nothing runnable: the task is listed with its reason and the command that helps (exit 3: all blocked).
    res = _run_text(ws, "--label", "plan:demo", "--ids", TASK)
    assert res.exit_code == 3, res.output
    assert res.stdout.splitlines()[0] == "no runnable task in scope (label plan:demo): every task of the scope is blocked"
    assert f"  {TASK}  blocked: validation_failed: the validation still fails" in res.stdout
    assert res.stdout.rstrip().endswith(f"->  mesh retry {TASK}")
    code, idle, _ = ws.run(happy_script(), "--ids", TASK)
    assert code == 3 and idle["idle"]["why"] == "all_blocked" and idle["idle"]["tasks"][0]["next"] == f"mesh retry {TASK}"
    # mesh retry: open again, unassigned, the earlier run's checkpoints kept.
    res = ws.mesh("retry", TASK)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].startswith(f"{TASK}: blocked -> open (it was blocked: validation_failed: ")
    assert f"run it again: mesh run --label plan:demo --ids {TASK}" in res.stdout
    with ws.tracker() as t:
        task = t.get(TASK)
        kept = load_checkpoints(t, TASK)
    assert task["status"] == "open" and not task.get("assignee")
    assert {cp.run_id for cp in kept} == {first["orch_run_id"]}
    again = ws.mesh("retry", TASK)
    assert again.exit_code == 2 and f"{TASK} is open, not blocked" in again.stderr
    # The new run starts afresh, keeps the old attempt's branch, and closes; both runs are in the history.
    code, second, res = ws.run(happy_script(), "--ids", TASK)
    assert code == 0 and second["outcome"] == "closed", res.output
    assert f"earlier attempt kept on branch mesh/{TASK}-{first['orch_run_id']}" in second["mutations"]
    shown = ws.mesh("show", TASK).stdout
    assert f"run {first['orch_run_id']}" in shown and f"run {second['orch_run_id']}" in shown


def test_an_unknown_label_or_epic_is_a_usage_error_naming_the_closest(tmp_path):
    ws = make_workspace(tmp_path)
    res = _run_text(ws, "--label", "plan:dmeo")
    assert res.exit_code == 2 and "no issue has label 'plan:dmeo'; did you mean --label plan:demo?" in res.stderr
    res = _run_text(ws, "--parent", "demo-7qk")
    assert res.exit_code == 2 and "no epic 'demo-7qk' in the tracker; did you mean --parent demo-7kq?" in res.stderr
    assert ws.git("branch", "--list", "mesh/*") == ""  # nothing was created for it


def test_an_empty_scope_and_tasks_waiting_on_blockers_are_explained(tmp_path):
    ws = make_workspace(tmp_path)
    with ws.tracker() as t:
        t.create("Plan only", issue_type="epic", labels=["plan:later"])
    res = _run_text(ws, "--label", "plan:later")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [
        "no runnable task in scope (label plan:later): the scope holds no task",
        "  mesh runs issues of type task (config runnable_types); none has label plan:later: mesh tracker create"
        " TITLE --type task"
        " --label plan:later"]
    res = _run_text(ws, "--label", "plan:demo", "--ids", "demo-7kq.2,demo-7kq.3,demo-nope")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [
        "no runnable task in scope (label plan:demo): no task of the scope is ready",
        "  demo-nope  not in scope: --ids demo-nope: no task of label plan:demo has this id",
        "  demo-7kq.2  open: waiting on demo-7kq.1 (open)",
        "  demo-7kq.3  open: waiting on demo-g4x (open)"]


def _branches(ws) -> list[str]:
    return ws.git("for-each-ref", "--format=%(refname:short)", "refs/heads/mesh/").split()


def test_clean_removes_landed_work_only_and_says_why_it_keeps_the_rest(tmp_path):
    ws = make_workspace(tmp_path)
    first = _block(ws)
    assert ws.mesh("retry", TASK).exit_code == 0
    code, _, res = ws.run(happy_script(), "--ids", TASK)
    assert code == 0, res.output
    attempt = f"mesh/{TASK}-{first['orch_run_id']}"
    common = Path(ws.git("rev-parse", "--git-common-dir").strip())
    home = worktree_home(common if common.is_absolute() else ws.repo / common)
    assert (home / TASK).is_dir()
    # A task in progress keeps its branch; a cache folder no worktree uses goes.
    with ws.tracker() as t:
        t.claim("demo-7kq.4")
    ws.git("branch", "mesh/demo-7kq.4", "main")
    (home / "stale-task").mkdir()

    def clean(*extra: str) -> dict[str, dict]:
        done = ws.mesh("clean", "--repo", str(ws.repo), "--json", *extra)
        assert done.exit_code == 0, done.output
        return {Path(item["name"]).name if item["kind"] == "folder" else item["name"]: item
                for item in json.loads(done.stdout)}

    # Closed, but its work is on no other branch: kept, like the blocked attempt.
    plan = clean()
    assert plan[f"mesh/{TASK}"]["action"] == "keep" and "unlanded work" in plan[f"mesh/{TASK}"]["why"]
    assert plan[attempt]["action"] == "keep" and f"task {TASK} is closed" in plan[attempt]["why"]
    assert plan["mesh/demo-7kq.4"] == {**plan["mesh/demo-7kq.4"], "action": "keep",
                                       "why": "task demo-7kq.4 is in progress"}
    assert plan["stale-task"]["action"] == "remove"
    # The work lands on main as a new commit (cherry-picked, as a rebase landing does): removable now.
    ws.git("cherry-pick", f"mesh/{TASK}")
    text = ws.mesh("clean", "--repo", str(ws.repo))
    assert text.exit_code == 0, text.output
    assert f"would remove  mesh/{TASK}: task {TASK} is closed; its work is on main  (worktree {home / TASK})" \
           in text.stdout
    assert text.stdout.rstrip().endswith("(a dry run: nothing was removed; mesh clean --yes removes them)")
    assert f"mesh/{TASK}" in _branches(ws) and (home / TASK).is_dir()  # a dry run changes nothing
    done = clean("--yes")
    assert done[f"mesh/{TASK}"]["action"] == "removed" and done["stale-task"]["action"] == "removed"
    # The blocked attempt of the closed task whose work landed goes too.
    assert done[attempt]["action"] == "removed" and "an earlier attempt of task" in done[attempt]["why"]
    assert sorted(_branches(ws)) == ["mesh/demo-7kq.4"]
    assert not (home / TASK).exists() and not (home / "stale-task").exists()
    assert TASK not in ws.git("worktree", "list")
    assert os.path.isfile(ws.repo / "temperature.py")  # the user's checkout is untouched by the clean
