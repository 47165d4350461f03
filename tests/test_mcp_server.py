"""``mesh mcp`` driven by the official MCP client SDK over stdio and Streamable HTTP: every tool
with good and bad input, the resources, progress notifications, and background jobs that
outlive the session that started them."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.drainkit import BRANCH, git
from tests.mcpkit import call, error, http_server, http_session, mcp_workspace, save_plan, stdio_session


def _jobs(ws) -> list[Path]:
    return sorted((ws.repo / ".mesh" / "jobs").glob("*.json")) if (ws.repo / ".mesh" / "jobs").is_dir() else []


def _count(ws) -> int:
    with ws.tracker() as t:
        return len(t.list(include_closed=True))


def test_every_tool_with_good_and_bad_input_over_stdio(tmp_path):
    ws = mcp_workspace(tmp_path)
    alpha = ws.task("alpha", files={"alpha.txt": "a\n"}, sleep_s=0.1)
    beta = ws.task("beta", after=("alpha",), files={"beta.txt": "b\n"})
    save_plan(ws)

    async def scenario():
        async with stdio_session(ws) as s:
            names = {tool.name for tool in (await s.list_tools()).tools}
            assert names == {"scope", "create_task", "start_run", "start_drain", "status", "stop", "transcript",
                             "report", "usage", "review_requests", "submit_review"}
            # scope: buckets by state; a misspelt label names the closest; no scope names the field.
            view = await call(s, "scope", label="plan:drain")
            assert [t["id"] for t in view["ready"]] == [alpha] and view["branch"] == BRANCH
            assert view["waiting"] == [{"id": beta, "title": "beta", "priority": 2, "blockers": [alpha]}]
            assert "did you mean plan:drain" in await error(s, "scope", label="plan:drian")
            assert "label: give a scope" in await error(s, "scope")

            # create_task: created with its dependencies; a bad parent, dependency or priority
            # creates nothing and names the field.
            before = _count(ws)
            assert "parent: no issue 'dr-nope'" in await error(s, "create_task", title="t", parent="dr-nope")
            wrong = await error(s, "create_task", title="t", dependencies=[alpha, alpha + "x"])
            assert "dependencies[1]" in wrong and f"did you mean {alpha}" in wrong
            assert "priority" in await error(s, "create_task", title="t", priority=9)
            assert "title" in await error(s, "create_task", title="")
            assert _count(ws) == before
            made = await call(s, "create_task", title="gamma", description="the third", acceptance="gamma.txt exists",
                              labels=["plan:drain"], parent=ws.ids["epic"], dependencies=[beta], priority=1)
            assert made["status"] == "open" and made["dependencies"] == [beta] and made["parent"] == ws.ids["epic"]
            with ws.tracker() as t:
                assert [b["id"] for b in t.blockers(made["id"])] == [beta]

            # start_run: an unknown task, one waiting on blockers or a bad worker starts nothing.
            assert f"did you mean {alpha}" in await error(s, "start_run", task=alpha + "z")
            assert f"waits on {alpha}" in await error(s, "start_run", task=beta)
            assert "worker" in await error(s, "start_run", task=alpha, worker="vim")
            assert _jobs(ws) == []
            job = await call(s, "start_run", task=alpha)
            assert job["kind"] == "run" and job["task"] == alpha and job["job"].startswith("run-")

            # status: progress notifications while it waits, then the outcome.
            progress = []

            async def on_progress(value, total, message):
                progress.append((value, message))

            waited = await s.call_tool("status", {"job": job["job"], "wait": True}, progress_callback=on_progress)
            result = waited.structuredContent
            assert not waited.isError and result["state"] == "finished", result
            assert result["outcome"] == {"outcome": "closed", "reason": None, "detail": None}
            assert result["round"] == "outcome" and result["calls"] == 11 and result["checkpoints"] > 5
            assert progress and [v for v, _ in progress] == sorted({v for v, _ in progress})
            assert all(m.startswith("running: ") for _, m in progress)
            assert ws.status("alpha") == "closed"
            assert "did you mean" in await error(s, "status", job=job["job"][:-1])
            assert (await call(s, "stop", job=job["job"]))["stopping"] is False

            # transcript, report, usage.
            shown = await call(s, "transcript", task=alpha)
            assert shown["task"]["status"] == "closed" and "[orch:" not in shown["text"].splitlines()[0]
            assert any(step["kind"] == "vote" for step in shown["runs"][0]["steps"])
            assert "did you mean" in await error(s, "transcript", task=alpha + "q")
            page = Path((await call(s, "report", task=alpha))["path"])
            assert page.parent == ws.repo / ".mesh" / "reports" and "<html" in page.read_text()
            assert "no issue" in await error(s, "report", task="zz-1")
            spent = await call(s, "usage", task=alpha)
            assert spent["total"]["calls"] == 11 and [r["task"] for r in spent["by_task"]] == [alpha]
            assert "since: 'yesterday' is not a time" in await error(s, "usage", since="yesterday")

            # resources: the transcript, the report, the scope's integration branch log.
            text = (await s.read_resource(f"mesh://tasks/{alpha}/transcript")).contents[0].text
            assert text == shown["text"]
            html = (await s.read_resource(f"mesh://tasks/{alpha}/report")).contents[0]
            assert html.mimeType == "text/html" and "<html" in html.text
            log = (await s.read_resource("mesh://scopes/label/plan:drain/log")).contents[0].text
            assert log.startswith(f"{BRANCH} at ") and "alpha" in log
            epic_log = (await s.read_resource(f"mesh://scopes/epic/{ws.ids['epic']}/log")).contents[0].text
            assert epic_log == log

    anyio.run(scenario)
    # The jobs' files stay out of git: .mesh/ ignores itself.
    assert ".mesh" not in git(ws.repo, "status", "--porcelain")


def test_a_drain_started_over_http_is_followed_from_another_session_after_the_first_closed(tmp_path):
    ws = mcp_workspace(tmp_path)
    ws.task("alpha", files={"alpha.txt": "a\n"}, sleep_s=0.2)
    ws.task("beta", after=("alpha",), files={"beta.txt": "b\n"})
    save_plan(ws)

    async def start(url):
        async with http_session(url) as s:
            assert "jobs" in await error(s, "start_drain", label="plan:drain", jobs=0)
            assert "not both" in await error(s, "start_drain", label="plan:drain", parent=ws.ids["epic"])
            return await call(s, "start_drain", label="plan:drain", jobs=2)

    with http_server(ws) as url:
        job = anyio.run(start, url)
    # The session, and the whole server that started the drain, are gone; the drain is not.

    async def follow():
        async with stdio_session(ws) as s:
            return await call(s, "status", job=job["job"], wait=True)

    result = anyio.run(follow)
    assert result["state"] == "finished"
    assert result["outcome"]["closed"] == [ws.ids["alpha"], ws.ids["beta"]]
    assert [t["state"] for t in result["tasks"]] == ["closed", "closed"]
    assert ws.landed_tasks() == [ws.ids["alpha"], ws.ids["beta"]]


def test_stop_a_drain_starts_no_new_task(tmp_path):
    ws = mcp_workspace(tmp_path)
    first = ws.task("first", files={"first.txt": "1\n"}, sleep_s=0.3, priority=1)
    second = ws.task("second", files={"second.txt": "2\n"})
    save_plan(ws)

    async def scenario():
        async with stdio_session(ws) as s:
            job = await call(s, "start_drain", label="plan:drain", jobs=1)
            while not (await call(s, "status", job=job["job"]))["checkpoints"]:
                await anyio.sleep(0.1)
            stopped = await call(s, "stop", job=job["job"])
            assert stopped["stopping"] and "no new task" in stopped["note"]
            return await call(s, "status", job=job["job"], wait=True)

    result = anyio.run(scenario)
    assert result["state"] == "finished" and result["stop_requested"]
    assert [t["id"] for t in result["tasks"]] == [first] and result["outcome"]["closed"] == [first]
    assert ws.status("first") == "closed" and ws.status("second") == "open"
    assert second not in ws.landed_tasks()


def test_stop_a_run_after_its_next_checkpoint_then_resume_it(tmp_path):
    ws = mcp_workspace(tmp_path)
    task = ws.task("slow", files={"slow.txt": "s\n"}, sleep_s=0.3)
    save_plan(ws)

    async def scenario():
        async with stdio_session(ws) as s:
            job = await call(s, "start_run", task=task)
            while not (await call(s, "status", job=job["job"]))["checkpoints"]:
                await anyio.sleep(0.1)
            assert "next checkpoint" in (await call(s, "stop", job=job["job"]))["note"]
            stopped = await call(s, "status", job=job["job"], wait=True)
            again = await call(s, "start_run", task=task)
            return stopped, await call(s, "status", job=again["job"], wait=True)

    stopped, resumed = anyio.run(scenario)
    assert stopped["state"] == "stopped" and stopped["outcome"]["reason"] == "stopped", stopped
    assert f"continue with: mesh resume {task}" in stopped["outcome"]["detail"]
    assert resumed["state"] == "finished" and resumed["outcome"]["outcome"] == "closed"
    # One run, resumed from its checkpoints: no step written twice, no worker asked twice.
    checkpoints = ws.checkpoints("slow")
    assert len({cp.run_id for cp in checkpoints}) == 1
    steps = [tuple(cp.payload["step"]) for cp in checkpoints]
    assert len(steps) == len(set(steps))
    with ws.tracker() as t:
        from orchestrator.ledger.calls import calls_for

        assert len(calls_for(t, task_id=task)) == 11


def test_http_binds_loopback_only(tmp_path):
    res = CliRunner().invoke(cli, ["mcp", "--http", "--host", "0.0.0.0"])
    assert res.exit_code == 2 and "not a loopback address" in res.output


def test_without_a_tracker_the_server_does_not_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESH_DB", raising=False)
    res = CliRunner().invoke(cli, ["mcp"])
    assert res.exit_code == 4 and "mesh mcp: no tracker found" in res.output


def test_mesh_help_does_not_import_the_sdk():
    import subprocess
    import sys

    code = ("import json, sys; from orchestrator.cli.main import cli;"
            " print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_a_stop_sent_the_moment_a_job_starts_is_a_clean_stop(tmp_path):
    """The stop waits until the new process has its handlers (it says so through the job's
    ready file): never a KeyboardInterrupt traceback from a process still starting."""
    ws = mcp_workspace(tmp_path)
    task = ws.task("at once", files={"once.txt": "o\n"}, sleep_s=0.2)
    save_plan(ws)

    async def scenario():
        async with stdio_session(ws) as s:
            job = await call(s, "start_run", task=task)
            await call(s, "stop", job=job["job"])
            return await call(s, "status", job=job["job"], wait=True)

    stopped = anyio.run(scenario)
    assert stopped["state"] == "stopped", stopped
    assert not any("Traceback" in line for line in stopped["log_tail"])
    log = next((ws.repo / ".mesh" / "jobs").glob("run-*.log")).read_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log
