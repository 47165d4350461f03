"""``mesh retry TASK``: a blocked task back to ``open``, for a new run.

A run that blocks (``validation_failed``, ``no_consensus``, a crashing worker...) leaves its
task ``blocked``; no selection rule offers a blocked task again, so without this the task
was a dead end. Retrying keeps every trace of the earlier runs: their ``[orch:*]``
checkpoints stay on the task (``mesh show``, ``mesh report``), the calls log keeps their
calls, and their commits stay on ``mesh/<task>``, which the next run keeps as
``mesh/<task>-<run>`` before it starts afresh from the current HEAD (or the integration
branch). Only the status (and the assignee, so any runner may claim it) change, by
compare-and-set: a task someone else changed meanwhile is not touched.
"""

from __future__ import annotations

from typing import Any

from redact import scrub
from tracker.errors import ConflictError
from tracker.store import Tracker

from orchestrator.protocol.checkpoint import signing_key
from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.protocol.idle import last_block
from orchestrator.protocol.supersede import close_superseded
from orchestrator.runner import unfinished_run

__all__ = ["RetryRefused", "retry_task"]


class RetryRefused(Exception):
    """The task cannot be retried (not blocked, or its last run was interrupted)."""


def _scope_flag(task: dict[str, Any]) -> str:
    labels = task.get("labels") or []
    plan = next((label for label in labels if label.startswith("plan:")), None)
    if plan:
        return f"--label {plan}"
    return f"--parent {task['parent']}" if task.get("parent") else f"--label {labels[0]}" if labels else ""


def retry_task(tracker: Tracker, task_id: str) -> dict[str, Any]:
    """Re-open the blocked task ``task_id`` for a new run; returns what was done: ``id``,
    ``was`` (the block reason and detail of its last run), ``runs`` (the earlier runs'
    ids), ``superseded`` (their review and finding issues, closed) and ``next`` (the command that runs it). ``NotFoundError`` for an unknown task,
    ``RetryRefused`` for one that is not blocked or whose last run did not finish."""
    task = tracker.get(task_id)
    task_id = task["id"]  # a short id resolved to the full one
    if task["status"] != "blocked":
        hint = {"open": "it is runnable as it is", "in_progress": "a run holds it (mesh resume to continue it)",
                "closed": "it is done"}.get(task["status"], "only a blocked task is retried")
        raise RetryRefused(f"{task_id} is {task['status']}, not blocked: {hint}")
    checkpoints = load_checkpoints(tracker, task_id)
    interrupted = unfinished_run(checkpoints, signing_key())
    if interrupted:
        raise RetryRefused(f"{task_id}: run {interrupted} was interrupted before its outcome; finish it first"
                           f" (mesh resume {task_id})")
    reason, detail = last_block(tracker, task_id)
    try:
        tracker.update(task_id, expect={"status": "blocked"}, status="open", assignee=None)
    except ConflictError as exc:
        raise RetryRefused(str(exc)) from None
    runs = list(dict.fromkeys(cp.run_id for cp in checkpoints if isinstance(cp.run_id, str) and cp.run_id))
    # The blocked attempts' review and finding issues describe work nobody continues: the next
    # attempt reviews afresh (and files its own).
    superseded = close_superseded(tracker, task_id, f"superseded: {task_id} was retried (mesh retry); the findings"
                                  f" of run {runs[-1] if runs else 'the earlier run'} go to the next attempt's review")
    was = f"{reason}: {detail}" if detail else reason
    tracker.add_comment(task_id, scrub(f"mesh retry: re-opened for a new run; it was blocked ({was}). The"
                                       f" {len(runs)} earlier run(s) keep their checkpoints here."),
                        author="mesh")
    flag = _scope_flag(task)
    return {"id": task_id, "status": "open", "was": scrub(was), "runs": runs, "superseded": superseded,
            "next": f"mesh run {flag + ' ' if flag else ''}--ids {task_id}"}
