"""A command worker that never answers: the profile's ``no_response``, with the timeout as the
detail, and no more calls than the profile allows before the task is blocked."""

from __future__ import annotations

import json
import sys
import textwrap

from orchestrator.ledger.calls import calls_for
from tests.runkit import TASK, make_workspace


def test_a_hanging_worker_is_no_response_and_blocks_after_the_profile_s_calls(tmp_path):
    ws = make_workspace(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    worker = tmp_path / "hang.py"
    worker.write_text(textwrap.dedent(f"""
        import os, sys, time
        sys.stdin.read()
        with open({str(home / "starts.log")!r}, "a") as log:
            log.write(os.environ["MESH_ROLE"] + " " + os.environ["MESH_ATTEMPT"] + "\\n")
        time.sleep(120)
    """))
    config = tmp_path / "mesh.toml"
    # The worker logs its starts into the HOME it is given: the real one, knowingly.
    config.write_text('backend = "command"\nworker_timeout_s = 1\nworker_home = "real"\n'
                      + (ws.repo / "mesh.toml").read_text())
    res = ws.mesh("run", "--label", "plan:demo", "--worker-cmd", f"{sys.executable} {worker}", "--repo",
                  str(ws.repo), "--config", str(config), "--json", env={"HOME": str(home)})
    assert res.exit_code == 3, res.output
    report = json.loads(res.stdout)
    assert (report["outcome"], report["block_reason"]) == ("blocked", "no_response")
    # The profile: one retry of the proposer, the switch to the 3-role fallback, where the
    # proposer is asked once more and retried once. Four calls, then the block.
    assert report["consensus"]["mode"] == "fallback", res.output
    with ws.tracker() as t:
        errors = [c["error"] for c in calls_for(t, task_id=TASK)]
    assert (home / "starts.log").exists(), errors
    assert (home / "starts.log").read_text().splitlines() == ["proposer 1", "proposer 2", "proposer 1", "proposer 2"]
    with ws.tracker() as t:
        logged = calls_for(t, task_id=TASK)
    assert [c["error"] for c in logged] == [
        "no_response: timeout: the worker ran past 1s (worker_timeout_s) and was killed"] * 4
    assert {c["backend"] for c in logged} == {"command"}
