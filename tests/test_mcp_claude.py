"""The real Claude Code CLI using ``mesh mcp`` as its MCP server.

Set up with the line docs/mcp.md gives (``claude mcp add mesh -- mesh mcp ...``), Claude Code
runs non-interactively against the fake Messages API on 127.0.0.1 (``tests/fake_anthropic.py``),
which plays the model: it answers with ``tool_use`` blocks for mesh's ``create_task``,
``start_run`` and ``status`` (wait=true), reading each tool's result from the conversation
Claude Code sends back. The task then really runs, with the scripted command worker, and closes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.fake_anthropic import FakeAnthropic, Recorded, Reply, message, tool_use
from tests.mcpkit import mcp_workspace, save_plan
from tests.test_presets_claude import CLAUDE_BIN, claude_env  # noqa: F401 (the fixture)

TOOLS = ["mcp__mesh__create_task", "mcp__mesh__start_run", "mcp__mesh__status"]


def _results(request: Recorded) -> list[str]:
    """The text of every tool result in the conversation, oldest first."""
    out = []
    for msg in (request.body or {}).get("messages", []):
        content = msg.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                inner = block.get("content")
                out.append(inner if isinstance(inner, str) else "".join(b.get("text", "") for b in inner or []))
    return out


class PlaysTheModel:
    """The fake model's side of the session: create the task, start its run, wait on it."""

    def __init__(self, ws):
        self.ws = ws
        self.task: str | None = None
        self.job: str | None = None

    def __call__(self, request: Recorded) -> Reply:
        names = {tool.get("name") for tool in (request.body or {}).get("tools") or []}
        if not set(TOOLS) <= names:
            return message("ok")  # Claude Code's side requests (titles, checks): no tools of ours
        results = _results(request)
        if not results:
            return tool_use("mcp__mesh__create_task", {
                "title": "Add gamma.txt", "description": "a file named gamma.txt", "acceptance": "gamma.txt exists",
                "labels": ["plan:drain"]}, tool_id="toolu_create")
        if len(results) == 1:
            self.task = re.search(r'"id":\s*"([^"]+)"', results[0]).group(1)
            self.ws.plan[self.task] = {"files": {"gamma.txt": "gamma\n"}}
            save_plan(self.ws)  # the scripted worker's answers for the new task
            return tool_use("mcp__mesh__start_run", {"task": self.task}, tool_id="toolu_run")
        if len(results) == 2:
            self.job = re.search(r'"job":\s*"([^"]+)"', results[1]).group(1)
            return tool_use("mcp__mesh__status", {"job": self.job, "wait": True}, tool_id="toolu_status")
        return message("mesh closed the task.")


def test_claude_code_delegates_a_task_to_mesh(claude_env, tmp_path):  # noqa: F811
    ws = mcp_workspace(tmp_path)
    ws.task("base", files={"base.txt": "b\n"})
    save_plan(ws)
    # `mesh` as an agent CLI finds it: on PATH (this venv's), with the project's tracker named.
    env = {**os.environ, "PATH": f"{CLAUDE_BIN}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}"
                                 f"{os.environ['PATH']}"}
    env.pop("MESH_WORKER", None)
    # Claude Code's print mode may ask the model before its MCP servers are connected (a non-blocking
    # connect): on a loaded machine `mesh mcp` was not up yet and the model was asked without mesh's
    # tools. MCP_CONNECTION_NONBLOCKING=false makes it wait, up to MCP_TIMEOUT (60 s, the most it honours).
    env["MCP_CONNECTION_NONBLOCKING"] = "false"
    env["MCP_TIMEOUT"] = "60000"
    added = subprocess.run(["claude", "mcp", "add", "--scope", "user", "mesh", "--", "mesh", "--db", str(ws.db),
                            "mcp", "--repo", str(ws.repo), "--config", str(ws.config)],
                           env=env, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    model = PlaysTheModel(ws)
    with FakeAnthropic(model) as fake:
        done = subprocess.run(["claude", "-p", "Plan gamma.txt and hand it to mesh.", "--output-format", "json",
                               "--allowedTools", ",".join(TOOLS), "--model", "claude-sonnet-4-6"],
                              env={**env, "ANTHROPIC_BASE_URL": fake.url}, cwd=ws.repo, capture_output=True,
                              text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"] == "mesh closed the task."
    # Claude Code called each of mesh's tools, and each answered without an error.
    turns = [r for r in fake.message_requests if set(TOOLS) <= {t.get("name") for t in r.body.get("tools") or []}]
    final = _results(turns[-1])
    assert len(final) == 3 and model.task and model.job
    status = json.loads(final[2])
    assert status["state"] == "finished" and status["outcome"]["outcome"] == "closed", status
    with ws.tracker() as t:
        task = t.get(model.task)
    assert task["status"] == "closed" and task["labels"] == ["plan:drain"]
    assert "gamma.txt" in ws.tree("mesh/land/plan-drain")
