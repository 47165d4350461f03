"""What bd v0.50.3 users type by hand, computed from a ``Tracker``: short ids, sorting, search,
counts, stale work, duplicates, dependency lists and trees, and label listings.

Each function answers what the bd command of the same name prints with ``--json``; the Go
code it follows is cited by file (``cmd/bd/*.go`` and ``internal/`` at tag v0.50.3). Like
``bd_reads``, it reads through the ``Reader`` API (a ``Tracker`` is one) and imports nothing heavy: ``bd show``
resolves its ids here.
"""

from __future__ import annotations

from .bd_reads import LIST_SORTS, details, issue, issue_with_counts, list_filter
from .errors import InvalidValueError, NotFoundError
from .model import parse_ts

TYPE_CHECKING = False  # a hot ``bd show`` resolves its ids here: nothing imported that it does not use
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import datetime
    from .reader import Reader as Tracker

__all__ = [
    "LIST_SORTS",
    "STALE_STATUSES",
    "COUNT_GROUPS",
    "resolve_id",
    "resolve_ids",
    "sort_issues",
    "search",
    "count",
    "stale",
    "duplicates",
    "dep_list",
    "dep_tree",
    "label_counts",
]

# cmd/bd/list.go:810: the fields --sort accepts.
# cmd/bd/stale.go:28.
STALE_STATUSES = ("open", "in_progress", "blocked", "deferred")
# cmd/bd/count.go:343: --by-status, --by-priority, --by-type, --by-assignee, --by-label.
COUNT_GROUPS = ("status", "priority", "type", "assignee", "label")
_DIRECTIONS = ("down", "up")
# internal/utils/id_parser.go:157 (looksLikePrefixedID): 1-8 lowercase letters or digits, a
# hyphen, then a letter or digit. Patterns, not compiled here: ``re`` compiles (and keeps) them
# at first use, which most ``bd show`` calls never reach.
_PREFIXED = r"^[a-z0-9]{1,8}-[a-z0-9]"
# cmd/bd/duplicates.go:203: an id mentioned in another issue's text.
_MENTION = r"\b[a-zA-Z][-a-zA-Z0-9]*-\d+\b"


# --------------------------------------------------------------------- ids


def resolve_id(tracker: Tracker, text: str) -> str:
    """bd's ``ResolvePartialID`` (internal/utils/id_parser.go:40): the full id ``text`` names.

    An exact id wins; then ``text`` with the workspace prefix added (``5gb`` -> ``bd-5gb``,
    ``5gb.1`` -> ``bd-5gb.1``; an id that already carries a prefix is kept); then the one id
    whose part after its prefix equals, or else contains, that hash. Raises ``NotFoundError``
    when nothing matches and ``InvalidValueError`` (``ambiguous_id``) when several do.
    """
    if tracker.exists(text):
        return text
    prefix = tracker.prefix.rstrip("-") + "-"
    if text.startswith(prefix):
        normalized = text
    else:
        import re

        normalized = text if re.match(_PREFIXED, text) else prefix + text
    if tracker.exists(normalized):
        return normalized
    wanted = normalized[len(prefix):] if normalized.startswith(prefix) else normalized
    exact, matches = None, []
    rows = tracker.db.read("SELECT id FROM issues WHERE status != 'tombstone' ORDER BY id")
    for (issue_id,) in rows:
        _, dash, rest = issue_id.partition("-")
        own = rest if dash else issue_id
        if own == wanted:
            exact = issue_id
        if wanted in own:
            matches.append(issue_id)
    if exact is not None:
        return exact
    if not matches:
        raise NotFoundError(f"no issue {text!r}")
    if len(matches) > 1:
        raise InvalidValueError(f"ambiguous ID {text!r} matches {len(matches)} issues: {', '.join(matches)};"
                                " use more characters to disambiguate", code="ambiguous_id")
    return matches[0]


def resolve_ids(tracker: Tracker, texts: Iterable[str]) -> list[str]:
    """``resolve_id`` of each of ``texts``, in order (bd's ``ResolvePartialIDs``)."""
    return [resolve_id(tracker, text) for text in texts]


# --------------------------------------------------------------------- list, search, count


def _ts(value: str | None) -> float:
    return parse_ts(value).timestamp() if value else 0.0


def sort_issues(issues: list[dict], sort_by: str | None, reverse: bool = False) -> list[dict]:
    """bd's ``sortIssues`` (cmd/bd/list.go:193): by one field, times newest first, a missing
    ``closed_at`` last; ``reverse`` flips it. Ties keep the order they came in."""
    if not sort_by:
        return issues
    if sort_by not in LIST_SORTS:
        raise InvalidValueError(f"invalid sort field {sort_by!r} (one of: {', '.join(LIST_SORTS)})")
    keys = {
        "priority": lambda i: i["priority"],
        "created": lambda i: -_ts(i.get("created_at")),
        "updated": lambda i: -_ts(i.get("updated_at")),
        "closed": lambda i: (i.get("closed_at") is None, -_ts(i.get("closed_at"))),
        "status": lambda i: i["status"],
        "id": lambda i: i["id"],
        "title": lambda i: i["title"].lower(),
        "type": lambda i: i["issue_type"],
        "assignee": lambda i: i.get("assignee") or "",
    }
    return sorted(issues, key=keys[sort_by], reverse=reverse)


def _matching(tracker: Tracker, *, status: str | None, assignee: str | None, issue_type: str | None,
              labels: Sequence[str], labels_any: Sequence[str], priority: int | None = None,
              title: str | None = None, no_assignee: bool = False) -> list[dict]:
    """Every issue but tombstones matching bd's ``IssueFilter`` fields (all statuses unless
    ``status``, as bd's ``SearchIssues``, internal/storage/sqlite/search.go:52)."""
    statuses = [s.strip() for s in status.split(",") if s.strip()] if status and status != "all" else None
    issues = tracker.list(status=statuses, labels=labels, issue_type=issue_type, assignee=assignee,
                          include_closed=True)
    issues = [i for i in issues if i["status"] != "tombstone" or statuses]
    return list_filter(issues, labels_any=labels_any, priority=priority, title=title, no_assignee=no_assignee)


def search(tracker: Tracker, query: str, *, status: str | None = None, assignee: str | None = None,
           issue_type: str | None = None, labels: Sequence[str] = (), labels_any: Sequence[str] = (),
           limit: int | None = 50, sort: str | None = None, reverse: bool = False) -> list[dict]:
    """``search QUERY --json`` (cmd/bd/search.go:270): issues whose title, description or id
    holds ``query`` (case-insensitive), by priority then newest (search.go:291), as
    ``IssueWithCounts`` without dependency records."""
    needle = query.casefold()
    found = [i for i in _matching(tracker, status=status, assignee=assignee, issue_type=issue_type, labels=labels,
                                  labels_any=labels_any)
             if needle in i["title"].casefold() or needle in (i.get("description") or "").casefold()
             or needle in i["id"].casefold()]
    found.sort(key=lambda i: (i["priority"], -_ts(i.get("created_at"))))
    found = found[:limit] if limit else found
    return [issue_with_counts(i, dependencies=False) for i in sort_issues(found, sort, reverse)]


def count(tracker: Tracker, *, status: str | None = None, assignee: str | None = None,
          issue_type: str | None = None, labels: Sequence[str] = (), labels_any: Sequence[str] = (),
          priority: int | None = None, title: str | None = None, no_assignee: bool = False,
          group_by: str | None = None) -> dict:
    """``count --json`` (cmd/bd/count.go:221): ``{count}``, or with a group ``{total, groups:
    [{group, count}]}`` sorted by group name (an issue counts once per label; ``(unassigned)``
    and ``(no labels)`` name the empty groups)."""
    issues = _matching(tracker, status=status, assignee=assignee, issue_type=issue_type, labels=labels,
                       labels_any=labels_any, priority=priority, title=title, no_assignee=no_assignee)
    if group_by is None:
        return {"count": len(issues)}
    if group_by not in COUNT_GROUPS:
        raise InvalidValueError(f"invalid group {group_by!r} (one of: {', '.join(COUNT_GROUPS)})")
    counts: dict[str, int] = {}
    for item in issues:
        if group_by == "label":
            keys = item.get("labels") or ["(no labels)"]
        else:
            keys = [{"status": item["status"], "priority": f"P{item['priority']}", "type": item["issue_type"],
                     "assignee": item.get("assignee") or "(unassigned)"}[group_by]]
        for key in keys:
            counts[key] = counts.get(key, 0) + 1
    return {"total": len(issues), "groups": [{"group": k, "count": counts[k]} for k in sorted(counts)]}


def stale(tracker: Tracker, *, days: int = 30, status: str | None = None, limit: int | None = 50,
          now: datetime | None = None) -> list[dict]:
    """``stale --json`` (cmd/bd/stale.go; internal/storage/sqlite/ready.go:383): issues not
    closed whose ``updated_at`` is more than ``days`` old, least recently updated first."""
    if status and status not in STALE_STATUSES:
        raise InvalidValueError(f"invalid status {status!r}. Valid values: {', '.join(STALE_STATUSES)}")
    from datetime import datetime, timedelta, timezone

    cutoff = (now or datetime.now(timezone.utc)) - timedelta(days=days)
    issues = [i for i in tracker.list(status=[status] if status else None)
              if parse_ts(i["updated_at"]) < cutoff]
    issues.sort(key=lambda i: _ts(i["updated_at"]))
    return [issue(i) for i in (issues[:limit] if limit else issues)]


def duplicates(tracker: Tracker) -> dict:
    """``duplicates --json`` (cmd/bd/duplicates.go:100): groups of issues that are not closed
    with the same title, description, design, acceptance criteria and status, each with bd's
    suggested merge target (most dependency edges, then most mentions in other issues' text,
    then the smallest id) and the command that merges by hand."""
    import re

    every = [i for i in tracker.list(include_closed=True) if i["status"] != "tombstone"]
    groups: dict[tuple, list[dict]] = {}
    for item in every:
        if item["status"] == "closed":
            continue
        key = tuple(item.get(k) or "" for k in ("title", "description", "design", "acceptance_criteria", "status"))
        groups.setdefault(key, []).append(item)
    mentions: dict[str, int] = {}
    for item in every:
        for field in ("description", "design", "acceptance_criteria", "notes"):
            for found in re.findall(_MENTION, item.get(field) or ""):
                mentions[found] = mentions.get(found, 0) + 1
    out = []
    for group in (g for g in groups.values() if len(g) > 1):
        def rank(i: dict) -> tuple:
            return (-(i["dependency_count"] + i["dependent_count"]), -mentions.get(i["id"], 0), i["id"])

        target = min(group, key=rank)["id"]
        sources = [i["id"] for i in group if i["id"] != target]
        out.append({
            "title": group[0]["title"],
            "issues": [{"id": i["id"], "title": i["title"], "status": i["status"], "priority": i["priority"],
                        "references": mentions.get(i["id"], 0), "dependents": i["dependent_count"],
                        "dependencies": i["dependency_count"],
                        "weight": i["dependent_count"] + i["dependency_count"], "is_merge_target": i["id"] == target}
                       for i in group],
            "suggested_target": target,
            "suggested_sources": sources,
            "suggested_action": f"bd close {' '.join(sources)} && bd dep add {' '.join(sources)} {target} --type related",
            "note": f"Duplicate: {' '.join(sources)} (same content as {target})",
        })
    return {"duplicate_groups": len(out), "groups": out}


# --------------------------------------------------------------------- dependencies and labels


def dep_list(tracker: Tracker, issue_id: str, *, direction: str = "down", dep_type: str | None = None) -> list[dict]:
    """``dep list ID --json`` (cmd/bd/dep.go:301): what ``issue_id`` depends on (``down``) or
    what depends on it (``up``), as whole issues with ``dependency_type``, by priority."""
    if direction not in _DIRECTIONS:
        raise InvalidValueError(f"--direction must be 'down' or 'up', not {direction!r}")
    linked = details(tracker, issue_id).get("dependencies" if direction == "down" else "dependents") or []
    return [i for i in linked if dep_type is None or i["dependency_type"] == dep_type]


def _edges(tracker: Tracker, issue_id: str, up: bool, dep_type: str | None) -> list[str]:
    column, other = ("depends_on_id", "issue_id") if up else ("issue_id", "depends_on_id")
    rows = tracker.db.read(f"SELECT {other}, type FROM dependencies WHERE {column} = ?", (issue_id,))
    return [r[0] for r in rows if (dep_type is None or r[1] == dep_type) and tracker.exists(r[0])]


def dep_tree(tracker: Tracker, issue_id: str, *, direction: str = "down", max_depth: int = 50,
             show_all_paths: bool = False, status: str | None = None, dep_type: str | None = None) -> list[dict]:
    """``dep tree ID --json`` (cmd/bd/dep.go:484; internal/storage/sqlite/dependencies.go:537):
    bd's ``TreeNode`` list (types.go:926): the issue at depth 0 (its own ``parent_id``), then
    what it depends on (``down``), what depends on it (``up``) or, with ``both``, the dependents
    first and then the dependencies, each node once at its shallowest depth unless
    ``show_all_paths``, ordered by depth, priority and id; ``truncated`` marks nodes at
    ``max_depth``. ``status`` keeps the matching nodes and their ancestors."""
    if direction not in (*_DIRECTIONS, "both"):
        raise InvalidValueError("--direction must be 'down', 'up', or 'both'")
    if max_depth < 1:
        raise InvalidValueError("--max-depth must be >= 1")
    if direction == "both":
        up = dep_tree(tracker, issue_id, direction="up", max_depth=max_depth, show_all_paths=show_all_paths,
                      dep_type=dep_type)
        down = dep_tree(tracker, issue_id, direction="down", max_depth=max_depth, show_all_paths=show_all_paths,
                        dep_type=dep_type)
        tree = [node for node in up if node["id"] != issue_id] + down
    else:
        tree = _walk(tracker, issue_id, up=direction == "up", max_depth=max_depth, show_all_paths=show_all_paths,
                     dep_type=dep_type)
    return _keep_status(tree, status) if status else tree


def _walk(tracker: Tracker, root: str, *, up: bool, max_depth: int, show_all_paths: bool,
          dep_type: str | None) -> list[dict]:
    """Every path from ``root`` without a repeated node, as (depth, id, parent); then bd's order."""
    found: list[tuple[int, str, str]] = [(0, root, root)]
    frontier: list[tuple[str, tuple[str, ...]]] = [(root, (root,))]
    for depth in range(1, max_depth + 1):
        following = []
        for node, path in frontier:
            for other in _edges(tracker, node, up, dep_type):
                if other not in path:
                    found.append((depth, other, node))
                    following.append((other, (*path, other)))
        frontier = following
    issues = {i: tracker.get(i) for i in {f[1] for f in found}}
    found.sort(key=lambda f: (f[0], issues[f[1]]["priority"], f[1]))
    seen: set[str] = set()
    out = []
    for depth, node, parent in found:
        if not show_all_paths and node in seen:
            continue
        seen.add(node)
        out.append(dict(issue(issues[node]), depth=depth, parent_id=parent, truncated=depth == max_depth))
    return out


def _keep_status(tree: list[dict], status: str) -> list[dict]:
    """bd's ``filterTreeByStatus`` (cmd/bd/dep.go:845): matching nodes and their ancestors."""
    parent_of = {n["id"]: n["parent_id"] for n in tree if n["parent_id"] != n["id"]}
    keep: set[str] = set()
    for node in (n for n in tree if n["status"] == status):
        current = node["id"]
        while current not in keep:
            keep.add(current)
            current = parent_of.get(current, current)
    return [n for n in tree if n["id"] in keep]


def label_counts(tracker: Tracker) -> list[dict]:
    """``label list-all --json`` (cmd/bd/label.go:165): ``[{label, count}]`` over every issue
    but tombstones, sorted by label."""
    counts: dict[str, int] = {}
    for item in tracker.list(include_closed=True):
        if item["status"] == "tombstone":
            continue
        for label in item.get("labels") or ():
            counts[label] = counts.get(label, 0) + 1
    return [{"label": label, "count": counts[label]} for label in sorted(counts)]
