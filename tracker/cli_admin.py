"""``mesh tracker`` commands that look after the workspace rather than its issues: ``init``,
``doctor`` (and bd's ``validate`` and ``detect-pollution`` names of its checks), ``repair-deps``,
``info`` and ``migrate``. ``tracker.cli`` adds them to its group (``COMMANDS``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from . import bd_compat as bd
from .cli_io import EXIT_USER_ERROR, echo, fail, guard, json_option, print_json, run_action, say, settings
from .errors import TrackerError
from .store import Tracker, write_workspace_files

__all__ = ["COMMANDS"]


def _doctor(check: str | None, fix: bool, clean: bool, as_json: bool) -> None:
    """doctor's run: the tracker's own checks, or one of bd's (validate, pollution)."""

    def action(t: Tracker) -> dict:
        if (fix or clean) and settings().get("readonly"):
            raise TrackerError("operation 'doctor --fix' is not allowed in read-only mode", code="readonly")
        if check == "pollution":
            if clean:
                raise TrackerError("this tracker never deletes issues; close the ones found instead",
                                   code="unsupported")
            return bd.pollution(t)
        if check == "validate":
            return bd.validate(t, fix=fix)
        return t.doctor(fix=fix)

    def human(r: dict) -> None:
        if check == "pollution":
            echo(f"{r['polluted_count']} issue(s) look like test leftovers")
            for found in r["issues"]:
                echo(f"  {found['id']}: {found['title']} (score {found['score']}: {'; '.join(found['reasons'])})")
            return
        if check == "validate":
            for c in r["checks"]:
                echo(f"{c['status']:<8}{c['name']}: {c['message']}")
            return
        for c in r["checks"]:
            echo(f"{'ok  ' if c['ok'] else 'FAIL'}  {c['name']}: {c['detail']}")
        for fixed in r["fixed"]:
            echo(f"fixed: {fixed}")

    result = run_action(as_json, action, human)
    failed = _failures(result)
    if failed:
        # On stderr whatever the output mode: a client (beads-mcp's admin validate) shows stderr
        # as the reason the command failed.
        click.echo("doctor: " + "; ".join(failed), err=True)
        raise click.exceptions.Exit(EXIT_USER_ERROR)


def _failures(result: dict) -> list[str]:
    """Why a doctor run fails, one entry per failed check: an ``error`` of bd's validate, a
    check of the tracker's own doctor that is not ok. Warnings (bd's test-pollution heuristic)
    fail nothing, as in bd."""
    if "overall_ok" in result:
        return [f"{c['name']}: {c['message']}" for c in result["checks"] if c["status"] == "error"]
    if "ok" in result and not result["ok"]:
        return [f"{c['name']}: {c['detail']}" for c in result.get("checks") or [] if not c["ok"]] or ["a check failed"]
    return []


@click.command("init")
@click.option("--prefix", "-p", help="Issue id prefix (default: issue-prefix of .beads/config.yaml, else 'bd').")
@click.option("--force", is_flag=True, help="Open a database that holds a workspace already and set its prefix.")
@click.option("--non-interactive", is_flag=True, expose_value=False, help="Ask nothing (nothing here asks).")
@click.option("--skip-agents", is_flag=True, expose_value=False,
              help="Write no agent instructions (mesh writes none).")
@click.option("--skip-hooks", is_flag=True, expose_value=False, help="Install no git hooks (mesh installs none).")
@json_option
def init_cmd(prefix: str | None, force: bool, as_json: bool) -> None:
    """Create the tracker database (.beads/mesh.db here, or mesh --db PATH); refused, as bd
    refuses, where one holds a workspace already, unless --force. With the database in
    .beads/ here, also .beads/config.yaml (its issue-prefix) and .beads/metadata.json, as bd
    writes them, where they are missing."""
    given = settings()

    def work() -> dict:
        db_path = given.get("db") or os.environ.get("MESH_DB")
        tracker = Tracker.init(Path.cwd(), prefix=prefix, actor=given.get("actor"), db_path=db_path, force=force)
        try:
            where = tracker.where()
        finally:
            tracker.close()
        where["written"] = write_workspace_files(Path.cwd() / ".beads", where)
        return where

    result = guard(as_json, work)
    if as_json:
        print_json(result)
    elif not given.get("quiet"):
        # bd's own success lines: clients (beads-mcp's context init) look for them.
        name = result["prefix"]
        echo(f"\n\u2713 bd initialized successfully!\n\n  Backend: {result.get('engine') or 'sqlite'}\n"
             f"  Database: {result['database_path']}\n  Issue prefix: {name}\n"
             f"  Issues will be named: {name}-<hash> (e.g., {name}-a3f)\n\n"
             f"Run {'mesh tracker create' if os.path.basename(sys.argv[0]).startswith('mesh') else 'bd create'}"
             " TITLE to file the first issue.\n")


@click.command("doctor")
@click.option("--fix", is_flag=True, help="Repair what can be repaired safely (sort keys, orphan rows, WAL).")
@click.option("--check", "check", type=click.Choice(["validate", "pollution"]),
              help="Run one of bd's checks: validate (data integrity) or pollution (test leftovers).")
@click.option("--clean", is_flag=True, help="With --check=pollution: delete what it finds (refused: there is no delete).")
@click.option("-y", "--yes", is_flag=True, expose_value=False, help="Do not ask (nothing here asks).")
@json_option
def doctor_cmd(fix: bool, check: str | None, clean: bool, as_json: bool) -> None:
    """Check the database (integrity, foreign keys, WAL, sort keys); exit 1 if a problem is left."""
    _doctor(check, fix, clean, as_json)


@click.command("detect-pollution", hidden=True)
@click.option("--clean", is_flag=True, help="Delete what it finds (refused: there is no delete).")
@click.option("--yes", is_flag=True, expose_value=False, help="Do not ask (nothing here asks).")
@json_option
def detect_pollution_cmd(clean: bool, as_json: bool) -> None:
    """bd's deprecated name of doctor --check=pollution (beads-mcp 0.50 calls it)."""
    _doctor("pollution", False, clean, as_json)


@click.command("validate", hidden=True)
@click.option("--checks", expose_value=False, help="Accepted; every check runs.")
@click.option("--fix-all", is_flag=True, help="Repair what can be repaired safely.")
@json_option
def validate_cmd(fix_all: bool, as_json: bool) -> None:
    """doctor --check=validate under the name beads-mcp 0.50 calls."""
    _doctor("validate", fix_all, False, as_json)


@click.command("repair-deps")
@click.option("--fix", is_flag=True, help="Remove the dependency records whose other end is missing.")
@json_option
def repair_deps_cmd(fix: bool, as_json: bool) -> None:
    """Find dependency records that point at no issue (external: references excepted)."""

    def action(t: Tracker) -> dict:
        if fix and settings().get("readonly"):
            raise TrackerError("operation 'repair-deps --fix' is not allowed in read-only mode", code="readonly")
        return bd.repair_deps(t, fix=fix)

    run_action(as_json, action,
         say(lambda r: f"{r['orphans_found']} orphaned dependency record(s)"
              + (f", {r['fixed']} removed" if fix else "")))


@click.command("info")
@click.option("--schema", is_flag=True, help="Include the schema: tables, version, sample ids.")
@json_option
def info_cmd(schema: bool, as_json: bool) -> None:
    """Show the database, its issue count and prefix."""

    def action(t: Tracker) -> dict:
        info = bd.schema_info(t)
        if not schema:
            info.pop("schema")
        return info

    def human(r: dict) -> None:
        echo(f"Database: {r['database_path']}\nIssues: {r['issue_count']}\nPrefix: {r['config']['issue_prefix']}")
        if "schema" in r:
            echo(f"Schema version: {r['schema']['schema_version']}\nTables: {', '.join(r['schema']['tables'])}")

    run_action(as_json, action, human)


@click.command("migrate")
@click.option("--inspect", is_flag=True, help="Show the migration state (the schema migrates itself on open).")
@click.option("--from", "source", metavar="DB", help="Move the workspace in this database (a file or a postgresql:// URL)...")
@click.option("--to", "target", metavar="DB", help="...into this one (a new or empty file or database).")
@click.option("--force", is_flag=True, help="With --to: replace what the target database holds.")
@json_option
def migrate_cmd(inspect: bool, source: str | None, target: str | None, force: bool, as_json: bool) -> None:
    """Show the migration state (--inspect), or move a workspace to another database (--from, --to)."""
    if source or target:
        _migrate_between(source, target, force=force, inspect=inspect, as_json=as_json)
        return
    if not inspect:
        raise click.UsageError("give --inspect, or --from and --to")
    run_action(as_json, bd.migrate_inspect,
         say(lambda r: f"Schema version: {r['current_state']['schema_version']} (up to date; nothing to migrate)"))


def _migrate_between(source: str | None, target: str | None, *, force: bool, inspect: bool, as_json: bool) -> None:
    """``migrate --from --to``: every row of one database copied into another, in one transaction."""
    from .migrate import migrate  # only this command needs it

    if not (source and target) or inspect:
        raise click.UsageError("--from and --to go together, without --inspect")
    if settings().get("readonly"):
        fail("operation 'migrate' is not allowed in read-only mode", "readonly", EXIT_USER_ERROR, as_json)
    report = guard(as_json, lambda: migrate(source, target, replace=force).to_dict())
    if as_json:
        print_json(report)
    else:
        echo(f"Migrated {report['issues']} issue(s), {report['comments']} comment(s), {report['events']}"
                   f" event(s) and {len(report['tables'])} table(s) from {report['from']} to {report['to']}")


COMMANDS: tuple[click.Command, ...] = (init_cmd, doctor_cmd, detect_pollution_cmd, validate_cmd, repair_deps_cmd, info_cmd,
                                       migrate_cmd)
