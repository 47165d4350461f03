"""A run after a stopped one starts its task branch where tasks start now (issue 35, item 7).

Real ``mesh run`` calls with the scripted command worker on a real repository: a first run
leaves ``mesh/<task>`` behind (a configuration mistake after its worktree was cut, or a blocked
attempt with commits), the integration branch moves on (a maintainer's fix on the base), and
the next run's task commit must sit on the tip its "tasks start from" line names.
"""

from __future__ import annotations

from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.drainkit import BRANCH, LABEL, DrainWorkspace, git, make_drain_workspace


def _run(ws: DrainWorkspace):
    return CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", "run", "--label", LABEL, "--backend",
                                    "command", "--worker-cmd", ws.worker_cmd(), "--repo", str(ws.repo), "--config",
                                    str(ws.config)], catch_exceptions=False)


def _maintainer_fix(ws: DrainWorkspace) -> str:
    (ws.repo / "fix.txt").write_text("fixed\n")
    git(ws.repo, "add", "fix.txt")
    git(ws.repo, "commit", "--quiet", "-m", "maintainer fix")
    return git(ws.repo, "rev-parse", "HEAD").strip()


def _tip(ws: DrainWorkspace, ref: str) -> str:
    return git(ws.repo, "rev-parse", ref).strip()


def _started_from(ws: DrainWorkspace, task: str, tip: str, output: str) -> None:
    """The task's one commit sits on ``tip``, the commit the run said tasks start from, and it
    landed as the task's own tree (nothing to rebase)."""
    assert f"tasks start from {BRANCH} at {tip[:12]} (base main at {tip[:12]}: fast-forwarded to it)" in output
    assert git(ws.repo, "rev-list", "--parents", "-n", "1", f"mesh/{task}").split()[1:] == [tip]
    assert "(squash)" in output and ws.tree()["fix.txt"] == "fixed\n"


def test_a_run_after_a_config_mistake_cuts_its_branch_from_the_new_tip(tmp_path):
    ws = make_drain_workspace(tmp_path)
    task = ws.task("A", files={"a.txt": "a\n"}, commands=["make deploy"])
    first = _run(ws)
    assert first.exit_code == 2 and "config_mistake" in first.output, first.output
    old = _tip(ws, "main")
    assert _tip(ws, f"mesh/{task}") == old and ws.status("A") == "open"  # the branch was cut, nothing committed
    new = _maintainer_fix(ws)
    ws.plan[task].pop("commands")  # the person fixes the mistake
    second = _run(ws)
    assert second.exit_code == 0, second.output
    assert f"mesh/{task} moved from {old[:12]} to {new[:12]} (it held no commits of its own)" in second.output
    _started_from(ws, task, new, second.output)
    # The worktree was moved with its branch: validation saw the maintainer's file.
    worktree = next(line.split()[1] for line in git(ws.repo, "worktree", "list", "--porcelain").splitlines()
                    if line.startswith("worktree ") and line.endswith(f"/{task}"))
    assert (tmp_path / worktree / "fix.txt").read_text() == "fixed\n"


def test_an_earlier_attempt_with_commits_is_kept_and_the_new_branch_starts_from_the_new_tip(tmp_path):
    ws = make_drain_workspace(tmp_path)
    task = ws.task("A", files={"a.txt": "a\n", "checks/a.py": "raise AssertionError('not yet')\n"})
    first = _run(ws)
    assert first.exit_code == 3, first.output
    attempt = _tip(ws, f"mesh/{task}")
    run_id = git(ws.repo, "log", "-1", "--format=%(trailers:key=Mesh-Run,valueonly)", attempt).strip()
    assert git(ws.repo, "rev-list", "--count", f"main..{attempt}").strip() != "0"  # work of its own
    new = _maintainer_fix(ws)
    assert CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", "retry", task]).exit_code == 0
    ws.plan[task]["files"] = {"a.txt": "a\n"}
    second = _run(ws)
    assert second.exit_code == 0, second.output
    # The earlier attempt's commits are never lost: kept on a branch of their own, as after any blocked run.
    assert f"earlier attempt kept on branch mesh/{task}-{run_id}" in second.output
    assert _tip(ws, f"mesh/{task}-{run_id}") == attempt
    assert "moved from" not in second.output
    _started_from(ws, task, new, second.output)
