"""The nested-run guard: a process mesh started as a worker cannot start a mesh run or drain,
by the command line or through ``mesh mcp``, unless ``allow_nested_runs = true``.

The worker is real: the command backend starts ``tests/nested_worker.py``, which runs
``mesh run`` from inside itself as an agent CLI would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.drainkit import LABEL, make_drain_workspace
from tests.mcpkit import error, mcp_workspace, save_plan, stdio_session

NESTED = Path(__file__).with_name("nested_worker.py")


def _run_with_nesting_worker(tmp_path: Path, extra_config: str = "") -> tuple[dict, object, object]:
    ws = make_drain_workspace(tmp_path, extra_config=extra_config)
    ws.task("outer", files={"outer.txt": "o\n"})
    plan, out = ws.root / "plan.json", ws.root / "nested.json"
    plan.write_text(json.dumps(ws.plan))
    if extra_config:  # a top-level key: above the [validation] table
        ws.config.write_text(extra_config + "\n" + ws.config.read_text().replace(extra_config, ""))
    worker = f"{sys.executable} {NESTED} {plan} {out} {ws.db} {ws.repo} {ws.config}"
    res = CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", "run", "--label", LABEL, "--backend",
                                   "command", "--worker-cmd", worker, "--repo", str(ws.repo), "--config",
                                   str(ws.config), "--json"], catch_exceptions=False)
    return json.loads(out.read_text()), res, ws


def test_a_worker_that_runs_mesh_is_refused(tmp_path):
    nested, outer, ws = _run_with_nesting_worker(tmp_path)
    assert nested["code"] == 2 and nested["marker"]
    error = json.loads(nested["stderr"].strip().splitlines()[-1])
    marker = nested["marker"]
    assert error["error"].startswith(f"refused: this process runs inside a mesh worker (MESH_WORKER={marker})")
    assert "allow_nested_runs = true" in error["error"]
    # The marker is the outer run's id, and the outer run went on to close its task.
    report = json.loads(outer.stdout)
    assert nested["marker"] == report["orch_run_id"] and report["outcome"] == "closed"
    assert ws.status("outer") == "closed"


def test_allow_nested_runs_lets_it_start(tmp_path):
    nested, outer, _ = _run_with_nesting_worker(tmp_path, extra_config="allow_nested_runs = true")
    # Not refused: the inner run found the scope's only task taken by the outer run (nothing runnable).
    assert "refused" not in nested["stderr"] and nested["code"] == 0, nested
    assert json.loads(outer.stdout)["outcome"] == "closed"


@pytest.mark.parametrize("command", ["drain", "resume"])
def test_drain_and_resume_refuse_inside_a_worker(tmp_path, command):
    ws = make_drain_workspace(tmp_path)
    ws.task("t", files={"t.txt": "t\n"})
    res = CliRunner().invoke(cli, ["--db", str(ws.db), command, "--label", LABEL, "--repo", str(ws.repo), "--config",
                                   str(ws.config)], env={"MESH_WORKER": "run-outer"})
    assert res.exit_code == 2 and "refused: this process runs inside a mesh worker" in res.output
    assert ws.status("t") == "open"


def test_mcp_start_tools_refuse_inside_a_worker(tmp_path):
    ws = mcp_workspace(tmp_path)
    task = ws.task("t", files={"t.txt": "t\n"})
    save_plan(ws)

    async def scenario():
        async with stdio_session(ws, MESH_WORKER="run-outer") as s:
            return (await error(s, "start_run", task=task), await error(s, "start_drain", label=LABEL))

    for message in anyio.run(scenario):
        assert "refused: this process runs inside a mesh worker (MESH_WORKER=run-outer)" in message
    assert not (ws.repo / ".mesh" / "jobs").exists() and ws.status("t") == "open"
