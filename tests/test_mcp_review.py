"""A person reviews through an agent session: ``mesh mcp``'s review_requests and submit_review,
driven by the official MCP client SDK, on a real run that waits for a person (reviewer human)."""

from __future__ import annotations

import time

import anyio

from orchestrator.protocol.checkpoint import load_checkpoints
from tests.mcpkit import call, error, mcp_workspace, save_plan, stdio_session


def test_a_session_reviews_a_waiting_run_and_it_closes(tmp_path):
    ws = mcp_workspace(tmp_path, extra="human_review_poll_s = 0.2")
    alpha = ws.task("alpha", files={"alpha.txt": "first line\nsecond line\n"})
    save_plan(ws)

    async def scenario():
        async with stdio_session(ws) as s:
            names = {tool.name for tool in (await s.list_tools()).tools}
            assert {"review_requests", "submit_review"} <= names
            assert "no run waiting" in await error(s, "submit_review", task=alpha, decision="approve", summary="ok")
            job = (await call(s, "start_run", task=alpha, reviewer="human"))["job"]
            deadline = time.monotonic() + 180
            while not (waits := (await call(s, "review_requests", task=alpha))["result"]):
                assert time.monotonic() < deadline, "the run never asked for a review"
                await anyio.sleep(0.3)
            [wait] = waits
            assert wait["cycle"] == 1 and "+second line" in wait["diff"]
            # Refused reviews name the field and write nothing.
            bad_line = await error(s, "submit_review", task=alpha, decision="request_changes", summary="no",
                                   comments=[{"path": "alpha.txt", "line": 9, "text": "not there"}])
            assert "comments[0].line" in bad_line
            assert "comments" in await error(s, "submit_review", task=alpha, decision="request_changes",
                                             summary="no")
            assert "severity" in await error(s, "submit_review", task=alpha, decision="approve", summary="ok",
                                             comments=[{"path": "alpha.txt", "line": 2, "text": "x",
                                                        "severity": "Huge"}])
            done = await call(s, "submit_review", task=alpha, decision="approve", summary="Reads well.",
                              comments=[{"path": "alpha.txt", "line": 2, "text": "a nit", "severity": "Low"}],
                              reviewer="Ada")
            assert done["decision"] == "approve" and done["findings"][0]["label"] == "CAN_IGNORE"
            assert "already reviewed" in await error(s, "submit_review", task=alpha, decision="approve",
                                                     summary="again")
            final = await call(s, "status", job=job, wait=True, timeout_s=300)
            assert final["outcome"]["outcome"] == "closed", final

    anyio.run(scenario)
    with ws.tracker() as t:
        assert t.get(alpha)["status"] == "closed"
        reviews = [cp for cp in load_checkpoints(t, alpha) if cp.kind == "review"]
    assert [cp.payload["reviewer"] for cp in reviews] == ["person/Ada"]
