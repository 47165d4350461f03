"""``mesh tracker``: the command-line face of the tracker library, with ``bd``'s names.

Each command parses its options and calls one ``Tracker`` method; the library
does the work. ``--json`` prints the result as JSON (an array for list
commands, one object otherwise); errors become a one-line message on stderr
(``{"error", "code"}`` with ``--json``), exit 1 for a user error and 4 when the
workspace or its database is unavailable. Nothing here may import a heavy
module: ``mesh tracker ready`` is on the orchestrator's hot path and must start
in well under a quarter of a second.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .errors import InvalidValueError, TrackerError, WorkspaceError
from .model import parse_duration
from .store import Tracker

__all__ = ["tracker_group", "EXIT_USER_ERROR", "EXIT_UNAVAILABLE"]

EXIT_USER_ERROR = 1
EXIT_UNAVAILABLE = 4

_json_option = click.option(
    "--json", "as_json", is_flag=True,
    help="Print the result as JSON (errors as {\"error\", \"code\"} on stderr).",
)


# --------------------------------------------------------------------- plumbing


def _settings() -> dict:
    """``--db`` and ``--actor`` of the top-level ``mesh`` command (absent when run standalone)."""
    return click.get_current_context().find_root().obj or {}


def _open_tracker() -> Tracker:
    settings = _settings()
    return Tracker.open(settings.get("db"), actor=settings.get("actor"))


def _with_tracker(action: Callable[[Tracker], Any]) -> Any:
    tracker = _open_tracker()
    try:
        return action(tracker)
    finally:
        tracker.close()


def _fail(message: str, code: str, exit_code: int, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"error": message, "code": code}, ensure_ascii=False), err=True)
    else:
        click.echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(exit_code)


def _guard(as_json: bool, work: Callable[[], Any]) -> Any:
    """Run ``work``, turning every expected failure into a clean message and exit code."""
    try:
        return work()
    except WorkspaceError as exc:
        _fail(exc.message, exc.code, EXIT_UNAVAILABLE, as_json)
    except TrackerError as exc:
        _fail(exc.message, exc.code, EXIT_USER_ERROR, as_json)
    except sqlite3.Error as exc:
        # A locked, read-only or damaged file is the workspace being unavailable, not a bug.
        _fail(f"database error: {exc}", "database_error", EXIT_UNAVAILABLE, as_json)
    except OSError as exc:
        name = f" {exc.filename}" if exc.filename else ""
        _fail(f"cannot access{name}: {exc.strerror or exc}", "io_error", EXIT_USER_ERROR, as_json)


def _run(as_json: bool, action: Callable[[Tracker], Any], human: Callable[[Any], None]) -> Any:
    """Open the workspace, call ``action`` on it, print its result as JSON or via ``human``."""
    result = _guard(as_json, lambda: _with_tracker(action))
    if as_json:
        _print_json(result)
    else:
        human(result)
    return result


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _split_csv(values: tuple[str, ...] | None) -> list[str]:
    """Values of a repeatable option, each of which may also be comma-separated (like bd)."""
    out: list[str] = []
    for value in values or ():
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return out


def _issue_line(issue: dict) -> str:
    line = f"{issue['id']}  [P{issue['priority']}] [{issue['issue_type']}] {issue['status']}  {issue['title']}"
    if issue.get("labels"):
        line += f"  ({', '.join(issue['labels'])})"
    return line


def _print_issues(empty: str) -> Callable[[list[dict]], None]:
    def show(issues: list[dict]) -> None:
        if not issues:
            click.echo(empty)
        for issue in issues:
            click.echo(_issue_line(issue))

    return show


def _print_issue_block(issue: dict) -> None:
    """``show``'s readable form: header, fields, text sections, labels, dependencies, comments."""
    click.echo(f"{issue['id']}: {issue['title']}")
    fields = [
        ("Status", issue["status"]),
        ("Priority", f"P{issue['priority']}"),
        ("Type", issue["issue_type"]),
        ("Assignee", issue.get("assignee")),
        ("Owner", issue.get("owner")),
        ("Parent", issue.get("parent")),
        ("Created", _by(issue.get("created_at"), issue.get("created_by"))),
        ("Updated", issue.get("updated_at")),
        ("Closed", issue.get("closed_at")),
        ("Close reason", issue.get("close_reason")),
        ("Deferred until", issue.get("defer_until")),
        ("Due", issue.get("due_at")),
        ("External ref", issue.get("external_ref")),
        ("Await", _join(issue.get("await_type"), issue.get("await_id"))),
        ("Timeout (ns)", issue.get("timeout")),
        ("Agent state", issue.get("agent_state")),
        ("Hook", issue.get("hook_bead")),
        ("Role", issue.get("role_bead")),
        ("Pinned", "yes" if issue.get("pinned") else None),
        ("Ephemeral", "yes" if issue.get("ephemeral") else None),
    ]
    for name, value in fields:
        if value not in (None, ""):
            click.echo(f"{name + ':':<16}{value}")
    if issue.get("labels"):
        click.echo(f"{'Labels:':<16}{', '.join(issue['labels'])}")
    if issue.get("metadata"):
        click.echo(f"{'Metadata:':<16}{json.dumps(issue['metadata'], ensure_ascii=False)}")
    for name, key in (("Description", "description"), ("Design", "design"),
                      ("Acceptance criteria", "acceptance_criteria"), ("Notes", "notes")):
        if issue.get(key):
            click.echo(f"\n{name}:")
            for text_line in str(issue[key]).splitlines():
                click.echo(f"  {text_line}")
    deps = issue.get("dependencies") or []
    if deps:
        click.echo(f"\nDependencies ({len(deps)}):")
        for dep in deps:
            click.echo(f"  {issue['id']} depends on {dep['depends_on_id']}  ({dep['type']})")
    if issue.get("dependent_count"):
        click.echo(f"\nDependents: {issue['dependent_count']}")
    comments = issue.get("comments") or []
    if comments:
        click.echo(f"\nComments ({len(comments)}):")
        for comment in comments:
            _print_comment(comment)


def _by(when: str | None, who: str | None) -> str | None:
    if when and who:
        return f"{when} by {who}"
    return when or who


def _join(*parts: str | None) -> str | None:
    present = [p for p in parts if p]
    return " ".join(present) if present else None


def _print_comment(comment: dict) -> None:
    click.echo(f"  [{comment.get('created_at') or '?'}] {comment.get('author') or '?'}:")
    for text_line in str(comment.get("text", "")).splitlines() or [""]:
        click.echo(f"    {text_line}")


def _say(text: Callable[[Any], str]) -> Callable[[Any], None]:
    return lambda result: click.echo(text(result))


# --------------------------------------------------------------------- the group


@click.group("tracker")
def tracker_group() -> None:
    """Work the issue tracker by hand (bd's commands, flags and JSON shapes).

    The database is .beads/mesh.db of the enclosing workspace unless
    mesh --db PATH (or env MESH_DB) names another; mesh --actor NAME
    (or env MESH_ACTOR) says who writes.
    """


@tracker_group.command("init")
@click.option("--prefix", help="Issue id prefix (default: issue-prefix of .beads/config.yaml, else 'bd').")
@_json_option
def init_cmd(prefix: str | None, as_json: bool) -> None:
    """Create the tracker database (.beads/mesh.db here, or mesh --db PATH)."""
    settings = _settings()

    def work() -> dict:
        db_path = settings.get("db") or os.environ.get("MESH_DB")
        tracker = Tracker.init(Path.cwd(), prefix=prefix, actor=settings.get("actor"), db_path=db_path)
        try:
            return tracker.where()
        finally:
            tracker.close()

    result = _guard(as_json, work)
    if as_json:
        _print_json(result)
    else:
        click.echo(f"Initialized tracker at {result['database_path']} (prefix: {result['prefix']})")


@tracker_group.command("create")
@click.argument("title")
@click.option("-t", "--type", "issue_type", default="task", show_default=True,
              help="Issue type: task, bug, feature, epic, chore, gate, agent or role.")
@click.option("-p", "--priority", default="2", show_default=True, help="Priority 0 (highest) to 4; P0-P4 accepted.")
@click.option("-l", "--label", "labels", multiple=True, help="Label to add (repeatable, or comma-separated).")
@click.option("--parent", help="Parent issue: the new id is <parent>.<n>, linked parent-child.")
@click.option("-d", "--description", default="", help="Description text.")
@click.option("--design", default="", help="Design notes.")
@click.option("--acceptance", default="", help="Acceptance criteria.")
@click.option("--notes", default="", help="Free-form notes.")
@click.option("-a", "--assignee", help="Assignee.")
@_json_option
def create_cmd(title: str, issue_type: str, priority: str, labels: tuple[str, ...], parent: str | None,
               description: str, design: str, acceptance: str, notes: str, assignee: str | None,
               as_json: bool) -> None:
    """Create an issue and print it."""
    _run(
        as_json,
        lambda t: t.create(title, issue_type=issue_type, priority=priority, labels=_split_csv(labels),
                           parent=parent, description=description, design=design,
                           acceptance_criteria=acceptance, notes=notes, assignee=assignee),
        _say(lambda issue: f"Created {issue['id']}: {issue['title']}"),
    )


@tracker_group.command("show")
@click.argument("issue_id")
@_json_option
def show_cmd(issue_id: str, as_json: bool) -> None:
    """Show one issue with its fields, labels, dependencies and comments."""
    _run(as_json, lambda t: t.get(issue_id, comments=True), _print_issue_block)


@tracker_group.command("list")
@click.option("-s", "--status", help="Only these statuses (comma-separated, e.g. open,in_progress).")
@click.option("-l", "--label", "labels", multiple=True, help="Only issues with this label (repeatable: all must match).")
@click.option("-t", "--type", "issue_type", help="Only issues of this type.")
@click.option("--parent", help="Only direct children of this issue.")
@click.option("-a", "--assignee", help="Only issues assigned to this name.")
@click.option("--all", "include_closed", is_flag=True, help="Include closed (and tombstoned) issues.")
@click.option("-n", "--limit", type=int, default=0, show_default=True, help="At most N issues (0 = all).")
@_json_option
def list_cmd(status: str | None, labels: tuple[str, ...], issue_type: str | None, parent: str | None,
             assignee: str | None, include_closed: bool, limit: int, as_json: bool) -> None:
    """List issues, ordered by priority, creation time and id (closed ones only with --all)."""
    statuses = [s.strip() for s in status.split(",") if s.strip()] if status else None
    _run(
        as_json,
        lambda t: t.list(status=statuses, labels=_split_csv(labels), issue_type=issue_type, parent=parent,
                         assignee=assignee, include_closed=include_closed, limit=limit or None),
        _print_issues("No issues found."),
    )


@tracker_group.command("ready")
@click.option("-l", "--label", "labels", multiple=True, help="Only issues with this label (repeatable: all must match).")
@click.option("-t", "--type", "issue_type",
              help="Only this type; needed to see non-work types (gate, agent, role, molecule, ...).")
@click.option("--parent", help="Only descendants of this issue (epic scope).")
@click.option("-n", "--limit", type=int, default=10, show_default=True, help="At most N issues (0 = all).")
@_json_option
def ready_cmd(labels: tuple[str, ...], issue_type: str | None, parent: str | None, limit: int,
              as_json: bool) -> None:
    """List ready work: open, unblocked, not deferred, by priority then age."""
    _run(
        as_json,
        lambda t: t.ready(labels=_split_csv(labels), issue_type=issue_type, parent=parent, limit=limit or None),
        _print_issues("No ready work."),
    )


@tracker_group.command("update")
@click.argument("issue_id")
@click.option("-s", "--status", help="New status: open, in_progress, blocked, deferred, closed, pinned or hooked.")
@click.option("-a", "--assignee", help="New assignee ('' clears it).")
@click.option("--claim", is_flag=True,
              help="Atomically set status in_progress and assignee to the actor; fails if someone else holds it.")
@click.option("-p", "--priority", help="New priority 0-4.")
@click.option("--title", help="New title.")
@click.option("-d", "--description", help="New description.")
@click.option("--design", help="New design notes.")
@click.option("--acceptance", help="New acceptance criteria.")
@click.option("--notes", help="New notes.")
@_json_option
def update_cmd(issue_id: str, status: str | None, assignee: str | None, claim: bool, priority: str | None,
               title: str | None, description: str | None, design: str | None, acceptance: str | None,
               notes: str | None, as_json: bool) -> None:
    """Change fields of an issue, or claim it with --claim."""
    if claim and (status is not None or assignee is not None):
        raise click.UsageError("--claim sets status and assignee itself; do not combine it with --status/--assignee")
    changes = {key: value for key, value in (
        ("status", status), ("assignee", assignee), ("priority", priority), ("title", title),
        ("description", description), ("design", design), ("acceptance_criteria", acceptance), ("notes", notes),
    ) if value is not None}

    def action(t: Tracker) -> dict:
        if claim:
            # Claim and the other changes commit together or not at all.
            with t.transaction():
                claimed = t.claim(issue_id)
                return t.update(issue_id, **changes) if changes else claimed
        if not changes:
            raise InvalidValueError("nothing to update (give --status, --assignee, --claim, --priority, ...)")
        return t.update(issue_id, **changes)

    verb = "Claimed" if claim else "Updated"
    _run(as_json, action, _say(lambda issue: f"{verb} {_issue_line(issue)}"))


@tracker_group.command("close")
@click.argument("issue_id")
@click.option("-r", "--reason", default="", help="Why it is closed (stored as close_reason).")
@click.option("-f", "--force", is_flag=True, help="Close even while blocked by open issues.")
@_json_option
def close_cmd(issue_id: str, reason: str, force: bool, as_json: bool) -> None:
    """Close an issue; refused while it has open blockers unless --force."""
    _run(as_json, lambda t: t.close_issue(issue_id, reason=reason, force=force),
         _say(lambda issue: f"Closed {issue['id']}" + (f": {issue['close_reason']}" if issue.get("close_reason") else "")))


@tracker_group.command("reopen")
@click.argument("issue_id")
@_json_option
def reopen_cmd(issue_id: str, as_json: bool) -> None:
    """Reopen a closed issue."""
    _run(as_json, lambda t: t.reopen(issue_id), _say(lambda issue: f"Reopened {issue['id']}"))


# --------------------------------------------------------------------- comments


class _DefaultCommandGroup(click.Group):
    """A group whose first argument, when it names no subcommand, goes to a default one.

    ``comments ID`` lists (like ``bd comments ID``) while ``comments add ID TEXT`` adds.
    """

    default_command = "show"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = next((a for a in args if not a.startswith("-")), None)
        if first is not None and first not in self.commands:
            args = [self.default_command, *args]
        elif first is None and args and not set(args) & {"--help", "-h"}:
            # Options only (e.g. "comments --json"): the default command reports the missing ID.
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@tracker_group.group("comments", cls=_DefaultCommandGroup)
def comments_group() -> None:
    """List an issue's comments (comments ID) or add one (comments add ID TEXT)."""


@comments_group.command("show")
@click.argument("issue_id")
@_json_option
def comments_show_cmd(issue_id: str, as_json: bool) -> None:
    """List the comments of an issue, oldest first (the default: comments ID)."""

    def human(comments: list[dict]) -> None:
        if not comments:
            click.echo(f"No comments on {issue_id}.")
        for comment in comments:
            _print_comment(comment)

    _run(as_json, lambda t: t.comments(issue_id), human)


@comments_group.command("add")
@click.argument("issue_id")
@click.argument("text")
@click.option("--author", help="Who wrote it (default: the actor).")
@_json_option
def comments_add_cmd(issue_id: str, text: str, author: str | None, as_json: bool) -> None:
    """Add a comment to an issue."""
    _run(as_json, lambda t: t.add_comment(issue_id, text, author=author),
         _say(lambda comment: f"Comment {comment['id']} added to {comment['issue_id']}"))


# --------------------------------------------------------------------- dependencies and labels


@tracker_group.group("dep")
def dep_group() -> None:
    """Add or remove dependencies (ISSUE depends on DEPENDS_ON)."""


@dep_group.command("add")
@click.argument("issue_id", metavar="ISSUE")
@click.argument("depends_on", metavar="DEPENDS_ON")
@click.option("-t", "--type", "dep_type", default="blocks", show_default=True,
              help="blocks, parent-child, related, discovered-from, tracks, ... (only blocks and parent-child affect ready work).")
@_json_option
def dep_add_cmd(issue_id: str, depends_on: str, dep_type: str, as_json: bool) -> None:
    """Make ISSUE depend on DEPENDS_ON; refused if either is missing or it would close a cycle."""

    def action(t: Tracker) -> dict:
        dep = t.add_dependency(issue_id, depends_on, dep_type)
        return {"status": "added", "issue_id": dep["issue_id"], "depends_on_id": dep["depends_on_id"],
                "type": dep["type"]}

    _run(as_json, action,
         _say(lambda r: f"Added dependency: {r['issue_id']} depends on {r['depends_on_id']} ({r['type']})"))


@dep_group.command("remove")
@click.argument("issue_id", metavar="ISSUE")
@click.argument("depends_on", metavar="DEPENDS_ON")
@click.option("-t", "--type", "dep_type", help="Remove only the edge of this type (default: every type).")
@_json_option
def dep_remove_cmd(issue_id: str, depends_on: str, dep_type: str | None, as_json: bool) -> None:
    """Remove the dependency of ISSUE on DEPENDS_ON."""

    def action(t: Tracker) -> dict:
        t.remove_dependency(issue_id, depends_on, dep_type)
        return {"status": "removed", "issue_id": issue_id, "depends_on_id": depends_on}

    _run(as_json, action,
         _say(lambda r: f"Removed dependency: {r['issue_id']} no longer depends on {r['depends_on_id']}"))


@tracker_group.group("label")
def label_group() -> None:
    """Add or remove labels."""


@label_group.command("add")
@click.argument("issue_id")
@click.argument("label")
@_json_option
def label_add_cmd(issue_id: str, label: str, as_json: bool) -> None:
    """Add LABEL to an issue."""

    def action(t: Tracker) -> dict:
        t.add_label(issue_id, label)
        return {"status": "added", "issue_id": issue_id, "label": label}

    _run(as_json, action, _say(lambda r: f"Added label '{r['label']}' to {r['issue_id']}"))


@label_group.command("remove")
@click.argument("issue_id")
@click.argument("label")
@_json_option
def label_remove_cmd(issue_id: str, label: str, as_json: bool) -> None:
    """Remove LABEL from an issue."""

    def action(t: Tracker) -> dict:
        t.remove_label(issue_id, label)
        return {"status": "removed", "issue_id": issue_id, "label": label}

    _run(as_json, action, _say(lambda r: f"Removed label '{r['label']}' from {r['issue_id']}"))


# --------------------------------------------------------------------- gates


@tracker_group.group("gate")
def gate_group() -> None:
    """Gates: issues of type gate that block a waiting issue until resolved."""


@gate_group.command("create")
@click.argument("title")
@click.option("--blocks", "blocks", required=True, help="The issue that waits on this gate.")
@click.option("--await-type", default="human", show_default=True, help="What resolves it: human, timer or ci.")
@click.option("--await-id", help="What is awaited (a run id, a PR, ...).")
@click.option("--timeout", help="For timer gates: how long, e.g. 30m, 2h, 1d (stored in nanoseconds).")
@_json_option
def gate_create_cmd(title: str, blocks: str, await_type: str, await_id: str | None, timeout: str | None,
                    as_json: bool) -> None:
    """Create a gate that blocks an issue."""

    def action(t: Tracker) -> dict:
        timeout_ns = parse_duration(timeout) if timeout else None
        return t.gate_create(title, blocks=blocks, await_type=await_type, timeout_ns=timeout_ns, await_id=await_id)

    _run(as_json, action, _say(lambda gate: f"Created gate {gate['id']} blocking {blocks}"))


@gate_group.command("resolve")
@click.argument("gate_id", metavar="ID")
@click.option("-r", "--reason", default="resolved", show_default=True, help="Why it is resolved.")
@_json_option
def gate_resolve_cmd(gate_id: str, reason: str, as_json: bool) -> None:
    """Resolve (close) a gate, unblocking what waits on it."""
    _run(as_json, lambda t: t.gate_resolve(gate_id, reason=reason), _say(lambda gate: f"Resolved gate {gate['id']}"))


@gate_group.command("check")
@_json_option
def gate_check_cmd(as_json: bool) -> None:
    """Resolve timer gates whose time has come; prints the gates resolved."""

    def human(gates: list[dict]) -> None:
        if not gates:
            click.echo("No gate due.")
        for gate in gates:
            click.echo(f"Resolved gate {gate['id']}: {gate['title']}")

    _run(as_json, lambda t: t.gate_check(), human)


# --------------------------------------------------------------------- slots and agents


@tracker_group.group("slot")
def slot_group() -> None:
    """Agent slots: hook (the agent's current work, 0..1) and role."""


@slot_group.command("set")
@click.argument("agent")
@click.argument("slot", metavar="hook|role")
@click.argument("issue_id", metavar="ISSUE")
@_json_option
def slot_set_cmd(agent: str, slot: str, issue_id: str, as_json: bool) -> None:
    """Attach ISSUE to an agent's slot; the hook is refused while it holds another issue."""

    def action(t: Tracker) -> dict:
        t.slot_set(agent, slot, issue_id)
        return {"agent": agent, "slot": slot, "bead": issue_id}

    _run(as_json, action, _say(lambda r: f"Set {r['agent']}.{r['slot']} = {r['bead']}"))


@slot_group.command("clear")
@click.argument("agent")
@click.argument("slot", metavar="hook|role")
@_json_option
def slot_clear_cmd(agent: str, slot: str, as_json: bool) -> None:
    """Empty an agent's slot."""

    def action(t: Tracker) -> dict:
        t.slot_clear(agent, slot)
        return {"agent": agent, "slot": slot, "bead": None}

    _run(as_json, action, _say(lambda r: f"Cleared {r['agent']}.{r['slot']}"))


@slot_group.command("show")
@click.argument("agent")
@_json_option
def slot_show_cmd(agent: str, as_json: bool) -> None:
    """Show an agent's slots."""

    def action(t: Tracker) -> dict:
        slots = t.slot_show(agent)
        return {"agent": slots["agent"], "slots": {"hook": slots["hook"], "role": slots["role"]}}

    def human(r: dict) -> None:
        click.echo(f"Agent: {r['agent']}\nSlots:")
        for name in ("hook", "role"):
            click.echo(f"  {name}: {r['slots'][name] or '(empty)'}")

    _run(as_json, action, human)


@tracker_group.group("agent")
def agent_group() -> None:
    """Agent issues (type agent)."""


@agent_group.command("state")
@click.argument("agent")
@click.argument("state")
@_json_option
def agent_state_cmd(agent: str, state: str, as_json: bool) -> None:
    """Set an agent's state: idle, spawning, running, working, stuck, done, stopped or dead."""

    def action(t: Tracker) -> dict:
        issue = t.agent_state(agent, state)
        return {"agent": issue["id"], "agent_state": issue.get("agent_state"),
                "last_activity": issue.get("last_activity")}

    _run(as_json, action, _say(lambda r: f"{r['agent']} state={r['agent_state']}"))


# --------------------------------------------------------------------- workspace


@tracker_group.command("where")
@_json_option
def where_cmd(as_json: bool) -> None:
    """Show which workspace and database the tracker uses."""
    _run(as_json, lambda t: t.where(),
         _say(lambda r: f"{r['path']}\n  database: {r['database_path']}\n  prefix: {r['prefix']}"))


@tracker_group.command("status")
@_json_option
def status_cmd(as_json: bool) -> None:
    """Count issues by status, and how many are ready."""

    def human(r: dict) -> None:
        for key, value in r["summary"].items():
            click.echo(f"{key.replace('_', ' ').capitalize() + ':':<22}{value}")

    _run(as_json, lambda t: t.status(), human)


@tracker_group.command("doctor")
@click.option("--fix", is_flag=True, help="Repair what can be repaired safely (sort keys, orphan rows, WAL).")
@_json_option
def doctor_cmd(fix: bool, as_json: bool) -> None:
    """Check the database (integrity, foreign keys, WAL, sort keys); exit 1 if a problem is left."""

    def human(r: dict) -> None:
        for check in r["checks"]:
            click.echo(f"{'ok  ' if check['ok'] else 'FAIL'}  {check['name']}: {check['detail']}")
        for fixed in r["fixed"]:
            click.echo(f"fixed: {fixed}")

    result = _run(as_json, lambda t: t.doctor(fix=fix), human)
    if not result["ok"]:
        raise click.exceptions.Exit(EXIT_USER_ERROR)


@tracker_group.command("import")
@click.argument("file", metavar="FILE.jsonl", type=click.Path(dir_okay=False))
@_json_option
def import_cmd(file: str, as_json: bool) -> None:
    """Import a beads JSONL file: new ids are created, known ones updated when newer."""
    from .jsonl import import_jsonl  # only this command needs the import code

    def human(report: dict) -> None:
        click.echo(
            f"Imported {file}: {report['created']} created, {report['updated']} updated, "
            f"{report['unchanged']} unchanged, {report['skipped_older']} skipped (older), "
            f"{len(report['warnings'])} warning(s)"
        )

    report = _run(as_json, lambda t: import_jsonl(t, file).to_dict(), human)
    for warning in report["warnings"]:
        click.echo(f"{file}:{warning['line']}: {warning['code']}: {warning['message']}", err=True)


@tracker_group.command("export")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to this file (default: stdout).")
@_json_option
def export_cmd(output: str | None, as_json: bool) -> None:
    """Export every issue as beads JSONL, one per line, sorted by id.

    With -o and --json, prints {"exported", "path"}; to stdout the lines themselves are the output.
    """
    from .jsonl import export_jsonl  # only this command needs the export code

    def action(t: Tracker) -> dict:
        if not output:
            return {"exported": export_jsonl(t, sys.stdout), "path": "-"}
        target = Path(output)
        partial = target.with_name(f".{target.name}.partial")
        # Write beside the target and rename, so a reader never sees half a file.
        with open(partial, "w", encoding="utf-8", newline="\n") as fh:
            count = export_jsonl(t, fh)
        os.replace(partial, target)
        return {"exported": count, "path": str(target)}

    result = _guard(as_json, lambda: _with_tracker(action))
    if output:
        if as_json:
            _print_json(result)
        else:
            click.echo(f"Exported {result['exported']} issue(s) to {result['path']}")
