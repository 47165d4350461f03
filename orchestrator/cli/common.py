"""What the ``mesh`` commands share: opening a command's config and tracker, printing a result
or a failure (JSON with ``--json``, terminal-safe text for a person) with its exit code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from tracker.cli_io import echo as _say

__all__ = ["_calls_context", "_ledger_context", "_open_scope", "_result", "_fail"]


def _calls_context(ctx: click.Context, repo, config_file, as_json: bool):
    """The config and tracker of ``logs`` and ``usage``, or None after one line and the exit code."""
    from pathlib import Path

    # Not through the runner: these read the ledger and never build an engine or a backend.
    from orchestrator.config import load_config
    from orchestrator.workspace import ConfigError, TrackerUnavailable, open_found_tracker

    root = ctx.find_root().obj or {}
    try:
        config = load_config(Path(repo) if repo else None, Path(config_file) if config_file else None)
        tracker = open_found_tracker(root.get("db"), root.get("actor"), config.tracker.url, repo=repo)
    except ConfigError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return None
    except TrackerUnavailable as exc:
        _fail(ctx, str(exc), 4, as_json)
        return None
    return config, tracker


def _ledger_context(ctx: click.Context, repo, config_file, as_json: bool):
    """``hot_logs.ledger_context`` for a command, or None after one line and the exit code."""
    from orchestrator.cli.hot_logs import ledger_context
    from orchestrator.workspace import ConfigError, TrackerUnavailable

    root = ctx.find_root().obj or {}
    try:
        return ledger_context(repo, config_file, root.get("db"), root.get("actor"))
    except ConfigError as exc:
        _fail(ctx, str(exc), 2, as_json)
    except TrackerUnavailable as exc:
        _fail(ctx, str(exc), 4, as_json)
    return None


def _result(as_json: bool, data: Any, render: Callable[[Any], str]) -> None:
    """``data`` as indented JSON, or rendered for a person (terminal-safe)."""
    import json

    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        _say(render(data))


def _fail(ctx: click.Context, message: str, code: int, as_json: bool) -> None:
    import json

    if as_json:
        click.echo(json.dumps({"error": message, "code": code}), err=True)
    else:
        _say(f"mesh: {message}", err=True)
    ctx.exit(code)


def _open_scope(ctx: click.Context, label, parent, repo, config_file, config=None):
    """The scope, config and tracker of a scoped command, or None after printing one line and
    setting the exit code (2 for a usage error, the runner's code for the rest). ``config``,
    when given, is used instead of loading one (ci-close reads the protected branch's)."""
    from pathlib import Path

    from orchestrator.runner import RunError, RunOptions, load_run_config, open_tracker
    from orchestrator.protocol.scope import ScopeError, resolve_scope

    root = ctx.find_root().obj or {}
    try:
        scope = resolve_scope(label, parent)
        if config is None:
            config = load_run_config(RunOptions(repo=Path(repo) if repo else None,
                                                config_file=Path(config_file) if config_file else None))
        tracker = open_tracker(root.get("db"), root.get("actor"), config, repo=repo)
    except ScopeError as exc:
        _say(f"mesh: {exc}", err=True)
        ctx.exit(2)
        return None
    except RunError as exc:
        _say(f"mesh: {exc}", err=True)
        ctx.exit(exc.exit_code)
        return None
    return scope, config, tracker
