"""Kit of the ``mesh mcp`` tests: a drain workspace whose mesh.toml names the scripted command
worker, and real MCP client sessions (the official SDK) to ``mesh mcp`` over stdio or HTTP.

The server is the real command, ``python -m orchestrator.cli.main mcp``, in a process of its own;
runs and drains it starts are processes of their own too, with the scripted worker
(``tests/drain_worker.py``), so everything finishes offline and fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.drainkit import DrainWorkspace, make_drain_workspace

ROOT = Path(__file__).resolve().parents[1]


def mcp_workspace(tmp_path: Path, *, extra: str = "", sandbox: str = "none") -> DrainWorkspace:
    """A drain workspace whose config makes the scripted worker every role's (the plan is
    filled in later by ``ws.task``: the worker reads it from plan.json at each call)."""
    ws = make_drain_workspace(tmp_path, sandbox=sandbox)
    (ws.root / "plan.json").write_text("{}")
    worker = ws.worker_cmd()
    ws.config.write_text(f"backend = \"command\"\nworker_cmd = {json.dumps(worker)}\n{extra}\n"
                         + ws.config.read_text())
    return ws


def save_plan(ws: DrainWorkspace) -> None:
    """Write the workspace's worker plan (after tasks were added)."""
    (ws.root / "plan.json").write_text(json.dumps(ws.plan))


def server_argv(ws: DrainWorkspace, *extra: str) -> list[str]:
    return ["-m", "orchestrator.cli.main", "--db", str(ws.db), "--actor", "tester", "mcp", "--repo", str(ws.repo),
            "--config", str(ws.config), *extra]


def server_env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MESH_WORKER"}
    env["PYTHONPATH"] = str(ROOT)
    env.update(more)
    return env


@contextlib.asynccontextmanager
async def stdio_session(ws: DrainWorkspace, **env: str) -> AsyncIterator[ClientSession]:
    """A client session to ``mesh mcp`` over stdio, initialized."""
    params = StdioServerParameters(command=sys.executable, args=server_argv(ws), env=server_env(**env),
                                   cwd=str(ws.repo))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def http_server(ws: DrainWorkspace):
    """``mesh mcp --http`` on a free loopback port; yields its URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, *server_argv(ws, "--http", "--port", str(port))],
                               env=server_env(), cwd=str(ws.repo), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mesh mcp --http did not start: {process.stderr.read().decode()}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stderr.close()


@contextlib.asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    """A client session to ``mesh mcp --http``, initialized."""
    async with streamable_http_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; AssertionError with the message when it is a tool error."""
    result = await session.call_tool(tool, arguments)
    assert not result.isError, result.content[0].text
    return result.structuredContent


async def error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """A tool error's text; AssertionError when the call succeeded."""
    result = await session.call_tool(tool, arguments)
    assert result.isError, f"{tool} succeeded: {result.structuredContent}"
    return result.content[0].text
