"""Issue 44, item 5: base results by the tree they came from.

Without the sandbox, validation used to run every command in the checkout as it was, whatever
commit it was asked for: the base comparison then ran the task's own tree and kept its tests
under the base's tree, so a later task cut from that base (of another label, from ``main``)
was held against tests its base never had ("lost against the base tree ...: test_ctlmod").
Now a commit is run as itself, sandboxed or not, and a test only one branch has is never
counted against a task cut from a tree without it.
"""

from __future__ import annotations

import sys

import pytest

from orchestrator.sandbox.validation import run_validation
from tests.toolchainkit import commit_all, git, init_repo

COMMAND = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
def test_a_commit_is_run_as_itself_not_as_the_checkout_stands(tmp_path, sandbox):
    repo = tmp_path / "r"
    init_repo(repo)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_base.py").write_text("def test_base():\n    assert 1 + 1 == 2\n")
    base = commit_all(repo)
    git(repo, "checkout", "-q", "-b", "mesh/land/ctl")
    (repo / "tests" / "test_ctlmod.py").write_text("def test_join_slugs():\n    assert 'a' + 'b' == 'ab'\n")
    commit_all(repo, "ctl")
    # The checkout stands on the other label's branch (and even holds a file not committed).
    (repo / "tests" / "test_loose.py").write_text("def test_loose():\n    assert True\n")
    [on_base] = run_validation([COMMAND], cwd=repo, allow=[COMMAND], timeout_s=120, commit=base, sandbox=sandbox)
    assert on_base.passed, on_base.stdout_tail
    assert sorted(case.id.rsplit("::", 1)[-1] for case in on_base.run.cases) == ["test_base"], on_base.run.cases
    [on_head] = run_validation([COMMAND], cwd=repo, allow=[COMMAND], timeout_s=120, sandbox=sandbox)
    ids = sorted(case.id.rsplit("::", 1)[-1] for case in on_head.run.cases)
    assert "test_join_slugs" in ids and "test_base" in ids


CTL_TEST = ("diff --git a/tests/test_ctlmod.py b/tests/test_ctlmod.py\nnew file mode 100644\n--- /dev/null\n"
            "+++ b/tests/test_ctlmod.py\n@@ -0,0 +1,2 @@\n+def test_join_slugs():\n+    assert 'a' + '-' + 'b' == 'a-b'\n")


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
def test_a_landing_on_one_label_is_not_held_against_a_task_of_another_from_main(tmp_path, sandbox):
    """The reported sequence: a task of plan:ctl lands with --onto mesh/land/ctl adding a test; a
    task of plan:demo, cut from main (which never had that test), is then validated and closes."""
    from tests.runkit import TASK, happy_script, make_workspace, r, synthesis

    ws = make_workspace(tmp_path)
    command = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"
    config = (ws.repo / "mesh.toml").read_text().replace(
        "[validation]\n", f'[validation]\nsandbox = "{sandbox}"\ncheck = ["{command}"]\n', 1).replace(
        'allow = ["python3 -m unittest', f'allow = ["{command}", "python3 -m unittest', 1)
    (ws.repo / "mesh.toml").write_text(config)
    git(ws.repo, "-c", "user.name=p", "-c", "user.email=p@p", "commit", "-qam", "pytest and the sandbox setting")
    with ws.tracker() as t:
        other = t.create("Join slugs", labels=["plan:ctl"], description="Join slugs with a dash.",
                         acceptance_criteria="join works", design="a test of it", notes="small")["id"]
    first = happy_script()
    first["synthesizer"][0] = r("synthesis", synthesis(CTL_TEST, [command]))
    code, report, res = ws.run(first, "--onto", "mesh/land/ctl", label="plan:ctl")
    assert code == 0 and report["outcome"] == "closed", res.output
    assert "tests/test_ctlmod.py" in git(ws.repo, "ls-tree", "-r", "--name-only", "mesh/land/ctl")
    second = happy_script()
    second["synthesizer"][0] = r("synthesis", synthesis(commands=[command]))
    code, report, res = ws.run(second)
    assert code == 0 and report["outcome"] == "closed", (report or {}).get("block_detail", res.output)
    assert "test_ctlmod" not in res.output
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "closed" and t.get(other)["status"] == "closed"
