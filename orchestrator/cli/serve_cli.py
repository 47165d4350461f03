"""``mesh serve``: the live web view of the tracker, where a person follows runs and takes part.

The server (``orchestrator.web``) and its ASGI stack (Starlette, uvicorn) are imported only when
the command runs: ``mesh --help`` and every other command start without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from orchestrator.cli.common import _fail

__all__ = ["serve_command"]


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Any other than 127.0.0.1 needs a token (given or generated).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port (0: any free one).")
@click.option("--token", envvar="MESH_SERVE_TOKEN",
              help="The token every request must carry (env MESH_SERVE_TOKEN; generated when the host needs one).")
@click.option("--read-only", is_flag=True, help="Serve no write action: no review, no retry, no stop.")
@click.option("--open", "open_browser", is_flag=True, help="Open the board in the default browser.")
@click.option("--repo", type=click.Path(file_okay=False), help="The repository (default: the current folder).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="mesh.toml to use.")
@click.pass_context
def serve_command(ctx: click.Context, host: str, port: int, token: str | None, read_only: bool, open_browser: bool,
                  repo: str | None, config_file: str | None) -> None:
    """Serve the live web view of the tracker: board, runs, drains, usage, logs, reviews.

    Pages update as runners (here or on other machines sharing the tracker) claim, run, block,
    close and land tasks. A person can review a run that waits for one (reviewer = "human"),
    retry a blocked task and stop a scope's drains from starting new tasks. Exit 4 when the
    tracker is unavailable, 2 when the address cannot be used.
    """
    import os
    import socket
    from pathlib import Path

    from tracker.errors import WorkspaceError
    from tracker.store import Tracker

    from orchestrator.config import ConfigError, load_config
    from orchestrator.protocol.checkpoint import signing_key
    from orchestrator.web.security import needs_token, new_token
    from orchestrator.workspace import TrackerNotFound, tracker_target

    # Not the runner's opener: the server starts in well under a second without the run machinery.
    root = ctx.find_root().obj or {}
    try:
        config = load_config(Path(repo) if repo else None, Path(config_file) if config_file else None)
        tracker = Tracker.open(tracker_target(root.get("db"), repo, config.tracker.url),
                               actor=root.get("actor") or os.environ.get("MESH_ACTOR") or "mesh")
        tracker.where()
    except ConfigError as exc:
        _fail(ctx, str(exc), 2, False)
        return
    except (TrackerNotFound, WorkspaceError) as exc:
        _fail(ctx, f"tracker unavailable: {exc}", 4, False)
        return
    target, actor = tracker.path, tracker.actor
    tracker.close()
    if needs_token(host) and not token:
        token = new_token()
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)  # from now on a browser's connection waits in the backlog for the server
    except OSError as exc:
        _fail(ctx, f"cannot listen on {host}:{port}: {exc.strerror or exc}", 2, False)
        return
    port = sock.getsockname()[1]
    from orchestrator.web.app import Settings, create_app, git_user_name

    settings = Settings(target=target, actor=actor, host=host, port=port, token=token, read_only=read_only,
                        prices=config.prices, key=signing_key(), reviewer=git_user_name(Path(repo or ".")),
                        evals=_evals_folder(Path(repo or ".")), webhook=_webhook(config, Path(repo or ".")))
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    click.echo(f"mesh serve: {url}" + ("  (read-only)" if read_only else ""), err=True)
    if open_browser:
        import threading
        import webbrowser

        # In a thread of its own: a browser named by $BROWSER may not return until it is closed,
        # and its first request must find the server running.
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True, name="mesh-serve-open").start()
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=1, lifespan="on"))
    server.run(sockets=[sock])


def _evals_folder(repo: Path) -> Path | None:
    """Where ``mesh eval run`` keeps the repository's evals (``<repo>/.mesh/evals``), None outside git."""
    from orchestrator.worktree.gitops import GitError, repo_root

    try:
        return repo_root(repo.resolve()) / ".mesh" / "evals"
    except GitError:
        return None


def _webhook(config: Any, repo: Any) -> tuple[str, str, Any] | None:
    """The forge's webhook, when ``[forge] webhook_secret_env`` names a secret that is set: its
    provider, secret and the sync of a branch (docs/pull-requests.md)."""
    import os

    forge = config.forge
    if forge is None or not forge.webhook_secret_env:
        return None
    secret = os.environ.get(forge.webhook_secret_env) or ""
    if not secret:
        click.echo(f"mesh serve: the forge webhook is not served: export {forge.webhook_secret_env}", err=True)
        return None
    from orchestrator.landing.forge_hook import sync_branch
    from orchestrator.worktree.gitops import repo_root

    root = repo_root(repo)
    click.echo("mesh serve: the forge webhook is served at /forge/webhook", err=True)
    return forge.provider, secret, lambda tracker, branch: sync_branch(tracker, config, root, branch)
