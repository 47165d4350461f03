"""bd v0.50.3's JSON shapes and its report commands, computed from a ``Tracker``.

``mesh tracker`` (and the ``bd`` shim) print what bd v0.50.3, the last SQLite
release of beads, prints for the commands beads clients call (beads-mcp,
beads-ui, beadsflow, scripts). The Go structs the shapes come from are cited
where each is built (``internal/types/types.go`` and ``cmd/bd/*.go`` at tag
v0.50.3). One deliberate difference: a comment's ``id`` is the decimal string of
its number, not a JSON number, because beads-mcp >= 1.3 validates it as a
string (bd >= 1.0 emits strings) while beadsflow's ``int(id)`` reads both.

Everything here reads through the ``Tracker`` API or ``tracker.db.read`` with
plain SQL that SQLite and PostgreSQL both accept; nothing is imported that
``mesh tracker ready`` would pay for on its hot path.
"""

from __future__ import annotations

from .errors import InvalidValueError
from .model import BLOCKING_STATUSES, COMPUTED_FIELDS, INFRA_TYPES, parse_ts
from .rows import _ISSUE_SELECT
from .store import Tracker

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "BD_VERSION",
    "READY_SORTS",
    "LIST_SORTS",
    "QUICKSTART",
    "version_line",
    "version_object",
    "issue",
    "issue_with_counts",
    "comment",
    "details",
    "ready",
    "list_filter",
    "blocked",
    "statistics",
    "epic_status",
    "pollution",
    "validate",
    "repair_deps",
    "schema_info",
    "migrate_inspect",
]

# The bd release whose behaviour mesh answers for; beads-mcp checks it against its minimum.
BD_VERSION = "0.50.3"

_ACTIVE = "(" + ",".join(f"'{s}'" for s in BLOCKING_STATUSES) + ")"
_WORK = "issue_type NOT IN (" + ",".join(f"'{t}'" for t in INFRA_TYPES) + ")"
READY_SORTS = ("hybrid", "priority", "oldest")  # ``ready --sort`` (its policies)
# ``list --sort``'s fields (``bd_views.sort_issues`` orders by them).
LIST_SORTS = ("priority", "created", "updated", "closed", "status", "id", "title", "type", "assignee")
# cmd/bd/detect_pollution.go:184 (testPrefixPattern) and :194 (sequentialPattern). Patterns,
# not compiled here: ``re`` is imported and compiles (and keeps) them at first use, which the hot reads never reach.
_TEST_PREFIX = r"^(test|benchmark|sample|tmp|temp|debug|dummy)[-_\s]"
_SEQUENTIAL = r"^[a-z]+-\d+$"


def version_line(mesh_version: str) -> str:
    """``bd version``'s text (cmd/bd/version.go:44): ``bd version X.Y.Z (BUILD)``; the build
    names mesh, so a person sees what answers while a client's version regex reads bd's."""
    return f"bd version {BD_VERSION} (mesh {mesh_version})"


def version_object(mesh_version: str) -> dict:
    """``bd version --json`` (cmd/bd/version.go:31): ``{version, build}``."""
    return {"version": BD_VERSION, "build": f"mesh {mesh_version}"}


# --------------------------------------------------------------------- issue shapes


def issue(obj: dict) -> dict:
    """bd's ``types.Issue`` (types.go:15): the issue's own fields and its labels, without the
    counts, dependency records or comments that only some commands add."""
    return {k: v for k, v in obj.items()
            if k not in COMPUTED_FIELDS and k not in ("dependencies", "comments")}


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
    back (internal/storage/sqlite/ready.go:558), each with the ids holding it."""
    _, rows = tracker.db.read_tuples(
        f"SELECT {_ISSUE_SELECT} FROM issues i WHERE i.status IN {_ACTIVE} AND COALESCE(i.pinned, 0) = 0"
        " AND (i.status IN ('blocked', 'deferred') OR EXISTS (SELECT 1 FROM dependencies d"
        " JOIN issues b ON b.id = d.depends_on_id WHERE d.issue_id = i.id AND d.type = 'blocks'"
        f" AND b.status IN {_ACTIVE})) ORDER BY i.priority, i.created_at, i.id"
    )
    if parent:
        scope = {i["id"] for i in tracker.list(parent=parent, descendants=True, include_closed=True)}
        rows = [r for r in rows if r[0] in scope]
    # The issues and their blockers in one read each (an issue at a time was 0.2 s at 10,000 issues).
    blockers = tracker.blocker_ids(r[0] for r in rows)
    return [dict(issue(obj), blocked_by_count=len(blockers[obj["id"]]), blocked_by=blockers[obj["id"]])
            for obj in tracker._hydrate(rows, counts=False)]


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
    agents and roles every mesh run keeps open) are not issues here, as ``list`` hides them."""
    status = tracker.status()
    counts = dict(tracker.db.read(f"SELECT status, count(*) FROM issues WHERE {_WORK} GROUP BY status"))
    blocked_count = tracker.db.read(
        "SELECT COUNT(DISTINCT i.id) FROM issues i JOIN dependencies d ON i.id = d.issue_id"
        f" JOIN issues b ON b.id = d.depends_on_id WHERE i.status IN {_ACTIVE} AND d.type = 'blocks'"
        f" AND b.status IN {_ACTIVE} AND i.{_WORK}"
    )[0][0]
    pinned = tracker.db.read(f"SELECT COUNT(*) FROM issues WHERE COALESCE(pinned, 0) = 1 AND {_WORK}")[0][0]
    lead_hours = [(parse_ts(closed) - parse_ts(created)).total_seconds() / 3600
                  for created, closed in tracker.db.read(
                      f"SELECT created_at, closed_at FROM issues WHERE closed_at IS NOT NULL AND {_WORK}")]
    children = _children_by_epic(tracker)
    open_epics = [r[0] for r in tracker.db.read(
        "SELECT id FROM issues WHERE issue_type = 'epic' AND status NOT IN ('closed', 'tombstone')")]
    eligible = sum(1 for e in open_epics if children.get(e) and all(s == "closed" for s in children[e]))
    return {"summary": {
        "total_issues": sum(n for s, n in counts.items() if s != "tombstone"),
        "open_issues": counts.get("open", 0),
        "in_progress_issues": counts.get("in_progress", 0),
        "closed_issues": counts.get("closed", 0),
        "blocked_issues": blocked_count,
        "deferred_issues": counts.get("deferred", 0),
        "ready_issues": status["summary"]["ready_issues"],
        "tombstone_issues": counts.get("tombstone", 0),
        "pinned_issues": pinned,
        "epics_eligible_for_closure": eligible,
        "average_lead_time_hours": sum(lead_hours) / len(lead_hours) if lead_hours else 0.0,
    }}


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


# --------------------------------------------------------------------- maintenance reports


def pollution(tracker: Tracker) -> dict:
    """``doctor --check=pollution --json`` (cmd/bd/doctor_pollution.go:59): issues that look
    like test leftovers, scored by bd's heuristics (cmd/bd/detect_pollution.go:192)."""
    import re

    issues = [i for i in tracker.list(include_closed=True) if i["status"] != "tombstone"]
    per_minute: dict[int, int] = {}
    for i in issues:
        minute = int(parse_ts(i["created_at"]).timestamp()) // 60
        per_minute[minute] = per_minute.get(minute, 0) + 1
    found = []
    for i in issues:
        title, description = i["title"].lower(), i.get("description") or ""
        score, reasons = 0.0, []
        if re.match(_TEST_PREFIX, title):
            score, reasons = score + 0.7, [*reasons, "Title starts with test prefix"]
        if re.match(_SEQUENTIAL, i["id"]) and len(description) < 20:
            score, reasons = score + 0.4, [*reasons, "Sequential ID with minimal description"]
        if not description.strip():
            score, reasons = score + 0.2, [*reasons, "No description"]
        elif len(description) < 20:
            score, reasons = score + 0.1, [*reasons, "Very short description"]
        same_minute = per_minute[int(parse_ts(i["created_at"]).timestamp()) // 60]
        if same_minute >= 10:
            score, reasons = score + 0.3, [*reasons, f"Created with {same_minute - 1} other issues in same minute"]
        if any(s in title for s in ("issue for testing", "test issue", "sample issue")):
            score, reasons = score + 0.5, [*reasons, "Generic test title"]
        if score >= 0.7:
            found.append({"id": i["id"], "title": i["title"], "score": round(score, 2), "reasons": reasons,
                          "created_at": i["created_at"]})
    return {"polluted_count": len(found), "high_confidence": sum(1 for f in found if f["score"] >= 0.9),
            "medium_confidence": sum(1 for f in found if f["score"] < 0.9), "issues": found}


def validate(tracker: Tracker, *, fix: bool = False) -> dict:
    """``doctor --check=validate --json`` (cmd/bd/doctor_validate.go:42): ``{path, checks,
    overall_ok}`` with bd's ``doctorCheck`` objects (cmd/bd/doctor.go:26), made of the
    tracker's own doctor checks and bd's test-pollution check (a warning naming the issues it
    flags: ``overall_ok`` stays true)."""
    report = tracker.doctor(fix=fix)
    checks = [{"name": c["name"], "status": "ok" if c["ok"] else "error", "message": c["detail"],
               "category": "Data Integrity"} for c in report["checks"]]
    found = pollution(tracker)["issues"]
    named = ", ".join(f"{f['id']} ({f['title'][:60]}: {'; '.join(f['reasons'])})" for f in found[:5])
    checks.append({"name": "Test Pollution", "status": "warning" if found else "ok",
                   "message": (f"{len(found)} issue(s) look like test leftovers (a heuristic; close or delete them"
                               f" if they are): {named}{' ...' if len(found) > 5 else ''}") if found
                   else "No test pollution",
                   "category": "Data Integrity"})
    # As bd: a warning leaves the workspace usable (exit 0); only an error fails the check.
    return {"path": str(report["database_path"]), "checks": checks,
            "overall_ok": all(c["status"] != "error" for c in checks)}


def repair_deps(tracker: Tracker, *, fix: bool = False) -> dict:
    """``repair-deps --json`` as beads-mcp reads it: ``{orphans_found, orphans, fixed}``, the
    dependency records whose other end is in no issue (``external:`` references excepted)."""
    rows = tracker.db.read(
        "SELECT d.issue_id, d.depends_on_id, d.type FROM dependencies d"
        " WHERE d.depends_on_id NOT LIKE 'external:%' AND NOT EXISTS"
        " (SELECT 1 FROM issues i WHERE i.id = d.depends_on_id) ORDER BY d.issue_id, d.depends_on_id"
    )
    orphans = [{"issue_id": r[0], "depends_on_id": r[1], "type": r[2]} for r in rows]
    fixed = 0
    if fix:
        with tracker.transaction():
            for o in orphans:
                fixed += tracker.remove_dependency(o["issue_id"], o["depends_on_id"], o["type"])
    return {"orphans_found": len(orphans), "orphans": orphans, "fixed": fixed}


def schema_info(tracker: Tracker) -> dict:
    """``info --schema --json`` (cmd/bd/info.go:55): the database, issue count, config and a
    ``schema`` object; only ``issue_prefix`` of the config is shown."""
    from .schema import current_version

    issues = tracker.list(include_closed=True)
    config = {"issue_prefix": tracker.prefix}
    tables = [t for t in ("issues", "dependencies", "labels", "comments", "events", "config")
              if tracker.db.table_exists(t)]
    samples = [i["id"] for i in issues[:3]]
    return {
        "database_path": str(tracker.where()["database_path"]),
        "mode": "direct",
        "issue_count": len(issues),
        "config": config,
        "schema": {"tables": tables, "schema_version": str(current_version(tracker.db)), "config": config,
                   "sample_issue_ids": samples,
                   "detected_prefix": samples[0].rsplit("-", 1)[0] if samples else ""},
    }


def migrate_inspect(tracker: Tracker) -> dict:
    """``migrate --inspect --json`` (cmd/bd/migrate.go:1002): the tracker migrates its schema
    itself on open, so there is no plan to run and nothing to warn about."""
    from .schema import current_version

    return {
        "registered_migrations": [],
        "current_state": {"schema_version": str(current_version(tracker.db)),
                          "issue_count": len(tracker.list(include_closed=True)),
                          "config": {"issue_prefix": tracker.prefix}, "missing_config": [], "db_exists": True},
        "warnings": [],
        "invariants_to_check": [],
    }


QUICKSTART = """\
bd on a mesh tracker: quick start

This bd is mesh's tracker (bd v{version}'s commands, flags and JSON) on .beads/mesh.db.

  bd init --prefix acme            create .beads/mesh.db here
  bd create "Fix login" -t bug -p 1 -d "why and what" --json
  bd ready --json                  open, unblocked work by priority
  bd update ID --claim             take it (compare-and-set)
  bd show ID --json                fields, dependencies, dependents, comments
  bd dep add ISSUE DEPENDS_ON      ISSUE waits for DEPENDS_ON (--type related, ...)
  bd comments add ID "text"        a durable, timestamped note of what happened
  bd close ID --reason "done"      refused while a blocker is still open (--force)
  bd stats --json                  counts by state, ready work, lead time

Global flags: --json, --db PATH, --actor NAME, --readonly, -q/--quiet (and bd's sync and
daemon flags, which have nothing to do here). Env: BEADS_DB, BEADS_DIR, BD_ACTOR.
"""
