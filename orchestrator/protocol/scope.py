"""Scope resolution and task selection (the profile's "Source of Truth and Scope" and
"Task Selection Policy")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from tracker.store import Tracker

__all__ = ["Scope", "ScopeError", "resolve_scope", "scope_tasks", "select_candidates", "scoped_candidates"]


class ScopeError(Exception):
    """No scope was given (exit 2: ask for one)."""


@dataclass(frozen=True)
class Scope:
    mode: str  # "label" or "parent"
    plan_label: str | None = None
    parent_epic: str | None = None
    # The issue types a run takes (config ``runnable_types``); not part of the scope's name.
    types: tuple[str, ...] = field(default=("task",), compare=False)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "plan_label": self.plan_label, "parent_epic": self.parent_epic}


def resolve_scope(label: str | None = None, parent: str | None = None, *, env: dict | None = None,
                  types: Sequence[str] = ("task",)) -> Scope:
    """``--label``, then ``BD_PLAN_LABEL``, then ``--parent``; otherwise ``ScopeError``.
    ``types``: the issue types the scope runs (config ``runnable_types``)."""
    environ = os.environ if env is None else env
    if label:
        return Scope("label", plan_label=label, types=tuple(types))
    if environ.get("BD_PLAN_LABEL"):
        return Scope("label", plan_label=environ["BD_PLAN_LABEL"], types=tuple(types))
    if parent:
        return Scope("parent", parent_epic=parent, types=tuple(types))
    raise ScopeError("no scope: pass --label <plan_label> (or set BD_PLAN_LABEL) or --parent <epic-id>")


def _sort_key(issue: dict) -> tuple:
    from tracker.model import normalize_ts

    return (issue.get("priority", 2), normalize_ts(issue.get("created_at")) or "", issue["id"])


def scope_tasks(tracker: Tracker, scope: Scope) -> list[dict]:
    """Every task of the scope (every issue of its runnable types), closed ones included."""
    labels = [scope.plan_label] if scope.plan_label else []
    return tracker.list(labels=labels, issue_type=list(scope.types), parent=scope.parent_epic, descendants=True,
                        include_closed=True)


def scoped_candidates(tracker: Tracker, scope: Scope, *, status: str) -> list[dict]:
    """Scoped tasks with ``status`` (``in_progress``) or ready ones (``ready``), in tie-break order."""
    labels = [scope.plan_label] if scope.plan_label else []
    if status == "ready":
        found = tracker.ready(labels=labels, issue_type=list(scope.types), parent=scope.parent_epic)
    else:
        found = tracker.list(status=status, labels=labels, issue_type=list(scope.types), parent=scope.parent_epic,
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
