"""``mesh tracker label`` (bd's ``label``): add and remove on one or more issues, list an
issue's labels, list every label with its count, as bd v0.50.3 has them (cmd/bd/label.go).
Ids may be given without their prefix. ``tracker.cli`` adds the group (``COMMANDS``) and takes
``update``'s label options from here (``label_list``, ``relabel``)."""

from __future__ import annotations

import click

from . import bd_views as views
from .cli_flags import BdGroup
from .cli_io import echo, json_option, run_action, writes
from .store import Tracker

__all__ = ["COMMANDS", "label_list", "relabel"]


@click.group("label", cls=BdGroup)
def label_group() -> None:
    """Add, remove and list labels."""


def _change(verb: str, args: tuple[str, ...], as_json: bool) -> None:
    """``label add|remove ID... LABEL``: every issue or none (bd went on past a failed one);
    with --json bd's array of ``{status, issue_id, label}`` (cmd/bd/label.go:36)."""
    *issue_ids, label = args

    def action(t: Tracker) -> list[dict]:
        with t.transaction():
            out = []
            for issue_id in views.resolve_ids(t, issue_ids):
                (t.add_label if verb == "added" else t.remove_label)(issue_id, label)
                out.append({"status": verb, "issue_id": issue_id, "label": label})
            return out

    def human(results: list[dict]) -> None:
        for r in results:
            echo(f"Added label '{r['label']}' to {r['issue_id']}" if verb == "added"
                 else f"Removed label '{r['label']}' from {r['issue_id']}")

    run_action(as_json, action, human)


@writes
@label_group.command("add")
@click.argument("args", metavar="ID... LABEL", nargs=-1, required=True)
@json_option
def label_add_cmd(args: tuple[str, ...], as_json: bool) -> None:
    """Add LABEL (the last argument) to each issue."""
    if len(args) < 2:
        raise click.UsageError("give one or more issue ids, then the label")
    _change("added", args, as_json)


@writes
@label_group.command("remove")
@click.argument("args", metavar="ID... LABEL", nargs=-1, required=True)
@json_option
def label_remove_cmd(args: tuple[str, ...], as_json: bool) -> None:
    """Remove LABEL (the last argument) from each issue."""
    if len(args) < 2:
        raise click.UsageError("give one or more issue ids, then the label")
    _change("removed", args, as_json)


@label_group.command("list")
@click.argument("issue_id", metavar="ID")
@json_option
def label_list_cmd(issue_id: str, as_json: bool) -> None:
    """List an issue's labels (with --json an array of strings, empty when there are none)."""
    resolved: list[str] = []

    def action(t: Tracker) -> list[str]:
        resolved.append(views.resolve_id(t, issue_id))
        return list(t.get(resolved[0]).get("labels") or [])

    def human(labels: list[str]) -> None:
        if not labels:
            echo(f"{resolved[0]} has no labels")
            return
        echo(f"Labels for {resolved[0]}:")
        for label in labels:
            echo(f"  - {label}")

    run_action(as_json, action, human)


@label_group.command("list-all")
@json_option
def label_list_all_cmd(as_json: bool) -> None:
    """List every label in use with the number of issues carrying it (--json: [{label, count}])."""

    def human(rows: list[dict]) -> None:
        if not rows:
            echo("No labels found in database")
            return
        echo(f"All labels ({len(rows)} unique):")
        width = max(len(r["label"]) for r in rows)
        for r in rows:
            echo(f"  {r['label']:<{width}}  ({r['count']} issues)")

    run_action(as_json, views.label_counts, human)


COMMANDS = (label_group,)


def label_list(given: tuple[str, ...]) -> list[str]:
    """Labels given to a repeatable, comma-separated option: trimmed, empty ones and repeats dropped."""
    return list(dict.fromkeys(part.strip() for value in given for part in value.split(",") if part.strip()))


def relabel(t: Tracker, issue_id: str, wanted: list[str] | None, added: list[str], removed: list[str]) -> None:
    """``update``'s label options on one issue (inside the command's transaction): the labels
    replaced by ``wanted`` (unless None), then ``added`` added, then ``removed`` removed."""
    have = list(t.get(issue_id).get("labels") or [])
    target = list(have) if wanted is None else list(wanted)
    target += [label for label in added if label not in target]
    target = [label for label in target if label not in removed]
    for label in have:
        if label not in target:
            t.remove_label(issue_id, label)
    for label in target:
        if label not in have:
            t.add_label(issue_id, label)
