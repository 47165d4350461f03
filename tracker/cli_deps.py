"""``mesh tracker dep`` (bd's ``dep``): add, remove, list and tree, as bd v0.50.3 has them
(cmd/bd/dep.go). Ids may be given without their prefix (``bd_views.resolve_id``).
``tracker.cli`` adds the group (``COMMANDS``) and takes ``update --parent`` from here (``reparent``)."""

from __future__ import annotations

import click

from . import bd_views as views
from .cli_flags import BdGroup
from .cli_io import echo, json_option, run_action, say, writes
from .store import Tracker

__all__ = ["COMMANDS", "reparent"]


@click.group("dep", cls=BdGroup)
def dep_group() -> None:
    """Add, remove, list or show the tree of dependencies (ISSUE depends on DEPENDS_ON)."""


@writes
@dep_group.command("add")
@click.argument("issue_id", metavar="ISSUE")
@click.argument("depends_on", metavar="DEPENDS_ON")
@click.option("-t", "--type", "dep_type", default="blocks", show_default=True,
              help="blocks, parent-child, related, discovered-from, tracks, ... (only blocks and parent-child affect ready work).")
@json_option
def dep_add_cmd(issue_id: str, depends_on: str, dep_type: str, as_json: bool) -> None:
    """Make ISSUE depend on DEPENDS_ON; refused if either is missing or it would close a cycle."""

    def action(t: Tracker) -> dict:
        dep = t.add_dependency(views.resolve_id(t, issue_id), views.resolve_id(t, depends_on), dep_type)
        return {"status": "added", "issue_id": dep["issue_id"], "depends_on_id": dep["depends_on_id"],
                "type": dep["type"]}

    run_action(as_json, action,
               say(lambda r: f"Added dependency: {r['issue_id']} depends on {r['depends_on_id']} ({r['type']})"))


@writes
@dep_group.command("remove")
@click.argument("issue_id", metavar="ISSUE")
@click.argument("depends_on", metavar="DEPENDS_ON")
@click.option("-t", "--type", "dep_type", help="Remove only the edge of this type (default: every type).")
@json_option
def dep_remove_cmd(issue_id: str, depends_on: str, dep_type: str | None, as_json: bool) -> None:
    """Remove the dependency of ISSUE on DEPENDS_ON."""

    def action(t: Tracker) -> dict:
        issue, other = views.resolve_id(t, issue_id), views.resolve_id(t, depends_on)
        t.remove_dependency(issue, other, dep_type)
        return {"status": "removed", "issue_id": issue, "depends_on_id": other}

    run_action(as_json, action,
               say(lambda r: f"Removed dependency: {r['issue_id']} no longer depends on {r['depends_on_id']}"))


_direction = click.option("--direction", type=click.Choice(["down", "up"]), default="down", show_default=True,
                          help="down: what ISSUE depends on; up: what depends on ISSUE.")
_type_filter = click.option("-t", "--type", "dep_type", help="Only dependencies of this type (blocks, tracks, ...).")


@dep_group.command("list")
@click.argument("issue_id", metavar="ISSUE")
@_direction
@_type_filter
@json_option
def dep_list_cmd(issue_id: str, direction: str, dep_type: str | None, as_json: bool) -> None:
    """List what ISSUE depends on (or, with --direction up, what depends on it).

    With --json an array of whole issues, each with its dependency_type (bd's shape).
    """
    resolved: list[str] = []

    def action(t: Tracker) -> list[dict]:
        resolved.append(views.resolve_id(t, issue_id))
        return views.dep_list(t, resolved[0], direction=direction, dep_type=dep_type)

    def human(issues: list[dict]) -> None:
        of_type = f" of type '{dep_type}'" if dep_type else ""
        if not issues:
            echo(f"No issues depend on {resolved[0]}{of_type}" if direction == "up"
                 else f"{resolved[0]} has no dependencies{of_type}")
            return
        echo(f"Issues that depend on {resolved[0]}:" if direction == "up" else f"{resolved[0]} depends on:")
        for i in issues:
            echo(f"  {i['id']}: {i['title']} [P{i['priority']}] ({i['status']}) via {i['dependency_type']}")

    run_action(as_json, action, human)


@dep_group.command("tree")
@click.argument("issue_id", metavar="ISSUE")
@click.option("--direction", type=click.Choice(["down", "up", "both"]),
              help="down (the default): what ISSUE depends on; up: what depends on it; both.")
@click.option("--reverse", is_flag=True, help="bd's older name of --direction up.")
@click.option("-d", "--max-depth", "max_depth", type=int, default=50, show_default=True, help="Deepest level shown.")
@click.option("--show-all-paths", "show_all_paths", is_flag=True,
              help="Show a node reached by several paths on each (default: once, at its shallowest depth).")
@click.option("--status", help="Only nodes of this status, with the nodes leading to them.")
@_type_filter
@json_option
def dep_tree_cmd(issue_id: str, direction: str | None, reverse: bool, max_depth: int, show_all_paths: bool,
                 status: str | None, dep_type: str | None, as_json: bool) -> None:
    """Show the dependency tree rooted at ISSUE.

    With --json bd's tree nodes: each issue with depth, parent_id (the node it was reached
    from; the root's own id) and truncated (at --max-depth), ordered by depth, priority and id.
    """
    direction = direction or ("up" if reverse else "down")

    def action(t: Tracker) -> list[dict]:
        return views.dep_tree(t, views.resolve_id(t, issue_id), direction=direction, max_depth=max_depth,
                              show_all_paths=show_all_paths, status=status, dep_type=dep_type)

    def human(tree: list[dict]) -> None:
        if not tree:
            echo("No matching issues in the tree")
            return
        root = next(node for node in tree if node["depth"] == 0)
        children: dict[str, list[dict]] = {}
        for node in tree:
            if node is not root:
                children.setdefault(node["parent_id"], []).append(node)
        _print_node(root, children, "", "", set())

    run_action(as_json, action, human)


def _print_node(node: dict, children: dict[str, list[dict]], lead: str, branch: str, shown: set[str]) -> None:
    """One node of ``dep tree`` with box-drawing connectors (bd's renderTree, cmd/bd/dep.go:709)."""
    if node["id"] in shown:
        echo(f"{lead}{branch}{node['id']} (shown above)")
        return
    shown.add(node["id"])
    mark = " …" if node["truncated"] and children.get(node["id"]) is None else ""
    echo(f"{lead}{branch}{node['id']}: {node['title']} [P{node['priority']}] ({node['status']}){mark}")
    below = children.get(node["id"], [])
    inner = lead + ("" if not branch else ("    " if branch.startswith("└") else "│   "))
    for k, child in enumerate(below):
        _print_node(child, children, inner, "└── " if k == len(below) - 1 else "├── ", shown)


COMMANDS = (dep_group,)


def reparent(t: Tracker, issue_id: str, parent: str | None) -> None:
    """bd's ``update --parent``: the issue's parent-child edge moves to ``parent`` (None: removed)."""
    current = t.get(issue_id).get("parent")
    if current == parent:
        return
    if current:
        t.remove_dependency(issue_id, current, "parent-child")
    if parent:
        t.add_dependency(issue_id, parent, "parent-child")
