"""``mesh mcp``: the command that serves mesh to agent sessions over the Model Context Protocol.

Kept apart from ``orchestrator.cli.main`` and importing the server (and the MCP SDK) only when it
runs, so ``mesh --help`` stays fast.
"""

from __future__ import annotations

import click

__all__ = ["mcp_command"]

_LOOPBACK = ("127.0.0.1", "::1", "localhost")


@click.command("mcp")
@click.option("--http", is_flag=True, help="Serve Streamable HTTP (default: stdio, what agent CLIs launch).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address --http binds (loopback only: the server has no authentication).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="The port --http binds.")
@click.option("--repo", type=click.Path(file_okay=False), help="The git repository runs land in (default: .).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="Config file runs use (default: mesh.toml, or [tool.mesh] in pyproject.toml).")
@click.pass_context
def mcp_command(ctx: click.Context, http: bool, host: str, port: int, repo, config_file) -> None:
    """Serve mesh over MCP: an agent session creates tasks, starts runs and drains, follows them.

    The tracker is the one other commands use (mesh --db, MESH_DB, tracker.url, or the
    workspace found from --repo). Runs and drains started through it are processes of their
    own: they go on when the session ends. See docs/mcp.md.
    """
    from pathlib import Path

    from orchestrator.mcp_server.server import serve
    from orchestrator.mcp_server.service import MeshService, ServiceError

    if http and host not in _LOOPBACK:
        raise click.BadParameter(f"{host!r} is not a loopback address: mesh mcp has no authentication, so it"
                                 " serves only this machine (127.0.0.1, ::1 or localhost)", param_hint="--host")
    root = ctx.find_root().obj or {}
    service = MeshService(Path(repo or "."), db=root.get("db"), actor=root.get("actor"),
                          config_file=Path(config_file).resolve() if config_file else None)
    try:
        # A server without a tracker would answer every call with the same error: say it once,
        # at start, where an agent CLI shows a server that failed to start.
        with service.tracker():
            pass
    except ServiceError as exc:
        click.echo(f"mesh mcp: {exc}", err=True)
        ctx.exit(4)
        return
    serve(service, http=http, host=host, port=port)
