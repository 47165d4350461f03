"""The integration branch follows its base (``orchestrator.landing.follow``), on real git repos:
the base moving between drains (fast-forward, merge re-validated, conflict, failing merge),
during a drain, on a shared bare remote, and under ``mesh run``; plus one commit per task on
the integration branch, each of which passes validation (bisected commit by commit).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.drainkit import BRANCH, LABEL, ROOT, DrainWorkspace, git, make_drain_workspace


def _commit_on_main(ws: DrainWorkspace, files: dict[str, str], message: str = "maintainer fix") -> str:
    """What a maintainer does: commit on the checked-out main branch."""
    for path, content in files.items():
        (ws.repo / path).parent.mkdir(parents=True, exist_ok=True)
        (ws.repo / path).write_text(content)
    git(ws.repo, "add", "-A")
    git(ws.repo, "commit", "--quiet", "-m", message)
    return git(ws.repo, "rev-parse", "HEAD").strip()


def _followed(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "base_followed"]


def _started(events: list[dict]) -> dict[str, dict]:
    return {e["task"]: e for e in events if e["event"] == "task_started"}


def _landed_a_then_main(tmp_path, files: dict[str, str]) -> tuple[DrainWorkspace, str]:
    """A drained task A (a.txt), then a maintainer's commit of ``files`` on main and a task B after
    A; the integration branch's tip before the next drain."""
    ws = make_drain_workspace(tmp_path)
    ws.task("A", files={"a.txt": "a\n"})
    assert ws.drain()[0] == 0
    before = _tip(ws)
    _commit_on_main(ws, files)
    ws.task("B", after=("A",), files={"b.txt": "b\n"})
    return ws, before


def _landed_a_on_a_remote(tmp_path) -> tuple[DrainWorkspace, object]:
    """A workspace sharing a bare remote ``origin``, with task A drained through it."""
    ws = make_drain_workspace(tmp_path)
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(ws.repo), str(origin))
    git(ws.repo, "remote", "add", "origin", str(origin))
    ws.task("A", files={"a.txt": "a\n"})
    assert ws.drain("--remote", "origin")[0] == 0
    return ws, origin


def _tip(ws: DrainWorkspace, ref: str = BRANCH) -> str:
    return git(ws.repo, "rev-parse", ref).strip()


def test_the_base_merged_in_between_drains_is_validated_and_tasks_start_from_it(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("A", files={"a.txt": "a\n", "checks/a.py": "assert open('a.txt').read() == 'a\\n'\n"})
    code, events, res = ws.drain()
    assert code == 0, res.output
    first = _followed(events)[0]
    assert (first["result"], first["base"]) == ("current", "main")
    with ws.tracker() as t:
        assert t.get_config(f"mesh.land.base:{BRANCH}") == "main"  # recorded for later runs
    landed_a = _tip(ws)
    fix = _commit_on_main(ws, {"fix.txt": "fixed\n", "checks/fix.py": "assert open('fix.txt').read() == 'fixed\\n'\n"})
    ws.task("B", after=("A",), files={"b.txt": "b\n"})
    code, events, res = ws.drain()
    assert code == 0, res.output
    (followed,) = _followed(events)
    assert followed["result"] == "merged" and followed["base_sha"] == fix and followed["validation_s"] > 0
    merge = followed["tip"]
    assert git(ws.repo, "rev-parse", f"{merge}^1", f"{merge}^2").split() == [landed_a, fix]
    assert "Mesh-Base: " + fix in git(ws.repo, "log", "-1", "--format=%B", merge)
    started = _started(events)[ws.ids["B"]]
    assert (started["onto_sha"], started["base"], started["base_sha"]) == (merge, "main", fix)
    assert ws.tree()["fix.txt"] == "fixed\n" and ws.tree()["b.txt"] == "b\n"
    # The terminal says it too.
    lines = CliRunner().invoke(cli, [a for a in ws.drain_args() if a != "--json"], catch_exceptions=False).stderr
    assert f"tasks start from {BRANCH} at {_tip(ws)[:12]} (base main at {fix[:12]}: already holds it)" in lines


def test_a_base_that_holds_the_landed_work_is_fast_forwarded_to(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("A", files={"a.txt": "a\n"})
    assert ws.drain()[0] == 0
    git(ws.repo, "merge", "--quiet", "--ff-only", BRANCH)  # the maintainer merged the landed work
    fix = _commit_on_main(ws, {"fix.txt": "fixed\n"})
    ws.task("B", after=("A",), files={"b.txt": "b\n"})
    code, events, res = ws.drain()
    assert code == 0, res.output
    (followed,) = _followed(events)
    assert (followed["result"], followed["tip"]) == ("fast-forward", fix)
    assert _started(events)[ws.ids["B"]]["onto_sha"] == fix
    assert git(ws.repo, "rev-list", "--merges", BRANCH) == ""
    assert git(ws.repo, "log", "--format=%s", f"{fix}..{BRANCH}").split("\n")[0] == "B"


def test_a_conflict_with_the_base_names_the_files_and_starts_nothing(tmp_path):
    ws, before = _landed_a_then_main(tmp_path, {"a.txt": "not a\n"})
    code, events, res = ws.drain()
    assert code == 5
    assert "cannot follow base main" in res.output and "conflicts in: a.txt" in res.output
    assert "git merge main" in res.output
    assert _tip(ws) == before and ws.status("B") == "open" and ws.checkpoints("B") == []
    # The same under mesh run.
    res = CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", "run", "--label", LABEL, "--backend",
                                   "command", "--worker-cmd", ws.worker_cmd(), "--repo", str(ws.repo), "--config",
                                   str(ws.config)], catch_exceptions=False)
    assert res.exit_code == 5 and "conflicts in: a.txt" in res.output
    # A person merges by hand; the next drain goes on from there.
    other = tmp_path / "merge"
    git(ws.repo, "worktree", "add", "--quiet", str(other), BRANCH)
    git(other, "merge", "--quiet", "-X", "theirs", "main", "-m", "merged by hand")
    git(ws.repo, "worktree", "remove", str(other))
    code, events, res = ws.drain()
    assert code == 0, res.output
    assert _followed(events)[0]["result"] == "current" and ws.status("B") == "closed"


def test_a_merge_that_fails_validation_moves_nothing(tmp_path):
    # Fine on main alone, broken once merged with A's a.txt.
    ws, before = _landed_a_then_main(tmp_path, {"checks/no_a.py": "import os\nassert not os.path.exists('a.txt')\n"})
    code, events, res = ws.drain()
    assert code == 5
    assert "the merge fails validation: `python3 check.py` exit 1" in res.output
    assert _tip(ws) == before and ws.checkpoints("B") == []


def test_the_base_moving_during_a_drain_reaches_the_next_task(tmp_path):
    ws = make_drain_workspace(tmp_path)
    # While A is reviewed, a maintainer commits on main (the worker commits without a checkout).
    ws.task("A", files={"a.txt": "a\n"}, move={"branch": "main", "path": "fix.txt", "content": "fixed\n"})
    ws.task("B", after=("A",), files={"b.txt": "b\n"})
    git(ws.repo, "checkout", "--quiet", "--detach")  # main may move: HEAD no longer holds it
    with ws.tracker() as t:
        t.set_config(f"mesh.land.base:{BRANCH}", "main")
    code, events, res = ws.drain()
    assert code == 0, res.output
    results = [e["result"] for e in _followed(events)]
    assert results == ["current", "merged"], results
    main = _tip(ws, "main")
    assert _started(events)[ws.ids["B"]]["base_sha"] == main
    assert ws.tree()["fix.txt"] == "fixed\n"


def test_with_a_shared_remote_the_remote_s_base_is_followed(tmp_path):
    ws, origin = _landed_a_on_a_remote(tmp_path)
    # A maintainer pushes a fix to the shared main from another clone; this clone's main is stale.
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", str(origin), str(other))
    git(other, "config", "user.name", "M")
    git(other, "config", "user.email", "m@example.com")
    (other / "fix.txt").write_text("fixed\n")
    git(other, "add", "-A")
    git(other, "commit", "--quiet", "-m", "fix")
    git(other, "push", "--quiet", "origin", "main")
    fix = git(other, "rev-parse", "HEAD").strip()
    ws.task("B", after=("A",), files={"b.txt": "b\n"})
    code, events, res = ws.drain("--remote", "origin")
    assert code == 0, res.output
    (followed,) = _followed(events)
    assert (followed["result"], followed["base_sha"]) == ("merged", fix)
    assert git(origin, "rev-parse", BRANCH).strip() == _tip(ws)  # the remote's branch followed too
    assert git(origin, "show", f"{BRANCH}:fix.txt") == "fixed\n"
    assert git(ws.repo, "rev-parse", "main").strip() != fix  # the local main is not touched


def test_mesh_run_prints_where_its_task_starts(tmp_path):
    ws = make_drain_workspace(tmp_path)
    ws.task("A", files={"a.txt": "a\n"})
    res = CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", "run", "--label", LABEL, "--backend",
                                   "command", "--worker-cmd", ws.worker_cmd(), "--repo", str(ws.repo), "--config",
                                   str(ws.config)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    main = _tip(ws, "main")
    assert f"tasks start from {BRANCH} at {main[:12]} (base main at {main[:12]}: already holds it)" in res.output


def test_a_drained_epic_lands_one_commit_per_task_and_each_passes_validation(tmp_path):
    """Bisect: every commit on the integration branch since the base passes ``check.py``, though
    B's synthesis failed its own check (a revision fixed it) and C took two review cycles."""
    ws = make_drain_workspace(tmp_path)
    ws.task("A", files={"lib.txt": "1\n", "checks/lib.py": "assert open('lib.txt').read() == '1\\n'\n"})
    ws.task("B", after=("A",), files={"use.txt": "wrong\n", "checks/use.py": "assert open('use.txt').read() == 'ok\\n'\n"},
            revise={"use.txt": "ok\n"})
    ws.task("C", after=("B",), files={"doc.txt": "draft\n"}, revise={"doc.txt": "final\n"})
    base = _tip(ws, "main")
    code, events, res = ws.drain()
    assert code == 0, res.output
    commits = git(ws.repo, "rev-list", "--reverse", f"{base}..{BRANCH}").split()
    assert len(commits) == 3  # one per task
    for commit, name in zip(commits, "ABC"):
        message = git(ws.repo, "log", "-1", "--format=%B", commit)
        assert message.split("\n")[0] == name
        assert f"Task {ws.ids[name]}, run " in message and f"Mesh-Task: {ws.ids[name]}" in message
        run = git(ws.repo, "log", "-1", "--format=%(trailers:key=Mesh-Run,valueonly)", commit).strip()
        source = git(ws.repo, "log", "-1", "--format=%(trailers:key=Mesh-Source,valueonly)", commit).strip()
        # The intermediate commits stay on the task's own branch.
        assert git(ws.repo, "merge-base", "--is-ancestor", source, f"mesh/{ws.ids[name]}", check=False) == ""
        assert run in git(ws.repo, "log", "--format=%B", f"mesh/{ws.ids[name]}")
    for name in "BC":
        message = git(ws.repo, "log", "-1", "--format=%B", commits["ABC".index(name)])
        assert "2 review cycle(s)" in message and "Findings fixed:" in message and "MUST_FIX" in message
        assert int(git(ws.repo, "rev-list", "--count", f"{base}..mesh/{ws.ids[name]}")) >= 2
    # Commit by commit, as git bisect would check them: every one passes the validation.
    out = tmp_path / "bisect"
    git(ws.repo, "worktree", "add", "--quiet", "--detach", str(out), BRANCH)
    for commit in commits:
        git(out, "checkout", "--quiet", commit)
        assert subprocess.run([sys.executable, "check.py"], cwd=out, capture_output=True).returncode == 0, commit
    assert events[-1]["landings"] == 3


def _killed_drain(ws: DrainWorkspace, crash_at: str, *extra: str) -> None:
    env = {**{k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}, "MESH_CRASH_AT": crash_at}
    done = subprocess.run([sys.executable, "-c", "from orchestrator.cli.main import main; main()",
                           *ws.drain_args(*extra)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr  # the kill point was reached


@pytest.mark.parametrize("crash_at", ["follow-commit", "follow-push"])
def test_a_follow_killed_half_way_is_done_once_by_the_same_command(tmp_path, crash_at):
    ws, origin = _landed_a_on_a_remote(tmp_path)
    landed = _tip(ws)
    fix = _commit_on_main(ws, {"fix.txt": "fixed\n"})
    git(ws.repo, "push", "--quiet", "origin", "main")
    ws.task("B", after=("A",), files={"b.txt": "b\n"})
    _killed_drain(ws, crash_at, "--remote", "origin")
    assert ws.checkpoints("B") == []  # killed before the task started
    code, events, res = ws.drain("--remote", "origin")
    assert code == 0, res.output
    tip = _tip(ws)
    assert git(origin, "rev-parse", BRANCH).strip() == tip
    merges = git(ws.repo, "rev-list", "--merges", f"{landed}..{BRANCH}").split()
    assert len(merges) == 1  # the base merged in once
    assert git(ws.repo, "rev-parse", f"{merges[0]}^2").strip() == fix
    assert ws.status("B") == "closed" and ws.tree()["fix.txt"] == "fixed\n"
