"""Scope resolution and task selection (the profile's "Source of Truth and Scope" and
"Task Selection Policy")."""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from tracker.store import Tracker

__all__ = ["Scope", "ScopeError", "require_scope_tasks", "resolve_scope", "scope_tasks", "select_candidates",
           "scoped_candidates"]


class ScopeError(Exception):
    """No scope was given, or it names no task (exit 2: ask for one)."""


@dataclass(frozen=True)
class Scope:
    mode: str  # "label" or "parent"
    plan_label: str | None = None
    parent_epic: str | None = None

    def to_dict(self) -> dict:
        return {"mode": self.mode, "plan_label": self.plan_label, "parent_epic": self.parent_epic}


def resolve_scope(label: str | None = None, parent: str | None = None, *, env: dict | None = None) -> Scope:
    """``--label``, then ``BD_PLAN_LABEL``, then ``--parent``; otherwise ``ScopeError``."""
    environ = os.environ if env is None else env
    if label:
        return Scope("label", plan_label=label)
    if environ.get("BD_PLAN_LABEL"):
        return Scope("label", plan_label=environ["BD_PLAN_LABEL"])
    if parent:
        return Scope("parent", parent_epic=parent)
    raise ScopeError("no scope: pass --label <plan_label> (or set BD_PLAN_LABEL) or --parent <epic-id>")


def _sort_key(issue: dict) -> tuple:
    from tracker.model import normalize_ts

    return (issue.get("priority", 2), normalize_ts(issue.get("created_at")) or "", issue["id"])


def scoped_candidates(tracker: Tracker, scope: Scope, *, status: str) -> list[dict]:
    """Scoped tasks with ``status`` (``in_progress``) or ready ones (``ready``), in tie-break order."""
    labels = [scope.plan_label] if scope.plan_label else []
    if status == "ready":
        found = tracker.ready(labels=labels, issue_type="task", parent=scope.parent_epic)
    else:
        found = tracker.list(status=status, labels=labels, issue_type="task", parent=scope.parent_epic,
                             descendants=True)
        # An in-progress task behind an open blocker (a CI gate, a human gate) is waiting, not runnable.
        found = [issue for issue in found if not tracker.blockers(issue["id"])]
    return sorted(found, key=_sort_key)


def select_candidates(tracker: Tracker, scope: Scope, ids: Sequence[str] = ()) -> list[tuple[dict, str]]:
    """Every runnable task in selection order, with why: scoped in_progress first, then
    ready ones; ``ids`` restricts them; ties break on (priority, created_at, id)."""
    wanted = set(ids)
    out = []
    for status, why in (("in_progress", "in_progress_first"), ("ready", "first_ready")):
        for issue in scoped_candidates(tracker, scope, status=status):
            if not wanted or issue["id"] in wanted:
                out.append((issue, why))
    return out


def scope_tasks(tracker: Tracker, scope: Scope) -> list[dict]:
    """Every task of the scope, closed ones included."""
    labels = [scope.plan_label] if scope.plan_label else []
    return tracker.list(labels=labels, issue_type="task", parent=scope.parent_epic, descendants=True,
                        include_closed=True)


def require_scope_tasks(tracker: Tracker, scope: Scope) -> list[dict]:
    """``scope_tasks``, or ``ScopeError`` naming the closest existing labels or epics when the
    scope holds no task: checked before anything (a branch, a worktree) is made for it, so a
    typo'd ``--label`` or ``--parent`` creates nothing."""
    from tracker.errors import NotFoundError

    try:
        tasks = scope_tasks(tracker, scope)
    except NotFoundError:
        tasks = []
    if tasks:
        return tasks
    issues = tracker.list(include_closed=True)
    if scope.plan_label:
        what, name = "label", scope.plan_label
        known = sorted({label for issue in issues for label in issue.get("labels") or []})
    else:
        what, name = "epic", scope.parent_epic or ""
        known = sorted(issue["id"] for issue in issues if issue.get("issue_type") == "epic")
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(close)}" if close else (f"; known: {', '.join(known[:5])}" if known else "")
    exists = name in known
    raise ScopeError(f"no task in scope: {what} {name!r} " + ("holds no task" if exists else "is unknown" + hint))
