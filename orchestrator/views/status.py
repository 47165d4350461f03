"""``mesh status``: a scope as a tree of epics and tasks, with what mesh did to each.

For every task: its state, its open blockers, its branch ``mesh/<task>`` (when it exists) and
the commit its work landed as on the scope's integration branch (``catch_up.scope_branch``,
the branch ``mesh run`` and ``mesh drain`` use, from its ``[orch:land]`` checkpoints); a
task closed without landing there, and the dependents that wait for it; for every open
epic, what keeps it open. Read-only: nothing is written to the tracker or to git. With
``MESH_SIGNING_KEY`` set, a ``land`` or ``run-head`` checkpoint that does not verify counts
for nothing and the task says how many it has (``untrusted``), as ``mesh show`` does.

A scope can hold a thousand tasks: their ``land`` and ``run-head`` checkpoints, their blockers
and the repository's ``mesh/*`` branches are each read once for all of them, not task by task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracker.store import Tracker

from orchestrator.protocol.checkpoint import Checkpoint, load_checkpoints_of, signing_key, trust_of
from orchestrator.worktree.gitops import GitError, _git, repo_root
from orchestrator.landing.catch_up import closed_unlanded, epic_open_because, landed_on, scope_branch, waiting_on_landing
from orchestrator.landing.records import land_checkpoints
from orchestrator.safe_text import clip, printable
from orchestrator.protocol.scope import Scope, scope_tasks

__all__ = ["scope_status", "render_status"]


def _branches(repo: Path | None) -> set[str]:
    """The repository's local branches (none without a repository), in one git call."""
    if repo is None:
        return set()
    listed = _git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/", check=False)
    return {ref[len("refs/heads/"):] for ref in listed.stdout.splitlines()} if listed.returncode == 0 else set()


def _task_entry(task: dict, checkpoints: list[Checkpoint], blockers: list[str], branches: set[str], branch: str,
                unlanded: set[str], waiting: dict[str, list[str]]) -> dict[str, Any]:
    key = signing_key()
    untrusted = [trust_of(cp, key, task_id=task["id"])[0] == "untrusted" for cp in checkpoints]
    trusted = [cp for cp, bad in zip(checkpoints, untrusted) if not bad]
    lands = [cp.payload.get("artifact") or {} for cp in land_checkpoints(trusted)]
    last_land = lands[-1].get("result") if lands else None
    heads = [cp.payload.get("artifact") or {} for cp in trusted if cp.kind == "run-head"]
    # Why a blocked task stopped: its last run's block reason (a person's block has none).
    block_reason = heads[-1].get("block_reason") if heads and task["status"] == "blocked" else None
    task_branch = f"mesh/{task['id']}"
    return {
        "id": task["id"],
        "title": task["title"],
        "status": task["status"],
        "assignee": task.get("assignee"),
        "blockers": blockers,
        "branch": task_branch if task_branch in branches else None,
        "landed": landed_on(checkpoints, branch),
        "last_land": last_land,
        "unlanded": task["id"] in unlanded,
        "waits_for_landing": waiting.get(task["id"], []),
        "untrusted": sum(untrusted),
        "block_reason": block_reason if isinstance(block_reason, str) else None,
    }


def scope_status(tracker: Tracker, scope: Scope, *, repo: Path | None = None,
                 onto: str | None = None) -> dict[str, Any]:
    """The scope's tree: ``{"scope", "branch", "epics": [{"id", "title", "status", "tasks": [...]}]}``.

    Tasks without an epic in scope sit under a pseudo-epic with id None.
    """
    try:
        root = repo_root(repo) if repo is not None else None
    except GitError:
        root = None
    tasks = scope_tasks(tracker, scope)
    ids = [task["id"] for task in tasks]
    preloaded = load_checkpoints_of(tracker, ids, kinds=("land", "run-head"))
    blockers = tracker.blocker_ids(ids)
    branches = _branches(root)
    branch = scope_branch(tracker, scope, tasks, onto, preloaded=preloaded)
    unlanded = {task["id"] for task, _ in closed_unlanded(tracker, tasks, branch, preloaded=preloaded)}
    waiting = waiting_on_landing(tracker, tasks, branch, preloaded=preloaded)
    epics: dict[str | None, dict[str, Any]] = {}
    for task in tasks:
        parent = task.get("parent") or scope.parent_epic
        if parent not in epics:
            epic = tracker.get(parent) if parent else None
            # The scope of an epic holds every child task of it: no second read of them.
            children = ([t for t in tasks if t.get("parent") == parent]
                        if parent == scope.parent_epic and not scope.plan_label else None)
            open_because = (epic_open_because(tracker, parent, branch, preloaded=preloaded, children=children)
                            if epic and epic["status"] != "closed" else [])
            epics[parent] = {"id": parent, "title": epic["title"] if epic else "(no epic)",
                             "status": epic["status"] if epic else None, "open_because": open_because,
                             "tasks": []}
        epics[parent]["tasks"].append(_task_entry(task, preloaded[task["id"]], blockers[task["id"]], branches,
                                                  branch, unlanded, waiting))
    tip = None
    if branch in branches:
        tip = _git(root, "rev-parse", f"refs/heads/{branch}").stdout.strip()
    return {"scope": scope.to_dict(), "branch": branch, "branch_tip": tip, "epics": list(epics.values())}


def render_status(status: dict[str, Any]) -> str:
    """The tree as text, one line per epic and per task."""
    scope = status["scope"]
    out = [f"scope {scope.get('plan_label') or scope.get('parent_epic')}  integration branch {status['branch']}"
           + (f" at {status['branch_tip'][:12]}" if status["branch_tip"] else " (not created yet)")]
    if not status["epics"]:
        out.append("  no task in scope")
    for epic in status["epics"]:
        out.append(f"{epic['id'] or '-'}  {epic['title']}" + (f"  [{epic['status']}]" if epic["status"] else "")
                   + (f"  open: {'; '.join(epic['open_because'])}" if epic.get("open_because") else
                      "  open: every task landed (the next mesh run or drain closes it)"
                      if epic["status"] not in (None, "closed") else ""))
        for i, task in enumerate(epic["tasks"]):
            corner = "└─" if i == len(epic["tasks"]) - 1 else "├─"
            bits = [task["status"] + (f": {task['block_reason']}" if task.get("block_reason") else "")]
            if task["assignee"]:
                bits.append(f"@{task['assignee']}")
            if task["blockers"]:
                bits.append("blocked by " + ",".join(task["blockers"]))
            if task["branch"]:
                bits.append(task["branch"])
            if task["landed"]:
                bits.append(f"landed {task['landed'][:12]}")
            elif task["unlanded"]:
                bits.append(f"not landed on {status['branch']}: mesh run or mesh drain lands it before its dependents")
            elif task["last_land"]:
                bits.append(f"land {task['last_land']}")
            if task.get("untrusted"):
                bits.append(f"UNTRUSTED: {task['untrusted']} checkpoint(s) unsigned or wrongly signed, ignored")
            if task["waits_for_landing"]:
                bits.append("waits for " + ",".join(task["waits_for_landing"]) + " to land")
            out.append(f"  {corner} {task['id']}  {clip(task['title'], 50)}  ({'; '.join(bits)})")
    return "\n".join(printable(line, one_line=True) for line in out)
