"""bd v0.50.3's JSON shapes and its report commands, computed from a ``Tracker``.

``mesh tracker`` (and the ``bd`` shim) print what bd v0.50.3, the last SQLite
release of beads, prints for the commands beads clients call (beads-mcp,
beads-ui, beadsflow, scripts). The Go structs the shapes come from are cited
where each is built (``internal/types/types.go`` and ``cmd/bd/*.go`` at tag
v0.50.3). One deliberate difference: a comment's ``id`` is the decimal string of
its number, not a JSON number, because beads-mcp >= 1.3 validates it as a
string (bd >= 1.0 emits strings) while beadsflow's ``int(id)`` reads both.

The shapes and the read commands are ``bd_reads``' (re-exported here), which a hot read
imports without this module; this one adds bd's version and its maintenance reports. Everything
reads through the ``Tracker`` API or ``tracker.db.read`` with plain SQL that SQLite and
PostgreSQL both accept.
"""

from __future__ import annotations

from .bd_reads import (
    LIST_SORTS,
    READY_SORTS,
    blocked,
    comment,
    details,
    epic_status,
    issue,
    issue_with_counts,
    list_filter,
    ready,
    statistics,
)
from .model import parse_ts
from .store import Tracker

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
