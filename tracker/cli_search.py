"""``mesh tracker`` views of many issues beyond ``list`` and ``ready``: ``search``, ``count``,
``stale``, ``children`` and ``duplicates``, with bd v0.50.3's flags and ``--json`` shapes
(cmd/bd/search.go, count.go, stale.go, children.go, duplicates.go; the work is
``bd_views``). ``tracker.cli`` adds them to its group (``COMMANDS``)."""

from __future__ import annotations

import click

from . import bd_compat as bd
from . import bd_views as views
from .cli_io import echo, issue_line, json_option, print_issues, run_action, split_csv
from .store import Tracker

__all__ = ["COMMANDS"]

_status = click.option("-s", "--status", help="Only this status (comma-separated for several; default: every one).")
_assignee = click.option("-a", "--assignee", help="Only issues assigned to this name.")
_type = click.option("-t", "--type", "issue_type", help="Only issues of this type.")
_label = click.option("-l", "--label", "labels", multiple=True,
                      help="Only issues with this label (repeatable or comma-separated: all must match).")
_label_any = click.option("--label-any", "labels_any", multiple=True,
                          help="Only issues with at least one of these labels (repeatable or comma-separated).")
_sort = click.option("--sort", "sort_by", type=click.Choice(views.LIST_SORTS),
                     help="Sort by this field (times newest first).")
_reverse = click.option("-r", "--reverse", is_flag=True, help="Reverse the --sort order.")


@click.command("search")
@click.argument("words", metavar="[QUERY]", nargs=-1)
@click.option("--query", "query_option", help="The search text (instead of the argument).")
@_status
@_assignee
@_type
@_label
@_label_any
@click.option("-n", "--limit", type=int, default=50, show_default=True, help="At most N issues (0 = all).")
@_sort
@_reverse
@json_option
def search_cmd(words: tuple[str, ...], query_option: str | None, status: str | None, assignee: str | None,
               issue_type: str | None, labels: tuple[str, ...], labels_any: tuple[str, ...], limit: int,
               sort_by: str | None, reverse: bool, as_json: bool) -> None:
    """Find issues whose title, description or id holds QUERY (any case), closed ones included.

    With --json bd's array of issues with their counts.
    """
    query = " ".join(words) or query_option
    if not query:
        raise click.UsageError("search query is required")

    def human(issues: list[dict]) -> None:
        if not issues:
            echo(f"No issues found matching '{query}'")
            return
        echo(f"Found {len(issues)} issues matching '{query}':")
        for issue in issues:
            echo(issue_line(issue))

    run_action(as_json, lambda t: views.search(t, query, status=status, assignee=assignee, issue_type=issue_type,
                                               labels=split_csv(labels), labels_any=split_csv(labels_any),
                                               limit=limit or None, sort=sort_by, reverse=reverse), human)


@click.command("count")
@_status
@click.option("-p", "--priority", type=click.IntRange(0, 4), help="Only issues of this priority.")
@_assignee
@_type
@_label
@_label_any
@click.option("--title", help="Only issues whose title holds this text (any case).")
@click.option("--no-assignee", is_flag=True, help="Only issues assigned to no one.")
@click.option("--by-status", "group_by", flag_value="status", help="Count per status.")
@click.option("--by-priority", "group_by", flag_value="priority", help="Count per priority.")
@click.option("--by-type", "group_by", flag_value="type", help="Count per issue type.")
@click.option("--by-assignee", "group_by", flag_value="assignee", help="Count per assignee.")
@click.option("--by-label", "group_by", flag_value="label", help="Count per label (an issue counts once per label).")
@json_option
def count_cmd(status: str | None, priority: int | None, assignee: str | None, issue_type: str | None,
              labels: tuple[str, ...], labels_any: tuple[str, ...], title: str | None, no_assignee: bool,
              group_by: str | None, as_json: bool) -> None:
    """Count the issues matching the filters (every status unless --status), or count per group.

    With --json {count}, or with a --by-* flag {total, groups: [{group, count}]}.
    """

    def human(result: dict) -> None:
        if "count" in result:
            echo(str(result["count"]))
            return
        echo(f"Total: {result['total']}")
        for group in result["groups"]:
            echo(f"{group['group']}: {group['count']}")

    run_action(as_json, lambda t: views.count(t, status=status, assignee=assignee, issue_type=issue_type,
                                              labels=split_csv(labels), labels_any=split_csv(labels_any),
                                              priority=priority, title=title, no_assignee=no_assignee,
                                              group_by=group_by), human)


@click.command("stale")
@click.option("-d", "--days", type=click.IntRange(0), default=30, show_default=True,
              help="Issues not updated in this many days.")
@click.option("-s", "--status", type=click.Choice(views.STALE_STATUSES), help="Only this status.")
@click.option("-n", "--limit", type=int, default=50, show_default=True, help="At most N issues (0 = all).")
@json_option
def stale_cmd(days: int, status: str | None, limit: int, as_json: bool) -> None:
    """Issues not closed and not updated for --days days, least recently updated first."""

    def human(issues: list[dict]) -> None:
        if not issues:
            echo("No stale issues found (all active)")
            return
        echo(f"Stale issues ({len(issues)} not updated in {days}+ days):")
        for issue in issues:
            echo(f"{issue_line(issue)}  (updated {issue['updated_at']})")

    run_action(as_json, lambda t: views.stale(t, days=days, status=status, limit=limit or None), human)


@click.command("children")
@click.argument("parent_id", metavar="PARENT")
@json_option
def children_cmd(parent_id: str, as_json: bool) -> None:
    """List the children of PARENT that are not closed (bd's alias of list --parent)."""

    def action(t: Tracker) -> list[dict]:
        return [bd.issue_with_counts(i, dependencies=True)
                for i in t.list(parent=views.resolve_id(t, parent_id))]

    run_action(as_json, action, print_issues("No issues found."))


@click.command("duplicates")
@json_option
def duplicates_cmd(as_json: bool) -> None:
    """Find issues not closed that share title, description, design, acceptance criteria and
    status, each group with bd's suggested merge target and the commands that merge by hand.

    bd's --auto-merge is not offered: closing issues is left to a person (the suggested command).
    """

    def human(result: dict) -> None:
        if not result["groups"]:
            echo("No duplicates found!")
            return
        echo(f"Found {result['duplicate_groups']} duplicate group(s):")
        for k, group in enumerate(result["groups"], 1):
            echo(f"\nGroup {k}: {group['title']}")
            for issue in group["issues"]:
                mark = "→ " if issue["is_merge_target"] else "  "
                echo(f"{mark}{issue['id']} ({issue['status']}, P{issue['priority']}, weight={issue['weight']},"
                     f" {issue['references']} refs)")
            echo(f"  Suggested: {group['suggested_action']}")

    run_action(as_json, views.duplicates, human)


COMMANDS = (search_cmd, count_cmd, stale_cmd, children_cmd, duplicates_cmd)
