"""Benchmark: what a ``status`` call costs through ``mesh mcp`` over stdio, against the same
query in-process.

A drain workspace (``tests/mcpkit.py``) with three tasks is drained once by a job that
``mesh mcp`` starts; then its ``status`` is asked N times through one stdio client session
(the official MCP client SDK: JSON-RPC over pipes, the tool's input validation, a worker
thread, structured output) and N times by calling ``MeshService.status`` in this process.
Both read the same tracker, job record and output files each time. A third figure calls the
tool through the server object in this process (input validation, worker thread, structured
output; no transport, no client): the rest of the difference is the pipes, JSON-RPC and the
Python client SDK (which checks every structured result against the tool's output schema).

Usage: python bench/mcp_status.py [--calls N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This file is named like the SDK's package: its folder must not come first on the path.
sys.path[0] = str(ROOT)

import anyio  # noqa: E402

from orchestrator.mcp_server.server import build_server  # noqa: E402
from orchestrator.mcp_server.service import MeshService  # noqa: E402
from tests.mcpkit import call, mcp_workspace, save_plan, stdio_session  # noqa: E402


def figures(times: list[float]) -> tuple[float, float]:
    """(median, 95th percentile) in milliseconds."""
    ordered = sorted(times)
    return statistics.median(ordered) * 1000, ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mesh-bench-mcp-") as tmp:
        ws = mcp_workspace(Path(tmp))
        for name in ("alpha", "beta", "gamma"):
            ws.task(name, files={f"{name}.txt": f"{name}\n"})
        save_plan(ws)

        async def through_stdio() -> tuple[str, list[float]]:
            async with stdio_session(ws) as session:
                job = (await call(session, "start_drain", label="plan:drain", jobs=3))["job"]
                done = await call(session, "status", job=job, wait=True)
                assert done["state"] == "finished", done
                times = []
                for _ in range(args.calls):
                    started = time.perf_counter()
                    await call(session, "status", job=job)
                    times.append(time.perf_counter() - started)
                return job, times

        job, stdio_times = anyio.run(through_stdio)
        service = MeshService(ws.repo, db=str(ws.db), actor="bench", config_file=ws.config)
        local_times = []
        for _ in range(args.calls):
            started = time.perf_counter()
            service.status(job)
            local_times.append(time.perf_counter() - started)
        server = build_server(service)

        async def tool_layer() -> list[float]:
            times = []
            for _ in range(args.calls):
                started = time.perf_counter()
                await server.call_tool("status", {"job": job})
                times.append(time.perf_counter() - started)
            return times

        tool_times = anyio.run(tool_layer)
    (sm, sp), (lm, lp), (tm, tp) = figures(stdio_times), figures(local_times), figures(tool_times)
    print(f"status of a finished 3-task drain, {args.calls} calls each")
    print(f"  through mesh mcp (stdio): median {sm:.2f} ms, p95 {sp:.2f} ms")
    print(f"  the tool, no transport:   median {tm:.2f} ms, p95 {tp:.2f} ms")
    print(f"  in-process:               median {lm:.2f} ms, p95 {lp:.2f} ms")
    print(f"  ratio: median {sm / lm:.2f}x, p95 {sp / lp:.2f}x; overhead {sm - lm:.2f} ms a call (median)")


if __name__ == "__main__":
    main()
