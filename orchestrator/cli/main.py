"""The ``mesh`` command line: a thin layer over the ``tracker`` and ``orchestrator`` libraries.

Heavy modules (pydantic models, jinja2, rich, the anthropic SDK, llm, psycopg) are
imported inside the commands that need them, so ``mesh --help`` and the tracker
commands start fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from orchestrator.cli.bd_cli import bd_command
from orchestrator.cli.ci_close_cli import ci_close_command
from tracker.cli_io import echo as _say

from orchestrator.cli.common import _calls_context, _fail, _ledger_context, _open_scope, _result
from orchestrator.cli.eval_cli import eval_group
from orchestrator.cli.forge_cli import forge_group
from orchestrator.cli.mcp_cli import mcp_command
from orchestrator.cli.review_cli import review_command
from orchestrator.cli.schema_cli import schema_command
from orchestrator.cli.serve_cli import serve_command

__all__ = ["main", "cli"]

_GLOBAL_OPTIONS = ("--db", "--actor")
# Commands whose modules load only when they run or print their own help, with the short help
# `mesh --help` lists for them (tests/test_bd_hot.py checks it is the command's own): `mesh
# tracker` is the whole tracker command line, which would cost every `mesh --help` its import.
_LAZY = {"tracker": ("tracker.cli", "tracker_group",
                     "Work the issue tracker by hand (bd's commands, flags and JSON shapes).")}


class _MeshGroup(click.Group):
    """The ``mesh`` group: ``--db`` and ``--actor`` are its own options, so ``mesh run --db F``
    is refused by ``run``; the message then says where the option goes, with the command
    line rewritten (``mesh --db F run ...``) rather than click's bare "no such option".
    The commands of ``_LAZY`` are imported when looked up, except to be listed in help."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY and cmd_name not in self.commands:
            module, name, short_help = _LAZY[cmd_name]
            if self._listing:
                return click.Command(cmd_name, help=short_help)
            import importlib

            self.add_command(getattr(importlib.import_module(module), name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["mesh.argv"] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            if exc.option_name not in _GLOBAL_OPTIONS:
                raise
            import shlex

            argv, moved = list(ctx.meta.get("mesh.argv") or []), []
            for index, arg in enumerate(argv):
                if arg.startswith(exc.option_name + "="):
                    moved = [arg]
                elif arg == exc.option_name and index + 1 < len(argv):
                    moved = argv[index:index + 2]
                if moved:
                    del argv[index:index + len(moved)]
                    break
            where = exc.ctx.command_path if exc.ctx else "the command"
            raise click.UsageError(
                f"{exc.option_name} is an option of mesh itself, not of '{where}': give it before the command,"
                f" as in: {shlex.join([ctx.command_path, *moved, *argv])}", ctx=exc.ctx) from None


@click.group(cls=_MeshGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_path", type=click.Path(dir_okay=False), envvar="MESH_DB",
              help="Tracker database (default: .beads/mesh.db of the enclosing workspace; env MESH_DB).")
@click.option("--actor", envvar="MESH_ACTOR", help="Who writes (env MESH_ACTOR; default $USER).")
@click.version_option(package_name="beads-mesh", prog_name="mesh")
@click.pass_context
def cli(ctx: click.Context, db_path: str | None, actor: str | None) -> None:
    """mesh: take one beads task from ready to closed with an LLM team.

    A proposer plans, three critics object, a synthesizer writes one unified
    diff, five roles vote, the patch is applied in a git worktree and validated,
    a third-party reviewer approves, and every round is checkpointed into the
    tracker as an [orch:*] comment.
    """
    ctx.ensure_object(dict)
    ctx.obj["db"] = db_path
    ctx.obj["actor"] = actor


cli.add_command(bd_command)
cli.add_command(ci_close_command)
cli.add_command(schema_command)
cli.add_command(review_command)
cli.add_command(mcp_command)
cli.add_command(serve_command)
cli.add_command(eval_group)
cli.add_command(forge_group)


def _run_options(f):
    """The options ``run`` and ``resume`` share."""
    options = [
        click.option("--label", help="Scope: the plan label (else env BD_PLAN_LABEL, else --parent)."),
        click.option("--parent", help="Scope: the parent epic id (fallback when tasks carry no plan label)."),
        click.option("--ids", help="Restrict candidates to these task ids (comma-separated)."),
        click.option("--no-integrate", "no_integrate", is_flag=True,
                     help="Synthesis only: apply nothing, run nothing, change no status."),
        click.option("--strict-output", "strict_output", is_flag=True, default=None,
                     help="Require every worker answer to be a JSON envelope {role, task_id, artifact, outbox?}."),
        click.option("--backend", type=click.Choice(["replay", "command", "anthropic", "llm"]),
                     help="Worker backend (default from config: replay)."),
        click.option("--script", type=click.Path(exists=True, dir_okay=False),
                     help="Replay script (JSON: role -> list of responses)."),
        click.option("--worker-cmd", "worker_cmd",
                     help="An agent CLI reading the prompt on stdin, for every role (selects the command backend)."),
        # The names live in roles.backends.presets; importing it here would slow `mesh --help`.
        click.option("--worker", type=click.Choice(["claude-code", "codex", "opencode"]),
                     help="An agent CLI preset for every role (a command worker; implies --backend command)."),
        click.option("--repo", type=click.Path(file_okay=False), help="Git repository to integrate into (default: .)."),
        click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
                     help="Config file (default: mesh.toml, or [tool.mesh] in pyproject.toml)."),
        click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object."),
        click.option("--onto", help="Cut the task from and land approved work onto this integration branch"
                                    " (default: config drain.onto, else the branch the scope's work last landed"
                                    " on, else the scope's mesh/land/<name>)."),
        click.option("--no-land", "no_land", is_flag=True,
                     help="Keep approved work on its task branch mesh/<task> (its dependents wait until it lands)."),
        click.option("--take-over", "take_over", is_flag=True,
                     help="Also take a task in progress by someone else (a person working by hand)."),
        click.option("--remote", help="A git remote shared by several runners: cut from and land on its"
                                      " integration branch, push task branches (default: config drain.remote)."),
        click.option("--reviewer", type=click.Choice(["worker", "human"]),
                     help="Who reviews (round E): a reviewer worker, or a person through `mesh review`"
                          " (default: config reviewer; a task labelled review:human always waits for a person)."),
        click.option("--allow-failing-base", "allow_failing_base", is_flag=True, default=None,
                     help="Run even when the base tree fails the project's check; only new failures count against"
                          " the patch (default: config validation.allow_failing_base)."),
        click.option("--profile", type=click.Choice(["full", "lite", "single", "candidates"]),
                     help="The rounds a task goes through (default: config profile, else full; docs/protocol.md)."),
        click.option("--batch", is_flag=True, default=False,
                     help="Send the anthropic backend's calls as Message Batches: half price, slower"
                          " (config anthropic.batch)."),
        click.option("--model", "models", multiple=True, metavar="[ROLE=]MODEL",
                     help="The model of every role, or of one role (repeat: --model synthesizer=claude-opus-4-1)"
                          " over config [models]."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _do_run(ctx: click.Context, task: str | None, force: bool, label, parent, ids, no_integrate, strict_output,
            backend, script, worker_cmd, repo, config_file, as_json, onto=None, take_over=False, remote=None,
            worker=None, no_land=False, reviewer=None, allow_failing_base=None, profile=None, batch=False,
            models=()) -> None:
    import json
    import sys
    from pathlib import Path

    from orchestrator.views.report import render_report
    from orchestrator.runner import RunError, RunOptions, run
    from orchestrator.stopping import INTERRUPTED_EXIT, RunStopped, StopRequest
    from redact import scrub

    root = ctx.find_root().obj or {}
    options = RunOptions(
        label=label, parent=parent, ids=[i.strip() for i in (ids or "").split(",") if i.strip()],
        integrate=False if no_integrate else None, strict_output=strict_output, backend=backend,
        script=Path(script) if script else None, worker_cmd=worker_cmd, worker=worker,
        repo=Path(repo) if repo else None, config_file=Path(config_file) if config_file else None, db=root.get("db"),
        actor=root.get("actor"), task=task, force=force, onto=onto, take_over=take_over, remote=remote,
        land=not no_land, reviewer=reviewer, allow_failing_base=allow_failing_base, profile=profile, batch=batch,
        models=list(models),
    )
    progress = None
    if not as_json and sys.stderr.isatty():
        from rich.console import Console

        from orchestrator.views.live import live_run_progress

        progress = live_run_progress(Console(stderr=True), onto=onto)
    stop = StopRequest()
    try:
        with stop.armed(lambda line: _say(line, err=True)):
            report = _run_with_progress(run, options, progress, stop, scrub)
    except RunStopped as exc:
        _fail(ctx, str(exc), INTERRUPTED_EXIT, as_json)
        return
    except RunError as exc:
        if as_json:
            click.echo(json.dumps({"error": scrub(str(exc)), "code": exc.exit_code}), err=True)
        else:
            _say(f"mesh: {scrub(str(exc))}", err=True)
        ctx.exit(exc.exit_code)
        return
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _say(render_report(report))
    ctx.exit(report.exit_code)


def _run_with_progress(run, options, progress, stop, scrub):
    """``run(options)`` with its progress shown (the live table, else the engine's lines on
    stderr) through ``stop``'s echo and hook, so a requested stop takes effect at a checkpoint."""
    if progress is None:
        # Progress lines and errors are logs: scrubbed like everything mesh records. They
        # quote model text: its terminal escapes are shown, never sent (_say).
        return run(options, echo=stop.echo(lambda line: _say(scrub(line), err=True)), engine_hook=stop.hook)
    try:
        report = run(options, echo=stop.echo(progress.echo),
                     engine_hook=lambda engine: (stop.hook(engine), progress.hook(engine)))
        progress.finish(report)
        return report
    finally:
        progress.close()


@cli.command("run")
@_run_options
@click.pass_context
def run_command(ctx: click.Context, **kw) -> None:
    """Take one scoped task from ready to closed (or blocked), checkpointing every round.

    Exit codes: 0 closed, synthesis only or nothing runnable; 2 usage (or a configuration,
    dependency or toolchain mistake); 3 task blocked; 4 tracker unavailable; 5 the base tree
    fails the project's check (the task stays open); 130 stopped by Ctrl-C or SIGTERM after a
    checkpoint (mesh resume TASK continues).
    """
    _do_run(ctx, None, False, **kw)


@cli.command("resume")
@click.argument("task", required=False)
@click.option("--force", is_flag=True, help="Take over the task's lease at once, even if not expired.")
@_run_options
@click.pass_context
def resume_command(ctx: click.Context, task: str | None, force: bool, **kw) -> None:
    """Continue an interrupted run from its [orch:*] checkpoints (TASK, or the scope's in-progress task)."""
    _do_run(ctx, task, force, **kw)


@cli.command("drain")
@click.option("--jobs", type=click.IntRange(1, 64), help="Tasks in flight at once (default: config drain.jobs, 1).")
@click.option("--max-tasks", "max_tasks", type=click.IntRange(1), help="Start at most this many tasks.")
@click.option("--max-usd", "max_usd", type=click.FloatRange(0), help="Start no task the remaining budget cannot cover.")
@_run_options
@click.pass_context
def drain_command(ctx: click.Context, jobs, max_tasks, max_usd, **kw) -> None:
    """Run every ready task of the scope, in parallel, landing each on the integration branch.

    Exit codes: 0 every task closed (or awaits CI); 2 usage; 3 a task of the scope is blocked
    (by this drain or an earlier one); 4 tracker unavailable; 5 the base tree fails the
    project's check; 130 stopped by a second Ctrl-C
    (resumable by running it again).
    """
    from orchestrator.cli.drain_cli import run_drain_command

    ctx.exit(run_drain_command(ctx.find_root().obj or {}, jobs=jobs, max_tasks=max_tasks, max_usd=max_usd, **kw))


@cli.command("status")
@click.option("--label", help="Scope: the plan label (else env BD_PLAN_LABEL, else --parent).")
@click.option("--parent", help="Scope: the parent epic id.")
@click.option("--repo", type=click.Path(file_okay=False), help="Git repository (default: .).")
@click.option("--onto", help="The integration branch (default: config drain.onto, else mesh/land/<scope>).")
@click.option("--json", "as_json", is_flag=True, help="Print the tree as JSON.")
@click.pass_context
def status_command(ctx: click.Context, label, parent, repo, onto, as_json) -> None:
    """The scope as a tree: epic, tasks, state, blockers, branch, landed commit."""
    from pathlib import Path

    from orchestrator.protocol.scope import ScopeError, resolve_scope
    from orchestrator.views.status import render_status, scope_status
    from orchestrator.workspace import ConfigError, TrackerUnavailable, config_table, config_text, open_found_tracker

    # A read-only view: the two settings it needs are read from the config file's table, without
    # the validated model (pydantic and the roles would be most of the command's time).
    root = ctx.find_root().obj or {}
    try:
        scope = resolve_scope(label, parent)
        table, source = config_table(Path(repo) if repo else None)
        url, onto_default = (config_text(table, source, section, key)
                             for section, key in (("tracker", "url"), ("drain", "onto")))
        tracker = open_found_tracker(root.get("db"), root.get("actor"), url, repo=repo)
    except (ScopeError, ConfigError) as exc:
        _say(f"mesh: {exc}", err=True)
        ctx.exit(2)
        return
    except TrackerUnavailable as exc:
        _say(f"mesh: {exc}", err=True)
        ctx.exit(4)
        return
    with tracker:
        status = scope_status(tracker, scope, repo=Path(repo or ".").resolve(), onto=onto or onto_default)
    _result(as_json, status, render_status)


@cli.command("show")
@click.argument("task")
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON.")
@click.pass_context
def show_command(ctx: click.Context, task: str, as_json: bool) -> None:
    """A task's run history from its comments: rounds, votes, findings, validation, outcome."""
    import json

    from orchestrator.views.show import render_history, task_history
    from orchestrator.workspace import TrackerNotFound, tracker_target
    from tracker.errors import TrackerError
    from tracker.store import Tracker

    root = ctx.find_root().obj or {}
    try:
        with Tracker.open(tracker_target(root.get("db")), actor=root.get("actor")) as tracker:
            history = task_history(tracker, task)
    except TrackerNotFound as exc:
        _fail(ctx, str(exc), 4, as_json)
        return
    except TrackerError as exc:
        if as_json:
            click.echo(json.dumps({"error": str(exc), "code": exc.code}), err=True)
        else:
            _say(f"mesh: {exc}", err=True)
        ctx.exit(4 if exc.code in ("workspace_unavailable", "tracker_unavailable") else 1)
        return
    _result(as_json, history, render_history)


@cli.command("retry")
@click.argument("task")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as one JSON object.")
@click.pass_context
def retry_command(ctx: click.Context, task: str, as_json: bool) -> None:
    """Re-open a blocked TASK for a new run (its earlier runs' history stays on it).

    The next run starts from the current HEAD (or the integration branch); the earlier
    attempt's commits are kept on branch mesh/<task>-<run>. Exit 2 when the task is not
    blocked or unknown.
    """
    import json

    from orchestrator.retry import RetryRefused, retry_task
    from orchestrator.safe_text import clip
    from tracker.errors import NotFoundError, TrackerError

    opened = _calls_context(ctx, None, None, as_json)
    if opened is None:
        return
    with opened[1] as tracker:
        try:
            done = retry_task(tracker, task)
        except (RetryRefused, NotFoundError) as exc:
            _fail(ctx, str(exc), 2, as_json)
            return
        except TrackerError as exc:
            _fail(ctx, str(exc), 4, as_json)
            return
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    _say(f"{done['id']}: blocked -> open (it was blocked: {clip(done['was'], 300)})")
    _say(f"  the history of its {len(done['runs'])} earlier run(s) stays: mesh show {done['id']}")
    _say(f"  run it again: {done['next']}")


@cli.command("demo")
@click.option("--keep", is_flag=True, help="Keep the temporary demo folder and print its path.")
@click.pass_context
def demo_command(ctx: click.Context, keep: bool) -> None:
    """The offline end-to-end demo: a real patch, real tests, one review cycle, then close."""
    from orchestrator.demo import run_demo

    ctx.exit(run_demo(keep=keep, echo=_say))


def _config_options(f):
    """``--repo`` and ``--config``: where the price table in use comes from."""
    f = click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
                     help="Config file (default: mesh.toml, or [tool.mesh] in pyproject.toml).")(f)
    return click.option("--repo", type=click.Path(file_okay=False),
                        help="The project whose config (and [prices]) applies (default: .).")(f)


def _show(value: Any, as_json: bool, render: Callable[..., str]) -> None:
    """Print ``value`` as JSON, or as ``render(value, width=..., color=...)`` sized to the terminal."""
    import json

    if as_json:
        click.echo(json.dumps(value, indent=2))
        return
    from orchestrator.safe_text import terminal

    width, color = terminal()
    # Colour codes are the renderer's own (its cells are clipped, hence inert); plain text is
    # made printable whole.
    text = render(value, width=width, color=color)
    if color:
        click.echo(text)
    else:
        _say(text)


@cli.command("logs")
@click.option("--task", help="Only this task's calls.")
@click.option("--run", "run_id", help="Only this run's calls.")
@click.option("--role", help="Only this role's calls (proposer, critic_a, ...).")
@click.option("--round", "round_name", help="Only this round's calls (proposal, critique, synthesis, vote, ...).")
@click.option("--model", help="Only calls to this model.")
@click.option("--backend", help="Only calls through this backend (replay, command, anthropic, ...).")
@click.option("--errors", is_flag=True, help="Only calls that failed.")
@click.option("-n", "--count", "count", type=click.IntRange(0), default=None,
              help="How many calls, newest first (default 20; 0: all).")
@click.option("-q", "--query", help="Only calls whose prompt or response holds every word of this text.")
@click.option("-v", "--verbose", is_flag=True, help="Show (with --json: include) each call's prompt and response.")
@click.option("--json", "as_json", is_flag=True, help="Print an array of call objects.")
@_config_options
@click.pass_context
def logs_command(ctx: click.Context, task, run_id, role, round_name, model, backend, errors, count, query, verbose,
                 as_json, repo, config_file) -> None:
    """Logged worker calls, newest first: role, round, model, tokens, cost, time, error.

    Costs are worked out with the price table in use and dated by it (see mesh prices).
    """
    from orchestrator.ledger.logs import DEFAULT_LIMIT, list_calls, render_calls
    from orchestrator.ledger.usage import CallsUnavailable, UsageError

    opened = _ledger_context(ctx, repo, config_file, as_json)
    if opened is None:
        return
    prices, tracker = opened
    with tracker:
        try:
            records = list_calls(tracker, prices=prices, task=task, run=run_id, role=role,
                                 round_name=round_name, model=model, backend=backend, errors=errors, query=query,
                                 limit=DEFAULT_LIMIT if count is None else count, verbose=verbose)
        except UsageError as exc:
            _fail(ctx, str(exc), 4 if isinstance(exc, CallsUnavailable) else 2, as_json)
            return
    _show(records, as_json, lambda value, **size: render_calls(value, prices_as_of=prices.as_of,
                                                               verbose=verbose, **size))


@cli.command("usage")
@click.option("--task", help="Only this task's calls.")
@click.option("--since", help="Only calls from then on: YYYY-MM-DD (UTC), an ISO date-time, or 12h / 7d / 2w ago.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@_config_options
@click.pass_context
def usage_command(ctx: click.Context, task, since, as_json, repo, config_file) -> None:
    """Tokens, cache reads and writes, and dollars by task, role, model and day.

    Also the share of input served from the cache. Dollars are dated by the price table
    in use (see mesh prices).
    """
    from orchestrator.ledger.usage import CallsUnavailable, UsageError, parse_since, render_usage, usage_summary

    opened = _ledger_context(ctx, repo, config_file, as_json)
    if opened is None:
        return
    prices, tracker = opened
    with tracker:
        try:
            summary = usage_summary(tracker, prices=prices, task_id=task,
                                    since=parse_since(since) if since else None)
        except UsageError as exc:
            _fail(ctx, str(exc), 4 if isinstance(exc, CallsUnavailable) else 2, as_json)
            return
    _show(summary, as_json, render_usage)


@cli.command("prices")
@click.option("--update-from", "update_from", type=click.Path(dir_okay=False),
              help="Check this JSON or TOML price table and store it for every project of this user.")
@click.option("--json", "as_json", is_flag=True, help="Print the table in use as JSON.")
@_config_options
@click.pass_context
def prices_command(ctx: click.Context, update_from, as_json, repo, config_file) -> None:
    """The model price table in use, with its date; --update-from replaces the stored one.

    The stored table lives at $XDG_CONFIG_HOME/mesh/prices.json (~/.config/mesh/prices.json)
    and lies over the built-in rows; a project's [prices] lies over it.
    """
    import json
    from pathlib import Path

    from orchestrator.config import ConfigError, load_config
    from orchestrator.ledger.prices import describe_prices, install_prices, render_prices

    try:
        if update_from:
            table, path, models = install_prices(Path(update_from))
            message = f"stored prices as of {table.as_of} for {len(models)} model(s) in {path}"
            if as_json:
                click.echo(json.dumps({"as_of": table.as_of, "stored_file": str(path)}))
            else:
                _say(message)
            return
        config = load_config(Path(repo) if repo else None, Path(config_file) if config_file else None)
    except ConfigError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    _show(describe_prices(config.prices), as_json, render_prices)


@cli.command("report")
@click.argument("task")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="The HTML file to write (default: mesh-report-<task>.html in the current directory).")
@_config_options
@click.pass_context
def report_command(ctx: click.Context, task: str, output, repo, config_file) -> None:
    """Write one self-contained HTML page of a task: rounds, votes, patch, validation, review,
    landing and costs (no script, nothing fetched when it is viewed)."""
    from pathlib import Path

    from orchestrator.views.report_html import default_report_path, write_report
    from tracker.errors import NotFoundError, TrackerError

    opened = _calls_context(ctx, repo, config_file, False)
    if opened is None:
        return
    config, tracker = opened
    target = Path(output) if output else default_report_path(task)
    with tracker:
        try:
            path = write_report(tracker, task, target, prices=config.prices)
        except NotFoundError as exc:
            _fail(ctx, str(exc), 2, False)
            return
        except TrackerError as exc:
            _fail(ctx, str(exc), 4, False)
            return
        except OSError as exc:
            _fail(ctx, f"cannot write {target}: {exc.strerror or exc}", 1, False)
            return
    _say(str(path))


@cli.command("init")
@click.option("--repo", type=click.Path(file_okay=False), help="The project (default: the current folder's repository).")
@click.option("--prefix", help="The tracker's issue prefix, when mesh init creates the tracker.")
@click.option("--force", is_flag=True, help="Rewrite an existing mesh.toml.")
@click.option("--json", "as_json", is_flag=True, help="Print what was found and done as one JSON object.")
@click.pass_context
def init_command(ctx: click.Context, repo, prefix, force: bool, as_json: bool) -> None:
    """Set a project up: detect its toolchains, write mesh.toml, create the tracker, fill .gitignore.

    Prints what it found and the commands to run next (an install of dependencies not yet
    installed first). Exit codes: 0 set up; 2 not a git repository, or a toolchain missing.
    """
    import json
    from pathlib import Path

    from orchestrator.project_init import InitError, init_project

    root = ctx.find_root().obj or {}
    try:
        report = init_project(Path(repo) if repo else Path.cwd(), prefix=prefix, force=force, actor=root.get("actor"))
    except InitError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    if as_json:
        click.echo(json.dumps({"repo": str(report.repo), "toolchains": report.toolchains, "config": report.config,
                               "tracker": report.tracker, "gitignore_added": report.ignored,
                               "not_installed": report.missing, "allow": report.allow, "check": report.check,
                               "next": report.next}, indent=2))
    else:
        for line in report.lines():
            _say(line)


@cli.command("clean")
@click.option("--yes", is_flag=True, help="Remove them (without it: only say what would be removed and why).")
@click.option("--json", "as_json", is_flag=True, help="Print one object per branch or folder, as an array.")
@_config_options
@click.pass_context
def clean_command(ctx: click.Context, yes: bool, as_json: bool, repo, config_file) -> None:
    """Remove the mesh/<task> branches and worktrees of landed or closed work (a dry run without --yes).

    Keeps every branch with commits that are on neither the base branch nor an integration
    branch (unlanded work), every branch of a task in progress, integration branches, and
    says why for each. The workers' private HOMEs of this repository go with every task not
    in progress, and so do the HOMEs an older mesh shared between repositories and the files a
    worker call left behind when its process was killed.
    """
    import json
    from pathlib import Path

    from orchestrator.worktree.clean import clean
    from orchestrator.worktree.gitops import GitError, repo_root
    from orchestrator.safe_text import clip

    opened = _calls_context(ctx, repo, config_file, as_json)
    if opened is None:
        return
    config, tracker = opened
    with tracker:
        try:
            root = repo_root(Path(repo or "."))
            items = clean(tracker, root, yes=yes, protected=config.protected_branches, onto=config.drain.onto)
            items += _clean_worker_homes(tracker, root, yes)
        except GitError as exc:
            _fail(ctx, str(exc), 2, as_json)
            return
    if as_json:
        click.echo(json.dumps([item.to_dict() for item in items], indent=2))
        return
    verb = {"remove": "remove" if yes else "would remove", "removed": "removed", "keep": "keep", "kept": "kept"}
    if not items:
        _say("nothing to clean: no mesh/ branch and no worktree left")
    for item in items:
        where = f"  (worktree {item.worktree})" if item.worktree and item.action in ("remove", "removed") else ""
        _say(f"{verb[item.action]:<13} {clip(item.name, 70)}: {clip(item.why, 200)}{where}")
    if not yes and any(item.action == "remove" for item in items):
        _say("(a dry run: nothing was removed; mesh clean --yes removes them)")


def _clean_worker_homes(tracker, root, yes: bool) -> list:
    """``mesh clean``'s part for the workers' private HOMEs of the repository at ``root`` and the
    files of calls whose process is gone (``orchestrator.sandbox.worker_homes``), as clean items
    of kind ``home``."""
    import os
    import socket

    from orchestrator.protocol.lease import process_gone
    from orchestrator.sandbox.worker_homes import clean as clean_homes
    from orchestrator.worktree.clean import CleanItem, _status
    from orchestrator.worktree.gitops import _git, cache_dir

    common = os.path.realpath(root / _git(root, "rev-parse", "--git-common-dir").stdout.strip())
    homes = clean_homes(cache_dir() / "mesh-worker-homes", common, lambda task: _status(tracker, task),
                        lambda pid: process_gone(socket.gethostname(), pid), yes=yes)
    return [CleanItem("home", home.path, home.task, home.action, home.why) for home in homes]


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="mesh")


if __name__ == "__main__":  # ``python -m orchestrator.cli.main``: how mesh mcp starts background runs
    main()
