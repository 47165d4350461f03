"""Runnable types (config ``runnable_types``): a bug in a scope that runs tasks only is named,
with the key that would run it; with the key set, the bug runs and lands. Real drains and runs
(the scripted command worker), a real tracker and real git."""

from __future__ import annotations

import json

from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.protocol.scope import Scope, scope_tasks
from tests.drainkit import LABEL, git, make_drain_workspace


def test_a_bug_in_scope_is_named_with_the_key_that_runs_it_then_runs_once_the_key_says_so(tmp_path):
    ws = make_drain_workspace(tmp_path)
    with ws.tracker() as t:
        bug = t.create("500 on /cart", issue_type="bug", labels=[LABEL], acceptance_criteria="fixed")["id"]
        t.create("Plan", issue_type="epic", labels=[LABEL])
    ws.plan[bug] = {"files": {"cart.txt": "fixed\n"}}
    # mesh run: nothing runnable, the bug named with the key (exit 0, as today).
    args = ["--db", str(ws.db), "--actor", "tester", "run", "--label", LABEL, "--backend", "command",
            "--worker-cmd", ws.worker_cmd(), "--repo", str(ws.repo), "--config", str(ws.config)]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == f"no runnable task in scope (label {LABEL}): the scope holds no task"
    assert ('  not run: 1 issue(s) of another type in scope; runnable_types is ["task"]. To run them too, set in'
            ' mesh.toml: runnable_types = ["task", "bug"]') in lines
    assert f"  {bug}  bug: 500 on /cart" in lines
    report = json.loads(CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False).stdout)
    assert report["idle"]["others"] == [{"id": bug, "title": "500 on /cart", "type": "bug"}]
    # mesh drain says the same.
    code, events, res = ws.drain()
    assert code == 0 and events[-1]["stop_reason"] == "empty_scope" and events[-1]["others"][0]["id"] == bug
    text = CliRunner().invoke(cli, [a for a in ws.drain_args() if a != "--json"], catch_exceptions=False).output
    assert "no issue of type task in scope" in text and 'runnable_types = ["task", "bug"]' in text
    # With the key, the bug runs and lands; the epic never does.
    ws.config.write_text('runnable_types = ["task", "bug"]\n' + ws.config.read_text())
    code, events, res = ws.drain()
    assert code == 0, res.output
    assert events[-1]["closed"] == [bug] and ws.tree()["cart.txt"] == "fixed\n"
    with ws.tracker() as t:
        assert [i["id"] for i in scope_tasks(t, Scope("label", plan_label=LABEL, types=("task", "bug")))] == [bug]
        assert scope_tasks(t, Scope("label", plan_label=LABEL)) == []
    assert git(ws.repo, "log", "-1", "--format=%s", "mesh/land/plan-drain").strip() == "500 on /cart"


def test_a_misspelt_type_is_a_config_error():
    import pytest
    from pydantic import ValidationError

    from orchestrator.config import MeshConfig

    with pytest.raises(ValidationError):
        MeshConfig.model_validate({"runnable_types": ["bugs"]})
    assert MeshConfig().runnable_types == ["task"]
