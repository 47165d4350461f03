"""Issue 16 item 2, ci-close: the tree CI closes on is the approved tree, whole, and ci-close
takes its configuration from the protected branch, never from the branch under review.

Each test starts from a real signed run (replay backend, real git, real tracker) that stops
awaiting CI, then does to CI's checkout what someone pushing to the task branch could.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.runkit import TASK, happy_script, make_workspace, r, synthesis
from tests.test_ci_close import KEY, awaiting_ci, ci_close, ci_config, task_checkout


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def commit(repo: Path, path: str, text: str, message: str) -> None:
    target = repo / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    git(repo, "add", path)
    git(repo, "commit", "-qm", message)


def status(ws) -> str:
    with ws.tracker() as t:
        return t.get(TASK)["status"]


def test_a_package_added_beside_the_approved_module_is_refused(ws):
    awaiting_ci(ws)
    clone = task_checkout(ws)
    approved = (clone / "temperature.py").read_text()
    # The approved module, plus a line of the attacker's: Python now imports the package.
    commit(clone, "temperature/__init__.py", approved + "\nimport os  # attacker's code runs on import\n",
           "add a package")
    found = subprocess.run([sys.executable, "-c", "import temperature; print(temperature.__file__)"], cwd=clone,
                           capture_output=True, text=True, check=True).stdout
    assert found.strip().endswith("temperature/__init__.py")  # the attack is real
    code, checks, res = ci_close(ws, "--revalidate", repo=clone)
    assert code == 1, res.output
    [check] = checks
    assert check["reasons"] == ["tree_differs"]
    assert any("temperature/__init__.py" in p for p in check["problems"])
    assert check["validation"] == []  # refused before anything of the branch ran
    assert status(ws) == "in_progress"


@pytest.mark.parametrize("path", ["docs/notes.md", "tests/test_later.py", "sitecustomize.py"])
def test_any_other_later_difference_is_refused(ws, path):
    awaiting_ci(ws)
    clone = task_checkout(ws)
    commit(clone, path, "later\n", "a later commit")
    code, checks, res = ci_close(ws, repo=clone)
    assert code == 1, res.output
    assert checks[0]["reasons"] == ["tree_differs"] and path in checks[0]["problems"][0]
    assert status(ws) == "in_progress"


def test_a_tracker_folder_holding_a_link_is_refused(ws):
    awaiting_ci(ws)
    clone = task_checkout(ws)
    (clone / ".beads").mkdir(exist_ok=True)
    os.symlink("../temperature.py", clone / ".beads" / "issues.jsonl")
    git(clone, "add", "-f", ".beads/issues.jsonl")
    git(clone, "commit", "-qm", "a link where the export goes")
    code, checks, _ = ci_close(ws, repo=clone)
    assert code == 1 and checks[0]["reasons"] == ["tree_differs"]


def _protect_main(ws, text: str) -> None:
    """Commit ``text`` as the mesh.toml of main, the protected branch (origin/HEAD of a clone)."""
    (ws.repo / "mesh.toml").write_text(text)
    git(ws.repo, "add", "mesh.toml")
    git(ws.repo, "commit", "-qm", "protected configuration")


ENV_TEST = ("import os\nimport unittest\n\n\nclass NoCiSecret(unittest.TestCase):\n"
            "    def test_the_ci_secret_is_not_here(self):\n        self.assertNotIn('SECRET', os.environ)\n")
ENV_TEST_PATCH = ("diff --git a/tests/test_env.py b/tests/test_env.py\nnew file mode 100644\n--- /dev/null\n"
                  "+++ b/tests/test_env.py\n@@ -0,0 +1,7 @@\n"
                  + "".join(f"+{line}\n" for line in ENV_TEST.splitlines()))


def _awaiting_ci_with_env_test(ws) -> None:
    """A signed run, awaiting CI, whose approved tests fail when SECRET reaches them."""
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(patch=ENV_TEST_PATCH))
    code, report, res = ws.run(script, "--config", str(ci_config(ws)), env={"MESH_SIGNING_KEY": KEY})
    assert code == 0 and report["outcome"] == "awaiting_ci", res.output


def _ci_close_without_db(clone: Path, *args: str, env: dict):
    """ci-close as CI runs it with no --db and no MESH_DB: the tracker comes from tracker.url."""
    res = CliRunner().invoke(cli, ["--actor", "ci", "ci-close", "--label", "plan:demo", "--repo", str(clone),
                                   "--revalidate", "--json", *args],
                             env={"MESH_DB": None, "MESH_SIGNING_KEY": KEY, **env}, catch_exceptions=False)
    return res.exit_code, (json.loads(res.stdout) if res.stdout.strip().startswith("[") else None), res


def test_the_branch_under_review_cannot_configure_ci_close(ws, tmp_path):
    _awaiting_ci_with_env_test(ws)
    protected = (ws.repo / "mesh.toml").read_text()
    _protect_main(ws, protected + f'\n[tracker]\nurl = "{ws.db}"\n')
    clone = task_checkout(ws)
    # The checkout's own mesh.toml asks for CI's secret in validation and another tracker.
    elsewhere = tmp_path / "attacker" / "mesh.db"
    (clone / "mesh.toml").write_text(protected.replace("[validation]", '[validation]\nenv = ["SECRET"]')
                                     + f'\n[tracker]\nurl = "{elsewhere}"\n')
    code, checks, res = _ci_close_without_db(clone, env={"SECRET": "ci-only-secret-value"})
    assert code == 0, res.output
    [check] = checks
    assert check["result"] == "closed" and check["checks"]["revalidation_pass"] is True
    assert not elsewhere.parent.exists()  # the attacker's tracker was never opened
    assert status(ws) == "closed"  # the protected branch's tracker was


def test_committing_the_configuration_to_the_branch_is_refused_too(ws):
    _awaiting_ci_with_env_test(ws)
    clone = task_checkout(ws)
    text = (clone / "mesh.toml").read_text().replace("[validation]", '[validation]\nenv = ["SECRET"]')
    commit(clone, "mesh.toml", text, "pass the CI secret to validation")
    code, checks, res = ci_close(ws, "--revalidate", repo=clone)
    assert code == 1, res.output
    assert checks[0]["reasons"] == ["tree_differs"] and checks[0]["validation"] == []


def test_ci_s_own_config_file_still_configures_revalidation(ws, tmp_path, monkeypatch):
    # CI's own file (outside the checkout) is trusted: passing SECRET makes the approved test fail.
    _awaiting_ci_with_env_test(ws)
    clone = task_checkout(ws)
    own = tmp_path / "ci-own.toml"
    own.write_text((ws.repo / "mesh.toml").read_text().replace("[validation]", '[validation]\nenv = ["SECRET"]'))
    monkeypatch.setenv("SECRET", "ci-only-secret-value")
    code, checks, res = ci_close(ws, "--revalidate", "--config", str(own), repo=clone)
    assert code == 1, res.output
    assert checks[0]["checks"]["revalidation_pass"] is False


def test_a_config_file_inside_the_checkout_or_no_protected_branch_is_a_usage_error(ws, tmp_path):
    awaiting_ci(ws)
    clone = task_checkout(ws)
    code, _, res = ci_close(ws, "--config", str(clone / "mesh.toml"), repo=clone)
    assert code == 2 and "checkout under review" in res.output
    code, _, res = ci_close(ws, "--base", "origin/no-such-branch", repo=clone)
    assert code == 2 and "--base origin/no-such-branch names no commit" in res.output
    lone = tmp_path / "lone"
    git(tmp_path, "init", "-q", "-b", "work", str(lone))
    commit(lone, "a.txt", "a\n", "first")
    code, _, res = ci_close(ws, repo=lone)
    assert code == 2 and "no protected branch" in res.output
