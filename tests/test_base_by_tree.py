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
