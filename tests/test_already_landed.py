"""Issue 44, item 4: a task whose change is already on its branch never closes with an empty commit.

The sequence of the report: the change a task's patch makes is already on the branch the task
starts from (an earlier attempt landed it, or a person did). The patch then applies as
nothing; mesh used to take that as "already applied" (right when resuming, wrong here), showed
the reviewer "No changes.", and landed an empty commit. Now the run ends ``already_landed``,
naming the commit that holds the change: no commit on the task branch, no validation, no
review, no landing.
"""

from __future__ import annotations

import os
import subprocess

from tests.runkit import PATCH_FEATURE, TASK, happy_script, make_workspace


def _on_main(ws, patch: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "apply", "--index", "-"], cwd=ws.repo, input=patch, text=True, check=True, env=env)
    subprocess.run(["git", "-c", "user.name=p", "-c", "user.email=p@p", "commit", "-qm", "a person did it"],
                   cwd=ws.repo, check=True, env=env)
    return ws.git("rev-parse", "HEAD").strip()


def test_a_change_already_on_the_branch_ends_already_landed_without_an_empty_commit(tmp_path):
    ws = make_workspace(tmp_path)
    holder = _on_main(ws, PATCH_FEATURE)
    code, report, res = ws.run(happy_script())
    assert code == 3, res.output
    assert report["outcome"] == "blocked" and report["block_reason"] == "already_landed", report
    assert holder[:12] in report["block_detail"], report["block_detail"]
    kinds = ws.kinds()
    assert "proof" not in kinds and "review" not in kinds, kinds  # nothing validated, nobody asked to review
    branch = f"mesh/{TASK}"
    assert ws.git("rev-list", "--count", f"main..{branch}").strip() == "0"  # no empty commit
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "blocked"
    # mesh status says why it is blocked (issue 44, item 6).
    status = ws.mesh("status", "--label", "plan:demo", "--repo", str(ws.repo))
    assert "blocked: already_landed" in status.output, status.output


def test_the_same_change_on_a_fresh_branch_still_lands(tmp_path):
    """The control: without the change on main, the same script closes the task with its commit."""
    ws = make_workspace(tmp_path)
    code, report, res = ws.run(happy_script())
    assert code == 0 and report["outcome"] == "closed", res.output
    assert ws.git("rev-list", "--count", f"main..mesh/{TASK}").strip() == "1"
