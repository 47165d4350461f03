"""``mesh tracker status`` counts issues, not the agent and role records mesh's runs keep
(issue 35, item 7): a real run of the demo task (replay workers, real git, real tracker file),
then the counts compared with what ``mesh tracker list`` shows."""

from __future__ import annotations

import json

from tests.runkit import TASK, happy_script, make_workspace


def test_status_counts_what_list_shows_after_a_run(tmp_path):
    ws = make_workspace(tmp_path)
    code, report, res = ws.run(happy_script(), "--ids", TASK)
    assert code == 0 and report["outcome"] == "closed", res.output
    infra = [i for kind in ("agent", "role")
             for i in json.loads(ws.mesh("tracker", "list", "--type", kind, "--json").stdout)]
    assert len(infra) == 12 and all(i["status"] == "open" for i in infra)  # six mesh-<role> agents, six roles
    issues = json.loads(ws.mesh("tracker", "list", "--all", "--include-gates", "--json").stdout)
    assert not {i["issue_type"] for i in issues} & {"agent", "role"}
    summary = json.loads(ws.mesh("tracker", "status", "--json").stdout)["summary"]
    assert summary["total_issues"] == len(issues) == 6
    assert summary["open_issues"] == sum(i["status"] == "open" for i in issues) == 5
    assert summary["closed_issues"] == 1
    text = ws.mesh("tracker", "status").stdout
    assert "Open issues:                  5" in text and "Total issues:                 6" in text
