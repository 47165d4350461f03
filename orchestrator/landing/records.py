"""What a landing leaves behind, read without the lander: the scope's integration branch name,
a landing's result, a task's ``[orch:land]`` checkpoints and the ``Mesh-Run`` commits on a
branch. Read-only views (``mesh status``, the board of ``mesh serve``) import this module, not
``lander``, whose queue, locks, validation and proof cost a view's start for nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.protocol.checkpoint import Checkpoint
from orchestrator.protocol.scope import Scope
from orchestrator.worktree.gitops import _FAKE_TRAILER_RE, _git

__all__ = ["LandResult", "fixed_findings", "integration_branch_for", "land_checkpoints", "landed_commits",
           "task_commit_message"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def integration_branch_for(scope: Scope, tasks: Sequence[Mapping[str, Any]] = (),
                           recorded: str | None = None) -> str:
    """The integration branch of a scope, the same however the scope is named.

    ``recorded``, the branch the scope's work already landed on, wins; else the name comes
    from the scope's ``tasks``: their plan label (``--label``, or the one ``plan:`` label every
    task carries under ``--parent``), else their epic, so ``--parent EPIC`` and ``--label
    plan:x`` over the same tasks find one branch ``mesh/land/<name>``."""
    if recorded:
        return recorded
    shared = set.intersection(*[{lab for lab in task.get("labels") or [] if lab.startswith("plan:")}
                                for task in tasks]) if tasks else set()
    epics = {task.get("parent") for task in tasks}
    epic = scope.parent_epic or (next(iter(epics)) if len(epics) == 1 else None)
    name = scope.plan_label or (sorted(shared)[0] if shared else None) or epic or "scope"
    cleaned = _UNSAFE.sub("-", name).strip(".-") or "scope"
    return f"mesh/land/{cleaned}"


@dataclass
class LandResult:
    """What one landing did. ``result`` is ``landed``, ``conflict`` or ``validation_failed``;
    ``method`` is ``squash`` (nothing landed since the task started: its final tree as one
    commit), ``rebase``, ``merge``, ``already`` (found on the branch) or ``empty``."""

    result: str
    branch: str
    onto: str = ""
    sha: str = ""
    method: str = ""
    detail: str = ""
    validation: list[dict[str, Any]] = field(default_factory=list)
    revalidated: bool = False
    duration_s: float = 0.0
    validation_s: float = 0.0
    # The merged tree had passed these commands before (same view): its results read, not run.
    reused: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def fixed_findings(reviews: Mapping[Any, Mapping[str, Any]]) -> list[str]:
    """One line per finding a review that requested changes raised (``bus.reviews``: cycle ->
    review), in cycle order: what the approved change fixed on its way."""
    out = []
    for cycle in sorted(reviews, key=int):
        review = reviews[cycle]
        if review.get("decision") == "approve":
            continue
        for found in review.get("findings") or []:
            out.append(f"cycle {cycle}: {found.get('finding_id') or '?'} [{found.get('severity') or '?'}/"
                       f"{found.get('label') or '?'}] {found.get('issue') or ''}".strip())
    return out


def task_commit_message(task: Mapping[str, Any], run_id: str, *, review_cycles: int | None = None,
                        findings: Sequence[str] = ()) -> str:
    """The message of a task's one commit on an integration branch, trailers aside: the task's
    title, then its id, run, review cycles and the findings fixed. A line of the title that
    would pose as a ``Mesh-`` trailer is dropped (only mesh writes them)."""
    title = " ".join(line for line in str(task.get("title") or "").splitlines()
                     if not _FAKE_TRAILER_RE.match(line))
    title = "".join(ch for ch in title if ord(ch) >= 32).strip() or f"mesh: {task['id']}"
    body = [f"Task {task['id']}, run {run_id}"
            + (f", {review_cycles} review cycle(s)" if review_cycles is not None else "") + "."]
    if findings:
        body += ["", "Findings fixed:"] + ["- " + "".join(ch for ch in f if ord(ch) >= 32)[:300]
                                           for f in findings if not _FAKE_TRAILER_RE.match(f)]
    return title + "\n\n" + "\n".join(body)


def land_checkpoints(checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """The ``[orch:land]`` checkpoints among a task's checkpoints, in order."""
    return [cp for cp in checkpoints if cp.kind == "land"]


def landed_commits(repo: Path, branch: str, *, run_id: str | None = None) -> dict[str, list[str]]:
    """``Mesh-Run`` id -> shas (oldest first) of the commits on ``branch`` that carry one.

    With ``run_id`` only that run's: git's own message search picks the candidates, so a long
    history is not formatted commit by commit; their trailers still decide."""
    ref = f"refs/heads/{branch}"
    narrow = ["--fixed-strings", f"--grep=Mesh-Run: {run_id}"] if run_id else []
    out = _git(repo, "log", "--reverse", *narrow, "--format=%H%x00%(trailers:only,unfold)%x1e", ref,
               check=False).stdout
    runs: dict[str, list[str]] = {}
    for record in out.split("\x1e"):
        record = record.strip("\n")
        if not record:
            continue
        sha, _, trailers = record.partition("\x00")
        for line in trailers.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() == "mesh-run":
                runs.setdefault(value.strip(), []).append(sha.strip())
                break
    return {key: shas for key, shas in runs.items() if key == run_id} if run_id else runs


def _key(branch: str) -> str:
    return f"mesh.land.base:{branch}"


def base_branch(tracker: Any, repo: Path, branch: str, configured: str | None = None) -> str | None:
    """The base ``branch`` follows: ``configured`` (``drain.base``), else the one recorded for it,
    else the branch checked out in ``repo`` now (recorded, so later runs follow the same one);
    None when none is known (a detached HEAD)."""
    recorded = tracker.get_config(_key(branch))
    if configured:
        if recorded != configured:
            tracker.set_config(_key(branch), configured)
        return configured
    if recorded:
        return recorded
    current = _git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    if not current or current == branch:
        return None
    tracker.set_config(_key(branch), current)
    return current
