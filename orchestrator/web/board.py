"""What the board and the drain view show: plain functions over the tracker returning dicts.

Both are read from the tracker alone (no process of a runner is asked), so a run or a drain on
another machine shows the same as one here: a task's round is its newest ``[orch:*]``
checkpoint, its block reason its last outcome's, its commit its ``[orch:land]``'s, its cost the
calls its runs logged. Every string a worker or a tracker user wrote is scrubbed and made
printable here; the templates escape it.

The board stays quick on a large tracker: the tasks come from one listing, and checkpoints are
read only for the tasks it shows a round, a reason or a commit of (running and blocked ones,
and the newest ``COLUMN_LIMIT`` closed ones); the rest of a long column is counted.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from redact import scrub
from tracker.errors import TrackerError
from tracker.model import parse_ts
from tracker.store import Tracker

from orchestrator.config import user_price_table
from orchestrator.landing.records import land_checkpoints
from orchestrator.ledger.calls import calls_for
from orchestrator.ledger.usage import UsageError, call_cost, money
from orchestrator.protocol.checkpoint import Checkpoint, load_checkpoints
from orchestrator.protocol.human_review import REQUEST
from orchestrator.protocol.idle import last_block
from orchestrator.protocol.scope import Scope, scope_tasks
from orchestrator.safe_text import printable

__all__ = ["COLUMN_LIMIT", "parse_scope", "scope_param", "scope_choices", "board", "drain_view", "safe", "when"]

COLUMN_LIMIT = 100
COLUMNS = ("ready", "waiting", "running", "blocked", "closed", "landed")


def safe(value: Any) -> str:
    """Tracker or model text as one printable, scrubbed string (None: "")."""
    return "" if value is None else printable(scrub(str(value)))


def parse_scope(text: str | None) -> Scope | None:
    """``label:NAME`` or ``epic:ID`` (the board's scope parameter) as a Scope; None for all tasks."""
    if not text:
        return None
    kind, _, name = text.partition(":")
    if kind == "label" and name:
        return Scope("label", plan_label=name)
    if kind == "epic" and name:
        return Scope("parent", parent_epic=name)
    return None


def scope_param(scope: Scope | None) -> str:
    """The scope parameter of ``scope`` (the inverse of ``parse_scope``)."""
    if scope is None:
        return ""
    return f"label:{scope.plan_label}" if scope.mode == "label" else f"epic:{scope.parent_epic}"


def scope_choices(tracker: Tracker) -> dict[str, Any]:
    """The scopes a person can pick: every label (plan labels first) and every epic.

    Two plain queries rather than issue listings: the picker is on every board page, and a
    large tracker has hundreds of epics whose labels and counts it does not show."""
    rows = tracker.db.read("SELECT label, COUNT(*) FROM labels GROUP BY label ORDER BY label")
    labels = sorted(((str(r[0]), int(r[1])) for r in rows), key=lambda lc: (not lc[0].startswith("plan:"), lc[0]))
    epics = tracker.db.read("SELECT id, title, status FROM issues WHERE issue_type = 'epic'"
                            " AND status <> 'tombstone' ORDER BY id")
    return {"labels": [{"value": f"label:{name}", "name": safe(name), "count": count} for name, count in labels],
            "epics": [{"value": f"epic:{e['id']}", "id": safe(e["id"]), "title": safe(e["title"]),
                       "status": safe(e["status"])} for e in epics]}


def when(text: Any) -> datetime | None:
    """A tracker timestamp as an aware datetime (None when it is not one)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_ts(text)
    except ValueError:
        return None


def _landed(checkpoints: list[Checkpoint]) -> dict[str, str] | None:
    for cp in reversed(land_checkpoints(checkpoints)):
        art = cp.payload.get("artifact") or {}
        if isinstance(art, dict) and art.get("result") == "landed" and isinstance(art.get("sha"), str):
            return {"sha": safe(art["sha"]), "short": safe(art["sha"][:12]), "branch": safe(art.get("branch"))}
    return None


def _round(checkpoints: list[Checkpoint]) -> dict[str, Any]:
    """Where the task's newest run is: its newest checkpoint's kind and cycles, and whether it
    waits for a person's review."""
    if not checkpoints:
        return {"round": "starting", "cycle": "", "waits_for_person": False, "run_id": ""}
    last = checkpoints[-1]
    p = last.payload
    cycle = f"c{p.get('consensus_cycle')}/r{p.get('review_cycle')}" if "consensus_cycle" in p else ""
    return {"round": safe(last.kind), "cycle": safe(cycle), "waits_for_person": last.kind == REQUEST,
            "run_id": safe(last.run_id)}


def _card(task: dict[str, Any]) -> dict[str, Any]:
    return {"id": safe(task["id"]), "title": safe(task.get("title")), "priority": task.get("priority"),
            "assignee": safe(task.get("assignee")), "parent": safe(task.get("parent")),
            "labels": [safe(label) for label in task.get("labels") or []]}


def board(tracker: Tracker, scope: Scope | None, *, limit: int = COLUMN_LIMIT) -> dict[str, Any]:
    """The scope's tasks in columns (ready, waiting on blockers, running with their round,
    blocked with the reason, closed, landed with the commit) and its epics with their progress.

    Each column holds at most ``limit`` cards (closed and landed ones newest first) and its full
    count. ``scope`` None: every task of the tracker.
    """
    tasks = scope_tasks(tracker, scope) if scope else tracker.list(issue_type="task", include_closed=True)
    labels = [scope.plan_label] if scope and scope.plan_label else []
    ready = {t["id"] for t in tracker.ready(labels=labels, issue_type="task", parent=scope.parent_epic if scope else None)}
    columns: dict[str, list[dict[str, Any]]] = {name: [] for name in COLUMNS}
    counts = dict.fromkeys(COLUMNS, 0)
    finished: list[dict[str, Any]] = []
    epics: dict[str, dict[str, int]] = {}
    for task in tasks:
        status = task["status"]
        if task.get("parent"):
            progress = epics.setdefault(task["parent"], {"total": 0, "closed": 0})
            progress["total"] += 1
            progress["closed"] += status == "closed"
        if status == "tombstone":
            continue
        if status == "closed":
            finished.append(task)
            continue
        column = {"open": "ready" if task["id"] in ready else "waiting", "in_progress": "running",
                  "blocked": "blocked"}.get(status, "waiting")
        counts[column] += 1
        if len(columns[column]) >= limit:
            continue
        card = _card(task)
        if column == "running":
            card.update(_round(load_checkpoints(tracker, task["id"])))
        elif column == "blocked":
            reason, detail = last_block(tracker, task["id"])
            card.update(reason=safe(reason), detail=safe(detail)[:300])
        columns[column].append(card)
    finished.sort(key=lambda t: str(t.get("closed_at") or ""), reverse=True)
    for task in finished:
        if len(columns["closed"]) + len(columns["landed"]) >= limit:
            # Past the limit a closed task is counted as closed: telling landed from closed needs its checkpoints.
            counts["closed"] += 1
            continue
        card = _card(task)
        card["close_reason"] = safe(task.get("close_reason"))[:200]
        landed = _landed(load_checkpoints(tracker, task["id"]))
        column = "landed" if landed else "closed"
        if landed:
            card["landed"] = landed
        counts[column] += 1
        columns[column].append(card)
    epic_rows = []
    for epic_id, progress in epics.items():
        try:
            epic = tracker.get(epic_id)
        except Exception:  # a dangling parent id: shown by its id alone
            epic = {"id": epic_id, "title": "(not in the tracker)", "status": "missing"}
        share = round(100 * progress["closed"] / progress["total"]) if progress["total"] else 0
        epic_rows.append({"id": safe(epic["id"]), "title": safe(epic.get("title")), "status": safe(epic.get("status")),
                          **progress, "percent": share, "tenth": min(10, share // 10)})
    return {"scope": scope_param(scope), "columns": columns, "counts": counts, "limit": limit,
            "epics": sorted(epic_rows, key=lambda e: e["id"]), "total": len(tasks)}


def _elapsed(start: datetime | None, end: datetime | None) -> str:
    if start is None:
        return ""
    seconds = int(((end or datetime.now(timezone.utc)) - start).total_seconds())
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def drain_view(tracker: Tracker, scope: Scope, *, prices: Any = None, limit: int = 200) -> dict[str, Any]:
    """The runs of a scope, whichever runner runs them (this machine or another): per task its
    newest run's round, elapsed time, cost and outcome, running ones first; and the commits that
    landed on the scope's integration branch, newest first."""
    table = prices if prices is not None else user_price_table()
    rows, landings = [], []
    for task in scope_tasks(tracker, scope):
        if not task.get("comment_count") or task["status"] == "tombstone":
            continue
        checkpoints = load_checkpoints(tracker, task["id"])
        runs = [cp.run_id for cp in checkpoints if isinstance(cp.run_id, str) and cp.kind != "land"]
        if not runs:
            continue
        run_id = runs[-1]
        steps = [cp for cp in checkpoints if cp.run_id == run_id]
        outcome = next((cp.payload.get("artifact") or {} for cp in reversed(steps) if cp.kind == "outcome"), None)
        start, end = when(steps[0].created_at), when(steps[-1].created_at) if outcome is not None else None
        cost, calls = 0.0, 0
        try:
            for call in calls_for(tracker, run_id=run_id):
                calls += 1
                cost += call_cost(call.get("usage") or {}, call.get("model"), table).usd or 0.0
        except (UsageError, TrackerError):  # no calls table yet: nothing was called
            pass
        state = safe(outcome.get("outcome")) if isinstance(outcome, dict) else "running"
        row = {"id": safe(task["id"]), "title": safe(task.get("title")), "run_id": safe(run_id),
               "runner": safe(task.get("assignee")), "state": state or "ended", **_round(steps),
               "started": safe(steps[0].created_at), "elapsed": _elapsed(start, end), "cost": money(cost),
               "calls": calls, "block_reason": safe(outcome.get("block_reason")) if isinstance(outcome, dict) else "",
               "sort": (outcome is None, str(steps[0].created_at or ""))}
        rows.append(row)
        for cp in land_checkpoints(checkpoints):
            art = cp.payload.get("artifact") or {}
            if isinstance(art, dict) and art.get("result") == "landed":
                landings.append({"task": safe(task["id"]), "sha": safe(art.get("sha")), "short": safe(str(art.get("sha"))[:12]),
                                 "branch": safe(art.get("branch")), "method": safe(art.get("method")),
                                 "at": safe(cp.created_at)})
    rows.sort(key=lambda r: r.pop("sort"), reverse=True)
    landings.sort(key=lambda land: land["at"], reverse=True)
    from orchestrator.drain import stop_token  # the drain library is heavy: imported when a drain is viewed

    stop = stop_token(tracker, scope)
    return {"scope": scope_param(scope), "rows": rows[:limit], "landings": landings,
            "running": sum(r["state"] == "running" for r in rows),
            "stop_requested_by": safe(stop.partition(" ")[2]) if stop else ""}
