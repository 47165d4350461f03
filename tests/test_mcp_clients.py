"""The `mesh mcp` set-up lines of docs/mcp.md, with the real Codex and OpenCode CLIs.

Both CLIs come from the npm registry (``make agent-clis``; each test skips, saying so, without
its CLI). OpenCode starts the server its ``opencode.json`` names and reports it connected;
Codex writes the ``[mcp_servers.mesh]`` table its ``codex mcp add`` line gives, reads
``tool_timeout_sec`` back, and the command line it stored is then started by the official MCP
client SDK, which finds mesh's tools. Homes and config folders are the test's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.mcpkit import mcp_workspace

CLIS = Path(sys.executable).parent.parent / "agent-clis" / "node_modules" / ".bin"
MESH = str(Path(sys.executable).parent / "mesh")


def _cli(name: str) -> str:
    path = CLIS / name
    if not path.exists():
        pytest.skip(f"{name} is not installed (make agent-clis installs it from npm)")
    return str(path)


def _home(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_") and k != "MESH_WORKER"}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_STATE_HOME=str(home / ".local/state"))
    return env


def _mesh_command(ws) -> list[str]:
    return [MESH, "--db", str(ws.db), "mcp", "--repo", str(ws.repo), "--config", str(ws.config)]


def test_opencode_starts_mesh_mcp_from_its_project_config_and_connects(tmp_path):
    opencode = _cli("opencode")
    ws = mcp_workspace(tmp_path)
    command = _mesh_command(ws)
    (ws.repo / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "mcp": {"mesh": {"type": "local", "command": command, "enabled": True}},
    }))
    out = subprocess.run([opencode, "mcp", "list"], cwd=ws.repo, env=_home(tmp_path), capture_output=True,
                         text=True, timeout=180)
    shown = out.stdout + out.stderr
    assert "mesh" in shown and "connected" in shown, shown
    assert "failed" not in shown.lower(), shown


def test_codex_stores_the_mcp_add_line_and_its_command_speaks_mcp(tmp_path):
    codex = _cli("codex")
    ws = mcp_workspace(tmp_path)
    env = {**_home(tmp_path), "CODEX_HOME": str(tmp_path / "codex")}
    (tmp_path / "codex").mkdir()
    added = subprocess.run([codex, "mcp", "add", "mesh", "--", *_mesh_command(ws)], env=env, capture_output=True,
                           text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    config_file = tmp_path / "codex" / "config.toml"
    table = tomllib.loads(config_file.read_text())["mcp_servers"]["mesh"]
    assert [table["command"], *table["args"]] == _mesh_command(ws)
    # The docs' longer timeout for status(wait=true), read back by Codex.
    config_file.write_text(config_file.read_text() + "tool_timeout_sec = 600\n")
    got = subprocess.run([codex, "mcp", "get", "mesh", "--json"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    stored = json.loads(got.stdout)
    assert stored["tool_timeout_sec"] == 600 and stored["transport"]["command"] == MESH

    async def handshake() -> set[str]:
        params = StdioServerParameters(command=stored["transport"]["command"], args=stored["transport"]["args"],
                                       env={k: v for k, v in os.environ.items() if k != "MESH_WORKER"},
                                       cwd=str(ws.repo))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return {tool.name for tool in (await session.list_tools()).tools}

    assert {"start_run", "status", "submit_review"} <= anyio.run(handshake)
