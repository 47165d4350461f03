"""Closed work lands before its dependents start, and a landed epic is closed.

A task can close without landing on its scope's integration branch: ``mesh run --no-land``,
a run with ``--onto`` another branch, or one from an older mesh. Its dependents are then
ready in the tracker, but a worktree cut from the integration branch would lack the
blocker's code. So before ``mesh run`` or ``mesh drain`` starts any task they land every such
task first (``land_closed``): the commit its closing run validated and had reviewed (named by
its trusted run head) is rebased onto the branch and validated on the merged tree exactly as
an approved run's landing is (``Lander.land_commits``), under the same queue and lock.

Crash-safe like every landing (the same crash points): the branch moves before the
``[orch:land]`` checkpoint is written (under the closing run's id, at the next seq, so a
rewrite dedupes), and a landing killed between the two is recognised by the ``Mesh-Run``
trailer on the branch and only recorded; one killed before the move is redone. A landing that conflicts or fails validation blocks the task (its dependents wait;
``mesh status`` says why) instead of letting them start without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tracker.store import Tracker

from orchestrator.protocol.checkpoint import (Checkpoint, checkpoint_problem, load_checkpoints, signing_key,
                                              write_checkpoint)
from orchestrator.protocol.faults import crash_point
from orchestrator.worktree.gitops import _git, run_base
from orchestrator.landing.records import LandResult, integration_branch_for, land_checkpoints, task_commit_message
from orchestrator.protocol.runhead import run_order, trusted_run_heads
from orchestrator.protocol.scope import Scope

if TYPE_CHECKING:  # a lander is handed in: views read this module without the lander's imports
    from orchestrator.landing.lander import Lander

__all__ = ["scope_branch", "closed_unlanded", "waiting_on_landing", "land_closed", "catch_up", "close_landed_epics", "epic_open_because",
           "landed_on"]

_CLOSING = ("closed", "awaiting_ci")


def _landings(checkpoints: Sequence[Checkpoint]) -> list[Checkpoint]:
    """The successful ``[orch:land]`` checkpoints that verify (with a signing key: a forged
    comment neither picks a branch nor passes for landed work)."""
    key = signing_key()
    return [cp for cp in land_checkpoints(list(checkpoints))
            if isinstance(cp.payload.get("artifact"), dict) and cp.payload["artifact"].get("result") == "landed"
            and checkpoint_problem(cp, key) is None]


# A task id -> its checkpoints, read once for a whole scope (``load_checkpoints_of``): the
# functions below need only each task's ``land`` and ``run-head`` checkpoints. A task not in it
# is read from the tracker.
Preloaded = Mapping[str, Sequence[Checkpoint]]


def _checkpoints(tracker: Tracker, task_id: str, preloaded: Preloaded | None) -> Sequence[Checkpoint]:
    if preloaded is not None and task_id in preloaded:
        return preloaded[task_id]
    return load_checkpoints(tracker, task_id)


def landed_on(checkpoints: Sequence[Checkpoint], branch: str) -> str | None:
    """The sha a task's work landed as on ``branch`` (its latest landing there), else None."""
    shas = [cp.payload["artifact"].get("sha") for cp in _landings(checkpoints)
            if cp.payload["artifact"].get("branch") == branch]
    return shas[-1] if shas else None


def scope_branch(tracker: Tracker, scope: Scope, tasks: Sequence[dict], onto: str | None = None, *,
                 preloaded: Preloaded | None = None) -> str:
    """The scope's integration branch: ``onto`` when given, else the branch its work already
    landed on (the latest landing recorded in its tasks' ``[orch:land]`` checkpoints), else
    ``integration_branch_for``'s name. ``mesh run``, ``mesh drain`` and ``mesh status`` all
    ask here, so they agree whichever way the scope was named."""
    if onto:
        return onto
    recorded = []
    for task in tasks:
        recorded += [(cp.created_at or "", cp.payload["artifact"]["branch"])
                     for cp in _landings(_checkpoints(tracker, task["id"], preloaded))
                     if isinstance(cp.payload["artifact"].get("branch"), str) and cp.payload["artifact"]["branch"]]
    return integration_branch_for(scope, tasks, recorded=max(recorded)[1] if recorded else None)


def closed_unlanded(tracker: Tracker, tasks: Sequence[dict], branch: str, *,
                    preloaded: Preloaded | None = None) -> list[tuple[dict, Checkpoint]]:
    """Closed tasks whose closing run committed work that never landed on ``branch``, each with
    that run's trusted run head (a task closed by hand, with no commit, has nothing to land)."""
    key = signing_key()
    out = []
    for task in tasks:
        if task["status"] != "closed":
            continue
        checkpoints = _checkpoints(tracker, task["id"], preloaded)
        if landed_on(checkpoints, branch):
            continue
        heads, _ = trusted_run_heads(checkpoints, key, task["id"])
        closing = [cp for cp in heads if cp.payload["artifact"].get("outcome") in _CLOSING
                   and cp.payload["artifact"].get("commit")]
        if closing:
            out.append((task, max(closing, key=run_order)))
    return out


def waiting_on_landing(tracker: Tracker, tasks: Sequence[dict], branch: str, *,
                       preloaded: Preloaded | None = None) -> dict[str, list[str]]:
    """Task id -> its blockers that closed without landing on ``branch``: work no dependent may
    start without (a landing run or drain lands it first; a ``--no-land`` run leaves it waiting)."""
    unlanded = {task["id"] for task, _ in closed_unlanded(tracker, tasks, branch, preloaded=preloaded)}
    out = {}
    for task in tasks:
        waits = [d["depends_on_id"] for d in task.get("dependencies") or []
                 if d.get("type") == "blocks" and d.get("depends_on_id") in unlanded]
        if waits:
            out[task["id"]] = waits
    return out


def land_closed(tracker: Tracker, lander: Lander, task: dict, head: Checkpoint) -> LandResult:
    """Land the work of closed ``task`` (its run head ``head``) on ``lander``'s branch, record it,
    and block the task when it does not land."""
    artifact = head.payload["artifact"]
    run_id, commit = head.run_id or "", artifact["commit"]
    commands = list((artifact.get("validation") or {}).get("commands") or [])
    with lander.turn(tracker, task["id"], run_id):
        crash_point("land-locked")
        if _git(lander.repo, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
            outcome = LandResult("conflict", lander.branch, detail=f"commit {commit[:12]} of run {run_id} is gone"
                                 " from the repository")
        else:
            fork = run_base(lander.repo, commit, run_id) or commit
            findings = [f"{f.get('finding_id')} [{f.get('label') or '?'}] ({f.get('issue')})"
                        for f in artifact.get("findings") or []]
            outcome = lander.land_commits(task_id=task["id"], run_id=run_id, fork=fork, head=commit,
                                          commands=commands, validated=commit,
                                          message=task_commit_message(task, run_id, findings=findings))
        _record(tracker, task["id"], run_id, outcome)
        crash_point("land-checkpoint")
    crash_point("land-unlocked")
    if outcome.result != "landed":
        tracker.update(task["id"], status="blocked")
    return outcome


def _record(tracker: Tracker, task_id: str, run_id: str, outcome: LandResult) -> None:
    """The ``[orch:land]`` checkpoint of a catch-up landing, under the closing run's id."""
    seq = 1 + max((cp.seq or 0 for cp in load_checkpoints(tracker, task_id) if cp.run_id == run_id), default=0)
    artifact = {**outcome.to_dict(), "attempt": 1, "action": "none" if outcome.result == "landed" else "block",
                "catch_up": True}
    payload: dict[str, Any] = {"v": 1, "run_id": run_id, "seq": seq, "kind": "land", "task_id": task_id,
                               "role": None, "step": ["land", "", "land"], "artifact": artifact}
    summary = (f"{outcome.result} on {outcome.branch}" + (f" at {outcome.sha[:12]} ({outcome.method})"
                                                         if outcome.sha else "")
               + ("; closed before landing: landed before its dependents start" if outcome.result == "landed"
                  else "; block"))
    write_checkpoint(tracker, task_id, "land", summary, payload, key=signing_key(), author="mesh/orchestrator",
                     details=outcome.detail)


def catch_up(tracker: Tracker, lander: Lander, tasks: Sequence[dict],
             emit: Callable[[str, dict], None] = lambda event, fields: None) -> list[LandResult]:
    """Land every closed, unlanded task of ``tasks`` (``land_closed``), oldest close first."""
    out = []
    for task, head in sorted(closed_unlanded(tracker, tasks, lander.branch),
                             key=lambda pair: pair[0].get("closed_at") or ""):
        emit("catch_up", {"task": task["id"], "run_id": head.run_id})
        result = land_closed(tracker, lander, task, head)
        emit("land_done", {"task": task["id"], "result": result.result, "sha": result.sha, "method": result.method,
                           "duration_s": result.duration_s, "validation_s": result.validation_s})
        out.append(result)
    return out


def close_landed_epics(tracker: Tracker, tasks: Sequence[dict], branch: str) -> list[str]:
    """Close each open epic of ``tasks`` whose children are all closed with their work on
    ``branch`` (the landed commits in its close reason); the ids closed."""
    closed = []
    for epic_id in sorted({task["parent"] for task in tasks if task.get("parent")}):
        if tracker.get(epic_id)["status"] == "closed" or epic_open_because(tracker, epic_id, branch):
            continue
        shas = [f"{child['id']} {(landed_on(load_checkpoints(tracker, child['id']), branch) or 'nothing')[:12]}"
                for child in tracker.list(parent=epic_id, include_closed=True, issue_type="task")]
        tracker.close_issue(epic_id, reason=f"every task landed on {branch}: " + ", ".join(shas))
        closed.append(epic_id)
    return closed


def epic_open_because(tracker: Tracker, epic_id: str, branch: str, *, preloaded: Preloaded | None = None,
                      children: Sequence[dict] | None = None) -> list[str]:
    """Why an epic stays open: each child task not closed, or closed without landing on ``branch``.
    ``children``: the epic's child tasks when the caller has read them already (every one)."""
    if children is None:
        children = tracker.list(parent=epic_id, include_closed=True, issue_type="task")
    why = [f"{child['id']} is {child['status']}" for child in children if child["status"] != "closed"]
    why += [f"{task['id']} is closed but not landed on {branch}"
            for task, _ in closed_unlanded(tracker, children, branch, preloaded=preloaded)]
    return why if children else ["it has no task"]
