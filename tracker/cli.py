"""``mesh tracker``: the command-line face of the tracker library, with ``bd``'s names.

Each command parses its options and calls one ``Tracker`` method; the library
does the work. ``--json`` prints what bd v0.50.3 prints for the same command
(``bd_compat`` builds those shapes); errors become a one-line message on stderr
(``{"error", "code"}`` with ``--json``), exit 1 for a user error and 4 when the
workspace or its database is unavailable; tracker text is printed inert (``cli_io``). bd's global flags (``--json``,
``--db``, ``--actor``, ``--readonly``, ``-q``, and its sync and daemon flags,
which have nothing to do here) are accepted before or after any subcommand, as
bd's persistent flags are. Nothing here may import a heavy module: ``mesh
tracker ready`` is on the orchestrator's hot path and must start in well under
a quarter of a second.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from . import bd_compat as bd
from . import cli_admin, cli_deps, cli_labels, cli_search
from .bd_hot import list_issues, ready_issues, show_issues
from .bd_views import LIST_SORTS, resolve_id, resolve_ids
from .cli_flags import BdGroup, add_global_flags
from .cli_io import (EXIT_UNAVAILABLE, EXIT_USER_ERROR, echo, guard, issue_line, json_option, print_issues, print_json,
                     run_action, say, settings, split_csv, with_tracker, writes)
from .errors import InvalidValueError
from .model import parse_duration
from .store import Tracker

__all__ = ["tracker_group", "EXIT_USER_ERROR", "EXIT_UNAVAILABLE"]


# --------------------------------------------------------------------- plumbing


def _print_issue_block(issue: dict) -> None:
    """``show``'s readable form: header, fields, text sections, labels, dependencies, comments."""
    echo(f"{issue['id']}: {issue['title']}")
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
            echo(f"{name + ':':<16}{value}")
    if issue.get("labels"):
        echo(f"{'Labels:':<16}{', '.join(issue['labels'])}")
    if issue.get("metadata"):
        echo(f"{'Metadata:':<16}{json.dumps(issue['metadata'], ensure_ascii=False)}")
    for name, key in (("Description", "description"), ("Design", "design"),
                      ("Acceptance criteria", "acceptance_criteria"), ("Notes", "notes")):
        if issue.get(key):
            echo(f"\n{name}:")
            for text_line in str(issue[key]).splitlines():
                echo(f"  {text_line}")
    deps = issue.get("dependencies") or []
    if deps:
        echo(f"\nDependencies ({len(deps)}):")
        for dep in deps:
            echo(f"  {issue['id']} depends on {dep['depends_on_id']}  ({dep['type']})")
    if issue.get("dependent_count"):
        echo(f"\nDependents: {issue['dependent_count']}")
    comments = issue.get("comments") or []
    if comments:
        echo(f"\nComments ({len(comments)}):")
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
    echo(f"  [{comment.get('created_at') or '?'}] {comment.get('author') or '?'}:")
    for text_line in str(comment.get("text", "")).splitlines() or [""]:
        echo(f"    {text_line}")


# --------------------------------------------------------------------- the group


def _mesh_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # only the version query needs it

    try:
        return version("beads-mesh")
    except PackageNotFoundError:
        return "unknown"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        echo(bd.version_line(_mesh_version()))
        ctx.exit()


@click.group("tracker", cls=BdGroup)
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print bd's version line (the bd release whose commands this answers) and exit.")
def tracker_group() -> None:
    """Work the issue tracker by hand (bd's commands, flags and JSON shapes).

    The database is .beads/mesh.db of the enclosing workspace unless
    --db PATH (or env MESH_DB) names another; --actor NAME (or env
    MESH_ACTOR) says who writes. bd's global flags work before or after
    any subcommand.
    """


@writes
@tracker_group.command("create")
@click.argument("title")
@click.option("-t", "--type", "issue_type", default="task", show_default=True,
              help="Issue type: task, bug, feature, epic, chore, gate, agent or role.")
@click.option("-p", "--priority", default="2", show_default=True, help="Priority 0 (highest) to 4; P0-P4 accepted.")
@click.option("-l", "--label", "--labels", "labels", multiple=True,
              help="Label to add (repeatable, or comma-separated; --labels is bd's name).")
@click.option("--parent", help="Parent issue: the new id is <parent>.<n>, linked parent-child.")
@click.option("-d", "--description", default="", help="Description text.")
@click.option("--design", default="", help="Design notes.")
@click.option("--acceptance", default="", help="Acceptance criteria.")
@click.option("--notes", default="", help="Free-form notes.")
@click.option("-a", "--assignee", help="Assignee.")
@click.option("--external-ref", help="External reference (e.g. gh-9, jira-ABC).")
@click.option("--id", "explicit_id", help="Use this id instead of a generated one (not with --parent).")
@click.option("--deps", multiple=True,
              help="Dependencies: ID or TYPE:ID, comma-separated or repeated (default type blocks).")
@click.option("--silent", is_flag=True, help="Print only the new id (for scripts).")
@json_option
def create_cmd(title: str, issue_type: str, priority: str, labels: tuple[str, ...], parent: str | None,
               description: str, design: str, acceptance: str, notes: str, assignee: str | None,
               external_ref: str | None, explicit_id: str | None, deps: tuple[str, ...], silent: bool,
               as_json: bool) -> None:
    """Create an issue and print it."""

    def action(t: Tracker) -> dict:
        if explicit_id and parent:
            raise InvalidValueError("cannot specify both --id and --parent")
        extra = {"external_ref": external_ref} if external_ref else {}
        # The issue and its dependencies exist together or not at all.
        with t.transaction():
            issue = t.create(title, issue_type=issue_type, priority=priority, labels=split_csv(labels),
                             parent=parent, description=description, design=design,
                             acceptance_criteria=acceptance, notes=notes, assignee=assignee,
                             issue_id=explicit_id, **extra)
            for spec in split_csv(deps):
                dep_type, _, target = spec.partition(":") if ":" in spec else ("blocks", "", spec)
                t.add_dependency(issue["id"], target.strip(), dep_type.strip())
        return bd.issue(t.get(issue["id"]))

    run_action(as_json, action,
         say(lambda issue: issue["id"] if silent else f"Created {issue['id']}: {issue['title']}"))


@tracker_group.command("show")
@click.argument("issue_ids", metavar="ID...", nargs=-1, required=True)
@json_option
def show_cmd(issue_ids: tuple[str, ...], as_json: bool) -> None:
    """Show issues with their fields, labels, dependencies, dependents and comments.

    With --json an array (as bd prints it), one object per id, each with its
    dependencies and dependents as whole issues carrying dependency_type.
    """

    def action(t: Tracker) -> list[dict]:
        if as_json:
            return show_issues(t, issue_ids)
        return [t.get(issue_id, comments=True) for issue_id in resolve_ids(t, issue_ids)]

    def human(issues: list[dict]) -> None:
        for k, issue in enumerate(issues):
            if k:
                echo("")
            _print_issue_block(issue)

    run_action(as_json, action, human)


_priority_filter = click.option("-p", "--priority", type=click.IntRange(0, 4), help="Only issues of this priority.")
_label_any_option = click.option("--label-any", "labels_any", multiple=True,
                                 help="Only issues with at least one of these labels (repeatable, or comma-separated).")


@tracker_group.command("list")
@click.option("-s", "--status", help="Only these statuses (comma-separated, e.g. open,in_progress).")
@click.option("-l", "--label", "labels", multiple=True, help="Only issues with this label (repeatable: all must match).")
@_label_any_option
@click.option("-t", "--type", "issue_type", help="Only issues of this type.")
@_priority_filter
@click.option("--parent", help="Only direct children of this issue.")
@click.option("-a", "--assignee", help="Only issues assigned to this name.")
@click.option("--no-assignee", is_flag=True, help="Only issues assigned to no one.")
@click.option("--title", help="Only issues whose title contains this text (case-insensitive).")
@click.option("--all", "include_closed", is_flag=True, help="Include closed (and tombstoned) issues.")
@click.option("--include-templates", is_flag=True, help="Include template issues (a beads file's is_template).")
@click.option("--include-gates", is_flag=True, help="Include gates (left out unless asked, or --type gate).")
@click.option("--include-infra", is_flag=True, help="Include agents, roles and messages (left out unless asked).")
@click.option("-n", "--limit", type=int, default=50, show_default=True, help="At most N issues (0 = all), as bd.")
@click.option("--sort", "sort_by", type=click.Choice(LIST_SORTS), help="Sort by this field (times newest first).")
@click.option("-r", "--reverse", is_flag=True, help="Reverse the --sort order.")
@click.option("--tree", is_flag=False, flag_value="true", default="false", hidden=True, expose_value=False,
              help="bd's tree view switch (--tree=false); the output here is always a flat list.")
@json_option
def list_cmd(status: str | None, labels: tuple[str, ...], labels_any: tuple[str, ...], issue_type: str | None,
             priority: int | None, parent: str | None, assignee: str | None, no_assignee: bool, title: str | None,
             include_closed: bool, include_templates: bool, include_gates: bool, include_infra: bool, limit: int,
             sort_by: str | None, reverse: bool, as_json: bool) -> None:
    """List issues, ordered by priority, creation time and id, or by --sort (which comes before
    --limit); closed ones only with --all; templates, gates, agents and roles only when asked (as bd)."""
    def action(t: Tracker) -> list[dict]:
        return list_issues(t, status=status, labels=split_csv(labels), labels_any=split_csv(labels_any),
                           issue_type=issue_type, priority=priority, parent=parent, assignee=assignee,
                           no_assignee=no_assignee, title=title, include_closed=include_closed, limit=limit,
                           sort_by=sort_by, reverse=reverse, include_templates=include_templates,
                           include_gates=include_gates, include_infra=include_infra)

    def show(issues: list[dict]) -> None:
        print_issues("No issues found.")(issues)
        if limit and len(issues) == limit:  # bd's hint, on stderr as bd prints it
            click.echo(f"\nShowing {limit} issues (use --limit 0 for all)", err=True)

    run_action(as_json, action, show)


@tracker_group.command("ready")
@click.option("-l", "--label", "labels", multiple=True, help="Only issues with this label (repeatable: all must match).")
@_label_any_option
@click.option("-t", "--type", "issue_type",
              help="Only this type; needed to see non-work types (gate, agent, role, molecule, ...).")
@_priority_filter
@click.option("-a", "--assignee", help="Only issues assigned to this name.")
@click.option("-u", "--unassigned", is_flag=True, help="Only issues assigned to no one.")
@click.option("-s", "--sort", "sort_policy", type=click.Choice(bd.READY_SORTS),
              help="priority (the default here: priority, then age), oldest, or hybrid (bd's default: "
                   "the last 48 hours by priority, older work by age).")
@click.option("--parent", help="Only descendants of this issue (epic scope).")
@click.option("-n", "--limit", type=int, default=10, show_default=True, help="At most N issues (0 = all).")
@json_option
def ready_cmd(labels: tuple[str, ...], labels_any: tuple[str, ...], issue_type: str | None, priority: int | None,
              assignee: str | None, unassigned: bool, sort_policy: str | None, parent: str | None, limit: int,
              as_json: bool) -> None:
    """List ready work: open, unblocked, not deferred, by priority then age."""
    run_action(
        as_json,
        lambda t: ready_issues(t, labels=split_csv(labels), labels_any=split_csv(labels_any), issue_type=issue_type,
                               parent=parent, priority=priority, assignee=assignee, unassigned=unassigned,
                               sort=sort_policy, limit=limit),
        print_issues("No ready work."),
    )


def _print_each(text: Callable[[dict], str]) -> Callable[[list[dict]], None]:
    def show(issues: list[dict]) -> None:
        for issue in issues:
            echo(text(issue))

    return show


@writes
@tracker_group.command("update")
@click.argument("issue_ids", metavar="ID...", nargs=-1, required=True)
@click.option("-s", "--status", help="New status: open, in_progress, blocked, deferred, closed, pinned or hooked.")
@click.option("-a", "--assignee", help="New assignee ('' clears it).")
@click.option("--claim", is_flag=True,
              help="Atomically set status in_progress and assignee to the actor; fails if someone else holds it.")
@click.option("-p", "--priority", help="New priority 0-4.")
@click.option("--title", help="New title.")
@click.option("-t", "--type", "issue_type", help="New issue type.")
@click.option("-d", "--description", help="New description.")
@click.option("--design", help="New design notes.")
@click.option("--acceptance", help="New acceptance criteria.")
@click.option("--acceptance-criteria", "acceptance_alias", hidden=True, help="bd's older name of --acceptance.")
@click.option("--notes", help="New notes.")
@click.option("--append-notes", help="Text to add to the notes on a new line.")
@click.option("--external-ref", help="New external reference ('' clears it).")
@click.option("--parent", help="New parent: the parent-child edge moves to it ('' removes it; the id stays).")
@click.option("--set-labels", "set_labels", multiple=True,
              help="Replace the labels with these (repeatable, or comma-separated; '' clears them).")
@click.option("--add-label", "add_labels", multiple=True, help="Label to add (repeatable, or comma-separated).")
@click.option("--remove-label", "remove_labels", multiple=True,
              help="Label to remove (repeatable, or comma-separated; one the issue lacks is ignored).")
@json_option
def update_cmd(issue_ids: tuple[str, ...], status: str | None, assignee: str | None, claim: bool,
               priority: str | None, title: str | None, issue_type: str | None, description: str | None,
               design: str | None, acceptance: str | None, acceptance_alias: str | None, notes: str | None,
               append_notes: str | None, external_ref: str | None, parent: str | None, set_labels: tuple[str, ...],
               add_labels: tuple[str, ...], remove_labels: tuple[str, ...], as_json: bool) -> None:
    """Change fields of issues, or claim them with --claim; with --json an array of the issues.
    Labels as bd's update takes them: --set-labels first, then --add-label, then --remove-label."""
    if claim and (status is not None or assignee is not None):
        raise click.UsageError("--claim sets status and assignee itself; do not combine it with --status/--assignee")
    if notes is not None and append_notes is not None:
        raise click.UsageError("give --notes or --append-notes, not both")
    acceptance = acceptance if acceptance is not None else acceptance_alias
    changes = {key: value for key, value in (
        ("status", status), ("assignee", assignee), ("priority", priority), ("title", title),
        ("issue_type", issue_type), ("description", description), ("design", design),
        ("acceptance_criteria", acceptance), ("notes", notes), ("external_ref", external_ref),
    ) if value is not None}

    wanted, added, removed = (cli_labels.label_list(given) for given in (set_labels, add_labels, remove_labels))

    def update_one(t: Tracker, issue_id: str) -> dict:
        if claim:
            t.claim(issue_id)
        own = dict(changes)
        if append_notes is not None:
            current = t.get(issue_id).get("notes")
            own["notes"] = f"{current}\n{append_notes}" if current else append_notes
        if own:
            t.update(issue_id, **own)
        if set_labels or added or removed:
            cli_labels.relabel(t, issue_id, wanted if set_labels else None, added, removed)
        if parent is not None:
            cli_deps.reparent(t, issue_id, resolve_id(t, parent) if parent else None)
        return bd.issue(t.get(issue_id))

    def action(t: Tracker) -> list[dict]:
        if not (claim or changes or append_notes is not None or set_labels or added or removed or parent is not None):
            raise InvalidValueError("nothing to update (give --status, --assignee, --claim, --priority, ...)")
        # Every issue's claim and changes commit together or not at all.
        with t.transaction():
            return [update_one(t, issue_id) for issue_id in resolve_ids(t, issue_ids)]

    verb = "Claimed" if claim else "Updated"
    run_action(as_json, action, _print_each(lambda issue: f"{verb} {issue_line(issue)}"))




@writes
@tracker_group.command("close")
@click.argument("issue_ids", metavar="ID...", nargs=-1, required=True)
@click.option("-r", "--reason", default="", help="Why it is closed (stored as close_reason).")
@click.option("-f", "--force", is_flag=True, help="Close even while blocked by open issues.")
@json_option
def close_cmd(issue_ids: tuple[str, ...], reason: str, force: bool, as_json: bool) -> None:
    """Close issues (all or none; a closed one again, with the new reason, as bd does); refused
    while one has open blockers unless --force."""

    def action(t: Tracker) -> list[dict]:
        with t.transaction():
            return [bd.issue(t.close_issue(i, reason=reason, force=force)) for i in resolve_ids(t, issue_ids)]

    run_action(as_json, action,
         _print_each(lambda issue: f"Closed {issue['id']}"
                     + (f": {issue['close_reason']}" if issue.get("close_reason") else "")))


@writes
@tracker_group.command("delete")
@click.argument("issue_ids", metavar="ID...", nargs=-1, required=True)
@click.option("-f", "--force", is_flag=True, help="Delete even while other issues depend on it.")
@click.option("--reason", default="", help="Why it is deleted (stored as delete_reason).")
@json_option
def delete_cmd(issue_ids: tuple[str, ...], force: bool, reason: str, as_json: bool) -> None:
    """Delete issues (all or none) as bd does: each becomes a tombstone, kept and exported."""

    def action(t: Tracker) -> list[dict]:
        with t.transaction():
            return [bd.issue(t.delete(issue_id, reason=reason, force=force)) for issue_id in resolve_ids(t, issue_ids)]

    run_action(as_json, action, _print_each(lambda issue: f"Deleted {issue['id']}"))


@writes
@tracker_group.command("reopen")
@click.argument("issue_ids", metavar="ID...", nargs=-1, required=True)
@click.option("-r", "--reason", help="Why it is reopened (added as a comment).")
@json_option
def reopen_cmd(issue_ids: tuple[str, ...], reason: str | None, as_json: bool) -> None:
    """Set issues back to open (all or none): a closed one is reopened, any other one released."""

    def reopen_one(t: Tracker, issue_id: str) -> dict:
        # bd's reopen sets status open whatever it was (cmd/bd/reopen.go:45); beads-mcp
        # sends update --status open there too, so an agent can release work it claimed.
        if t.get(issue_id)["status"] == "closed":
            t.reopen(issue_id)
        else:
            t.update(issue_id, status="open")
        if reason:
            t.add_comment(issue_id, reason)
        return bd.issue(t.get(issue_id))

    def action(t: Tracker) -> list[dict]:
        with t.transaction():
            return [reopen_one(t, issue_id) for issue_id in resolve_ids(t, issue_ids)]

    run_action(as_json, action, _print_each(lambda issue: f"Reopened {issue['id']}" + (f": {reason}" if reason else "")))


# --------------------------------------------------------------------- comments


class _DefaultCommandGroup(BdGroup):
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
@json_option
def comments_show_cmd(issue_id: str, as_json: bool) -> None:
    """List the comments of an issue, oldest first (the default: comments ID)."""

    def human(comments: list[dict]) -> None:
        if not comments:
            echo(f"No comments on {issue_id}.")
        for comment in comments:
            _print_comment(comment)

    run_action(as_json, lambda t: [bd.comment(c) for c in t.comments(resolve_id(t, issue_id))], human)


def _comment_add_command(name: str, group: click.Group, *, hidden: bool) -> None:
    """``comments add`` and bd's older top-level ``comment``: the same command under two names."""

    @writes
    @group.command(name, hidden=hidden)
    @click.argument("issue_id")
    @click.argument("text")
    @click.option("-a", "--author", help="Who wrote it (default: the actor).")
    @json_option
    def add_cmd(issue_id: str, text: str, author: str | None, as_json: bool) -> None:
        """Add a comment to an issue."""
        run_action(as_json, lambda t: bd.comment(t.add_comment(resolve_id(t, issue_id), text, author=author)),
             say(lambda comment: f"Comment {comment['id']} added to {comment['issue_id']}"))


_comment_add_command("add", comments_group, hidden=False)
_comment_add_command("comment", tracker_group, hidden=True)


@writes
@tracker_group.command("note")
@click.argument("issue_id")
@click.argument("text")
@json_option
def note_cmd(issue_id: str, text: str, as_json: bool) -> None:
    """Append TEXT to an issue's notes on a new line (update --append-notes)."""

    def action(t: Tracker) -> dict:
        # Read and write in one transaction, so two notes at once never lose one.
        with t.transaction():
            resolved = resolve_id(t, issue_id)
            current = t.get(resolved).get("notes")
            t.update(resolved, notes=f"{current}\n{text}" if current else text)
        return bd.issue(t.get(resolved))

    run_action(as_json, action, say(lambda issue: f"Appended note to {issue['id']}"))


# --------------------------------------------------------------------- gates


@tracker_group.group("gate")
def gate_group() -> None:
    """Gates: issues of type gate that block a waiting issue until resolved."""


@writes
@gate_group.command("create")
@click.argument("title")
@click.option("--blocks", "blocks", required=True, help="The issue that waits on this gate.")
@click.option("--await-type", default="human", show_default=True, help="What resolves it: human, timer or ci.")
@click.option("--await-id", help="What is awaited (a run id, a PR, ...).")
@click.option("--timeout", help="For timer gates: how long, e.g. 30m, 2h, 1d (stored in nanoseconds).")
@json_option
def gate_create_cmd(title: str, blocks: str, await_type: str, await_id: str | None, timeout: str | None,
                    as_json: bool) -> None:
    """Create a gate that blocks an issue."""

    def action(t: Tracker) -> dict:
        timeout_ns = parse_duration(timeout) if timeout else None
        return t.gate_create(title, blocks=blocks, await_type=await_type, timeout_ns=timeout_ns, await_id=await_id)

    run_action(as_json, action, say(lambda gate: f"Created gate {gate['id']} blocking {blocks}"))


@writes
@gate_group.command("resolve")
@click.argument("gate_id", metavar="ID")
@click.option("-r", "--reason", default="resolved", show_default=True, help="Why it is resolved.")
@json_option
def gate_resolve_cmd(gate_id: str, reason: str, as_json: bool) -> None:
    """Resolve (close) a gate, unblocking what waits on it."""
    run_action(as_json, lambda t: t.gate_resolve(gate_id, reason=reason), say(lambda gate: f"Resolved gate {gate['id']}"))


@writes
@gate_group.command("check")
@json_option
def gate_check_cmd(as_json: bool) -> None:
    """Resolve timer gates whose time has come; prints the gates resolved."""

    def human(gates: list[dict]) -> None:
        if not gates:
            echo("No gate due.")
        for gate in gates:
            echo(f"Resolved gate {gate['id']}: {gate['title']}")

    run_action(as_json, lambda t: t.gate_check(), human)


# --------------------------------------------------------------------- slots and agents


@tracker_group.group("slot")
def slot_group() -> None:
    """Agent slots: hook (the agent's current work, 0..1) and role."""


@writes
@slot_group.command("set")
@click.argument("agent")
@click.argument("slot", metavar="hook|role")
@click.argument("issue_id", metavar="ISSUE")
@json_option
def slot_set_cmd(agent: str, slot: str, issue_id: str, as_json: bool) -> None:
    """Attach ISSUE to an agent's slot; the hook is refused while it holds another issue."""

    def action(t: Tracker) -> dict:
        t.slot_set(agent, slot, issue_id)
        return {"agent": agent, "slot": slot, "bead": issue_id}

    run_action(as_json, action, say(lambda r: f"Set {r['agent']}.{r['slot']} = {r['bead']}"))


@writes
@slot_group.command("clear")
@click.argument("agent")
@click.argument("slot", metavar="hook|role")
@json_option
def slot_clear_cmd(agent: str, slot: str, as_json: bool) -> None:
    """Empty an agent's slot."""

    def action(t: Tracker) -> dict:
        t.slot_clear(agent, slot)
        return {"agent": agent, "slot": slot, "bead": None}

    run_action(as_json, action, say(lambda r: f"Cleared {r['agent']}.{r['slot']}"))


@slot_group.command("show")
@click.argument("agent")
@json_option
def slot_show_cmd(agent: str, as_json: bool) -> None:
    """Show an agent's slots."""

    def action(t: Tracker) -> dict:
        slots = t.slot_show(agent)
        return {"agent": slots["agent"], "slots": {"hook": slots["hook"], "role": slots["role"]}}

    def human(r: dict) -> None:
        echo(f"Agent: {r['agent']}\nSlots:")
        for name in ("hook", "role"):
            echo(f"  {name}: {r['slots'][name] or '(empty)'}")

    run_action(as_json, action, human)


@tracker_group.group("agent")
def agent_group() -> None:
    """Agent issues (type agent)."""


@writes
@agent_group.command("state")
@click.argument("agent")
@click.argument("state")
@json_option
def agent_state_cmd(agent: str, state: str, as_json: bool) -> None:
    """Set an agent's state: idle, spawning, running, working, stuck, done, stopped or dead."""

    def action(t: Tracker) -> dict:
        issue = t.agent_state(agent, state)
        return {"agent": issue["id"], "agent_state": issue.get("agent_state"),
                "last_activity": issue.get("last_activity")}

    run_action(as_json, action, say(lambda r: f"{r['agent']} state={r['agent_state']}"))


# --------------------------------------------------------------------- workspace


@tracker_group.command("where")
@json_option
def where_cmd(as_json: bool) -> None:
    """Show which workspace and database the tracker uses."""
    run_action(as_json, lambda t: t.where(),
         say(lambda r: f"{r['path']}\n  database: {r['database_path']}\n  prefix: {r['prefix']}"))


def _print_statistics(r: dict) -> None:
    for key, value in r["summary"].items():
        label = key.replace("_", " ").capitalize() + ":"
        echo(f"{label:<30}{value:.1f}" if isinstance(value, float) else f"{label:<30}{value}")


@tracker_group.command("status")
@json_option
def status_cmd(as_json: bool) -> None:
    """Counts by state, ready and blocked work, lead time (bd's status/stats)."""
    run_action(as_json, bd.statistics, _print_statistics)


@tracker_group.command("stats")
@json_option
def stats_cmd(as_json: bool) -> None:
    """The same as status (bd's alias)."""
    run_action(as_json, bd.statistics, _print_statistics)


@tracker_group.command("blocked")
@click.option("--parent", help="Only descendants of this issue.")
@json_option
def blocked_cmd(parent: str | None, as_json: bool) -> None:
    """Issues held back: blocked or deferred, or waiting on unfinished work (with what holds them)."""

    def human(issues: list[dict]) -> None:
        if not issues:
            echo("No blocked issues.")
        for issue in issues:
            held = f"  blocked by {', '.join(issue['blocked_by'])}" if issue["blocked_by"] else ""
            echo(issue_line(issue) + held)

    run_action(as_json, lambda t: bd.blocked(t, parent=parent), human)


@tracker_group.group("epic")
def epic_group() -> None:
    """Epics and their children."""


@epic_group.command("status")
@click.option("--eligible-only", is_flag=True, help="Only epics whose children are all closed.")
@json_option
def epic_status_cmd(eligible_only: bool, as_json: bool) -> None:
    """Each open epic with how many of its children are closed."""

    def human(rows: list[dict]) -> None:
        if not rows:
            echo("No open epics.")
        for row in rows:
            mark = "  (all children closed)" if row["eligible_for_close"] else ""
            echo(f"{row['epic']['id']}  {row['closed_children']}/{row['total_children']}  "
                       f"{row['epic']['title']}{mark}")

    run_action(as_json, lambda t: bd.epic_status(t, eligible_only=eligible_only), human)


for _command in (*cli_admin.COMMANDS, *cli_deps.COMMANDS, *cli_labels.COMMANDS, *cli_search.COMMANDS):
    tracker_group.add_command(_command)


@tracker_group.command("quickstart")
def quickstart_cmd() -> None:
    """How to work this tracker with bd's commands."""
    echo(bd.QUICKSTART.format(version=bd.BD_VERSION), nl=False)


@tracker_group.command("version")
@json_option
def version_cmd(as_json: bool) -> None:
    """Print bd's version line: the bd release whose commands and JSON this tracker answers."""
    if as_json:
        print_json(bd.version_object(_mesh_version()))
    else:
        echo(bd.version_line(_mesh_version()))


@writes
@tracker_group.command("import")
@click.argument("file", metavar="FILE.jsonl", type=click.Path(dir_okay=False))
@json_option
def import_cmd(file: str, as_json: bool) -> None:
    """Import a beads JSONL file: new ids are created, known ones updated when newer."""
    from .jsonl import import_jsonl  # only this command needs the import code

    def human(report: dict) -> None:
        echo(
            f"Imported {file}: {report['created']} created, {report['updated']} updated, "
            f"{report['unchanged']} unchanged, {report['skipped_older']} skipped (older), "
            f"{len(report['warnings'])} warning(s)"
        )

    report = run_action(as_json, lambda t: import_jsonl(t, file).to_dict(), human)
    for warning in [] if settings().get("quiet") else report["warnings"]:
        echo(f"{file}:{warning['line']}: {warning['code']}: {warning['message']}", err=True)


@tracker_group.command("export")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to this file (default: stdout).")
@json_option
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

    result = guard(as_json, lambda: with_tracker(action))
    if output:
        if as_json:
            print_json(result)
        else:
            echo(f"Exported {result['exported']} issue(s) to {result['path']}")


add_global_flags(tracker_group, top=True)
