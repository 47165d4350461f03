"""Why ``mesh run`` found no runnable task, and what to do about it.

"no runnable task in scope" with exit 0 used to be all a user got, whether the label was
misspelt, the scope held no task, or every task had ended blocked: a dead end. Now:

- a label no issue carries, or an epic that does not exist, is a usage error (exit 2) naming
  the closest existing labels or epics (``UnknownScope``);
- otherwise the report lists each task of the scope that is not runnable and why: blocked
  (with the reason of its last run and ``mesh retry TASK``), waiting on its blockers, in
  progress elsewhere, deferred; closed ones are counted.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracker.errors import NotFoundError
from tracker.store import Tracker

from orchestrator.protocol.outcomes import RunReport

from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.safe_text import clip
from orchestrator.protocol.scope import Scope, ScopeError, scope_tasks

__all__ = ["IdleReport", "UnknownScope", "check_scope", "explain_idle", "idle_lines", "last_block"]


class UnknownScope(ScopeError):
    """The scope names a label no issue carries or an epic that does not exist (exit 2)."""


@dataclass
class IdleReport(RunReport):
    """The report of a run that found nothing to run: ``why`` (``empty_scope``, ``all_closed``,
    ``all_blocked``, ``nothing_ready``) and one entry per task of the scope that is not
    runnable (``id``, ``title``, ``status``, ``reason``, ``next``: the command that helps)."""

    why: str = "nothing_ready"
    tasks: list[dict[str, Any]] = field(default_factory=list)
    closed: int = 0
    types: list[str] = field(default_factory=lambda: ["task"])  # the types the scope runs
    others: list[dict[str, Any]] = field(default_factory=list)  # open issues of other types (other_types)

    @property
    def exit_code(self) -> int:
        """3 when every task of the scope is blocked, as for a run that ends blocked; else 0."""
        return 3 if self.why == "all_blocked" else 0

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["idle"] = {"why": self.why, "closed": self.closed, "tasks": self.tasks, "types": self.types,
                       "others": self.others}
        return out


def _scope_name(scope: Scope) -> str:
    return f"label {scope.plan_label}" if scope.plan_label else f"epic {scope.parent_epic}"


def check_scope(tracker: Tracker, scope: Scope) -> None:
    """Raise ``UnknownScope`` when no issue carries the scope's label, or its epic does not
    exist, naming the closest existing ones (difflib)."""
    if scope.plan_label:
        if any(i["status"] != "tombstone" for i in tracker.list(labels=[scope.plan_label], include_closed=True)):
            return
        from tracker.bd_views import label_counts

        known = [row["label"] for row in label_counts(tracker)]
        wanted, what, flag = scope.plan_label, "label", "--label"
    else:
        try:
            tracker.get(scope.parent_epic or "")
            return
        except NotFoundError:
            pass
        known = [i["id"] for i in tracker.list(issue_type="epic", include_closed=True) if i["status"] != "tombstone"]
        wanted, what, flag = scope.parent_epic or "", "epic", "--parent"
    close = difflib.get_close_matches(wanted, known, n=3, cutoff=0.5)
    hint = (f"; did you mean {' or '.join(f'{flag} {name}' for name in close)}?" if close
            else f"; the tracker's {what}s: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known
            else f"; the tracker has no {what} yet")
    message = f"no issue has label {wanted!r}" if what == "label" else f"no epic {wanted!r} in the tracker"
    raise UnknownScope(message + hint)


_LAND_BLOCKS = {"conflict": "merge_conflict", "validation_failed": "integration_validation_failed"}


def last_block(tracker: Tracker, task_id: str) -> tuple[str, str]:
    """The block reason and detail of a task's latest ``[orch:outcome]``, or of a failed
    ``[orch:land]`` after it (a closed task whose later landing failed, ``orchestrator.landing.catch_up``,
    was blocked by that landing); ``blocked`` and "" when no mesh run blocked it."""
    ends = [cp for cp in load_checkpoints(tracker, task_id) if cp.kind in ("outcome", "land")]
    artifact = (ends[-1].payload.get("artifact") or {}) if ends else {}
    if ends and ends[-1].kind == "land":
        reason, detail = _LAND_BLOCKS.get(artifact.get("result")), artifact.get("detail")
    else:
        reason, detail = artifact.get("block_reason"), artifact.get("block_detail")
    return (reason if isinstance(reason, str) and reason else "blocked",
            detail if isinstance(detail, str) else "")


_NOT_RUN = ("epic", "gate", "agent", "role")
_MESH_FILED = ("mesh:review", "mesh:finding")


def other_types(tracker: Tracker, scope: Scope) -> list[dict[str, Any]]:
    """Open issues of the scope whose type it does not run (``id``, ``title``, ``type``): a bug
    under a scope that runs tasks only. Epics, coordination issues and the review and finding
    issues mesh files are not work of the scope."""
    labels = [scope.plan_label] if scope.plan_label else []
    found = tracker.list(labels=labels, parent=scope.parent_epic, descendants=True) \
        if scope.plan_label or scope.parent_epic else []
    return [{"id": i["id"], "title": i.get("title") or "", "type": i["issue_type"]} for i in found
            if i["issue_type"] not in scope.types and i["issue_type"] not in _NOT_RUN
            and not set(i.get("labels") or []) & set(_MESH_FILED)]


def explain_idle(tracker: Tracker, scope: Scope, ids: Sequence[str] = (), held: Sequence[str] = ()) -> IdleReport:
    """Why no task of ``scope`` (restricted to ``ids``) is runnable; ``held`` are the runner's
    reasons for the candidates it could not take (another run's lease, a person's work).
    Raises ``UnknownScope`` for a scope that names nothing."""
    check_scope(tracker, scope)
    wanted = set(ids)
    tasks = [t for t in scope_tasks(tracker, scope) if t["status"] != "tombstone"]
    entries: list[dict[str, Any]] = []
    for missing in sorted(wanted - {t["id"] for t in tasks}):
        entries.append({"id": missing, "title": "", "status": "not in scope",
                        "reason": f"--ids {missing}: no task of {_scope_name(scope)} has this id", "next": ""})
    tasks = [t for t in tasks if not wanted or t["id"] in wanted]
    closed = sum(1 for t in tasks if t["status"] == "closed")
    for task in tasks:
        status, task_id = task["status"], task["id"]
        if status == "closed":
            continue
        entry = {"id": task_id, "title": task.get("title") or "", "status": status, "reason": status, "next": ""}
        if status == "blocked":
            reason, detail = last_block(tracker, task_id)
            entry.update(reason=f"{reason}: {detail}" if detail else reason, next=f"mesh retry {task_id}")
        elif blockers := tracker.blockers(task_id):
            entry["reason"] = "waiting on " + ", ".join(f"{b['id']} ({b['status']})" for b in blockers)
        elif status == "in_progress":
            entry["reason"] = next((h for h in held if h.startswith(task_id)), "in progress")
        entries.append(entry)
    open_tasks = [t for t in tasks if t["status"] != "closed"]
    if not tasks:
        why = "empty_scope"
    elif not open_tasks:
        why = "all_closed"
    elif all(t["status"] == "blocked" for t in open_tasks):
        why = "all_blocked"
    else:
        why = "nothing_ready"
    return IdleReport(orch_run_id="", preflight="", scope=scope.to_dict(), task=None, outcome="no_runnable_task",
                      mutations=[f"skipped: {h}" for h in held], why=why, tasks=entries, closed=closed,
                      types=list(scope.types), others=other_types(tracker, scope))


_WHY = {"empty_scope": "the scope holds no task", "all_closed": "every task of the scope is closed",
        "all_blocked": "every task of the scope is blocked", "nothing_ready": "no task of the scope is ready"}


def other_types_lines(others: Sequence[dict[str, Any]], types: Sequence[str]) -> list[str]:
    """Lines naming the scope's issues of types it does not run, and the key that would run them."""
    if not others:
        return []
    wanted = list(dict.fromkeys([*types, *(o["type"] for o in others)]))
    lines = [f"  not run: {len(others)} issue(s) of another type in scope; runnable_types is"
             f" {json.dumps(list(types))}. To run them too, set in mesh.toml: runnable_types = {json.dumps(wanted)}"]
    lines += [f"  {o['id']}  {o['type']}: {clip(o['title'], 120)}" for o in others[:10]]
    if len(others) > 10:
        lines.append(f"  ... and {len(others) - 10} more")
    return lines


def idle_lines(report: IdleReport) -> list[str]:
    """The text of an ``IdleReport``: why, then one line per task that is not runnable."""
    scope = report.scope
    where = f"label {scope['plan_label']}" if scope.get("plan_label") else f"epic {scope.get('parent_epic')}"
    lines = [f"no runnable task in scope ({where}): {_WHY.get(report.why, report.why)}"]
    kinds = " or ".join(report.types)
    if report.why == "empty_scope":
        flag = f"--label {scope['plan_label']}" if scope.get("plan_label") else f"--parent {scope.get('parent_epic')}"
        lines.append(f"  mesh runs issues of type {kinds} (config runnable_types); none has {where}:"
                     f" mesh tracker create TITLE --type {report.types[0]} {flag}")
    lines += other_types_lines(report.others, report.types)
    for t in report.tasks:
        lines.append(f"  {t['id']}  {t['status']}: {clip(t['reason'], 200)}" + (f"  ->  {t['next']}" if t["next"] else ""))
    if report.closed:
        lines.append(f"  {report.closed} task(s) closed")
    return lines
