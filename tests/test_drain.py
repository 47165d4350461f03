"""``mesh drain`` end to end: real git repos, a real tracker, the command worker of
``tests/drain_worker.py`` (and the replay backend), landing through the merge queue."""

from __future__ import annotations

import json

import pytest

from orchestrator.config import MeshConfig
from orchestrator.worktree.gitops import GitError
from orchestrator.landing.lander import Lander
from orchestrator.landing.records import landed_commits
from tests.drainkit import BRANCH, LABEL, DrainWorkspace, git, make_drain_workspace
from click.testing import CliRunner

from orchestrator.cli.main import cli

PROTOCOL = ["preflight", "proposal", "critique", "critique", "critique", "synthesis", "vote", "vote", "vote", "vote",
            "vote", "proof", "review", "review-cycle", "land", "outcome"]


def protocol(checkpoints) -> list[str]:
    """The kinds of ``checkpoints`` in order without the run heads, after checking there is
    exactly one run head per run (where it sits among the others is ``runhead``'s business)."""
    kinds = [cp.kind for cp in checkpoints]
    assert kinds.count("run-head") == len({cp.run_id for cp in checkpoints}), kinds
    return [kind for kind in kinds if kind != "run-head"]


def diff(path: str, old: list[str], new: list[str]) -> str:
    """A one-hunk unified diff replacing the whole of ``path`` (``old`` empty: a new file)."""
    head = f"--- a/{path}\n" if old else "--- /dev/null\n"
    hunk = f"@@ -{'1,' + str(len(old)) if old else '0,0'} +1,{len(new)} @@\n"
    return head + f"+++ b/{path}\n" + hunk + "".join(f"-{l}\n" for l in old) + "".join(f"+{l}\n" for l in new)


def diamond(ws: DrainWorkspace) -> None:
    """A; B and C after A; D after B and C. Every later patch only applies on its blockers' code."""
    ws.task("A", patch=diff("lib.txt", [], ["a"]))
    ws.task("B", after=("A",), patch=diff("lib.txt", ["a"], ["a", "b"]))
    ws.task("C", after=("A",), patch=diff("use.txt", [], ["uses a"]) + diff("checks/c.py", [], [
        "assert open('lib.txt').read().startswith('a')"]))
    ws.task("D", after=("B", "C"), patch=diff("lib.txt", ["a", "b"], ["a", "b", "d"])
            + diff("use.txt", ["uses a"], ["uses a, b and d"]))


DIAMOND_TREE = {"lib.txt": "a\nb\nd\n", "use.txt": "uses a, b and d\n"}


def _assert_untouched_checkout(ws: DrainWorkspace, head: str) -> None:
    assert git(ws.repo, "rev-parse", "HEAD").strip() == head
    assert git(ws.repo, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert git(ws.repo, "status", "--porcelain") == ""


@pytest.mark.parametrize("jobs", [1, 4])
def test_diamond_lands_every_task_once_on_top_of_its_blockers(tmp_path, jobs):
    ws = make_drain_workspace(tmp_path)
    head = git(ws.repo, "rev-parse", "HEAD").strip()
    diamond(ws)
    code, events, res = ws.drain(jobs=jobs)
    assert code == 0, res.output
    summary = events[-1]
    assert summary["event"] == "summary" and summary["landings"] == 4 and summary["blocked"] == {}
    tree = ws.tree()
    assert {k: tree[k] for k in DIAMOND_TREE} == DIAMOND_TREE
    landed = ws.landed_tasks()
    assert sorted(landed) == sorted(ws.ids[n] for n in "ABCD")  # each task once
    assert landed[0] == ws.ids["A"] and landed[-1] == ws.ids["D"]
    for name in "ABCD":
        assert ws.status(name) == "closed"
        assert protocol(ws.checkpoints(name)) == PROTOCOL
    # Linear: no merge commit on the integration branch.
    assert git(ws.repo, "rev-list", "--merges", BRANCH) == ""
    _assert_untouched_checkout(ws, head)
    res = ws_mesh(ws, "status", "--label", LABEL, "--repo", str(ws.repo), "--json")
    status = json.loads(res.stdout)
    rows = {t["id"]: t for e in status["epics"] for t in e["tasks"]}
    assert all(rows[ws.ids[n]]["landed"] for n in "ABCD")
    text = ws_mesh(ws, "status", "--label", LABEL, "--repo", str(ws.repo)).stdout
    assert "blocked by" not in text and text.count("landed ") == 4 and "Epic" in text
    shown = ws_mesh(ws, "show", ws.ids["D"]).stdout
    assert "land" in shown and "landed on mesh/land/plan-drain" in shown


def ws_mesh(ws: DrainWorkspace, *args: str):
    from click.testing import CliRunner

    from orchestrator.cli.main import cli

    return CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", *args], catch_exceptions=False)


def test_same_lines_conflict_sends_the_later_task_back_once_and_it_lands_on_the_new_tip(tmp_path):
    ws = make_drain_workspace(tmp_path, files={"shared.txt": "value = 0\n"})
    for name, value in (("X", "1"), ("Y", "2")):
        ws.task(name, patch=diff("shared.txt", ["value = 0"], [f"value = {value}"]),
                retry_files={"shared.txt": "value = 1 + 2\n"})
    code, events, res = ws.drain(jobs=2)
    assert code == 0, res.output
    lands = {name: [a["result"] for a in ws.lands(name)] for name in "XY"}
    assert sorted(lands.values()) == [["conflict", "landed"], ["landed"]]
    second = next(name for name in "XY" if len(lands[name]) == 2)
    first_try = ws.lands(second)[0]
    assert first_try["action"] == "send_back" and "shared.txt" in first_try["detail"]
    # The second attempt was told why, and started from the tip holding the first task's work.
    runs = {cp.run_id for cp in ws.checkpoints(second)}
    assert len(runs) == 2
    assert ws.tree()["shared.txt"] == "value = 1 + 2\n"
    assert events[-1]["conflicts"] == 1 and events[-1]["landings"] == 2


def test_second_conflict_blocks_with_merge_conflict_and_never_overwrites(tmp_path):
    ws = make_drain_workspace(tmp_path, files={"shared.txt": "value = 0\n"})
    race = {"branch": BRANCH, "path": "shared.txt", "content": "value = 9\n"}
    for name, value in (("X", "1"), ("Y", "2")):
        ws.task(name, patch=diff("shared.txt", ["value = 0"], [f"value = {value}"]),
                retry_files={"shared.txt": "value = 3\n"}, retry_move=race)
    code, events, res = ws.drain(jobs=2)
    assert code == 3, res.output
    blocked = events[-1]["blocked"]
    assert list(blocked.values()) == ["merge_conflict"]
    loser = next(name for name in "XY" if ws.ids[name] in blocked)
    assert ws.status(loser) == "blocked"
    assert [a["action"] for a in ws.lands(loser)] == ["send_back", "block"]
    assert ws.tree()["shared.txt"] == "value = 9\n"


def test_post_merge_validation_failure_sends_back_then_lands(tmp_path):
    ws = make_drain_workspace(tmp_path, files={"flags.txt": "none\n"})
    guard = {"branch": BRANCH, "path": "checks/guard.py", "content": "assert 'danger' not in open('flags.txt').read()\n"}
    ws.task("Y", patch=diff("flags.txt", ["none"], ["danger"]), move=guard, retry_files={"flags.txt": "safe\n"})
    code, events, res = ws.drain()
    assert code == 0, res.output
    first, second = ws.lands("Y")
    assert first["result"] == "validation_failed" and first["action"] == "send_back"
    assert "checks/guard.py" in first["detail"] or "python3 check.py" in first["detail"]
    assert second["result"] == "landed"
    assert ws.tree()["flags.txt"] == "safe\n"


def test_second_post_merge_failure_blocks_with_integration_validation_failed(tmp_path):
    ws = make_drain_workspace(tmp_path, files={"flags.txt": "none\n"})
    guard = {"branch": BRANCH, "path": "checks/guard.py", "content": "assert 'danger' not in open('flags.txt').read()\n"}
    strict = {"branch": BRANCH, "path": "checks/strict.py", "content": "assert 'safe' not in open('flags.txt').read()\n"}
    ws.task("Y", patch=diff("flags.txt", ["none"], ["danger"]), move=guard, retry_files={"flags.txt": "safe\n"},
            retry_move=strict)
    code, events, res = ws.drain()
    assert code == 3, res.output
    assert events[-1]["blocked"] == {ws.ids["Y"]: "integration_validation_failed"}
    assert ws.status("Y") == "blocked"
    assert ws.tree()["flags.txt"] == "none\n"  # the failing tree never reached the branch


def test_blocked_middle_task_does_not_stop_the_drain(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("A", patch=diff("a.txt", [], ["a"]))
    ws.task("B", after=("A",), patch=diff("nothere.txt", ["x"], ["y"]))
    ws.task("C", after=("B",), patch=diff("c.txt", [], ["c"]))
    ws.task("D", patch=diff("d.txt", [], ["d"]))
    code, events, res = ws.drain(jobs=2)
    assert code == 3, res.output
    assert events[-1]["blocked"] == {ws.ids["B"]: "patch_does_not_apply"}
    assert [ws.status(n) for n in "ABCD"] == ["closed", "blocked", "open", "closed"]
    assert ws.checkpoints("C") == []
    assert sorted(ws.landed_tasks()) == sorted([ws.ids["A"], ws.ids["D"]])
    # The same command again starts nothing and says the same: the scope still holds a blocked task.
    code, events, res = ws.drain(jobs=2)
    assert code == 3, res.output
    assert events[-1]["blocked"] == {ws.ids["B"]: "patch_does_not_apply"} and events[-1]["tasks"] == []


def test_human_assigned_task_is_left_alone_unless_taken_over(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("H", patch=diff("h.txt", [], ["h"]))
    ws.task("M", patch=diff("m.txt", [], ["m"]))
    with ws.tracker() as t:
        t.update(ws.ids["H"], status="in_progress", assignee="alice")
    code, events, res = ws.drain()
    assert code == 0, res.output
    assert ws.status("M") == "closed"
    with ws.tracker() as t:
        h = t.get(ws.ids["H"])
    assert (h["status"], h["assignee"]) == ("in_progress", "alice")
    assert ws.checkpoints("H") == []
    assert any("alice" in why for why in events[-1]["skipped"])
    # mesh run leaves it alone too.
    res = ws_mesh(ws, "run", "--label", LABEL, "--backend", "command", "--worker-cmd", ws.worker_cmd(),
                  "--repo", str(ws.repo), "--config", str(ws.config), "--json")
    assert json.loads(res.stdout)["outcome"] == "no_runnable_task"
    code, events, res = ws.drain("--take-over")
    assert code == 0, res.output
    assert ws.status("H") == "closed"


def test_close_mode_ci_lands_then_waits_for_ci_and_its_dependents_wait_too(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.config.write_text('close_mode = "ci"\n' + ws.config.read_text())
    ws.task("A", patch=diff("a.txt", [], ["a"]))
    ws.task("B", after=("A",), patch=diff("a.txt", ["a"], ["a", "b"]))
    code, events, res = ws.drain()
    assert code == 0, res.output
    assert events[-1]["closed"] == [ws.ids["A"]] and events[-1]["tasks"][0]["state"] == "awaiting_ci"
    assert (ws.status("A"), ws.status("B")) == ("in_progress", "open")
    assert ws.tree()["a.txt"] == "a\n" and ws.checkpoints("B") == []
    # Nothing landed before A: the branch holds the very tree its run head names, as one commit.
    head = next(cp for cp in ws.checkpoints("A") if cp.kind == "run-head").payload["artifact"]
    assert git(ws.repo, "rev-parse", f"{BRANCH}^{{tree}}").strip() == head["tree"]
    assert head["conditions"]["on_integration_branch"] == git(ws.repo, "rev-parse", BRANCH).strip()


def test_ci_close_accepts_a_task_that_landed_rebased(tmp_path):
    """Two tasks cut from the same tip: the second lands as a rebased copy, not the commit its
    run reviewed; its run head also signs the landed commit, so CI closes both on the branch."""
    ws = make_drain_workspace(tmp_path)
    ws.config.write_text('close_mode = "ci"\n' + ws.config.read_text())
    ws.task("A", patch=diff("a.txt", [], ["a"]), sleep_s=0.02)
    ws.task("B", patch=diff("b.txt", [], ["b"]), sleep_s=0.02)
    code, events, res = ws.drain(jobs=2)
    assert code == 0, res.output
    methods = sorted(land["method"] for name in "AB" for land in ws.lands(name))
    assert methods == ["rebase", "squash"]
    checkout = tmp_path / "ci-checkout"
    git(tmp_path, "clone", "--quiet", "-b", BRANCH, str(ws.repo), str(checkout))
    res = CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "ci", "ci-close", "--label", LABEL,
                                   "--repo", str(checkout), "--config", str(ws.config), "--json"])
    assert res.exit_code == 0, res.output
    checks = {c["task_id"]: c for c in json.loads(res.stdout)}
    assert {checks[ws.ids[n]]["checks"]["commit_binding"] for n in "AB"} == {"landed"}
    assert (ws.status("A"), ws.status("B")) == ("closed", "closed")


def test_max_tasks_stops_starting_new_tasks(tmp_path):
    ws = make_drain_workspace(tmp_path)
    for name in "PQR":
        ws.task(name, patch=diff(f"{name}.txt", [], [name]))
    code, events, res = ws.drain("--max-tasks", "2", jobs=1)
    assert code == 0, res.output
    assert events[-1]["stop_reason"] == "max_tasks"
    assert sorted(ws.status(n) for n in "PQR") == ["closed", "closed", "open"]


def test_run_onto_lands_on_the_branch_and_refuses_protected_ones(tmp_path):
    ws = make_drain_workspace(tmp_path)
    head = git(ws.repo, "rev-parse", "HEAD").strip()
    ws.task("A", patch=diff("a.txt", [], ["a"]))
    base = ["run", "--label", LABEL, "--backend", "command", "--worker-cmd", ws.worker_cmd(), "--repo",
            str(ws.repo), "--config", str(ws.config), "--json"]
    res = ws_mesh(ws, *base, "--onto", "main")
    assert res.exit_code == 2 and "protected" in res.output
    res = ws_mesh(ws, *base, "--onto", "integration/q3")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["outcome"] == "closed"
    assert ws.tree("integration/q3")["a.txt"] == "a\n"
    _assert_untouched_checkout(ws, head)


def test_drain_with_the_replay_backend_and_the_bwrap_sandbox(tmp_path):
    ws = make_drain_workspace(tmp_path, sandbox="bwrap")
    ws.task("A", patch=diff("lib.txt", [], ["a"]))
    ws.task("B", after=("A",), patch=diff("lib.txt", ["a"], ["a", "b"]))
    script: dict[str, list] = {}
    for name in "AB":
        entry = ws.plan[ws.ids[name]]
        answers = {
            "proposer": [("proposal", {"plan": ["p"], "assumptions": ["a"], "risk": "low"})],
            "critic_a": [("critique", {"findings": ["f"], "must_fix": [], "vote_flip_conditions": [], "risk": "low"})],
            "synthesizer": [("synthesis", {"decision_log": [{"point": "p", "decision": "accepted", "reason": "r"}],
                                           "patch": entry["patch"], "validation_commands": ["python3 check.py"]})],
            "reviewer": [("review", {"decision": "approve", "findings": [], "summary": "No material issues found."})],
        }
        answers["critic_b"] = answers["skeptic"] = answers["critic_a"]
        for role in ("proposer", "critic_a", "critic_b", "skeptic", "synthesizer"):
            answers[role] = answers[role] + [("vote", {"vote": "agree", "reason": "ok"})]
        for role, items in answers.items():
            script.setdefault(role, []).extend({"round": r, "text": json.dumps(a)} for r, a in items)
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    res = ws_mesh(ws, "drain", "--label", LABEL, "--backend", "replay", "--script", str(path), "--repo",
                  str(ws.repo), "--config", str(ws.config), "--json")
    assert res.exit_code == 0, res.output
    assert ws.tree()["lib.txt"] == "a\nb\n"
    # B started from the tip holding A: the tree it validated is the tree that lands.
    land = ws.lands("B")[0]
    assert (land["result"], land["revalidated"], land["validation"]) == ("landed", False, [])
    # ... as one commit holding the very tree that was validated and reviewed.
    assert land["method"] == "squash"
    task_head = git(ws.repo, "rev-parse", f"mesh/{ws.ids['B']}").strip()
    assert git(ws.repo, "rev-parse", f"{land['sha']}^{{tree}}") == git(ws.repo, "rev-parse", f"{task_head}^{{tree}}")
    assert f"Mesh-Source: {task_head}" in git(ws.repo, "log", "-1", "--format=%B", land["sha"])


def _task_branch_with_commits(repo, steps: list[dict[str, str]], *, base: str = "main") -> tuple[str, str]:
    """A branch ``mesh/t`` off ``base`` with one commit per step (path -> content), carrying trailers."""
    git(repo, "branch", "mesh/t", base)
    wt = repo.parent / "wt"
    git(repo, "worktree", "add", "--quiet", str(wt), "mesh/t")
    for i, files in enumerate(steps):
        for path, content in files.items():
            (wt / path).write_text(content)
        git(wt, "add", "-A")
        git(wt, "commit", "--quiet", "-m", f"step {i}\n\nMesh-Task: t\nMesh-Run: run-1")
    return git(repo, "rev-parse", base).strip(), "mesh/t"


def test_lander_merges_when_rebase_conflicts_but_merge_does_not_and_is_idempotent(tmp_path):
    ws = make_drain_workspace(tmp_path, files={"f.txt": "x\n"})
    config = MeshConfig.model_validate({"validation": {"allow": ["python3 check.py"], "sandbox": "bwrap"}})
    lander = Lander(ws.repo, "land", config)
    fork, head = _task_branch_with_commits(ws.repo, [{"f.txt": "z\n"}, {"f.txt": "x\n", "g.txt": "g\n"}])
    # The integration branch moved f.txt on: commit 1 of the task conflicts, their sum does not.
    other = ws.repo.parent / "other"
    git(ws.repo, "worktree", "add", "--quiet", str(other), "land")
    (other / "f.txt").write_text("y\n")
    git(other, "commit", "--quiet", "-am", "moved on")
    git(ws.repo, "worktree", "remove", "--force", str(other))
    result = lander.land_commits(task_id="t", run_id="run-1", fork=fork, head=head, commands=["python3 check.py"])
    assert (result.result, result.method, result.revalidated) == ("landed", "merge", True)
    assert result.validation[0]["passed"]  # in the bwrap sandbox, on the merged tree
    assert ws.tree("land")["f.txt"] == "y\n" and ws.tree("land")["g.txt"] == "g\n"
    assert landed_commits(ws.repo, "land")["run-1"] == [result.sha]
    assert landed_commits(ws.repo, "land", run_id="run-1") == {"run-1": [result.sha]}
    assert landed_commits(ws.repo, "land", run_id="run-2") == {}
    again = lander.land_commits(task_id="t", run_id="run-1", fork=fork, head=head, commands=["python3 check.py"])
    assert (again.result, again.method, again.sha) == ("landed", "already", result.sha)
    assert git(ws.repo, "rev-list", "--count", "land").strip() == "3"


def test_lander_refuses_protected_and_checked_out_branches(tmp_path):
    ws = make_drain_workspace(tmp_path)
    config = MeshConfig()
    with pytest.raises(GitError) as err:
        Lander(ws.repo, "master", config)
    assert err.value.reason == "protected_branch"
    git(ws.repo, "switch", "--quiet", "-c", "feature")
    with pytest.raises(GitError) as err:
        Lander(ws.repo, "feature", config)
    assert err.value.reason == "branch_in_use"


def test_engine_writes_nothing_once_its_lease_was_taken_over(tmp_path):
    from orchestrator.protocol.lease import Lease
    from orchestrator.runner import RunOptions, run
    from tests.runkit import TASK, happy_script, make_workspace

    ws = make_workspace(tmp_path)
    script = ws.write_script(happy_script())

    def steal(engine) -> None:
        with ws.tracker() as t:
            Lease.acquire(t, engine.task["id"], "run-thief", holder="thief", ttl_s=300, force=True)

    report = run(RunOptions(label="plan:demo", backend="replay", script=script, repo=ws.repo, db=ws.db,
                            actor="tester", ids=[TASK]), echo=lambda line: None, engine_hook=steal)
    assert report.outcome == "no_runnable_task"
    assert any("lease" in m and "taken over" in m for m in report.mutations)
    assert ws.kinds(TASK) == []
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "open"  # not even claimed


def test_a_run_whose_lease_was_taken_mid_review_files_no_finding_issue(tmp_path):
    from orchestrator.protocol.lease import Lease
    from orchestrator.runner import RunOptions, run
    from tests.runkit import TASK, demo_script, make_workspace

    ws = make_workspace(tmp_path)
    script = ws.write_script(demo_script())

    def echo(line: str) -> None:
        # The first review requests changes; the next tracker write would file its findings.
        if line.startswith("[orch:review]"):
            with ws.tracker() as t:
                Lease.acquire(t, TASK, "run-thief", holder="thief", ttl_s=300, force=True)

    report = run(RunOptions(label="plan:demo", backend="replay", script=script, repo=ws.repo, db=ws.db,
                            actor="tester", ids=[TASK]), echo=echo)
    assert report.outcome == "no_runnable_task"
    assert ws.kinds(TASK)[-1] == "review"
    with ws.tracker() as t:
        assert t.list(labels=["mesh:review"], include_closed=True) == []
        assert t.list(labels=["mesh:finding"], include_closed=True) == []


def test_budget_rule_starts_no_task_the_remaining_budget_cannot_cover():
    from orchestrator.drain import budget_allows

    assert budget_allows(None, finished=[9.0], running=[])
    assert budget_allows(1.0, finished=[], running=[0.5])
    assert not budget_allows(1.0, finished=[], running=[1.0])
    # Two tasks at $0.30 each: $0.40 left covers one more, not one more beside a running one.
    assert budget_allows(1.0, finished=[0.3, 0.3], running=[])
    assert not budget_allows(1.0, finished=[0.3, 0.3], running=[0.1])
    assert not budget_allows(0.8, finished=[0.3, 0.3], running=[])


def test_live_view_and_plain_lines_show_rows_queue_and_outcomes(tmp_path):
    import io

    from rich.console import Console

    from orchestrator.views.live import LineSink, LiveSink, summary_lines

    events = [
        {"event": "drain_started", "t": 0.0, "branch": BRANCH, "jobs": 2, "scope": {"plan_label": LABEL}},
        {"event": "task_started", "t": 0.1, "task": "dr-1", "title": "First"},
        {"event": "task_started", "t": 0.1, "task": "dr-2", "title": "Second"},
        {"event": "checkpoint", "t": 0.5, "task": "dr-1", "kind": "vote", "cycle": "c0/r0",
         "line": "[orch:vote] agree 5/5", "cost_usd": 0.01},
        {"event": "land_queued", "t": 0.9, "task": "dr-2"},
        {"event": "task_finished", "t": 1.0, "task": "dr-1", "state": "blocked", "block_reason": "merge_conflict",
         "block_detail": "x", "elapsed_s": 0.9, "cost_usd": 0.02},
    ]
    out = io.StringIO()
    live = LiveSink(Console(file=out, force_terminal=True, width=160))
    for event in events:
        live(event)
    frame = Console(file=io.StringIO(), width=160)
    frame.print(live._render())
    live.close()
    text = frame.file.getvalue()
    assert "dr-1" in text and "blocked (merge_conflict)" in text and "queue: dr-2" in text and "vote" in text
    lines = io.StringIO()
    plain = LineSink(lines)
    for event in events:
        plain(event)
    assert len(lines.getvalue().splitlines()) == len(events)
    assert "dr-1: blocked (merge_conflict: x)" in lines.getvalue()
    summary = {"branch": BRANCH, "stop_reason": "done", "closed": ["dr-2"], "blocked": {"dr-1": "merge_conflict"},
               "landings": 1, "conflicts": 2, "wall_s": 1.0, "task_s": 1.5, "calls": 22, "tokens": 0,
               "cost_usd": 0.0, "skipped": []}
    text = "\n".join(summary_lines(summary))
    assert f"git merge --ff-only {BRANCH}" in text and "blocked dr-1: merge_conflict  ->  mesh retry dr-1" in text


def test_lander_lands_again_when_another_process_moves_the_branch_mid_landing(tmp_path):
    ws = make_drain_workspace(tmp_path)
    config = MeshConfig.model_validate({"validation": {"allow": ["python3 check.py"], "sandbox": "none"}})
    lander = Lander(ws.repo, "land", config)
    marker = tmp_path / "moved"
    # Run as validation the first time only: another landing moves the branch meanwhile.
    mover = (f"import pathlib, subprocess\nm = pathlib.Path({str(marker)!r})\nif not m.exists():\n"
             "    m.write_text('x')\n"
             "    run = lambda *a: subprocess.run(['git', *a], capture_output=True, text=True, check=True).stdout.strip()\n"
             "    tip = run('rev-parse', 'refs/heads/land')\n"
             "    new = run('commit-tree', tip + '^{tree}', '-p', tip, '-m', 'another landing')\n"
             "    run('update-ref', 'refs/heads/land', new, tip)\n")
    fork, head = _task_branch_with_commits(ws.repo, [{"checks/mover.py": mover}])
    result = lander.land_commits(task_id="t", run_id="run-1", fork=fork, head=head, commands=["python3 check.py"])
    assert result.result == "landed" and marker.exists()
    subjects = git(ws.repo, "log", "--format=%s", "land").split("\n")
    assert subjects[:3] == ["mesh: t", "another landing", "base"]


def test_remote_landing_refused_by_the_lease_fetches_rebases_and_lands_on_the_new_tip(tmp_path):
    """With a shared remote, another runner pushes the integration branch while this landing
    validates: the push with --force-with-lease is refused, and the landing starts over on the
    remote's new tip. Landing commits pushes the integration branch and nothing else."""
    ws = make_drain_workspace(tmp_path)
    remote = tmp_path / "origin.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(ws.repo), str(remote))
    git(ws.repo, "remote", "add", "origin", str(remote))
    other = tmp_path / "other-runner"
    config = MeshConfig.model_validate({"validation": {"allow": ["python3 check.py"], "sandbox": "none"}})
    lander = Lander(ws.repo, "land", config, remote="origin")
    assert git(remote, "rev-parse", "refs/heads/land").strip() == git(ws.repo, "rev-parse", "land").strip()
    marker = tmp_path / "moved"
    # The first validation: another runner, in its own clone, lands a commit on the remote.
    mover = (f"import pathlib, subprocess\nm = pathlib.Path({str(marker)!r})\nif not m.exists():\n"
             "    m.write_text('x')\n"
             "    run = lambda *a, cwd=None: subprocess.run(['git', *a], cwd=cwd, capture_output=True, text=True,"
             " check=True).stdout.strip()\n"
             f"    run('clone', '--quiet', '-b', 'land', {str(remote)!r}, {str(other)!r})\n"
             f"    run('-c', 'user.name=o', '-c', 'user.email=o@x', 'commit', '--allow-empty', '-m', 'another landing',"
             f" cwd={str(other)!r})\n"
             f"    run('push', '--quiet', 'origin', 'land', cwd={str(other)!r})\n")
    fork, head = _task_branch_with_commits(ws.repo, [{"checks/mover.py": mover}])
    result = lander.land_commits(task_id="t", run_id="run-1", fork=fork, head=head, commands=["python3 check.py"])
    assert result.result == "landed" and marker.exists() and result.method == "rebase"
    on_remote = git(remote, "log", "--format=%s", "land").split("\n")
    assert on_remote[:3] == ["mesh: t", "another landing", "base"]
    assert git(ws.repo, "rev-parse", "land").strip() == git(remote, "rev-parse", "land").strip()
    assert git(remote, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/land", "refs/heads/main"]


def test_remote_refuses_to_push_a_protected_branch(tmp_path):
    ws = make_drain_workspace(tmp_path)
    remote = tmp_path / "origin.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(ws.repo), str(remote))
    git(ws.repo, "remote", "add", "origin", str(remote))
    with pytest.raises(GitError, match="protected"):
        Lander(ws.repo, "main", MeshConfig(), remote="origin")
    with pytest.raises(GitError, match="no git remote"):
        Lander(ws.repo, "land", MeshConfig(), remote="nowhere")


def test_a_task_s_backend_or_git_error_is_in_the_summary_with_exit_2():
    from orchestrator.drain import DrainReport, TaskRow
    from orchestrator.views.live import summary_lines

    report = DrainReport(branch="mesh/land/x", scope={}, tasks=[TaskRow(id="t-1", title="a", state="closed")],
                         errors=["t-2: git worktree add: fatal: disk full"], remote="origin")
    summary = report.to_dict()
    assert summary["exit_code"] == report.exit_code == 2 and summary["errors"] == report.errors
    lines = summary_lines(summary)
    assert "  error t-2: git worktree add: fatal: disk full" in lines
    assert any("on origin" in line for line in lines) and not any("never pushed" in line for line in lines)
