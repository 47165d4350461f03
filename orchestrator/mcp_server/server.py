"""The ``mesh mcp`` server: FastMCP from the official SDK, over stdio or Streamable HTTP.

stdio is what agent CLIs launch (``claude mcp add mesh -- mesh mcp``); Streamable HTTP serves
several sessions from one process, bound to 127.0.0.1 by default with the SDK's DNS-rebinding
protection (only loopback Host and Origin headers are accepted).
"""

from __future__ import annotations

import sys

from mcp.server.fastmcp import FastMCP

from orchestrator.mcp_server.service import MeshService
from orchestrator.mcp_server.tools import register

__all__ = ["build_server", "serve"]

INSTRUCTIONS = """\
mesh takes tasks of this project's issue tracker from ready to closed with a team of model
roles (proposer, critics, synthesizer, voters, reviewer), validating each patch and landing
approved work on the scope's integration branch (mesh/land/<scope>).
Plan work as tasks (create_task, with a plan label such as plan:NAME), look at a scope
(scope), hand one task (start_run) or a whole scope (start_drain) to mesh: they return a job
id at once and go on in the background. Follow a job with status (wait=true sends progress),
stop it with stop, read what happened with transcript, report and usage."""


def build_server(service: MeshService, *, host: str = "127.0.0.1", port: int = 8000) -> FastMCP:
    """The server with every tool and resource of ``service``."""
    server = FastMCP("mesh", instructions=INSTRUCTIONS, host=host, port=port, log_level="WARNING")
    register(server, service)
    return server


def serve(service: MeshService, *, http: bool = False, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until the client goes (stdio) or the process is interrupted (HTTP)."""
    server = build_server(service, host=host, port=port)
    if http:
        print(f"mesh mcp: Streamable HTTP on http://{host}:{port}/mcp (repository {service.repo})", file=sys.stderr,
              flush=True)
        server.run("streamable-http")
    else:
        server.run("stdio")
