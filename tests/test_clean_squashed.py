"""``mesh clean`` recognises a task branch landed as one commit even after later work changed the
same lines (issue 35, item 7): by the landing's ``Mesh-Source`` trailer, or by the tip's tree
for a ``git merge --squash`` by hand. Real drains and runs, real git, no mocks.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.drainkit import BRANCH, LABEL, DrainWorkspace, git, make_drain_workspace


def _clean(ws: DrainWorkspace, *extra: str) -> dict[str, dict]:
    res = CliRunner().invoke(cli, ["--db", str(ws.db), "clean", "--repo", str(ws.repo), "--json", *extra],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return {item["name"]: item for item in json.loads(res.stdout) if item["kind"] == "branch"}


def _sha(ws: DrainWorkspace, ref: str) -> str:
    return git(ws.repo, "rev-parse", ref).strip()


def test_a_rebased_landing_is_found_by_its_mesh_source_after_later_work_on_the_same_lines(tmp_path):
    ws = make_drain_workspace(tmp_path)
    # Another landing while A is reviewed: A lands rebased (a tree A's branch never had), then B
    # rewrites A's file, so merging A's branch again would conflict.
    a = ws.task("A", files={"a.txt": "a\n"}, move={"branch": BRANCH, "path": "other.txt", "content": "o\n"})
    ws.task("B", after=("A",), files={"a.txt": "a, as B wants it\n"})
    code, _, res = ws.drain()
    assert code == 0, res.output
    landing = next(land for land in ws.lands("A") if land.get("result") == "landed")
    assert landing["method"] == "rebase"
    assert git(ws.repo, "log", "-1", "--format=%(trailers:key=Mesh-Source,valueonly)", landing["sha"]).strip() \
        == _sha(ws, f"mesh/{a}")
    assert git(ws.repo, "merge-tree", "--write-tree", BRANCH, f"mesh/{a}", check=False).count("CONFLICT") == 1
    plan = _clean(ws)
    assert plan[f"mesh/{a}"]["action"] == "remove", plan[f"mesh/{a}"]
    assert plan[f"mesh/{a}"]["why"] == f"task {a} is closed; its work is on {BRANCH} (squashed into {landing['sha'][:12]})"
    # A commit on A's branch after the landed one is work found nowhere else: kept.
    worktree = plan[f"mesh/{a}"]["worktree"]
    (tmp_path / worktree / "late.txt").write_text("late\n")
    git(tmp_path / worktree, "add", "late.txt")
    git(tmp_path / worktree, "commit", "--quiet", "-m", "a late change")
    plan = _clean(ws)
    assert plan[f"mesh/{a}"]["action"] == "keep" and "unlanded work" in plan[f"mesh/{a}"]["why"]
    git(tmp_path / worktree, "reset", "--quiet", "--hard", "HEAD~1")
    done = _clean(ws, "--yes")
    assert done[f"mesh/{a}"]["action"] == "removed"
    assert f"mesh/{a}" not in git(ws.repo, "branch", "--list", "mesh/*")


def test_a_squash_merged_by_hand_is_found_by_its_tree_after_later_work_on_the_same_lines(tmp_path):
    ws = make_drain_workspace(tmp_path)
    a = ws.task("A", files={"a.txt": "a\n"})
    res = CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", "run", "--label", LABEL, "--no-land",
                                   "--backend", "command", "--worker-cmd", ws.worker_cmd(), "--repo", str(ws.repo),
                                   "--config", str(ws.config)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    plan = _clean(ws)
    assert plan[f"mesh/{a}"]["action"] == "keep" and "unlanded work" in plan[f"mesh/{a}"]["why"]
    # The maintainer squash-merges it, then changes the same line.
    git(ws.repo, "merge", "--quiet", "--squash", f"mesh/{a}")
    git(ws.repo, "commit", "--quiet", "-m", "A, squashed")
    squashed = _sha(ws, "main")
    (ws.repo / "a.txt").write_text("a, edited later\n")
    git(ws.repo, "commit", "--quiet", "-am", "edit a")
    assert git(ws.repo, "merge-tree", "--write-tree", "main", f"mesh/{a}", check=False).count("CONFLICT") == 1
    plan = _clean(ws)
    assert plan[f"mesh/{a}"]["action"] == "remove", plan[f"mesh/{a}"]
    assert plan[f"mesh/{a}"]["why"] == f"task {a} is closed; its work is on main (squashed into {squashed[:12]})"
