"""Issue 48, item 2: each tree's tests run once across tasks. The base check, a task's validation,
its comparison with its base and the next task's base check read the per-test results of a tree
already run with the same (or a covering) command and view, and say so, instead of running them
again. Counted by recording every command that really runs, and on which tree."""

from __future__ import annotations

import subprocess
import threading

from orchestrator.sandbox import validation
from tests.runkit import TASK, VALIDATE, happy_script, make_workspace, r, synthesis
from tests.test_pull_requests import NOTES_PATCH

SUBSET = "python3 -m unittest tests.test_temperature"


def _recording(monkeypatch) -> list[tuple[str, str]]:
    """Every command run for real, with the tree it ran on: (tree, command)."""
    runs: list[tuple[str, str]] = []
    where = threading.local()
    real_validation, real_run = validation.run_validation, validation._check_and_run

    def run_validation(commands, *, cwd, commit=None, **kwargs):
        tree = subprocess.run(["git", "rev-parse", f"{commit or 'HEAD'}^{{tree}}"], cwd=cwd, capture_output=True,
                              text=True).stdout.strip()
        where.tree = tree
        return real_validation(commands, cwd=cwd, commit=commit, **kwargs)

    def check_and_run(command, *args, **kwargs):
        if not kwargs.get("test_id"):  # a flaky test run alone is not the tree's run
            runs.append((getattr(where, "tree", "?"), command))
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(validation, "run_validation", run_validation)
    monkeypatch.setattr(validation, "_check_and_run", check_and_run)
    return runs


def test_two_tasks_landed_one_on_the_other_run_no_trees_tests_twice(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    text = (ws.repo / "mesh.toml").read_text().replace(f'allow = ["{VALIDATE}"', f'allow = ["{VALIDATE}", "{SUBSET}"')
    (ws.repo / "mesh.toml").write_text(text)
    ws.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "subset allowed")
    runs = _recording(monkeypatch)
    first = happy_script()
    first["synthesizer"][0] = r("synthesis", synthesis(commands=[SUBSET]))
    code, report, res = ws.run(first, "--onto", "mesh/land/demo")
    assert code == 0 and report["outcome"] == "closed", res.output
    second = happy_script()
    second["synthesizer"][0] = r("synthesis", synthesis(NOTES_PATCH, commands=[SUBSET]))
    code, report, res = ws.run(second, "--onto", "mesh/land/demo")
    assert code == 0 and report["outcome"] == "closed", res.output
    # Three trees (the base, each task's), each run once by its covering command; the
    # subset is never run for itself, on a task's tree or as its base's.
    trees = [tree for tree, _ in runs]
    assert len(trees) == len(set(trees)) == 3, runs
    assert all(command == VALIDATE for _, command in runs), runs
    # Each says so: the subset judged from the check's run (its tests counted once), the base's
    # results of the subset read from the base check's run.
    [proof] = [cp for cp in ws.checkpoints(TASK) if cp.kind == "proof"]
    assert "5 test(s) ran" in proof.summary and "1 command(s) judged from another's run" in proof.summary
    assert "read from its earlier run, not run again" in proof.summary, proof.summary
    assert proof.payload["artifact"]["base_tests"]["read_from"] == {SUBSET: VALIDATE}
    judged = proof.payload["artifact"]["results"][0]
    assert judged["command"] == SUBSET and judged["judged_from"] == VALIDATE and judged["passed"]


def test_a_landing_of_a_tree_that_passed_its_commands_before_runs_nothing(tmp_path, monkeypatch):
    """A landing's re-validation (a retry after a lost compare-and-set, another runner landing the
    same tree) reads the results of the tree's earlier pass with the same commands and view."""
    from orchestrator.config import load_config
    from orchestrator.landing.lander import Lander
    from tests.drainkit import git, make_drain_workspace

    ws = make_drain_workspace(tmp_path)
    config = load_config(ws.repo, ws.config)
    lander = Lander(ws.repo, "mesh/land/x", config)
    runs = []
    real = validation.run_configured
    monkeypatch.setattr(validation, "run_configured", lambda commands, *a, **k: runs.append(commands) or real(
        commands, *a, **k))
    head = git(ws.repo, "rev-parse", "HEAD").strip()
    first, passed = lander.validate(head, ["python3 check.py"])
    assert passed and len(runs) == 1 and not first[0].get("reused")
    again, passed = lander.validate(head, ["python3 check.py"])
    assert passed and len(runs) == 1 and again[0]["reused"] and "not run again" in again[0]["stderr_tail"]
    # Other commands, or another tree, run.
    lander.validate(head, ["python3 check.py", "python3 check.py --again"])
    assert len(runs) == 2
