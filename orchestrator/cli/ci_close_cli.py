"""The terminal side of ``mesh ci-close``: options, the JSONL round trip, the report, the exit code.

The close is ``orchestrator.landing.ci_close``; with ``--jsonl`` the committed tracker file is
imported into a throwaway database, and exported back (and committed with ``--commit``) by
``orchestrator.landing.ci_jsonl``, so a CI job runs this one installed command and nothing
of the checkout it closes for.
"""

from __future__ import annotations

import click

from orchestrator.cli.common import _open_scope
from tracker.cli_io import echo as _say

__all__ = ["ci_close_command"]


@click.command("ci-close")
@click.option("--label", help="Scope: the plan label (else env BD_PLAN_LABEL, else --parent).")
@click.option("--parent", help="Scope: the parent epic id.")
@click.option("--revalidate", is_flag=True,
              help="Re-run the run head's signed validation commands, sandboxed, on this checkout's HEAD first.")
@click.option("--require-signed", "require_signed", is_flag=True,
              help="Refuse evidence whose checkpoints are not signed with MESH_SIGNING_KEY.")
@click.option("--repo", type=click.Path(file_okay=False),
              help="The git checkout the tasks are closed for: its HEAD must hold the approved tree (default: .).")
@click.option("--base", envvar="MESH_CI_BASE",
              help="The protected branch whose mesh.toml configures ci-close, never the checkout's own (env"
                   " MESH_CI_BASE; default origin/HEAD, else main, else master).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="CI's own config file, outside the checkout (instead of the protected branch's mesh.toml).")
@click.option("--jsonl", "jsonl", metavar="PATH",
              help="The tracker is this beads JSONL file of the checkout (such as .beads/issues.jsonl): imported"
                   " into a throwaway database, and exported back after the close (instead of --db).")
@click.option("--commit", "commit", is_flag=True,
              help="With --jsonl: commit the updated file on the checked-out HEAD (never pushed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per task looked at, as an array.")
@click.pass_context
def ci_close_command(ctx: click.Context, label, parent, revalidate, require_signed, repo, base, config_file,
                     jsonl, commit, as_json) -> None:
    """Close approved tasks from CI after checking their evidence (exit 1 if any task fails).

    Looks at in-progress tasks in scope that wait on a CI gate or hold an approval, checks
    the latest signed run head ([orch:run-head]: vote consensus, validation pass, review
    approve, no open MUST_FIX findings, the approved tree against this checkout), then
    resolves the gate and closes the task. The configuration comes from --config or the
    protected branch (--base), never from the checkout under review.

    In CI with the tracker committed as JSONL, this is the whole job:
    mesh ci-close --label L --revalidate --require-signed --jsonl .beads/issues.jsonl --commit
    """
    import json
    from pathlib import Path

    from orchestrator.landing.ci_close import CiCloseError, ci_close
    from orchestrator.landing.ci_config import CiConfigError, ci_config
    from orchestrator.landing.ci_jsonl import CiJsonlError, commit_export, jsonl_tracker
    from orchestrator.protocol.runhead import git_checkout_root
    from tracker.safe_text import printable

    root = ctx.find_root().obj or {}
    checkout = git_checkout_root(Path(repo or ".").resolve())
    try:
        if commit and not jsonl:
            raise CiCloseError("--commit commits the --jsonl file: give --jsonl PATH too")
        if jsonl and root.get("db"):
            raise CiCloseError("give the tracker once: --jsonl (a file of the checkout) or --db/MESH_DB, not both")
        if checkout is None:
            raise CiCloseError(f"{repo or '.'} is not a git checkout: ci-close compares the approved tree with the"
                               " checked-out one (run it in the checkout, or give --repo)")
        config, source, trusted = ci_config(checkout, base, Path(config_file) if config_file else None)
    except (CiCloseError, CiConfigError) as exc:
        _say(f"mesh: {exc}", err=True)
        ctx.exit(2)
        return
    def close(tracker, scope) -> list:
        # Only CI's own config file, from outside the checkout, may switch the sandbox off.
        return ci_close(tracker, config, scope, repo=checkout, revalidate=revalidate, require_signed=require_signed,
                        trust_config_sandbox=trusted)

    round_trip = None
    try:
        if jsonl:
            from orchestrator.protocol.scope import ScopeError, resolve_scope

            try:
                scope = resolve_scope(label, parent)
            except ScopeError as exc:
                raise CiCloseError(str(exc)) from None
            actor = root.get("actor") or "mesh-ci"
            with jsonl_tracker(checkout, jsonl, actor=actor) as (tracker, round_trip):
                checks = close(tracker, scope)
            if commit and round_trip.changed:
                round_trip.commit = commit_export(checkout, jsonl, actor)
        else:
            opened = _open_scope(ctx, label, parent, repo, None, config=config)
            if opened is None:
                return
            scope, config, tracker = opened
            with tracker:
                checks = close(tracker, scope)
    except (CiCloseError, CiJsonlError) as exc:
        _say(f"mesh: {exc}", err=True)
        ctx.exit(2)
        return
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        _say(f"configuration: {source}")
        if not checks:
            _say("no task in scope awaits a CI close")
        for c in checks:
            _say(f"{c.task_id}  {c.result:<14} {printable(c.title or '', one_line=True)}")
            for name, value in c.checks.items():
                _say(f"    {name}: {printable(str(value), one_line=True)}")
            for problem in c.problems:
                _say(f"    problem: {printable(problem, one_line=True)}")
    if round_trip is not None:
        what = (f"committed {round_trip.commit[:12]}" if round_trip.commit else
                "updated, not committed" if round_trip.changed else "unchanged")
        _say(f"tracker: {printable(jsonl, one_line=True)}: {round_trip.imported} issue(s) read, {what}",
             err=as_json)
    ctx.exit(0 if all(c.ok for c in checks) else 1)
