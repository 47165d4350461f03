"""Issue 43, item 1: CI never runs code from the branch under review with the signing key in reach.

The attack of the fourth review, performed for real: a task's patch adds one line to the CI
close script (``printf %s "$MESH_SIGNING_KEY" > somewhere``). Before, the example workflow ran
that script from the checked-out branch with the key in its environment. Now:

- the documented job is one installed mesh command (``mesh ci-close --jsonl ... --commit``),
  the only step given the key; run on a checkout holding the attacker's script and a test that
  hunts for the key during re-validation, the key appears nowhere and the script never runs;
- a patch to a file a CI configuration of the repository runs is refused by the patch policy
  (``policy_violation``), naming the ``patch.allow`` line that would admit it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.protocol.outcomes import CLOSE_REASON
from orchestrator.worktree.ci_runs import ci_run_files, commands_run
from orchestrator.worktree.patchcheck import check_patch
from orchestrator.worktree.policy import PatchPolicy
from tests.runkit import PATCH_FEATURE, TASK, happy_script, make_workspace, r, synthesis

KEY = "ci-key-Zq81vT4mW6pXr0Ls"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "ci"


def new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, check=True).stdout


def key_step(workflow: dict) -> dict:
    """The one step of the GitHub example that is given the key."""
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]
             if "MESH_SIGNING_KEY" in (step.get("env") or {})]
    assert len(steps) == 1, steps
    return steps[0]


def test_the_example_workflows_run_only_an_installed_mesh_with_the_key():
    github = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    step = key_step(github)
    words = shlex.split(step["run"])
    assert words[0] == "mesh" and "--jsonl" in words and "\n" not in step["run"].strip()
    assert commands_run(step["run"]) == ([], [])  # names no file of the checkout
    steps = github["jobs"]["ci-close"]["steps"]
    order = [s.get("uses", s.get("name", "")) for s in steps]
    # mesh is installed, pinned, before the checkout and outside it.
    install = next(i for i, s in enumerate(steps) if "pip install" in s.get("run", ""))
    assert install < order.index("actions/checkout@v4")
    assert "==" in steps[install]["run"] and steps[install]["working-directory"] == "${{ runner.temp }}"
    assert all("MESH_SIGNING_KEY" not in json.dumps(s) for s in steps if s is not step)
    assert not (EXAMPLES / "ci-close.sh").exists()
    gitlab = yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())["mesh-ci-close"]
    assert gitlab["environment"]["name"] == "mesh-ci-close"
    ran = [line for line in gitlab["script"] if "MESH_SIGNING_KEY" in line or line.startswith("mesh ")]
    assert len(ran) == 1 and shlex.split(ran[0])[0] == "mesh"
    assert all(commands_run(line) == ([], []) for line in gitlab["script"] if "pip install" not in line)
    assert "(cd /tmp && python -m pip install --no-input 'beads-mesh==" in "\n".join(gitlab["script"])


# ---------------------------------------------------------------- the attack, end to end

def leaking_patch(leaks: Path) -> str:
    """The approved change plus the attacker's extras: the CI close script with one more line,
    and a test that hunts for the key while it is re-validated (and passes, so nothing fails)."""
    script = ("#!/usr/bin/env bash\nset -euo pipefail\n"
              f"printf %s \"${{MESH_SIGNING_KEY:-}}\" > {leaks}/from-script\n"
              f"touch {leaks}/script-ran\nmesh ci-close --label \"$MESH_PLAN_LABEL\" --revalidate\n")
    hunter = f'''import glob
import os
import unittest


class TestEnvironment(unittest.TestCase):
    def test_nothing_leaks(self):
        found = [repr(dict(os.environ))]
        for name in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
            try:
                with open(name, "rb") as handle:
                    found.append(handle.read().decode("latin-1"))
            except OSError:
                pass
        text = "\\n".join(found)
        for target in ("{leaks}/from-test", "/tmp/mesh-ci-key-leak", os.path.expanduser("~/leak")):
            try:
                with open(target, "a") as handle:
                    handle.write(text)
            except OSError:
                pass
        self.assertTrue(True)
'''
    return PATCH_FEATURE + new_file("examples/ci/ci-close.sh", script) + new_file("tests/test_leak.py", hunter)


def approved_on_a_task_branch(ws, patch: str) -> None:
    config = ws.root / "ci-mesh.toml"
    head, _, rest = (ws.repo / "mesh.toml").read_text().partition("[validation]")
    config.write_text(head + 'close_mode = "ci"\n\n[validation]' + rest)
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(patch))
    code, report, res = ws.run(script, "--config", str(config), env={"MESH_SIGNING_KEY": KEY})
    assert code == 0 and report["outcome"] == "awaiting_ci", res.output


def key_anywhere(*roots: Path) -> list[str]:
    hits = []
    for root in roots:
        paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
        for path in paths:
            try:
                if KEY.encode() in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                pass
    return hits


def test_the_documented_job_never_runs_the_branch_with_the_key(tmp_path):
    ws = make_workspace(tmp_path)
    leaks = tmp_path / "leaks"
    leaks.mkdir()
    approved_on_a_task_branch(ws, leaking_patch(leaks))
    clone = tmp_path / "ci-clone"
    git(tmp_path, "clone", "-q", "--branch", f"mesh/{TASK}", str(ws.repo), str(clone))
    # The tracker as the local run committed it: the export on the task branch.
    (clone / ".beads").mkdir(exist_ok=True)
    assert ws.mesh("tracker", "export", "-o", str(clone / ".beads" / "issues.jsonl")).exit_code == 0
    git(clone, "add", ".beads/issues.jsonl")
    git(clone, "-c", "user.name=dev", "-c", "user.email=dev@example.invalid", "commit", "-qm", "tracker")
    for key, value in (("user.name", "mesh-ci"), ("user.email", "mesh-ci@example.invalid")):
        git(clone, "config", key, value)
    # Control: the attacker's script does leak the key when it is run with it.
    control = subprocess.run(["bash", "-c", f"sed -n 3p {clone}/examples/ci/ci-close.sh | bash"],
                             env={**os.environ, "MESH_SIGNING_KEY": KEY}, capture_output=True, text=True)
    assert control.returncode == 0 and (leaks / "from-script").read_text() == KEY
    (leaks / "from-script").unlink()

    step = key_step(yaml.safe_load((EXAMPLES / "github-actions.yml").read_text()))
    default = git(ws.repo, "symbolic-ref", "--short", "HEAD").strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MESH_", "GIT_"))}
    env.update({"MESH_SIGNING_KEY": KEY, "MESH_PLAN_LABEL": "plan:demo", "MESH_CI_BASE": f"origin/{default}",
                "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]})
    out = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=clone, env=env, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout + out.stderr
    exported = {json.loads(line)["id"]: json.loads(line) for line in (clone / ".beads" / "issues.jsonl").open()}
    assert exported[TASK]["status"] == "closed" and exported[TASK]["close_reason"] == CLOSE_REASON
    assert git(clone, "log", "-1", "--format=%s").strip() == "mesh ci-close: tracker update"
    assert git(clone, "status", "--porcelain") == ""
    # The script never ran; the test ran (it was re-validated) and found no key to write.
    assert not (leaks / "script-ran").exists() and not (leaks / "from-script").exists()
    assert KEY not in out.stdout + out.stderr
    assert key_anywhere(tmp_path, Path("/tmp/mesh-ci-key-leak")) == []
    assert KEY not in git(clone, "log", "-p", "--all")


def mesh_without_db(*args: str):
    from click.testing import CliRunner

    from orchestrator.cli.main import cli

    return CliRunner().invoke(cli, list(args), env={"MESH_DB": None}, catch_exceptions=False)


def test_the_jsonl_file_is_never_read_or_written_through_a_link(tmp_path):
    ws = make_workspace(tmp_path)
    outside = tmp_path / "runner-file"
    outside.write_text("the runner's own file\n")
    (ws.repo / ".beads").mkdir(exist_ok=True)
    (ws.repo / ".beads" / "linked.jsonl").symlink_to(outside)
    scope = ("ci-close", "--label", "plan:demo", "--repo", str(ws.repo), "--jsonl")
    res = mesh_without_db(*scope, ".beads/linked.jsonl", "--commit")
    assert res.exit_code == 2 and "symbolic link" in res.output, res.output
    assert outside.read_text() == "the runner's own file\n"
    res = mesh_without_db(*scope, "../runner-file")
    assert res.exit_code == 2 and "inside the checkout" in res.output, res.output
    # --db and --jsonl together name two trackers.
    res = ws.mesh(*scope, ".beads/issues.jsonl")
    assert res.exit_code == 2 and "not both" in res.output, res.output


# ---------------------------------------------------------------- files CI runs: refused

WORKFLOW = """on: push
jobs:
  close:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - env:
          MESH_SIGNING_KEY: ${{ secrets.MESH_SIGNING_KEY }}
        run: bash examples/ci/ci-close.sh
"""


def test_a_patch_to_the_script_a_workflow_runs_is_refused(tmp_path):
    ws = make_workspace(tmp_path)
    script = "#!/usr/bin/env bash\nmesh ci-close --label \"$MESH_PLAN_LABEL\"\n"
    for rel, text in ((".github/workflows/close.yml", WORKFLOW), ("examples/ci/ci-close.sh", script)):
        (ws.repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws.repo / rel).write_text(text)
    git(ws.repo, "add", "-A")
    git(ws.repo, "-c", "user.name=dev", "-c", "user.email=dev@example.invalid", "commit", "-qm", "ci")
    attack = ("diff --git a/examples/ci/ci-close.sh b/examples/ci/ci-close.sh\n--- a/examples/ci/ci-close.sh\n"
              "+++ b/examples/ci/ci-close.sh\n@@ -1,2 +1,3 @@\n #!/usr/bin/env bash\n"
              "+printf %s \"$MESH_SIGNING_KEY\" > /tmp/k\n mesh ci-close --label \"$MESH_PLAN_LABEL\"\n")
    script_run = happy_script()
    script_run["synthesizer"][0] = r("synthesis", synthesis(PATCH_FEATURE + attack))
    code, report, res = ws.run(script_run)
    assert code == 3 and report["block_reason"] == "policy_violation", res.output
    assert "examples/ci/ci-close.sh is run by CI (named in .github/workflows/close.yml)" in report["block_detail"]
    assert 'patch.allow' in report["block_detail"] and '"examples/ci/ci-close.sh"' in report["block_detail"]
    assert git(ws.repo, "rev-list", "--count", f"main..mesh/{TASK}").strip() == "0"
    # The line patch.allow names admits it, knowingly.
    allowed = PatchPolicy(allow=("examples/ci/ci-close.sh",))
    assert allowed.violations(check_patch(attack), ws.repo) == []


@pytest.mark.parametrize("config, text, run", [
    (".github/workflows/ci.yml", "jobs:\n  a:\n    steps:\n      - run: ./scripts/ci.sh\n", "scripts/ci.sh"),
    (".github/workflows/ci.yml",
     "jobs:\n  a:\n    defaults: {run: {working-directory: app}}\n    steps:\n      - run: python tools/x.py\n",
     "app/tools/x.py"),
    (".github/workflows/ci.yml", "jobs:\n  a:\n    steps:\n      - run: uv run python -m tools.release\n",
     "tools/release.py"),
    (".github/workflows/ci.yml", "jobs:\n  a:\n    steps:\n      - uses: ./.github/actions/s\n", "ci/setup.js"),
    (".gitlab-ci.yml", "t:\n  script:\n    - cd build && bash ../ci/run.sh\n", "ci/run.sh"),
    (".gitlab-ci.yml", "include:\n  - local: ci/jobs.yml\n", "ci/jobs.yml"),
    (".gitlab-ci.yml", "include:\n  - local: ci/jobs.yml\n", "ci/p.pl"),
    (".circleci/config.yml", "jobs:\n  b:\n    steps:\n      - run:\n          command: sudo -E ./deploy\n",
     "deploy"),
    (".travis.yml", "script:\n  - make -f ci.mk\n", "ci.mk"),
    (".travis.yml", "script: make test\n", "Makefile"),
    (".travis.yml", "script: make test\n", "build.sh"),
    ("azure-pipelines.yml", "steps:\n  - template: ci/steps.yml\n  - bash: source ./env.sh\n", "env.sh"),
    ("bitbucket-pipelines.yml", "pipelines:\n  default:\n    - step:\n        script:\n          - node ci/b.js\n",
     "ci/b.js"),
    ("Jenkinsfile", "pipeline { stages { stage('t') { steps { sh './gradlew check' } } } }\n", "gradlew"),
    (".github/workflows/ci.yml", "jobs:\n  a:\n    steps:\n      - run: bash scripts/ci.sh\n", "scripts/lib.sh"),
])
def test_the_files_a_ci_configuration_runs(tmp_path, config, text, run):
    files = {config: text, ".github/actions/s/action.yml": "runs:\n  steps:\n    - run: node ci/setup.js\n",
             "ci/jobs.yml": "j:\n  script: perl ci/p.pl\n", "Makefile": "test:\n\t@./build.sh\n",
             "scripts/ci.sh": "#!/bin/sh\n. \"$(dirname \"$0\")/lib.sh\"\nsh scripts/lib.sh\n"}
    for rel, body in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    found = ci_run_files(tmp_path)
    assert run in found, found


def test_files_ci_only_reads_or_names_are_not_run(tmp_path):
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "ci.yml").write_text(
        "on: {push: {paths: ['src/app.py']}}\njobs:\n  build:\n    steps:\n"
        "      - uses: actions/setup-python@v5\n        with: {cache-dependency-path: requirements.txt}\n"
        "      - run: |\n          pip install -r requirements.txt\n          pytest tests/test_app.py\n"
        "          echo docs/index.md\n          python -c 'import src.app'\n"
        "      - uses: actions/upload-artifact@v4\n        with: {path: dist/app.tar.gz}\n")
    assert ci_run_files(tmp_path) == {}


def test_the_pull_request_examples_give_secrets_to_an_installed_mesh_alone_and_never_to_a_fork():
    """Issue 45, item 6: the examples for pull request events, the safe way."""
    github = yaml.safe_load((EXAMPLES / "github-pull-requests.yml").read_text())
    events = github.get("on", github.get(True))  # YAML 1.1 reads the key `on` as true
    assert "pull_request" in events and "pull_request_target" not in events
    check, merge = github["jobs"]["close-on-check"], github["jobs"]["close-on-merge"]
    assert "head.repo.full_name == github.repository" in check["if"]  # never for a fork
    for job in (check, merge):
        steps = job["steps"]
        secret = [s for s in steps if "secrets." in json.dumps(s.get("env") or {})]
        assert len(secret) == 1, secret
        words = shlex.split(secret[0]["run"])
        assert words[0] == "mesh" and commands_run(secret[0]["run"]) == ([], [])
        install = next(i for i, s in enumerate(steps) if "pip install" in s.get("run", ""))
        checkout = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/checkout"))
        assert install < checkout and "==" in steps[install]["run"]
    assert shlex.split(merge["steps"][-1]["run"])[3:5] == ["forge", "sync"]
    gitlab = yaml.safe_load((EXAMPLES / "gitlab-merge-requests.yml").read_text())
    on_check = gitlab["mesh-close-on-check"]
    assert "$CI_MERGE_REQUEST_SOURCE_PROJECT_ID == $CI_PROJECT_ID" in on_check["rules"][0]["if"]
    for job in gitlab.values():
        assert job["environment"]["name"] in ("mesh-ci-close", "mesh-forge-sync")
        ran = [line for line in job["script"] if line.startswith("mesh ")]
        assert len(ran) == 1 and all(commands_run(line) == ([], []) for line in job["script"]
                                     if "pip install" not in line)
        assert "(cd /tmp && python -m pip install --no-input 'beads-mesh==" in "\n".join(job["script"])
