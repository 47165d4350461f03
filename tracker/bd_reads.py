"""bd v0.50.3's JSON shapes and its read commands (``ready``, ``list``'s filters, ``show``,
``blocked``, ``stats``, ``epic status``), computed from a ``reader.Reader``.

The half of ``bd_compat`` a read needs (``bd_compat`` re-exports all of it, and keeps bd's
maintenance reports): a hot read (``bd_hot``) imports this module and ``reader`` alone. The Go
structs the shapes come from are cited where each is built (``internal/types/types.go`` and
``cmd/bd/*.go`` at tag v0.50.3). Everything here reads through the ``Reader`` API or
``reader.db.read`` with plain SQL that SQLite and PostgreSQL both accept.

May import: ``dialect``, ``errors``, ``jsontext``, ``model``, ``rows`` (and ``reader`` for annotations).
"""

from __future__ import annotations

from .dialect import JSON_IDS
from .errors import InvalidValueError
from .jsontext import id_array
from .model import BLOCKING_STATUSES, COMPUTED_FIELDS, INFRA_TYPES, parse_ts
from .rows import _ISSUE_SELECT

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from .reader import Reader as Tracker

__all__ = ["READY_SORTS", "LIST_SORTS", "issue", "issue_with_counts", "comment", "details", "ready", "list_filter",
           "blocked", "statistics", "epic_status"]

_ACTIVE = "(" + ",".join(f"'{s}'" for s in BLOCKING_STATUSES) + ")"
_WORK = "issue_type NOT IN (" + ",".join(f"'{t}'" for t in INFRA_TYPES) + ")"
_NOT_OWN = frozenset((*COMPUTED_FIELDS, "dependencies", "comments"))  # what ``issue`` leaves out
READY_SORTS = ("hybrid", "priority", "oldest")  # ``ready --sort`` (its policies)
# ``list --sort``'s fields (``bd_views.sort_issues`` orders by them).
LIST_SORTS = ("priority", "created", "updated", "closed", "status", "id", "title", "type", "assignee")


# --------------------------------------------------------------------- issue shapes


def issue(obj: dict) -> dict:
    """bd's ``types.Issue`` (types.go:15): the issue's own fields and its labels, without the
    counts, dependency records or comments that only some commands add."""
    return {k: v for k, v in obj.items() if k not in _NOT_OWN}


def issue_with_counts(obj: dict, *, dependencies: bool) -> dict:
    """bd's ``types.IssueWithCounts`` (types.go:726), the element of ``list`` and ``ready``.

    ``list`` carries the raw dependency records (cmd/bd/list.go:713), ``ready`` does not
    (cmd/bd/ready.go:150)."""
    out = issue(obj)
    if dependencies and obj.get("dependencies"):
        out["dependencies"] = obj["dependencies"]
    out["dependency_count"] = obj.get("dependency_count", 0)
    out["dependent_count"] = obj.get("dependent_count", 0)
    out["comment_count"] = obj.get("comment_count", 0)
    return out


def comment(obj: dict) -> dict:
    """bd's ``types.Comment`` (types.go:880), its id as a string (see the module docstring)."""
    return {"id": str(obj["id"]), "issue_id": obj["issue_id"], "author": obj.get("author") or "",
            "text": obj["text"], "created_at": obj["created_at"]}


def _linked(tracker: Tracker, issue_id: str, dep_type: str) -> dict | None:
    """bd's ``IssueWithDependencyMetadata`` (types.go:721): the other issue plus the edge's
    type; None for an edge whose other end is not in this tracker (bd's join drops it too)."""
    if not tracker.exists(issue_id):
        return None
    return dict(issue(tracker.get(issue_id)), dependency_type=dep_type)


def _by_priority(linked: Iterable[dict | None]) -> list[dict]:
    # dependencies.go:251 orders by priority; the id makes ties stable.
    return sorted((x for x in linked if x is not None), key=lambda x: (x["priority"], x["id"]))


def details(tracker: Tracker, issue_id: str) -> dict:
    """One element of ``show --json`` (an array, cmd/bd/show.go:319): bd's ``IssueDetails``
    (types.go:735) with ``dependencies`` and ``dependents`` as whole issues that carry
    ``dependency_type``, the comments, and ``parent``."""
    obj = tracker.get(issue_id, comments=True)
    out = issue(obj)
    deps = _by_priority(_linked(tracker, d["depends_on_id"], d["type"]) for d in obj.get("dependencies") or ())
    if deps:
        out["dependencies"] = deps
    rows = tracker.db.read("SELECT issue_id, type FROM dependencies WHERE depends_on_id = ?", (issue_id,))
    dependents = _by_priority(_linked(tracker, r[0], r[1]) for r in rows)
    if dependents:
        out["dependents"] = dependents
    if obj.get("comments"):
        out["comments"] = [comment(c) for c in obj["comments"]]
    # show.go:140: the parent is the first parent-child dependency.
    parent = next((d["id"] for d in deps if d["dependency_type"] == "parent-child"), None)
    if parent:
        out["parent"] = parent
    return out


# --------------------------------------------------------------------- queries


def _has_labels(obj: dict, every: Sequence[str], any_of: Sequence[str]) -> bool:
    labels = set(obj.get("labels") or ())
    return labels.issuperset(every) and (not any_of or not labels.isdisjoint(any_of))


def _sorted(issues: list[dict], sort: str | None) -> list[dict]:
    """bd's ready sort policies (internal/storage/sqlite/ready.go:875)."""
    if sort in (None, "priority"):
        return issues  # the tracker's ready order already is (priority, created_at, id)
    if sort not in READY_SORTS:
        raise InvalidValueError(f"invalid sort policy {sort!r} (one of: {', '.join(READY_SORTS)})")
    if sort == "oldest":
        return sorted(issues, key=lambda i: (parse_ts(i["created_at"]), i["id"]))
    from datetime import datetime, timedelta, timezone

    # hybrid: issues from the last 48 hours by priority first, then older ones by age.
    recent = datetime.now(timezone.utc) - timedelta(hours=48)

    def key(i: dict) -> tuple:
        created = parse_ts(i["created_at"])
        if created >= recent:
            return (0, i["priority"], created, i["id"])
        return (1, 0, created, i["id"])

    return sorted(issues, key=key)


def ready(tracker: Tracker, *, labels: Sequence[str] = (), labels_any: Sequence[str] = (),
          issue_type: str | None = None, parent: str | None = None, priority: int | None = None,
          assignee: str | None = None, unassigned: bool = False, sort: str | None = None,
          limit: int | None = None) -> list[dict]:
    """``ready --json`` (cmd/bd/ready.go:143): the tracker's ready work filtered by bd's extra
    flags, as ``IssueWithCounts`` without dependency records.

    Without bd's extra filters the limit goes to the query itself, so the common call stays
    one indexed read of at most ``limit`` rows."""
    filtered = bool(labels_any or priority is not None or assignee or unassigned or sort not in (None, "priority"))
    issues = tracker.ready(labels=labels, issue_type=issue_type, parent=parent,
                           limit=None if filtered else limit)
    if filtered:
        issues = [i for i in issues
                  if _has_labels(i, (), labels_any)
                  and (priority is None or i["priority"] == priority)
                  and (not assignee or i.get("assignee") == assignee)
                  and (not unassigned or not i.get("assignee"))]
        issues = _sorted(issues, sort)[:limit] if limit else _sorted(issues, sort)
    return [issue_with_counts(i, dependencies=False) for i in issues]


def list_filter(issues: Iterable[dict], *, labels_any: Sequence[str] = (), priority: int | None = None,
                title: str | None = None, no_assignee: bool = False) -> list[dict]:
    """``list``'s filters the tracker's own ``list`` does not have (cmd/bd/list.go:795):
    ``--label-any``, ``--priority``, ``--title`` (case-insensitive substring), ``--no-assignee``."""
    needle = title.casefold() if title else None
    return [i for i in issues
            if _has_labels(i, (), labels_any)
            and (priority is None or i["priority"] == priority)
            and (needle is None or needle in i["title"].casefold())
            and (not no_assignee or not i.get("assignee"))]


def blocked(tracker: Tracker, *, parent: str | None = None) -> list[dict]:
    """``blocked --json`` (cmd/bd/ready.go:221): bd's ``BlockedIssue`` (types.go:919), the issues
    whose status is blocked or deferred or that a ``blocks`` edge to unfinished work holds
    back (internal/storage/sqlite/ready.go:558), each with the ids holding it.

    Found from the other side: the ``blocks`` edges to unfinished work, read once (they name both
    the issues held and what holds them), and the blocked or deferred ids from the status index;
    then only those issues' rows. Testing each unfinished issue for an edge read every one of
    their rows: 4-7 ms on a real 9,365-issue export with nothing blocked, against 2-3."""
    blockers: dict[str, list[str]] = {}
    for issue_id, blocker in tracker.db.read_tuples(
        "SELECT d.issue_id, d.depends_on_id FROM dependencies d JOIN issues b ON b.id = d.depends_on_id"
        f" WHERE d.type = 'blocks' AND b.status IN {_ACTIVE}"
    )[1]:
        blockers.setdefault(issue_id, []).append(blocker)
    held = {r[0] for r in tracker.db.read_tuples("SELECT id FROM issues WHERE status IN ('blocked', 'deferred')")[1]}
    _, rows = tracker.db.read_tuples(
        f"SELECT {_ISSUE_SELECT} FROM issues i WHERE i.id IN {JSON_IDS} AND i.status IN {_ACTIVE}"
        " AND COALESCE(i.pinned, 0) = 0 ORDER BY i.priority, i.created_at, i.id",
        (id_array(sorted(held.union(blockers))),),
    )
    if parent:
        scope = {i["id"] for i in tracker.list(parent=parent, descendants=True, include_closed=True)}
        rows = [r for r in rows if r[0] in scope]
    out = []
    for obj in tracker._hydrate(rows, counts=False):
        ids = sorted(blockers.get(obj["id"], ()))
        out.append(dict(issue(obj), blocked_by_count=len(ids), blocked_by=ids))
    return out


def _children_by_epic(tracker: Tracker) -> dict[str, list[str]]:
    rows = tracker.db.read(
        "SELECT d.depends_on_id, i.status FROM dependencies d JOIN issues i ON i.id = d.issue_id"
        " WHERE d.type = 'parent-child'"
    )
    children: dict[str, list[str]] = {}
    for epic_id, status in rows:
        children.setdefault(epic_id, []).append(status)
    return children


def statistics(tracker: Tracker) -> dict:
    """``stats``/``status --json`` (cmd/bd/status.go:19): ``{summary}`` with bd's
    ``types.Statistics`` (types.go:947). ``recent_activity`` comes from git history in bd and
    is left out, as bd does with ``--no-activity``. Infrastructure records (``INFRA_TYPES``: the
    agents and roles every mesh run keeps open) are not issues here, as ``list`` hides them.

    On SQLite the figures are counters the writes keep (``tallies``); PostgreSQL counts them
    from its tables (``_counted``). The lead time is the closed issues' mean, from their
    timestamps, exact to the millisecond."""
    from . import tallies
    from .model import now_iso

    now = now_iso()
    kept = tallies.read(tracker.db, now)
    if kept is None:
        kept = _counted(tracker)
    counts = {name[7:]: n for name, n in kept.items() if name.startswith("status:")}
    lead_n = kept.get("lead_n", 0)
    return {"summary": {
        "total_issues": sum(n for s, n in counts.items() if s != "tombstone"),
        "open_issues": counts.get("open", 0),
        "in_progress_issues": counts.get("in_progress", 0),
        "closed_issues": counts.get("closed", 0),
        "blocked_issues": kept.get("blocked", 0),
        "deferred_issues": counts.get("deferred", 0),
        "ready_issues": kept["ready"],
        "tombstone_issues": counts.get("tombstone", 0),
        "pinned_issues": kept.get("pinned", 0),
        "epics_eligible_for_closure": kept.get("epics_done", 0),
        "average_lead_time_hours": kept.get("lead_ms", 0) / lead_n / 3_600_000 if lead_n else 0.0,
    }}


def _counted(tracker: Tracker) -> dict[str, int]:
    """``tallies.read``'s counters computed from the tables (PostgreSQL; on SQLite, the test of
    the counters). A stamp Python reads but SQLite's date functions do not (a basic-format
    time, an offset without its colon) counts here and not in SQLite's lead time."""
    kept = {f"status:{s}": n for s, n in tracker.db.read(f"SELECT status, count(*) FROM issues WHERE {_WORK}"
                                                            " GROUP BY status")}
    kept["blocked"] = tracker.db.read(
        "SELECT COUNT(DISTINCT i.id) FROM issues i JOIN dependencies d ON i.id = d.issue_id"
        f" JOIN issues b ON b.id = d.depends_on_id WHERE i.status IN {_ACTIVE} AND d.type = 'blocks'"
        f" AND b.status IN {_ACTIVE} AND i.{_WORK}"
    )[0][0]
    kept["pinned"] = tracker.db.read(f"SELECT COUNT(*) FROM issues WHERE COALESCE(pinned, 0) = 1 AND {_WORK}")[0][0]
    leads = []
    for created, closed in tracker.db.read(f"SELECT created_at, closed_at FROM issues WHERE closed_at IS NOT NULL"
                                           f" AND {_WORK}"):
        start, end = _micros(created), _micros(closed)
        if start is not None and end is not None:
            leads.append(_millis(end - start))
    kept["lead_n"], kept["lead_ms"] = len(leads), sum(leads)
    children = _children_by_epic(tracker)
    open_epics = [r[0] for r in tracker.db.read(
        "SELECT id FROM issues WHERE issue_type = 'epic' AND status NOT IN ('closed', 'tombstone')")]
    kept["epics_done"] = sum(1 for e in open_epics if children.get(e) and all(s == "closed" for s in children[e]))
    kept["ready"] = tracker._ready_count()  # from the tables (``status`` takes SQLite's from the counters)
    return kept


def _millis(micros: int) -> int:
    """Whole milliseconds of a duration in microseconds, cut toward zero (as SQLite's ``/``)."""
    return micros // 1000 if micros >= 0 else -(-micros // 1000)


def _micros(stamp: str | None) -> int | None:
    """The instant of an RFC 3339 stamp in microseconds since the epoch; None when unreadable."""
    try:
        moment = parse_ts(stamp)  # type: ignore[arg-type]
    except (ValueError, TypeError, AttributeError):
        return None
    from datetime import datetime, timedelta, timezone

    return (moment - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def epic_status(tracker: Tracker, *, eligible_only: bool = False) -> list[dict]:
    """``epic status --json`` (cmd/bd/epic.go:38): bd's ``EpicStatus`` (types.go:1106) for
    every epic that is not closed."""
    children = _children_by_epic(tracker)
    out = []
    for epic in tracker.list(issue_type="epic"):
        statuses = children.get(epic["id"], [])
        closed = sum(1 for s in statuses if s == "closed")
        eligible = bool(statuses) and closed == len(statuses)
        if eligible or not eligible_only:
            out.append({"epic": issue(epic), "total_children": len(statuses), "closed_children": closed,
                        "eligible_for_close": eligible})
    return out
