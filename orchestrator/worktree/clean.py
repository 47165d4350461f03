"""``mesh clean``: the branches and worktrees that finished work left behind.

Every run leaves a task branch ``mesh/<task>`` with a worktree under the cache folder
(``~/.cache/mesh/worktrees/<repo>-<hash>/<task>``), and a new run after a blocked one keeps
the earlier attempt as ``mesh/<task>-<run>``. They are evidence while the work is not
landed, and clutter afterwards. ``mesh clean`` plans, for each of them, to remove it or keep
it, and says why; it removes only with ``yes`` (``--yes``), and only:

- branches whose task is not in progress (a running or interrupted run needs its worktree);
- branches whose work is all on the base branch (the checked-out one, main, master) or on an
  integration branch (``mesh/land/*``, ``drain.onto``): the branch is an ancestor of it,
  merging it there would change nothing (work that landed rebased or squash-merged), or one of
  its commits landed the branch's tip as one commit (its ``Mesh-Source`` trailer names the tip,
  or it has the tip's tree), whatever landed on it later;
- earlier attempts (``mesh/<task>-<run>``) of a closed task whose work landed: one of those
  branches holds a commit carrying ``Mesh-Task: <task>``;
- worktrees without uncommitted changes, and cache folders no git worktree uses.

Unlanded work (commits found nowhere else), integration branches, protected branches and a
branch checked out by hand are always kept. Git runs through ``gitops`` (hooks off, the
``GIT_*`` variables that relocate a repository stripped).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from tracker.errors import NotFoundError
from tracker.store import Tracker

from orchestrator.worktree.gitops import _git, _same_path, _worktree_entries, is_protected, worktree_home

__all__ = ["CleanItem", "clean_plan", "clean"]

_RUN_SUFFIX = re.compile(r"^(?P<task>.+)-(?P<run>run-\d{8}T\d{6}Z-[0-9a-f]{6})$")
_LAND_PREFIX = "mesh/land/"


@dataclass
class CleanItem:
    """One branch (with its worktree, if any) or one stray worktree folder, and its fate."""

    kind: str  # "branch", "folder", or "home" (a task's worker HOMEs, orchestrator.sandbox.worker_homes)
    name: str  # the branch name, or the folder's path
    task: str | None
    action: str  # "remove" or "keep" (after ``clean``: "removed", or "kept" when removing failed)
    why: str
    worktree: str | None = None
    sha: str | None = None  # the branch's tip when planned: it is deleted only if still there

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _targets(repo: Path, onto: str | None) -> list[str]:
    """The branches work counts as landed on: the checked-out one, main, master, every
    integration branch and ``onto``, those that exist."""
    heads = _git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").stdout.split()
    current = _git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    wanted = [current, "main", "master", onto or "", *(h for h in heads if h.startswith(_LAND_PREFIX))]
    return [name for name in dict.fromkeys(wanted) if name and name in heads]


def _landed_on(repo: Path, branch: str, targets: Sequence[str]) -> str | None:
    """The first target holding all of ``branch``'s work (and how, when it landed as a commit of
    its own), else None."""
    for target in targets:
        if _git(repo, "merge-base", "--is-ancestor", branch, target, check=False).returncode == 0:
            return target
        merged = _git(repo, "merge-tree", "--write-tree", "--no-messages", target, branch, check=False)
        tree = _git(repo, "rev-parse", f"{target}^{{tree}}", check=False).stdout.strip()
        if merged.returncode == 0 and merged.stdout.split("\n", 1)[0].strip() == tree:
            return target
        if squash := _squashed_into(repo, branch, target):
            return f"{target} (squashed into {squash[:12]})"
    return None


def _squashed_into(repo: Path, branch: str, target: str) -> str | None:
    """The commit of ``target`` (since ``branch`` forked) that landed ``branch``'s tip as one
    commit: it names the tip in its ``Mesh-Source`` trailer (a mesh landing), or has the tip's
    very tree (``git merge --squash`` by hand). Later commits on ``target`` may change the same
    lines again, so a merge of the branch would no longer change nothing."""
    tip, tip_tree = _git(repo, "rev-parse", f"{branch}^{{commit}}", f"{branch}^{{tree}}").stdout.split()
    log = _git(repo, "log", "--format=%H%x00%T%x00%(trailers:key=Mesh-Source,valueonly,unfold)%x1e", target,
               f"^{tip}", "--", check=False).stdout
    for record in log.split("\x1e"):
        sha, _, rest = record.strip("\n").partition("\x00")
        tree, _, sources = rest.partition("\x00")
        if sha and (tree == tip_tree or tip in sources.split()):
            return sha
    return None


def _task_landed_on(repo: Path, task: str, targets: Sequence[str]) -> str | None:
    """The first target holding a commit that carries ``Mesh-Task: task`` (mesh lands one per
    task), else None."""
    for target in targets:
        found = _git(repo, "log", "--fixed-strings", f"--grep=Mesh-Task: {task}",
                     "--format=%(trailers:key=Mesh-Task,valueonly,unfold)", target, check=False).stdout.split()
        if task in found:
            return target
    return None


def _unlanded(repo: Path, branch: str, targets: Sequence[str]) -> int:
    """How many of ``branch``'s commits are on none of ``targets``."""
    return int(_git(repo, "rev-list", "--count", branch, *(f"^{t}" for t in targets)).stdout.strip() or 0)


def _task_of(branch: str) -> str:
    name = branch.removeprefix("mesh/")
    match = _RUN_SUFFIX.match(name)
    return match.group("task") if match else name


def _status(tracker: Tracker, task_id: str) -> str | None:
    try:
        return tracker.get(task_id)["status"]
    except NotFoundError:
        return None


def clean_plan(tracker: Tracker, repo: Path, *, protected: Sequence[str] = (), onto: str | None = None
               ) -> list[CleanItem]:
    """What ``mesh clean`` would remove and keep in ``repo`` (a repository root), and why."""
    targets = _targets(repo, onto)
    where = ", ".join(targets) or "no base branch"
    entries = _worktree_entries(repo)
    main_tree = entries[0].get("worktree", "") if entries else ""
    by_branch = {e["branch"].removeprefix("refs/heads/"): e.get("worktree", "") for e in entries if e.get("branch")}
    common = Path(_git(repo, "rev-parse", "--git-common-dir").stdout.strip())
    common = common if common.is_absolute() else repo / common
    home = worktree_home(common)
    ours = (home, common / "mesh-worktrees")  # and where an older mesh kept them
    items: list[CleanItem] = []
    branches = _git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/mesh/").stdout.split()
    for branch in branches:
        task = None if branch.startswith(_LAND_PREFIX) else _task_of(branch)
        tree = by_branch.get(branch)
        sha = _git(repo, "rev-parse", "--verify", f"refs/heads/{branch}").stdout.strip()
        item = CleanItem("branch", branch, task, "keep", "", worktree=tree or None, sha=sha)
        status = _status(tracker, task) if task else None
        if task is None:
            item.why = "an integration branch: merge it, then delete it yourself (git branch -d)"
        elif is_protected(branch, protected):
            item.why = "matches a protected branch pattern"
        elif status == "in_progress":
            item.why = f"task {task} is in progress"
        elif tree and (_same_path(tree, main_tree) or not any(_same_path(Path(tree).parent, o) for o in ours)):
            item.why = f"checked out at {tree}, not in mesh's worktree folder"
        elif tree and Path(tree).is_dir() and _git(Path(tree), "status", "--porcelain", check=False).stdout.strip():
            item.why = f"its worktree {tree} has uncommitted changes"
        elif not targets:
            item.why = "no base branch to compare it with (no main, master or checked-out branch)"
        elif _RUN_SUFFIX.match(branch.removeprefix("mesh/")) and status == "closed" \
                and (holder := _task_landed_on(repo, task, targets)):
            item.action = "remove"
            item.why = f"an earlier attempt of task {task}, which is closed with its work landed on {holder}"
        elif (landed := _landed_on(repo, branch, targets)) is None:
            item.why = (f"{_unlanded(repo, branch, targets)} commit(s) on none of {where}: unlanded work"
                        f" (task {task} is {status or 'not in this tracker'})")
        else:
            item.action = "remove"
            item.why = f"task {task} is {status or 'not in this tracker'}; its work is on {landed}"
        items.append(item)
    used = {os.path.realpath(e.get("worktree", "")) for e in entries}
    for folder in sorted(home.iterdir()) if home.is_dir() else []:
        if os.path.realpath(folder) in used:
            continue
        if folder.is_symlink() or not folder.is_dir():
            items.append(CleanItem("folder", str(folder), None, "keep", "not a folder mesh made"))
        elif _status(tracker, folder.name) == "in_progress":
            items.append(CleanItem("folder", str(folder), folder.name, "keep", f"task {folder.name} is in progress"))
        else:
            items.append(CleanItem("folder", str(folder), folder.name, "remove", "no git worktree uses this folder"))
    return items


def clean(tracker: Tracker, repo: Path, *, yes: bool = False, protected: Sequence[str] = (),
          onto: str | None = None) -> list[CleanItem]:
    """``clean_plan``, carried out when ``yes``: each removal is done (``removed``) or kept
    (``kept``, with the reason) when its task was started meanwhile or git refuses it. A
    branch is deleted only if its tip is still the one planned (``git update-ref -d`` with
    the old value): a run that committed on it meanwhile keeps it."""
    items = clean_plan(tracker, repo, protected=protected, onto=onto)
    if not yes:
        return items
    for item in items:
        if item.action != "remove":
            continue
        if item.task and _status(tracker, item.task) == "in_progress":
            item.action, item.why = "kept", f"task {item.task} was started meanwhile"
            continue
        if item.kind == "folder":
            shutil.rmtree(item.name, ignore_errors=True)
            item.action = "removed"
            continue
        steps = ([("worktree", "remove", "--force", item.worktree)] if item.worktree else []) + \
            [("update-ref", "-d", f"refs/heads/{item.name}", item.sha or "")]
        for step in steps:
            done = _git(repo, *step, check=False)
            if done.returncode != 0:
                item.action, item.why = "kept", f"git {step[0]} refused: {done.stderr.strip()[:200]}"
                break
        else:
            item.action = "removed"
    _git(repo, "worktree", "prune", check=False)
    return items
